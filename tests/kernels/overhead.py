"""The issue-bound overhead kernel (issue 10, item 7): every warp is a lane (warps_per_group=1) and runs
`iters` iterations of `regions` regions, each holding 32 dependent FMAs. Used by
benchmarks/device_overhead.py (timing) and tests/test_device_compile.py (SASS instructions per event).
"""

import cutlass
from cutlass import Float32, Int32, cute

from ikp_cute import Profiler, profile_region

FMAS_PER_REGION = 32


@cute.kernel
def overhead_kernel(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    regions: cutlass.Constexpr,
    unroll: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    prof = Profiler(spec, prof_buf, group=cute.arch.warp_idx())
    idx = bidx * bdim + tidx
    acc = x[idx]
    b = acc * 0.25  # x in [0, 1): the chain converges, no inf or denormals
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
    b = acc * 0.25  # x in [0, 1): the chain converges, no inf or denormals
    for i in cutlass.range(iters):
        for r in cutlass.range_constexpr(regions):
            iket.range_push("work")
            for _ in cutlass.range_constexpr(FMAS_PER_REGION):
                acc = acc * b + 0.25
            iket.range_pop()
    x[idx] = acc


@cute.jit
def launch_iket_overhead(
    x: cute.Tensor,
    iters: Int32,
    regions: cutlass.Constexpr,
    grid: cutlass.Constexpr,
    block: cutlass.Constexpr,
):
    iket_overhead_kernel(x, iters, regions).launch(grid=[grid, 1, 1], block=[block, 1, 1])


def sass_instructions_per_event(mode: str, **spec_kw) -> float:
    """Marginal SASS instructions per record, counted from cubins compiled on the CPU: the loop body with
    8 regions vs 4 (16 vs 8 records, loop not unrolled), minus the same difference for the
    uninstrumented kernel (the FMAs)."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import ProfileSpec, disabled, fake_buffer, sass

    def count(spec, regions):
        x = make_fake_compact_tensor(Float32, (528 * 256,))
        compiled = cute.compile(
            launch_overhead,
            x,
            Int32(256),
            fake_buffer(spec),
            spec,
            regions,
            1,
            528,
            256,
            options=sass.keep_options(),
        )
        return sass.count(compiled.__cubin__)

    def make():
        return ProfileSpec(
            mode=mode,
            num_groups=8,
            num_blocks=528,
            write_stride=528 * 8,
            records_per_lane=520,
            warps_per_group=1,
            **spec_kw,
        )

    instrumented = count(make(), 8) - count(make(), 4)
    bare = count(disabled(), 8) - count(disabled(), 4)
    return (instrumented - bare) / 8
