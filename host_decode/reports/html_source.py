"""The report page's Code view: the kernel's source text, each line coloured by the regions of its
instructions (a pc2region map's line info) or, without a map, by the marker calls found in the text,
with each line's cost and time.

Invariants, and the tests that guard them:
- with a map, lines get the region paths and cost of the PCs of the file shown (the longest common path
  tail wins over a bare file name; tests/unit/host_decode/reports/test_report.py::test_source_lines_coloured_from_map,
  ::test_source_of_another_file_is_not_coloured_by_the_map);
- without a map, regions come from the marker calls: `with profile_region(...)` blocks by indentation,
  `begin` .. `end` by order (tests/unit/host_decode/reports/test_report.py::test_marker_lines_without_map), and each
  region-opening call's line carries that region's timeline totals
  (tests/unit/host_decode/reports/test_report_timeline.py::test_marker_line_totals_without_map);
- instructions the DSL gives a decorator or `def` line are attributed by region path
  (tests/unit/host_decode/reports/test_report_timeline.py::test_def_line_attribution).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from host_decode.core.model import Trace

MAX_SOURCE_LINES = 20_000


def source_data(text: str, path: str | None, pcs: dict | None, trace: Trace) -> dict:
    lines = text.splitlines()[:MAX_SOURCE_LINES]
    out: dict[str, Any] = {"path": path, "lines": lines, "truncated": len(text.splitlines()) > MAX_SOURCE_LINES}
    mine = _pcs_of_source(pcs, path) if pcs is not None else None
    if mine is not None and any(pcs["line"][i] >= 1 for i in mine):
        out["origin"] = "map"
        out["pcs_of_file"] = mine if "file" in pcs else None  # None: every PC (the map names no files)
        if "file" not in pcs:
            out["file_note"] = ("The map carries no file names: line numbers of inlined helpers from other files "
                                "are shown on this file's lines too. Pass --cubin to read the files from the listing.")
        line_paths: dict[int, set] = {}
        for i in mine:
            line, p = pcs["line"][i], pcs["path"][i]
            if line >= 1:
                line_paths.setdefault(line, set()).add(p)
        out["line_paths"] = {str(k): sorted(v) for k, v in sorted(line_paths.items())}
        cost_col = "samples_attributed" if "samples_attributed" in pcs.get("metrics", {}) else (
            "inst_executed" if "inst_executed" in pcs.get("metrics", {}) else None)
        out["cost_metric"] = cost_col
        out["line_cost"] = _line_cost(pcs, cost_col, mine) if cost_col else {}
        out["lines_beyond_file"] = sorted(k for k in line_paths if k > len(lines))[:20]
    else:
        if pcs is not None and "files" in pcs:
            out["file_note"] = (f"No instruction of the map has line info in {Path(path or '').name!r} "
                                f"(the listing names: {', '.join(pcs['files'][:5]) or 'no files'}); "
                                "colours come from the marker calls in the text.")
        out["origin"] = "markers"
        out["line_cost"], out["cost_metric"] = {}, None
    # the marker calls' nesting is shown too (a stripe beside the line numbers): CuTe DSL line info
    # is sparse, and the calls say where each region opens and closes in the text
    out.update(marker_lines(lines, trace.names.events))
    out["line_time"] = marker_line_time(out["marker_calls"], trace)
    if out["origin"] == "map":
        out["def_lines"] = def_line_attribution(lines, out["line_paths"], pcs, mine, out["line_cost"])
    return out


def marker_line_time(calls: list[dict], trace: Trace) -> dict[str, dict]:
    """The line of each region-opening marker call -> that region's timeline totals (summed over
    groups): what the Code view shows on the line when there is no map to put instructions there."""
    sp = trace.spans
    dur = sp["end_ns"] - sp["start_ns"]
    total = np.bincount(sp["event"], weights=dur) if sp.size else np.zeros(0)
    count = np.bincount(sp["event"]) if sp.size else np.zeros(0, np.int64)
    out = {}
    for c in calls:
        e = c["event"]
        if c["call"] == "end" or e >= total.size or count[e] == 0:
            continue
        out[str(c["line"])] = {"event": e, "total_ns": int(total[e]), "count": int(count[e])}
    return out


_DEF_LINE_RE = re.compile(r"^\s*(@\s*cute\.(jit|kernel)\b|def\s)")


def def_line_attribution(lines: list[str], line_paths: dict, pcs: dict, rows: list[int], line_cost: dict) -> dict:
    """Lines that are a `@cute.jit` / `@cute.kernel` decorator or a `def`, yet own instructions: the
    DSL gives code it inlines without a location of its own (argument unpacking, library helpers, the
    jitted function's prologue) the location of the function itself. The map still knows each such
    instruction's region: per line, instructions and cost by region path, so the page can attribute
    them (tests/unit/host_decode/reports/test_report_timeline.py::test_def_line_attribution)."""
    out = {}
    wanted = {int(k) for k in line_paths if 1 <= int(k) <= len(lines) and _DEF_LINE_RE.match(lines[int(k) - 1])}
    if not wanted:
        return out
    metric = "samples_attributed" if "samples_attributed" in pcs.get("metrics", {}) else (
        "inst_executed" if "inst_executed" in pcs.get("metrics", {}) else None)
    for i in rows:
        line = pcs["line"][i]
        if line not in wanted:
            continue
        entry = out.setdefault(str(line), {"by_path": {}, "metric": metric})
        slot = entry["by_path"].setdefault(str(pcs["path"][i]), [0, 0.0])
        slot[0] += 1
        if metric:
            slot[1] += float(pcs["metrics"][metric][i])
    return out


def _line_cost(pcs: dict, metric: str, rows: list[int]) -> dict[str, float]:
    cost: dict[int, float] = {}
    values = pcs["metrics"][metric]
    for i in rows:
        line = pcs["line"][i]
        if line >= 1:
            cost[line] = cost.get(line, 0.0) + float(values[i])
    return {str(k): v for k, v in sorted(cost.items())}


def _pcs_of_source(pcs: dict, path: str | None) -> list[int]:
    """Rows of the per-PC table whose line belongs to the source file shown: same file name when the
    PCs carry file names (the longest common path tail wins over a bare name), else every row."""
    n = len(pcs["pc"])
    if "file" not in pcs or not path:
        return list(range(n))
    wanted = Path(path).resolve().parts
    def tail(f: str) -> int:  # how many trailing path parts agree
        k, parts = 0, Path(f).parts
        while k < min(len(parts), len(wanted)) and parts[-1 - k] == wanted[-1 - k]:
            k += 1
        return k
    scores = [tail(f) for f in pcs["files"]]
    best = max(scores, default=0)
    if best == 0:
        return []
    keep = {i for i, s in enumerate(scores) if s == best}
    return [i for i in range(n) if pcs["file"][i] in keep]


_MARKER_CALL_RE = re.compile(r"""\b(profile_region|region|begin|end|mark)\s*\((?P<args>[^)]*)\)""")
_QUOTED_RE = re.compile(r"""["']([^"']+)["']""")


def marker_lines(lines: list[str], events: dict[int, str]) -> dict:
    """Without a map: regions from the marker calls in the text (`with profile_region(prof, "x")` blocks
    by indentation, `begin("x")` .. `end("x")` by order). Lines get region *names* (event ids);
    `marker_lines` lists the calls found."""
    by_name = {v: k for k, v in events.items()}
    open_regions: list[tuple[int, int]] = []  # (event id, indent of a `with` line or -1 for begin/end)
    line_events: dict[int, list[int]] = {}
    found = []
    for no, raw in enumerate(lines, start=1):
        indent = len(raw) - len(raw.lstrip())
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            open_regions = [(e, ind) for e, ind in open_regions if ind < 0 or indent > ind]
        call = _MARKER_CALL_RE.search(raw)
        name = None
        if call:
            q = [m for m in _QUOTED_RE.findall(call.group("args")) if m in by_name]
            name = q[0] if q else None
        if name is not None:
            eid, kind = by_name[name], call.group(1)
            found.append({"line": no, "event": eid, "call": kind})
            if kind == "end":
                line_events[no] = [e for e, _ in open_regions]
                for k in range(len(open_regions) - 1, -1, -1):
                    if open_regions[k][0] == eid:
                        del open_regions[k]
                        break
                continue
            if kind in ("begin", "profile_region", "region"):
                ind = indent if stripped.startswith("with ") else -1
                open_regions.append((eid, ind))
        if open_regions and stripped:
            line_events[no] = [e for e, _ in open_regions]
        elif name is not None:
            line_events[no] = [by_name[name]]
    return {"line_events": {str(k): v for k, v in line_events.items()}, "marker_calls": found}


