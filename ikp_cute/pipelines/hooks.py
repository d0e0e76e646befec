"""The Tracer of one ``trace_pipelines`` context: the hooks of patches.TABLE, and what runs around a compile.

While the context is entered:
* patches.TABLE's attributes are wrapped by the ``hook_*`` methods below: each hooked call is classified
  (roles.py: which pipeline, which op; names.py: its call site), recorded (emit.py) when the level and
  options record it, and the barrier ops it builds are marked with that outcome (sites.Ledger.marking);
* ops the DSL builds without a source location get their call site (sites.kernel_locations);
* after a kernel's body is traced and before the module is hashed, the IR pass (ir_pass.py) numbers every
  barrier op and instruments the ones no hook built (the DSL's trace-finalize hook);
* after the compile's passes, the audit (audit.py) reads the final PTX (the DSL's post-compile hook).
On exit every hooked attribute still ours is restored, so kernels compiled outside are untouched.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* outside the context every hook is gone (test_off_is_untouched, the FA4 / quack / sm100 PTX comparisons);
* each call site of each op gets its markers, regions paired, at every level, for a kernel-defined
  subclass and a raw mbarrier arrive (test_every_call_site_has_its_markers,
  test_kernel_defined_subclass_and_names);
* only the outermost of nested hooked calls records (a raw mbarrier call inside MbarrierArray.wait is not
  traced twice): test_every_call_site_has_its_markers counts one region per call site.
"""

from __future__ import annotations

import contextlib
import math

from ikp_cute import inline_ptx

from . import names
from .catalog import Catalog, Pipeline
from .emit import Recorder
from .flag_ops import FlagCall
from .flag_trace import FlagTracer
from .patches import Patches
from .placement import block_size_here
from .record import BEGIN, INSTANT, Geometry, event_bits
from .roles import Roles, share_tag, tag_new_array, tma_store_role
from .sites import HookCall, Ledger, kernel_locations


class Tracer:
    """The state of one ``trace_pipelines`` context (see the module docstring)."""

    def __init__(self, catalog: Catalog, geometry: Geometry, *, polls: str, named_barriers: bool,
                 passing_waits: bool, blocked_ns: dict[str, int], audit: bool = True, kernels=None, pool=None,
                 kernel_meta=None):
        """The options are PipelineTrace's (validated there, defaults there)."""
        from .audit import Audit
        from .ir_pass import IRPass

        self.catalog = catalog
        self.polls = polls
        self.named_barriers = named_barriers
        self.roles = Roles(catalog)
        self.recorder = Recorder(geometry, blocked_ns, passing_waits, polls, events=catalog.events, kernels=kernels,
                                 pool=pool, kernel_meta=kernel_meta)
        self.ledger = Ledger()
        self.patches = Patches()
        self.ir_pass = IRPass(self)
        self.flags = FlagTracer(self)
        self.audit = Audit(self.ledger, catalog) if audit else None
        self.depth = 0  # nesting of hooked calls (only the outermost records)
        self.replaced: list[str] = []  # hooked attributes a kernel replaced while traced
        self.active = False  # between install and uninstall (a hook left behind calls the original)
        self._contexts = None

    def install(self) -> None:
        from cutlass.cutlass_dsl import CuTeDSL

        from ikp_cute import ambient

        dsl = CuTeDSL._get_dsl()
        self.active = True
        self.patches.install(self)
        stack = contextlib.ExitStack()
        stack.enter_context(ambient.recording_with(self.ambient))
        stack.enter_context(dsl.trace_finalize_hooks(self.ir_pass))
        stack.enter_context(kernel_locations(self.ledger))
        if self.audit is not None:
            stack.callback(self.audit.restore)
        self._contexts = stack

    def uninstall(self) -> None:
        self.active = False
        try:
            if self._contexts is not None:
                self._contexts.close()
        finally:
            self._contexts = None
            self.note_replaced()
            self.patches.uninstall()

    def note_replaced(self) -> None:
        """Remember the hooked attributes a kernel has replaced (sidecar `hooks_replaced`)."""
        for name in self.patches.replaced():
            if name not in self.replaced:
                self.replaced.append(name)

    # --- what a call is --------------------------------------------------------------------------------

    def pipeline_call(self, pipe: Pipeline, op: str, index, event_type, frame=None):
        """(marker or None, HookCall) of `op` on `pipe` at stage `index`: the marker (bits, label) when the
        level records `op` (its call site registered), else None and the reason in the HookCall."""
        frame = frame if frame is not None else names.user_frame(names.SKIPPED_FUNCTIONS)
        where = names.site(frame)
        if not self.catalog.records(op):
            reason = self.catalog.note_untraced(pipe, op)
            return None, hook_call(frame, pipe, op, reason=reason, by_choice=True)
        base = self.catalog.op_base(pipe, op, where)
        label = f"{op}_{pipe.name}@{where}"
        return (event_bits(base, index, event_type), label), hook_call(frame, pipe, op, traced=True, label=label)

    def barrier_call(self, op: str, barrier_id, event_type, frame=None):
        """(marker or None, HookCall) of a named-barrier call; op: bar_sync | bar_arrive | sync_threads."""
        from cutlass import Int32

        frame = frame if frame is not None else names.user_frame(names.SKIPPED_FUNCTIONS)
        barrier = 0 if barrier_id is None else barrier_id
        static = barrier if isinstance(barrier, int) else None
        reason = "named_barriers=False" if not self.named_barriers else self.catalog.why_not(op)
        if reason:
            return None, hook_call(frame, None, op, barrier=static, reason=reason, by_choice=True)
        kind = "bar_arrive" if op == "bar_arrive" else "bar_sync"
        where = names.site(frame)
        base = self.catalog.barrier_base(kind, where, static, names.function_name(frame))
        label = f"{kind}[{static if static is not None else '?'}]@{where}"
        bits = event_bits(base, barrier if static is not None else Int32(barrier), event_type)
        return (bits, label), hook_call(frame, None, op, barrier=static, traced=True, label=label)

    def in_kernel(self) -> bool:
        """Inside the body of a kernel this trace records (the `kernels` filter)."""
        kernel = inline_ptx.kernel_op()
        return kernel is not None and self.recorder.traces(kernel)

    def ambient(self, name: str, event_type: int) -> None:
        """profile_region(name) (profiler.py): a BEGIN or END record at the author's call site."""
        if self.depth or not self.in_kernel():
            return
        frame = names.user_frame(names.SKIPPED_FUNCTIONS | {"__enter__", "__exit__", "region_event"})
        self.recorder.ambient(name, event_type, names.site(frame))

    @contextlib.contextmanager
    def nested(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # --- the hooks (patches.TABLE) -------------------------------------------------------------------------

    def hook_array_init(self, orig):
        def __init__(mbar, *args, **kwargs):
            orig(mbar, *args, **kwargs)
            tag_new_array(mbar)

        return __init__

    def hook_array_copy(self, orig):
        def copy(mbar, *args, **kwargs):
            new = orig(mbar, *args, **kwargs)
            share_tag(mbar, new)
            return new

        return copy

    def hook_wait(self, orig):
        tracer = self

        def wait(mbar, index, phase, *args, **kwargs):
            def run():
                return orig(mbar, index, phase, *args, **kwargs)

            if tracer.depth or not tracer.in_kernel():
                return run()
            with tracer.nested():
                entry = block_size_here()  # before the marker's own ops (the lift needs an empty body)
                pipe, op = tracer.roles.op(mbar, "wait", inline_ptx.kernel_op())
                marker, call = tracer.pipeline_call(pipe, op, index, BEGIN)
                with tracer.ledger.marking(call):
                    if marker is None:
                        return run()
                    begin = tracer.recorder.pending_begin(mbar, index)
                    return tracer.recorder.wait_region(marker, run, op, begin, entry)

        return wait

    def hook_poll(self, orig):
        tracer = self

        def try_wait(mbar, index, phase, *args, **kwargs):
            def run():
                return orig(mbar, index, phase, *args, **kwargs)

            if tracer.depth or not tracer.in_kernel():
                return run()
            with tracer.nested():
                return tracer.poll(mbar, index, run, None)

        return try_wait

    def poll(self, mbar, index, run, owned):
        """A try_wait: an instant `poll` at level "all"; per `polls`, the begin of the wait it gates (or a
        timed region of that wait)."""
        kernel = inline_ptx.kernel_op()
        pipe, _ = self.roles.op(mbar, "poll", kernel, owned)
        instant, call = self.pipeline_call(pipe, "poll", index, INSTANT)
        if instant is not None:
            self.recorder.record(*instant)
        gate = None
        if self.polls != "off":
            _, wait_op = self.roles.op(mbar, "wait", kernel, owned)
            gate, _ = self.pipeline_call(pipe, wait_op, index, BEGIN)
            if gate is not None and instant is None:
                call = HookCall(call.site, call.path, call.line, pipe, "poll", traced=True,
                                label=f"{gate[1]} (gate)")
        elif instant is None:
            call = HookCall(call.site, call.path, call.line, pipe, "poll", reason='polls="off"', by_choice=True)
        with self.ledger.marking(call):
            if gate is None:
                return run()
            return self.recorder.poll(mbar, index, gate, run, wait_op)

    def hook_arrive(self, orig):
        tracer = self

        def arrive(mbar, index, *args, **kwargs):
            def run():
                return orig(mbar, index, *args, **kwargs)

            if tracer.depth or not tracer.in_kernel():
                with tracer.nested():
                    return run()
            with tracer.nested():
                pipe, op = tracer.roles.op(mbar, "arrive", inline_ptx.kernel_op())
                marker, call = tracer.pipeline_call(pipe, op, index, INSTANT)
                return tracer.signal(marker, call, run)

        return arrive

    def signal(self, marker, call, run):
        """An arrive / release / named-barrier arrive: its instant (when recorded) timed just before it and
        stored just after it (Recorder.signal); pending blocked-only checks move past it."""
        with self.ledger.marking(call):
            return self.recorder.signal(marker, run)

    def hook_get_barrier(self, orig):
        """Pointers a pipeline hands out (`producer_get_barrier(state)`): remembered, so a kernel that arrives
        or waits on them with cute.arch.mbarrier_* (or its own code) is traced as that pipeline's op."""
        tracer = self

        def get_barrier(mbar, index, *args, **kwargs):
            pointer = orig(mbar, index, *args, **kwargs)
            if tracer.depth == 0 and tracer.in_kernel():
                tracer.roles.hand_out(pointer, mbar, index, tracer.roles.owner(mbar))
            return pointer

        return get_barrier

    def hook_raw(self, orig, kind: str):
        """cute.arch.mbarrier_{arrive, arrive_and_expect_tx, wait, try_wait} on a pointer a pipeline handed
        out, outside the pipeline's own methods: traced as that pipeline's op on that stage."""
        tracer = self

        def raw(mbar_ptr, *args, **kwargs):
            def run():
                return orig(mbar_ptr, *args, **kwargs)

            handed = tracer.roles.handed(mbar_ptr)
            if tracer.depth or handed is None or not tracer.in_kernel():
                return run()
            mbar, index, owned = handed.mbar, handed.index, handed.owned
            kernel = inline_ptx.kernel_op()
            with tracer.nested():
                if kind == "poll":
                    return tracer.poll(mbar, index, run, owned)
                pipe, op = tracer.roles.op(mbar, kind, kernel, owned)
                marker, call = tracer.pipeline_call(pipe, op, index, INSTANT if kind == "arrive" else BEGIN)
                if kind == "arrive":
                    return tracer.signal(marker, call, run)
                with tracer.ledger.marking(call):
                    if marker is None:
                        return run()
                    return tracer.recorder.wait_region(marker, run, op, tracer.recorder.pending_begin(mbar, index))

        return raw

    def hook_bulk_group(self, orig, op: str):
        """cute.arch.cp_async_bulk_wait_group (op "acquire": a TMA-store pipeline waits until the oldest
        stage's store has read its shared memory) and cp_async_bulk_commit_group (op "commit"), made for a
        PipelineTmaStore (cutlass's, through its TmaStoreFence, or a subclass such as quack's that calls
        them itself): that pipeline's op on stage 0 (the stage rotates implicitly: no index is passed).
        A bulk-group call with no TMA-store pipeline on the call stack is not traced."""
        tracer = self
        from .roles import on_stack

        def bulk_group(*args, **kwargs):
            def run():
                return orig(*args, **kwargs)

            if tracer.depth or not tracer.in_kernel():
                return run()
            owner, _ = on_stack(tma_store_role)
            if owner is None:
                return run()
            pipe = tracer.roles.pipeline(owner.sync_object_full, owner, inline_ptx.kernel_op())
            marker, call = tracer.pipeline_call(pipe, op, 0, BEGIN if op == "acquire" else INSTANT)
            with tracer.nested():
                if op == "commit":
                    return tracer.signal(marker, call, run)
                with tracer.ledger.marking(call):
                    return run() if marker is None else tracer.recorder.wait_region(marker, run, "acquire")

        return bulk_group

    def hook_barrier(self, orig, op: str):
        tracer = self

        def barrier(*args, **kwargs):
            def run():
                return orig(*args, **kwargs)

            if tracer.depth or args or not tracer.in_kernel():
                return run()
            with tracer.nested():
                marker, call = tracer.barrier_call(op, kwargs.get("barrier_id"),
                                                   INSTANT if op == "bar_arrive" else BEGIN)
                if op == "bar_arrive":
                    return tracer.signal(marker, call, run)
                with tracer.ledger.marking(call):
                    return run() if marker is None else tracer.recorder.wait_region(marker, run, "bar_sync")

        return barrier

    def hook_flag_signal(self, orig):
        """cutlass.utils.distributed.red_add1: the same `red.add` of 1, its time read just before it, its records
        after it (flag_trace.py)."""
        tracer = self

        def red_add1(lock_ptr, *args, **kwargs):
            def run():
                return orig(lock_ptr, *args, **kwargs)

            if tracer.depth or args or not tracer.in_kernel():
                return run()
            with tracer.nested():
                call = FlagCall("signal", kwargs["order"], kwargs["scope"], update="add")
                return tracer.flags.signal(lock_ptr, 1, call, "red_add1", run)

        return red_add1

    def hook_flag_wait(self, orig, probe: str, order: str):
        """cutlass.utils.distributed.spin_lock_{ld_lt_relaxed, atom_cas_relaxed, atom_cas_acquire}_wait: the same
        loop of probes (a relaxed load while below the expected value; an atom.cas until it finds the expected
        value), started like the library's from 0, with the records of a wait that blocked."""
        tracer = self
        name = orig.__name__

        def wait(lock_ptr, *args, **kwargs):
            if tracer.depth or args or not tracer.in_kernel():
                return orig(lock_ptr, *args, **kwargs)
            with tracer.nested():
                call = FlagCall("wait", order, kwargs["scope"], probe=probe, cmp="ge" if probe == "ld" else "eq",
                                initial=0)
                expected = kwargs["expected_val"]
                tracer.flags.wait(lock_ptr, expected, kwargs.get("reset_val", expected), call, name,
                                  lambda: orig(lock_ptr, **kwargs))
            return None

        return wait

    def hook_compile(self, orig):
        """Compiler.compile: after the passes of a traced compile, the audit reads its final PTX."""
        tracer = self

        def compile(compiler, module, *args, **kwargs):
            result = orig(compiler, module, *args, **kwargs)
            if tracer.audit is not None:
                tracer.audit.after_compile()
            return result

        return compile

    def hook_launch(self, orig):
        """KernelLauncher.launch: remember the cluster shape and the block's warps before the kernel's body is
        traced (static ints only; a dynamic shape stays unknown: a pool trace then keeps state for 32 warps)."""
        tracer = self

        def launch(launcher, *args, **kwargs):
            cluster = kwargs.get("cluster")
            cluster = (1, 1, 1) if cluster is None else cluster  # no cluster: one CTA
            values = list(cluster) if isinstance(cluster, (list, tuple)) else [cluster]
            tracer.roles.cluster = (values + [1, 1])[:3] if static_ints(values) else None
            block = kwargs.get("block")
            block = list(block) if isinstance(block, (list, tuple)) else [block]
            tracer.recorder.block_warps = -(-math.prod(block) // 32) if static_ints(block) else None
            return orig(launcher, *args, **kwargs)

        return launch


def static_ints(values) -> bool:
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


def hook_call(frame, pipeline, op, **fields) -> HookCall:
    path = frame.f_code.co_filename if frame is not None else "?"
    line = frame.f_lineno if frame is not None else 0
    return HookCall(names.site(frame), path, line, pipeline, op, **fields)

