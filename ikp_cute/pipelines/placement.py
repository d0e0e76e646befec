"""Where a blocked-only check goes: MLIR-level movement of the compare-and-store that follows a timed call.

Right after its call the check is correct but costly: its compare waits for the end-time read, and the
branch holds back the code that follows, which in a ping-pong kernel is the critical path (FA4's
warp-scheduler barrier: the check delayed the next GEMM issue and the barrier arrive that releases the
other warp group). Nothing needs it there: it only decides whether to store two records. So each later
signal (arrive, release, named-barrier arrive) made in the same block takes the check past itself, and
once its block is left the check goes to the block's end (a producer's acquire check then lands after
the TMA issue that follows its commit, not before it). Records of a lane stay in program order, which is
time order: any record or blocked-only call made later first moves the pending checks ahead of itself
(in the same block, or just before the construct of that block it sits in); a signal inside such a
construct leaves them where they are. The IR pass (ir_pass.py), which adds records after the kernel's
body is traced, first takes back ahead of each record it adds every check that had moved past it
(``settle_before``).

State: the checks of the module being traced, each with its kernel op (compared with ``==``), its
block, its ops and the op it followed (its anchor: where its call ended); those a later signal may still
move are pending (for the kernel being traced only).

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* a check goes after the next signal of its block (test_a_blocked_only_check_goes_after_the_next_signal)
  and past a producer's commit (test_a_producer_acquire_check_goes_past_its_commit);
* records of a lane stay in time order (test_a_check_stays_ahead_of_later_records,
  test_checks_stay_in_time_order_around_a_constant_if_and_a_loop,
  test_every_lane_stores_its_records_in_time_order, test_a_swapped_mbarrier_wait_is_still_traced).
"""

from __future__ import annotations

import dataclasses
import sys

from ikp_cute import inline_ptx

from . import names


@dataclasses.dataclass(eq=False)
class Check:
    block: object  # the MLIR block holding it
    ops: list  # its operations, in order
    anchor: object  # the op it was built after (where its call ended), None when first in its block


class Placement:
    """The blocked-only checks of the kernel being traced, and how they move."""

    def __init__(self):
        self.kernel = None  # the cuda.kernel op the checks belong to
        self.pending: list[Check] = []  # checks a later signal may still move
        self.placed: list[tuple[object, Check]] = []  # (kernel op, check): every check of the module's kernels

    def _for_kernel(self, kernel) -> None:
        if not inline_ptx.same_op(kernel, self.kernel):
            self.kernel, self.pending = kernel, []

    def forget(self) -> None:
        """After a module is built: its ops die with its context."""
        self.kernel, self.pending, self.placed = None, [], []

    def emit(self, build) -> None:
        """Build a check (`build()` emits its ops at the insertion point) and keep it movable when it was
        appended to its block."""
        from cutlass._mlir import ir

        point = ir.InsertionPoint.current
        block = point.block
        if point.ref_operation is not None:  # not appending: the check stays where it is
            build()
            return
        first = len(block.operations)
        build()
        self._for_kernel(inline_ptx.kernel_op())
        anchor = block.operations[first - 1] if first else None
        check = Check(block, [block.operations[i] for i in range(first, len(block.operations))], anchor)
        self.pending.append(check)
        self.placed.append((self.kernel, check))

    def move(self, before_record: bool) -> None:
        """Move the pending checks on, never backwards: to the insertion point when it is in their block
        (after a signal, still pending; or before a record or blocked-only call); before a record or call
        made in a construct nested in their block, to just before that construct (a signal made there
        leaves them where they are, still pending). When the insertion point is outside their block, the
        block is built: to its end, before its terminator. An earlier kernel's checks stay."""
        if not self.pending:
            return
        if not inline_ptx.same_op(inline_ptx.kernel_op(), self.kernel):
            self.pending = []  # an earlier kernel's checks stay where they are (its IR may be gone already)
            return
        from cutlass._mlir import ir

        point = ir.InsertionPoint.current
        here = point.block
        still = []
        for check in self.pending:
            block, ops = check.block, check.ops
            if not movable(block, ops):
                continue
            if block == here:
                if point.ref_operation is not None and not after(block, point.ref_operation, ops[0]):
                    continue  # the insertion point is behind the check: it stays where it is
                for op in ops:
                    if point.ref_operation is not None:
                        op.move_before(point.ref_operation)
                    else:
                        op.move_after(here.operations[len(here.operations) - 1])
                if not before_record:
                    still.append(check)  # past this signal: a later call of the block may take it further
                continue
            construct = construct_in(block, here)
            if construct is None:  # their block is built: to its latest point, just before its terminator
                last = block.operations[len(block.operations) - 1]
                if is_terminator(last):
                    for op in ops:
                        op.move_before(last)
                continue
            if not after(block, construct, ops[0]):
                continue  # a construct built behind the check (an insertion point before it): it stays
            if before_record:
                for op in ops:
                    op.move_before(construct)
                continue
            # A signal inside a construct still being built (an elected thread's arrive, a loop body): the
            # check stays put and pending; moving it after that construct would put it after records the
            # construct may still make. Back in its block, or once its block is left, it moves on.
            still.append(check)
        self.pending = still

    def settle_before(self, kernel, target) -> None:
        """Before the IR pass adds a record at `target` (an op of `kernel`): every check whose call ended
        before `target` but which moved past it goes back to just before `target` (or the construct of
        the check's block that holds `target`), so the lane's records stay in time order."""
        for owner, check in self.placed:
            if not inline_ptx.same_op(owner, kernel):
                continue
            construct = target if target.block == check.block else construct_in(check.block, target.block)
            if construct is None or check.ops[0].operation.is_before_in_block(construct):
                continue  # the record is outside the check's block, or the check is already ahead of it
            if check.anchor is None or not check.anchor.operation.is_before_in_block(construct):
                continue  # its call ended after the record's place: it belongs after it
            if movable(check.block, check.ops):
                for op in check.ops:
                    op.move_before(construct)


def movable(block, ops) -> bool:
    """Nothing outside the check uses a value it defines (a DSL that reused one of the check's constants
    later in the block would otherwise see it moved past that use)."""
    for op in ops:
        for result in op.operation.results:
            for use in result.uses:
                user = use.owner.operation
                while user is not None and not user.block == block:
                    user = user.parent
                if user is None or not any(user == other.operation for other in ops):
                    return False
    return True


def after(block, op, other) -> bool:
    """`op` comes after `other` in `block`, or is `other` (False when neither is found in it)."""
    for candidate in block.operations:
        if candidate == other:
            return True
        if candidate == op:
            return False
    return False


def construct_in(block, inner):
    """The operation of `block` that (transitively) holds the block `inner`; None when not nested in it."""
    op = inner.owner
    while op is not None:
        if op.operation.block == block:
            return op.operation
        op = op.operation.parent
    return None


def is_terminator(op) -> bool:
    """The op that ends a block (scf.yield, scf.condition, cf.br, a return)."""
    return op.name.endswith((".yield", ".return", ".condition")) or op.name in ("cf.br", "cf.cond_br")


def block_size_here():
    """(the insertion block, its op count) at this point of building."""
    from cutlass._mlir import ir

    block = ir.InsertionPoint.current.block
    return block, len(block.operations)


def pipeline_if_generate_body() -> bool:
    """The hooked wait is the body of a pipeline method's `if_generate(..., lambda: array.wait(...))`
    (cutlass's producer_acquire / consumer_wait, and the subclasses FA4 and quack define): the first frame
    outside this package is a lambda defined in a pipeline's method, called by if_generate."""
    here = names.library_dirs()[1]
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame = frame.f_back
    return (frame is not None and frame.f_code.co_name == "<lambda>"
            and names.is_sync_object(frame.f_locals.get("self"))
            and frame.f_back is not None and frame.f_back.f_code.co_name == "_execute_and_yield_out")


def unconditional_if(point):
    """The `scf.if` whose then-block `point` appends to, when that if always runs its then-block: cutlass's
    `producer_acquire` waits inside `if_generate(token is None or token == 0, ...)`, a constant true
    without a token. None otherwise, and when the if is not the last op of its block (code after it is
    already built)."""
    from cutlass._mlir import ir

    block = point.block
    op = block.owner.operation if block.owner is not None else None
    if point.ref_operation is not None or op is None or op.name != "scf.if":
        return None
    condition = op.operands[0].owner
    condition = getattr(condition, "operation", condition)
    if not isinstance(condition, ir.Operation) or condition.name != "arith.constant":
        return None
    if str(condition.attributes["value"]) != "true":
        return None
    outer = op.block
    if not outer.operations[len(outer.operations) - 1] == op or block != op.regions[0].blocks[0]:
        return None
    return op
