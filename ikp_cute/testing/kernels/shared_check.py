"""Kernels for the cursor's shared capacity check (tests/unit/ikp_cute/test_device_compile.py): `iters` marks in a
dynamic loop (so the room is not a compile-time constant), then three records in each `layout`, whose
compare counts differ only by which ENDs share their BEGIN's check.

    "pair_then_mark":  region "a" (nothing inside), then mark "m": the END shares the BEGIN's check
    "mark_inside":     mark "m" inside region "a": the END checks the room itself
    "end_elsewhere":   region "a" begun before an `if`, ended inside it: the END checks the room itself
    "loop_inside":     region "a" holds a dynamic loop without records, then mark "m" (lean: the BEGIN
                       stores its own record, so nothing of the region is live across the loop)
    "static_loop_inside": the same with a short loop of constant bounds (unrolled into straight-line code)
    "unroll1_loop_inside": a loop of constant bounds marked not to unroll (it stays a loop)
    "long_loop_inside": a loop of 1000 constant trips (LLVM unrolls it by 8 only: it stays a loop)
"""

import cutlass
from cutlass import Int32, const_expr, cute

from ikp_cute import Profiler


@cute.kernel
def shared_check_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr, layout: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    prof = Profiler.create(spec, prof_buf, group=cute.arch.warp_idx() // 4)
    acc = x[tidx]
    for _ in cutlass.range(iters):
        prof.mark("w")
    token = prof.begin("a")
    acc = acc * 1.0001 + 0.5
    if const_expr(layout == "loop_inside"):
        for _ in cutlass.range(iters):
            acc = acc * 0.5 + 1.0
    if const_expr(layout == "static_loop_inside"):
        for _ in cutlass.range(4):
            acc = acc * 0.5 + 1.0
    if const_expr(layout == "unroll1_loop_inside"):
        for _ in cutlass.range(8, unroll=1):
            acc = acc * 0.5 + 1.0
    if const_expr(layout == "long_loop_inside"):
        for _ in cutlass.range(1000):
            acc = acc * 0.5 + 1.0
    if const_expr(layout == "mark_inside"):
        prof.mark("m")
    if const_expr(layout == "end_elsewhere"):
        if acc > 0.0:
            prof.end("a", token)
    else:
        prof.end("a", token)
    if const_expr(layout != "mark_inside"):
        prof.mark("m")
    x[tidx] = acc
    prof.finalize()


@cute.jit
def launch_shared_check(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr, layout: cutlass.Constexpr):
    shared_check_kernel(x, iters, prof_buf, spec, layout).launch(grid=[4, 1, 1], block=[256, 1, 1])
