"""A persistent, megakernel-style CuTe DSL kernel: one CTA per SM pulls heterogeneous work items from a
global queue with an atomic counter, instrumented per item and per phase with ikp_cute.

Queue: int32 items[num_items, 4] = (kind, a0, a1, a2); kinds
  COPY   (0): copy `a1` chunks of CHUNK fp32 starting at chunk `a0` from src to dst;
  REDUCE (1): out[a0] = sum of row `a0` of X (fp32, ROW_LEN long);
  GEMM   (2): the TILE x TILE tile (a0, a1) of C = A @ B, fp32 FMA over GEMM_K (a small-tile GEMM, SIMT).
Each CTA loops: `fetch` (thread 0 takes the next index with an atomic add; a CTA barrier publishes it),
then runs the item inside a region named after its kind; an exhausted queue ends the loop.

Profile: one lane per CTA (group "worker", leader lane 0 of warp 0), so the ikp_cute Session is sized
num_blocks = number of CTAs launched = number of SMs (write_stride = num_sms x 1 groups): the persistent
layout. The FINALIZE record carries each CTA's SM id, so the decoded trace is a per-SM item timeline.
"""

from __future__ import annotations

import cutlass
from cutlass import Float32, Int32, cute

from ikp_cute import Profiler, profile_region

COPY, REDUCE, GEMM = 0, 1, 2
KIND_NAMES = ("copy", "reduce", "gemm")
GROUPS = ("worker",)
EVENTS = ("fetch", *KIND_NAMES)
THREADS = 256
CHUNK = THREADS * 4  # fp32 elements per copy chunk: 4 per thread
ROW_LEN = 8192  # reduce row length
TILE, GEMM_K = 32, 128  # GEMM item: 32 x 32 outputs (4 per thread), K = 128


@cute.kernel
def megakernel(items: cute.Tensor, counter: cute.Tensor, src: cute.Tensor, dst: cute.Tensor, X: cute.Tensor,
               red_out: cute.Tensor, A: cute.Tensor, B: cute.Tensor, C: cute.Tensor, prof_buf,
               profile: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    smem = cutlass.memory.SmemAllocator()
    s_item = smem.allocate_tensor(Int32, cute.make_layout(1), byte_alignment=4)
    s_partial = smem.allocate_tensor(Float32, cute.make_layout(THREADS // 32), byte_alignment=4)
    num_items = cute.size(items, mode=[0])
    prof = Profiler.create(profile, prof_buf, group=0)

    item = fetch(counter, s_item, tidx, prof)
    while item < num_items:
        kind = items[item, 0]
        if kind == COPY:
            with profile_region(prof, "copy"):
                copy_item(src, dst, items[item, 1], items[item, 2], tidx)
        elif kind == REDUCE:
            with profile_region(prof, "reduce"):
                reduce_item(X, red_out, items[item, 1], s_partial, tidx)
        else:
            with profile_region(prof, "gemm"):
                gemm_item(A, B, C, items[item, 1], items[item, 2], tidx)
        item = fetch(counter, s_item, tidx, prof)
    prof.finalize()


@cute.jit
def fetch(counter: cute.Tensor, s_item: cute.Tensor, tidx, prof):
    """Next item index for the whole CTA: thread 0 takes it from the global counter."""
    with profile_region(prof, "fetch"):
        cute.arch.barrier()  # everyone has read the previous index
        if tidx == 0:
            s_item[0] = Int32(cute.arch.atomic_add(counter.iterator, Int32(1), sem="relaxed", scope="gpu"))
        cute.arch.barrier()
        item = s_item[0]
    return item


@cute.jit
def copy_item(src: cute.Tensor, dst: cute.Tensor, first_chunk, num_chunks, tidx):
    for c in cutlass.range(num_chunks, unroll=1):
        base = (first_chunk + c) * CHUNK + tidx
        for j in cutlass.range_constexpr(CHUNK // THREADS):
            dst[base + j * THREADS] = src[base + j * THREADS]


@cute.jit
def reduce_item(X: cute.Tensor, red_out: cute.Tensor, row, s_partial: cute.Tensor, tidx):
    acc = Float32(0.0)
    for j in cutlass.range(ROW_LEN // THREADS, unroll=8):
        acc = acc + X[row, tidx + j * THREADS]
    acc = cute.arch.warp_reduction_sum(acc)
    if tidx % 32 == 0:
        s_partial[tidx // 32] = acc
    cute.arch.barrier()
    if tidx == 0:
        total = Float32(0.0)
        for w in cutlass.range_constexpr(THREADS // 32):
            total = total + s_partial[w]
        red_out[row] = total


@cute.jit
def gemm_item(A: cute.Tensor, B: cute.Tensor, C: cute.Tensor, tile_m, tile_n, tidx):
    # thread -> (row, 4 consecutive columns) of the 32 x 32 tile
    row = tile_m * TILE + tidx // (TILE // 4)
    col = tile_n * TILE + (tidx % (TILE // 4)) * 4
    acc = cute.make_rmem_tensor(cute.make_layout(4), Float32)
    acc.fill(0.0)
    for k in cutlass.range(GEMM_K, unroll=4):
        a = A[row, k]
        for j in cutlass.range_constexpr(4):
            acc[j] = acc[j] + a * B[k, col + j]
    for j in cutlass.range_constexpr(4):
        C[row, col + j] = acc[j]


@cute.jit
def launch(items: cute.Tensor, counter: cute.Tensor, src: cute.Tensor, dst: cute.Tensor, X: cute.Tensor,
           red_out: cute.Tensor, A: cute.Tensor, B: cute.Tensor, C: cute.Tensor, prof_buf,
           profile: cutlass.Constexpr, num_ctas: cutlass.Constexpr):
    megakernel(items, counter, src, dst, X, red_out, A, B, C, prof_buf, profile).launch(
        grid=[num_ctas, 1, 1], block=[THREADS, 1, 1])
