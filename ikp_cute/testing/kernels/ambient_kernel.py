"""A kernel whose author placed regions with ``profile_region(name)`` (no Profiler): inside warp-specialized
branches, a dynamic loop and nested. What tests/unit/ikp_cute/test_pool_compile.py compiles inside a trace
(the regions record) and outside one (the PTX of the same kernel without them), and what gpu/pool_suite.py
runs. `regions` (a Constexpr) chooses between the calls and `contextlib.nullcontext()`, so both builds come
from one source."""

from __future__ import annotations

import contextlib

import cutlass
from cutlass import Int32, cute

from ikp_cute import profile_region

THREADS = 256


def region(name: str, regions: bool):
    return profile_region(name) if regions else contextlib.nullcontext()


@cute.kernel
def kernel(x: cute.Tensor, iters: Int32, regions: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    acc = x[bidx * THREADS + tidx]
    with region("setup", regions):
        acc = acc * 2.0 + 1.0
    if warp < 4:
        for _ in cutlass.range(iters):
            with region("mma", regions):
                acc = acc * 1.0001 + 0.5
                with region("inner", regions):
                    acc = acc * 0.9999 + 0.25
    else:
        with region("epilogue", regions):
            acc = acc + 1.0
    x[bidx * THREADS + tidx] = acc


@cute.jit
def launch(x: cute.Tensor, iters: Int32, num_blocks: cutlass.Constexpr, regions: cutlass.Constexpr):
    kernel(x, iters, regions).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])
