"""Capture windows and the launch ring (ikp_cute/ring.py, ikp_cute/window.py), CPU only.

Compile-time properties of the device side (sm_90a PTX without a GPU), and the host's ring logic on a
CPU torch buffer driven by the reference of the device rule (ring.decide / ring.run_launch); the GPU
twin of the rule is tests/gpu/test_ring_gpu.py."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from tests.support.buffers import B, BufferBuilder, E, F

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from ikp_cute import ProfileSpec, ring  # noqa: E402


def spec_of(**kw):
    base = {"num_groups": 2, "num_blocks": 4, "write_stride": 8, "records_per_lane": 16, "window_slots": 3}
    base.update(kw)
    return ProfileSpec(**base)


# --- spec ------------------------------------------------------------------------------------------------


def test_spec_geometry_with_ring():
    spec = spec_of(window_slots=3)
    assert spec.buffer_slots == ring.control_words64(3) + 3 * spec.total_slots
    assert ring.control_words64(3) * 2 >= ring.HEADER_WORDS32 + 3
    assert ring.control_words64(3) % 2 == 0  # the ring starts 16-byte aligned
    assert spec_of(window_slots=0).buffer_slots == spec_of(window_slots=0).total_slots
    assert repr(spec) == "ikp_cursor_ring3"


@pytest.mark.parametrize(
    "kw, match",
    [({"window_slots": -1}, "window_slots"), ({"window_slots": 70000}, "window_slots"),
     ({"window_slots": 2, "mode": "lean"}, "lean"),
     # window_branch counts every warp: 2**20 lanes x 32 warps would leave a warp's part at 0 ticks
     ({"window_slots": 2, "write_stride": 1 << 20, "warps_per_group": 32}, "warps_per_group")],
)
def test_spec_rejects_bad_window(kw, match):
    with pytest.raises(ValueError, match=match):
        spec_of(**kw)


# --- the rule (reference) ------------------------------------------------------------------------------------


def control(epoch=0, filled=0, every=1, start=0, stop=0, slots=4):
    c = np.zeros(ring.HEADER_WORDS32 + slots, np.int32)
    set_launch_index(c, epoch)
    c[ring.FILLED_EVERY] = filled | (every << 16)
    c[ring.START], c[ring.STOP] = start, ring._i32(stop)
    return c


def set_launch_index(c, index):
    ticks = index << ring.TICK_BITS
    c[ring.TICKS], c[ring.TICKS + 1] = ring._i32(ticks), ring._i32(ticks >> 32)


def lost_launches(c):
    lost = ring._u64(c, ring.LOST)
    assert lost % ring.LAUNCH_TICKS == 0  # whole launches only
    return lost >> ring.TICK_BITS


def run_launches(c, slots, n, lanes=3):
    recorded = []
    for _ in range(n):
        in_window, recording, slot = ring.decide(c, slots)
        if recording:
            recorded.append(ring.launch_index(c))
        ring.run_launch(c, slots, lanes)
    return recorded


def test_rule_window_every_and_ring_full():
    c = control(start=3, stop=3 + 3 * 2 + 1, every=2, slots=2)  # launches 3, 5, 7, 9
    assert run_launches(c, 2, 20, lanes=7) == [3, 5]
    assert lost_launches(c) == 2 and ring.launch_index(c) == 20
    assert list(c[ring.SLOT_EPOCHS : ring.SLOT_EPOCHS + 2]) == [3, 5]


def test_rule_open_ended_and_closed():
    c = control(start=0, stop=ring.OPEN_ENDED, slots=4)
    assert run_launches(c, 4, 6) == [0, 1, 2, 3] and lost_launches(c) == 2
    c = control(start=0, stop=0, slots=4)
    assert run_launches(c, 4, 5) == [] and lost_launches(c) == 0


def test_a_finished_window_is_emptied_by_its_last_recorded_launch():
    """The last lane of the window's last launch empties it (START = STOP = 0), so the launches after it
    decide from the window words alone, without reading TICKS (the PTX skips that load for an empty
    window). A window whose last launch found the ring full, or an open-ended one, stays."""
    c = control(start=3, stop=8, every=2, slots=4)  # launches 3, 5, 7
    windows = []
    for _ in range(10):
        ring.run_launch(c, 4, 5)
        windows.append((int(c[ring.START]), int(c[ring.STOP])))
    assert windows == [(3, 8)] * 7 + [(0, 0)] * 3  # emptied by launch 7, not before
    assert list(c[ring.SLOT_EPOCHS : ring.SLOT_EPOCHS + 4]) == [3, 5, 7, 0]
    c = control(start=0, stop=3, slots=2)  # launches 0, 1 recorded, 2 lost: the window stays
    assert run_launches(c, 2, 5) == [0, 1] and lost_launches(c) == 1
    assert (int(c[ring.START]), int(c[ring.STOP])) == (0, 3)
    c = control(start=0, stop=ring.OPEN_ENDED, slots=8)
    assert run_launches(c, 8, 5) == [0, 1, 2, 3, 4] and int(c[ring.STOP]) == ring._i32(ring.OPEN_ENDED)


@pytest.mark.parametrize("lanes", [1, 2, 3, 7, 1000, 3 * 1024, 65_537, 1 << 20])
def test_lane_shares_add_up_to_one_launch_and_never_show_it_early(lanes):
    """The launch count needs no last lane: the shares of any number of lanes add up to exactly one
    launch, each lane's is at least 1, and until the last share lands every partial sum (whatever the
    order) still reads the running launch's index."""
    shares = np.array([ring.lane_share(lane, lanes) for lane in range(lanes)], np.int64)
    assert shares.sum() == ring.LAUNCH_TICKS and shares.min() >= 1
    c = control(epoch=41)
    start = ring._u64(c, ring.TICKS)
    partial = np.cumsum(np.random.default_rng(lanes).permutation(shares))[:-1]  # any order, all but the last
    assert ((start + partial) >> ring.TICK_BITS == 41).all()
    ring.run_launch(c, 4, lanes)
    assert ring.launch_index(c) == 42


def test_a_late_reader_still_reads_its_launch_index():
    """Every lane holds one tick back until its end, so a thread of any lane that reads the index at any
    time before its own lane ends (a warp scheduled late, after every other lane has counted and ended)
    reads the running launch's index, in any order of the lanes' steps; the count ends whole."""
    rng = np.random.default_rng(7)
    for lanes in (1, 2, 3, 17):
        for _ in range(50):
            c = control(epoch=9, start=0, stop=ring.OPEN_ENDED, slots=2)
            order = _random_order(rng, lanes)
            reads = {}
            for step in range(len(order)):
                alive = [lane for lane in range(lanes) if (lane, "end") not in order[:step]]
                reads[step] = alive[rng.integers(len(alive))]
            assert set(ring.run_launch(c, 2, lanes, order, reads)) == {9}
            assert ring.launch_index(c) == 10 and c[ring.DONE] == 0 and c[ring.SLOT_EPOCHS] == 9
    # the tick held back is what makes it so: with every lane's whole share in, the index moves
    shares = sum(ring.lane_share(lane, 3) for lane in range(3))
    assert (9 * ring.LAUNCH_TICKS + shares) >> ring.TICK_BITS == 10


def _random_order(rng, lanes):
    """A random interleaving of each lane's create and end, each end after its create."""
    steps = []
    for lane in rng.permutation(lanes).tolist():
        steps.insert(rng.integers(len(steps) + 1), (lane, "create"))
        after = steps.index((lane, "create"))
        steps.insert(rng.integers(after + 1, len(steps) + 1), (lane, "end"))
    return steps


def _counted_twice(lanes):
    """Every lane creates two Profilers, then ends both."""
    return [(lane, "create") for lane in range(lanes)] * 2 + [(lane, "end") for lane in range(lanes)] * 2


@pytest.mark.parametrize("seed", range(12))
def test_closed_copies_count_whole_launches_and_late_readers_read_their_own(seed):
    """The protocol of window.count_copy with ring.count_parts (the constants it bakes): each of a launch's
    units (warps, or blocks with the window empty) reads TICKS in its decision, then adds its part (the
    first also the remainder), in any order, over several launches: every read sees its own launch's
    index, and each launch adds exactly 2**24. A split with a part of 0 is refused."""
    rng = np.random.default_rng(seed)
    ticks = 0
    for launch in range(4):
        units = int(rng.integers(1, 5000)) if seed % 2 else int(rng.choice([1, 3, 7, 1 << 20, 3 << 20, 1 << 24]))
        part, remainder = ring.count_parts(units)
        adds = np.full(units, part, np.int64)
        adds[0] += remainder
        order = rng.permutation(units)
        reads = ticks + np.concatenate([[0], np.cumsum(adds[order])[:-1]])  # each unit reads before its add
        assert (reads >> ring.TICK_BITS == launch).all()
        ticks += int(adds.sum())
        assert ticks == (launch + 1) * ring.LAUNCH_TICKS
    for units in (0, ring.LAUNCH_TICKS + 1):
        with pytest.raises(ValueError, match="count_parts"):
            ring.count_parts(units)


def test_a_lane_counted_twice_is_a_sticky_count_error():
    """Every lane counted twice in a recording launch (two Profilers for one group, both alive at once)
    keeps TICKS a whole number of launches at the end, but not at the L-th finalize: DONE is left at
    COUNT_ERROR, no later launch records, and the host refuses to read the ring until it is re-armed."""
    c = control(start=0, stop=ring.OPEN_ENDED, slots=4)
    ring.run_launch(c, 4, 3, _counted_twice(3))
    assert int(c[ring.DONE]) % ring.U32 >= ring.COUNT_ERROR
    assert int(c[ring.FILLED_EVERY]) & 0xFFFF == 0 and c[ring.SLOT_EPOCHS] == 0  # no slot for it (as the PTX)
    assert ring.decide(c, 4)[1] is False  # sticky: the next launch does not record
    state_before = c.copy()
    ring.run_launch(c, 4, 3)
    assert (c[ring.FILLED_EVERY] == state_before[ring.FILLED_EVERY]).all()


def test_launches_refuse_a_count_error_and_name_the_cure():
    pytest.importorskip("torch")
    session = session_of(spec_of(window_slots=2))
    session.ring.open()
    c = session.ring.control.numpy()
    ring.run_launch(c, 2, session.spec.num_lanes, _counted_twice(session.spec.num_lanes))
    with pytest.raises(DecodeError, match=r"counted twice.*arm\(reset_epoch=True\)"):
        session.ring.launches()
    session.ring.arm()  # clears the error and rounds the count down to a whole launch
    state = session.ring.state()
    assert not state["count_error"] and state["ticks_pending"] == 0 and session.ring.launches() == []


# --- host side on a CPU torch buffer ---------------------------------------------------------------------


def session_of(spec):
    pytest.importorskip("torch")  # CI without torch still runs the rule and compile tests
    from ikp_cute import Session

    return Session(spec, groups=["producer", "consumer"], device="cpu", kernel="toy")


def fake_launch(session, t0: int):
    """What one launch of a 4-block x 2-group kernel does, following the reference rule: each lane writes
    anchors, one region, finalize into its slot if the launch records; then the last lane closes."""
    import torch

    spec, r = session.spec, session.ring
    c = r.control.numpy()  # shares memory with the buffer (CPU)
    _, recording, slot = ring.decide(c, spec.window_slots)
    if recording:
        b = BufferBuilder(spec.num_blocks, spec.num_groups, spec.records_per_lane, spec.write_stride)
        for lane in range(spec.num_lanes):
            b.anchor(lane, t0 + lane)
            b.put(lane, t0 + lane + 10, 0, B).put(lane, t0 + lane + 110, 0, E)
            b.put(lane, t0 + lane + 120, 3, F, k=spec.records_per_lane - 1)
        r.ring[slot, : spec.v1_slots] = torch.from_numpy(b.buf.view(np.int64))
    ring.run_launch(c, spec.window_slots, spec.num_lanes)


def test_window_on_host_records_launches_k_to_k_plus_n():
    session = session_of(spec_of(window_slots=4))
    session.window(start=5, count=3)
    for i in range(12):
        fake_launch(session, 1_000_000 * (i + 1))
    state = session.ring.state()
    assert state["epoch"] == 12 and state["filled"] == 3 and state["slot_launches"] == [5, 6, 7]
    assert [launch for launch, _, _ in session.launches()] == [5, 6, 7]


def test_relative_window_counts_from_the_next_launch():
    session = session_of(spec_of(window_slots=4))
    for i in range(7):
        fake_launch(session, 1_000_000 * (i + 1))
    session.window(start=2, count=2, every=3, relative=True)  # launches 7+2=9 and 12
    for i in range(7, 20):
        fake_launch(session, 1_000_000 * (i + 1))
    assert session.ring.state()["slot_launches"] == [9, 12]


def test_ring_full_counts_and_never_overwrites():
    session = session_of(spec_of(window_slots=2))
    session.window(start=0, count=5)
    for i in range(8):
        fake_launch(session, 1_000_000 * (i + 1))
    state = session.ring.state()
    assert state["filled"] == 2 and state["lost_launches"] == 3
    traces = session.ring.decode()
    # slot 0 still holds launch 0's records (t0 = 1e6), slot 1 launch 1's: nothing overwritten
    assert [t.meta["launch_index"] for t in traces] == [0, 1]
    assert [int(t.spans["start_ns"].min()) for t in traces] == [1_000_010, 2_000_010]
    assert all(t.meta["ring"]["lost_launches"] == 3 for t in traces)


def test_rearm_empties_ring_and_keeps_counting_launches():
    session = session_of(spec_of(window_slots=2))
    session.window(start=0, count=100)
    for i in range(3):
        fake_launch(session, 1_000_000 * (i + 1))
    session.reset()  # = ring.arm(): slots zeroed, filled and LOST back to 0, window and epoch kept
    state = session.ring.state()
    assert state["filled"] == 0 and state["lost_launches"] == 0 and state["epoch"] == 3
    assert not session.ring.ring[:, 1:].any()
    header = wire.pack_header(4, 2)
    assert (session.ring.ring[:, 0] == header).all()
    fake_launch(session, 9_000_000)
    assert session.ring.state()["slot_launches"] == [3]


def test_record_while_records_the_block_only():
    session = session_of(spec_of(window_slots=8))
    for i in range(3):
        fake_launch(session, 1_000_000 * (i + 1))
    with session.record_while():
        for i in range(3, 5):
            fake_launch(session, 1_000_000 * (i + 1))
    for i in range(5, 7):
        fake_launch(session, 1_000_000 * (i + 1))
    state = session.ring.state()
    assert state["slot_launches"] == [3, 4]
    assert state["window"]["start"] == state["window"]["stop"] == 5  # left empty: no TICKS load after it


def test_host_updates_are_device_ops(monkeypatch):
    """window()/record_while()/arm() never read the control block back: on a CUDA buffer they are
    stream-ordered device ops (no sync, capturable in a graph). Any read-back is caught here."""
    session = session_of(spec_of(window_slots=2))
    import torch

    reads = []
    for name in ("cpu", "numpy", "item", "tolist", "__int__", "__bool__"):
        real = getattr(torch.Tensor, name)
        def probe(self, *a, _real=real, _name=name, **k):
            reads.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, probe)
    session.window(start=2, count=3, every=2)
    with session.record_while():
        pass
    session.ring.arm()
    assert reads == []
    session.ring.state()  # the probe itself works: state() reads back
    assert reads


def test_single_launch_calls_refuse_a_ring_session():
    session = session_of(spec_of(window_slots=2))
    with pytest.raises(RuntimeError, match="ring"):
        session.decode()
    with pytest.raises(RuntimeError, match="window_slots"):
        session_of(spec_of(window_slots=0)).window(0, 1)


def test_save_refuses_to_mix_sessions(tmp_path):
    session = session_of(spec_of(window_slots=2))
    session.window(start=0, count=2)
    for i in range(2):
        fake_launch(session, 1_000_000 * (i + 1))
    first = session.ring.save(tmp_path)
    with pytest.raises(FileExistsError, match="launch_"):
        session.ring.save(tmp_path)
    assert session.ring.save(tmp_path, force=True) == first
    expected = [p.name for p in first] + [p.with_suffix(".json").name for p in first] + ["launch_ring.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)


def test_launches_decode_each_slot_and_stats_reads_the_session(tmp_path, capsys):
    from host_decode.cli import main

    session = session_of(spec_of(window_slots=4))
    session.window(start=1, count=3, every=2)  # launches 1, 3, 5
    for i in range(8):
        fake_launch(session, 1_000_000 * (i + 1))
    paths = session.ring.save(tmp_path / "cap")
    assert [p.name for p in paths] == ["launch_000001.npy", "launch_000003.npy", "launch_000005.npy"]
    side = json.loads(paths[0].with_suffix(".json").read_text())
    assert side["launch_index"] == 1 and side["ring"]["slots"] == 4 and side["ring"]["launches_seen"] == 8
    for t in session.ring.decode():
        assert t.loss.lost == 0 and len(t.spans) == 8
    assert main(["stats", str(tmp_path / "cap"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["launches"] == 3 and out["records_lost"] == 0
    assert sum(row["count"] for row in out["regions"]) == 24  # 3 launches x 8 lanes, one span each


def add_strays(session, count):
    """The device's count of records from lanes outside the session (ring.py: STRAY)."""
    ring._add64(session.ring.control.numpy(), ring.STRAY, count)


def test_stray_records_of_a_ring_session_include_the_ring_word():
    """With a window strays are counted in the ring's STRAY word, never in a slot's: session.stray_records()
    must report them (it summed the per-slot words only, always 0)."""
    session = session_of(spec_of(window_slots=3))
    session.window(start=0, count=2)
    for i in range(3):
        fake_launch(session, 1_000_000 * (i + 1))
    add_strays(session, 40)
    assert session.stray_records() == 40


def test_stats_and_report_of_a_saved_ring_show_lost_launches_and_strays(tmp_path, capsys):
    """A ring of 2 slots, window of 10 launches from launch 1, 6 launches: 1 and 2 recorded, 3, 4, 5 lost;
    40 stray records. `ikp stats` (text and JSON) and `ikp report` of the directory say so."""
    from host_decode.cli import main
    from host_decode.reports.html import extract_data

    session = session_of(spec_of(window_slots=2))
    session.window(start=1, count=10)
    for i in range(6):
        fake_launch(session, 1_000_000 * (i + 1))
    add_strays(session, 40)
    session.ring.save(tmp_path / "cap")
    line = "ring: 6 launches seen, 2 recorded, 3 lost to a full ring, 40 stray records"
    assert main(["stats", str(tmp_path / "cap")]) == 0
    assert line in capsys.readouterr().out
    assert main(["stats", str(tmp_path / "cap"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["launches"] == 2 and out["ring"] == {"launches_seen": 6, "recorded": 2, "lost_launches": 3,
                                                   "stray_records": 40, "launches_without_records": [], "rings": 1}
    page = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "cap"), "-o", str(page)]) == 0
    kernel = extract_data(page.read_text())["kernel"]
    assert kernel["meta"]["ring"] == line and kernel["ring"]["lost_launches"] == 3
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "cap" / "launch_000002.npy"), "--format", "json"]) == 0  # one launch too
    assert json.loads(capsys.readouterr().out)["ring"]["stray_records"] == 40


def test_save_of_a_window_that_never_opened_says_so(tmp_path, capsys):
    """A window never reached: save() warns, writes the ring block to launch_ring.json, and `ikp stats DIR`
    says the window recorded no launch (with the counts), not only that the directory holds no capture."""
    from host_decode.cli import main

    session = session_of(spec_of(window_slots=3))
    session.window(start=100, count=2)
    for i in range(5):
        fake_launch(session, 1_000_000 * (i + 1))
    add_strays(session, 12)
    with pytest.warns(UserWarning, match=r"no launch recorded.*start 100, stop 102.*5 launches"):
        assert session.ring.save(tmp_path / "cap") == []
    summary = json.loads((tmp_path / "cap" / "launch_ring.json").read_text())
    assert summary["ring"]["launches_seen"] == 5 and summary["ring"]["stray_records"] == 12 and summary["saved"] == []
    with pytest.warns(UserWarning, match="no launch recorded"):
        assert session.ring.decode() == []
    assert main(["stats", str(tmp_path / "cap")]) != 0
    err = capsys.readouterr().err
    assert "window (start 100, stop 102, every 1) recorded no launch" in err
    assert "5 launches seen, 0 recorded" in err and "12 stray records" in err


def test_a_launch_without_records_is_counted_not_fatal(tmp_path, capsys):
    """Launch 1 records into slot 1 but its lanes write nothing (the slot holds only its header): the other
    launches decode, save and merge; launch 1 is listed in the ring block, never blamed as "slot 1" of a
    buffer."""
    from host_decode.cli import main

    session = session_of(spec_of(window_slots=4))
    session.window(start=0, count=3)
    fake_launch(session, 1_000_000)
    ring.run_launch(session.ring.control.numpy(), 4, session.spec.num_lanes)  # recorded, wrote nothing
    fake_launch(session, 3_000_000)
    with pytest.warns(UserWarning, match=r"launch\(es\) \[1\] wrote no record"):
        traces = session.ring.decode()
    assert [t.meta["launch_index"] for t in traces] == [0, 2]
    assert traces[0].meta["ring"]["launches_without_records"] == [1]
    with pytest.warns(UserWarning, match="wrote no record"):
        paths = session.ring.save(tmp_path / "cap")
    assert [p.name for p in paths] == ["launch_000000.npy", "launch_000002.npy"]
    assert main(["stats", str(tmp_path / "cap"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["launches"] == 2 and out["ring"]["recorded"] == 3 and out["ring"]["launches_without_records"] == [1]
    assert main(["merge", str(tmp_path / "cap"), "-o", str(tmp_path / "m.json")]) == 0


def _corrupt(word, value=None, add=None):
    def apply(c):
        if add is not None:
            ring._add64(c, word, add)
        else:
            c[word] = value
    return apply


@pytest.mark.parametrize("slots, corrupt, match", [
    (4, _corrupt(ring.FILLED_EVERY, 6 | 1 << 16), "FILLED is 6, but the ring has 4 slots"),
    (3, _corrupt(ring.FILLED_EVERY, 4 | 1 << 16), "FILLED is 4, but the ring has 3 slots"),  # 3 slots: a padding word
    (3, _corrupt(ring.LOST, add=-ring.LAUNCH_TICKS), r"LOST counts 1099511627775 launches.*3 launches seen"),
    (8, _corrupt(ring.LOST, add=2 * ring.LAUNCH_TICKS), r"LOST counts 2 launches; with FILLED = 3.*3 launches seen"),
    (3, _corrupt(ring.STRAY, add=-7), "STRAY is 18446744073709551609, negative"),
    (3, _corrupt(ring.TICKS + 1, -1), "TICKS counts 1099511627523 launches, past the 32-bit launch index"),
], ids=["filled>slots", "filled>slots-padding-word", "lost-wrapped", "lost>seen", "stray-negative", "ticks-huge"])
def test_impossible_counters_are_refused_naming_the_counter(slots, corrupt, match):
    session = session_of(spec_of(window_slots=slots))
    session.window(start=0, count=3)
    for i in range(3):
        fake_launch(session, 1_000_000 * (i + 1))
    corrupt(session.ring.control.numpy())
    for read in (session.ring.launches, session.ring.decode, session.stray_records):
        with pytest.raises(DecodeError, match=f"ring: impossible control block: {match}"):
            read()


def test_a_buffer_of_another_spec_is_refused_naming_both_sizes():
    import torch

    session = session_of(spec_of(window_slots=3))
    session.buffer = torch.zeros(session.spec.buffer_slots - 7, dtype=torch.int64)
    with pytest.raises(DecodeError, match=r"ring: buffer of 465 int64 words for a ring of 3 slots, which needs 472"):
        ring.Ring(session)


def test_a_launch_of_a_ring_is_named_alike_in_every_output(tmp_path, capsys):
    """launch_000002.npy of kernel "toy": its .pftrace root track is "toy (launch 2)"; the .json trace
    carries the same title, and `ikp decode`'s summary names the launch."""
    from host_decode.cli import main

    session = session_of(spec_of(window_slots=3))
    session.window(start=2, count=1)
    for i in range(3):
        fake_launch(session, 1_000_000 * (i + 1))
    (path,) = session.ring.save(tmp_path / "cap")
    assert main(["decode", str(path), "-o", str(tmp_path / "t.json")]) == 0
    assert "toy (launch 2)" in capsys.readouterr().out
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["title"] == "toy (launch 2)"


# --- compile-time (sm_90a PTX, no GPU) --------------------------------------------------------------------


def compile_ws(spec):
    pytest.importorskip("cutlass")
    import cutlass.cute as cute
    from cutlass import Float32, Int32
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import fake_buffer
    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels import structured

    x = make_fake_compact_tensor(Float32, (1024,))
    return cute.compile(structured.launch_warp_specialized, x, Int32(3), fake_buffer(spec), spec, (4, 1, 1),
                        options=sass.keep_options())


def _lines(ptx_text, needle):
    """PTX statements (inline asm puts several on one line) that contain `needle`."""
    statements = (st.strip(" {}\t") for line in ptx_text.splitlines() for st in line.split("//")[0].split(";"))
    return [st for st in statements if needle in st]


@pytest.mark.parametrize("mode", ["cursor", "static", "atomic"])
def test_window_is_one_predicated_load_per_lane_and_records_are_unchanged(mode):
    windowed = compile_ws(spec_of(mode=mode, window_slots=4)).__ptx__
    plain = compile_ws(spec_of(mode=mode, window_slots=0)).__ptx__
    loads = _lines(windowed, ".v4.u32")
    # create: one predicated v4 load; finalize: the last lane's predicated re-read
    assert len(loads) == 2 and all(re.match(r"@!?%?\w+ ld\.", line) for line in loads), loads
    assert len(_lines(windowed, "atom.acq_rel.gpu.global.add.u32")) == 1
    assert _lines(plain, ".v4.u32") == [] and _lines(plain, "atom.acq_rel") == []
    # every record store of the kernel is still there, unchanged in number
    records = lambda text: [line for line in _lines(text, "st.global") if "relaxed" not in line]  # noqa: E731
    assert len(records(windowed)) == len(records(plain))


def test_disabled_spec_with_window_is_the_uninstrumented_kernel():
    pytest.importorskip("cutlass")
    import cutlass.cute as cute
    from cutlass import Float32, Int32
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing import ptx, sass
    from ikp_cute.testing.kernels import plain, structured

    x = make_fake_compact_tensor(Float32, (1024,))
    off = cute.compile(structured.launch_structured, x, Int32(3), None, ProfileSpec(enabled=False, window_slots=4),
                       (4, 1, 1), options=sass.keep_options())
    bare = cute.compile(plain.launch_structured, x, Int32(3), (4, 1, 1), options=sass.keep_options())
    assert ptx.normalize(off.__ptx__) == ptx.normalize(bare.__ptx__)


def test_window_rule_in_ptx_uses_the_ring_layout():
    text = compile_ws(spec_of(window_slots=5)).__ptx__
    assert "setp.lt.and.u32 r, filled, 5, w;" in text  # the ring size is a compile-time constant
    assert f"[$1+{4 * ring.DONE}]" not in text  # operands were substituted
    assert re.search(rf"atom\.acq_rel\.gpu\.global\.add\.u32\s+\S+,\s*\[ctl\+{4 * ring.DONE}\]", text)
    # every lane counts itself at create less one tick, and adds that tick at finalize, fire-and-forget
    assert len(_lines(text, f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}], held")) == 1
    assert len(_lines(text, f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}], 1")) == 1
    assert len(_lines(text, f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.LOST}], sh")) == 1
    # the decision reads the window words and DONE in one load of line 0 (a count error stops recording),
    # and TICKS only when the window is not empty (a closed window never waits on the counters the
    # lanes' adds land on, 512 bytes away)
    assert len(_lines(text, ".v4.u32 {f, s, t, done}, [ctl]")) == 2
    assert len(_lines(text, f"ld.global.v2.u32 {{lo, hi}}, [ctl+{4 * ring.TICKS}]")) == 1  # create
    assert len(_lines(text, f"ld.relaxed.gpu.global.v2.u32 {{lo, hi}}, [ctl+{4 * ring.TICKS}]")) == 1  # last lane
    # at create, an empty window branches past every use of TICKS (its load is issued, never waited for)
    assert len(_lines(text, "@!x bra DECIDED")) == 1 and "DECIDED:" in text
    # the share's division only for a grid other than the spec's (8 lanes here: a constant share)
    assert len(_lines(text, "@x bra SHARE_KNOWN")) == 1
    assert f"mov.u32 q, {ring.LAUNCH_TICKS // 8};" in text
    assert not _lines(text, "red.relaxed.gpu.global.add.u64 [ctl],")
    assert ring.START * 4 < 128 and ring.DONE * 4 < 128 and ring.TICKS * 4 >= 512 and ring.STRAY * 4 >= 512


def test_window_branch_counts_its_plain_copy_with_one_add_and_no_profiler():
    """window_branch (ikp_cute/testing/kernels/window_branch_kernel.py): the plain copy reads no timer
    and stores no record; it counts itself with one add (per block with the window empty, per warp
    otherwise: window.count_copy); the recorded copy counts at create and finalize as any Profiler."""
    pytest.importorskip("cutlass")
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import fake_buffer
    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels import window_branch_kernel as kernel

    def ptx(window_slots):
        spec = ProfileSpec(num_groups=2, num_blocks=4, records_per_lane=8, events=kernel.EVENTS,
                           window_slots=window_slots)
        taken = make_fake_compact_tensor(Int32, (4 * kernel.WARPS,))
        return cute.compile(kernel.launch_branch, taken, Int32(1), fake_buffer(spec), spec, 4, False,
                            options=sass.keep_options()).__ptx__

    text, recorded_only = ptx(3), ptx(0)
    ticks = f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}]"
    # the recorded copy: its share less a tick at create, the tick at finalize; the plain copy: one add at
    # its start, of the block's part (window empty) or the warp's (and the warp's to LOST when the full
    # ring cannot hold the launch)
    assert len(_lines(text, f"{ticks}, held")) == 1 and len(_lines(text, f"{ticks}, 1")) == 1
    assert len(_lines(text, f"{ticks}, amount")) == 1
    assert len(_lines(text, f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.LOST}], amount")) == 1
    assert len(_lines(text, ".v4.u32")) == 3  # decision, create, the last finalizer's re-read
    # 4 blocks x 2 groups x 4 warps: the spec's own grid gives each block and each warp a constant part
    (block_part, block_rest), (warp_part, warp_rest) = ring.count_parts(4), ring.count_parts(32)
    assert f"selp.u32 part, {block_part}, {warp_part}, empty;" in text
    assert f"selp.u32 extra, {block_rest}, {warp_rest}, empty;" in text
    assert len(_lines(text, "@x bra PART_KNOWN")) == 1
    timer_reads = lambda ptx_text: len(_lines(ptx_text, "%globaltimer"))  # noqa: E731
    assert timer_reads(text) == timer_reads(recorded_only) > 0  # the plain copy reads no timer
    assert text.count("bar.sync") == 2 * recorded_only.count("bar.sync") > 0  # both copies meet at the barrier


def test_fa4_with_capture_window_runs_its_own_code_when_closed():
    """FA4's sm90 forward (examples/fa4_sm90 subclass, baked address) with window_slots: each role's body
    is traced twice (ikp_cute.window_branch picks the copy once per role and launch), so a closed window
    runs FA4's own code: the tensor-core work appears exactly twice, the recorded copy records what a
    window-less build records, and the window costs per role: one decision load and one add where the
    closed copy counts itself (the consumers before FA4's code, the producer after it), and in the
    recorded copy one load at create, one re-read by the last finalizer and one DONE atomic; the closed
    copy holds no Profiler (no timer read)."""
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm90")
    from tests.support.examples import BAKED, compile_fa4, import_example, profile_spec, timer_reads

    fi = import_example("fa4_sm90", "fa4_instrumented")
    nb = fi.num_ctas(1, 1024, 4)
    plain = compile_fa4(None, None)
    spec = profile_spec(fi.events_for("iter"), 3, nb, 128, baked=BAKED, window_slots=10)
    windowed = compile_fa4(spec, "iter")
    flat = compile_fa4(profile_spec(fi.events_for("iter"), 3, nb, 128, baked=BAKED), "iter")
    assert windowed.count("wgmma.mma_async") == 2 * plain.count("wgmma.mma_async") > 0
    # per role: the decision, create, the last finalizer's re-read; and the producer's count after its
    # loads (count_at="end") reads the window words again (empty or not: per block or per warp)
    assert len(_lines(windowed, ".v4.u32")) == 2 * (1 + 1 + 1) + 1 and len(_lines(windowed, "atom.acq_rel.gpu")) == 2
    # per role: each warp's part at the closed copy's start, the recorded copy's count at create and its
    # held tick at finalize
    ticks = f"red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}]"
    assert len(_lines(windowed, f"{ticks}, amount")) == 2
    assert len(_lines(windowed, f"{ticks}, held")) == 2 and len(_lines(windowed, f"{ticks}, 1")) == 2
    assert timer_reads(windowed) == timer_reads(flat)  # the closed copies read no timer


def test_a_window_spec_refuses_several_writers_per_lane():
    """leader= would count a lane once per writer: refused while tracing, naming the alternative."""
    pytest.importorskip("cutlass")
    from ikp_cute import ProfileUsageError

    with pytest.raises(ProfileUsageError, match="leader=.*without window_slots"):
        compile_multi_writer(spec_of(mode="atomic", window_slots=2))
    compile_multi_writer(spec_of(mode="atomic", window_slots=0))  # the same kernel without a window compiles


def compile_multi_writer(spec):
    import cutlass.cute as cute
    from cutlass import Float32, Int32
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import fake_buffer
    from ikp_cute.testing.kernels import structured

    x = make_fake_compact_tensor(Float32, (1024,))
    return cute.compile(structured.launch_multi_writer, x, Int32(3), fake_buffer(spec), spec, (4, 1, 1))
