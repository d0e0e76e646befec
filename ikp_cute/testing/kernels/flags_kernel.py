"""Flags written three ways, for tests/unit/ikp_cute/test_flags_compile.py and gpu/flags_sass.py: block 0's thread 0
signals `flags[0]`, block 1's thread 0 waits for it.

style "hand":    a hand-written loop (cute.arch.load with `sem` / `scope` until the condition holds) and a raw
                 cute.arch.red / cute.arch.store with release order, as quack's and FA4's own barriers do;
style "helper":  ikp_cute.flags.wait / signal with the same arguments (their plain PTX must equal "hand"'s);
style "library": cutlass.utils.distributed.red_add1 and spin_lock_ld_lt_relaxed_wait (what the tracer hooks);
style "library_cas": red_add1 and spin_lock_atom_cas_relaxed_wait resetting the flag to 0.

`op` "add" adds 1, "store" stores `value` (a runtime Int32); `cmp` is the wait's condition on `expected` (a
runtime Int32, or a compile-time int with `constant`); `passes` puts the waiting thread's wait where the value is
already there (the signal's block waits too, after signalling)."""

from __future__ import annotations

import cutlass
import cutlass.utils.distributed as distributed
from cutlass import Int32, cute

import ikp_cute.flags

THREADS = 64


@cute.jit
def hand_wait(ptr, expected, cmp: cutlass.Constexpr, sem: cutlass.Constexpr, scope: cutlass.Constexpr):
    seen = cute.arch.load(ptr.llvm_ptr, Int32, sem=sem, scope=scope)
    if cutlass.const_expr(cmp == "ge"):
        while seen < expected:
            seen = cute.arch.load(ptr.llvm_ptr, Int32, sem=sem, scope=scope)
    elif cutlass.const_expr(cmp == "eq"):
        while seen != expected:
            seen = cute.arch.load(ptr.llvm_ptr, Int32, sem=sem, scope=scope)
    else:
        while seen >= expected:
            seen = cute.arch.load(ptr.llvm_ptr, Int32, sem=sem, scope=scope)
    return seen


@cute.jit
def signal_flag(ptr, value, style: cutlass.Constexpr, op: cutlass.Constexpr, scope: cutlass.Constexpr):
    if cutlass.const_expr(style in ("library", "library_cas")):
        distributed.red_add1(ptr, order="release", scope=scope)
    elif cutlass.const_expr(style == "helper"):
        if cutlass.const_expr(op == "add"):
            ikp_cute.flags.signal(ptr, scope=scope)
        else:
            ikp_cute.flags.signal(ptr, value, op="store", scope=scope)
    else:
        if cutlass.const_expr(op == "add"):
            cute.arch.red(ptr.llvm_ptr, Int32(1), op="add", dtype="s32", sem="release", scope=scope)
        else:
            cute.arch.store(ptr.llvm_ptr, Int32(value), sem="release", scope=scope)


@cute.jit
def wait_flag(ptr, expected, style: cutlass.Constexpr, cmp: cutlass.Constexpr, sem: cutlass.Constexpr,
              scope: cutlass.Constexpr):
    if cutlass.const_expr(style == "library"):
        distributed.spin_lock_ld_lt_relaxed_wait(ptr, expected_val=expected, scope=scope)
    elif cutlass.const_expr(style == "library_cas"):  # the flag becomes 0 when the wait ends
        distributed.spin_lock_atom_cas_relaxed_wait(ptr, expected_val=expected, reset_val=expected - expected,
                                                    scope=scope)
    elif cutlass.const_expr(style == "helper"):
        ikp_cute.flags.wait(ptr, expected, cmp=cmp, sem=sem, scope=scope)
    else:
        hand_wait(ptr, expected, cmp, sem, scope)


@cute.kernel
def flags_kernel(flags: cute.Tensor, expected: Int32, value: Int32, style: cutlass.Constexpr, op: cutlass.Constexpr,
                 cmp: cutlass.Constexpr, sem: cutlass.Constexpr, scope: cutlass.Constexpr,
                 constant: cutlass.Constexpr, passes: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    target = expected
    if cutlass.const_expr(constant is not None):
        target = constant
    if tidx == 0:
        if bidx == 0:
            signal_flag(flags.iterator, value, style, op, scope)
            if cutlass.const_expr(passes):
                wait_flag(flags.iterator, target, style, cmp, sem, scope)
        else:
            wait_flag(flags.iterator, target, style, cmp, sem, scope)
            flags[1] = Int32(1)


@cute.jit
def launch(flags: cute.Tensor, expected: Int32, value: Int32, style: cutlass.Constexpr, op: cutlass.Constexpr = "add",
           cmp: cutlass.Constexpr = "ge", sem: cutlass.Constexpr = "acquire", scope: cutlass.Constexpr = "gpu",
           constant: cutlass.Constexpr = None, passes: cutlass.Constexpr = False):
    flags_kernel(flags, expected, value, style, op, cmp, sem, scope, constant, passes).launch(
        grid=[2, 1, 1], block=[THREADS, 1, 1])
