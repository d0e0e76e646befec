"""Kernels for the cursor's shared capacity check (tests/test_device_compile.py): `iters` marks in a
dynamic loop (so the room is not a compile-time constant), then three records in each `layout`, whose
compare counts differ only by which ENDs share their BEGIN's check.

    "pair_then_mark":  region "a" (nothing inside), then mark "m": the END shares the BEGIN's check
    "mark_inside":     mark "m" inside region "a": the END checks the room itself
    "end_elsewhere":   region "a" begun before an `if`, ended inside it: the END checks the room itself
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
