"""Row sums of a matrix through a warp-specialized CuTe DSL kernel on cutlass.pipeline, a plain program with no
profiler code in it: what `ikp record` records.

    python examples/record/standalone.py                          # on a GPU: runs, checks, times
    ikp record -o rec -- python examples/record/standalone.py     # the same, recorded; then: ikp view rec
    ikp record --dry-run --arch sm_90a -- python examples/record/standalone.py   # no GPU needed

Per block of 256 threads, ROWS rows: warp group 0 produces (copies a ROWS x TILE tile of the matrix from
global into one of STAGES shared-memory stages of the "tiles" ring, then commits the stage); warp group 1
consumes (warp w waits for the stage, adds row w's TILE values, releases the stage); at the end each consumer
warp reduces its row across its lanes. Recorded at the default level, each consumer wait and producer acquire
that blocked is a region: whether the producer's copies keep the adders fed is what the recording shows.

Under a dry run (`ikp record --dry-run` sets IKP_RECORD_DRY_RUN) the program compiles for the chosen
architecture on fake tensors, calls the kernel (the recorder skips the launch) and checks nothing.
"""

from __future__ import annotations

import argparse
import os
import time

import cutlass
import torch
from cutlass import Float32, Int64, cute, pipeline

STAGES = 4  # shared-memory stages of the ring
ROWS = 4  # rows per block: one per consumer warp
TILE = 128  # columns per stage: one per producer thread
THREADS = 256  # warp group 0 produces, warp group 1 consumes
DRY_RUN = os.environ.get("IKP_RECORD_DRY_RUN")


@cute.kernel
def row_sums_kernel(x: cute.Tensor, y: cute.Tensor):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    tid, _, _ = cute.arch.thread_idx()
    block, _, _ = cute.arch.block_idx()
    ring = pipeline.PipelineAsync.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 2 * STAGES, alignment=8),
        name="tiles",
    )
    sX = cute.make_tensor(cute.arch.alloc_smem(Float32, ROWS * TILE * STAGES, alignment=16),
                          cute.make_layout((ROWS, TILE, STAGES)))
    n_tiles = x.shape[1] // TILE
    row0 = block * ROWS
    if warp < 4:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)
        for t in cutlass.range(n_tiles):
            ring.producer_acquire(state)
            for r in cutlass.range_constexpr(ROWS):
                sX[r, tid, state.index] = x[row0 + r, t * TILE + tid]
            ring.producer_commit(state)
            state.advance()
        ring.producer_tail(state)
    else:
        row = warp - 4
        lane = tid % 32
        acc = Float32(0.0)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        for _ in cutlass.range(n_tiles):
            ring.consumer_wait(state)
            for j in cutlass.range_constexpr(TILE // 32):
                acc = acc + sX[row, lane + 32 * j, state.index]
            ring.consumer_release(state)
            state.advance()
        acc = cute.arch.warp_reduction(acc, lambda a, b: a + b)
        if lane == 0:
            y[row0 + row] = acc


@cute.jit
def row_sums(x: cute.Tensor, y: cute.Tensor, stream):
    row_sums_kernel(x, y).launch(grid=[x.shape[0] // ROWS, 1, 1], block=[THREADS, 1, 1], stream=stream)


def compile_row_sums(m: int, n: int):
    """The kernel for an m x n float32 matrix, called with torch tensors (TVM-FFI, the current stream)."""
    # row-major, as torch hands it over
    x = cute.runtime.make_fake_compact_tensor(Float32, (m, n), stride_order=(1, 0), assumed_align=16)
    y = cute.runtime.make_fake_compact_tensor(Float32, (m,), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(row_sums, x, y, stream, options="--enable-tvm-ffi")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=132 * ROWS * 4)
    parser.add_argument("--cols", type=int, default=TILE * 64)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    assert args.rows % ROWS == 0 and args.cols % TILE == 0, "rows: a multiple of 4; cols: a multiple of 128"
    kernel = compile_row_sums(args.rows, args.cols)
    x = torch.randn(args.rows, args.cols, device="cuda", dtype=torch.float32)
    y = torch.empty(args.rows, device="cuda", dtype=torch.float32)
    start = time.perf_counter()
    for _ in range(args.iters):
        kernel(x, y)
    torch.cuda.synchronize()
    if DRY_RUN:
        print(f"row sums: compiled for {DRY_RUN}, {args.iters} calls (skipped by the dry run)")
        return
    ms = (time.perf_counter() - start) * 1e3 / args.iters
    error = (y - x.sum(dim=1)).abs().max().item()
    print(f"row sums {args.rows} x {args.cols}: {args.iters} launches, {ms:.3f} ms each (host clock), "
          f"max error {error:.2e}")
    assert error < 1e-2 * args.cols ** 0.5, error


if __name__ == "__main__":
    main()
