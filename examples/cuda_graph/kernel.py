"""The kernel of examples/basic (two warp groups per block, producer "load" / consumer "compute" regions
inside "tile") with a launcher that takes a stream, so that it can be captured into a CUDA graph.

It is the kernel of examples/cuda_graph/run.py; its spec carries ``window_slots`` so that the launches
of a captured graph record into a ring (ikp_cute/ring.py) without any host work between replays.
"""

import cutlass
from cutlass import Int32, cute

from examples.basic.kernel import THREADS, tiles_kernel

EVENTS = ["tile", "load", "compute", "tile_done"]
GROUPS = ["producer", "consumer"]
__all__ = ["EVENTS", "GROUPS", "THREADS", "launch_tiles"]


@cute.jit
def launch_tiles(x: cute.Tensor, y: cute.Tensor, tiles: Int32, prof_buf, spec: cutlass.Constexpr,
                 blocks: cutlass.Constexpr, stream):
    tiles_kernel(x, y, tiles, prof_buf, spec).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)
