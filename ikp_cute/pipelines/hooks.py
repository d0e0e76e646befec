"""Trace-time hooks: where every CuTe DSL pipeline passes, and how a call becomes records.

Hooked (for the duration of ``trace_pipelines`` only; the originals are restored on exit, so kernels
compiled outside it are untouched):
* ``cutlass.pipeline.MbarrierArray``: ``wait`` (region), ``try_wait`` (a region when the poll blocked,
  the begin of the wait it gates when it failed; instant ``poll`` at level "all"), the arrive family
  ``arrive`` / ``arrive_mbarrier`` / ``arrive_and_expect_tx`` / ``arrive_and_expect_tx_with_dst`` /
  ``arrive_cp_async_mbarrier`` / ``arrive_tcgen05mma`` (instant; only the outermost of nested calls
  records), and ``__init__`` / ``__new_from_mlir_values__`` / ``recast_to_new_op_type`` so every
  array carries a trace-time tag through loops and rebuilds.
  Every pipeline class of cutlass.pipeline (sm90, sm100) and the ones kernels define (FA4's, quack's)
  is built on MbarrierArray: no list of class names.
* ``MbarrierArray.get_barrier`` and ``cute.arch.mbarrier_{arrive, arrive_and_expect_tx, wait, try_wait}``:
  a raw call on a pointer a pipeline handed out (``producer_get_barrier(state)``, as quack's tile
  scheduler commits) is traced as that pipeline's op on that stage.
* ``cute.arch.barrier`` (region ``bar_sync[id]``), ``cute.arch.barrier_arrive`` (instant
  ``bar_arrive[id]``), ``cute.arch.sync_threads`` (region ``bar_sync[0]`` at level "all"):
  NamedBarrier and kernels calling ``cute.arch.barrier`` directly (FA4's warp scheduler) pass there.

Roles: a call on array X is classified by the pipeline object that owns X, found on the Python call
stack at trace time (a frame whose ``self`` has ``sync_object_full is X`` or ``sync_object_empty is
X``): empty.wait = producer *acquire*, full.wait = consumer *wait*, full.arrive = producer *commit*,
empty.arrive = consumer *release*. An array no pipeline owns is traced as its own pipeline
(wait -> wait, arrive -> commit).

Invariants a change could break (tests/test_pipelines_compile.py guards them):
* outside the context every hook is gone (test_off_is_untouched, and the FA4 / quack / sm100 tests
  compile again after tracing and compare PTX);
* each call site of each op gets its markers, regions paired, at every level, for a kernel-defined
  subclass and a raw mbarrier arrive (test_every_call_site_has_its_markers,
  test_kernel_defined_subclass_and_names);
* call sites and names are the kernel's own lines and variables (test_kernel_defined_subclass_and_names).
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import math
import os
import sys
import types

from ikp_cute import inline_ptx

from .catalog import Catalog, Pipeline, assigned_variable, short_name
from .record import BEGIN, INSTANT, Geometry, KernelState, event_bits

_TAG = "_ikp_pipeline_tag"
_SKIP_FUNCTIONS = {"create", "_make_sync_object", "__init__", "__post_init__", "wrapper", "_override_create"}


def _library_dirs() -> tuple[str, ...]:
    import cutlass

    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.dirname(os.path.abspath(cutlass.__file__)) + os.sep, here + os.sep, contextlib.__file__,
            os.path.dirname(os.path.abspath(functools.__file__)) + os.sep + "functools.py")


# Functions the DSL generates from a kernel's `if` / `for` / `while` bodies keep the kernel's file and
# line numbers: they are call sites, but their names say nothing (never used as a barrier's name).
_GENERATED = ("then_", "else_", "elif_", "if_region", "loop_", "while_", "for_body")
_ANONYMOUS = ("<lambda>", "<genexpr>")


def _is_sync_object(obj) -> bool:
    """A pipeline (owns mbarrier arrays) or a barrier helper object: frames of its methods are library
    code for the purpose of naming a call site, whichever package defines the class."""
    return obj is not None and (
        hasattr(obj, "sync_object_full") or hasattr(obj, "sync_object_empty") or hasattr(obj, "barrier_storage")
        or (hasattr(obj, "barrier_id") and hasattr(obj, "num_threads"))
    )


def _user_frame(dirs, skip_functions=frozenset()):
    """The innermost frame of kernel code: outside cutlass / this package, not a method of a pipeline or
    barrier object (FA4's and quack's own pipeline modules included), not a DSL-generated or skipped
    function."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if not (
            code.co_filename.startswith(dirs)
            or code.co_name in skip_functions
            or code.co_name in _ANONYMOUS
            or _is_sync_object(frame.f_locals.get("self"))
        ):
            return frame
        frame = frame.f_back
    return None


def _site(frame) -> str:
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _function_name(frame, dirs=()) -> str:
    """The kernel function a call sits in (`warp_scheduler_barrier_sync`), past DSL-generated bodies and
    the DSL's own frames; its file:line when that function is only the kernel's entry (`kernel`)."""
    named = frame
    while named is not None and (named.f_code.co_name.startswith(_GENERATED + _ANONYMOUS)
                                 or (dirs and named.f_code.co_filename.startswith(dirs))):
        named = named.f_back
    name = named.f_code.co_name if named is not None else "?"
    return _site(frame) if name in ("kernel", "__call__", "?") else name


def _creation_variable(frame, dirs=()) -> str | None:
    """The name a pipeline is known by at its creation: the variable assigned (`pipeline_k = X.create(`);
    for `return X.create(` in a maker method, the variable its caller assigns (the caller past the DSL's
    generated bodies and its own frames, `dirs`), else the maker's name without `make_`
    (`make_ab_pipeline` -> `ab_pipeline`)."""
    if frame is None:
        return None
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    variable = assigned_variable(line)
    if variable is not None or not line.strip().startswith("return"):
        return variable
    caller = frame.f_back
    while caller is not None and (caller.f_code.co_name.startswith(_GENERATED + _ANONYMOUS)
                                  or (dirs and caller.f_code.co_filename.startswith(dirs))):
        caller = caller.f_back
    if caller is not None:
        variable = assigned_variable(linecache.getline(caller.f_code.co_filename, caller.f_lineno))
    if variable is None and frame.f_code.co_name.startswith("make_"):  # quack: make_ab_pipeline
        variable = frame.f_code.co_name[len("make_"):]
    return variable


class Tracer:
    """The state of one ``trace_pipelines`` context: catalog, per-kernel recording state, patches."""

    def __init__(self, catalog: Catalog, geometry: Geometry, *, polls: str, named_barriers: bool,
                 passing_waits: bool, blocked_ns: int):
        """The options are PipelineTrace's (validated there, defaults there)."""
        self.catalog = catalog
        self.geometry = geometry
        self.polls = polls
        self.named_barriers = named_barriers
        self.passing_waits = passing_waits
        self.blocked_ns = blocked_ns
        self._kernels: list[tuple[object, KernelState]] = []  # (cuda.kernel op, its state)
        self._saved: list[tuple[object, str, object]] = []
        self._depth = 0  # nesting of hooked arrive calls (only the outermost records)
        # id(poll result) -> (poll result, begin time of the poll, its barrier array, its stage index)
        self._pending: dict[int, tuple] = {}
        self._checks: list[tuple[object, list]] = []  # blocked-only checks a later signal may still move
        self._checks_kernel = None  # the kernel (cuda.kernel op) they belong to
        self._pointers: dict[int, tuple] = {}  # id(pointer) -> (pointer, mbarrier array, stage, (owner, role))
        self.cluster: list[int] | None = None  # the cluster shape of the kernel being launched (launch hook)
        self._dirs = _library_dirs()

    # --- recording state per kernel ---------------------------------------------------------------------

    def _state(self) -> KernelState | None:
        """The kernel's state; its prologue is emitted at the kernel's entry on first use."""
        kernel = inline_ptx.kernel_op()
        if kernel is None:
            return None
        for known, state in self._kernels:
            if known == kernel:
                return state
        _require_sm90()
        with inline_ptx.at_kernel_entry():
            state = KernelState.create(self.geometry)
        self._kernels.append((kernel, state))
        return state

    def _record(self, bits, label: str) -> None:
        state = self._state()
        if state is not None:
            self._move_checks(before_record=True)
            state.record(bits, label)

    # --- which pipeline, which op -------------------------------------------------------------------------

    def _tag(self, mbar) -> dict:
        tag = getattr(mbar, _TAG, None)
        if tag is None:  # built before the trace started, or by a path we do not hook: tag it now
            tag = {"site": "?", "variable": None}
            object.__setattr__(mbar, _TAG, tag)
        return tag

    def _owner(self, mbar):
        """(pipeline object, 'full'|'empty') owning `mbar`, from the call stack; (None, None) if none.
        Innermost frame first, and in each its `self` first (a pipeline's own method), then its other
        locals: kernels also call a pipeline's arrays directly (FA4's Blackwell backward:
        `pipeline_S_P.sync_object_empty.wait(...)`), and that call is still the pipeline's acquire.
        Failing that, a pipeline one step from a local: an attribute of it or an element of a list,
        tuple or dict (`self.pipe_k.sync_object_full.wait(...)`, `pipes[i].sync_object_full.arrive(...)`)."""
        return _on_stack(lambda obj: _role_in(obj, mbar))

    def _pipeline(self, mbar, owner, role) -> Pipeline:
        if owner is not None:
            full = getattr(owner, "sync_object_full", None)
            empty = getattr(owner, "sync_object_empty", None)
            key = tuple(id(self._tag(array)) if array is not None else None for array in (full, empty))
            origin = self._tag(full if full is not None else mbar)
        else:
            key = (id(self._tag(mbar)),)
            origin = self._tag(mbar)

        def make() -> Pipeline:
            given = (getattr(mbar, "name", "") or "").rsplit(".", 1)[0] if getattr(mbar, "name", "") else ""
            cls = type(owner).__name__ if owner is not None else "MbarrierArray"
            fallback = f"{cls}_{origin['site'].replace('.py:', '_')}"
            name = given or (short_name(origin["variable"]) if origin.get("variable") else fallback)
            full = getattr(owner, "sync_object_full", None) if owner is not None else mbar
            empty = getattr(owner, "sync_object_empty", None) if owner is not None else None
            return Pipeline(
                name=name,
                cls=cls,
                site=origin["site"],
                num_stages=int(getattr(owner, "num_stages", None) or getattr(mbar, "num_stages", 1)),
                producer_arrivals=_int_or_none(getattr(full, "arrive_count", None)),
                consumer_arrivals=_int_or_none(getattr(empty, "arrive_count", None)),
                tx_bytes=_int_or_none(getattr(full, "tx_count", None)),
                op_type=getattr(getattr(full, "op_type", None), "name", None),  # none for a TMA-store fence
                cluster=self._scope(owner),
                released_by="tma_store" if _tma_store_role(owner) else None,
                first_wait_passes=_first_wait_passes(owner, cls),
            )

        return self.catalog.pipeline(key, make, inline_ptx.kernel_op())

    def _scope(self, owner):
        """[x, y, z] when the pipeline's barriers are shared across the launch's cluster, "cta" when they
        are block-local, None when unknown. Known for cutlass.pipeline's classes, which keep the multicast
        destination rank of their consumers' releases in `consumer_mask` (None: the barriers are local)."""
        if self.cluster is None or owner is None or not hasattr(owner, "consumer_mask"):
            return None
        if math.prod(self.cluster) == 1 or getattr(owner, "consumer_mask") is None:
            return "cta"
        return list(self.cluster)

    def _op(self, mbar, kind: str, owned=None):
        """(pipeline, op name) of a call of `kind` ('wait'|'arrive'|'poll') on `mbar`; `owned`: its
        (owner, role) when already known."""
        owner, role = owned if owned is not None else self._owner(mbar)
        pipe = self._pipeline(mbar, owner, role)
        if kind == "poll":
            return pipe, "poll"
        if role == "empty":
            return pipe, "acquire" if kind == "wait" else "release"
        return pipe, "wait" if kind == "wait" else "commit"

    def _bits(self, mbar, kind: str, index, event_type, owned=None):
        """(bits, label) of a call of `kind` on `mbar`, or None when the level does not record it."""
        return self._op_bits(*self._op(mbar, kind, owned), index, event_type)

    def _op_bits(self, pipe: Pipeline, op: str, index, event_type):
        """(bits, label) of `op` on `pipe` at stage `index`, or None when the level does not record it."""
        if not self.catalog.records(op):
            return None
        site = _site(_user_frame(self._dirs, _SKIP_FUNCTIONS))
        base = self.catalog.op_base(pipe, op, site)
        return event_bits(base, index, event_type), f"{op}_{pipe.name}@{site}"

    def _region(self, marker, orig, args, kwargs, begin=None):
        """Records around `orig(*args, **kwargs)`: slots reserved before (record.reserve_region), BEGIN and
        END stored after (END = BEGIN bits + 1). `begin`: an earlier begin time (the failed poll that led
        to this wait)."""
        bits, label = marker
        state = self._state()
        if state is None:
            return orig(*args, **kwargs)
        self._move_checks(before_record=True)
        token = state.reserve_region(bits, begin, f"{label} begin")
        result = orig(*args, **kwargs)
        state.finish_region(token, label=f"{label} end")
        return result

    def _wait_region(self, marker, orig, args, kwargs, begin=None, entry=None):
        """A blocking call (wait, acquire, named barrier): a region when it blocked, i.e. a failed poll
        led to it (`begin`: that poll's begin time) or it took >= blocked_ns; every call when
        `passing_waits` (level "all"). `entry`: see _when_blocked."""
        if begin is not None or self.passing_waits or self._state() is None:
            return self._region(marker, orig, args, kwargs, begin)
        return self._when_blocked(marker, orig, args, kwargs, entry=entry)[0]

    def _when_blocked(self, marker, orig, args, kwargs, succeeded=None, kind: str = "call", entry=None):
        """`orig(*args, **kwargs)` stored as a region only when it took >= blocked_ns (and, for a poll,
        `succeeded(result)`). On the call's path: a %globaltimer read before it and one after, nothing
        that waits for either; the compare and the store branch (the check) follow the call, from where
        later calls of the same block take them on (_move_checks). A call inside an if that always runs
        its body (a producer_acquire without a token) is timed from just before that if to just after it:
        the same span, and the check then lives in the enclosing block, free to move past the commit and
        the TMA issue that follow; `entry` (block, op count) is where the hooked call began, before its
        marker's ops, and the lift needs that block to have been empty. Returns (result, begin)."""
        from cutlass import Uint32
        from cutlass._mlir import ir
        from cutlass.cutlass_dsl import if_generate

        bits, label = marker
        state = self._state()
        self._move_checks(before_record=True)  # checks still pending go ahead of this call (program order)
        point = ir.InsertionPoint.current
        lifted = None
        if entry is not None and entry[0] == point.block and entry[1] == 0 and _pipeline_if_generate_body():
            lifted = _unconditional_if(point)
        if lifted is not None:  # the if holds only this call's marker so far, which runs before it anyway
            for op in list(point.block.operations):
                op.move_before(lifted)
        with ir.InsertionPoint(lifted) if lifted is not None else contextlib.nullcontext():
            begin = state.timer(f"{label} {kind}-begin")
        result = orig(*args, **kwargs)
        with ir.InsertionPoint(lifted.block) if lifted is not None else contextlib.nullcontext():
            end = state.timer(f"{label} {kind}-end-time")

            def check():
                blocked = Uint32(end - begin) >= self.blocked_ns  # unsigned: the 32-bit timer wraps
                if succeeded is not None:
                    blocked = succeeded(result) & blocked
                if_generate(blocked, lambda: state.finish_region(state.reserve_region(bits, begin), end,
                                                                 f"{label} {kind}-end"))

            self._emit_check(check)
        return result, begin

    # --- where a blocked-only check goes -------------------------------------------------------------------
    # Right after its call the check is correct but costly: its compare waits for the end-time read, and the
    # branch holds back the code that follows, which in a ping-pong kernel is the critical path (FA4's
    # warp-scheduler barrier: the check delayed the next GEMM issue and the barrier arrive that releases
    # the other warp group). Nothing needs it there: it only decides whether to store two records. So each
    # later signal (arrive, release, named-barrier arrive) made in the same block takes the check past
    # itself, and once its block is left the check goes to the block's end (a producer's acquire check then
    # lands after the TMA issue that follows its commit, not before it). Records of a lane stay in program
    # order, which is time order: any record or blocked-only call made later first moves the pending
    # checks ahead of itself (in the same block, or just before the construct of that block it sits in);
    # a signal inside such a construct leaves them where they are.

    def _emit_check(self, check) -> None:
        from cutlass._mlir import ir

        point = ir.InsertionPoint.current
        block = point.block
        if point.ref_operation is not None:  # not appending: the check stays where it is
            check()
            return
        first = len(block.operations)
        check()
        kernel = inline_ptx.kernel_op()
        if not inline_ptx.same_op(kernel, self._checks_kernel):
            self._checks, self._checks_kernel = [], kernel
        self._checks.append((block, [block.operations[i] for i in range(first, len(block.operations))]))

    @staticmethod
    def _movable(block, ops) -> bool:
        """Nothing outside the check uses a value it defines (a DSL that reused one of the check's
        constants later in the block would otherwise see it moved past that use)."""
        for op in ops:
            for result in op.operation.results:
                for use in result.uses:
                    user = use.owner.operation
                    while user is not None and not user.block == block:
                        user = user.parent
                    if user is None or not any(user == other.operation for other in ops):
                        return False
        return True

    def _move_checks(self, before_record: bool) -> None:
        """Move the pending checks on, never backwards: to the insertion point when it is in their block
        (after a signal, still pending; or before a record or blocked-only call); before a record or call
        made in a construct nested in their block, to just before that construct (a signal made there
        leaves them where they are, still pending). When the insertion point is outside their block, the
        block is built: to its end, before its terminator. An earlier kernel's checks stay."""
        if not self._checks:
            return
        if not inline_ptx.same_op(inline_ptx.kernel_op(), self._checks_kernel):
            self._checks = []  # an earlier kernel's checks stay where they are (its IR may be gone already)
            return
        from cutlass._mlir import ir

        point = ir.InsertionPoint.current
        here = point.block
        pending = []
        for block, ops in self._checks:
            if not self._movable(block, ops):
                continue
            if block == here:
                if point.ref_operation is not None and not _after(block, point.ref_operation, ops[0]):
                    continue  # the insertion point is behind the check: it stays where it is
                for op in ops:
                    if point.ref_operation is not None:
                        op.move_before(point.ref_operation)
                    else:
                        op.move_after(here.operations[len(here.operations) - 1])
                if not before_record:
                    pending.append((block, ops))  # past this signal: a later call of the block may take it further
                continue
            construct = _construct_in(block, here)
            if construct is None:  # their block is built: to its latest point, just before its terminator
                last = block.operations[len(block.operations) - 1]
                if _is_terminator(last):
                    for op in ops:
                        op.move_before(last)
                continue
            if not _after(block, construct, ops[0]):
                continue  # a construct built behind the check (an insertion point before it): it stays
            if before_record:
                for op in ops:
                    op.move_before(construct)
                continue
            # A signal inside a construct still being built (an elected thread's arrive, a loop body):
            # the check stays put and pending; moving it after that construct would put it after records
            # the construct may still make. Back in its block, or once its block is left, it moves on.
            pending.append((block, ops))
        self._checks = pending

    def _poll(self, mbar, index, marker, orig, args, kwargs):
        """A try_wait. polls="begin": only its begin time is read, left for the wait it gates when it fails
        (a wait inside a poll that succeeds is not seen). polls="timed": also a region of the wait/acquire
        op when it succeeded after blocking (_when_blocked)."""
        from cutlass import Int32

        state = self._state()
        if state is None:
            return orig(*args, **kwargs)
        if self.polls == "begin":
            begin = state.timer(f"{marker[1]} gate")
            result = orig(*args, **kwargs)
            self._pending[id(result)] = (result, begin, mbar, index)
            return result
        result, begin = self._when_blocked(marker, orig, args, kwargs, lambda r: Int32(r) != 0, "poll")
        self._pending[id(result)] = (result, begin, mbar, index)
        return result

    def _pending_begin(self, mbar, index):
        """The begin time of the failed poll whose result gated this wait (on barrier array `mbar`,
        stage `index`), else None. The poll's result object must be a local of a calling frame
        (`consumer_wait(state, try_wait_token)`): then it is the same SSA value, so the begin time (read
        just before the poll, in the same block) is usable here too. Only a poll of the same array and
        stage counts: another pipeline's token still in scope gates nothing here. A token carried
        through a loop is a new object: the wait then begins on its own."""
        frame = sys._getframe(2)
        for _ in range(12):
            if frame is None:
                break
            for value in frame.f_locals.values():
                entry = self._pending.get(id(value))
                if entry is not None and entry[0] is value and entry[2] is mbar and _same_value(entry[3], index):
                    return entry[1]
            frame = frame.f_back
        return None

    # --- the hooks ------------------------------------------------------------------------------------

    def hook_init(self, orig):
        tracer = self

        def __init__(mbar, *args, **kwargs):
            orig(mbar, *args, **kwargs)
            frame = _user_frame(tracer._dirs, _SKIP_FUNCTIONS)
            object.__setattr__(mbar, _TAG, {"site": _site(frame), "variable": _creation_variable(frame, tracer._dirs)})

        return __init__

    def hook_copy(self, orig):
        def copy(mbar, *args, **kwargs):
            new = orig(mbar, *args, **kwargs)
            tag = getattr(mbar, _TAG, None)
            if tag is not None:
                object.__setattr__(new, _TAG, tag)
            return new

        return copy

    def hook_wait(self, orig):
        tracer = self

        def wait(mbar, index, phase, *args, **kwargs):
            if inline_ptx.kernel_op() is None:
                return orig(mbar, index, phase, *args, **kwargs)
            entry = _block_size_here()  # before the marker's own ops (the lift needs an empty body)
            marker = tracer._bits(mbar, "wait", index, BEGIN)
            if marker is None:
                return orig(mbar, index, phase, *args, **kwargs)
            return tracer._wait_region(marker, orig, (mbar, index, phase, *args), kwargs,
                                       tracer._pending_begin(mbar, index), entry)

        return tracer._guarded(wait)

    def hook_poll(self, orig):
        tracer = self

        def try_wait(mbar, index, phase, *args, **kwargs):
            if inline_ptx.kernel_op() is None:
                return orig(mbar, index, phase, *args, **kwargs)
            instant = tracer._bits(mbar, "poll", index, INSTANT)
            if instant is not None:
                tracer._record(*instant)
            region = tracer._bits(mbar, "wait", index, BEGIN) if tracer.polls != "off" else None
            if region is None:
                return orig(mbar, index, phase, *args, **kwargs)
            return tracer._poll(mbar, index, region, orig, (mbar, index, phase, *args), kwargs)

        return tracer._guarded(try_wait)

    def _guarded(self, hook):
        """`hook` runs with the nesting depth raised: raw mbarrier calls made inside the pipeline's own
        method (cute.arch.mbarrier_wait inside MbarrierArray.wait) are not traced a second time."""
        tracer = self

        def guarded(*args, **kwargs):
            tracer._depth += 1
            try:
                return hook(*args, **kwargs)
            finally:
                tracer._depth -= 1

        return guarded

    def hook_get_barrier(self, orig):
        """Pointers a pipeline hands out (`producer_get_barrier(state)`): remembered, so a kernel that
        arrives or waits on them with cute.arch.mbarrier_* directly is traced too."""
        tracer = self

        def get_barrier(mbar, index, *args, **kwargs):
            pointer = orig(mbar, index, *args, **kwargs)
            if tracer._depth == 0 and inline_ptx.kernel_op() is not None:
                tracer._pointers[id(pointer)] = (pointer, mbar, index, tracer._owner(mbar))
            return pointer

        return get_barrier

    def hook_raw(self, orig, kind: str):
        """cute.arch.mbarrier_{arrive, arrive_and_expect_tx, wait, try_wait} on a pointer a pipeline handed
        out, outside the pipeline's own methods: traced as that pipeline's op on that stage."""
        tracer = self

        def raw(mbar_ptr, *args, **kwargs):
            known = tracer._pointers.get(id(mbar_ptr))
            if tracer._depth or known is None or known[0] is not mbar_ptr or inline_ptx.kernel_op() is None:
                return orig(mbar_ptr, *args, **kwargs)
            _, mbar, index, owned = known
            tracer._depth += 1
            try:
                if kind == "arrive":
                    marker = tracer._bits(mbar, "arrive", index, INSTANT, owned)
                    if marker is not None:
                        tracer._record(*marker)
                    result = orig(mbar_ptr, *args, **kwargs)
                    tracer._move_checks(before_record=False)
                    return result
                if kind == "poll":
                    region = tracer._bits(mbar, "wait", index, BEGIN, owned) if tracer.polls != "off" else None
                    if region is None:
                        return orig(mbar_ptr, *args, **kwargs)
                    return tracer._poll(mbar, index, region, orig, (mbar_ptr, *args), kwargs)
                marker = tracer._bits(mbar, "wait", index, BEGIN, owned)
                if marker is None:
                    return orig(mbar_ptr, *args, **kwargs)
                return tracer._wait_region(marker, orig, (mbar_ptr, *args), kwargs, tracer._pending_begin(mbar, index))
            finally:
                tracer._depth -= 1

        return raw

    def hook_bulk_group(self, orig, op: str):
        """cute.arch.cp_async_bulk_wait_group (op "acquire": a TMA-store pipeline waits until the oldest
        stage's store has read its shared memory) and cp_async_bulk_commit_group (op "commit"), made for a
        PipelineTmaStore (cutlass's, through its TmaStoreFence, or a subclass such as quack's that calls
        them itself): that pipeline's op on stage 0 (the stage rotates implicitly: no index is passed).
        A bulk-group call with no TMA-store pipeline on the call stack is not traced."""
        tracer = self

        def bulk_group(*args, **kwargs):
            if tracer._depth or inline_ptx.kernel_op() is None:
                return orig(*args, **kwargs)
            owner, _ = _on_stack(_tma_store_role)
            marker = None
            if owner is not None:
                pipe = tracer._pipeline(owner.sync_object_full, owner, "full")
                marker = tracer._op_bits(pipe, op, 0, BEGIN if op == "acquire" else INSTANT)
            if marker is None:
                return orig(*args, **kwargs)
            tracer._depth += 1
            try:
                if op == "acquire":
                    return tracer._wait_region(marker, orig, args, kwargs)
                tracer._record(*marker)
                result = orig(*args, **kwargs)
                tracer._move_checks(before_record=False)
                return result
            finally:
                tracer._depth -= 1

        return bulk_group

    def hook_arrive(self, orig):
        tracer = self

        def arrive(mbar, index, *args, **kwargs):
            outermost = tracer._depth == 0
            tracer._depth += 1
            try:
                traced = outermost and inline_ptx.kernel_op() is not None
                if traced:
                    marker = tracer._bits(mbar, "arrive", index, INSTANT)
                    if marker is not None:
                        tracer._record(*marker)
                result = orig(mbar, index, *args, **kwargs)
                if traced:
                    tracer._move_checks(before_record=False)
                return result
            finally:
                tracer._depth -= 1

        return arrive

    def _barrier_marker(self, op: str, barrier_id, event_type):
        """(bits, label) of a named-barrier call; op: bar_sync | bar_arrive | sync_threads."""
        if not self.catalog.records(op):
            return None
        frame = _user_frame(self._dirs, _SKIP_FUNCTIONS)
        barrier = 0 if barrier_id is None else barrier_id
        kind = "bar_arrive" if op == "bar_arrive" else "bar_sync"
        static = barrier if isinstance(barrier, int) else None
        base = self.catalog.barrier_base(kind, _site(frame), static, _function_name(frame, self._dirs))
        if static is None:
            from cutlass import Int32

            barrier = Int32(barrier)
        return event_bits(base, barrier, event_type), f"{kind}[{static if static is not None else '?'}]@{_site(frame)}"

    def hook_barrier(self, orig, op: str):
        tracer = self

        def barrier(*args, **kwargs):
            if inline_ptx.kernel_op() is None or args or not tracer.named_barriers:
                return orig(*args, **kwargs)
            marker = tracer._barrier_marker(op, kwargs.get("barrier_id"), INSTANT if op == "bar_arrive" else BEGIN)
            if op == "bar_arrive":
                if marker is not None:
                    tracer._record(*marker)
                result = orig(*args, **kwargs)
                tracer._move_checks(before_record=False)
                return result
            if marker is None:
                return orig(*args, **kwargs)
            return tracer._wait_region(marker, orig, args, kwargs)

        return barrier

    def hook_launch(self, orig):
        """KernelLauncher.launch: remember the cluster shape before the kernel's body is traced (static
        ints only; a dynamic cluster stays unknown)."""
        tracer = self

        def launch(launcher, *args, **kwargs):
            cluster = kwargs.get("cluster")
            cluster = (1, 1, 1) if cluster is None else cluster  # no cluster: one CTA
            values = list(cluster) if isinstance(cluster, (list, tuple)) else [cluster]
            static = bool(values) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
            tracer.cluster = (values + [1, 1])[:3] if static else None
            return orig(launcher, *args, **kwargs)

        return launch

    # --- patching -------------------------------------------------------------------------------------

    def _patch(self, owner, attr: str, new) -> None:
        self._saved.append((owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)))
        setattr(owner, attr, new)

    def install(self) -> None:
        from cutlass import cute
        from cutlass.cutlass_dsl.cutlass import KernelLauncher
        from cutlass.pipeline import helpers

        self._patch(KernelLauncher, "launch", self.hook_launch(KernelLauncher.launch))
        mb = helpers.MbarrierArray
        self._patch(mb, "__init__", self.hook_init(mb.__init__))
        self._patch(mb, "__new_from_mlir_values__", self.hook_copy(mb.__new_from_mlir_values__))
        self._patch(mb, "recast_to_new_op_type", self.hook_copy(mb.recast_to_new_op_type))
        self._patch(mb, "wait", self.hook_wait(mb.wait))
        self._patch(mb, "try_wait", self.hook_poll(mb.try_wait))
        for name in ("arrive", "arrive_mbarrier", "arrive_and_expect_tx", "arrive_and_expect_tx_with_dst",
                     "arrive_cp_async_mbarrier", "arrive_tcgen05mma"):
            self._patch(mb, name, self.hook_arrive(getattr(mb, name)))
        self._patch(mb, "get_barrier", self.hook_get_barrier(mb.get_barrier))
        for name, kind in (("mbarrier_arrive", "arrive"), ("mbarrier_arrive_and_expect_tx", "arrive"),
                           ("mbarrier_wait", "wait"), ("mbarrier_try_wait", "poll")):
            self._patch(cute.arch, name, self.hook_raw(getattr(cute.arch, name), kind))
        fence = helpers.TmaStoreFence
        self._patch(fence, "__init__", self.hook_init(fence.__init__))
        self._patch(cute.arch, "cp_async_bulk_wait_group",
                    self.hook_bulk_group(cute.arch.cp_async_bulk_wait_group, "acquire"))
        self._patch(cute.arch, "cp_async_bulk_commit_group",
                    self.hook_bulk_group(cute.arch.cp_async_bulk_commit_group, "commit"))
        self._patch(cute.arch, "barrier", self.hook_barrier(cute.arch.barrier, "bar_sync"))
        self._patch(cute.arch, "barrier_arrive", self.hook_barrier(cute.arch.barrier_arrive, "bar_arrive"))
        self._patch(cute.arch, "sync_threads", self.hook_barrier(cute.arch.sync_threads, "sync_threads"))

    def uninstall(self) -> None:
        while self._saved:
            owner, attr, value = self._saved.pop()
            setattr(owner, attr, value)


def _on_stack(role_of):
    """(object, role) of the first object of the call stack for which `role_of` gives a role: innermost
    frame first, each frame's locals in order (a method's `self` first: arguments lead); failing that,
    the same over what is one step from each local (_members). (None, None) if none."""
    frames = []
    frame = sys._getframe(2)
    while frame is not None and len(frames) < 40:
        frames.append(frame)
        frame = frame.f_back
    for near in (False, True):
        for frame in frames:
            for local in frame.f_locals.values():
                for obj in _members(local) if near else (local,):
                    role = role_of(obj)
                    if role is not None:
                        return obj, role
    return None, None


def _tma_store_role(obj) -> str | None:
    """'full' for a TMA-store pipeline (its one sync object, a TmaStoreFence, is its `sync_object_full`)."""
    from cutlass.pipeline import PipelineTmaStore

    return "full" if isinstance(obj, PipelineTmaStore) else None


def _role_in(obj, mbar) -> str | None:
    """'full' or 'empty' when `obj` is a pipeline holding `mbar` as that array, else None."""
    if obj is None or obj is mbar or isinstance(obj, (int, float, str, type)):
        return None
    try:
        if getattr(obj, "sync_object_full", None) is mbar:
            return "full"
        if getattr(obj, "sync_object_empty", None) is mbar:
            return "empty"
    except Exception:  # noqa: BLE001 (a kernel's own object whose attributes fail to build: not a pipeline)
        return None
    return None


def _members(obj) -> list:
    """What is one step from `obj`: the elements of a list / tuple / dict, else its instance attributes
    (none for modules and classes, whose namespaces are not where a kernel keeps its pipelines)."""
    if isinstance(obj, (list, tuple)):
        return list(obj)
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (types.ModuleType, type)) or obj is None:
        return []
    try:
        return list(vars(obj).values())
    except TypeError:  # no __dict__ (slots, builtins)
        return []


def _block_size_here():
    """(the insertion block, its op count) at this point of building."""
    from cutlass._mlir import ir

    block = ir.InsertionPoint.current.block
    return block, len(block.operations)


def _pipeline_if_generate_body() -> bool:
    """The hooked wait is the body of a pipeline method's `if_generate(..., lambda: array.wait(...))`
    (cutlass's producer_acquire / consumer_wait, and the subclasses FA4 and quack define): the first frame
    outside this module is a lambda defined in a pipeline's method, called by if_generate."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return (frame is not None and frame.f_code.co_name == "<lambda>"
            and _is_sync_object(frame.f_locals.get("self"))
            and frame.f_back is not None and frame.f_back.f_code.co_name == "_execute_and_yield_out")


def _unconditional_if(point):
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


def _is_terminator(op) -> bool:
    """The op that ends a block (scf.yield, scf.condition, cf.br, a return)."""
    return op.name.endswith((".yield", ".return", ".condition")) or op.name in ("cf.br", "cf.cond_br")


def _after(block, op, other) -> bool:
    """`op` comes after `other` in `block`, or is `other` (False when neither is found in it)."""
    for candidate in block.operations:
        if candidate == other:
            return True
        if candidate == op:
            return False
    return False


def _first_wait_passes(owner, cls: str) -> list[int] | None:
    """PipelineOrder: barrier `stage * length + group` is waited on by `group`, and group 0 starts at
    phase 1 (cutlass's PipelineOrder.create), so the first wait on each of its stages passes."""
    length = getattr(owner, "length", None)
    depth = getattr(owner, "depth", None)
    if cls != "PipelineOrder" or not isinstance(length, int) or not isinstance(depth, int) or length < 1:
        return None
    return [stage * length for stage in range(depth)]


def _same_value(a, b) -> bool:
    """The same stage index: one Python object, one MLIR value, or equal constants."""
    if a is b:
        return True
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    try:
        return a.ir_value() == b.ir_value()
    except (AttributeError, TypeError, ValueError):
        return False


def _construct_in(block, inner):
    """The operation of `block` that (transitively) holds `inner`, None when `inner` is not nested in it."""
    op = inner.owner
    while op is not None:
        if op.operation.block == block:
            return op.operation
        op = op.operation.parent
    return None


def _require_sm90() -> None:
    """The recorder elects its lane with `elect.sync` (sm_90+): say so at trace time, not in ptxas."""
    from cutlass.base_dsl import BaseDSL

    arch = BaseDSL._get_dsl().get_arch_enum()
    major = arch.value[0] if isinstance(arch.value, tuple) else None
    if major is not None and major < 9:
        raise RuntimeError(f"trace_pipelines: kernels for {arch.name} cannot be traced (the records use sm_90 "
                           "instructions: elect.sync); compile for sm_90a or newer")


def _int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None
