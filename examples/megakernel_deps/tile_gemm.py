"""A SIMT fp32 tile GEMM for persistent kernels: the CTA's 256 threads compute one TILE_M x TILE_N tile
of A @ B (A row-major [M, K], B row-major [K, N], fp32 FMA), staging TILE_K-deep slices of A and B
through shared memory. Used by examples/megakernel_deps and examples/distributed, whose point is the
dependencies between tiles, not the GEMM's speed.

Thread t owns the 4 x 4 outputs (ty + 16 i, tx + 16 j), tx = t % 16, ty = t // 16: a warp reads two A
rows (broadcast) and 16 consecutive B columns per k (no bank conflicts); the A slice is stored with one
padding column (row stride TILE_K + 1) so that a warp's stores of one A row hit distinct banks.
K must be a multiple of TILE_K and the tile inside the matrices (the hosts check their shapes).
"""

from __future__ import annotations

import cutlass
from cutlass import Float32, cute

THREADS = 256
TILE_M = TILE_N = 64
TILE_K = 32
PER_THREAD = 4  # outputs per thread along each of M and N: 4 x 4
STRIDE = 16  # TILE_M // PER_THREAD: distance between a thread's rows (and columns)


def allocate(smem):
    """The A and B slices in shared memory: (sA [TILE_M, TILE_K] padded, sB [TILE_K, TILE_N])."""
    sA = smem.allocate_tensor(Float32, cute.make_layout((TILE_M, TILE_K), stride=(TILE_K + 1, 1)), byte_alignment=16)
    sB = smem.allocate_tensor(Float32, cute.make_layout((TILE_K, TILE_N), stride=(TILE_N, 1)), byte_alignment=16)
    return sA, sB


def make_accumulator():
    return cute.make_rmem_tensor(cute.make_layout(PER_THREAD * PER_THREAD), Float32)


@cute.jit
def mma_tile(A: cute.Tensor, B: cute.Tensor, m0, n0, sA: cute.Tensor, sB: cute.Tensor, acc: cute.Tensor, tidx):
    """acc = A[m0 : m0 + TILE_M, :] @ B[:, n0 : n0 + TILE_N] (this thread's 16 outputs). Ends with a CTA
    barrier, so the shared slices can be reused right after."""
    acc.fill(0.0)
    tx, ty = tidx % STRIDE, tidx // STRIDE
    for kt in cutlass.range(cute.size(A, mode=[1]) // TILE_K, unroll=1):
        k0 = kt * TILE_K
        # A slice: a warp loads 32 consecutive k of one row (coalesced); 8 rows per pass
        for i in cutlass.range_constexpr(TILE_M * TILE_K // THREADS):
            r = tidx // TILE_K + i * (THREADS // TILE_K)
            sA[r, tidx % TILE_K] = A[m0 + r, k0 + tidx % TILE_K]
        # B slice: 64 consecutive columns of one k per 64 threads; 4 rows per pass
        for i in cutlass.range_constexpr(TILE_K * TILE_N // THREADS):
            r = tidx // TILE_N + i * (THREADS // TILE_N)
            sB[r, tidx % TILE_N] = B[k0 + r, n0 + tidx % TILE_N]
        cute.arch.barrier()
        for kk in cutlass.range_constexpr(TILE_K):
            a = [sA[ty + STRIDE * i, kk] for i in range(PER_THREAD)]
            b = [sB[kk, tx + STRIDE * j] for j in range(PER_THREAD)]
            for i in cutlass.range_constexpr(PER_THREAD):
                for j in cutlass.range_constexpr(PER_THREAD):
                    acc[i * PER_THREAD + j] = acc[i * PER_THREAD + j] + a[i] * b[j]
        cute.arch.barrier()


@cute.jit
def store_tile(C: cute.Tensor, m0, n0, acc: cute.Tensor, tidx, relu: cutlass.Constexpr):
    """C[m0 : m0 + TILE_M, n0 : n0 + TILE_N] = acc (max(acc, 0) when `relu`)."""
    tx, ty = tidx % STRIDE, tidx // STRIDE
    for i in cutlass.range_constexpr(PER_THREAD):
        for j in cutlass.range_constexpr(PER_THREAD):
            v = acc[i * PER_THREAD + j]
            if cutlass.const_expr(relu):
                v = cute.arch.fmax(v, Float32(0.0))
            C[m0 + ty + STRIDE * i, n0 + tx + STRIDE * j] = v
