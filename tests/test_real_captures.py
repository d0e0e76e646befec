"""Real buffers captured on an H200 (committed under examples/) decode to exactly what the program did.

The CUDA C++ captures come from `python gpu/cuda_cross_check.py` (examples/cuda_cpp/ikp_example.cu);
the program model and the checks are that script's own (check_trace), applied here to the committed
bytes, so CI re-checks real GPU output without a GPU."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from host_decode.decoder import load_capture

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "examples" / "cuda_cpp" / "captures"


def _cross_check():
    spec = importlib.util.spec_from_file_location("cuda_cross_check", ROOT / "gpu" / "cuda_cross_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert sum(trace.loss.totals.values()) == trace.loss.nonzero_slots == np.count_nonzero(np.load(CAPTURES / f"{name}.npy")[1:])


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
