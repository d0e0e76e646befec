"""A small warp-specialized kernel on cutlass.pipeline, written the way kernels write their own pipeline
classes (a subclass with its own methods, as FA4 and quack do), plus a named barrier and a direct
`cute.arch.barrier`: what tests/unit/ikp_cute/test_pipelines_compile.py traces without torch (CI has none).

Warp 0 produces into `ring` (STAGES stages) and signals `side` (with a raw cute.arch.mbarrier_arrive on
the barrier the pipeline hands out, as quack's scheduler does); warps 4-7 (warp group 1) consume both;
then every thread meets at named barrier 1 and warp groups 0-1 at barrier 2."""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, cute, pipeline

STAGES = 3
THREADS = 256


@dataclasses.dataclass(frozen=True)
class CountedPipeline(pipeline.PipelineAsync):
    """A kernel-defined subclass: its own constructor and a method the base class does not have."""

    @staticmethod
    def create(**kwargs) -> CountedPipeline:
        base = pipeline.PipelineAsync.create(**kwargs)
        return CountedPipeline(base.sync_object_full, base.sync_object_empty, base.num_stages,
                               base.producer_mask, base.consumer_mask)

    def consume_one(self, state):
        self.consumer_wait(state, self.consumer_try_wait(state))
        self.consumer_release(state)


@cute.kernel
def kernel(out: cute.Tensor, n_iters: Int32):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128)
    ring = CountedPipeline.create(
        num_stages=STAGES, producer_group=producers, consumer_group=consumers,
        barrier_storage=cute.arch.alloc_smem(Int64, 2 * STAGES, alignment=8),
    )
    side = pipeline.PipelineAsync.create(
        num_stages=1, producer_group=producers, consumer_group=consumers,
        barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8), name="side_named",
    )
    if warp == 0:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)
        for _ in cutlass.range(n_iters):
            ring.producer_acquire(state)
            ring.producer_commit(state)
            state.advance()
        side_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        side.producer_acquire(side_state)
        cute.arch.mbarrier_arrive(side.producer_get_barrier(side_state))  # a raw arrive (quack does this)
    elif warp >= 4:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        for _ in cutlass.range(n_iters):
            ring.consume_one(state)
            state.advance()
        side_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        side.consumer_wait(side_state)
        side.consumer_release(side_state)
    pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS).arrive_and_wait()
    if warp < 8:
        cute.arch.barrier(barrier_id=2, number_of_threads=THREADS)
    tid, _, _ = cute.arch.thread_idx()
    if tid == 0:
        out[0] = n_iters


@cute.jit
def launch(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def turns_kernel(out: cute.Tensor, n_iters: Int32):
    """Two warp groups take turns as FA4's do (its warp-scheduler barriers): wait for my turn on my
    barrier, work, hand the turn to the other group on its barrier (one arrive per barrier use)."""
    tid, _, _ = cute.arch.thread_idx()
    group = tid // 128
    if group == 1:
        cute.arch.barrier_arrive(barrier_id=1, number_of_threads=THREADS)  # group 0 goes first
    cute.arch.barrier(barrier_id=1 + group, number_of_threads=THREADS)
    out[group] = n_iters + group
    cute.arch.barrier_arrive(barrier_id=2 + group, number_of_threads=THREADS - 128 * group)


@cute.jit
def launch_turns(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    turns_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def participants_kernel(out: cute.Tensor, n_iters: Int32):
    """The same ring through cutlass's PipelineProducer / PipelineConsumer handles (make_participants),
    the API newer kernels write: warp 0 acquires and commits, warp group 1 waits and releases (`out` is
    not written: the launch only has to run)."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    ring = pipeline.PipelineAsync.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 2 * STAGES, alignment=8),
    )
    producer, consumer = ring.make_participants()
    if warp == 0:
        for _ in cutlass.range(n_iters):
            handle = producer.acquire_and_advance()
            handle.commit()
        producer.tail()
    elif warp >= 4:
        for _ in cutlass.range(n_iters):
            handle = consumer.wait_and_advance()
            handle.release()


@cute.jit
def launch_participants(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    participants_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@dataclasses.dataclass(frozen=True)
class _Rings:
    """A kernel's own holder of a pipeline (kernels keep them as attributes of their objects)."""

    ring: pipeline.PipelineAsync


@cute.kernel
def direct_kernel(out: cute.Tensor, n_iters: Int32):
    """Two rings whose arrays the kernel calls directly, as FA4's Blackwell backward does, each reached
    only through something else: one is an element of a list, the other an attribute of a holder.
    Warp 0 acquires (`sync_object_empty.wait`) and commits (`sync_object_full.arrive`); warp group 1
    consumes through the pipelines' own methods."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128)
    listed = [pipeline.PipelineAsync.create(num_stages=1, producer_group=producers, consumer_group=consumers,
                                            barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8))]
    held = _Rings(pipeline.PipelineAsync.create(num_stages=1, producer_group=producers, consumer_group=consumers,
                                                barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8)))
    if warp == 0:
        for i in cutlass.range(n_iters):
            listed[0].sync_object_empty.wait(0, (i + 1) % 2)
            listed[0].sync_object_full.arrive(0, listed[0].producer_mask)
            held.ring.sync_object_empty.wait(0, (i + 1) % 2)
            held.ring.sync_object_full.arrive(0, held.ring.producer_mask)
    elif warp >= 4:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        for _ in cutlass.range(n_iters):
            for ring in (listed[0], held.ring):
                ring.consumer_wait(state)
                ring.consumer_release(state)
            state.advance()


@cute.jit
def launch_direct(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    direct_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def order_kernel(out: cute.Tensor, n_iters: Int32):
    """Records of a lane stay in time order around two traps of moving a blocked-only check:
    - a kernel's own `if` on a Python constant (`if flag:`, a constant-true scf.if) holding a wait and then
      a named barrier: the wait is timed around itself, not around the whole if;
    - a named-barrier wait, then a loop whose body signals (a release) before a poll-gated wait: the
      signal inside the loop must not carry the barrier's check past the loop's records."""
    producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128)
    ring = pipeline.PipelineAsync.create(num_stages=2, producer_group=producers, consumer_group=consumers,
                                         barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    flag = True
    if flag:
        ring.sync_object_empty.wait(0, n_iters % 2)
        cute.arch.barrier(barrier_id=3, number_of_threads=THREADS)
    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
    cute.arch.barrier(barrier_id=4, number_of_threads=THREADS)
    for _ in cutlass.range(n_iters):
        ring.consumer_release(state)
        ring.consumer_wait(state, ring.consumer_try_wait(state))
        state.advance()


@cute.jit
def launch_order(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    order_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def two_rings_kernel(out: cute.Tensor, n_iters: Int32):
    """A consumer that polls ring `a` (a try_wait token, still a local afterwards) and then waits on ring
    `b` without one: b's wait is gated by nothing, so it is timed on its own."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 128)
    ring_a = pipeline.PipelineAsync.create(num_stages=2, producer_group=producers, consumer_group=consumers,
                                           barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    ring_b = pipeline.PipelineAsync.create(num_stages=2, producer_group=producers, consumer_group=consumers,
                                           barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    if warp == 0:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
        for _ in cutlass.range(n_iters):
            for ring in (ring_a, ring_b):
                ring.producer_acquire(state)
                ring.producer_commit(state)
            state.advance()
    elif warp >= 4:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
        for _ in cutlass.range(n_iters):
            peek = ring_a.consumer_try_wait(state)
            ring_a.consumer_wait(state, peek)
            ring_a.consumer_release(state)
            ring_b.consumer_wait(state)
            ring_b.consumer_release(state)
            state.advance()


@cute.jit
def launch_two_rings(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    two_rings_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def ordered_kernel(out: cute.Tensor, n_iters: Int32):
    """Two warp groups take turns through cutlass's PipelineOrder (2 stages per group). Its arrive()
    advances the state inside cutlass, which a dynamic loop does not see: the state is its own object,
    assigned back from arrive() (so the loop carries it; `turns.wait()` / `turns.arrive()` on the
    pipeline's own state repeat the first stage and phase on every iteration, and hang)."""
    group = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4
    turns = pipeline.PipelineOrder.create(depth=2, length=2, group_id=group,
                                          producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
                                          barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    state = pipeline.PipelineState(2, Int32(0), Int32(0), Int32(group == 0))  # group 0 starts a phase ahead
    for _ in cutlass.range(n_iters):
        turns.wait(state)
        state = turns.arrive(state)


@cute.jit
def launch_ordered(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    ordered_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])
