"""The report page's hardware side: the pc2region map's region paths, the per-PC table (columnar, in
map order, hardware columns aligned by PC) and the join's per-region numbers attached to the trace's
regions; SASS text and source files read from a cubin.

Invariants, and the tests that guard them:
- per-PC numbers belong to code paths: groups that run one region share its numbers and say so
  (``shared_by``;
  tests/unit/host_decode/reports/test_report_timeline.py::test_samples_shared_by_groups_running_the_same_code);
- per-PC samples are where the join counts them (drain samples moved to the PC they belong to, by the
  join's own function), so per-PC sums equal the per-region table
  (tests/unit/host_decode/reports/test_report.py::test_hardware_data_matches_join,
  ::test_sampling_only_and_counts_only_data);
- hardware data that does not fit the map is refused
  (tests/unit/host_decode/reports/test_report.py::test_mismatched_hardware_data_is_refused).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from host_decode.core.model import Trace


def path_rows(trace: Trace, region_map: Any) -> list[dict]:
    """One row per region path of the map (named with the trace's event names); special buckets too."""
    events = {**region_map.events, **trace.names.events}
    counts = np.bincount(region_map.region, minlength=len(region_map.paths))
    rows = []
    for i, (path, stack) in enumerate(zip(region_map.paths, region_map.stacks)):
        name = path if stack is None else "/".join(events.get(e, f"event_{e}") for e in stack)
        rows.append({"index": i, "path": name, "stack": stack, "special": stack is None,
                     "instructions": int(counts[i]),
                     "marker_instructions": int(region_map.is_marker[region_map.region == i].sum())})
    return rows


def hardware_data(trace: Trace, result: Any) -> dict:
    from host_decode.hardware.join import attach_to_trace

    payload = result.to_json()
    holder = types.SimpleNamespace(names=trace.names, meta={})  # attach_to_trace only writes meta
    payload["by_event"] = attach_to_trace(holder, result)["by_event"]
    return payload


def attach_hardware_to_regions(regions: list[dict], hw: dict) -> None:
    """Each trace region gets the inclusive hardware numbers of the paths that end in its event.
    Per-PC samples belong to code, not to warp groups: when groups run the same region (same event
    id, same instructions), each of their rows carries the same numbers, and ``shared_by`` names the
    groups, so the page says so instead of showing one code path's share as if each group had it."""
    groups_of_event: dict[int, list[str]] = {}
    for row in regions:
        groups_of_event.setdefault(row["event"], []).append(row["group_name"])
    for row in regions:
        agg = hw["by_event"].get(str(row["event"]))
        if not agg:
            continue
        stalls = agg["stalls"]
        total = sum(stalls.values())
        top = sorted(((r, v / total) for r, v in stalls.items() if v), key=lambda kv: -kv[1])[:3] if total else []
        row["hw"] = {"samples": agg["samples"], "samples_share": agg["samples_share"],
                     "inst_executed": agg["inst_executed"], "top_stalls": top, "paths": agg["paths"],
                     "shared_by": groups_of_event[row["event"]] if len(groups_of_event[row["event"]]) > 1 else None}


def pc_columns(region_map: Any, pc_table: Any, sass_text: dict[int, str] | None,
               pc_files: dict[int, str | None] | None = None) -> dict:
    """Per-PC table, columnar, in map order. Hardware columns are aligned by PC; `samples_attributed`
    is where the join counts each PC's samples (after moving drain samples to the previous PC).
    `file` / `files`: the source file of each PC's line (index into `files`, -1 unknown) when the map
    or the listing names it; a kernel's lines come from several files (inlined helpers)."""
    n = region_map.pc.size
    cols: dict[str, Any] = {
        "pc": region_map.pc.tolist(),
        "opcode": list(region_map.opcode),
        "path": region_map.region.tolist(),
        "line": region_map.line.tolist(),
        "marker": region_map.is_marker.astype(int).tolist(),
    }
    if sass_text:
        cols["text"] = [sass_text.get(int(p), op) for p, op in zip(region_map.pc, region_map.opcode)]
    map_files = getattr(region_map, "file", None)  # per-PC file names, where the map carries them
    if pc_files is None and map_files is not None and len(map_files) == n:
        pc_files = {int(p): f for p, f in zip(region_map.pc, map_files)}
    if pc_files:
        names = [pc_files.get(int(p)) for p in region_map.pc]
        cols["files"] = sorted({f for f in names if f})
        cols["file"] = [cols["files"].index(f) if f else -1 for f in names]
    if pc_table is None:
        cols["metrics"], cols["stalls"] = {}, {}
        return cols
    pos = np.searchsorted(region_map.pc, pc_table.pc)
    clipped = np.minimum(pos, max(n - 1, 0))
    in_map = (pos < n) & (region_map.pc[clipped] == pc_table.pc)
    cols["not_in_map"] = int((~in_map).sum())

    def aligned(values: np.ndarray) -> np.ndarray:
        return np.bincount(clipped[in_map], weights=values[in_map], minlength=n)

    metrics = {name: aligned(v) for name, v in pc_table.counters.items()}
    stalls = {r: aligned(v) for r, v in pc_table.stalls.items() if v.any()}
    if "samples" not in metrics and stalls:
        metrics["samples"] = np.sum(list(stalls.values()), axis=0)
    moved = _attributed(region_map, metrics, stalls)
    if moved is not None:
        metrics["samples_attributed"], stalls = moved
    cols["stalls_attributed"] = moved is not None
    cols["metrics"] = {k: _compact(v) for k, v in metrics.items()}
    cols["stalls"] = {r: _compact(v) for r, v in sorted(stalls.items())}
    return cols


def _attributed(region_map: Any, metrics: dict, stalls: dict):
    """(samples, stalls) per PC after the join's move of drain / dead-PC samples to the PC they
    belong to (the join's own function, so per-PC sums equal the per-region table), or None when
    this host_decode.hardware.join has no such function."""
    from host_decode.hardware import join as join_mod

    mover = getattr(join_mod, "move_samples", None) or getattr(join_mod, "_move_samples", None)
    if mover is None or "samples" not in metrics:
        return None
    on_map = {"samples": metrics["samples"].copy(), **{f"stall_{r}": v.copy() for r, v in stalls.items()}}
    if "inst_executed" in metrics:
        on_map["inst_executed"] = metrics["inst_executed"].copy()
    mover(region_map, on_map)
    return on_map["samples"], {r: on_map[f"stall_{r}"] for r in stalls}


def _compact(values: np.ndarray) -> list:
    return [int(v) if float(v).is_integer() else round(float(v), 4) for v in values]


def read_sass_listing(cubin: bytes, kernel: str | None = None) -> tuple[dict[int, str], dict[int, str | None]]:
    """(pc -> instruction text, pc -> source file of its line info) of one kernel of a cubin
    (nvdisasm via host_decode.hardware.sass)."""
    from host_decode.hardware import sass

    fn = sass.select_function(sass.parse_listing(sass.disassemble(cubin)), kernel)
    return {ins.pc: ins.text for ins in fn.instructions}, {ins.pc: ins.file for ins in fn.instructions}


def read_sass_text(cubin: bytes, kernel: str | None = None) -> dict[int, str]:
    """pc -> instruction text of one kernel of a cubin."""
    return read_sass_listing(cubin, kernel)[0]
