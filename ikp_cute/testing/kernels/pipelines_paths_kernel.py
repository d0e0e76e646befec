"""Kernels that reach their barriers by paths the Python hooks of ikp_cute.pipelines do not see, and kernels
whose pipelines are named the way newer kernels name them (tests/unit/ikp_cute/test_pipelines_ir.py traces them).

* `swapped_wait()`: while it is entered, ``cute.arch.mbarrier_wait`` is the kernel's own inline-PTX wait
  (as an attention kernel does to get a faster wait); `turns_kernel` takes turns through cutlass's
  PipelineOrder, whose `wait` calls that attribute;
* `inline_kernel`: a barrier of the kernel's own (no pipeline), arrived on and waited for with inline PTX,
  and a pipeline stage whose producer acquire is the kernel's inline-PTX wait on the barrier the pipeline
  handed out;
* `names_kernel`: pipelines unpacked into participants (`load_q_producer, load_q_consumer =
  X.create(...).make_participants()`), made by a maker (`make_and_init_kv_pipeline`) whose result is
  unpacked into `prod, cons`, and one that this kernel only commits to;
* `zero_trip_kernel`: a pipeline wait inside a loop whose trip count folds to zero (the compiler removes it).
"""

from __future__ import annotations

import contextlib

import cutlass
from cutlass import Int32, Int64, cute, pipeline
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

THREADS = 256
_WAIT = "{ .reg .pred done; WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1; @!done bra WAIT; }"
_ARRIVE = "{ .reg .b64 state; mbarrier.arrive.shared::cta.b64 state, [$0]; }"


def _asm(operands, text: str, constraints: str, loc=None, ip=None) -> None:
    llvm.inline_asm(None, operands, text, constraints, has_side_effects=True, is_align_stack=False,
                    asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def inline_wait(mbar_ptr, phase, *, loc=None, ip=None) -> None:
    """The kernel's own mbarrier wait: a try_wait loop in inline PTX."""
    _asm([Int32(mbar_ptr.toint(loc=loc, ip=ip)).ir_value(loc=loc, ip=ip), Int32(phase).ir_value(loc=loc, ip=ip)],
         _WAIT, "r,r", loc, ip)


@dsl_user_op
def inline_arrive(mbar_ptr, *, loc=None, ip=None) -> None:
    """The kernel's own mbarrier arrive in inline PTX."""
    _asm([Int32(mbar_ptr.toint(loc=loc, ip=ip)).ir_value(loc=loc, ip=ip)], _ARRIVE, "r", loc, ip)


@contextlib.contextmanager
def swapped_wait():
    """``cute.arch.mbarrier_wait`` is `inline_wait` for the duration (the kernel's faster wait)."""
    original = cute.arch.mbarrier_wait
    cute.arch.mbarrier_wait = inline_wait
    try:
        yield
    finally:
        cute.arch.mbarrier_wait = original


@cute.kernel
def turns_kernel(out: cute.Tensor, n_iters: Int32):
    """Two warp groups take turns through PipelineOrder (its wait is cute.arch.mbarrier_wait)."""
    group = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4
    turns = pipeline.PipelineOrder.create(depth=2, length=2, group_id=group,
                                          producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
                                          barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    state = pipeline.PipelineState(2, Int32(0), Int32(0), Int32(group == 0))
    for _ in cutlass.range(n_iters):
        turns.wait(state)
        state = turns.arrive(state)


@cute.jit
def launch_turns(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    turns_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def inline_kernel(out: cute.Tensor, n_iters: Int32):
    """Warp 0 arrives on the kernel's own barrier `flag` with inline PTX and produces into `ring`, acquiring
    each stage with an inline-PTX wait on the barrier the ring hands out; warp group 1 waits on `flag`
    with inline PTX and consumes `ring` through its own methods."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    flag_mbar_ptr = cute.arch.alloc_smem(Int64, 1, alignment=8)
    with cute.arch.elect_one():
        if warp == 0:
            cute.arch.mbarrier_init(flag_mbar_ptr, 1)
    cute.arch.mbarrier_init_fence()
    ring = pipeline.PipelineAsync.create(
        num_stages=2, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 4, alignment=8))
    if warp == 0:
        with cute.arch.elect_one():
            inline_arrive(flag_mbar_ptr)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
        for _ in cutlass.range(n_iters):
            inline_wait(ring.sync_object_empty.get_barrier(state.index), state.phase)
            ring.producer_commit(state)
            state.advance()
    elif warp >= 4:
        inline_wait(flag_mbar_ptr, 0)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
        for _ in cutlass.range(n_iters):
            ring.consumer_wait(state)
            ring.consumer_release(state)
            state.advance()


@cute.jit
def launch_inline(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    inline_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


def make_and_init_kv_pipeline(storage):
    """A maker, as kernels write them: the pipeline is named from its name (`kv`)."""
    return pipeline.PipelineAsync.create(
        num_stages=2, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128), barrier_storage=storage)


@cute.kernel
def names_kernel(out: cute.Tensor, n_iters: Int32):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    load_q_producer, load_q_consumer = pipeline.PipelineAsync.create(
        num_stages=1,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8),
    ).make_participants()
    prod, cons = make_and_init_kv_pipeline(cute.arch.alloc_smem(Int64, 4, alignment=8)).make_participants()
    committed_only = pipeline.PipelineAsync.create(
        num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8))
    if warp == 0:
        load_q_producer.acquire_and_advance().commit()
        for _ in cutlass.range(n_iters):
            prod.acquire_and_advance().commit()
        committed_only.producer_commit(pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1))
    elif warp >= 4:
        load_q_consumer.wait_and_advance().release()
        for _ in cutlass.range(n_iters):
            cons.wait_and_advance().release()


@cute.jit
def launch_names(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    names_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])


@cute.kernel
def zero_trip_kernel(out: cute.Tensor, n_iters: Int32):
    """Warp group 1 waits on `ring` in a loop of n_iters - n_iters trips: zero, which the compiler sees, so
    the loop and its wait are gone from the PTX; the wait after the loop stays."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    ring = pipeline.PipelineAsync.create(
        num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
        barrier_storage=cute.arch.alloc_smem(Int64, 2, alignment=8))
    if warp == 0:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        ring.producer_acquire(state)
        ring.producer_commit(state)
    elif warp >= 4:
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        for _ in cutlass.range(n_iters - n_iters):
            ring.consumer_wait(state)
        ring.consumer_wait(state)
        ring.consumer_release(state)


@cute.jit
def launch_zero_trip(out: cute.Tensor, n_iters: Int32, num_blocks: cutlass.Constexpr):
    zero_trip_kernel(out, n_iters).launch(grid=[num_blocks, 1, 1], block=[THREADS, 1, 1])
