"""The issue-bound overhead kernel (issue 10, item 7): every warp is a lane (warps_per_group=1) and runs
`iters` iterations of `regions` regions, each holding 32 dependent FMAs. Used by
benchmarks/device_overhead.py (timing) and tests/unit/ikp_cute/test_device_compile.py (SASS instructions per event).
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
    recorder_class: cutlass.Constexpr = None,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    prof = Profiler.create(spec, prof_buf, group=cute.arch.warp_idx(), recorder_class=recorder_class)
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
    recorder_class: cutlass.Constexpr = None,
):
    overhead_kernel(x, iters, prof_buf, spec, regions, unroll, recorder_class).launch(
        grid=[grid, 1, 1], block=[block, 1, 1]
    )


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


def _compile(spec, regions: int, recorder_class=None):
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import fake_buffer
    from ikp_cute.testing import sass

    x = make_fake_compact_tensor(Float32, (528 * 256,))
    return cute.compile(
        launch_overhead, x, Int32(256), fake_buffer(spec), spec, regions, 1, 528, 256, recorder_class,
        options=sass.keep_options(),
    )


def overhead_spec(mode: str, **spec_kw):
    """The spec the overhead benchmark uses: 528 blocks x 8 warps, every warp a lane, 256 regions each."""
    from ikp_cute import ProfileSpec, disabled

    if mode is None:
        return disabled()
    return ProfileSpec(
        mode=mode, num_groups=8, num_blocks=528, records_per_lane=520, warps_per_group=1, **spec_kw
    )


def opcodes_per_event(mode: str, recorder_class=None, **spec_kw) -> dict[str, float]:
    """Where the SASS instructions of a record go: marginal instructions per record by opcode (the loop
    body with 8 regions vs 4: 16 vs 8 records, loop not unrolled), minus the same difference for the
    uninstrumented kernel (the FMAs). Negative entries are instructions the recording displaced.
    `recorder_class`: one of ikp_cute.testing.record_variants instead of the mode's recorder."""
    from collections import Counter

    from ikp_cute.testing import sass

    def opcodes(spec, regions, recorder=None):
        cubin = _compile(spec, regions, recorder).__cubin__
        return Counter(sass.opcode(ins).split(".")[0] for ins in sass.disassemble(cubin))

    instrumented = opcodes(overhead_spec(mode, **spec_kw), 8, recorder_class) - Counter()
    instrumented.subtract(opcodes(overhead_spec(mode, **spec_kw), 4, recorder_class))
    bare = opcodes(overhead_spec(None), 8)
    bare.subtract(opcodes(overhead_spec(None), 4))
    instrumented.subtract(bare)
    return {op: n / 8 for op, n in sorted(instrumented.items()) if n}


def sass_instructions_per_event(mode: str, **spec_kw) -> float:
    """Marginal SASS instructions per record (the sum of opcodes_per_event)."""
    return sum(opcodes_per_event(mode, **spec_kw).values())
