"""Shared memory of a compiled CuTe DSL kernel, as the GPU will be asked for it: the static part (the PTX's
``.shared`` declarations, the cubin's ``.nv.shared.<kernel>`` sections) and the dynamic part the launch
requests.

Where CuTe DSL 4.8.1 keeps each (read from its compile output on a CPU, sm_90a):
* ``cute.arch.alloc_smem`` becomes a static ``.shared .align A .b8 __static_shmem__N[bytes]`` of the kernel;
* ``SmemAllocator`` allocations (``cute.memref.alloca`` in shared memory) become offsets into the one
  ``.extern .shared __dynamic_shmem__0[]``; the launch's dynamic size is ``cute.kernel_smem_size`` (unless the
  launch gives ``smem=``), which the DSL's ``InferKernelSmemUsagePass`` folds into a constant: the sum of
  every such allocation of the kernel, in partitions (partition 0, then the allocator's partition 1 at a
  1,024-byte boundary). The constant lands in the host function of the compiled object's ``ir_module``: the
  ``i64`` field 2 of the ``cudaLaunchConfig_t`` passed to ``_cudaLaunchKernelEx`` (or the ``i64`` argument of
  ``_cudaLaunchKernel``).
The GPU's limit is on their sum (sm_90a: 232,448 bytes per block, ``SMEM_LIMIT_SM90``; ``block_bytes``). On sm_90
the cubin's section also holds the 1 KiB the system reserves per block, and is padded to the alignment of the
dynamic buffer that follows it (FA4's and quack's: 1,024 bytes).
"""

from __future__ import annotations

import re
import struct

SMEM_LIMIT_SM90 = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on H100 / H200 (227 KiB)
SM90_SYSTEM_RESERVE = 1024  # the 1 KiB per block the system reserves on sm_90, inside the cubin's section

_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([\w$.]+)")
_STATIC = re.compile(r"^\s*(?!\.extern)\.shared\s+(?:\.align\s+\d+\s+)?\.(?:b|u|s|f)(\d+)\s+[\w$.]+\[(\d+)\]")
_LAUNCH_CONFIG = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def ptx_static(ptx: str) -> dict[str, int]:
    """{kernel: bytes of its static ``.shared`` declarations} (declarations before any entry: key "")."""
    out: dict[str, int] = {}
    kernel = ""
    for line in ptx.splitlines():
        entry = _ENTRY.match(line)
        if entry:
            kernel = entry.group(1)
        found = _STATIC.match(line)
        if found:
            out[kernel] = out.get(kernel, 0) + int(found.group(1)) // 8 * int(found.group(2))
    return out


def ptx_static_declarations(ptx: str) -> list[str]:
    """The static ``.shared`` declaration lines of a PTX text (stripped)."""
    return [line.strip() for line in ptx.splitlines() if _STATIC.match(line)]


def cubin_static(cubin: bytes) -> dict[str, int]:
    """{kernel: size of its ``.nv.shared.<kernel>`` section}: the static shared memory ptxas gave it (a 64-bit
    little-endian ELF, as every cubin is)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("cubin_static: not a 64-bit ELF")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name_offset, _type, _flags, _addr, _offset, size, *_ in headers:
        end = cubin.index(b"\0", names_at + name_offset)
        name = cubin[names_at + name_offset : end].decode()
        if name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            out[name[len(".nv.shared."):]] = int(size)
    return out


def block_bytes(compiled) -> int:
    """The shared memory one block of a compiled single-kernel object takes, as SMEM_LIMIT_SM90 counts it: the
    launch's dynamic size plus the cubin's static section (padded to the dynamic buffer's alignment) less the
    system's reserve."""
    (dynamic,) = launch_dynamic(compiled)
    (section,) = cubin_static(compiled.__cubin__).values()
    return dynamic + section - SM90_SYSTEM_RESERVE


def launch_dynamic(compiled) -> list[int]:
    """The dynamic shared memory each kernel launch of a compiled object requests, in program order: the
    constants its host code passes to the CUDA launch (module docstring). Raises ValueError naming what is
    not a constant."""
    from cutlass._mlir import ir

    from ikp_cute.pipelines.sites import walk

    module = compiled.ir_module
    found = []
    with module.context:
        for op in walk(module.operation):
            if op.name == "llvm.store" and _is_config_smem(op.operands[1]):
                found.append(_constant(op.operands[0], "the launch config's shared-memory field"))
            elif op.name == "llvm.call" and "callee" in op.attributes:
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee == "_cudaLaunchKernel":
                    found.append(_constant(op.operands[8], "_cudaLaunchKernel's shared-memory argument"))
    return found


def _owner(value):
    owner = value.owner
    return getattr(owner, "operation", owner)


def _is_config_smem(address) -> bool:
    from cutlass._mlir import ir

    gep = _owner(address)
    if getattr(gep, "name", "") != "llvm.getelementptr" or len(gep.operands) != 1:
        return False
    indices = list(ir.DenseI32ArrayAttr(gep.attributes["rawConstantIndices"]))
    return indices == [0, 2] and str(gep.attributes["elem_type"]) == _LAUNCH_CONFIG


def _constant(value, what: str) -> int:
    from cutlass._mlir import ir

    op = _owner(value)
    if getattr(op, "name", "") != "llvm.mlir.constant":
        raise ValueError(f"launch_dynamic: {what} is not a constant ({getattr(op, 'name', op)})")
    return int(ir.IntegerAttr(op.attributes["value"]).value)
