"""Two copies of a kernel traced into a pool: the kernel's own code for a launch that does not record, the
traced code for one that does (record_pool.py: the decision both hang on).

After the kernel's body is traced (the IR pass, at the DSL's trace-finalize hook), its entry block is

    [decision ops (record_pool.PoolKernelState.create)] [split op: closed = ...] [setup + body ...] return

and becomes

    [decision ops] [split op] scf.if closed { body copy, every op of ours removed } else { setup + body;
    epilogue } return

The closed copy is a clone of the traced one (MLIR clones a region with its values remapped) from which
every operation of ours is erased: each inline-PTX block marked ``/* ikp`` (records, timer reads, setup),
and every op that uses one of their results (the blocked-only checks: compares and the ``scf.if`` around
their stores). Values of ours that the kernel itself used would make that impossible; none exists (a hooked
call's result is the kernel's; our values only feed our records), and ``strip`` refuses, naming the op,
rather than remove anything else. What the records' operands computed (event ids, ``%tid.x`` reads) is left
for the compiler's dead-code elimination, so the closed copy compiles to the kernel's own instructions.

The closed copy is the ``then`` block, laid out first, on the fall-through path (FA4 with a capture window:
+1.15% against +1.34% the other way round, H200, docs/capture.md).

Invariants a change could break (tests/unit/ikp_cute/test_pool_compile.py):
* the closed copy holds nothing of ours (test_the_closed_copy_is_the_untouched_kernel);
* a kernel op that uses a value of ours is refused, not erased (test_strip_erases_only_what_is_ours).
"""

from __future__ import annotations

MARK = "ikp"


def is_ours(op) -> bool:
    """An inline-PTX block of the tracer (every one carries a ``/* ikp ...`` comment)."""
    from cutlass._mlir import ir

    if op.name != "llvm.inline_asm":
        return False
    return f"/* {MARK}" in ir.StringAttr(op.attributes["asm_string"]).value


def split(kernel, split_after, closed, epilogue) -> None:
    """Restructure `kernel` (a cuda.kernel op) as the module docstring says. `split_after`: the op after which
    the traced code begins; `closed`: the i1 value (a launch that does not record); `epilogue()`: emits the
    end of the traced copy at the current insertion point."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import scf

    block = split_after.block
    if len(kernel.regions[0].blocks) != 1:
        from .emit import kernel_name

        raise RuntimeError(
            f"trace_pipelines(pool): kernel {kernel_name(kernel)} has {len(kernel.regions[0].blocks)} blocks at its "
            "top level (unstructured control flow); a pool trace splits a kernel of one block into its two copies. "
            "Trace it into a Session instead, or leave it out with kernels=")
    ops = [op.operation for op in block.operations]
    at = next(i for i, op in enumerate(ops) if op == split_after)
    body, terminator = ops[at + 1 : -1], ops[-1]
    with ir.InsertionPoint(terminator), ir.Location.unknown():
        choice = scf.IfOp(_value(closed), [], has_else=True)
        with ir.InsertionPoint(choice.then_block):
            plain_end = scf.YieldOp([])
        with ir.InsertionPoint(choice.else_block):
            traced_end = scf.YieldOp([])
    for op in body:
        op.move_before(traced_end.operation)
    clone = choice.operation.clone(ip=ir.InsertionPoint(terminator))
    for op in [op.operation for op in clone.regions[1].blocks[0].operations][:-1]:
        op.move_before(plain_end.operation)
    clone.erase()
    strip(choice.then_block)
    with ir.InsertionPoint(traced_end.operation), ir.Location.unknown():
        epilogue()


def _value(v):
    return v.ir_value() if hasattr(v, "ir_value") else v


def strip(block) -> int:
    """Erase every op of ours in `block` (nested regions included) and every op that uses their results;
    returns how many of ours were erased. Raises RuntimeError naming an op of the kernel that would go."""
    ours = []
    _collect(block, ours)
    for op in reversed(ours):  # later ops first: their users are gone before them
        _erase(op)
    return len(ours)


def _collect(block, out: list) -> None:
    for op in block.operations:
        op = op.operation
        if is_ours(op):
            out.append(op)
        for region in op.regions:
            for inner in region.blocks:
                _collect(inner, out)


def _erase(op) -> None:
    for result in op.results:
        while True:
            uses = list(result.uses)
            if not uses:
                break
            user = uses[0].owner
            user = getattr(user, "operation", user)
            if not _erasable(user):
                raise RuntimeError(
                    f"the closed copy of a pool-traced kernel: {user.name} ({user.location}) uses a value of the "
                    f"tracer's {op.name}; the kernel's own ops are never removed")
            _erase(user)
    op.erase()


_PURE = ("arith.", "llvm.extractvalue", "llvm.trunc", "llvm.zext", "llvm.sext", "llvm.bitcast",
         "builtin.unrealized_conversion_cast", "nvvm.read.ptx.sreg.")


def _erasable(op) -> bool:
    """An op that may go with a value of ours: pure arithmetic / casts, one of ours, or an scf.if without
    results whose regions hold only such ops (a blocked-only check)."""
    if is_ours(op) or (op.name.startswith(_PURE) and not op.regions):
        return True
    if op.name != "scf.if" or len(op.results):
        return False
    inner = [o.operation for region in op.regions for b in region.blocks for o in b.operations]
    return all(_erasable(o) or (o.name == "scf.yield" and not len(o.operands)) for o in inner)
