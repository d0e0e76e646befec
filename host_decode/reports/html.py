"""`ikp report`: one self-contained, offline HTML page that explores one kernel.

The page is data + a small viewer. Everything is computed here in Python (numpy) and embedded as one
JSON blob (``<script type="application/json" id="ikp-data">``); the inline script only lays tables
out, draws charts as SVG and follows clicks. Nothing is fetched at view time: no CDN, no server.

Inputs, all optional but the trace:
* the trace (decoded capture): kernel facts, loss report, per-region percentiles and histograms,
  bubbles / overlap / imbalance (host_decode.analysis.regions);
* a pc2region map (host_decode.hardware.pc2region.RegionMap): the region path, opcode and source line of every
  SASS PC; with SASS text when a listing is given (``sass_text``: pc -> instruction text);
* per-PC hardware data (host_decode.hardware.adapters.PcTable from ncu / CUPTI / NVBit), joined to the map by
  host_decode.hardware.join: per-region instruction counts, stall reasons, samples;
* the kernel's source text: each line coloured by the regions of its instructions (map line info) or,
  without a map, by the marker calls found in the text.

Data schema (``format`` = REPORT_FORMAT) -- what tests/test_report*.py read back:
  kernel {facts}, loss {...}, regions [per (group, event) row: stats, histogram (hist_log: geometric
  bins), exclusive_ns, parent_key, hw {.., shared_by} ], analysis {...} | null, sm [per-SM rows],
  hardware {join summary} | null, paths [per region path], pcs {columnar} | null,
  source {path, lines, line_paths, line_cost, origin, line_time, def_lines} | null,
  missing {view: how to collect}, and one key per registered extra view (REPORT_VIEWS: "timeline",
  host_decode.reports.timeline).

Invariants, and the tests that guard them:
- a region's exclusive time is its time minus the spans directly inside it (span_parents), so the
  exclusive times of one group add up to at most its lane time
  (tests/test_report_timeline.py::test_nesting_and_exclusive_time, ::test_region_rows_exclusive_and_parent);
- per-PC numbers belong to code paths: groups that run one region share its numbers and say so
  (::test_samples_shared_by_groups_running_the_same_code);
- the page fits 1600x1000 in every view with nothing cut (tests/test_report_layout_browser.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import json
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.arrays import CHUNK_ROWS, distinct_small, positions_of, runs_of_whole_lanes, span_durations
from host_decode.core.jsonable import to_jsonable
from host_decode.core.model import Trace

REPORT_FORMAT = "ikp-report-v1"
DATA_ELEMENT_ID = "ikp-data"
HIST_BINS = 24
MAX_LOSS_LANES = 50
MAX_SOURCE_LINES = 20_000

# Thresholds of the "what stands out" flags (README, "ikp report", explains them).
TAIL_RATIO_FLAG = 2.0  # p99 / p50 of a region's durations
BLOCK_IMBALANCE_FLAG = 1.5  # max / mean over blocks of a region's total time per block
LOG_BINS_RATIO = 8  # max / min duration above which histogram bins grow geometrically

HOW_TO = {
    "map": (
        "No pc2region map: build one from the kernel's cubin with `ikp report CAPTURE --cubin kernel.cubin` "
        "(needs nvdisasm: pip install nvidia-cuda-nvdisasm) or pass a saved map with --map map.json "
        "(host_decode.hardware.pc2region.build_map(...).save('map.json')). CuTe DSL: compile with "
        "options=\"--keep-cubin\" and use pc2region.map_compiled(compiled)."
    ),
    "hardware": (
        "No per-PC hardware data. On the GPU machine: `ncu --section SourceCounters --import-source yes -f -o rep "
        "<cmd>` then `ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv` and pass "
        "--ncu sass.csv (with --map or --cubin); or CUPTI PC sampling (host_decode.hardware.adapters.cupti) -> --cupti "
        "cupti.json."
    ),
    "source": "No source: pass --source kernel.py (the file the kernel was compiled from).",
    "analysis": ("host_decode.analysis.regions is not available in this install: bubbles, overlap and imbalance "
                 "are left out."),
    "sm": (
        "No SM ids: the capture has no finalize records with SM ids (a lane that never called finalize() or "
        "a buffer written by another tool). Call prof.finalize() at the end of the kernel."
    ),
}


# ================================================================================================
# Public API
# ================================================================================================


def build_report_data(
    trace: Trace,
    region_map: Any = None,
    pc_table: Any = None,
    source_text: str | None = None,
    source_path: str | None = None,
    sass_text: dict[int, str] | None = None,
    pc_files: dict[int, str | None] | None = None,
    capture_path: str | None = None,
    force_join: bool = False,
    timeline_blocks: list[int] | None = None,
) -> dict:
    """Everything the page shows, as JSON-ready Python data (see the module docstring).
    `timeline_blocks`: blocks the Timeline tab draws (default: the fastest, median and slowest)."""
    missing: dict[str, str] = {}  # view key -> what is missing and how to collect it
    data: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "kernel": kernel_facts(trace, capture_path),
        "loss": loss_data(trace),
        "regions": region_rows(trace),
        "groups": {str(g): trace.names.group(g) for g in _groups_with_spans(trace).tolist()},
    }
    data.update(_timeline_analysis(trace, missing))
    launch = (data["analysis"] or {}).get("launch", {})
    data["kernel"]["launch_ns"] = launch.get("launch_ns", trace.end_ns - trace.start_ns)
    data.update(_hardware(trace, region_map, pc_table, sass_text, pc_files, force_join, missing))
    if data["hardware"] is not None:
        _attach_hardware_to_regions(data["regions"], data["hardware"])
    for row in data["regions"]:
        row["stands_out"] = stands_out(row)
    if source_text is None:
        missing["source"] = HOW_TO["source"]
        data["source"] = None
    else:
        data["source"] = source_data(source_text, source_path, data["pcs"], trace)
    options = {"timeline_blocks": timeline_blocks}
    for view in REPORT_VIEWS:
        data[view.key] = view.build(trace, options)
    data["missing"] = missing
    return to_jsonable(data)


def _groups_with_spans(trace: Trace) -> np.ndarray:
    return _distinct_ids(trace.spans["group"])


def _distinct_ids(column: np.ndarray) -> np.ndarray:
    """np.unique of a span table's id column, without its sorted copy when the ids are non-negative."""
    return distinct_small(column) if column.size and int(column.min()) >= 0 else np.unique(column)


def _timeline_analysis(trace: Trace, missing: dict) -> dict:
    analysis_mod = _analysis_module()
    if analysis_mod is None:
        missing["analysis"] = HOW_TO["analysis"]
        return {"analysis": None, "sm": []}
    analysis, sm = analysis_data(trace, analysis_mod)
    if not sm:
        missing["sm"] = HOW_TO["sm"]
    return {"analysis": analysis, "sm": sm}


def _hardware(trace, region_map, pc_table, sass_text, pc_files, force_join, missing) -> dict:
    """paths / hardware / pcs parts; per-PC data is joined to the map (host_decode.hardware.join) and each trace
    region gets the inclusive numbers of its paths."""
    if region_map is None:
        missing["map"] = HOW_TO["map"]
        missing["hardware"] = (HOW_TO["hardware"] if pc_table is None else
                               "Per-PC data was given without a pc2region map (--map or --cubin): "
                               "it cannot be split by region.")
        return {"paths": [], "hardware": None, "pcs": None}
    out = {"paths": path_rows(trace, region_map), "hardware": None,
           "pcs": pc_columns(region_map, pc_table, sass_text, pc_files)}
    if pc_table is None:
        missing["hardware"] = HOW_TO["hardware"]
        return out
    from host_decode.hardware.join import join

    result = join(region_map, pc_table, force=force_join).renamed({**region_map.events, **trace.names.events})
    out["hardware"] = hardware_data(trace, result)
    return out


def pipeline_waits_view(trace: Trace) -> dict | None:
    """The "Waits" view's data (assets/waits.js), None when the capture has no pipeline metadata."""
    from host_decode.analysis.waits import view_data

    return view_data(trace)


def render_html(data: dict) -> str:
    """The page: the template with the data blob, style and script inlined."""
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False)
    # "<" only occurs inside JSON strings; as \u003c no "</script>" or "<!--" from the data can end or
    # confuse the script element, and JSON.parse reads the same string
    blob = blob.replace("<", "\\u003c")
    title = f"ikp report: {data.get('kernel', {}).get('name') or 'kernel'}"
    css, js = (_asset(name) for name in ("report.css", "report.js"))
    # each extra view's script runs after the page's and adds its tab (window.__ikp.addView)
    js += "".join(f"\n{_asset(view.asset)}" for view in REPORT_VIEWS)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{html.escape(title)}</title>\n<style>\n{css}\n</style></head>\n<body>\n"
        f"<script type=\"application/json\" id=\"{DATA_ELEMENT_ID}\">{blob}</script>\n"
        "<div id=\"app\"><noscript>This report needs JavaScript (inline, no network).</noscript></div>\n"
        f"<script>\n{js}\n</script>\n</body></html>\n"
    )


def write_report(path: str | Path, trace: Trace, **kwargs: Any) -> Path:
    """Build the data (kwargs as build_report_data) and write the page; returns the path."""
    path = Path(path)
    page = render_html(build_report_data(trace, **kwargs))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def _asset(name: str) -> str:
    path = Path(__file__).with_name("assets") / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the page's inline {name} is missing (host_decode was installed without "
                                "its package data: assets/*)")
    return path.read_text(encoding="utf-8")


_BLOB_RE = re.compile(
    r'<script type="application/json" id="' + DATA_ELEMENT_ID + r'">(.*?)</script>', re.DOTALL
)


def extract_data(page: str) -> dict:
    """The JSON blob of a written page (for tests and tools)."""
    m = _BLOB_RE.search(page)
    if not m:
        raise ValueError(f"no <script id={DATA_ELEMENT_ID!r}> data element in the page")
    return json.loads(m.group(1))


# ================================================================================================
# Views beyond the four built-in tabs: a registry
# ================================================================================================


@dataclasses.dataclass(frozen=True)
class ReportView:
    """An extra tab of the page: ``build(trace, options)`` (options: build_report_data's view options)
    gives the JSON-ready data the page embeds under ``key`` (None: nothing to show), and ``asset`` (a file
    in reports/assets/) is the script that draws it; the script registers its tab with
    ``window.__ikp.addView(key, label, render)`` (tests/test_report_timeline.py::
    test_view_registry_embeds_data_and_script)."""

    key: str
    asset: str
    build: Callable[[Trace, dict], Any]


REPORT_VIEWS: list[ReportView] = []


def register_view(view: ReportView) -> None:
    """Add (or replace, by key) an extra tab; views keep the order they were first registered in."""
    for i, v in enumerate(REPORT_VIEWS):
        if v.key == view.key:
            REPORT_VIEWS[i] = view
            return
    REPORT_VIEWS.append(view)


# ================================================================================================
# Timeline side
# ================================================================================================


def kernel_facts(trace: Trace, capture_path: str | None) -> dict:
    meta = trace.meta or {}
    facts = {
        "name": meta.get("kernel"),
        "capture": capture_path,
        "num_blocks": trace.num_blocks,
        "num_groups": trace.num_groups,
        "lanes_with_records": int(trace.lanes.size),
        "write_stride": trace.write_stride,
        "absolute_time": bool(trace.absolute),
        "spans": int(trace.spans.size),
        "instants": int(trace.instants.size),
        "regions": int(_distinct_ids(trace.spans["event"]).size),
        "sms_seen": int(np.unique(trace.lanes["sm"][trace.lanes["sm"] >= 0]).size),
    }
    skip = {"events", "groups", "format", "kernel"}
    facts["meta"] = {k: v for k, v in meta.items() if k not in skip and isinstance(v, (str, int, float, bool))}
    from host_decode.load.ring import describe_ring, ring_counts

    facts["ring"] = ring_counts(trace)  # a capture window's launches seen / recorded / lost, strays
    if facts["ring"] is not None:  # the Kernel card shows meta's scalars: the same line as `ikp stats`
        facts["meta"]["ring"] = describe_ring(facts["ring"])
    return facts


def loss_data(trace: Trace) -> dict:
    out = trace.loss.to_json()
    lanes = out.pop("lanes_with_losses", [])
    out["lanes_with_losses"] = lanes[:MAX_LOSS_LANES]
    out["lanes_with_losses_count"] = len(lanes)  # to_json caps at 1000 itself
    out["lost"] = int(trace.loss.lost)
    return out


def region_rows(trace: Trace) -> list[dict]:
    """Per (group, event): stats.region_summary + histogram + share of the group's lane time + spread
    across blocks. Temporaries stay at one row's spans (or one run of lanes): of the whole table only
    the one-byte row id of each span is held (with few rows)."""
    from host_decode.analysis.stats import FEW_KEYS, pair_ids, region_summary, summary_rows

    summary = region_summary(trace)
    rows = summary_rows(summary, trace.names)
    sp = trace.spans
    if not sp.size:
        return rows
    ids = pair_ids(sp["group"], sp["event"])[0]  # row of each span (the summary's rows, in its order)
    exclusive, parent_event = _nesting_by_row(sp, ids, summary.size)
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    window_by_group = {
        int(g): int((lanes["last_ns"] - lanes["first_ns"])[lanes["group"] == g].sum())
        for g in np.unique(lanes["group"])
    }
    by_row = starts = None
    if summary.size > FEW_KEYS:  # many rows: one stable sort by row instead of a scan per row
        by_row = np.argsort(ids, kind="stable")
        starts = np.searchsorted(ids[by_row], np.arange(summary.size + 1))
    for k, (row, r) in enumerate(zip(rows, summary)):
        g, e = int(r["group"]), int(r["event"])
        members = positions_of(ids, k) if by_row is None else by_row[starts[k] : starts[k + 1]]
        dur = span_durations(sp, members)
        counts, edges, geometric = duration_histogram(dur)
        row["hist_counts"] = counts
        row["hist_edges_ns"] = edges
        row["hist_log"] = geometric
        window = window_by_group.get(g, 0)
        row["share_of_group_time"] = r["total_ns"] / window if window else None
        row["tail_ratio"] = float(r["p99_ns"] / r["p50_ns"]) if r["p50_ns"] > 0 else None
        per_block = _sum_by_block(sp, members, dur)
        row["blocks"] = int(per_block.size)
        row["block_imbalance"] = float(per_block.max() / per_block.mean()) if per_block.size else None
        row["key"] = f"{g}:{e}"
        row["exclusive_ns"] = int(exclusive[k])
        # the region this one runs inside most often (its row is indented under that one)
        row["parent_key"] = f"{g}:{int(parent_event[k])}" if parent_event[k] >= 0 else None
        row["exclusive_share_of_group_time"] = row["exclusive_ns"] / window if window else None
    return rows


def _sum_by_block(sp: np.ndarray, members: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The non-zero per-block sums of `dur` (the durations of spans `members`), in block order, a chunk
    at a time (exact: integer sums below 2**53)."""
    total = np.zeros(0)
    for i in range(0, members.size, CHUNK_ROWS):
        part = np.bincount(sp["block"][members[i : i + CHUNK_ROWS]], weights=dur[i : i + CHUNK_ROWS])
        if part.size > total.size:
            part[: total.size] += total
            total = part
        else:
            total[: part.size] += part
    return total[total > 0]


def _nesting_by_row(sp: np.ndarray, ids: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the sum of its spans' exclusive_durations, and the event its spans run inside most often
    (ties: the smaller id; -1, no parent, before any event). Both are found run of whole lanes by run (a
    span's parent is in its lane), so no parent index of the whole table is held; exact: each run's
    per-row sums are integers below 2**53."""
    exclusive = np.zeros(rows, np.int64)
    codes, counts = [], []  # per run: distinct (row, parent event + 1) codes and how many spans have each
    for part in _lane_runs(sp):
        spans = sp[part]
        parent = span_parents(spans)
        exclusive += np.rint(np.bincount(ids[part], weights=exclusive_durations(spans, parent),
                                         minlength=rows)).astype(np.int64)
        up = np.where(parent >= 0, spans["event"][np.maximum(parent, 0)], -1).astype(np.int64)
        code, count = np.unique(ids[part] * np.int64(wire.MAX_EVENT_ID + 2) + (up + 1), return_counts=True)
        codes.append(code)
        counts.append(count)
    code, where = np.unique(np.concatenate(codes), return_inverse=True)
    count = np.bincount(where, weights=np.concatenate(counts))
    row, up = np.divmod(code, wire.MAX_EVENT_ID + 2)
    best = np.lexsort((up, -count, row))  # per row, the most spans first, then the smaller event
    first = best[np.r_[True, row[best][1:] != row[best][:-1]]]
    parent_event = np.full(rows, -1, np.int64)
    parent_event[row[first]] = up[first] - 1
    return exclusive, parent_event


LANE_RUN_SPANS = 1 << 18  # spans per run of whole lanes in the report's per-span passes


def _lane_runs(sp: np.ndarray):
    """Slices of the span table holding whole lanes (about LANE_RUN_SPANS spans each) when it is in lane
    order (decoded traces are), else the whole table as one slice."""
    lane = sp["lane"]
    if lane.size and not bool((lane[1:] >= lane[:-1]).all()):
        return iter([slice(0, lane.size)])
    return runs_of_whole_lanes(lane, LANE_RUN_SPANS)


def span_parents(sp: np.ndarray) -> np.ndarray:
    """Index of each span's enclosing span (-1 for none): the last span of the same lane, in program
    order, one level shallower (``depth`` counts regions open when a span began). Spans are sorted by
    lane, then begin in program order (core.model): then run of whole lanes by run;
    tests/test_report_timeline.py::test_nesting_and_exclusive_time."""
    n = sp.size
    index = np.int32 if n < 1 << 31 else np.int64  # indices, half the memory for any real capture
    parent = np.full(n, -1, index)
    if n == 0:
        return parent
    lane = sp["lane"]
    if bool((lane[1:] >= lane[:-1]).all()):  # decoded traces: already in lane order
        for part in _lane_runs(sp):
            found = _parents_in_lane_order(lane[part], sp["depth"][part], index)
            found[found >= 0] += part.start
            parent[part] = found
        return parent
    order = np.argsort(lane, kind="stable").astype(index)
    found = _parents_in_lane_order(lane[order], sp["depth"][order], index)
    ok = found >= 0
    parent[order[ok]] = order[found[ok]]
    return parent


def _parents_in_lane_order(lane: np.ndarray, depth: np.ndarray, index) -> np.ndarray:
    """span_parents of spans already in lane order (positions in these arrays)."""
    parent = np.full(lane.size, -1, index)
    for d in range(1, int(depth.max()) + 1 if depth.size else 1):
        kids, cands = np.flatnonzero(depth == d).astype(index), np.flatnonzero(depth == d - 1).astype(index)
        if not kids.size or not cands.size:
            continue
        k = np.searchsorted(cands, kids) - 1
        ok = k >= 0
        found = cands[np.maximum(k, 0)]
        ok &= lane[found] == lane[kids]
        parent[kids[ok]] = found[ok]
    return parent


def exclusive_durations(sp: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each span's duration minus the time of the spans directly inside it (never below 0: regions of
    other ids that overlap without nesting can cover more than their parent)."""
    dur = (sp["end_ns"] - sp["start_ns"]).astype(np.int64)
    inner = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=sp.size).astype(np.int64)
    return np.maximum(dur - inner, 0)


def duration_histogram(d: np.ndarray, bins: int = HIST_BINS, step: int = wire.TIMER_STEP_NS) -> tuple[list, list, bool]:
    """Counts, edges (ns) and whether the bins grow geometrically. Durations read off %globaltimer are
    multiples of its step (32 ns): bins are then whole steps centred on the values, so no bin is empty
    only because no multiple of 32 fell in it (the comb a plain linspace gives). When the longest
    duration is more than LOG_BINS_RATIO x the shortest, bin widths grow geometrically (still whole
    steps), so a 2 µs tail beside 200 ns regions gets bins of its own instead of one flat bar. Edges are
    bin boundaries, half a step off the values (the page labels values, never a negative one)."""
    d = np.asarray(d, np.int64)
    if d.size == 0:
        return [], [], False
    lo, hi = int(d.min()), int(d.max())
    geometric = False
    if step > 1 and not any(np.any(d[i : i + CHUNK_ROWS] % step) for i in range(0, d.size, CHUNK_ROWS)):
        steps = (hi - lo) // step + 1  # values lo, lo + step, ..., hi
        if steps > bins and (hi + step) / max(lo, step) > LOG_BINS_RATIO:
            k = np.unique(np.rint(np.geomspace(1, steps + 1, bins + 1)).astype(np.int64)) - 1
            edges = lo - step / 2 + step * k.astype(np.float64)
            geometric = True
        else:
            width = step * max(1, -(-(hi - lo + step) // (bins * step)))
            n = (hi - lo) // width + 1
            edges = lo - step / 2 + width * np.arange(n + 1, dtype=np.float64)
    elif hi > lo:
        edges = np.linspace(lo, hi, bins + 1)
    else:
        edges = np.array([lo - 0.5, hi + 0.5])
    counts, edges = np.histogram(d, edges)
    return [int(c) for c in counts], [float(x) for x in edges], geometric


def analysis_data(trace: Trace, analysis_mod: Any) -> tuple[dict, list[dict]]:
    out = analysis_mod.analyze(trace)
    sms, _ = analysis_mod.sm_table(trace)
    sm_rows = [{k: int(r[k]) for k in sms.dtype.names} for r in sms]
    return out, sm_rows


def _analysis_module():
    try:
        from host_decode.analysis import regions as analysis
    except ImportError:
        return None
    return analysis


# ================================================================================================
# Hardware side: map, join, per-PC table
# ================================================================================================


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


def _attach_hardware_to_regions(regions: list[dict], hw: dict) -> None:
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


# ================================================================================================
# Source: lines coloured by region and cost
# ================================================================================================


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
    them (tests/test_report_timeline.py::test_def_line_attribution)."""
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


# ================================================================================================
# Bottleneck heuristic and JSON hygiene
# ================================================================================================


def stands_out(row: dict) -> dict:
    """What stands out for one region, with its evidence: its top stall reason (hardware data, when
    present: what the warps waited on), else the timeline's strongest flag: a long tail or an
    imbalance across blocks. None of these proves the region is the kernel's bottleneck; the page
    calls them what they are."""
    flags = []
    if row.get("tail_ratio") and row["tail_ratio"] >= TAIL_RATIO_FLAG:
        flags.append(("tail", row["tail_ratio"], f"long tail: p99 = {row['tail_ratio']:.1f}x p50"))
    if row.get("block_imbalance") and row["block_imbalance"] >= BLOCK_IMBALANCE_FLAG:
        flags.append(("imbalance", row["block_imbalance"],
                      f"imbalance across blocks: max/mean = {row['block_imbalance']:.2f}"))
    hw = row.get("hw")
    if hw and hw.get("top_stalls"):
        reason, frac = hw["top_stalls"][0]
        return {"kind": "stall", "reason": reason, "value": frac,
                "text": f"stall {reason}: {100 * frac:.0f}% of its samples",
                "also": [f[2] for f in flags]}
    if flags:
        threshold = {"tail": TAIL_RATIO_FLAG, "imbalance": BLOCK_IMBALANCE_FLAG}
        kind, value, text = max(flags, key=lambda f: f[1] / threshold[f[0]])
        return {"kind": kind, "value": value, "text": text, "also": [f[2] for f in flags if f[0] != kind]}
    return {"kind": "none", "value": None, "text": "steady (no tail or imbalance; no stall data)", "also": []}


def read_sass_listing(cubin: bytes, kernel: str | None = None) -> tuple[dict[int, str], dict[int, str | None]]:
    """(pc -> instruction text, pc -> source file of its line info) of one kernel of a cubin
    (nvdisasm via host_decode.hardware.sass)."""
    from host_decode.hardware import sass

    fn = sass.select_function(sass.parse_listing(sass.disassemble(cubin)), kernel)
    return {ins.pc: ins.text for ins in fn.instructions}, {ins.pc: ins.file for ins in fn.instructions}


def read_sass_text(cubin: bytes, kernel: str | None = None) -> dict[int, str]:
    """pc -> instruction text of one kernel of a cubin."""
    return read_sass_listing(cubin, kernel)[0]


def _timeline_view(trace: Trace, options: dict) -> dict | None:
    from host_decode.reports.timeline import timeline_data

    return timeline_data(trace, options.get("timeline_blocks"))


register_view(ReportView("timeline", "timeline.js", _timeline_view))
register_view(ReportView("waits", "waits.js", lambda trace, options: pipeline_waits_view(trace)))
