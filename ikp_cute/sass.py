"""SASS inspection of compiled cubins with nvdisasm (from the nvidia-cuda-nvdisasm wheel or CUDA_HOME).

Used by tests/test_device_compile.py (per-event instruction cost, enforced in CI without a GPU) and
benchmarks/device_overhead.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def nvdisasm_path() -> str | None:
    """nvdisasm from the pip wheel (nvidia/cu13/bin or cu12), $CUDA_HOME/bin, or PATH; None if absent."""
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_nvdisasm"):
                candidate = Path(root, sub, "bin", "nvdisasm")
                if candidate.is_file():
                    return str(candidate)
    except ImportError:
        pass
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and Path(cuda_home, "bin", "nvdisasm").is_file():
        return str(Path(cuda_home, "bin", "nvdisasm"))
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes) -> list[str]:
    """Instructions of every function in `cubin`, in address order, trailing NOP padding removed."""
    tool = nvdisasm_path()
    if tool is None:
        raise FileNotFoundError("nvdisasm not found: pip install nvidia-cuda-nvdisasm, or set CUDA_HOME")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, check=True).stdout
    instructions = [m.group(2) for line in out.splitlines() if (m := _INSTRUCTION.match(line))]
    return _strip_padding(instructions)


def _strip_padding(instructions: list[str]) -> list[str]:
    # Functions end with `EXIT; BRA self; NOP...`: the self-branch and NOPs after the last EXIT never run.
    last_exit = max((i for i, ins in enumerate(instructions) if ins.split()[-1:] == ["EXIT"] or ins.endswith("EXIT")), default=None)
    return instructions if last_exit is None else instructions[: last_exit + 1]


def count(cubin: bytes, opcode: str | None = None) -> int:
    """Number of instructions (optionally only those whose opcode starts with `opcode`)."""
    instructions = disassemble(cubin)
    if opcode is None:
        return len(instructions)
    return sum(1 for ins in instructions if _opcode(ins).startswith(opcode))


def _opcode(instruction: str) -> str:
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


_DUMP_DIR: str | None = None


def keep_options(extra: str = "") -> str:
    """cute.compile options that keep PTX and cubin in memory (compiled.__ptx__ / __cubin__) and send the
    files the DSL writes alongside into one private temp folder instead of the working directory."""
    global _DUMP_DIR
    if _DUMP_DIR is None:
        _DUMP_DIR = tempfile.mkdtemp(prefix="ikp_cute_dump_")
    return f"--keep-ptx --keep-cubin --dump-dir={_DUMP_DIR} {extra}".strip()
