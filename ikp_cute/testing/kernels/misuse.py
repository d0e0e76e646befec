"""Kernels that misuse the device API on purpose, one `case` each (tests/unit/ikp_cute/test_device_compile.py expects
a trace-time ProfileUsageError for the static cases; tests/gpu/test_device_gpu.py runs the dynamic ones).

Program of every lane that records: `iters` x region "r", then mark "m" (2 * iters + 1 records); case
"mark_first" (not a misuse) records a mark "m0" before them.
"""

import cutlass
from cutlass import Int32, const_expr, cute

from ikp_cute import Profiler, profile_region


@cute.kernel
def misuse_kernel(
    x: cute.Tensor, iters: Int32, shift: Int32, prof_buf, spec: cutlass.Constexpr, case: cutlass.Constexpr
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    group = warp // 4
    if const_expr(case == "group_negative"):
        group = -1
    if const_expr(case == "group_too_big"):
        group = spec.num_groups
    if const_expr(case == "dynamic_group"):
        group = warp // 4 + shift  # runtime: shift=1 or -1 puts one warp group outside 0..num_groups-1
    leader = None
    if const_expr(case == "leader_other"):
        leader = tidx == 5
    prof = Profiler.create(spec, prof_buf, group=group, leader=leader)
    acc = x[bidx * 256 + tidx]
    if const_expr(case == "second_profiler"):  # not a misuse: a second Profiler of the spec (one per role)
        other = Profiler.create(spec, prof_buf, group=group)
        with other.region("b", index=0):
            acc = acc + 1.0
        other.finalize()
    if const_expr(case == "mark_first"):  # not a misuse: the regions after it start on odd slots
        prof.mark("m0")
    for i in cutlass.range(iters):
        with prof.region("r", index=i):
            acc = acc * 1.0001 + 0.5
    if const_expr(case == "end_without_token"):
        prof.begin("a")
        prof.end("a")
    if const_expr(case == "end_mismatch"):
        token = prof.begin("a")
        prof.end("b", token)
    if const_expr(case == "end_other_profiler"):
        other = Profiler.create(spec, prof_buf, group=group)
        token = other.begin("a")
        prof.end("a", token)
    if const_expr(case == "begin_without_end"):
        prof.begin("a")
    if const_expr(case == "end_in_other_block"):
        token = prof.begin("a")
        if acc > 0.0:
            prof.end("a", token)
    if const_expr(case == "region_none"):
        with profile_region(None, "a"):
            acc = acc + 1.0
    if const_expr(case == "static_index_negative"):
        with prof.region("a", index=-1):
            acc = acc + 1.0
    if const_expr(case == "static_region_past_capacity"):  # its BEGIN fits, its END would be the DROPPED slot
        with prof.region("a", index=(spec.user_capacity - 1) // 2):
            acc = acc + 1.0
    prof.mark("m", index=iters)
    x[bidx * 256 + tidx] = acc
    prof.finalize()
    if const_expr(case == "after_finalize"):
        prof.mark("late", index=1)


@cute.jit
def launch_misuse(
    x: cute.Tensor,
    iters: Int32,
    shift: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    case: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    misuse_kernel(x, iters, shift, prof_buf, spec, case).launch(grid=[grid, 1, 1], block=[256, 1, 1])
