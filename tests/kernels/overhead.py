"""The issue-bound overhead kernel (issue 10, item 7): every warp is a lane (warps_per_group=1) and runs
`iters` iterations of `regions` regions, each holding 32 dependent FMAs. Used by
benchmarks/device_overhead.py (timing) and tests/test_device_compile.py (SASS instructions per event).
"""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from ikp_cute import Profiler, profile_region

FMAS_PER_REGION = 32


@cute.kernel
def overhead_kernel(
    x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr, regions: cutlass.Constexpr, unroll: cutlass.Constexpr
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    prof = Profiler(spec, prof_buf, group=cute.arch.warp_idx())
    idx = bidx * bdim + tidx
    acc = x[idx]
    b = acc * 0.5 + 1.0
    for i in cutlass.range(iters, unroll=unroll):
        for r in cutlass.range_constexpr(regions):
            with profile_region(prof, "work", index=i * regions + r):
                for _ in cutlass.range_constexpr(FMAS_PER_REGION):
                    acc = acc * b + 0.25
    x[idx] = acc
    prof.finalize()


@cute.jit
def launch_overhead(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    regions: cutlass.Constexpr,
    unroll: cutlass.Constexpr,
    grid: cutlass.Constexpr,
    block: cutlass.Constexpr,
):
    overhead_kernel(x, iters, prof_buf, spec, regions, unroll).launch(grid=[grid, 1, 1], block=[block, 1, 1])


@cute.kernel
def iket_overhead_kernel(x: cute.Tensor, iters: Int32, regions: cutlass.Constexpr):
    """The same kernel instrumented with NVIDIA's IKET (range_push/range_pop on every warp), for the
    side-by-side comparison; it records only when run under IKET's own launcher."""
    from cutlass.cute.experimental import iket

    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    idx = bidx * bdim + tidx
    acc = x[idx]
    b = acc * 0.5 + 1.0
    for i in cutlass.range(iters):
        for r in cutlass.range_constexpr(regions):
            iket.range_push("work")
            for _ in cutlass.range_constexpr(FMAS_PER_REGION):
                acc = acc * b + 0.25
            iket.range_pop()
    x[idx] = acc


@cute.jit
def launch_iket_overhead(x: cute.Tensor, iters: Int32, regions: cutlass.Constexpr, grid: cutlass.Constexpr, block: cutlass.Constexpr):
    iket_overhead_kernel(x, iters, regions).launch(grid=[grid, 1, 1], block=[block, 1, 1])
