"""Emission of records around a call: instants, regions, blocked-only regions, poll gates.

Used in two ways: by the Python hooks while a kernel's body is traced (the call is built between the
records, at the DSL's insertion point), and by the IR pass after it is traced (``around`` / ``before`` an
existing MLIR operation). The records themselves are record.py's PTX blocks; the kernel's state (its
prologue, emitted at the kernel's entry on first use) is kept per kernel op, compared with ``==``.

A blocked-only call (levels "waits" and "signals"): on the call's path a ``%globaltimer`` read before it
and one after, nothing that waits for either; the compare and the store branch (the check) follow the
call and placement.py moves them on. A call inside an ``if`` that always runs its body (a
``producer_acquire`` without a token) is timed from just before that ``if`` to just after it: the same
span, and the check then lives in the enclosing block, free to move past the commit and the TMA issue
that follow. A poll (``try_wait``) at polls="begin" reads only its begin time, which the wait it gates
(a failed poll) takes as its own: the poll's result object carries that begin time as an attribute.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* each call site of each op gets its markers, regions paired (test_every_call_site_has_its_markers);
* after a blocking call only the end time and the two stores remain
  (test_after_a_blocking_call_only_the_end_time_and_the_stores_remain);
* a wait is gated only by a poll of its own array and stage
  (test_a_wait_without_a_token_is_not_gated_by_another_rings_poll);
* polls="begin" / "timed" / "off" differ only in what a poll records
  (test_poll_modes_differ_only_in_what_a_poll_records);
* a check's branch is taken by the whole warp or by none of it: its predicate is a vote of the active lanes
  (tests/unit/ikp_cute/test_checks_warp_uniform.py; `warp_any` says why).
"""

from __future__ import annotations

import contextlib
import sys

from ikp_cute import inline_ptx

from . import copies, placement
from .record import Geometry, KernelState
from .record_pool import PoolGeometry, PoolKernelState

POLL = "_ikp_poll_begin"  # attribute of a poll's result: (begin time, its barrier array, its stage)


class Recorder:
    """Per-kernel recording state and the record patterns around calls. `geometry`: a session's (records.py)
    or a pool's (record_pool.py, with `pool` the ikp_cute Pool that hands out kernel ids and `kernel_meta` the
    sidecar keys of its captures); `kernels`: a compiled regex on the kernel's name (None: every kernel)."""

    def __init__(self, geometry: Geometry | PoolGeometry, blocked_ns: dict[str, int], passing_waits: bool,
                 polls: str, *, events=None, kernels=None, pool=None, kernel_meta=None):
        self.geometry = geometry
        self.blocked_ns = blocked_ns
        self.passing_waits = passing_waits
        self.polls = polls
        self.events = events
        self.kernel_filter = kernels
        self.pool = pool
        self.kernel_meta = kernel_meta
        self.placement = placement.Placement()
        self.kernels: list[tuple[object, KernelState | PoolKernelState]] = []  # (cuda.kernel op, its state)
        self.verdicts: list[tuple[object, bool]] = []  # (cuda.kernel op, traced?) of this module
        self.block_warps: int | None = None  # warps of the block being launched (hooks.hook_launch), if static

    def traces(self, kernel) -> bool:
        """Whether `kernel` (a cuda.kernel op) is traced: its name matches `kernels`, and a pool had an id."""
        for known, verdict in self.verdicts:
            if known == kernel:
                return verdict
        verdict = self.kernel_filter is None or bool(self.kernel_filter.search(kernel_name(kernel)))
        self.verdicts.append((kernel, verdict))
        return verdict

    def state(self) -> KernelState | PoolKernelState | None:
        """The state of the kernel being built at the insertion point; its prologue is emitted at the
        kernel's entry on first use. None outside a kernel, or in one not traced."""
        kernel = inline_ptx.kernel_op()
        if kernel is None or not self.traces(kernel):
            return None
        for known, state in self.kernels:
            if known == kernel:
                return state
        require_sm90()
        if isinstance(self.geometry, PoolGeometry):
            try:
                kernel_id = self.pool.kernel_id(kernel_name(kernel), meta=self.kernel_meta)
            except RuntimeError as e:  # the pool holds no more kernels: this one compiles untouched
                import warnings

                warnings.warn(f"trace_pipelines: {e}", stacklevel=2)
                self.verdicts = [(k, v and k != kernel) for k, v in self.verdicts]
                return None
            with inline_ptx.at_kernel_entry():
                state = PoolKernelState.create(self.geometry, kernel_id, self.block_warps)
        else:
            with inline_ptx.at_kernel_entry():
                state = KernelState.create(self.geometry)
        self.kernels.append((kernel, state))
        return state

    def split_kernels(self) -> None:
        """After the IR pass: every kernel traced into a pool becomes its two copies (copies.py), then keeps its
        id or takes the one of an earlier kernel of the same code (copies.settle_kernel_id)."""
        for kernel, state in self.kernels:
            if isinstance(state, PoolKernelState):
                copies.split(kernel, state.split_after, state.closed, state.epilogue)
                copies.settle_kernel_id(kernel, self.pool, self.geometry, state.kernel_id)

    def forget_kernels(self) -> None:
        """After a module is built: its kernels' ops die with its context."""
        self.kernels = []
        self.verdicts = []
        self.placement.forget()

    def ambient(self, name: str, event_type: int, site: str) -> None:
        """A record of a region the kernel's author placed (``profile_region(name)``, profiler.py) on the
        executing warp's lane: BEGIN at its start, END at its end, each a record of its own (no value of ours
        is held across the region's code)."""
        state = self.state()
        if state is None:
            return
        bits = (self.events.id(name) << 2) | int(event_type)
        self.placement.move(before_record=True)
        state.record(bits, f"region:{name}@{site} {'end' if event_type else 'begin'}")

    # --- while the kernel's body is traced (at the DSL's insertion point) ------------------------------

    def record(self, bits, label: str) -> None:
        state = self.state()
        if state is not None:
            self.placement.move(before_record=True)
            state.record(bits, label)

    def signal(self, marker, call):
        """A signal (arrive, release, named-barrier arrive) `call()`, with its instant `marker` (bits, label)
        or None: the time is read just before the call and the record stored just after it, so the signal
        leaves without waiting for the record's shared-memory round trip (a consumer's release delayed by it
        holds back the producer's next load: in a 2-stage ring, the consumer's next wait). Pending
        blocked-only checks move past the signal, then ahead of the record (time order per lane)."""
        state = self.state() if marker is not None else None
        time = state.timer(f"{marker[1]} signal-time") if state is not None else None
        result = call()
        self.signal_done()
        if state is not None:
            self.placement.move(before_record=True)
            state.record(marker[0], marker[1], time=time)
        return result

    def signal_done(self) -> None:
        """After a signal (arrive, release, named-barrier arrive): pending checks may move past it."""
        self.placement.move(before_record=False)

    def region(self, marker, call, begin=None):
        """Records around `call()`: slots reserved before (record.reserve_region), BEGIN and END stored
        after (END = BEGIN bits + 1). `begin`: an earlier begin time (the failed poll that led here)."""
        bits, label = marker
        state = self.state()
        if state is None:
            return call()
        self.placement.move(before_record=True)
        token = state.reserve_region(bits, begin, f"{label} begin")
        result = call()
        state.finish_region(token, label=f"{label} end")
        return result

    def wait_region(self, marker, call, op: str, begin=None, entry=None):
        """A blocking call `op` (wait, acquire, bar_sync): a region when it blocked, i.e. a failed poll
        led to it (`begin`: that poll's begin time) or it took >= blocked_ns[op]; every call when
        `passing_waits`. `entry`: see when_blocked."""
        if begin is not None or self.passing_waits or self.state() is None:
            return self.region(marker, call, begin)
        return self.when_blocked(marker, call, op, entry=entry)[0]

    def when_blocked(self, marker, call, op: str, succeeded=None, kind: str = "call", entry=None):
        """`call()` stored as a region only when it took >= blocked_ns[op] (and, for a poll,
        `succeeded(result)`); see the module docstring. `entry` (block, op count) is where the hooked call
        began, before its marker's ops: the lift out of an always-taken `if` needs that block to have been
        empty. Returns (result, begin)."""
        from cutlass._mlir import ir

        bits, label = marker
        state = self.state()
        self.placement.move(before_record=True)  # checks still pending go ahead of this call
        point = ir.InsertionPoint.current
        lifted = None
        if entry is not None and entry[0] == point.block and entry[1] == 0 and placement.pipeline_if_generate_body():
            lifted = placement.unconditional_if(point)
        if lifted is not None:  # the if holds only this call's marker so far, which runs before it anyway
            for marker_op in list(point.block.operations):
                marker_op.move_before(lifted)
        with ir.InsertionPoint(lifted) if lifted is not None else contextlib.nullcontext():
            begin = state.timer(f"{label} {kind}-begin")
        result = call()
        with ir.InsertionPoint(lifted.block) if lifted is not None else contextlib.nullcontext():
            end = state.timer(f"{label} {kind}-end-time")
            self.placement.emit(lambda: self._check(state, bits, label, kind, op, begin, end, result, succeeded))
        return result, begin

    def _check(self, state, bits, label, kind, op, begin, end, result=None, succeeded=None) -> None:
        from cutlass import Uint32
        from cutlass.cutlass_dsl import if_generate

        blocked = Uint32(end - begin) >= self.blocked_ns[op]  # unsigned: the 32-bit timer wraps
        if succeeded is not None:
            blocked = succeeded(result) & blocked
        blocked = warp_any(blocked, label)  # the warp's lanes agree: the check never splits a warp
        if_generate(blocked, lambda: state.finish_region(state.reserve_region(bits, begin), end, f"{label} {kind}-end"))

    def poll(self, mbar, index, marker, call, op: str):
        """A try_wait. polls="begin": only its begin time is read, left for the wait it gates when it fails
        (a wait inside a poll that succeeds is not seen). polls="timed": also a region of the wait/acquire
        op (`op`: wait or acquire) when it succeeded after blocking (when_blocked)."""
        from cutlass import Int32

        state = self.state()
        if state is None:
            return call()
        if self.polls == "begin":
            begin = state.timer(f"{marker[1]} gate")
            result = call()
        else:
            result, begin = self.when_blocked(marker, call, op, lambda r: Int32(r) != 0, "poll")
        with contextlib.suppress(AttributeError, TypeError):  # a result that takes no attribute gates nothing
            object.__setattr__(result, POLL, (begin, mbar, index))
        return result

    @staticmethod
    def pending_begin(mbar, index):
        """The begin time of the failed poll whose result gated this wait (on barrier array `mbar`, stage
        `index`), else None. The poll's result object must be a local of a calling frame
        (`consumer_wait(state, try_wait_token)`): then it is the same SSA value, so the begin time (read just
        before the poll, in the same block) is usable here too. Only a poll of the same array and stage
        counts: another pipeline's token still in scope gates nothing here. A token carried through a loop
        is a new object: the wait then begins on its own."""
        frame = sys._getframe(2)
        for _ in range(12):
            if frame is None:
                break
            for value in frame.f_locals.values():
                try:
                    gate = vars(value).get(POLL)  # the instance's own attribute only: no __getattr__ runs
                except TypeError:
                    continue
                if isinstance(gate, tuple) and gate[1] is mbar and same_value(gate[2], index):
                    return gate[0]
            frame = frame.f_back
        return None

    # --- after the body is traced (the IR pass: at an existing operation) ------------------------------

    @staticmethod
    def at(op, where: str):
        """Context: emit just before (`where`="before") or after ("after") `op`, ops without a source
        location."""
        from cutlass._mlir import ir

        stack = contextlib.ExitStack()
        stack.enter_context(ir.InsertionPoint(op) if where == "before" else ir.InsertionPoint.after(op))
        stack.enter_context(ir.Location.unknown())
        return stack

    def instant_around(self, kernel, op, bits_of, label: str) -> None:
        """The instant of a signal `op`: its time read just before it, the record stored just after it (as
        `signal` does for a hooked call); `bits_of()` builds its event bits."""
        state = self._state_of(kernel)
        if state is None:
            return
        self.placement.settle_before(kernel, op)
        with self.at(op, "before"):
            bits, time = bits_of(), state.timer(f"{label} signal-time")
        with self.at(op, "after"):
            state.record(bits, label, time=time)

    def region_around(self, kernel, op, bits_of, label: str, blocked_only: bool, blocking: str = "wait") -> None:
        """A region around `op` (its BEGIN and END; with `blocked_only`, stored only when it took >=
        blocked_ns[blocking], the check right after it; `blocking`: wait, acquire or bar_sync)."""
        state = self._state_of(kernel)
        if state is None:
            return
        self.placement.settle_before(kernel, op)
        with self.at(op, "before"):
            bits = bits_of()
            if blocked_only:
                begin = state.timer(f"{label} call-begin")
            else:
                token = state.reserve_region(bits, None, f"{label} begin")
        with self.at(op, "after"):
            if blocked_only:
                end = state.timer(f"{label} call-end-time")
                self._check(state, bits, label, "call", blocking, begin, end)
            else:
                state.finish_region(token, label=f"{label} end")

    def around(self, kernel, op, before, after) -> None:
        """Code just before `op` (`before(state)` -> a value) and just after it (`after(state, that value)`),
        with the kernel's record state (an IR pass's flag signal: flag_trace.py)."""
        state = self._state_of(kernel)
        if state is None:
            return
        self.placement.settle_before(kernel, op)
        with self.at(op, "before"):
            value = before(state)
        with self.at(op, "after"):
            after(state, value)

    def _state_of(self, kernel) -> KernelState | PoolKernelState | None:
        """The state of `kernel` (an op of a module being finalized), its prologue made at its entry."""
        from cutlass._mlir import ir

        with ir.InsertionPoint.at_block_begin(kernel.regions[0].blocks[0]), ir.Location.unknown():
            return self.state()


def warp_any(predicate, label: str = ""):
    """True on every active lane of the warp when `predicate` holds on any (`vote.sync.any` on `activemask`,
    one inline-PTX block, so the mask is read where the check runs). A check's branch must be taken by the
    whole warp or by none of it: ptxas takes `%globaltimer` values for warp-uniform, puts no reconvergence
    after a branch on them, and keeps the kernel's loop counters in uniform registers across it. Lanes that
    read different times (a warp that reaches the call split) would leave that branch split, and each part
    would then step the uniform counters (a loop that runs past its bound) and arrive at an aligned
    `bar.sync` on its own."""
    from cutlass import Boolean, Int32

    asm = ("{ .reg .pred p; .reg .u32 m; activemask.b32 m; setp.ne.u32 p, $1, 0; vote.sync.any.pred p, p, m;"
           f" selp.u32 $0, 1, 0, p; }} /* ikp {label} warp-any */")
    return Boolean(Int32(inline_ptx.asm(Int32.mlir_type, [Int32(predicate)], asm, "=r,r")) != 0)


def kernel_name(kernel) -> str:
    """The symbol name of a cuda.kernel op."""
    from cutlass._mlir import ir

    return ir.StringAttr(kernel.attributes["sym_name"]).value


def same_value(a, b) -> bool:
    """The same stage index: one Python object, one MLIR value, or equal constants."""
    if a is b:
        return True
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    try:
        return a.ir_value() == b.ir_value()
    except (AttributeError, TypeError, ValueError):
        return False


def require_sm90() -> None:
    """The recorder elects its lane with `elect.sync` (sm_90+): say so at trace time, not in ptxas."""
    from cutlass.base_dsl import BaseDSL

    arch = BaseDSL._get_dsl().get_arch_enum()
    major = arch.value[0] if isinstance(arch.value, tuple) else None
    if major is not None and major < 9:
        raise RuntimeError(f"trace_pipelines: kernels for {arch.name} cannot be traced (the records use sm_90 "
                           "instructions: elect.sync); compile for sm_90a or newer")
