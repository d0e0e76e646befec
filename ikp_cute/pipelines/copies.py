"""Two copies of a kernel traced into a pool: the kernel's own code for a launch that does not record, the
traced code for one that does (record_pool.py: the decision both hang on).

After the kernel's body is traced (the IR pass, at the DSL's trace-finalize hook), its entry block is

    [decision ops (record_pool.PoolKernelState.create)] [split op: closed = ...] [setup + body ...] return

and becomes

    [decision ops] [split op] [shared-memory allocations] scf.if closed { body copy, every op of ours removed }
    else { setup + body; epilogue } return

Both copies use ONE set of shared-memory allocations: every allocation op of the body (``cute.memref.alloca``
in shared memory: the SmemAllocator's buffers; ``cute.arch.alloc_smem``) is moved above the split, so that the
clone refers to the same values instead of duplicating them. CuTe DSL sizes shared memory per allocation op,
not per live range: the launch's dynamic size is the sum of the kernel's ``cute.memref.alloca``s (its
``InferKernelSmemUsagePass``) and each ``alloc_smem`` is a static ``.shared`` array of its own
(ikp_cute/testing/smem.py: where each is kept), so a cloned allocation would double what the launch asks for
(FA4's sm90 forward would ask for 329,728 bytes of dynamic shared memory, over the GPU's 232,448). An allocation
is moved with its relative order kept (the allocator lays buffers out in program order: the closed copy's
offsets are the untouched kernel's); one nested in a loop or a branch moves to the top level too (allocation is
static: one buffer per op wherever it sits); one that takes operands is refused, by name (the DSL's take none).

The closed copy is a clone of the traced one (MLIR clones a region with its values remapped) from which
every operation of ours is erased: each inline-PTX block marked ``/* ikp`` (records, timer reads, setup),
and every op that uses one of their results (the blocked-only checks: compares and the ``scf.if`` around
their stores). Values of ours that the kernel itself used would make that impossible; none exists (a hooked
call's result is the kernel's; our values only feed our records), and ``strip`` refuses, naming the op,
rather than remove anything else. What the records' operands computed (event ids, ``%tid.x`` reads) is left
for the compiler's dead-code elimination, so the closed copy compiles to the kernel's own instructions.

Then the kernel settles its pool id (``settle_kernel_id``): a kernel of the same code traced into the pool before
lends it its id, so that a re-trace is the same module (the DSL's JIT cache serves it) and counts its launches
under that id.

The closed copy is the ``then`` block, laid out first, on the fall-through path (FA4 with a capture window:
+1.15% against +1.34% the other way round, H200, docs/capture.md).

Invariants a change could break (tests/unit/ikp_cute/test_pool_compile.py):
* the closed copy holds nothing of ours (test_the_closed_copy_is_the_untouched_kernel);
* the traced kernel asks for the untouched kernel's shared memory plus the pool state's, not twice it
  (test_shared_memory_is_not_doubled, test_fa4_and_quack_shared_memory_fits_sm90);
* a kernel op that uses a value of ours is refused, not erased (test_strip_erases_only_what_is_ours);
* a re-trace of a kernel is the same module, under one id (test_a_retrace_is_the_same_module,
  test_renumbering_a_kernel_id_is_exact).
"""

from __future__ import annotations

import re

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
    allocations = shared_allocations(kernel, body)
    with ir.InsertionPoint(terminator), ir.Location.unknown():
        choice = scf.IfOp(_value(closed), [], has_else=True)
        with ir.InsertionPoint(choice.then_block):
            plain_end = scf.YieldOp([])
        with ir.InsertionPoint(choice.else_block):
            traced_end = scf.YieldOp([])
    for op in allocations:  # above the split: one buffer for both copies
        op.move_before(choice.operation)
    for op in body:
        if not any(op == moved for moved in allocations):
            op.move_before(traced_end.operation)
    clone = choice.operation.clone(ip=ir.InsertionPoint(terminator))
    for op in [op.operation for op in clone.regions[1].blocks[0].operations][:-1]:
        op.move_before(plain_end.operation)
    clone.erase()
    strip(choice.then_block)
    with ir.InsertionPoint(traced_end.operation), ir.Location.unknown():
        epilogue()


def settle_kernel_id(kernel, pool, geometry, kernel_id: int) -> int:
    """After the split: `kernel` takes the id of a kernel of the same code traced before into `pool`, if any
    (Pool.same_kernel; the fingerprint is the kernel's text, locations included, with its own blocks written
    as kernel 0's), so that a re-trace of one kernel is the same module (the DSL's JIT cache serves it) and
    counts its launches under one id. Returns the id its blocks now name."""
    import hashlib

    from cutlass._mlir import ir

    from .record_pool import renumber
    from .sites import walk

    ours = [op for op in walk(kernel) if is_ours(op)]

    def name(old: int, new: int) -> None:
        for op in ours:
            text = ir.StringAttr(op.attributes["asm_string"]).value
            op.attributes["asm_string"] = ir.StringAttr.get(renumber(text, geometry, old, new))

    name(kernel_id, 0)
    key = hashlib.sha256(kernel.get_asm(enable_debug_info=True, binary=True)).hexdigest()
    final = pool.same_kernel(kernel_id, key)
    name(0, final)
    return final


_SMEM_RESULT = re.compile(r"^!cute\.(?:memref|ptr)<[^,<>]+, smem\b")
_ALLOCATIONS = ("cute.memref.alloca", "cute_nvgpu.arch.alloc_smem")


def is_shared_allocation(op) -> bool:
    """An op that allocates shared memory (the module docstring: each one is sized on its own)."""
    return (op.name in _ALLOCATIONS and len(op.results) == 1 and not op.regions
            and bool(_SMEM_RESULT.match(str(op.results[0].type))))


def shared_allocations(kernel, body: list) -> list:
    """The shared-memory allocations in `body` (the top-level ops after the split, nested regions included), in
    program order. The DSL's allocations take no operands (their sizes are static); one that does is refused,
    by name (it might use a value the body computes)."""
    from .sites import walk

    found = [op for top in body for op in walk(top) if is_shared_allocation(op)]
    for op in found:
        if len(op.operands):
            from .emit import kernel_name

            raise RuntimeError(
                f"trace_pipelines(pool): kernel {kernel_name(kernel)}: the shared-memory allocation {op.name} "
                f"({op.location}) takes operands; a pool trace moves every allocation above its two copies so that "
                "they share it. Trace it into a Session instead, or leave it out with kernels=")
    return found


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
