"""Per-lane time order of what trace_pipelines stores, checked on a kernel's MLIR before its compile passes.

The host decoder reads a lane's records as a time-ordered sequence (unsigned steps between neighbours), so
a lane must store its records in the order of the times they carry. Every record of ikp_cute/pipelines/
record.py reserves its slot with one inline-PTX block that writes the warp's room back to shared memory:
an instant (`KernelState.record`) carries its own timer read; a region's reservation
(`KernelState.reserve_region`) carries its begin time, and the block that finishes it
(`KernelState.finish_region`) its end time. Walking the module in program order (pre-order), a reservation
made before another must not carry a time read after the other's earliest time. Each region's two times
are traced back through casts to their `%globaltimer` reads.

At level "all" a timed poll's region and the wait it gates are both present in the IR but never both
stored (the wait runs only when the poll failed): check levels "waits" and "signals"."""

from __future__ import annotations

import contextlib
import re

_RESERVE = "st.volatile.shared.u32 [a], room"  # the room written back: one per record or region
_REGION = "@ok " + _RESERVE  # reserve_region's form
_LABEL = re.compile(r"/\* ikp (.*?) ?\*/")


@contextlib.contextmanager
def checking_record_order():
    """Within the context, every module cute.compile builds is checked before its passes run; yields the
    list of violations found, each (label stored first, label stored second)."""
    from cutlass.base_dsl import compiler

    violations: list = []
    original = compiler.Compiler.compile

    def compile(self, module, *args, **kwargs):
        violations.extend(order_violations(module))
        return original(self, module, *args, **kwargs)

    compiler.Compiler.compile = compile
    try:
        yield violations
    finally:
        compiler.Compiler.compile = original


def order_violations(module) -> list:
    ops = []
    _walk(module.operation, ops)
    asm_ops = [(i, op) for i, op in enumerate(ops) if op.name == "llvm.inline_asm"]  # where times are read

    def where(op):
        return next((i for i, other in asm_ops if other == op), None) if op is not None else None

    records = []  # (position of the reservation, times' positions, label)
    for i, op in enumerate(ops):
        text = _asm(op)
        if text is None or _RESERVE not in text or "/* ikp" not in text:
            continue
        label = _label(text)
        if _REGION not in text:
            records.append((i, [i], label))
            continue
        begin = where(_timer_of(op.operands[1]))
        finish = _finishing_block(op)
        end = where(_timer_of(finish.operands[3])) if finish is not None else None
        records.append((i, [t for t in (begin, end) if t is not None] or [i], _label(_asm(finish)) or label))
    found = []
    for a, (_, times_a, label_a) in enumerate(records):
        latest = max(times_a)
        for _, times_b, label_b in records[a + 1:]:
            if latest > min(times_b):
                found.append((label_a, label_b))
    return found


def _walk(op, out):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                out.append(inner)
                _walk(inner, out)


def _asm(op) -> str | None:
    if op is None or op.name != "llvm.inline_asm":
        return None
    return str(op.attributes["asm_string"])


def _label(text) -> str | None:
    m = _LABEL.search(text or "")
    return m.group(1) if m else None


def _timer_of(value):
    """The inline-asm op a time value comes from, through its casts (None when it comes from elsewhere)."""
    for _ in range(10):
        owner = getattr(value.owner, "operation", value.owner)
        if not hasattr(owner, "name"):
            return None
        if owner.name == "llvm.inline_asm":
            return owner
        if not len(owner.operands):
            return None
        value = owner.operands[0]
    return None


def _finishing_block(reserve):
    """The finish_region block that stores the region reserve_region made: a user of its slot address."""
    stack = list(reserve.results)[:1]
    for _ in range(50):
        if not stack:
            return None
        value = stack.pop()
        for use in value.uses:
            user = getattr(use.owner, "operation", use.owner)
            if user.name == "llvm.inline_asm":
                return user
            stack.extend(user.results)
    return None
