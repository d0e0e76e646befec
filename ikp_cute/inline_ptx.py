"""Inline PTX with side effects: the one way every ikp_cute recorder emits its hand-written PTX.

`has_side_effects=True` is the invariant: LLVM keeps every instance where it is written (no CSE, no
hoisting out of loops, no sinking past the work it brackets), which is what makes a timer read or a
record store land where the region's boundary is (tests/test_device_compile.py counts records per site).
"""

from __future__ import annotations

from cutlass import Int64


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


def asm_pair(operands, text: str, constraints: str) -> tuple:
    """One inline PTX block with two 64-bit results."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import llvm

    i64 = Int64.mlir_type
    pair = asm(llvm.StructType.get_literal([i64, i64]), operands, text, constraints)
    return tuple(Int64(llvm.extractvalue(i64, pair, ir.DenseI64ArrayAttr.get([i]))) for i in (0, 1))
