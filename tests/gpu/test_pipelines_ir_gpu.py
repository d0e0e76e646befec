"""The records the IR pass adds, on a GPU (skipped without CUDA; gpu/pipelines_audit.py runs it on the
H100/H200 machine): the kernels of ikp_cute/testing/kernels/pipelines_paths_kernel.py, whose waits no
Python hook sees, run traced at level "all" (every wait a region, every signal an instant), decode with
nothing lost, and every wait is matched to the signal that released it, exactly as the hooked twins of
tests/gpu/test_pipelines_gpu.py are."""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.support.pipelines_gpu import BLOCKS, ITERS, ops_by_pipeline

pytestmark = pytest.mark.gpu

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def run_traced(torch, tmp_path, launch_name: str, swap: bool = False):
    """pipelines_paths_kernel.<launch_name> under trace_pipelines(level="all") (with the kernel's own
    mbarrier_wait swapped in while traced when `swap`), run once on BLOCKS blocks, saved and loaded:
    -> (PipelineAnalysis, metadata)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from host_decode.analysis.pipelines import analyze_pipelines
    from host_decode.load.capture import load_capture
    from ikp_cute.pipelines import session_for, trace_pipelines
    from ikp_cute.testing.kernels import pipelines_paths_kernel as pk

    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    session = session_for(BLOCKS, pk.THREADS // 32, records_per_lane=256, kernel=launch_name)
    with trace_pipelines(session, level="all") as trace, (pk.swapped_wait() if swap else contextlib.nullcontext()):
        compiled = cute.compile(getattr(pk, launch_name), from_dlpack(out), Int32(ITERS), BLOCKS)
    with session.zeroed_then_synced():
        compiled(from_dlpack(out), Int32(ITERS))
    capture = load_capture(trace.save(session, tmp_path / f"{launch_name}.npy"))
    assert capture.loss.lost == 0 and int(capture.lanes["dropped"].sum()) == 0
    meta = trace.metadata()
    assert all(c["untraced"] == 0 and c["ptx_checked"] for c in meta["coverage"].values())
    return analyze_pipelines(capture), meta


def test_a_swapped_wait_is_matched_like_the_hooked_one(torch, tmp_path):
    """PipelineOrder turns with the kernel's own inline-PTX wait swapped in: the IR pass's wait regions are
    matched exactly as test_pipeline_order_turns_are_matched_with_group_zero_a_phase_ahead matches the
    hooked ones (group 0's first wait on each of its stages passes, every other is released by the
    other group's arrive)."""
    analysis, meta = run_traced(torch, tmp_path, "launch_turns", swap=True)
    assert meta["hooks_replaced"] == ["cutlass.cute.arch.mbarrier_wait"]
    found = ops_by_pipeline(analysis)
    warps = 8
    assert found[("turns", "wait")] == {"first_use": BLOCKS * 4 * 2, "matched": BLOCKS * (warps * ITERS - 4 * 2)}, found
    assert analysis.unmatched() == {}
    matched = analysis.waits[analysis.waits["src_ns"] >= 0]
    assert (matched["end_ns"] >= matched["src_ns"]).all()


def test_inline_ptx_waits_and_arrives_are_matched(torch, tmp_path):
    """inline_kernel: the kernel's own barrier `flag` (inline-PTX arrive by warp 0's elected thread, inline-PTX
    wait by the 4 consumer warps) and `ring`'s acquires made by an inline-PTX wait on the barrier the ring
    hands out: every wait matched, first uses of the 2 stages passing."""
    analysis, _ = run_traced(torch, tmp_path, "launch_inline")
    found = ops_by_pipeline(analysis)
    assert found[("flag", "wait")] == {"matched": 4 * BLOCKS}, found
    assert found[("ring", "acquire")] == {"first_use": 2 * BLOCKS, "matched": BLOCKS * (ITERS - 2)}, found
    assert found[("ring", "wait")] == {"matched": 4 * BLOCKS * ITERS}, found
    assert analysis.unmatched() == {}
