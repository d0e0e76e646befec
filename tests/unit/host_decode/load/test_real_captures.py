"""Real buffers captured on an H200 (committed under examples/) decode to exactly what the program did.

The CUDA C++ captures come from `python gpu/cuda_cross_check.py` (examples/cuda_cpp/ikp_example.cu);
the program model and the checks are the ones that script applies (ikp_cute/testing/cuda_program.py:
check_trace), applied here to the committed bytes, so CI re-checks real GPU output without a GPU."""

from pathlib import Path

import numpy as np
import pytest

from host_decode.load.capture import load_capture

ROOT = Path(__file__).resolve().parents[4]
CAPTURES = ROOT / "examples" / "cuda_cpp" / "captures"


def _cross_check():
    from ikp_cute.testing import cuda_program

    return cuda_program


@pytest.mark.parametrize(
    "name, variant, extensions",
    [("cuda_nested", "nested", True), ("cuda_nested_overflow", "nested", True), ("cuda_flat_atomic", "flat", True),
     ("cuda_nested_plain", "nested", False)],
)
def test_cuda_capture_matches_program(name, variant, extensions):
    cc = _cross_check()
    trace = load_capture(CAPTURES / f"{name}.npy")
    rpl = trace.meta["records_per_lane"]
    problems = cc.check_trace(trace, variant, rpl, cc.ITERS, extensions=extensions)
    assert problems == []
    assert (
        sum(trace.loss.totals.values())
        == trace.loss.nonzero_slots
        == np.count_nonzero(np.load(CAPTURES / f"{name}.npy")[1:])
    )


def test_overflowing_capture_counts_drops_and_keeps_time_absolute():
    trace = load_capture(CAPTURES / "cuda_nested_overflow.npy")
    assert trace.loss.dropped_on_device > 0 and trace.absolute
    # absolute %globaltimer ns: a 2026 date, not a 32-bit counter
    assert trace.start_ns > 1_700_000_000 * 10**9
    assert (trace.durations() >= 0).all() and trace.durations().max() < 10**6


def test_plain_v1_capture_reads_with_a_minimal_v1_decoder():
    cc = _cross_check()
    buf = np.load(CAPTURES / "cuda_nested_plain.npy").view(np.uint64)
    side = load_capture(CAPTURES / "cuda_nested_plain.npy").meta
    assert cc.plain_v1_violations(buf, side["write_stride"], side["records_per_lane"]) == []
    ref = cc.v1_reference_decode(buf, side["write_stride"], side["records_per_lane"])
    trace = load_capture(CAPTURES / "cuda_nested_plain.npy")
    assert not trace.absolute
    assert ref["structure"] == cc.structure(trace)
    assert sorted(d for _, _, d in ref["durations"]) == sorted(trace.durations().tolist())


# --- insight on a real H200 run (python gpu/insight_capture.py): 5 launches under torch.profiler ------

INSIGHT = ROOT / "examples" / "insight"


def test_real_capture_aligns_inside_its_profiler_kernel_slice(tmp_path):
    from host_decode.analysis.align import align, load_chrome
    from host_decode.reports.merged import merge_with_torch_trace

    trace = load_capture(INSIGHT / "launch_0.npy")
    doc = load_chrome(INSIGHT / "torch_trace.json.gz")
    result, chosen = align(trace, doc, occurrence=0)
    assert result.consistent and result.absolute
    assert result.accuracy_ns <= 1000  # the kernel slice bounds the offset to +-480 ns on that run
    assert min(result.lead_ns) >= 0 and min(result.tail_ns) >= 0
    out = tmp_path / "merged.json"
    merge_with_torch_trace(INSIGHT / "torch_trace.json.gz", trace, out, occurrence=0)
    merged = load_chrome(out)
    ks = chosen[0]
    regions = [e for e in merged["traceEvents"] if e.get("ph") == "X" and e.get("name") in ("load", "mma", "epilogue")]
    assert len(regions) == trace.spans.size
    k0, k1 = ks["ts"], ks["ts"] + ks["dur"]
    assert all(k0 - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= k1 + 1e-3 for e in regions)
    assert merged["ikp_alignment"]["consistent"]


def test_real_launches_diff_as_the_same_kernel():
    from host_decode.analysis.diff import compare, regressions

    a, b = load_capture(INSIGHT / "launch_0.npy"), load_capture(INSIGHT / "launch_1.npy")
    rows = compare(a, b)
    assert {(r["group"], r["event"]) for r in rows} >= {("producer", "load"), ("consumer", "mma")}
    assert regressions(rows, 50.0) == []  # two launches of one kernel: nothing 50% slower


def test_two_gpu_ranks_merge_with_measured_offset(tmp_path):
    from host_decode.cli import main

    out = tmp_path / "ranks.json"
    rc = main(["merge", str(INSIGHT / "ranks" / "rank_0.npy"), str(INSIGHT / "ranks" / "rank_1.npy"), "--by", "rank",
               "--clock-offset", "1=-225585", "-o", str(out)])
    assert rc == 0 and out.stat().st_size > 0


@pytest.mark.parametrize("tag", ["nested", "nested_overflow"])
def test_cute_dsl_twin_decodes_to_the_cuda_cpp_structure(tag):
    """examples/cuda_cpp/twin_kernel.py (CuTe DSL, ikp_cute) and ikp_example.cu (CUDA C++, ikp.cuh) run the
    same program; their real H200 buffers (gpu/twin_cross_check.py) decode to one structure."""
    cc = _cross_check()
    cute_trace = load_capture(CAPTURES / f"twin_cute_{tag}.npy")
    cuda_trace = load_capture(CAPTURES / f"cuda_{tag}.npy")
    assert cute_trace.meta["records_per_lane"] == cuda_trace.meta["records_per_lane"]
    assert cc.structure(cute_trace) == cc.structure(cuda_trace)
    assert cc.check_trace(cute_trace, "nested", cute_trace.meta["records_per_lane"], cc.ITERS) == []
    assert cute_trace.loss.dropped_on_device == cuda_trace.loss.dropped_on_device
