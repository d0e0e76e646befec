"""A CuTe DSL test kernel for pc2region, compiled on the CPU (`--gpu-arch sm_90a` or sm_100a).

It writes v1 records by hand (``globaltimer_lo() << 32 | tag`` stored to gmem), independent of the
ikp_cute device API, so the pc2region tests do not depend on it. Program structure the tests check:

    event 1 "outer" begin
    cutlass.range loop (unrolled by the compiler):
        event 2 "body" begin ... FMA work ... event 2 end
    if flag != 0:   event 3 "branch" begin ... event 3 end        (branch-only region)
    event 1 "outer" end
"""

from __future__ import annotations

import os

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint64

EVENTS = {1: "outer", 2: "body", 3: "branch"}


@cute.jit
def _mark(buf: cute.Tensor, slot: Int32, lane: Int32, event_id: cutlass.Constexpr, event_type: cutlass.Constexpr):
    t = cute.arch.globaltimer_lo()
    tag = (lane << 12) | (event_id << 2) | event_type
    rec = (Uint64(t) << 32) | Uint64(tag)
    buf[slot] = Int64(rec)


@cute.kernel
def loop_kernel(buf: cute.Tensor, data: cute.Tensor, n: Int32, flag: Int32):
    bidx, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    gdim, _, _ = cute.arch.grid_dim()
    lane = Int32(bidx)
    stride = Int32(gdim)
    slot = lane + 1
    acc = data[tidx]
    _mark(buf, slot, lane, 1, 0)
    slot = slot + stride
    for i in cutlass.range(n):
        _mark(buf, slot, lane, 2, 0)
        slot = slot + stride
        acc = acc * Float32(1.5) + data[i]
        _mark(buf, slot, lane, 2, 1)
        slot = slot + stride
    if flag != 0:
        _mark(buf, slot, lane, 3, 0)
        slot = slot + stride
        acc = acc * acc + Float32(0.25)
        _mark(buf, slot, lane, 3, 1)
        slot = slot + stride
    _mark(buf, slot, lane, 1, 1)
    data[tidx] = acc


@cute.jit
def launch(buf: cute.Tensor, data: cute.Tensor, n: Int32, flag: Int32):
    loop_kernel(buf, data, n, flag).launch(grid=[4, 1, 1], block=[32, 1, 1])


def compile_loop_kernel(dump_dir: str | None = None, arch: str = "sm_90a"):
    """-> the compiled function (``__cubin__`` kept); needs no GPU (the arch is explicit).
    ``--keep-cubin`` also writes the cubin to a file: into `dump_dir` (a temporary directory by
    default), never into the working directory."""
    import tempfile

    from cutlass.cute.runtime import make_fake_compact_tensor

    buf = make_fake_compact_tensor(Int64, (4096,))
    data = make_fake_compact_tensor(Float32, (256,))
    with tempfile.TemporaryDirectory(prefix="ikp_cute_loop_") as tmp:
        options = f"--gpu-arch {arch} --keep-cubin --generate-line-info --dump-dir {dump_dir or tmp}"
        return cute.compile(launch, buf, data, Int32(8), Int32(1), options=options)


if __name__ == "__main__":
    compiled = compile_loop_kernel()
    out = os.environ.get("OUT_CUBIN", "/tmp/cute_loop.cubin")
    with open(out, "wb") as f:
        f.write(compiled.__cubin__)
    print(out, len(compiled.__cubin__))
