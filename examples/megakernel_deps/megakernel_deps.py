"""A persistent CuTe DSL megakernel whose tasks form a dependency graph through global counters:
two chained GEMM layers, Y = relu(X @ W1) then Z = Y @ W2 (fp32), split into 64 x 64 tile tasks.

Schedule: one CTA per SM (grid = SM count) takes task indices from a global queue (thread 0's atomic
add on `queue[0]`, published to the CTA through shared memory) until the task table is exhausted.
A task row is (layer, tile_m, tile_n, 0). The host orders the table so that every layer-2 task comes
after all layer-1 tasks of its row block (examples/megakernel_deps/run.py checks it): a CTA can only
wait on tasks that were taken before its own, whose CTAs never wait, so the grid cannot deadlock.

Dependencies: a layer-1 task stores its tile of Y, passes a CTA barrier, and thread 0 signals the row
block's counter, `ready[tile_m]`, with `cutlass.utils.distributed.red_add1(order="release",
scope="gpu")` (a `red.release.gpu.global.add.s32`; the barrier plus the release's cumulativity publish
every thread's stores). A layer-2 task needs the whole row block of Y: thread 0 waits until
`ready[tile_m]` reaches the number of layer-1 tiles per row (N1 / 64), with either library wait
(`wait_kind`, compile-time):
  "ld":  `spin_lock_ld_lt_relaxed_wait` (relaxed `ld` spin) then `fence.acq_rel.gpu`;
  "cas": `spin_lock_atom_cas_acquire_wait` with reset_val = expected_val (an acquire `atom.cas` that
         leaves the count as it is, so every layer-2 task of the row can wait on the same counter).
then a CTA barrier releases the other threads to read Y.

The kernel makes no ikp_cute call: tracing it must need no kernel edit. The flag operations go through
the module attributes of `cutlass.utils.distributed` at trace time, where a tracer can substitute them.

Skew knob (runtime arguments, one compiled kernel): the task whose queue index is `skew_task` first
spins `skew_ns` nanoseconds on `%globaltimer` (thread 0, then a CTA barrier); skew_ns = 0 is off.

Ground truth (compile-time `log_tasks`, off by default): thread 0 writes per task the int64 row
(cta, start, wait_begin, wait_end, signal, end) of `%globaltimer` values into `log[task]` (0 where a
field does not apply), an independent record of what a tracer should find.
"""

from __future__ import annotations

import cutlass
import cutlass.utils.distributed as distributed
import tile_gemm as tg
from cutlass import Int32, Int64, cute

LAYER1, LAYER2 = 0, 1
WAIT_KINDS = ("ld", "cas")
LOG_FIELDS = ("cta", "start", "wait_begin", "wait_end", "signal", "end")
CTA, START, WAIT_BEGIN, WAIT_END, SIGNAL, END = range(len(LOG_FIELDS))


@cute.kernel
def megakernel_deps(tasks: cute.Tensor, queue: cute.Tensor, ready: cute.Tensor, X: cute.Tensor, W1: cute.Tensor,
                    Y: cute.Tensor, W2: cute.Tensor, Z: cute.Tensor, skew_task: Int32, skew_ns: Int64,
                    log: cute.Tensor, wait_kind: cutlass.Constexpr, log_tasks: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    smem = cutlass.memory.SmemAllocator()
    s_task = smem.allocate_tensor(Int32, cute.make_layout(1), byte_alignment=4)
    sA, sB = tg.allocate(smem)
    acc = tg.make_accumulator()
    num_tasks = cute.size(tasks, mode=[0])
    row_tiles = cute.size(W1, mode=[1]) // tg.TILE_N  # layer-1 tiles per row block = signals per counter

    task = fetch(queue, s_task, tidx)
    while task < num_tasks:
        layer, tile_m, tile_n = tasks[task, 0], tasks[task, 1], tasks[task, 2]
        m0, n0 = tile_m * tg.TILE_M, tile_n * tg.TILE_N
        if cutlass.const_expr(log_tasks):
            if tidx == 0:
                log[task, CTA] = Int64(bidx)
                log[task, START] = Int64(cute.arch.globaltimer())
        if task == skew_task:
            delay(skew_ns, tidx)
        if layer == LAYER1:
            tg.mma_tile(X, W1, m0, n0, sA, sB, acc, tidx)
            tg.store_tile(Y, m0, n0, acc, tidx, True)
            cute.arch.barrier()  # every thread's Y stores happen before thread 0's release
            if tidx == 0:
                if cutlass.const_expr(log_tasks):
                    log[task, SIGNAL] = Int64(cute.arch.globaltimer())
                distributed.red_add1(ready.iterator + tile_m, order="release", scope="gpu")
        else:
            if tidx == 0:
                if cutlass.const_expr(log_tasks):
                    log[task, WAIT_BEGIN] = Int64(cute.arch.globaltimer())
                wait_count(ready.iterator + tile_m, row_tiles, wait_kind)
                if cutlass.const_expr(log_tasks):
                    log[task, WAIT_END] = Int64(cute.arch.globaltimer())
            cute.arch.barrier()  # thread 0's acquire happens before every thread's Y loads
            tg.mma_tile(Y, W2, m0, n0, sA, sB, acc, tidx)
            tg.store_tile(Z, m0, n0, acc, tidx, False)
        if cutlass.const_expr(log_tasks):
            if tidx == 0:
                log[task, END] = Int64(cute.arch.globaltimer())
        task = fetch(queue, s_task, tidx)


@cute.jit
def fetch(queue: cute.Tensor, s_task: cute.Tensor, tidx):
    """Next task index for the whole CTA: thread 0 takes it from the global queue counter."""
    cute.arch.barrier()  # everyone has read the previous index
    if tidx == 0:
        s_task[0] = Int32(cute.arch.atomic_add(queue.iterator, Int32(1), sem="relaxed", scope="gpu"))
    cute.arch.barrier()
    return s_task[0]


@cute.jit
def wait_count(counter, expected, wait_kind: cutlass.Constexpr):
    """Spin until the counter reaches `expected`, with acquire ordering (one thread)."""
    if cutlass.const_expr(wait_kind == "ld"):
        distributed.spin_lock_ld_lt_relaxed_wait(counter, expected_val=expected, scope="gpu")
        cute.arch.fence_acq_rel_gpu()
    else:
        distributed.spin_lock_atom_cas_acquire_wait(counter, expected_val=expected, reset_val=expected, scope="gpu")


@cute.jit
def delay(ns: Int64, tidx):
    """The whole CTA starts its task `ns` nanoseconds later (thread 0 spins on %globaltimer)."""
    if tidx == 0:
        t0 = cute.arch.globaltimer()
        now = t0
        while now - t0 < ns:
            now = cute.arch.globaltimer()
    cute.arch.barrier()


@cute.jit
def launch(tasks: cute.Tensor, queue: cute.Tensor, ready: cute.Tensor, X: cute.Tensor, W1: cute.Tensor,
           Y: cute.Tensor, W2: cute.Tensor, Z: cute.Tensor, skew_task: Int32, skew_ns: Int64, log: cute.Tensor,
           wait_kind: cutlass.Constexpr, log_tasks: cutlass.Constexpr, num_ctas: cutlass.Constexpr):
    if cutlass.const_expr(wait_kind not in WAIT_KINDS):
        raise ValueError(f"wait_kind={wait_kind!r}; expected one of {WAIT_KINDS}")
    megakernel_deps(tasks, queue, ready, X, W1, Y, W2, Z, skew_task, skew_ns, log, wait_kind, log_tasks).launch(
        grid=[num_ctas, 1, 1], block=[tg.THREADS, 1, 1])
