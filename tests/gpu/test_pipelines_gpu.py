"""trace_pipelines on a GPU (skipped without CUDA; run on the H100/H200 machine through
gpu/device_suite.py): the small pipeline kernels of ikp_cute/testing/kernels/pipelines_kernel.py run
traced at level "all" (every wait a region, every signal an instant), decode with nothing lost, and every
consumer wait and producer acquire is matched to the signal that released it, including the acquires and
commits a kernel makes by calling a pipeline's arrays itself."""

from __future__ import annotations

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


def run_traced(torch, tmp_path, launch_name: str):
    """Compile pipelines_kernel.<launch_name> under trace_pipelines(level="all"), run it once on BLOCKS
    blocks, save and load the capture: -> (Trace, PipelineAnalysis, metadata)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from host_decode.analysis.pipelines import analyze_pipelines
    from host_decode.load.capture import load_capture
    from ikp_cute.pipelines import session_for, trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    session = session_for(BLOCKS, pk.THREADS // 32, records_per_lane=256, kernel=launch_name)
    with trace_pipelines(session, level="all") as trace:
        compiled = cute.compile(getattr(pk, launch_name), from_dlpack(out), Int32(ITERS), BLOCKS)
    with session.zeroed_then_synced():
        compiled(from_dlpack(out), Int32(ITERS))
    capture = load_capture(trace.save(session, tmp_path / f"{launch_name}.npy"))
    assert capture.loss.lost == 0 and int(capture.lanes["dropped"].sum()) == 0
    return capture, analyze_pipelines(capture), trace.metadata()


def test_direct_array_calls_are_matched_as_their_pipelines_ops(torch, tmp_path):
    """direct_kernel: warp 0 acquires and commits by calling the arrays of a list element and of a
    holder's attribute; warp group 1 waits and releases through the pipelines' methods. Each of the
    ITERS acquires per block is the pipeline's own (first use passes, the rest matched to a release),
    and each consumer wait is matched to a commit."""
    capture, analysis, meta = run_traced(torch, tmp_path, "launch_direct")
    assert {p["name"] for p in meta["pipelines"]} == {"listed", "held"}
    found = ops_by_pipeline(analysis)
    for name in ("listed", "held"):
        assert found[(name, "acquire")] == {"first_use": BLOCKS, "matched": BLOCKS * (ITERS - 1)}, found
        assert found[(name, "wait")] == {"matched": 4 * BLOCKS * ITERS}, found  # 4 consumer warps
    assert analysis.unmatched() == {}


def test_producer_and_consumer_handles_are_matched(torch, tmp_path):
    """participants_kernel (cutlass's PipelineProducer / PipelineConsumer handles, 3 stages): every wait
    matched; the producer's tail() acquires each stage once more after its last commit."""
    capture, analysis, meta = run_traced(torch, tmp_path, "launch_participants")
    (ring,) = meta["pipelines"]
    stages = ring["num_stages"]
    found = ops_by_pipeline(analysis)
    assert found[("ring", "wait")] == {"matched": 4 * BLOCKS * ITERS}, found
    acquires = found[("ring", "acquire")]
    assert acquires.get("first_use") == BLOCKS * stages, found
    assert sum(acquires.values()) == BLOCKS * (ITERS + stages), found
    assert analysis.unmatched() == {}


def test_a_tokenless_wait_beside_another_rings_poll_is_matched(torch, tmp_path):
    """two_rings_kernel: ring b's wait has no token while ring a's poll token is in scope. Every wait of
    ring b is recorded (no poll can skip it) and matched to a commit; ring a's waits run only when its
    poll failed, and those are matched too; every acquire is matched to a release (first uses pass)."""
    capture, analysis, meta = run_traced(torch, tmp_path, "launch_two_rings")
    found = ops_by_pipeline(analysis)
    assert found[("ring_b", "wait")] == {"matched": 4 * BLOCKS * ITERS}, found
    assert set(found.get(("ring_a", "wait"), {"matched": 0})) == {"matched"}, found
    for name in ("ring_a", "ring_b"):
        assert found[(name, "acquire")] == {"first_use": 2 * BLOCKS, "matched": BLOCKS * (ITERS - 2)}, found
    assert analysis.unmatched() == {}


def test_pipeline_order_turns_are_matched_with_group_zero_a_phase_ahead(torch, tmp_path):
    """ordered_kernel: two warp groups take turns through cutlass's PipelineOrder (2 stages per group).
    Group 0 starts a phase ahead, so each of its warps' first wait on each of its 2 stages passes
    (first_use); every other wait is matched to the other group's arrive (the sidecar's
    first_wait_passes; without it group 0's waits were matched one arrive late)."""
    capture, analysis, meta = run_traced(torch, tmp_path, "launch_ordered")
    (entry,) = meta["pipelines"]
    assert entry["class"] == "PipelineOrder" and entry["first_wait_passes"] == [0, 2]
    found = ops_by_pipeline(analysis)
    warps = 8
    assert found[("turns", "wait")] == {"first_use": BLOCKS * 4 * 2, "matched": BLOCKS * (warps * ITERS - 4 * 2)}, found
    assert analysis.unmatched() == {}
    matched = analysis.waits[analysis.waits["src_ns"] >= 0]
    assert (matched["end_ns"] >= matched["src_ns"]).all()  # no wait ends before the arrive that released it
