"""Host helpers for the persistent GEMM and the TMA probe: compiling on a CPU (fake tensors, sm_90a) or for
the GPU, the grid size, and the reference check. Shared by run.py, tma_probe.py, the CPU tests
(tests/unit/examples/test_persistent_gemm_compile.py) and gpu/pipelines_cost.py."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

H100_SMS = 132  # H100 SXM / H200: the grid compiled on a CPU


@functools.cache
def keep_options() -> str:
    """cute.compile options keeping PTX and cubin in memory, the files the DSL writes alongside going to a
    private temporary folder rather than the working directory."""
    return f"--keep-ptx --keep-cubin --dump-dir={tempfile.mkdtemp(prefix='persistent_gemm_')}"


def check_shape(m: int, n: int, k: int) -> None:
    """The GEMM's shape limits (gemm.py): TMA needs 16-byte row strides of A and B."""
    if min(m, n, k) < 1 or k % 8:
        raise ValueError(f"persistent GEMM: M={m} N={n} K={k}; need M, N, K >= 1 and K a multiple of 8")


def num_ctas(cluster_m: int) -> int:
    """CTAs of a persistent launch on this GPU: every SM (1x1), or as many 2-CTA clusters as can be
    resident at once, times 2 (not every SM can hold half of a cluster when a GPC's SM count is odd)."""
    from cutlass.utils import HardwareInfo

    info = HardwareInfo()
    if cluster_m == 1:
        return info.get_device_multiprocessor_count()
    return info.get_max_active_clusters(cluster_m) * cluster_m


def fake_operands(m: int, n: int, k: int, c_dtype: str = "bf16"):
    """CuTe fake tensors (no GPU): A (M, K), B (N, K) K-major, C (M, N) row-major."""
    from cutlass import BFloat16, Float32
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    check_shape(m, n, k)
    out = {"bf16": BFloat16, "fp32": Float32}[c_dtype]
    return (fake(BFloat16, (m, k), stride_order=(1, 0), assumed_align=16),
            fake(BFloat16, (n, k), stride_order=(1, 0), assumed_align=16),
            fake(out, (m, n), stride_order=(1, 0), assumed_align=16))


def compile_gemm(operands, *, cluster_m: int = 1, ctas: int = H100_SMS, trace=None, options: str | None = None,
                 poll_before_wait: bool = False):
    """cute.compile the GEMM for these operands (CuTe tensors: fake ones on a CPU, from_dlpack views on
    the GPU), under `trace` (a trace_pipelines context) when given. Returns the compiled function."""
    import gemm
    from cutlass import cute

    kernel = gemm.PersistentGemm(cluster_m=cluster_m, poll_before_wait=poll_before_wait)
    with trace if trace is not None else contextlib.nullcontext():
        return cute.compile(kernel, *operands, ctas, options=keep_options() if options is None else options)


def dlpack_views(*tensors):
    from cutlass.cute.runtime import from_dlpack

    return [from_dlpack(t, assumed_align=16) for t in tensors]


def gemm_inputs(m: int, n: int, k: int, seed: int, c_dtype: str = "bf16"):
    """Fresh random bf16 A (M, K), B (N, K) and a NaN-poisoned C (M, N) on the GPU."""
    import torch

    check_shape(m, n, k)
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.full((m, n), float("nan"), device="cuda", dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[c_dtype])
    return a, b, c


def check_gemm(c, a, b, what: str) -> float:
    """C against fp32 torch of the same inputs; raises naming `what` when an element was not written or the
    relative error exceeds what the output type allows (bf16 rounding, or fp32 summation order)."""
    import torch

    ref = a.float() @ b.float().T
    if not bool(c.isfinite().all()):
        bad = int((~c.isfinite()).sum())
        raise AssertionError(f"{what}: {bad} output elements not written (NaN)")
    err = float((c.float() - ref).norm() / ref.norm())
    limit = 1e-5 if c.dtype == torch.float32 else 8e-3
    if err > limit:
        raise AssertionError(f"{what}: relative error {err:.2e} vs fp32 matmul (limit {limit:.0e})")
    return err


def sm90_env() -> None:
    """Compile for sm_90a (set before cutlass is imported)."""
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
