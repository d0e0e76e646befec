"""The CuTe DSL twin of ikp_example.cu's "nested" program: same grid, groups, events and regions.

gpu/twin_cross_check.py runs both on one GPU and checks that their buffers decode to the same span
structure (lanes, events, nesting, counts); tests/unit/host_decode/load/test_real_captures.py re-checks the committed
pair.

    group 0 ("producer", warps 0-1): iters x outer{ work; inner{ work } }
    group 1 ("consumer", warps 2-3): iters x ( inner{ work }; tick ), then outer{ outer{ work } }
"""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from ikp_cute import Profiler, profile_region

THREADS = 128  # 4 warps: 2 groups of 2 warps, as kWarpsPerGroup / kNumGroups in ikp_example.cu
EVENTS = ["outer", "inner", "tick"]  # ids 0, 1, 2 = OUTER, INNER, TICK in ikp_example.cu
GROUPS = ["producer", "consumer"]


@cute.jit
def work(x: Float32) -> Float32:
    for _ in cutlass.range_constexpr(16):  # dependent FMAs, as work(x, 16) in the CUDA kernel
        x = x * 1.0001 + 0.5
    return x


@cute.kernel
def twin_kernel(out: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, by, bz = cute.arch.block_idx()
    gx, gy, _ = cute.arch.grid_dim()
    group = cute.arch.warp_idx() // 2
    prof = Profiler.create(spec, prof_buf, group=group)
    x = Float32(tidx)
    if group == 0:
        for _ in cutlass.range(iters):
            with profile_region(prof, "outer"):
                x = work(x)
                with profile_region(prof, "inner"):
                    x = work(x)
    else:
        for _ in cutlass.range(iters):
            with profile_region(prof, "inner"):
                x = work(x)
            prof.mark("tick")
        with profile_region(prof, "outer"):
            with profile_region(prof, "outer"):
                x = work(x)
    prof.finalize()
    out[(bx + by * gx + bz * gx * gy) * THREADS + tidx] = x


@cute.jit
def launch_twin(out: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    twin_kernel(out, iters, prof_buf, spec).launch(grid=[3, 2, 2], block=[THREADS, 1, 1])
