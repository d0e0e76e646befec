"""GPU tests of the ikp_cute device side (skipped without CUDA; run on the H100/H200 machine through
gpu/device_suite.py): decoded records match the program exactly in every mode, overflow is counted
exactly, baked addresses, 3-D grids, persistent strides and disabled sessions work."""

from __future__ import annotations

import os

import numpy as np
import pytest

from host_decode.core import wire

pytestmark = pytest.mark.gpu

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

MODES = ("cursor", "deferred", "smem", "lean", "atomic", "static")
ITERS = 5


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def make_session(mode="cursor", num_blocks=4, records_per_lane=64, write_stride=None, bake=False, groups=("g0", "g1")):
    import ikp_cute

    spec = ikp_cute.ProfileSpec(
        mode=mode,
        num_groups=len(groups),
        num_blocks=num_blocks,
        records_per_lane=records_per_lane,
        write_stride=write_stride,
    )
    return ikp_cute.Session(spec, groups=list(groups), bake_address=bake, kernel="structured_kernel")


def run_structured(
    torch, mode, records_per_lane=64, grid=(4, 1, 1), write_stride=None, bake=False, iters=ITERS, session_blocks=None
):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute.testing.kernels import structured

    num_blocks = grid[0] * grid[1] * grid[2]
    session = make_session(mode, session_blocks or num_blocks, records_per_lane, write_stride, bake)
    x = torch.randn(num_blocks * 256, device="cuda", dtype=torch.float32)
    x_ref = x.clone()
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(structured.launch_structured, x_arg, Int32(iters), session.kernel_arg(), session.spec, grid)
    with session.zeroed_then_synced():
        compiled(x_arg, Int32(iters), session.kernel_arg())
    assert not torch.equal(x, x_ref), "the kernel did not run"
    return session


def lane_records(trace, lane):
    """(time, kind, event name) of the lane's spans and user instants, sorted by time."""
    names = trace.names
    spans = trace.spans[trace.spans["lane"] == lane]
    inst = trace.instants[trace.instants["lane"] == lane]
    rows = [(int(s["start_ns"]), "span", names.event(s["event"])) for s in spans]
    rows += [(int(i["ts_ns"]), "instant", names.event(i["event"])) for i in inst]
    return sorted(rows)


@pytest.mark.parametrize("mode", MODES)
def test_records_match_program_exactly(torch, mode):
    from ikp_cute.testing.kernels.structured import structured_program

    session = run_structured(torch, mode)
    trace = session.decode()
    assert trace.num_blocks == 4 and trace.num_groups == 2
    assert trace.loss.lost == 0, trace.loss.dumps()
    assert trace.absolute  # anchors present on every lane
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    assert len(trace.lanes) == 8
    assert np.all((trace.lanes["sm"] >= 0) & (trace.lanes["sm"] < sm_count))
    for lane in range(8):
        group = lane % 2
        program = structured_program(ITERS, group)
        expected = sorted(
            [("span", ev) for kind, ev, _ in program if kind == "begin"]
            + [("instant", ev) for kind, ev, _ in program if kind == "instant"]
        )
        got = sorted((kind, ev) for _, kind, ev in lane_records(trace, lane))
        assert got == expected, (mode, lane)
    spans = trace.spans
    assert np.all(spans["end_ns"] >= spans["start_ns"])
    # nesting read from times holds in every mode: each inner lies within an outer of its lane
    for lane in range(8):
        s = spans[spans["lane"] == lane]
        outer = s[s["event"] == session.spec.events.id("outer")]
        inner = s[s["event"] == session.spec.events.id("inner")]
        for row in inner:
            assert np.any((outer["start_ns"] <= row["start_ns"]) & (row["end_ns"] <= outer["end_ns"]))
    if mode in ("cursor", "smem", "lean"):  # program-order nesting (depth) is what the cursor layout preserves
        assert set(spans["depth"][spans["event"] == session.spec.events.id("inner")]) == {1}
        assert set(spans["depth"][spans["event"] == session.spec.events.id("outer")]) == {0}


def test_every_mode_gives_the_same_span_structure(torch):
    structures = []
    for mode in MODES:
        trace = run_structured(torch, mode).decode()
        structures.append(
            sorted(
                zip(
                    trace.spans["lane"].tolist(),
                    [trace.names.event(e) for e in trace.spans["event"]],
                )
            )
        )
    assert all(s == structures[0] for s in structures)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rpl", [16, 14])  # 14: warp group 1's "producer" region begins with room for one
def test_overflow_is_dropped_on_device_and_counted_exactly(torch, mode, rpl):
    """Exactly the records past the capacity are dropped and counted, in every mode, and nothing is written
    outside the lanes' slots. rpl=14: a region begins with room for one record (cursor: its END shares the
    BEGIN's check and lands in the DROPPED slot, which finalize rewrites)."""
    from ikp_cute.testing.kernels.structured import expected_dropped

    session = run_structured(torch, mode, records_per_lane=rpl, write_stride=16)  # lanes 8-15 must stay empty
    trace = session.decode()
    for lane in range(8):
        row = trace.lanes[trace.lanes["lane"] == lane][0]
        assert row["dropped"] == expected_dropped(ITERS, lane % 2, mode, rpl), (
            mode,
            lane,
        )
    # nothing was written outside the 8 lanes' slots (write_stride 16 leaves 8 lanes unused in the buffer)
    buf = session.buffer.cpu().numpy().view(np.uint64)
    body = buf[1 : session.spec.v1_slots]
    lane_of_slot = np.arange(body.size) % session.spec.write_stride
    assert np.all(body[lane_of_slot >= 8] == 0)
    assert session.dropped_on_device() == sum(expected_dropped(ITERS, g % 2, mode, rpl) for g in range(8))


def test_atomic_mode_with_several_writers_per_lane(torch):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute.testing.kernels import structured

    session = make_session("atomic", records_per_lane=8 * ITERS + 8)
    x = torch.rand(4 * 256, device="cuda")
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(
        structured.launch_multi_writer,
        x_arg,
        Int32(ITERS),
        session.kernel_arg(),
        session.spec,
        (4, 1, 1),
    )
    with session.zeroed_then_synced():
        compiled(x_arg, Int32(ITERS), session.kernel_arg())
    trace = session.decode()
    assert trace.loss.lost == 0, trace.loss.dumps()
    counts = np.bincount(trace.spans["lane"], minlength=8)
    assert counts.tolist() == [4 * ITERS] * 8
    assert np.all(trace.spans["end_ns"] >= trace.spans["start_ns"])


@pytest.mark.parametrize("mode", ["deferred", "smem", "lean"])
@pytest.mark.parametrize("records_per_lane", [64, 16])
def test_cursor_variants_match_the_register_cursor(torch, mode, records_per_lane):
    """Same spans as the register cursor without overflow; with it, the drops each mode's rule predicts."""
    from ikp_cute.testing.kernels.structured import expected_dropped

    regs = run_structured(torch, "cursor", records_per_lane=records_per_lane).decode()
    other = run_structured(torch, mode, records_per_lane=records_per_lane).decode()
    key = lambda t: sorted(zip(t.spans["lane"].tolist(), t.spans["event"].tolist()))
    if records_per_lane == 64:
        assert key(other) == key(regs)
        assert other.loss.lost == 0
    assert other.lanes["dropped"].tolist() == [
        expected_dropped(ITERS, lane % 2, mode, records_per_lane) for lane in range(8)
    ]


def test_baked_address_records_like_an_argument(torch):
    by_arg = run_structured(torch, "cursor").decode()
    baked = run_structured(torch, "cursor", bake=True).decode()
    assert baked.loss.lost == 0
    assert len(baked.spans) == len(by_arg.spans)


def test_3d_grid_and_wide_write_stride(torch):
    grid = (2, 3, 2)
    session = run_structured(torch, "cursor", grid=grid, write_stride=12 * 2 + 5)
    trace = session.decode()
    assert trace.num_blocks == 12
    assert sorted(set(trace.lanes["block"].tolist())) == list(range(12))
    assert trace.loss.lost == 0


@pytest.mark.parametrize("mode", MODES)
def test_grid_larger_than_session_writes_nothing_out_of_bounds(torch, mode):
    """A session sized for 4 blocks, launched on 6: lanes past write_stride must not write; their records
    are counted in the stray word (every mode but lean, whose lanes past the session are not counted)."""
    from ikp_cute.testing.kernels.structured import structured_program

    guard = torch.full((4096,), -1, dtype=torch.int64, device="cuda")
    session = run_structured(torch, mode, grid=(6, 1, 1), session_blocks=4)
    assert torch.all(guard == -1)
    header = int(session.records()[0])
    assert wire.unpack_header(header) == (6, 2)  # the device wrote the launched grid
    finals = session.records()[1 + 63 * 8 : 1 + 64 * 8].view(np.uint64)
    assert [int(v) & 3 for v in finals] == [int(wire.EventType.FINALIZE)] * 8
    assert [(int(v) & 0xFFFFFFFF) >> wire.LANE_SHIFT for v in finals] == list(range(8))
    per_lane = [len(structured_program(ITERS, g)) for g in (0, 1)]
    assert session.stray_records() == (0 if mode == "lean" else 2 * sum(per_lane))


@pytest.mark.parametrize("mode", ["cursor", "deferred", "smem", "atomic", "static"])
@pytest.mark.parametrize("shift", [1, -1])
def test_dynamic_bad_group_is_dropped_and_counted(torch, mode, shift):
    """group = warp//4 + shift at run time: one warp group gets a group outside 0..1. Its records are
    never written (not in another lane, not before the buffer) and are counted in the stray word."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute.testing.kernels import misuse

    session = make_session(mode, records_per_lane=64)
    before = torch.full((4096,), -1, dtype=torch.int64, device="cuda")
    x = torch.rand(4 * 256, device="cuda")
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(
        misuse.launch_misuse, x_arg, Int32(ITERS), Int32(shift), session.kernel_arg(), session.spec, "dynamic_group", 4
    )
    with session.zeroed_then_synced():
        compiled(x_arg, Int32(ITERS), Int32(shift), session.kernel_arg())
    assert torch.all(before == -1)
    assert session.stray_records() == 4 * (2 * ITERS + 1)  # one bad warp group per block, all its records
    # shift=1: warps 0-3 get group 1, whose leader would be warp 4; shift=-1: warps 4-7 get group 0, whose
    # leader would be warp 0. So no lane has a leader and nothing at all may be written past the header.
    assert np.all(session.records()[1:] == 0)


@pytest.mark.parametrize("mode", ["cursor", "atomic", "lean"])
def test_region_starting_on_the_last_slot_is_counted_exactly(torch, mode):
    """A mark, then regions: with an even capacity a region's BEGIN takes the last slot and its END is
    past the capacity. Exactly the records past the capacity are dropped and counted, and nothing is
    written outside the lanes' slots (atomic, and a lean leaf region: the END lands on the DROPPED slot,
    which finalize rewrites)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute.testing.kernels import misuse

    rpl, iters = 8, 3  # capacity 4: m0, r0 (2 slots), r1's BEGIN on the last slot; 1 + 2 * 3 + 1 = 8 records
    session = make_session(mode, records_per_lane=rpl, write_stride=16)  # lanes 8-15: slots that must stay 0
    x_arg = from_dlpack(torch.rand(4 * 256, device="cuda"), assumed_align=16)
    compiled = cute.compile(
        misuse.launch_misuse, x_arg, Int32(iters), Int32(0), session.kernel_arg(), session.spec, "mark_first", 4
    )
    with session.zeroed_then_synced():
        compiled(x_arg, Int32(iters), Int32(0), session.kernel_arg())
    trace = session.decode()
    assert trace.lanes["dropped"].tolist() == [(1 + 2 * iters + 1) - (rpl - 4)] * 8
    body = session.records()[1 : session.spec.v1_slots]
    assert np.all(body[np.arange(body.size) % session.spec.write_stride >= 8] == 0)
    assert len(trace.spans) == 8, trace.loss.dumps()  # 8 lanes, each with r0 whole (r1's BEGIN alone is no span)


def test_buffer_of_another_session_is_refused(torch):
    """A kernel compiled for one session's spec, given a smaller session's buffer: a trace-time error."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute import ProfileUsageError
    from ikp_cute.testing.kernels import structured

    big, small = make_session(num_blocks=8), make_session(num_blocks=2)
    x_arg = from_dlpack(torch.rand(8 * 256, device="cuda"), assumed_align=16)
    with pytest.raises(ProfileUsageError, match="buffer has"):
        cute.compile(structured.launch_structured, x_arg, Int32(ITERS), small.kernel_arg(), big.spec, (8, 1, 1))


def test_disabled_session_runs_without_buffer(torch):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import structured

    session = ikp_cute.Session(ikp_cute.ProfileSpec(enabled=False, num_groups=2, num_blocks=4))
    assert session.buffer is None and session.kernel_arg() is None
    x = torch.randn(4 * 256, device="cuda")
    ref = x.clone()
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(structured.launch_structured, x_arg, Int32(ITERS), None, session.spec, (4, 1, 1))
    compiled(x_arg, Int32(ITERS), None)
    torch.cuda.synchronize()
    assert not torch.equal(x, ref)


def test_save_and_load_capture_round_trip(torch, tmp_path):
    from host_decode.load.capture import load_capture

    session = run_structured(torch, "cursor")
    path = session.save(tmp_path / "cap.npy")
    trace = load_capture(path)
    assert trace.names.event(session.spec.events.id("outer")) == "outer"
    assert len(trace.spans) == len(session.decode().spans)
    assert trace.meta.get("mode") == "cursor"
