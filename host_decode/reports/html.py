"""`ikp report`: one self-contained, offline HTML page that explores one kernel.

The page is data + a small viewer. Everything is computed in Python (numpy) and embedded as one JSON
blob (``<script type="application/json" id="ikp-data">``); the inline script only lays tables out, draws
charts as SVG and follows clicks. Nothing is fetched at view time: no CDN, no server. This module builds
and writes the page; what it shows is computed elsewhere:

* the trace (decoded capture): kernel facts and the loss report here; per-region rows (percentiles,
  histograms, exclusive time, parent) and bubbles / overlap / imbalance in host_decode.analysis.regions;
* a pc2region map, per-PC hardware data joined to it and SASS text: host_decode.reports.html_hardware;
* the kernel's source text, coloured by region: host_decode.reports.html_source;
* extra tabs (REPORT_VIEWS): the timeline (host_decode.reports.timeline) and pipeline waits
  (host_decode.analysis.waits).

Data schema (``format`` = REPORT_FORMAT) -- what tests/unit/host_decode/reports/test_report*.py and
tests/browser/test_report*_browser.py read back:
  kernel {facts}, loss {...}, regions [per (group, event) row: stats, histogram (hist_log: geometric
  bins), exclusive_ns, parent_key, hw {.., shared_by} ], analysis {...} | null, sm [per-SM rows],
  hardware {join summary} | null, paths [per region path], pcs {columnar} | null,
  source {path, lines, line_paths, line_cost, origin, line_time, def_lines} | null,
  missing {view: how to collect}, and one key per registered extra view (REPORT_VIEWS: "timeline",
  host_decode.reports.timeline).

Invariants, and the tests that guard them:
- the blob is strict JSON that no text in the data can end early (tests/unit/host_decode/reports/test_report.py::
  test_blob_is_strict_json_and_survives_hostile_text);
- the page's numbers are the analyses'
  (tests/unit/host_decode/reports/test_report.py::test_timeline_data_matches_stats_and_loss,
  ::test_analysis_section_matches_analysis_module); what is missing says how to collect it
  (::test_map_without_hardware_says_so, ::test_without_analysis_module_the_page_says_so);
- an extra view embeds its data and script
  (tests/unit/host_decode/reports/test_report_timeline.py::test_view_registry_embeds_data_and_script);
- the page fits 1600x1000 in every view with nothing cut (tests/browser/test_report_layout_browser.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from host_decode.analysis.regions import region_rows
from host_decode.core.arrays import distinct_small
from host_decode.core.jsonable import to_jsonable
from host_decode.core.model import Trace
from host_decode.reports.html_hardware import attach_hardware_to_regions, hardware_data, path_rows, pc_columns
from host_decode.reports.html_source import source_data

REPORT_FORMAT = "ikp-report-v1"
DATA_ELEMENT_ID = "ikp-data"
MAX_LOSS_LANES = 50

# Thresholds of the "what stands out" flags (README, "ikp report", explains them).
TAIL_RATIO_FLAG = 2.0  # p99 / p50 of a region's durations
BLOCK_IMBALANCE_FLAG = 1.5  # max / mean over blocks of a region's total time per block

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
        "regions": region_rows(trace),  # host_decode.analysis.regions
        "groups": {str(g): trace.names.group(g) for g in _groups_with_spans(trace).tolist()},
    }
    data.update(_timeline_analysis(trace, missing))
    launch = (data["analysis"] or {}).get("launch", {})
    data["kernel"]["launch_ns"] = launch.get("launch_ns", trace.end_ns - trace.start_ns)
    data.update(_hardware(trace, region_map, pc_table, sass_text, pc_files, force_join, missing))
    if data["hardware"] is not None:
        attach_hardware_to_regions(data["regions"], data["hardware"])
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
    ``window.__ikp.addView(key, label, render)`` (tests/unit/host_decode/reports/test_report_timeline.py::
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


def analysis_data(trace: Trace, analysis_mod: Any) -> tuple[dict, list[dict]]:
    return analysis_mod.analyze(trace), analysis_mod.sm_rows(trace)


def _analysis_module():
    try:
        from host_decode.analysis import regions as analysis
    except ImportError:
        return None
    return analysis


# ================================================================================================
# Hardware side: map, join, per-PC table
# ================================================================================================


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


def _timeline_view(trace: Trace, options: dict) -> dict | None:
    from host_decode.reports.timeline import timeline_data

    return timeline_data(trace, options.get("timeline_blocks"))


register_view(ReportView("timeline", "timeline.js", _timeline_view))
register_view(ReportView("waits", "waits.js", lambda trace, options: pipeline_waits_view(trace)))
