"""One CuTe DSL kernel instrumented twice, by ikp_cute and by NVIDIA's IKET, at the same points, so one
launch yields both traces of the same work (examples/interop/README.md). Every warp is a lane on both
sides (IKET records per warp; ikp uses warps_per_group=1). IKET records only under its own launcher."""

import cutlass
from cutlass import Float32, Int32, cute

from ikp_cute import Profiler, profile_region

FMAS_PER_TILE = 64


@cute.kernel
def twin_kernel(x: cute.Tensor, y: cute.Tensor, tiles: Int32, prof_buf, spec: cutlass.Constexpr):
    from cutlass.cute.experimental import iket

    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    prof = Profiler.create(spec, prof_buf, group=cute.arch.warp_idx())
    acc = Float32(0.0)
    for t in cutlass.range(tiles):
        with profile_region(prof, "tile"):
            iket.range_push("tile")
            with profile_region(prof, "load"):
                iket.range_push("load")
                v = x[(bidx * tiles + t) * bdim + tidx]
                acc = acc + v
                iket.range_pop()
            with profile_region(prof, "math"):
                token = iket.range_start("math", payload=t)  # IKET's token form, with a payload
                for _ in cutlass.range_constexpr(FMAS_PER_TILE):
                    acc = acc * 0.999 + v
                iket.range_end(token, payload=t)
            iket.range_pop()
            prof.mark("tile_done")
            iket.mark("tile_done", payload=t)
    y[bidx * bdim + tidx] = acc
    prof.finalize()


@cute.jit
def launch_twin(x, y, tiles: Int32, prof_buf, spec: cutlass.Constexpr, blocks: cutlass.Constexpr,
                threads: cutlass.Constexpr):
    twin_kernel(x, y, tiles, prof_buf, spec).launch(grid=[blocks, 1, 1], block=[threads, 1, 1])
