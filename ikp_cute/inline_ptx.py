"""Inline PTX with side effects: the one way every ikp_cute recorder emits its hand-written PTX.

`has_side_effects=True` is the invariant: LLVM keeps every instance where it is written (no CSE, no
hoisting out of loops, no sinking past the work it brackets), which is what makes a timer read or a
record store land where the region's boundary is (tests/unit/ikp_cute/test_device_compile.py counts records per site).
Also here: where the tracer is emitting (the current MLIR block, the kernel's entry), and PTX text with
named operands.
"""

from __future__ import annotations


def asm(result_type, operands, text: str, constraints: str):
    """One inline PTX block; `result_type` None for a block without results."""
    from cutlass._mlir.dialects import llvm

    return llvm.inline_asm(
        result_type,
        [operand.ir_value() for operand in operands],
        text,
        constraints,
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


def asm_results(result_types, operands, text: str, constraints: str) -> tuple:
    """One inline PTX block with several results (`result_types`: DSL numeric types, e.g. (Int64, Int32))."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import llvm

    struct = llvm.StructType.get_literal([t.mlir_type for t in result_types])
    values = asm(struct, operands, text, constraints)
    return tuple(t(llvm.extractvalue(t.mlir_type, values, ir.DenseI64ArrayAttr.get([i])))
                 for i, t in enumerate(result_types))


def numbered_ptx(text: str, names: list[str]) -> str:
    """Inline PTX written with named operands (`$state`, `$tid`, ...): each `$name` becomes `$i`, its
    position in `names` (no name may be a prefix of another)."""
    for i, name in enumerate(names):
        text = text.replace(f"${name}", f"${i}")
    return text


def current_block():
    """The MLIR block the tracer is emitting into (a region's control-flow level)."""
    from cutlass._mlir import ir

    return ir.InsertionPoint.current.block


def kernel_op():
    """The `cuda.kernel` op being traced (None outside a kernel body)."""
    from cutlass._mlir import ir

    try:
        op = ir.InsertionPoint.current.block.owner
    except ValueError:  # no insertion point: not inside a kernel being traced
        return None
    while op is not None:
        if op.operation.name == "cuda.kernel":
            return op.operation
        op = op.operation.parent
    return None


def same_op(a, b) -> bool:
    """The same MLIR operation (None only equals None; the bindings refuse `op == None`)."""
    return a is b or (a is not None and b is not None and a == b)


def at_kernel_entry():
    """Context: emit at the beginning of the traced kernel's entry block (code placed there dominates every
    use and runs before anything else in the kernel); a null context outside a kernel."""
    import contextlib

    from cutlass._mlir import ir

    kernel = kernel_op()
    if kernel is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(ir.InsertionPoint.at_block_begin(kernel.regions[0].blocks[0]))
    stack.enter_context(ir.Location.unknown())
    return stack

