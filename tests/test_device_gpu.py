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

MODES = ("cursor", "atomic", "static")
ITERS = 5


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def run_structured(
    torch,
    mode,
    records_per_lane=64,
    grid=(4, 1, 1),
    write_stride=None,
    bake=False,
    iters=ITERS,
    stage="global",
    lean=False,
):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import structured

    num_blocks = grid[0] * grid[1] * grid[2]
    session = ikp_cute.Session(
        groups=["g0", "g1"],
        num_blocks=num_blocks,
        records_per_lane=records_per_lane,
        write_stride=write_stride,
        mode=mode,
        bake_address=bake,
        kernel="structured_kernel",
        stage=stage,
        lean=lean,
    )
    x = torch.randn(num_blocks * 256, device="cuda", dtype=torch.float32)
    x_ref = x.clone()
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(
        structured.launch_structured,
        x_arg,
        Int32(iters),
        session.kernel_arg(),
        session.spec,
        grid,
    )
    with session:
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
    if mode == "cursor":  # program-order nesting (depth) is what the cursor layout preserves
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
    assert structures[0] == structures[1] == structures[2]


@pytest.mark.parametrize("mode", MODES)
def test_overflow_is_dropped_on_device_and_counted_exactly(torch, mode):
    from ikp_cute.testing.kernels.structured import expected_dropped

    rpl = 16
    session = run_structured(torch, mode, records_per_lane=rpl)
    trace = session.decode()
    for lane in range(8):
        row = trace.lanes[trace.lanes["lane"] == lane][0]
        assert row["dropped"] == expected_dropped(ITERS, lane % 2, mode, rpl), (
            mode,
            lane,
        )
    # nothing was written outside the lanes' slots: the v1 part has exactly header + 8 lanes x rpl slots
    buf = session.buffer.cpu().numpy().view(np.uint64)
    body = buf[1 : session.spec.v1_slots]
    lane_of_slot = np.arange(body.size) % session.spec.write_stride
    assert np.all(body[lane_of_slot >= 8] == 0)
    assert session.dropped_on_device() == sum(expected_dropped(ITERS, g % 2, mode, rpl) for g in range(8))


def test_atomic_mode_with_several_writers_per_lane(torch):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import structured

    session = ikp_cute.Session(groups=2, num_blocks=4, records_per_lane=8 * ITERS + 8, mode="atomic")
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
    with session:
        compiled(x_arg, Int32(ITERS), session.kernel_arg())
    trace = session.decode()
    assert trace.loss.lost == 0, trace.loss.dumps()
    counts = np.bincount(trace.spans["lane"], minlength=8)
    assert counts.tolist() == [4 * ITERS] * 8
    assert np.all(trace.spans["end_ns"] >= trace.spans["start_ns"])


@pytest.mark.parametrize("records_per_lane", [64, 16])
def test_smem_stage_matches_global_cursor_exactly(torch, records_per_lane):
    """Staged in shared memory and copied out by finalize: same spans, same drops as the global cursor."""
    from ikp_cute.testing.kernels.structured import expected_dropped

    glob = run_structured(torch, "cursor", records_per_lane=records_per_lane).decode()
    smem = run_structured(torch, "cursor", records_per_lane=records_per_lane, stage="smem").decode()
    key = lambda t: sorted(
        zip(
            t.spans["lane"].tolist(),
            t.spans["event"].tolist(),
            t.spans["depth"].tolist(),
        )
    )
    assert key(smem) == key(glob)
    assert smem.lanes["dropped"].tolist() == [
        expected_dropped(ITERS, lane % 2, "cursor", records_per_lane) for lane in range(8)
    ]
    if records_per_lane == 64:
        assert smem.loss.lost == 0


@pytest.mark.parametrize("records_per_lane", [64, 16])
def test_lean_state_matches_register_cursor_exactly(torch, records_per_lane):
    """Lane state in shared memory, re-read at every record: same spans, same drops as the cursor."""
    from ikp_cute.testing.kernels.structured import expected_dropped

    regs = run_structured(torch, "cursor", records_per_lane=records_per_lane).decode()
    lean = run_structured(torch, "cursor", records_per_lane=records_per_lane, lean=True).decode()
    key = lambda t: sorted(zip(t.spans["lane"].tolist(), t.spans["event"].tolist(), t.spans["depth"].tolist()))
    assert key(lean) == key(regs)
    assert lean.lanes["dropped"].tolist() == [
        expected_dropped(ITERS, lane % 2, "cursor", records_per_lane) for lane in range(8)
    ]
    assert lean.loss.lost == (0 if records_per_lane == 64 else regs.loss.lost)


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


@pytest.mark.parametrize("lean", [False, True])
def test_grid_larger_than_session_writes_nothing_out_of_bounds(torch, lean):
    """A session sized for 4 blocks, launched on 6: lanes past write_stride must not write."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import structured

    session = ikp_cute.Session(groups=2, num_blocks=4, records_per_lane=64, lean=lean)
    guard = torch.full((4096,), -1, dtype=torch.int64, device="cuda")  # allocated next; must stay intact
    x = torch.randn(6 * 256, device="cuda")
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(
        structured.launch_structured,
        x_arg,
        Int32(ITERS),
        session.kernel_arg(),
        session.spec,
        (6, 1, 1),
    )
    with session:
        compiled(x_arg, Int32(ITERS), session.kernel_arg())
    assert torch.all(guard == -1)
    header = int(session.records()[0])
    assert wire.unpack_header(header) == (6, 2)  # the device wrote the launched grid
    # every in-range lane still recorded and finalized (its slot of the last record row is a FINALIZE)
    finals = session.records()[1 + 63 * 8 : 1 + 64 * 8].view(np.uint64)
    assert [int(v) & 3 for v in finals] == [int(wire.EventType.FINALIZE)] * 8
    assert [(int(v) & 0xFFFFFFFF) >> wire.LANE_SHIFT for v in finals] == list(range(8))


def test_disabled_session_runs_without_buffer(torch):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import structured

    session = ikp_cute.Session(groups=2, num_blocks=4, enabled=False)
    assert session.buffer is None and session.kernel_arg() is None
    x = torch.randn(4 * 256, device="cuda")
    ref = x.clone()
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(structured.launch_structured, x_arg, Int32(ITERS), None, session.spec, (4, 1, 1))
    compiled(x_arg, Int32(ITERS), None)
    torch.cuda.synchronize()
    assert not torch.equal(x, ref)


def test_save_and_load_capture_round_trip(torch, tmp_path):
    from host_decode.core.decoder import load_capture

    session = run_structured(torch, "cursor")
    path = session.save(tmp_path / "cap.npy")
    trace = load_capture(path)
    assert trace.names.event(session.spec.events.id("outer")) == "outer"
    assert len(trace.spans) == len(session.decode().spans)
    assert trace.meta.get("mode") == "cursor"
