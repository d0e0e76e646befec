"""SASS of compiled CuTe DSL kernels: instruction counts and the compile options that keep artifacts.

Disassembly and nvdisasm discovery are host_decode.hardware.sass's (one implementation for pc2region and for
these counts). Used by tests/unit/ikp_cute/test_device_compile.py (per-event instruction cost, enforced in CI without
a GPU) and benchmarks/device_overhead.py.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

from host_decode.hardware import sass as _sass


def nvdisasm_path() -> str | None:
    """nvdisasm (see host_decode.hardware.sass.find_nvdisasm), or None when there is none."""
    return _sass.find_nvdisasm() if _sass.nvdisasm_available() else None


def disassemble(cubin: bytes) -> list[str]:
    """Instructions of every function in `cubin`, in address order, trailing padding removed."""
    instructions = []
    for fn in _sass.parse_listing(_sass.disassemble(cubin)):
        instructions += [ins.text for ins in _strip_padding(fn.instructions)]
    return instructions


def _strip_padding(instructions):
    # Functions end with `EXIT; BRA self; NOP...`: the self-branch and NOPs after the last EXIT never run.
    last_exit = max((i for i, ins in enumerate(instructions) if ins.base == "EXIT"), default=None)
    return instructions if last_exit is None else instructions[: last_exit + 1]


def count(cubin: bytes, opcode: str | None = None) -> int:
    """Number of instructions (optionally only those whose opcode starts with `opcode`)."""
    instructions = disassemble(cubin)
    if opcode is None:
        return len(instructions)
    return sum(1 for ins in instructions if opcode(ins).startswith(opcode))


def opcode(instruction: str) -> str:
    """The opcode of an instruction line, predicate guard removed (`@P0 STG.E.64 ...` -> `STG.E.64`)."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


_DUMP_DIR: str | None = None


def dump_options(options: str = "") -> str:
    """cute.compile `options` with the DSL's dump folder set to one private temp folder of this process: the
    files --keep-ptx / --keep-cubin write beside compiled.__ptx__ / __cubin__ land there, never in the
    working directory (the DSL's default)."""
    global _DUMP_DIR
    if _DUMP_DIR is None:
        _DUMP_DIR = tempfile.mkdtemp(prefix="ikp_cute_dump_")
        atexit.register(shutil.rmtree, _DUMP_DIR, True)  # the folder goes with the process
    return f"{options} --dump-dir={_DUMP_DIR}".strip()


def keep_options(extra: str = "") -> str:
    """cute.compile options that keep PTX and cubin in memory (compiled.__ptx__ / __cubin__), their files in
    the private dump folder (dump_options)."""
    return dump_options(f"--keep-ptx --keep-cubin {extra}".strip())
