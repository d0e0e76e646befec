"""A small instrumented CuTe DSL kernel that launches on a given stream (so it can be captured into a
CUDA graph): two warp groups per block, producer "load" / consumer "compute" regions inside "tile".

It is the kernel of examples/cuda_graph/run.py; its spec carries ``window_slots`` so that the launches
of a captured graph record into a ring (ikp_cute/ring.py) without any host work between replays.
"""

import cutlass
from cutlass import Int32, cute

from ikp_cute import Profiler

THREADS = 256  # 2 warp groups of 4 warps
EVENTS = ["tile", "load", "compute", "tile_done"]
GROUPS = ["producer", "consumer"]


@cute.kernel
def tiles_kernel(x: cute.Tensor, y: cute.Tensor, tiles: Int32, prof_buf, spec: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4)
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
def launch_tiles(x: cute.Tensor, y: cute.Tensor, tiles: Int32, prof_buf, spec: cutlass.Constexpr,
                 blocks: cutlass.Constexpr, stream):
    tiles_kernel(x, y, tiles, prof_buf, spec).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)
