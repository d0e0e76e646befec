"""Sessions over many launches and multi-rank merges (host_decode.analysis.sessions)."""

import json

import pytest

from host_decode.analysis import sessions as multi
from host_decode.analysis.diff import launch_durations
from host_decode.cli import main
from host_decode.core.model import Names
from host_decode.reports import merged
from host_decode.writers.chrome_json import chrome_events
from tests.support.buffers import B, BufferBuilder, E, F


def _launch(t0, length=100, blocks=2, absolute=True, **meta):
    rows = [(b, 0, 1, t0 + 10 * b, t0 + 10 * b + length) for b in range(blocks)]
    return multi.trace_from_spans(rows, num_groups=1, names=Names({1: "mma"}), absolute=absolute, meta=meta)


def test_concat_timeline_absolute_keeps_times_and_renumbers_blocks():
    parts = multi.parts_from_traces([_launch(5_000), _launch(1_000)])
    t = multi.concat(parts)
    assert t.num_blocks == 4
    assert t.spans["block"].tolist() == [0, 1, 2, 3]
    assert t.spans["start_ns"].tolist() == [5_000, 5_010, 1_000, 1_010]
    assert [p["block_offset"] for p in t.meta["parts"]] == [0, 2]
    assert t.loss.totals["paired_begin"] == 4 and t.loss.nonzero_slots == 8
    assert launch_durations(t).tolist() == [110.0, 110.0]


def test_concat_orders_by_launch_index_and_uses_host_ns_without_anchors():
    a = _launch(7, absolute=False, launch_index=1, host_ns=2_000_000)
    b = _launch(999, absolute=False, launch_index=0, host_ns=1_000_000)
    parts = multi.parts_from_traces([a, b])
    assert [p.label for p in parts] == ["launch 0", "launch 1"]
    t = multi.concat(parts)
    # each launch's first record placed at its host timestamp
    assert t.spans["start_ns"].tolist() == [1_000_000, 1_000_010, 2_000_000, 2_000_010]
    assert not t.absolute


def test_stacked_mode_rebases_each_launch_and_clock_offsets_apply_per_rank():
    parts = multi.parts_from_traces([_launch(5_000, rank=0), _launch(9_000, rank=1)], by="rank")
    assert multi.shifts(parts, "stacked").tolist() == [-5_000, -9_000]
    assert multi.shifts(parts, "timeline", {1: -250}).tolist() == [0, -250]
    with pytest.raises(ValueError, match="mode"):
        multi.shifts(parts, "sideways")


def test_rank_captures_without_launch_index_are_one_step():
    """Ranks' captures of one step carry no launch_index (a PipelineTrace.save of each rank): grouped by rank
    each is launch 0 (the step its flags are matched in); grouped by launch they are launches 0, 1 in order."""
    by_rank = multi.parts_from_traces([_launch(5_000, rank=1), _launch(5_500, rank=0)], by="rank")
    assert [(p.rank, p.launch_index) for p in by_rank] == [(0, 0), (1, 0)]
    by_launch = multi.parts_from_traces([_launch(5_000), _launch(5_500)])
    assert [p.launch_index for p in by_launch] == [0, 1]


def test_no_common_clock_places_launches_one_after_another():
    parts = multi.parts_from_traces([_launch(50, absolute=False), _launch(7, absolute=False)])
    assert multi.shifts(parts).tolist() == [-50, 110 + 1000 - 7]


def test_write_chrome_one_process_per_part(tmp_path):
    parts = multi.parts_from_traces([_launch(5_000, rank=0), _launch(5_500, rank=1)], by="rank")
    out = tmp_path / "m.json"
    summary = merged.write_session(parts, out, max_lanes_per_part=1)
    doc = json.loads(out.read_text())
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted({e["pid"] for e in x}) == [0, 1]
    assert [e["ts"] for e in x] == [0.0, 0.5]  # us from the earliest start (origin 5000 ns)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    assert [p["lanes_left_out"] for p in summary["parts"]] == [1, 1]
    assert [p["spans_left_out"] for p in summary["parts"]] == [1, 1]


def _capture(tmp_path, name, t64, launch_index):
    from host_decode.load.capture import save_capture

    bb = BufferBuilder(num_blocks=2, num_groups=1, records_per_lane=8)
    for lane in range(2):
        bb.anchor(lane, t64)
        lo = t64 & 0xFFFF_FFFF
        bb.put(lane, lo + 100, 1, B).put(lane, lo + 400, 1, E).put(lane, lo + 500, lane + 3, F)
    return save_capture(tmp_path / name, bb.buf, {"events": {"1": "mma"}}, kernel="toy", launch_index=launch_index,
                        host_ns=t64 - 5_000)


def test_load_parts_from_decoded_captures_and_cli(tmp_path):
    t0 = 1_790_000_000_123_456_789  # absolute globaltimer ns (2026): anchors make the timeline absolute
    _capture(tmp_path, "l1.npy", t0 + 1_000_000, 1)
    _capture(tmp_path, "l0.npy", t0, 0)
    parts = multi.load_parts([tmp_path], progress=False)
    assert [p.launch_index for p in parts] == [0, 1]
    assert all(p.trace.absolute for p in parts)
    t = multi.concat(parts)
    assert t.spans["start_ns"].min() == t0 + 100
    assert t.spans["start_ns"].max() == t0 + 1_000_100
    assert main(["merge", str(tmp_path), "-o", str(tmp_path / "s.json")]) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    x = sorted(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert x == [0.1, 0.1, 1000.1, 1000.1]  # us from the earliest record (the anchor)
    assert main(["stats", str(tmp_path), "--format", "json", "--no-progress"]) == 0


def test_a_session_directory_without_captures_is_an_error(tmp_path):
    # one of two session directories is empty (a typo'd run folder): refused, not dropped silently
    full, empty = tmp_path / "run1", tmp_path / "run2"
    full.mkdir()
    empty.mkdir()
    _capture(full, "l0.npy", 1_790_000_000_000_000_000, 0)
    with pytest.raises(ValueError, match="run2: directory holds no captures"):
        multi.load_parts([full, empty], progress=False)
    assert main(["stats", str(full), str(empty), "--no-progress"]) != 0


def test_chrome_overlapping_regions_get_their_own_thread():
    # lane 0: ev1 [0,100] with ev2 [10,20] nested (same thread) and ev3 [50,150] crossing ev1's end
    t = multi.trace_from_spans([(0, 0, 1, 0, 100), (0, 0, 2, 10, 20, 1), (0, 0, 3, 50, 150, 1)], num_groups=1,
                               names=Names({1: "a", 2: "b", 3: "c"}))
    counts: dict = {}
    ev = [e for chunk in chrome_events(t, process=0, origin_ns=-1_500, tid_base=10, counts=counts) for e in chunk]
    x = [json.loads(e) for e in ev if '"ph":"X"' in e]
    tid = {e["name"]: e["tid"] for e in x}
    assert tid["a"] == tid["b"] == 10 and tid["c"] == 11 and counts["tracks"] == 2
    assert {e["name"]: e["ts"] for e in x} == {"a": 1.5, "b": 1.51, "c": 1.55}
    names = [json.loads(e)["args"]["name"] for e in ev if "thread_name" in e]
    assert names == ["block 0 group_0", "block 0 group_0 (overlap 1)"]


def test_keep_lanes_counts_the_instants_it_leaves_out():
    from host_decode.core.decoder import decode
    from host_decode.writers.chrome_json import keep_lanes
    from tests.support.buffers import INST

    bb = BufferBuilder(num_blocks=3, num_groups=1, records_per_lane=8)
    for lane in range(3):
        bb.put(lane, 100, 1, B).put(lane, 150, 2, INST).put(lane, 160, 2, INST).put(lane, 400, 1, E)
    t = decode(bb.buf)
    kept, left = keep_lanes(t, 1)
    assert left == {"lanes_left_out": 2, "spans_left_out": 2, "instants_left_out": 4}
    assert kept.instants.size + left["instants_left_out"] == t.instants.size


def test_merge_a_capture_with_no_spans_and_no_instants(tmp_path, capsys):
    """Only unmatched begins: nothing to draw, but the merge works (empty tracks), as decode does."""
    from host_decode.load.capture import save_capture

    bb = BufferBuilder(num_blocks=2, num_groups=1, records_per_lane=8)
    for lane in range(2):
        bb.anchor(lane, 1_790_000_000_000_000_000)
        bb.put(lane, 10, 1, B).put(lane, 20, 2, B).put(lane, 30, lane, F)
    cap = save_capture(tmp_path / "begins.npy", bb.buf, {"events": {"1": "a", "2": "b"}})
    out = tmp_path / "m.json"
    assert main(["merge", str(cap), "-o", str(out)]) == 0, capsys.readouterr().err
    events = json.loads(out.read_text())["traceEvents"]
    assert not [e for e in events if e.get("ph") in ("X", "i")]


def test_parts_that_number_their_events_alike_keep_their_own_names():
    """Kernels of one foreign trace (and captures of different kernels) each number their regions from 0:
    merged, a name keeps one id and a clashing id moves, so kernel B's `epilogue` is not shown as
    kernel A's `load` (concat used to keep the first part's name for every part's id 0)."""
    from host_decode.analysis.sessions import concat, parts_from_traces
    from host_decode.core.decoder import decode

    def one_region(names: dict, event: int):
        b = BufferBuilder(1, 1, 8)
        b.put(0, 100, event, B).put(0, 200, event, E)
        return decode(b.buf, names={"events": names})

    a = one_region({0: "load", 1: "mma"}, 0)
    b = one_region({0: "epilogue", 1: "load"}, 1)  # its "load" is A's load, its 0 is new
    c = one_region({0: "load", 1: "mma"}, 1)  # numbered like A: unchanged
    merged = concat(parts_from_traces([a, b, c]))
    names = [merged.names.event(int(e)) for e in merged.spans["event"]]
    assert names == ["load", "load", "mma"]
    assert sorted(merged.names.events.values()) == ["epilogue", "load", "mma"]


def test_parts_that_name_a_group_differently_show_both_names():
    """A group is an index within a block: merged, a part's lanes used to show the first part's name for
    that index (another kernel's `warp 0` spans read as `producer`)."""
    from host_decode.analysis.sessions import concat, parts_from_traces
    from host_decode.core.decoder import decode

    def one_region(groups: dict):
        b = BufferBuilder(1, 1, 8)
        b.put(0, 100, 0, B).put(0, 200, 0, E)
        return decode(b.buf, names={"events": {0: "r"}, "groups": groups})

    merged = concat(parts_from_traces([one_region({0: "producer"}), one_region({0: "warp 0"}),
                                       one_region({0: "producer"})]))
    assert merged.names.group(0) == "producer / warp 0"
