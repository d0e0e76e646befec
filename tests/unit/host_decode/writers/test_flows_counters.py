"""Flows and counter series in the Perfetto writer (the contract in PIPELINES_CONTRACT.md): parsed back
with the official protos and replayed like trace processor (tests/support/perfetto_replay.py::replay); the one
TraceOptions, and the overlays the writer draws itself, whichever entry point writes the trace."""

from pathlib import Path

import numpy as np
import pytest

from host_decode.core.model import FLOW_DTYPE, CounterSeries, Names
from host_decode.writers import OVERLAYS, Overlay, TraceOptions
from host_decode.writers import overlays as ov
from host_decode.writers import perfetto as pf
from tests.support.perfetto_replay import ORIGIN, check_against_trace, lane_of_track, make_trace, replay

pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

KINDS = ("commit->wait", "release->acquire")


def _trace():
    # lane 0 (block 0 producer) commits; lanes 1 (block 0 consumer) and 3 (block 1 consumer) wait
    lanes = {0: [("B", 1, 0), ("I", 4, 10), ("E", 1, 20), ("I", 4, 60)],
             1: [("B", 2, 5), ("E", 2, 12), ("B", 2, 30), ("E", 2, 62), ("I", 5, 70)],
             3: [("B", 2, 8), ("E", 2, 11)]}
    return make_trace(lanes, names=Names({1: "load", 2: "wait", 4: "commit", 5: "release"}))


def _flows():
    flows = np.zeros(3, FLOW_DTYPE)
    flows[0] = (0, ORIGIN + 10, 1, ORIGIN + 12, 0)
    flows[1] = (0, ORIGIN + 10, 3, ORIGIN + 11, 0)
    flows[2] = (1, ORIGIN + 70, 0, ORIGIN + 60, 1)  # a flow may point back in time: still one arrow
    return flows


def test_flows_and_counter_series_parse(tmp_path):
    trace = _trace()
    t = np.array([ORIGIN, ORIGIN + 10, ORIGIN + 62])
    series = (CounterSeries("stages full", "stages", t, np.array([0.0, 1.0, 0.5])),
              CounterSeries("block 1 bytes", "B", np.array([ORIGIN + 8, ORIGIN + 11]), np.array([1024.0, 0.0]),
                            block=1))
    path = tmp_path / "f.pftrace"
    stats = pf.write_perfetto(trace, path, overlay=Overlay(_flows(), KINDS, series))
    assert stats.flows == 3
    res = replay(path.read_bytes())
    flow_marks = [s for s in res["slices"] if s["flow_ids"] or s["terminating_flow_ids"]]
    others = [s for s in res["slices"] if not (s["flow_ids"] or s["terminating_flow_ids"])]
    check_against_trace(trace, dict(res, slices=others), args=False)  # regions and user instants untouched
    lane_of = lane_of_track(res["tracks"], trace.num_groups)
    got = sorted((s["name"], lane_of[s["track"]], s["ts"], tuple(s["flow_ids"]), tuple(s["terminating_flow_ids"]))
                 for s in flow_marks)
    assert got == sorted([
        ("commit->wait", 0, 10, (1,), ()), ("commit->wait", 1, 12, (), (1,)),
        ("commit->wait", 0, 10, (2,), ()), ("commit->wait", 3, 11, (), (2,)),
        ("release->acquire", 1, 70, (3,), ()), ("release->acquire", 0, 60, (), (3,)),
    ])
    assert all(s["instant"] for s in flow_marks)
    by_name = {d.name: (u, d) for u, d in res["tracks"].items() if d.HasField("counter")}
    u, d = by_name["stages full"]
    assert d.counter.unit_name == "stages" and not res["tracks"][d.parent_uuid].HasField("parent_uuid")  # the root
    assert res["counters"][u] == [(0, 0.0), (10, 1.0), (62, 0.5)]
    u, d = by_name["block 1 bytes"]
    assert d.counter.unit_name == "B" and res["tracks"][d.parent_uuid].name.startswith("block 1")
    assert res["counters"][u] == [(8, 1024.0), (11, 0.0)]
    res = replay(pf.perfetto_bytes(trace, TraceOptions(lane_counters="on")))
    assert any(d.name == "lanes in wait" for d in res["tracks"].values())
    res = replay(pf.perfetto_bytes(trace, TraceOptions(lane_counters="off")))
    assert not any(d.name == "lanes in wait" for d in res["tracks"].values())


def test_flows_name_their_lanes_even_without_regions(tmp_path):
    trace = _trace()
    flows = np.zeros(1, FLOW_DTYPE)
    flows[0] = (0, ORIGIN + 10, 2, ORIGIN + 15, 0)  # lane 2 (block 1 producer) has no region or instant
    res = replay(pf.perfetto_bytes(trace, overlay=Overlay(flows, KINDS)))
    lane_of = lane_of_track(res["tracks"], trace.num_groups)
    ends = [lane_of[s["track"]] for s in res["slices"] if s["terminating_flow_ids"]]
    assert ends == [2]


def test_bad_flows_and_series_are_refused():
    trace = _trace()
    flows = _flows()
    with pytest.raises(ValueError, match="kind must index flow_kinds"):
        pf.perfetto_bytes(trace, overlay=Overlay(flows, KINDS[:1]))
    bad = flows.copy()
    bad["dst_lane"][0] = trace.num_lanes
    with pytest.raises(ValueError, match="lanes must be within"):
        pf.perfetto_bytes(trace, overlay=Overlay(bad, KINDS))
    with pytest.raises(ValueError, match="FLOW_DTYPE"):
        pf.perfetto_bytes(trace, overlay=Overlay(np.zeros(1, np.int64), KINDS))
    with pytest.raises(ValueError, match="one length"):
        short = CounterSeries("x", "u", np.array([1, 2]), np.array([1.0]))
        pf.perfetto_bytes(trace, overlay=Overlay(counters=(short,)))
    with pytest.raises(TypeError, match="CounterSeries"):
        pf.perfetto_bytes(trace, overlay=Overlay(counters=("x",)))


def test_trace_options_are_checked():
    """One spelling per choice: anything else is refused when the options are made, naming it."""
    with pytest.raises(ValueError, match="lane_counters.*True"):
        TraceOptions(lane_counters=True)
    with pytest.raises(ValueError, match="unknown overlay.*'tma'"):
        TraceOptions(overlays=("pipelines", "tma"))
    with pytest.raises(ValueError, match="tuple of overlay names"):
        TraceOptions(overlays="pipelines")
    assert TraceOptions(overlays=["pipelines"]).overlays == ("pipelines",)
    assert TraceOptions().overlays == tuple(OVERLAYS)


def test_overlays_combine(monkeypatch):
    """Two overlays drawn together: the second one's flow kinds follow the first one's names, counters and
    notes in order; an overlay with nothing to draw (None) adds nothing."""
    trace = _trace()
    a, b = _flows()[:2], _flows()[2:].copy()
    b["kind"] = 0
    series = CounterSeries("x", "u", np.array([ORIGIN]), np.array([1.0]))
    monkeypatch.setitem(OVERLAYS, "first", lambda t: Overlay(a, KINDS[:1], (), ("a",)))
    monkeypatch.setitem(OVERLAYS, "second", lambda t: Overlay(b, ("back",), (series,), ("b",)))
    monkeypatch.setitem(OVERLAYS, "none", lambda t: None)
    both = ov.draw_overlays(trace, ("first", "none", "second"))
    assert both.flow_kinds == ("commit->wait", "back") and both.notes == ("a", "b") and both.counters == (series,)
    assert both.flows["kind"].tolist() == [0, 0, 1]
    assert ov.draw_overlays(trace, ("none",)) is ov.NO_OVERLAY
    res = replay(pf.perfetto_bytes(trace, TraceOptions(overlays=("first", "second"))))
    names = sorted(s["name"] for s in res["slices"] if s["flow_ids"] or s["terminating_flow_ids"])
    assert names == ["back", "back"] + ["commit->wait"] * 4


EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


@pytest.mark.parametrize("capture", ["pipelines/fa4_sm90_signals.npy", "pipelines/quack_gemm_sm90_signals.npy",
                                     "basic/capture.npy"])
def test_three_paths_same_bytes(capture, tmp_path):
    """`ikp decode X -o T.pftrace`, the trace `ikp view X` serves and host_decode.write_trace(trace, path) write
    the same bytes; on a pipeline capture they carry the pipeline flows and counters (drawn by the writer)."""
    import host_decode as hd
    from host_decode.cli import main
    from host_decode.reports.viewer import trace_to_serve

    src = EXAMPLES / capture
    assert main(["decode", str(src), "-o", str(tmp_path / "decode.pftrace"), "-q"]) == 0
    (tmp_path / "view").mkdir()
    served = trace_to_serve(src, tmp_path / "view")
    stats = hd.write_trace(hd.load_capture(src), tmp_path / "api.pftrace")
    data = (tmp_path / "decode.pftrace").read_bytes()
    assert served.read_bytes() == data
    assert (tmp_path / "api.pftrace").read_bytes() == data
    if "pipelines" in capture:
        assert stats.flows > 0 and "pipeline flows" in stats.notes[0]
        bare = pf.perfetto_bytes(hd.load_capture(src), TraceOptions(overlays=()))
        assert len(bare) < len(data)  # the overlay is what differs
    else:
        assert stats.flows == 0 and stats.notes == ()
