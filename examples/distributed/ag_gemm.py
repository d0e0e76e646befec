"""All-gather overlapped with a GEMM, in one persistent CuTe DSL kernel per rank, synchronised through flags
in symmetric memory: C_r = all_gather(A) @ B_r (fp32), every rank owning one row shard of A.

Buffers of rank r: its shard (rows [r * Ms, (r + 1) * Ms) of A), its B_r and C_r, and two symmetric
buffers that every rank can address (torch symmetric memory without multicast, or, simulated on one GPU,
ordinary buffers): `a_full` [M, K] (the gathered A) and `flags` [world, Ms / 64] int32, where
flags[s, rb] counts the chunks of row block rb of rank s's shard that have arrived in this rank's a_full.
The kernel gets the symmetric buffers as tables of addresses (`a_ptrs[rank]`, `flag_ptrs[rank]`, int64,
each in the launching GPU's address space): a peer's buffer is an ordinary global pointer.

Tasks (one table and one queue counter per rank: tasks[local rank, i] = (kind, a, b, c)):
  PUSH (0, rb, dst, chunk): copy the chunk (64 rows x K / chunks columns) of row block rb of the local
      shard into rank dst's a_full with plain stores (peer stores over NVLink when dst is another GPU),
      CTA barrier, then thread 0 signals dst's flags[rank, rb] with `cutlass.utils.distributed.red_add1(
      order="release", scope="sys")`. Every rank pushes to every rank, itself included, so a_full ends up
      the all-gathered A everywhere.
  GEMM (1, tm, tn, 0): the 64 x 64 tile (tm, tn) of C_r. Rows of the rank's own shard are read from the
      shard, without waiting (in what order the tiles come is the host's choice: run.py's task_table). Rows of
      rank s's shard: thread 0 waits until flags[s, rb] reaches
      epoch * chunks (`wait_kind` "ld": `spin_lock_ld_lt_relaxed_wait(scope="sys")` + `fence.acq_rel.sys`;
      "cas": `spin_lock_atom_cas_acquire_wait(scope="sys")` with reset_val = expected_val), a CTA barrier,
      then the tile reads a_full.
The host puts every PUSH before every GEMM in each queue: a CTA waits only on pushes, which never wait,
so no rank can deadlock another. Flags count up across launches (`epoch` = 1, 2, ...): no reset between
launches; a launch must not start before every rank finished reading a_full in the previous one (the host
orders launches with a collective on the kernel's stream).

Ranks per launch: one process per GPU launches `ctas_per_rank` CTAs for its rank (`rank_base` = its rank,
`ranks_here` = 1). Simulated on one GPU, one launch runs every rank: CTA b is rank b // ctas_per_rank,
and the per-rank tensors are stacked (shards by rows: [ranks_here * Ms, K]; B and C by columns:
[K, ranks_here * N], [M, ranks_here * N]). The same code path either way; scope "sys" either way.

No ikp_cute call and no multimem instruction: only unicast loads, stores, `red` and `atom` (tests/unit/
examples/test_flag_examples.py reads the PTX). Skew knob: the CTAs of rank `delay_rank` first spin `delay_ns` on
%globaltimer (0 = off). Ground truth (compile-time `log_tasks`): like examples/megakernel_deps, per
(local rank, task) the int64 row (cta, start, wait_begin, wait_end, signal, end).
"""

from __future__ import annotations

import cutlass
import cutlass.utils.distributed as distributed
import tile_gemm as tg
from cutlass import Float32, Int32, Int64, cute

PUSH, GEMM = 0, 1
WAIT_KINDS = ("ld", "cas")
LOG_FIELDS = ("cta", "start", "wait_begin", "wait_end", "signal", "end")
CTA, START, WAIT_BEGIN, WAIT_END, SIGNAL, END = range(len(LOG_FIELDS))


@cute.kernel
def ag_gemm(tasks: cute.Tensor, queue: cute.Tensor, shards: cute.Tensor, B: cute.Tensor, C: cute.Tensor,
            a_ptrs: cute.Tensor, flag_ptrs: cute.Tensor, rank_base: Int32, epoch: Int32, delay_rank: Int32,
            delay_ns: Int64, log: cute.Tensor, world: cutlass.Constexpr, ranks_here: cutlass.Constexpr,
            ctas_per_rank: cutlass.Constexpr, chunks: cutlass.Constexpr, wait_kind: cutlass.Constexpr,
            log_tasks: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    here = bidx // ctas_per_rank  # local rank index within this launch
    rank = rank_base + here
    smem = cutlass.memory.SmemAllocator()
    s_task = smem.allocate_tensor(Int32, cute.make_layout(1), byte_alignment=4)
    sA, sB = tg.allocate(smem)
    acc = tg.make_accumulator()
    num_tasks = cute.size(tasks, mode=[1])
    shard_rows = cute.size(C, mode=[0]) // world  # Ms
    K = cute.size(shards, mode=[1])
    N = cute.size(C, mode=[1]) // ranks_here  # columns of one rank's B and C
    row_blocks = shard_rows // tg.TILE_M  # per shard
    a_full_layout = cute.make_layout((world * shard_rows, K), stride=(K, 1))

    if rank == delay_rank:
        delay(delay_ns, tidx)
    task = fetch(queue, here, s_task, tidx)
    while task < num_tasks:
        kind, ta, tb, tc = tasks[here, task, 0], tasks[here, task, 1], tasks[here, task, 2], tasks[here, task, 3]
        if cutlass.const_expr(log_tasks):
            if tidx == 0:
                log[here, task, CTA] = Int64(bidx)
                log[here, task, START] = Int64(cute.arch.globaltimer())
        if kind == PUSH:
            rb, dst, chunk = ta, tb, tc
            a_dst = cute.make_tensor(cute.make_ptr(Float32, a_ptrs[dst], cute.AddressSpace.gmem, assumed_align=16),
                                     a_full_layout)
            push_chunk(shards, here * shard_rows + rb * tg.TILE_M, a_dst, rank * shard_rows + rb * tg.TILE_M,
                       chunk * (K // chunks), K // chunks, tidx)
            cute.arch.barrier()  # every thread's stores happen before thread 0's release
            if tidx == 0:
                if cutlass.const_expr(log_tasks):
                    log[here, task, SIGNAL] = Int64(cute.arch.globaltimer())
                distributed.red_add1(flag(flag_ptrs, dst, rank * row_blocks + rb), order="release", scope="sys")
        else:
            tm, tn = ta, tb
            src = tm // row_blocks
            n0 = here * N + tn * tg.TILE_N
            if src == rank:  # own rows: straight from the shard, no wait
                tg.mma_tile(shards, B, here * shard_rows + (tm - src * row_blocks) * tg.TILE_M, n0, sA, sB, acc, tidx)
            else:
                if tidx == 0:
                    if cutlass.const_expr(log_tasks):
                        log[here, task, WAIT_BEGIN] = Int64(cute.arch.globaltimer())
                    wait_count(flag(flag_ptrs, rank, tm), epoch * chunks, wait_kind)
                    if cutlass.const_expr(log_tasks):
                        log[here, task, WAIT_END] = Int64(cute.arch.globaltimer())
                cute.arch.barrier()  # thread 0's acquire happens before every thread's a_full loads
                a_here = cute.make_tensor(
                    cute.make_ptr(Float32, a_ptrs[rank], cute.AddressSpace.gmem, assumed_align=16), a_full_layout)
                tg.mma_tile(a_here, B, tm * tg.TILE_M, n0, sA, sB, acc, tidx)
            tg.store_tile(C, tm * tg.TILE_M, n0, acc, tidx, False)
        if cutlass.const_expr(log_tasks):
            if tidx == 0:
                log[here, task, END] = Int64(cute.arch.globaltimer())
        task = fetch(queue, here, s_task, tidx)


@cute.jit
def flag(flag_ptrs: cute.Tensor, owner, index):
    """Pointer to flags[index] (flattened [world, row_blocks]) in rank `owner`'s memory."""
    return cute.make_ptr(Int32, flag_ptrs[owner] + Int64(index) * 4, cute.AddressSpace.gmem, assumed_align=4)


@cute.jit
def push_chunk(shards: cute.Tensor, src_row0, a_dst: cute.Tensor, dst_row0, col0, cols, tidx):
    """a_dst[dst_row0 + i, col0 + j] = shards[src_row0 + i, col0 + j] for i < 64, j < cols (coalesced)."""
    for e in cutlass.range(tg.TILE_M * cols // tg.THREADS, unroll=4):
        i = (e * tg.THREADS + tidx) // cols
        j = (e * tg.THREADS + tidx) % cols
        a_dst[dst_row0 + i, col0 + j] = shards[src_row0 + i, col0 + j]


@cute.jit
def fetch(queue: cute.Tensor, here, s_task: cute.Tensor, tidx):
    """Next task index for the whole CTA from its rank's queue counter."""
    cute.arch.barrier()
    if tidx == 0:
        s_task[0] = Int32(cute.arch.atomic_add(queue.iterator + here, Int32(1), sem="relaxed", scope="gpu"))
    cute.arch.barrier()
    return s_task[0]


@cute.jit
def wait_count(counter, expected, wait_kind: cutlass.Constexpr):
    """Spin until the flag (written by another GPU) reaches `expected`, with acquire ordering at system scope."""
    if cutlass.const_expr(wait_kind == "ld"):
        distributed.spin_lock_ld_lt_relaxed_wait(counter, expected_val=expected, scope="sys")
        cute.arch.fence_acq_rel_sys()
    else:
        distributed.spin_lock_atom_cas_acquire_wait(counter, expected_val=expected, reset_val=expected, scope="sys")


@cute.jit
def delay(ns: Int64, tidx):
    if tidx == 0:
        t0 = cute.arch.globaltimer()
        now = t0
        while now - t0 < ns:
            now = cute.arch.globaltimer()
    cute.arch.barrier()


@cute.jit
def launch(tasks: cute.Tensor, queue: cute.Tensor, shards: cute.Tensor, B: cute.Tensor, C: cute.Tensor,
           a_ptrs: cute.Tensor, flag_ptrs: cute.Tensor, rank_base: Int32, epoch: Int32, delay_rank: Int32,
           delay_ns: Int64, log: cute.Tensor, world: cutlass.Constexpr, ranks_here: cutlass.Constexpr,
           ctas_per_rank: cutlass.Constexpr, chunks: cutlass.Constexpr, wait_kind: cutlass.Constexpr,
           log_tasks: cutlass.Constexpr):
    if cutlass.const_expr(wait_kind not in WAIT_KINDS):
        raise ValueError(f"wait_kind={wait_kind!r}; expected one of {WAIT_KINDS}")
    ag_gemm(tasks, queue, shards, B, C, a_ptrs, flag_ptrs, rank_base, epoch, delay_rank, delay_ns, log, world,
            ranks_here, ctas_per_rank, chunks, wait_kind, log_tasks).launch(
        grid=[ranks_here * ctas_per_rank, 1, 1], block=[tg.THREADS, 1, 1])
