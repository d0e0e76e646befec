"""The IR pass: after a kernel's body is traced, every barrier operation of its MLIR becomes a numbered site,
and the ones no Python hook built are instrumented where they are.

Why at this level. A kernel can route around any Python attribute (it may replace
``cute.arch.mbarrier_wait`` with its own while it is traced, call ``nvvm`` op builders itself, or write
its own inline PTX); it cannot route around its own MLIR. Every mbarrier / named-barrier operation is
an ``nvvm`` op or an ``llvm.inline_asm`` by the time the body is traced, and the DSL runs the trace-
finalize hooks right then, before the module is hashed (so a traced kernel never shares a compile-cache
entry with an untraced one) and before the pass pipeline lowers it. Hooking the op builders instead
would miss a kernel's inline PTX and any builder imported under another name. The Python hooks stay:
they know what no IR walk can (the pipeline object, its role, the kernel's variable names, a poll that
gates a wait), and the ops they built carry their call's marker (sites.Ledger.marking), so the pass
leaves them, and their records, exactly as the hooks made them.

For an op no hook built, by kind (sites.KINDS):
* wait / poll / arrive on an mbarrier: attributed to a pipeline when its address operand comes from a
  pointer a pipeline handed out (roles.Roles.by_address): that pipeline's acquire / wait / commit /
  release on that stage; else a pipeline of its own, ``mbar_<file>_<line>`` (class ``mbarrier``);
* bar_sync / sync_threads / bar_arrive: ``bar_sync[id]`` / ``bar_arrive[id]`` (id from the operand);
then recorded as the level and options say, like a hooked call: a wait is a region (blocked-only, its
check right after it; the checks hooks placed past it are taken back first: placement.settle_before), an
arrive an instant before it. Inline PTX that does other work besides its barrier instruction (FA4's
Blackwell GEMM waits inside its ``tcgen05.mma`` block) is not separable: reported untraced, with why.
Flag operations (sites.FLAG_KINDS) go to flag_trace.FlagTracer.instrument: a release red / atom / store is
traced where it is; a hand-written spin loop is listed untraced ("use ikp_cute.flags.wait").

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py, test_pipelines_ir.py):
* a kernel that swaps ``cute.arch.mbarrier_wait`` for its own, or emits its own inline-PTX wait, is still
  traced (test_a_swapped_mbarrier_wait_is_still_traced, test_an_inline_ptx_wait_is_traced);
* ops the hooks built are left as they are: FA4's and quack's PTX keep their records exactly
  (test_fa4_sm90_coverage: every site via the hooks);
* records of a lane stay in time order (test_every_lane_stores_its_records_in_time_order).
"""

from __future__ import annotations

import os
import re

from . import names
from .catalog import Pipeline
from .record import BEGIN, INSTANT, event_bits
from .roles import def_chain, op_of
from .sites import FLAG_KINDS, SITE_COLUMN, Site, asm_text, classify, file_location, mixed_with, walk

_ASM_ADDRESS = re.compile(r"\bmbarrier\.[\w.:]+\s+(?:[^,;]*,\s*)?\[\$(\d+)")
_ASM_BARRIER_ID = re.compile(r"\b(?:bar|barrier)(?:\.cta)?\.(?:sync|arrive|red)(?:\.aligned)?\s+(\$\d+|\d+)")


class IRPass:
    """The DSL's trace-finalize hook of a Tracer: called as `hook(dsl, module, function_name)`."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.lone: list[tuple[object, object, Pipeline]] = []  # (kernel, address root, pipeline) of a module

    def __call__(self, dsl, module, function_name: str) -> None:
        from cutlass._mlir import ir

        tracer = self.tracer
        tracer.note_replaced()
        if tracer.audit is not None:
            tracer.audit.restore()  # an earlier module the DSL's JIT cache served: it never compiled
        kernels = []
        try:
            with module.context, ir.Location.unknown():
                for kernel in kernel_ops(module):
                    if not tracer.recorder.traces(kernel):  # the `kernels` filter: left untouched
                        continue
                    name = ir.StringAttr(kernel.attributes["sym_name"]).value
                    tracer.ledger.drop_kernel(name)
                    kernels.append(name)
                    calls: dict = {}  # flag calls of the hooks: every probe of one call is one site
                    for op in [op for op in walk(kernel)
                               if classify(op) is not None or flag_probe(op, tracer.ledger)]:
                        self.site_of(kernel, name, op, calls)
                tracer.recorder.split_kernels()  # pool traces: the closed and the traced copy (copies.py)
                if tracer.audit is not None and kernels:
                    tracer.audit.prepare(dsl, module, kernels)
        finally:
            tracer.ledger.end_module()  # numbers restart per module: a re-trace gives the same module
            tracer.roles.handed_out = []
            tracer.recorder.forget_kernels()
            self.lone = []

    def site_of(self, kernel, name: str, op, calls: dict | None = None) -> Site | None:
        """Number `op` as a site of kernel `name`; instrument it when no hook built it. `calls`: the sites of the
        flag calls seen so far ({HookCall id: Site}): a traced wait's first probe (peeled out of its loop) and
        its loop's probe are one site, so that an instruction LLVM merges from both keeps the site's number."""
        ledger = self.tracer.ledger
        kind = classify(op) or "flag_wait"
        call = ledger.call_of(op)
        known = calls.get(id(call)) if calls is not None and call is not None and call.op in FLAG_KINDS else None
        if known is not None:
            site = known
            path, line = call.path, call.line
        elif call is not None:
            site = ledger.new(kind, call.site, op.name, pipeline=call.pipeline, op=call.op, barrier=call.barrier,
                              traced=call.traced, via="hooks", reason=call.reason, by_choice=call.by_choice,
                              label=call.label, kernel=name)
            path, line = call.path, call.line
            if calls is not None and call.op in FLAG_KINDS:
                calls[id(call)] = site
        else:
            path, line = source_of(op)
            where = f"{os.path.basename(path)}:{line}" if line else "?"
            site = ledger.new(kind, where, op.name, kernel=name)
            if site is not None:
                self.instrument(kernel, op, site)
        if site is None:
            return None
        ledger.number(op, site, path, line)
        return site

    # --- an op no hook built ---------------------------------------------------------------------------

    def instrument(self, kernel, op, site: Site) -> None:
        tracer = self.tracer
        catalog = tracer.catalog
        if site.kind in FLAG_KINDS:
            return tracer.flags.instrument(kernel, op, site)
        if site.kind == "expect_tx":
            return self._untraced(site, "expect_tx alone (the arrive that completes it is the signal)", True)
        mixed = mixed_with(op) if op.name == "llvm.inline_asm" else None
        if mixed is not None and site.kind in ("wait", "bar_sync"):
            return self._untraced(site, f"inline PTX that also runs {mixed}: a region around it would time that "
                                        "work too", False)
        if site.kind in ("bar_sync", "sync_threads", "bar_arrive"):
            return self._barrier(kernel, op, site)
        address = address_operand(op)
        handed = tracer.roles.by_address(address)
        if handed is not None:
            pipe, name = tracer.roles.op(handed.mbar, site.kind, kernel, handed.owned)
            index = handed.index
        else:
            pipe, index = self._lone_pipeline(kernel, op, address, site), 0
            name = op_of(site.kind, None)
        site.pipeline, site.op = pipe, name
        if not catalog.records(name):
            site.reason, site.by_choice = catalog.note_untraced(pipe, name), True
            return None
        if site.kind == "poll" and name != "poll":  # only instants are made of a poll the hooks did not gate
            return None
        base = catalog.op_base(pipe, name, site.site)
        label = f"{name}_{pipe.name}@{site.site}"
        if site.kind == "wait":
            tracer.recorder.region_around(kernel, op, lambda: event_bits(base, index, BEGIN), label,
                                          blocked_only=not tracer.recorder.passing_waits, blocking=name)
        else:
            tracer.recorder.instant_around(kernel, op, lambda: event_bits(base, index, INSTANT), label)
        site.traced, site.via, site.label = True, "ir", label
        return None

    def _barrier(self, kernel, op, site: Site) -> None:
        from cutlass import Int32

        tracer = self.tracer
        catalog = tracer.catalog
        name = site.kind
        reason = "named_barriers=False" if not tracer.named_barriers else catalog.why_not(name)
        barrier = 0 if name == "sync_threads" else barrier_operand(op)
        site.op, site.barrier = name, barrier if isinstance(barrier, int) else None
        if reason:
            site.reason, site.by_choice = reason, True
            return
        if barrier is None:
            return self._untraced(site, "named barrier whose id is not an operand of its PTX", False)
        kind = "bar_arrive" if name == "bar_arrive" else "bar_sync"
        static = barrier if isinstance(barrier, int) else None
        base = catalog.barrier_base(kind, site.site)
        label = f"{kind}[{static if static is not None else '?'}]@{site.site}"

        def bits(event_type):
            return lambda: event_bits(base, barrier if static is not None else Int32(barrier), event_type)

        if kind == "bar_sync":
            tracer.recorder.region_around(kernel, op, bits(BEGIN), label,
                                          blocked_only=not tracer.recorder.passing_waits, blocking="bar_sync")
        else:
            tracer.recorder.instant_around(kernel, op, bits(INSTANT), label)
        site.traced, site.via, site.label = True, "ir", label

    def _lone_pipeline(self, kernel, op, address, site: Site) -> Pipeline:
        """A barrier no pipeline handed out: a pipeline of its own, one per address (the root of the address
        operand's casts, compared with ==), named from the source of its first call (names.call_subject),
        else `mbar_<file>_<line>`."""
        root = def_chain(address)[-1] if address is not None else None
        for owner, known, pipe in self.lone:
            if root is not None and owner == kernel and known == root:
                return pipe
        path, line = source_of(op)
        subject = names.call_subject(path, line) if line else None
        stem = site.site.replace(".py:", "_").replace(":", "_")
        pipe = self.tracer.catalog.pipeline(("ir", site.site, len(self.lone)), lambda: Pipeline(
            name=subject or f"mbar_{stem}", cls="mbarrier", site=site.site, num_stages=1), kernel)
        self.lone.append((kernel, root, pipe))
        return pipe

    @staticmethod
    def _untraced(site: Site, reason: str, by_choice: bool) -> None:
        site.reason, site.by_choice = reason, by_choice


def flag_probe(op, ledger) -> bool:
    """A probe (a scoped load or an atom.cas) that a hooked flag wait built outside its loop: its first probe."""
    if op.name not in ("nvvm.load.ext", "nvvm.atomicrmw"):
        return False
    call = ledger.call_of(op)
    return call is not None and call.op == "flag_wait"


def source_of(op) -> tuple[str, int]:
    """(path, line) of the kernel code that built `op`: its own location, else the nearest op built before
    it that has one (a kernel's direct `llvm.inline_asm` call gets no location of its own); ("?", 0)."""
    node = op
    for _ in range(64):
        loc = file_location(node.location)
        if loc is not None and loc.start_line > 0 and loc.start_col < SITE_COLUMN:
            return loc.filename, loc.start_line
        block = node.block
        before = None
        for candidate in block.operations:
            if candidate.operation == node:
                break
            before = candidate.operation
        if before is not None:
            node = before
        elif block.owner is not None:
            node = block.owner.operation
        else:
            break
    return "?", 0


def kernel_ops(module) -> list:
    """The `cuda.kernel` ops of a module (the kernels its launches trace)."""
    return [op for op in walk(module.operation) if op.name == "cuda.kernel"]


def address_operand(op):
    """The mbarrier address an op uses (None when unknown): an nvvm op's `addr`, or for inline PTX the
    operand its barrier instruction names (`[$4]`)."""
    if op.name != "llvm.inline_asm":
        try:
            return op.opview.addr
        except AttributeError:
            return None
    match = _ASM_ADDRESS.search(asm_text(op) or "")
    if match is None or int(match.group(1)) >= len(op.operands):
        return None
    return op.operands[int(match.group(1))]


def barrier_operand(op):
    """A named barrier's id: an int when constant, else its MLIR value; None when not found."""
    if op.name == "llvm.inline_asm":
        match = _ASM_BARRIER_ID.search(asm_text(op) or "")
        if match is None:
            return None
        token = match.group(1)
        if not token.startswith("$"):
            return int(token)
        index = int(token[1:])
        value = op.operands[index] if index < len(op.operands) else None
    else:
        try:
            value = op.opview.barrierId
        except AttributeError:
            return None
    if value is None:
        return 0
    return constant_int(value)


def constant_int(value):
    """The int an MLIR value is when it is an `arith.constant` (else the value itself)."""
    from cutlass._mlir import ir

    owner = getattr(value, "owner", None)
    owner = getattr(owner, "operation", owner)
    if owner is not None and getattr(owner, "name", "") == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr) or ir.IntegerAttr.isinstance(attr):
            return ir.IntegerAttr(attr).value
    return value
