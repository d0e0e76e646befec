"""SASS listings: find and run nvdisasm, parse its text listing into per-function instruction tables.

What the parser keeps per instruction: the function-relative PC (the byte offset in the kernel's
``.text.<kernel>`` section, which is what Nsight Compute and CUPTI report after rebasing), the full
opcode (``STG.E.64``), the guard predicate (``P0``, ``!P0``, ``PT``), the operand strings, branch / call
targets (nvdisasm prints them as ``\\`(label)``), and the source line from ``-g`` line info.

Why the text listing and not ``-json``: the text form carries labels of branch and call targets (CALL
into a subroutine placed after EXIT names the subroutine) and the ``//## File`` line comments in one
pass; it has been stable across CUDA 12 and 13.

A subroutine (``$kernel$helper``) is emitted inside the kernel's section, so one ``Function`` holds the
kernel and its subroutines; ``Function.symbols`` maps each symbol to its PC.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from host_decode.core.errors import DecodeError

# --- finding nvdisasm -------------------------------------------------------------------------------


def find_nvdisasm() -> str:
    """Path of nvdisasm: $IKP_NVDISASM, the `nvidia-cuda-nvdisasm` wheel, PATH, then /usr/local/cuda/bin."""
    env = os.environ.get("IKP_NVDISASM")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise FileNotFoundError(f"IKP_NVDISASM={env} is not an executable file")
    for path in _wheel_candidates():
        if os.access(path, os.X_OK):
            return path
    on_path = shutil.which("nvdisasm")
    if on_path:
        return on_path
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "nvdisasm"), os.X_OK):
            return os.path.join(root, "bin", "nvdisasm")
    raise FileNotFoundError(
        "nvdisasm not found: pip install nvidia-cuda-nvdisasm, put a CUDA toolkit's bin/ on PATH, or set IKP_NVDISASM"
    )


def nvdisasm_available() -> bool:
    try:
        find_nvdisasm()
        return True
    except FileNotFoundError:
        return False


def _wheel_candidates() -> list[str]:
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError:
        return []
    found: list[str] = []
    for base in list(getattr(nvidia, "__path__", [])):
        # cu13 wheels put it in nvidia/cu13/bin, older ones in nvidia/cuda_nvdisasm/bin; newest CUDA first
        found += sorted(glob.glob(os.path.join(base, "*", "bin", "nvdisasm")), reverse=True)
    return found


def disassemble(cubin: bytes, nvdisasm: str | None = None, timeout_s: float = 120.0) -> str:
    """Text listing (code sections, line info) of a cubin."""
    if not isinstance(cubin, (bytes, bytearray, memoryview)) or len(cubin) < 4:
        raise DecodeError("not a cubin: expected bytes", source="cubin")
    if bytes(cubin[:4]) != b"\x7fELF":
        raise DecodeError("not a cubin: no ELF magic in the first 4 bytes", source="cubin")
    tool = nvdisasm or find_nvdisasm()
    with tempfile.TemporaryDirectory(prefix="ikp_sass_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(bytes(cubin))
        proc = subprocess.run([tool, "-c", "-g", path], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise DecodeError(f"nvdisasm failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}", source="cubin")
    return proc.stdout


def cubin_sha256(cubin: bytes) -> str:
    return hashlib.sha256(bytes(cubin)).hexdigest()


# --- the parsed listing ------------------------------------------------------------------------------


@dataclasses.dataclass
class Instruction:
    pc: int  # byte offset in the function's section
    opcode: str  # full opcode with modifiers: "STG.E.64"
    guard: str  # "" (always), "P0", "!P0", "PT", "!UP1" ...
    operands: list[str]
    targets: list[str]  # labels / symbols named in backquotes (branch, call, ret targets)
    file: str | None
    line: int | None
    text: str  # the instruction as printed, without PC and trailing ';'

    @property
    def base(self) -> str:
        """Opcode without modifiers: "STG"."""
        return self.opcode.split(".", 1)[0]

    @property
    def predicated(self) -> bool:
        """True when the guard may be false at run time (@PT counts as unpredicated)."""
        return self.guard not in ("", "PT")

    @property
    def never(self) -> bool:
        return self.guard in ("!PT", "!UPT")


@dataclasses.dataclass
class Function:
    name: str  # kernel symbol (the section's function)
    instructions: list[Instruction]
    labels: dict[str, int]  # label or symbol -> pc
    symbols: dict[str, int]  # function symbols in this section (kernel + subroutines) -> pc

    def index_of_pc(self) -> dict[int, int]:
        return {ins.pc: i for i, ins in enumerate(self.instructions)}

    @property
    def code_size(self) -> int:
        return self.instructions[-1].pc + 16 if self.instructions else 0


_SECTION_RE = re.compile(r"^//-+\s+\.text\.(\S+)\s+-+")
_OTHER_SECTION_RE = re.compile(r"^//-+\s+(\S+)\s+-+")
_INS_RE = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_LABEL_RE = re.compile(r"^\s*([A-Za-z_.$][\w.$@]*):\s*$")
_LINE_RE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_TYPE_FUNC_RE = re.compile(r"^\s*\.type\s+(\S+),@function")
_GUARD_RE = re.compile(r"^@(!?U?P(?:\d+|T))\s+")
_TARGET_RE = re.compile(r"`\(([^)]*)\)")


def parse_listing(text: str) -> list[Function]:
    """Parse `nvdisasm -c -g` output into one Function per .text section."""
    functions: list[Function] = []
    current: Function | None = None
    pending_labels: list[str] = []
    pending_symbols: set[str] = set()
    file = line = None
    for raw in text.splitlines():
        m = _SECTION_RE.match(raw)
        if m:
            current = Function(m.group(1), [], {}, {})
            functions.append(current)
            pending_labels, pending_symbols, file, line = [], set(), None, None
            continue
        if _OTHER_SECTION_RE.match(raw):
            current = None
            continue
        if current is None:
            continue
        m = _LINE_RE.match(raw)
        if m:
            file, line = m.group(1), int(m.group(2))
            continue
        m = _TYPE_FUNC_RE.match(raw)
        if m:
            pending_symbols.add(m.group(1))
            continue
        m = _LABEL_RE.match(raw)
        if m:
            pending_labels.append(m.group(1))
            continue
        m = _INS_RE.match(raw)
        if m:
            ins = _parse_instruction(int(m.group(1), 16), m.group(2), file, line)
            for label in pending_labels:
                current.labels[label] = ins.pc
                if label in pending_symbols or label == current.name:
                    current.symbols[label] = ins.pc
            pending_labels = []
            current.instructions.append(ins)
    for fn in functions:
        fn.symbols.setdefault(fn.name, 0)
        _check_pcs(fn)
    return functions


def _parse_instruction(pc: int, body: str, file: str | None, line: int | None) -> Instruction:
    guard = ""
    m = _GUARD_RE.match(body)
    if m:
        guard = m.group(1)
        body = body[m.end() :]
    targets = _TARGET_RE.findall(body)
    body_no_targets = _TARGET_RE.sub("", body).strip()
    parts = body_no_targets.split(None, 1)
    opcode = parts[0] if parts else ""
    operands = _split_operands(parts[1]) if len(parts) > 1 else []
    return Instruction(
        pc,
        opcode,
        guard,
        operands,
        [t.strip() for t in ",".join(targets).split(",") if t.strip()],
        file,
        line,
        body.strip(),
    )


def _split_operands(s: str) -> list[str]:
    """Split on commas outside brackets: 'desc[UR4][R6.64], R8' -> ['desc[UR4][R6.64]', 'R8']."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def _check_pcs(fn: Function) -> None:
    pcs = [ins.pc for ins in fn.instructions]
    if pcs and pcs != sorted(set(pcs)):
        raise DecodeError(f"nvdisasm listing of {fn.name}: PCs are not strictly increasing", source="sass")


def select_function(functions: list[Function], kernel: str | None) -> Function:
    """The function named `kernel` (exact, else unique substring match); with None, the only one."""
    if not functions:
        raise DecodeError("the cubin has no code sections", source="cubin")
    if kernel is None:
        if len(functions) == 1:
            return functions[0]
        raise DecodeError(
            "the cubin has several kernels; choose one with kernel=...: " + ", ".join(f.name for f in functions),
            source="cubin",
        )
    exact = [f for f in functions if f.name == kernel]
    if exact:
        return exact[0]
    partial = [f for f in functions if kernel in f.name]
    if len(partial) == 1:
        return partial[0]
    raise DecodeError(
        f"kernel {kernel!r} {'is ambiguous' if partial else 'not found'}; kernels: "
        + ", ".join(f.name for f in functions),
        source="cubin",
    )
