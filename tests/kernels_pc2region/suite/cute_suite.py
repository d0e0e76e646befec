"""CuTe DSL kernels of the pc2region suite, written with the ikp_cute device API.

names: 0=load 1=mma 2=mma_half 3=epilogue 4=branch

Ground truth as for the CUDA C++ kernels: ``# @ PATH`` on a line gives the region of every instruction
line info attributes to it. `python tests/kernels_pc2region/suite/cute_suite.py` compiles each kernel
on the CPU for sm_100a and sm_90a into ``cute_<kernel>.<arch>.cubin`` next to this file (committed, so
the tests need no compiler; the ikp_cute API may evolve, the cubins stay what they were checked on).
"""

from __future__ import annotations

import os
import sys

import cutlass
from cutlass import Float32, Int32, cute

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from ikp_cute import Profiler, ProfileSpec, fake_buffer, profile_region  # noqa: E402
from ikp_cute.spec import EventRegistry  # noqa: E402

# Instructions the compiler moved across a timer read (checked by hand in `nvdisasm -c -g`; recompiling
# after any edit of this file shifts the lines: rebuild the cubins and re-check these):
# moved: kernel_cutlass_roles_kernel_* 0x0860 - `x`'s address (LDC.64) hoisted before BEGIN mma (sm_90a, sm_100a)

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = ["load", "mma", "mma_half", "epilogue", "branch"]


@cute.kernel
def roles_kernel(x: cute.Tensor, iters: Int32, flag: Int32, prof_buf, spec: cutlass.Constexpr):
    """Warp-specialized roles around barriers, a region in one branch only, nested loop regions."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4)
    acc = x[bidx * 256 + tidx]
    if warp < 4:
        for i in cutlass.range(iters):
            with profile_region(prof, "load"):
                acc = acc + x[i]  # @ load
    else:
        for i in cutlass.range(iters):
            with profile_region(prof, "mma"):
                for j in cutlass.range(2):
                    with profile_region(prof, "mma_half"):
                        acc = acc * 0.5 + x[j]  # @ mma/mma_half
    cute.arch.barrier()
    with profile_region(prof, "epilogue"):
        acc = acc * x[1]  # @ epilogue
        if flag != 0:
            with profile_region(prof, "branch"):
                acc = acc + x[2]  # @ epilogue/branch
    cute.arch.barrier()
    x[bidx * 256 + tidx] = acc  # @ -
    prof.finalize()


@cute.jit
def launch_roles(x: cute.Tensor, iters: Int32, flag: Int32, prof_buf, spec: cutlass.Constexpr):
    roles_kernel(x, iters, flag, prof_buf, spec).launch(grid=[4, 1, 1], block=[256, 1, 1])


@cute.kernel
def three_groups_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    """3 groups of 4 warps (lane = block * 3 + group): regions in a dynamic loop."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4)
    acc = x[bidx * 384 + tidx]
    for i in cutlass.range(iters):
        with profile_region(prof, "mma"):
            acc = acc * x[i] + 1.0  # @ mma
    x[bidx * 384 + tidx] = acc  # @ -
    prof.finalize()


@cute.jit
def launch_three_groups(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    three_groups_kernel(x, iters, prof_buf, spec).launch(grid=[4, 1, 1], block=[384, 1, 1])


def build(arch: str) -> None:
    from cutlass.cute.runtime import make_fake_compact_tensor

    for name, launcher, groups, extra in (
        ("roles", launch_roles, 2, (Int32(3), Int32(1))),
        ("three_groups", launch_three_groups, 3, (Int32(3),)),
    ):
        events = EventRegistry(EVENTS)
        spec = ProfileSpec(num_groups=groups, num_blocks=4, write_stride=16, records_per_lane=64, events=events)
        compiled = cute.compile(
            launcher,
            make_fake_compact_tensor(Float32, (2048,)),
            *extra,
            fake_buffer(spec),
            spec,
            options=f"--gpu-arch {arch} --keep-cubin --generate-line-info",
        )
        with open(os.path.join(HERE, f"cute_{name}.{arch}.cubin"), "wb") as f:
            f.write(compiled.__cubin__)


if __name__ == "__main__":
    for arch in sys.argv[1:] or ["sm_100a", "sm_90a"]:
        build(arch)
