"""The report's new data, each checked against an independent computation: span nesting and exclusive
time (hand-built spans), the Timeline tab's blocks and lanes-in-region curves (brute force over the
spans), geometric histogram bins, per-PC samples shared by groups running the same code, marker-line
totals without a map, and the view registry."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.analysis import histograms, nesting, regions
from host_decode.core.model import SPAN_DTYPE
from host_decode.load.capture import load_capture, save_capture
from host_decode.reports import html, html_hardware, html_source, timeline
from tests.support.report import NAMES, REAL_CAPTURE, synthetic_buffer


def spans(rows):
    """(lane, event, depth, start, end) in lane / program order -> SPAN_DTYPE."""
    a = np.zeros(len(rows), SPAN_DTYPE)
    for i, (lane, event, depth, start, end) in enumerate(rows):
        a[i] = (lane, lane, 0, event, depth, start, end)
    return a


def test_nesting_and_exclusive_time():
    # lane 0: A[0,100) holds B[10,30) and C[40,90), C holds D[50,60); lane 1: D[0,10), then A[20,50)
    sp = spans([(0, 1, 0, 0, 100), (0, 2, 1, 10, 30), (0, 3, 1, 40, 90), (0, 4, 2, 50, 60),
                (1, 4, 0, 0, 10), (1, 1, 0, 20, 50)])
    parent = nesting.span_parents(sp)
    assert parent.tolist() == [-1, 0, 0, 2, -1, -1]
    assert nesting.exclusive_durations(sp, parent).tolist() == [100 - 20 - 50, 20, 50 - 10, 10, 10, 30]
    # a deeper span whose lane has no shallower one before it has no parent (never one of another lane)
    assert nesting.span_parents(spans([(0, 1, 0, 0, 5), (1, 2, 1, 1, 2)])).tolist() == [-1, -1]


@pytest.mark.parametrize("shuffled", [False, True])
def test_runs_of_lanes_change_nothing(tmp_path, monkeypatch, shuffled):
    """span_parents and region_rows work run of whole lanes by run: runs of 3 spans (a lane split over
    several runs is never cut: runs hold whole lanes) give what one run gives; a table out of lane order
    is one run."""
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    if shuffled:
        trace.spans = trace.spans[np.random.default_rng(0).permutation(trace.spans.size)]
    whole_parents, whole_rows = nesting.span_parents(trace.spans), regions.region_rows(trace)
    monkeypatch.setattr(nesting, "LANE_RUN_SPANS", 3)
    assert (nesting.span_parents(trace.spans) == whole_parents).all()
    assert regions.region_rows(trace) == whole_rows
    runs = list(nesting.lane_runs(trace.spans))
    assert len(runs) == 1 if shuffled else len(runs) > 10


def test_region_rows_exclusive_and_parent(tmp_path):
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    rows = {r["region"]: r for r in regions.region_rows(trace)}
    sp = trace.spans
    dur = sp["end_ns"] - sp["start_ns"]
    outer = sp["event"] == 1
    inside = (sp["depth"] == 1) & (sp["group"] == 0)  # markers-shaped: body/slow/inner sit in outer
    assert rows["outer"]["exclusive_ns"] == int(dur[outer].sum() - dur[inside].sum())
    assert rows["body"]["parent_key"] == rows["outer"]["key"] and rows["outer"]["parent_key"] is None
    assert rows["body"]["exclusive_ns"] == rows["body"]["total_ns"]  # body holds no region


def brute_lanes(trace, event, t0, t1):
    """Most lanes inside `event` at any time in [t0, t1) (times from the launch start)."""
    sp = trace.spans[trace.spans["event"] == event]
    a, b = sp["start_ns"] - trace.start_ns, sp["end_ns"] - trace.start_ns
    probes = np.unique(np.concatenate([[t0], a[(a >= t0) & (a < t1)]]))
    return max(np.unique(sp["lane"][(a <= t) & (t < b)]).size for t in probes)


@pytest.mark.parametrize("capture", ["synthetic", "basic"])
def test_timeline_view_data(tmp_path, capture):
    path = REAL_CAPTURE if capture == "basic" else save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES)
    trace = load_capture(path)
    T = timeline.timeline_data(trace)
    sp, origin = trace.spans, trace.start_ns
    lengths = {}
    for b in np.unique(sp["block"]):
        m = sp["block"] == b
        lengths[int(b)] = int(sp["end_ns"][m].max() - sp["start_ns"][m].min())
    ordered = sorted(lengths, key=lambda b: (lengths[b], b))
    labels = {B["label"]: B["block"] for B in T["blocks"] if B["shown"]}
    assert set(labels) == {"fastest", "median", "slowest"} or len(set(labels.values())) < 3
    assert T["all_blocks"] and sorted(B["block"] for B in T["blocks"]) == sorted(lengths)
    assert lengths[labels["fastest"]] == lengths[ordered[0]] and lengths[labels["slowest"]] == lengths[ordered[-1]]
    for B in T["blocks"]:
        m = sp["block"] == B["block"]
        assert B["end_ns"] - B["start_ns"] == lengths[B["block"]]
        got = sorted(zip(B["spans"]["start"], B["spans"]["dur"], B["spans"]["event"], B["spans"]["group"]))
        want = sorted(zip((sp["start_ns"][m] - origin).tolist(), (sp["end_ns"][m] - sp["start_ns"][m]).tolist(),
                          sp["event"][m].tolist(), sp["group"][m].tolist()))
        assert got == want and B["left_out"] == 0
    C = T["curves"]
    for s in C["series"]:
        for i in range(0, len(C["t"]), 37):
            t0 = C["t"][i]
            t1 = C["t"][i + 1] if i + 1 < len(C["t"]) else trace.end_ns - origin + 1
            assert s["lanes"][i] == brute_lanes(trace, s["event"], t0, t1), (s["name"], i)
    picked = timeline.timeline_data(trace, [int(sp["block"][0])])["blocks"]
    assert [B["block"] for B in picked if B["shown"]] == [int(sp["block"][0])]
    with pytest.raises(ValueError, match="no spans in these blocks"):
        timeline.timeline_data(trace, [10**6])


def test_only_chosen_blocks_embedded_when_large(tmp_path, monkeypatch):
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    monkeypatch.setattr(timeline, "TIMELINE_ALL_SPANS", trace.spans.size - 1)
    monkeypatch.setattr(timeline, "TIMELINE_MAX_SPANS", 5)
    T = timeline.timeline_data(trace)
    assert not T["all_blocks"] and T["num_blocks"] == 16 and all(B["shown"] for B in T["blocks"])
    for B in T["blocks"]:
        m = trace.spans["block"] == B["block"]
        dur = np.sort(trace.spans["end_ns"][m] - trace.spans["start_ns"][m])
        assert len(B["spans"]["dur"]) == 5 and B["left_out"] == int(m.sum()) - 5
        assert sorted(B["spans"]["dur"]) == dur[-5:].tolist()  # the longest are kept


def test_geometric_bins_for_long_tails():
    d = np.r_[np.full(500, 192), np.full(400, 224), np.full(3, 2048)].astype(np.int64)
    counts, edges, geometric = histograms.duration_histogram(d)
    assert geometric and sum(counts) == d.size and len(counts) <= histograms.HIST_BINS
    widths = np.diff(edges)
    assert np.all(widths % 32 == 0) and widths[-1] > widths[0]  # whole timer steps, growing
    assert counts[-1] == 3 and counts[0] == 500  # the tail has a bin of its own
    counts, edges, geometric = histograms.duration_histogram(np.full(10, 0, np.int64))
    assert not geometric and counts == [10]


def test_samples_shared_by_groups_running_the_same_code():
    rows = [{"event": 1, "group_name": "producer"}, {"event": 1, "group_name": "consumer"},
            {"event": 2, "group_name": "consumer"}]
    agg = {"samples": 10, "samples_share": 0.5, "inst_executed": 1, "stalls": {"wait": 3}, "paths": ["a"]}
    html_hardware.attach_hardware_to_regions(rows, {"by_event": {"1": agg, "2": agg}})
    assert rows[0]["hw"]["shared_by"] == rows[1]["hw"]["shared_by"] == ["producer", "consumer"]
    assert rows[2]["hw"]["shared_by"] is None


def test_marker_line_totals_without_map(tmp_path):
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    text = 'with profile_region(p, "outer"):\n    with profile_region(p, "body"):\n        x = 1\n'
    src = html_source.source_data(text, "k.py", None, trace)
    sp = trace.spans
    for line, event in (("1", 1), ("2", 2)):
        m = sp["event"] == event
        assert src["line_time"][line] == {"event": event, "total_ns": int((sp["end_ns"] - sp["start_ns"])[m].sum()),
                                          "count": int(m.sum())}
    assert "3" not in src["line_time"]


def test_def_line_attribution():
    lines = ["@cute.kernel", "def k(x):", "    y = x + 1"]
    pcs = {"line": [1, 1, 2, 3], "path": [0, 1, 1, 1], "metrics": {"samples_attributed": [5, 7, 1, 9]}}
    out = html_source.def_line_attribution(lines, {"1": [0, 1], "2": [1], "3": [1]}, pcs, [0, 1, 2, 3], {})
    assert out == {"1": {"by_path": {"0": [1, 5.0], "1": [1, 7.0]}, "metric": "samples_attributed"},
                   "2": {"by_path": {"1": [1, 1.0]}, "metric": "samples_attributed"}}


def test_view_registry_embeds_data_and_script(tmp_path):
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    view = html.ReportView("probe", "timeline.js", lambda t, o: {"spans": int(t.spans.size)})
    html.register_view(view)
    try:
        page = html.render_html(html.build_report_data(trace))
        data = html.extract_data(page)
        assert data["probe"] == {"spans": int(trace.spans.size)} and data["timeline"]["blocks"]
        assert page.count('IKP.addView("timeline"') == 2  # the script once per registered view
    finally:
        html.REPORT_VIEWS.remove(view)


def test_curves_merged_run_by_run_change_nothing(tmp_path, monkeypatch):
    """lanes_inside_curves merges each region's intervals run of whole lanes by run, sweeps the level a
    chunk at a time, in windows of bins when a region has many boundaries, and finds a region's spans by
    a scan (few regions) or one sort: tiny runs, tiny chunks, tiny windows and the sort path give the
    same curves."""
    trace = load_capture(save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES))
    whole = timeline.lanes_inside_curves(trace)
    monkeypatch.setattr(timeline, "MERGE_SPANS", 3)
    assert timeline.lanes_inside_curves(trace) == whole
    for boundaries in (64, 5):  # a few windows; a window per bin
        monkeypatch.setattr(timeline, "WINDOW_BOUNDARIES", boundaries)
        assert timeline.lanes_inside_curves(trace) == whole
    monkeypatch.setattr(timeline, "SCAN_ROWS", 7)  # the level swept 7 boundaries at a time
    assert timeline.lanes_inside_curves(trace) == whole
    monkeypatch.setattr(timeline, "FEW_REGIONS", 0)
    assert timeline.lanes_inside_curves(trace) == whole
