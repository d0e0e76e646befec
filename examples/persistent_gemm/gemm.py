"""A persistent warp-specialized Hopper GEMM, C = A @ B^T (bf16 in, fp32 accumulate, bf16 or fp32 out).

The kernel a tracer meets in practice: persistent CTAs, a 4-stage TMA ring, two consumer warp groups,
clusters. It carries no instrumentation of its own: `ikp_cute.trace_pipelines` traces it with no edit.

    gemm = PersistentGemm(cluster_m=2)            # 1 (no cluster) or 2 (pairs of CTAs along M)
    compiled = cute.compile(gemm, a, b, c, 132)   # a: (M, K), b: (N, K), c: (M, N), all K-major / row-major
    compiled(a, b, c)

Work: C is cut into tile_m x tile_n tiles (128 x 256). A *cluster tile* is `cluster_m` tiles stacked along
M that share one N tile (so one B tile). The grid holds `num_ctas` CTAs (the number of SMs, or of SMs that
clusters of this size can occupy at once); CTA pairs (1x1: single CTAs) are clusters, and cluster c takes
cluster tiles c, c + num_clusters, ... (a static persistent schedule; tiles are numbered in bands of
GROUP_M cluster rows so that concurrent clusters share A and B tiles in L2).

Per CTA, 3 warp groups (384 threads):
  group 0, producer:  warp 0 loops over its tiles and their k-tiles: `producer_acquire` (waits for a free
                      stage, then arrive.expect_tx of the stage's bytes on the full barrier), then the TMA
                      loads of the A k-tile (tile_m x tile_k) and the B k-tile into the stage. The other
                      three warps only lower their register budget.
  groups 1, 2:        consumers, 64 rows of the tile each (wgmma m64n256k16): per k-tile `consumer_wait`,
                      four wgmma's, and `consumer_release` of the *previous* stage once its wgmma's have
                      retired (one wgmma group in flight); after the last k-tile, the epilogue converts
                      the accumulators and stores them to C straight from registers (predicated when the
                      tile crosses M or N).
The ring is `cutlass.pipeline.PipelineTmaAsync` (4 stages of 48 KiB: A 16 KiB + B 32 KiB). Full barriers:
one arrive.expect_tx by the producer plus the TMA transaction bytes. Empty barriers: one arrive per
consumer warp *of every CTA that writes the stage* (8 per CTA alone; 16 in a 2x1 cluster).

Cluster 2x1 (`cluster_m=2`): the two CTAs of a cluster compute vertically adjacent tiles with the same B
tile, and **share it by TMA multicast**: each CTA loads half of the B k-tile (128 of its 256 rows) with
`cp.async.bulk.tensor...multicast::cluster` to both CTAs' shared memory, at the same stage offset, and
signals both CTAs' full barriers; A is loaded by each CTA for itself. Each CTA's full barrier therefore
expects the whole stage (A + B bytes) as in the 1x1 kernel, half of B arriving from the peer. Because the
peer writes into this CTA's stage, a stage may be refilled only when the consumers of *both* CTAs have
released it: each consumer warp arrives on the empty barrier of both CTAs (lane 0 on rank 0, lane 1 on
rank 1, `mbarrier.arrive.shared::cluster`), so the empty barriers are cluster-scoped. Neither CTA exits
while the other may still signal it: `producer_tail` waits until every stage was released by both CTAs,
and a CTA's consumers only finish after every multicast into its stages has landed.

`poll_before_wait=True` makes each consumer poll the full barrier (`consumer_try_wait`) and wait only when
the poll failed, as quack's GEMM does; the default waits directly (as CUTLASS's examples do). The two
differ in what a tracer adds to the path from a stage's arrival to the next wgmma (gpu/pipelines_cost.py
times both).

Shapes: any M and N (partial tiles: TMA zero-fills the loads, the epilogue predicates the stores); K must
be a multiple of 8 (TMA needs 16-byte row strides) and at least 1. Checked on the host.

Invariants a change could break (tests/unit/examples/test_persistent_gemm_compile.py):
* the kernel has no ikp_cute call, and its PTX compiled under `trace_pipelines` at each level equals the
  untouched PTX plus records only (same wgmma / cp.async.bulk.tensor / mbarrier / barrier counts);
* cluster 2x1 multicasts B (`.multicast::cluster` TMA loads) and arrives on remote empty barriers
  (`shared::cluster` arrives); cluster 1x1 does neither;
* the traced ring is found with no edit: pipeline `ring`, all four ops, its creation line in this file.
Results are checked against torch on the GPU by examples/persistent_gemm/run.py.
"""

from __future__ import annotations

import cutlass
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, cute, pipeline
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

THREADS_PER_WG = 128
GROUP_M = 8  # cluster rows per band of the tile order (L2 reuse of B tiles across concurrent clusters)


class PersistentGemm:
    """Static configuration only; `__call__` is the host launcher (quack / FA4 style)."""

    def __init__(self, cluster_m: int = 1, tile_mnk=(128, 256, 64), num_stages: int = 4,
                 poll_before_wait: bool = False):
        if cluster_m not in (1, 2):
            raise ValueError(f"PersistentGemm: cluster_m={cluster_m}; expected 1 or 2")
        self.cluster_m = cluster_m
        self.tile_m, self.tile_n, self.tile_k = tile_mnk
        if self.tile_m != 128:
            raise ValueError("PersistentGemm: tile_m must be 128 (two consumer warp groups of 64 rows)")
        if self.tile_n % (8 * cluster_m) or self.tile_n > 256:
            raise ValueError(f"PersistentGemm: tile_n={self.tile_n} must be <= 256 and split over the cluster")
        self.num_stages = num_stages
        self.poll_before_wait = poll_before_wait
        self.num_consumer_wgs = 2
        self.num_threads = THREADS_PER_WG * (1 + self.num_consumer_wgs)
        self.producer_regs, self.consumer_regs = 40, 232

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, num_ctas: cutlass.Constexpr):
        if cutlass.const_expr(mA.element_type != BFloat16 or mB.element_type != BFloat16):
            raise TypeError("PersistentGemm: A and B must be bf16")
        if cutlass.const_expr(mC.element_type not in (BFloat16, Float32)):
            raise TypeError("PersistentGemm: C must be bf16 or fp32")
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, OperandMajorMode.K, OperandMajorMode.K, Float32,
            atom_layout_mnk=(self.num_consumer_wgs, 1, 1), tiler_mn=(64, self.tile_n),
        )
        tile_mnk = (self.tile_m, self.tile_n, self.tile_k)
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, self.num_stages)
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, self.num_stages)
        sA_one, sB_one = cute.slice_(sA_layout, (None, None, 0)), cute.slice_(sB_layout, (None, None, 0))
        tma_a, tA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mA, sA_one, (self.tile_m, self.tile_k)
        )
        if cutlass.const_expr(self.cluster_m == 1):
            tma_b, tB = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(), mB, sB_one, (self.tile_n, self.tile_k)
            )
        else:
            tma_b, tB = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SMulticastOp(), mB, sB_one, (self.tile_n, self.tile_k),
                num_multicast=self.cluster_m,
            )
        stage_bytes = cute.size_in_bytes(BFloat16, sA_one) + cute.size_in_bytes(BFloat16, sB_one)

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(sB_layout)], 1024]

        num_clusters = num_ctas // self.cluster_m
        self.kernel(tma_a, tA, tma_b, tB, mC, tiled_mma, sA_layout, sB_layout, stage_bytes, SharedStorage).launch(
            grid=[num_clusters * self.cluster_m, 1, 1],
            block=[self.num_threads, 1, 1],
            cluster=[self.cluster_m, 1, 1] if cutlass.const_expr(self.cluster_m > 1) else None,
            min_blocks_per_mp=1,
        )

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor, mC: cute.Tensor,
               tiled_mma: cute.TiledMma, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               stage_bytes: cutlass.Constexpr, SharedStorage: cutlass.Constexpr):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        consumer_warps = self.num_consumer_wgs * 4
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # one arrive per consumer warp of every CTA whose TMA writes this CTA's stages
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_warps * self.cluster_m),
            tx_count=stage_bytes,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
        )  # initializes the barriers and syncs the CTA (the cluster, for cluster_m > 1)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)

        # The static persistent schedule (same sequence in every role of the CTA).
        num_m = cute.ceil_div(cute.size(mC, mode=[0]), self.tile_m)
        num_n = cute.ceil_div(cute.size(mC, mode=[1]), self.tile_n)
        num_cluster_rows = cute.ceil_div(num_m, self.cluster_m)
        num_cluster_tiles = num_cluster_rows * num_n
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        rank = bidx % self.cluster_m  # the CTA's rank in its cluster (clusters are consecutive along x)
        first_tile = bidx // self.cluster_m
        tile_step = gdim // self.cluster_m
        k_tiles = cute.ceil_div(cute.size(mA, mode=[1]), self.tile_k)

        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                self.produce(tma_a, tma_b, ring, sA, sB, mA, mB, rank, first_tile, num_cluster_tiles, tile_step,
                             num_cluster_rows, num_n, k_tiles)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            self.consume(tiled_mma, ring, sA, sB, mC, tidx - THREADS_PER_WG, rank, first_tile, num_cluster_tiles,
                         tile_step, num_cluster_rows, num_n, k_tiles)

    @cute.jit
    def tile_coord(self, t: Int32, rank: Int32, num_cluster_rows: Int32, num_n: Int32):
        """(m tile, n tile) of this CTA for cluster tile `t`: bands of GROUP_M cluster rows, column by
        column within a band."""
        band_tiles = GROUP_M * num_n
        band = t // band_tiles
        first_row = band * GROUP_M
        rows = cutlass.min(num_cluster_rows - first_row, GROUP_M)
        within = t - band * band_tiles
        return (first_row + within % rows) * self.cluster_m + rank, within // rows

    @cute.jit
    def produce(self, tma_a, tma_b, ring, sA, sB, mA, mB, rank, first_tile, num_cluster_tiles, tile_step,
                num_cluster_rows, num_n, k_tiles):
        # (tile_m, tile_k, m tiles, k tiles) and (tile_n, tile_k, n tiles, k tiles) views, partitioned once
        gA = cute.local_tile(mA, (self.tile_m, self.tile_k), (None, None))
        gB = cute.local_tile(mB, (self.tile_n, self.tile_k), (None, None))
        tAsA, tAgA = cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
        )
        # cluster 2x1: this CTA's half of the B tile, multicast to both CTAs' stages
        b_rank = rank if cutlass.const_expr(self.cluster_m > 1) else 0
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, b_rank, cute.make_layout(self.cluster_m), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
        )
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        for t in cutlass.range(first_tile, num_cluster_tiles, tile_step, unroll=1):
            m_tile, n_tile = self.tile_coord(t, rank, num_cluster_rows, num_n)
            for k in cutlass.range(k_tiles, unroll=1):
                ring.producer_acquire(state)  # free stage, then arrive.expect_tx(stage bytes)
                full = ring.producer_get_barrier(state)
                cute.copy(tma_a, tAgA[None, m_tile, k], tAsA[None, state.index], tma_bar_ptr=full)
                if cutlass.const_expr(self.cluster_m == 1):
                    cute.copy(tma_b, tBgB[None, n_tile, k], tBsB[None, state.index], tma_bar_ptr=full)
                else:
                    cute.copy(tma_b, tBgB[None, n_tile, k], tBsB[None, state.index], tma_bar_ptr=full,
                              mcast_mask=cutlass.Int16((1 << self.cluster_m) - 1))
                ring.producer_commit(state)
                state.advance()
        ring.producer_tail(state)  # every stage released, by both CTAs of a cluster: nobody signals us later

    @cute.jit
    def consume(self, tiled_mma, ring, sA, sB, mC, ctid, rank, first_tile, num_cluster_tiles, tile_step,
                num_cluster_rows, num_n, k_tiles):
        wg = ctid // THREADS_PER_WG
        wg_mma = tiled_mma.get_slice(cute.make_layout(self.num_consumer_wgs, stride=THREADS_PER_WG)(wg))
        thr_mma = tiled_mma.get_slice(ctid)
        tCrA = tiled_mma.make_fragment_A(wg_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(wg_mma.partition_B(sB))
        gC = cute.local_tile(mC, (self.tile_m, self.tile_n), (None, None))  # (tile_m, tile_n, m tiles, n tiles)
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), (self.tile_m, self.tile_n), (None, None))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[None, None, 0, 0]).shape, Float32)
        num_k_blocks = cute.size(tCrA, mode=[2])

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        for t in cutlass.range(first_tile, num_cluster_tiles, tile_step, unroll=1):
            m_tile, n_tile = self.tile_coord(t, rank, num_cluster_rows, num_n)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
            for k in cutlass.range(k_tiles, unroll=1):
                if cutlass.const_expr(self.poll_before_wait):
                    ready = ring.consumer_try_wait(state)  # the wait below runs only when this poll failed
                    ring.consumer_wait(state, ready)
                else:
                    ring.consumer_wait(state)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(num_k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[None, None, kb, state.index], tCrB[None, None, kb, state.index], acc)
                    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                # the previous k-tile's wgmma's have retired: its stage may be refilled
                warpgroup.wait_group(1)
                if k > 0:
                    ring.consumer_release(release)
                    release.advance()
                state.advance()
            warpgroup.wait_group(0)
            ring.consumer_release(release)
            release.advance()
            # the tile lies inside C when its last element does
            inside = cute.elem_less(((m_tile + 1) * self.tile_m - 1, (n_tile + 1) * self.tile_n - 1), mC.shape)
            self.epilogue(acc, thr_mma.partition_C(gC[None, None, m_tile, n_tile]),
                          thr_mma.partition_C(cC[None, None, m_tile, n_tile]), mC.shape, inside)

    @cute.jit
    def epilogue(self, acc, tCgC, tCcC, shape_mn, inside):
        """Accumulators -> C (converted to C's type), each thread its own fragment; predicated per element
        only when the tile crosses M or N."""
        out = cute.make_rmem_tensor(acc.shape, tCgC.element_type)
        out.store(acc.load().to(tCgC.element_type))
        if inside:
            tCgC.store(out.load())
        else:
            for i in cutlass.range(cute.size(out), unroll_full=True):
                if cute.elem_less(tCcC[i], shape_mn):
                    tCgC[i] = out[i]
