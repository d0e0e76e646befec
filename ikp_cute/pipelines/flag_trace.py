"""Flag calls of a traced kernel: which call site, which event id, recorded or why not (docs/flags.md).

The tracer's hooks of cutlass.utils.distributed (red_add1 and the three spin_lock_* waits; patches.TABLE) and
ikp_cute.flags.signal / wait come here while a kernel is traced: the call gets its call site (names.py), its
`flags` entry and event id (catalog.FlagSites), then flag_ops.py emits it with its records, the ops it builds
marked with the call (sites.Ledger.marking: the IR pass leaves them as they are and the audit finds them).
When the level or `ops=` leaves flags out, the plain call is emitted, marked with the reason.

Invariants a change could break (tests/unit/ikp_cute/test_flags_compile.py guards them):
* every call site of the four library functions in a traced kernel gets its records and one `flags` entry;
* a value that is a Python int at trace time is the entry's constant, anything else is recorded.
"""

from __future__ import annotations

from . import flag_ops, names
from .record import BEGIN, INSTANT
from .sites import HookCall

RECORDED = "recorded"


def same_value(a, b) -> bool:
    """The same trace-time value: one object, equal ints, or one MLIR value (compared by identity: the DSL
    overloads ``==`` on values)."""
    if a is b:
        return True
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    try:
        return hash(a.ir_value()) == hash(b.ir_value())
    except (AttributeError, TypeError):
        return False


def constant(value):
    """The int a trace-time value is (a Python int), else "recorded"."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else RECORDED


class FlagTracer:
    """The flag half of a Tracer (hooks.py)."""

    def __init__(self, tracer):
        self.tracer = tracer

    def _call(self, frame, op: str, **fields) -> HookCall:
        path = frame.f_code.co_filename if frame is not None else "?"
        line = frame.f_lineno if frame is not None else 0
        return HookCall(names.site(frame), path, line, None, op, **fields)

    def signal(self, ptr, value, call: flag_ops.FlagCall, op: str, run=None, frame=None) -> None:
        """A signal made while a kernel is traced (`run`: the caller's own update, else flag_ops.update)."""
        tracer = self.tracer
        frame = frame if frame is not None else names.user_frame(names.SKIPPED_FUNCTIONS)
        reason = tracer.catalog.why_not("flag_signal")
        if reason:
            with tracer.ledger.marking(self._call(frame, "flag_signal", reason=reason, by_choice=True)):
                return flag_ops.signal(ptr, value, call, None, run)
        entry = tracer.catalog.flags.register("signal", names.site(frame), op=op, order=call.order, scope=call.scope,
                                              update=call.update, value=constant(value))
        records = self._records(entry, INSTANT, record_value=entry.value == RECORDED)
        with tracer.ledger.marking(self._call(frame, "flag_signal", traced=True, label=entry.label)):
            flag_ops.signal(ptr, value, call, records, run)
        tracer.recorder.signal_done()
        return None

    def wait(self, ptr, expected, reset, call: flag_ops.FlagCall, op: str, run=None, frame=None):
        """A spin wait made while a kernel is traced; returns the value that ended it (`run`: the caller's own
        wait, e.g. the library function, used as it is when flags are not recorded)."""
        tracer = self.tracer
        frame = frame if frame is not None else names.user_frame(names.SKIPPED_FUNCTIONS)
        reason = tracer.catalog.why_not("flag_wait")
        if reason:
            with tracer.ledger.marking(self._call(frame, "flag_wait", reason=reason, by_choice=True)):
                return run() if run is not None else flag_ops.spin(ptr, expected, reset, call)
        resets = call.probe == "cas" and not same_value(reset, expected)
        entry = tracer.catalog.flags.register("wait", names.site(frame), op=op, order=call.order, scope=call.scope,
                                              cmp=call.cmp, expected=constant(expected),
                                              reset=constant(reset) if resets else None)
        records = self._records(entry, BEGIN, record_expected=entry.expected == RECORDED,
                                record_reset=entry.reset == RECORDED, passing=tracer.recorder.passing_waits)
        with tracer.ledger.marking(self._call(frame, "flag_wait", traced=True, label=entry.label)):
            return flag_ops.spin(ptr, expected, reset, call, records)

    # --- the IR pass: a flag operation no hook or helper built -------------------------------------------------

    def instrument(self, kernel, op, site) -> None:
        """A flag site of the IR pass (ir_pass.py) that no hook built: a release red / atom / store of a 32-bit
        flag is traced where it is (its time read before it, its records after it); a spin loop's probe and
        inline PTX are listed untraced, saying what traces them."""
        from cutlass import Int32

        site.op = site.kind
        if op.name == "llvm.inline_asm":
            return _untraced(site, "inline PTX flag operation (use ikp_cute.flags.signal / wait)")
        if site.kind == "flag_wait":
            return _untraced(site, "hand-written spin loop (use ikp_cute.flags.wait)")
        catalog = self.tracer.catalog
        reason = catalog.why_not("flag_signal")
        if reason:
            site.reason, site.by_choice = reason, True
            return None
        what = describe_signal(op)
        if isinstance(what, str):
            return _untraced(site, what)
        update_kind, address, value, order, scope = what
        from .ir_pass import constant_int

        static = constant_int(value)
        entry = catalog.flags.register("signal", site.site, op=op.name, order=order, scope=scope, update=update_kind,
                                       value=static if isinstance(static, int) else RECORDED)

        def before(state):
            return state.timer(f"{entry.label} time")

        def after(state, time):
            records = flag_ops.FlagRecords(state, (entry.id << 2) | INSTANT, entry.label,
                                           record_value=entry.value == RECORDED)
            flag_ops.record_signal(records, time, pointer_int(address), Int32(value), update_kind)

        self.tracer.recorder.around(kernel, op, before, after)
        site.traced, site.via, site.label = True, "ir", entry.label
        return None

    def _records(self, entry, event_type: int, **fields) -> flag_ops.FlagRecords:
        recorder = self.tracer.recorder
        state = recorder.state()
        recorder.placement.move(before_record=True)  # checks still pending go ahead of these records
        return flag_ops.FlagRecords(state, (entry.id << 2) | event_type, entry.label, **fields)


def _untraced(site, reason: str) -> None:
    site.reason, site.by_choice = reason, False


def describe_signal(op):
    """(update, address value, value operand, order, scope) of a releasing nvvm red / atomicrmw / store.ext, or
    why it is not traced (a str)."""
    from cutlass._mlir import ir

    from .sites import attribute

    view = op.opview
    if op.name == "nvvm.red":
        kind, address, value, scope = attribute(op, "op"), view.a, view.b, attribute(op, "memScope")
    elif op.name == "nvvm.atomicrmw":
        kind, address, value, scope = attribute(op, "op"), view.ptr, view.a, attribute(op, "syncscope")
        kind = {"exch": "store"}.get(kind, kind)
    else:
        kind, address, value, scope = "store", view.addr, view.value, attribute(op, "scope")
    order = attribute(op, "memOrder" if op.name != "nvvm.store.ext" else "order")
    if kind not in ("add", "store"):
        return f"release {kind} on a flag (flags are traced as adds and stores)"
    if not ir.IntegerType.isinstance(value.type) or ir.IntegerType(value.type).width != 32:
        return f"a flag of type {value.type} (flags are traced as 32-bit integers)"
    return kind, address, value, order, scope or "gpu"


def pointer_int(address):
    """An LLVM pointer value as an Int64 (its address)."""
    from cutlass import Int64
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import llvm

    return Int64(llvm.ptrtoint(ir.IntegerType.get_signless(64), address))
