"""A minimal instrumented CuTe DSL kernel: two warp groups per block, as in a producer/consumer kernel.

Warp group 0 ("producer") stages a tile of x into registers; warp group 1 ("consumer") runs a few
FMAs per element. Each role records its steps with ikp_cute; regions nest, a mark tags each tile.
"""

import cutlass
from cutlass import Int32, cute

from ikp_cute import Profiler

THREADS = 256  # 2 warp groups of 4 warps


@cute.kernel
def tiles_kernel(x: cute.Tensor, y: cute.Tensor, tiles: Int32, prof_buf, spec: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4)  # lane = (block, warp group); leader = warp 0 / 4, lane 0
    base = bidx * tiles * THREADS
    acc = cutlass.Float32(0.0)
    for t in cutlass.range(tiles):
        with prof.region("tile"):
            v = x[base + t * THREADS + tidx]
            if warp < 4:
                with prof.region("load"):
                    acc = acc + v
            else:
                with prof.region("compute"):
                    for _ in cutlass.range_constexpr(64):
                        acc = acc * 0.999 + v
            prof.mark("tile_done")
    y[bidx * THREADS + tidx] = acc
    prof.finalize()


@cute.jit
def launch_tiles(
    x: cute.Tensor,
    y: cute.Tensor,
    tiles: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    blocks: cutlass.Constexpr,
):
    tiles_kernel(x, y, tiles, prof_buf, spec).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1])
