"""Two warp groups per block whose role branches on the capture window with ikp_cute.window_branch (the
closed copy holds no Profiler), the three non-leading warps of each group deciding late: each sleeps
`spins` microseconds first, long after every lane's owner has decided and counted itself. Each copy
meets at a named barrier of its warp group (the collective that keeps the owner from ending its lane
before its warps have decided) and marks which copy each warp took in `taken` (1 plain, 2 recorded).

`twice`: the recorded copy creates a second Profiler for its group (a lane counted twice). `count_at`:
window_branch's (where the plain copy's warps count themselves).
tests/gpu/test_ring_gpu.py runs it.
"""

import cutlass
from cutlass import Int32, const_expr, cute

from ikp_cute import Profiler, inline_ptx, window_branch

EVENTS = ["role"]
GROUPS = ["first", "second"]
THREADS = 256
WARPS = THREADS // 32


@cute.jit
def _mark(taken: cute.Tensor, copy: cutlass.Constexpr):
    warp = cute.arch.warp_idx()
    if cute.arch.lane_idx() == 0:
        bidx, _, _ = cute.arch.block_idx()
        taken[bidx * WARPS + warp] = Int32(copy)


@cute.jit
def _recorded(taken: cute.Tensor, group, prof_buf, spec: cutlass.Constexpr, twice: cutlass.Constexpr):
    prof = Profiler.create(spec, prof_buf, group=group)
    if const_expr(twice):
        Profiler.create(spec, prof_buf, group=group).finalize()
    with prof.region("role"):
        cute.arch.barrier(barrier_id=1 + group, number_of_threads=128)
    prof.finalize()
    _mark(taken, 2)


@cute.jit
def _plain(taken: cute.Tensor, group):
    cute.arch.barrier(barrier_id=1 + group, number_of_threads=128)
    _mark(taken, 1)


@cute.kernel
def branch_kernel(taken: cute.Tensor, spins: Int32, prof_buf, spec: cutlass.Constexpr, twice: cutlass.Constexpr,
                  count_at: cutlass.Constexpr):
    warp = cute.arch.warp_idx()
    group = cute.arch.make_warp_uniform(warp) // 4
    if warp % 4 != 0:
        for _ in cutlass.range(spins):
            inline_ptx.asm(None, [], "nanosleep.u32 1000;", "")
    window_branch(
        spec, group, lambda: _recorded(taken, group, prof_buf, spec, twice), lambda: _plain(taken, group), prof_buf,
        count_at=count_at,
    )


@cute.jit
def launch_branch(taken: cute.Tensor, spins: Int32, prof_buf, spec: cutlass.Constexpr, blocks: cutlass.Constexpr,
                  twice: cutlass.Constexpr, count_at: cutlass.Constexpr = "start"):
    branch_kernel(taken, spins, prof_buf, spec, twice, count_at).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1])
