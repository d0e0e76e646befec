"""The structured kernel of structured.py with every profiling line removed (for the PTX identity test)."""

import cutlass
from cutlass import Int32, cute


@cute.kernel
def structured_kernel(x: cute.Tensor, iters: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    acc = x[bidx * 256 + tidx]
    for i in cutlass.range(iters):
        acc = acc * 1.0001 + 0.5
        acc = acc * 0.9999 + 0.25
        if warp == 4:
            acc = acc + 1.0
    x[bidx * 256 + tidx] = acc


@cute.jit
def launch_structured(x: cute.Tensor, iters: Int32, grid: cutlass.Constexpr):
    structured_kernel(x, iters).launch(grid=list(grid), block=[256, 1, 1])
