"""A warp-specialized Hopper GEMM, C = A @ B^T (bf16 in, fp32 out), instrumented with ikp_cute.

One CTA computes one tile_m x tile_n tile of C with three warp groups:
  group 0, producer:   warp 0 waits for a free stage of a `num_stages`-deep shared-memory ring
                       (`wait_slot`), then issues the TMA loads of the A and B k-tiles (`issue_tma`);
                       the TMA engine completes the stage's full mbarrier with the bytes it wrote.
  groups 1, 2, consumers: each owns 64 rows of the tile; per k-tile they wait for the stage to fill
                       (`wait_data`), run the wgmma's over it (`mma`), release the stage, and finally
                       write their accumulators to C (`epilogue`); `tile` spans a consumer's whole work.
The ring is `cutlass.pipeline.PipelineTmaAsync` (full barriers: TMA transaction counts; empty barriers:
one arrive per consumer warp). Records: lane 0 of warps 0, 4 and 8 (ikp_cute's default leaders).

`profile` is a compile-time ikp_cute ProfileSpec: a disabled spec compiles to the uninstrumented kernel.
Shapes must be multiples of the tile (checked on the host): the example has no residue handling.
"""

from __future__ import annotations

import cutlass
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, cute, pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.utils import LayoutEnum

from ikp_cute import Profiler, profile_region

GROUPS = ("producer", "consumer_0", "consumer_1")
EVENTS = ("wait_slot", "issue_tma", "tile", "wait_data", "mma", "epilogue")
THREADS_PER_WG = 128


class PipelinedGemm:
    """Static configuration only; `__call__` is the host launcher (quack/FA4 style)."""

    def __init__(self, tile_mnk=(128, 128, 64), num_stages=4):
        self.tile_m, self.tile_n, self.tile_k = tile_mnk
        if self.tile_m != 128:
            raise ValueError("tile_m must be 128: two consumer warp groups of 64 rows each")
        self.num_stages = num_stages
        self.num_consumer_wgs = 2
        self.num_threads = THREADS_PER_WG * (1 + self.num_consumer_wgs)
        self.producer_regs, self.consumer_regs = 40, 232

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, prof_buf, profile: cutlass.Constexpr):
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            BFloat16, BFloat16, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, Float32,
            atom_layout_mnk=(self.num_consumer_wgs, 1, 1), tiler_mn=(64, self.tile_n),
        )
        tile_mnk = (self.tile_m, self.tile_n, self.tile_k)
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, self.num_stages)
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile_mnk, BFloat16, self.num_stages)
        tma_a, tA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mA, cute.slice_(sA_layout, (None, None, 0)), (self.tile_m, self.tile_k)
        )
        tma_b, tB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mB, cute.slice_(sB_layout, (None, None, 0)), (self.tile_n, self.tile_k)
        )
        stage_bytes = cute.size_in_bytes(BFloat16, cute.slice_(sA_layout, (None, None, 0))) + cute.size_in_bytes(
            BFloat16, cute.slice_(sB_layout, (None, None, 0))
        )

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(sB_layout)], 1024]

        grid = (cute.size(mC, mode=[0]) // self.tile_m, cute.size(mC, mode=[1]) // self.tile_n, 1)
        self.kernel(tma_a, tA, tma_b, tB, mC, tiled_mma, sA_layout, sB_layout, stage_bytes, SharedStorage,
                    prof_buf, profile).launch(grid=grid, block=[self.num_threads, 1, 1], min_blocks_per_mp=1)

    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor, mC: cute.Tensor,
               tiled_mma: cute.TiledMma, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               stage_bytes: cutlass.Constexpr, SharedStorage: cutlass.Constexpr, prof_buf, profile: cutlass.Constexpr):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        m_block, n_block, _ = cute.arch.block_idx()
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_consumer_wgs * 4),
            tx_count=stage_bytes,
        )  # initializes the barriers and syncs the CTA
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)

        # (tile, tile_k, k_tiles) views of this CTA's rows of A and B
        gA = cute.local_tile(mA, (self.tile_m, self.tile_k), (m_block, None))
        gB = cute.local_tile(mB, (self.tile_n, self.tile_k), (n_block, None))
        gC = cute.local_tile(mC, (self.tile_m, self.tile_n), (m_block, n_block))
        k_tiles = cute.size(gA, mode=[2])

        prof = Profiler.create(profile, prof_buf, group=warp_idx // 4)
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                self.produce(tma_a, tma_b, ring, sA, sB, gA, gB, k_tiles, prof)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            with profile_region(prof, "tile"):
                self.consume(tiled_mma, ring, sA, sB, gC, k_tiles, tidx - THREADS_PER_WG, prof)
        prof.finalize()

    @cute.jit
    def produce(self, tma_a, tma_b, ring, sA, sB, gA, gB, k_tiles, prof):
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        for k in cutlass.range(k_tiles, unroll=1):
            with profile_region(prof, "wait_slot"):
                ring.producer_acquire(state)
            with profile_region(prof, "issue_tma"):
                full = ring.producer_get_barrier(state)
                cute.copy(tma_a, tAgA[None, k], tAsA[None, state.index], tma_bar_ptr=full)
                cute.copy(tma_b, tBgB[None, k], tBsB[None, state.index], tma_bar_ptr=full)
            ring.producer_commit(state)
            state.advance()
        ring.producer_tail(state)  # do not exit while consumers still read the ring

    @cute.jit
    def consume(self, tiled_mma, ring, sA, sB, gC, k_tiles, ctid, prof):
        wg = ctid // THREADS_PER_WG
        wg_mma = tiled_mma.get_slice(cute.make_layout(self.num_consumer_wgs, stride=THREADS_PER_WG)(wg))
        tCrA = tiled_mma.make_fragment_A(wg_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(wg_mma.partition_B(sB))
        tCgC = tiled_mma.get_slice(ctid).partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, Float32)
        num_k_blocks = cute.size(tCrA, mode=[2])

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
        for k in cutlass.range(k_tiles, unroll=1):
            with profile_region(prof, "wait_data"):
                ring.consumer_wait(state)
            with profile_region(prof, "mma"):
                warpgroup.fence()
                for kb in cutlass.range_constexpr(num_k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[None, None, kb, state.index], tCrB[None, None, kb, state.index], acc)
                    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                warpgroup.wait_group(0)
            ring.consumer_release(state)
            state.advance()
        with profile_region(prof, "epilogue"):
            tCgC.store(acc.load())
