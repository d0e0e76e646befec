"""Flows and counter series in the Perfetto writer (the contract in PIPELINES_CONTRACT.md): parsed back
with the official protos and replayed like trace processor (tests/test_perfetto.py::replay)."""

import numpy as np
import pytest

from host_decode.core.model import FLOW_DTYPE, CounterSeries, Names
from host_decode.writers import perfetto as pf
from host_decode.writers import write_trace
from tests.test_perfetto import ORIGIN, check_against_trace, lane_of_track, make_trace, replay

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
    stats = write_trace(trace, path, counters=series, flows=_flows(), flow_kinds=KINDS)
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
    # the older spelling still works: counters=True means the lanes-inside counters
    res = replay(pf.perfetto_bytes(trace, counters=True))
    assert any(d.name == "lanes in wait" for d in res["tracks"].values())


def test_flows_name_their_lanes_even_without_regions(tmp_path):
    trace = _trace()
    flows = np.zeros(1, FLOW_DTYPE)
    flows[0] = (0, ORIGIN + 10, 2, ORIGIN + 15, 0)  # lane 2 (block 1 producer) has no region or instant
    res = replay(pf.perfetto_bytes(trace, flows=flows, flow_kinds=KINDS))
    lane_of = lane_of_track(res["tracks"], trace.num_groups)
    ends = [lane_of[s["track"]] for s in res["slices"] if s["terminating_flow_ids"]]
    assert ends == [2]


def test_bad_flows_and_series_are_refused():
    trace = _trace()
    flows = _flows()
    with pytest.raises(ValueError, match="kind must index flow_kinds"):
        pf.perfetto_bytes(trace, flows=flows, flow_kinds=KINDS[:1])
    bad = flows.copy()
    bad["dst_lane"][0] = trace.num_lanes
    with pytest.raises(ValueError, match="lanes must be within"):
        pf.perfetto_bytes(trace, flows=bad, flow_kinds=KINDS)
    with pytest.raises(ValueError, match="one length"):
        pf.perfetto_bytes(trace, counters=[CounterSeries("x", "u", np.array([1, 2]), np.array([1.0]))])
    with pytest.raises(TypeError, match="CounterSeries"):
        pf.perfetto_bytes(trace, counters=["x"])
