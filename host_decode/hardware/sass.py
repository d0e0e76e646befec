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

Operand semantics (second half): which registers an instruction may write (``may_defs``: widths from
the opcode's modifiers, MMA accumulator ranges from the shape) and read (``uses``, widths per operand
from ``source_width``), which instructions read %globaltimer (``reads_timer``), when it may not take
effect (``conditional``), and when the next PC is not its successor (``ends_flow``). Guarded by
tests/unit/host_decode/hardware/test_pc2region.py (test_mma_accumulator_width, test_source_operand_widths,
test_sm120_cs2ur_timer_reads_are_markers, the hand-written listings and the real cubins).
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


def disassemble(cubin: bytes, nvdisasm: str | None = None, timeout_s: float = 120.0, source: str | None = None) -> str:
    """Text listing (code sections, line info) of a cubin. `source`: the user's file, named by errors
    (nvdisasm reads a temporary copy; its messages are rewritten to name `source`)."""
    source = source or "cubin"
    if not isinstance(cubin, (bytes, bytearray, memoryview)) or len(cubin) < 4:
        raise DecodeError("not a cubin: expected bytes", source=source)
    if bytes(cubin[:4]) != b"\x7fELF":
        raise DecodeError("not a cubin: no ELF magic in the first 4 bytes", source=source)
    tool = nvdisasm or find_nvdisasm()
    with tempfile.TemporaryDirectory(prefix="ikp_sass_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(bytes(cubin))
        proc = subprocess.run([tool, "-c", "-g", path], check=False, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        message = proc.stderr.replace(path, source).strip()[:500]
        raise DecodeError(f"nvdisasm failed (exit {proc.returncode}): {message}", source=source)
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
# a jump table's targets, printed after a BRX: (*"BRANCH_TARGETS .L_x_29,.L_x_30,.L_x_31"*)
_BRANCH_TARGETS_RE = re.compile(r'\(\*"BRANCH_TARGETS\s+([^"]*)"\*\)')


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
    m = _BRANCH_TARGETS_RE.search(body)
    if m:
        targets.append(m.group(1))
        body = (body[: m.start()] + body[m.end() :]).strip()
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


def select_function(functions: list[Function], kernel: str | None, source: str | None = None) -> Function:
    """The function named `kernel` (exact, else unique substring match); with None, the only one."""
    source = source or "cubin"
    if not functions:
        raise DecodeError("the cubin has no code sections", source=source)
    if kernel is None:
        if len(functions) == 1:
            return functions[0]
        raise DecodeError(
            "the cubin has several kernels; choose one with --kernel (kernel= in Python): "
            + ", ".join(f.name for f in functions),
            source=source,
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
        source=source,
    )


# ================================================================================================
# Register operands and which instructions define what
# ================================================================================================

_REG_RE = re.compile(r"^(U?R)(\d+|Z)$")
TIMER_SR_RE = re.compile(r"SR_GLOBALTIMER")
# the ways ptxas reads %globaltimer: S2R / S2UR (one register), CS2R / CS2UR (a pair, or one with .32;
# sm_120 reads it into a uniform register with CS2UR.32)
TIMER_READ_OPS = ("S2R", "S2UR", "CS2R", "CS2UR")
STORE_OPS = {"STG", "ST", "STS", "STAS"}
NO_DEST_OPS = STORE_OPS | {
    "STL",
    "RED",
    "REDG",
    "REDAS",
    "BRA",
    "BRX",
    "JMP",
    "JMX",
    "CALL",
    "RET",
    "EXIT",
    "BAR",
    "BSYNC",
    "BSSY",
    "WARPSYNC",
    "NOP",
    "MEMBAR",
    "FENCE",
    "ERRBAR",
    "CCTL",
    "CCTLL",
    "DEPBAR",
    "YIELD",
    "BPT",
    "KILL",
    "UTMALDG",
    "UTMASTG",
    "UTMAPF",
    "UTMACCTL",
    "UBLKCP",
    "UBLKPF",
    "WARPGROUP",
    "LDGDEPBAR",
    "NANOSLEEP",
    "PMTRIG",
    "BREAK",
    "ACQBULK",
    "BMOV",
    "UTMACMDFLUSH",
    "ARRIVES",
    "SYNCS",
    "WARPGROUPSET",
    "CGAERRBAR",
}
MMA_OPS = {"HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "QGMMA", "IGMMA", "BGMMA", "GMMA", "OMMA", "UTCHMMA", "UTCQMMA"}


def reg_name(token: str) -> str | None:
    """'R8' / 'R8.reuse' / '-R8' / '~UR4' / '|R3|' / 'R26.64' -> 'R8' ...; None if not a GPR/uniform reg."""
    t = token.strip().lstrip("-~!|").rstrip("|")
    t = t.split(".", 1)[0]
    m = _REG_RE.match(t)
    if not m or m.group(2) == "Z":
        return None
    return t


def reg_plus(reg: str, k: int) -> str:
    m = _REG_RE.match(reg)
    return f"{m.group(1)}{int(m.group(2)) + k}"


def reg_width(opcode: str) -> int:
    mods = opcode.split(".")[1:]
    for mod, w in (("256", 8), ("128", 4), ("64", 2), ("WIDE", 2)):
        if mod in mods:
            return w
    return 1


_GMMA_SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def mma_dest_registers(opcode: str) -> int:
    """Accumulator registers an MMA writes per thread, from its shape and accumulator type:
    HGMMA.64x128x16.F32 (a warpgroup: 64*128/128 = 64 values) -> 64; HMMA.16816.F32 (a warp) -> 4.
    16-bit accumulators (the type right after the shape) pack two values per register. Unknown
    shapes: 255 (every register)."""
    mods = opcode.split(".")[1:]
    for k, mod in enumerate(mods):
        packed = mods[k + 1 : k + 2] in (["F16"], ["BF16"])  # the accumulator type follows the shape
        m = _GMMA_SHAPE_RE.match(mod)
        if m:  # wgmma: M=64 over 128 threads
            values = int(m.group(1)) * int(m.group(2)) // 128
            return max(1, values // 2 if packed else values)
        if mod.isdigit() and len(mod) in (3, 4, 5):  # mma.sync shapes: 884, 1688, 16816, 16832
            mm, nn = (int(mod[:2]), int(mod[2])) if mod.startswith("16") else (int(mod[0]), int(mod[1]))
            values = mm * nn // 32
            if opcode.startswith("DMMA"):
                return 2 * values
            return max(1, values // 2 if packed else values)
    return 255


def may_defs(ins: Instruction) -> list[str]:
    """Registers an instruction may write (over-approximated: widths from modifiers, MMA ranges)."""
    if ins.base in NO_DEST_OPS or not ins.operands:
        return []
    dest = reg_name(ins.operands[0])
    if dest is None:
        return []
    if ins.base in MMA_OPS:
        width = mma_dest_registers(ins.opcode)
    elif ins.base in ("CS2R", "CS2UR"):
        width = 1 if ".32" in ins.opcode else 2
    else:
        width = reg_width(ins.opcode)
    return [reg_plus(dest, k) for k in range(width)]


INT_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_PRED_RE = re.compile(r"^!?U?P(\d+|T)$")


_SELF_COPY_RE = re.compile(r"^MOV (U?R\d+), \1$")


def looks_unoptimized(fn: Function) -> bool:
    """A debug build (nvcc -G, -Xptxas -O0): it copies registers onto themselves (`MOV R9, R9`), which
    ptxas removes from any optimized build."""
    return any(_SELF_COPY_RE.match(x.text) for x in fn.instructions)


def reads_timer(x: Instruction) -> bool:
    """Whether the instruction reads %globaltimer (a marker's timestamp)."""
    return x.base in TIMER_READ_OPS and any(TIMER_SR_RE.search(o) for o in x.operands)


def mentions_pred(x: Instruction, guard: str) -> bool:
    """Whether `x` names the guard's predicate register in its operands (may write it)."""
    pred = guard.lstrip("!")
    return any(o.lstrip("!") == pred for o in x.operands) or x.base in ("R2P", "UR2UP", "CALL")


def conditional(x: Instruction) -> bool:
    """May the instruction not take effect: a guard (`@P0 BRA`) or, on sm_100-style listings, a
    predicate operand (`BRA.U !UP0, target`)."""
    if x.never:
        return False
    if x.predicated:
        return True
    return x.base in ("BRA", "JMP", "EXIT", "RET", "BRX", "JMX", "CALL") and any(
        is_pred(o) and o.lstrip("!") not in ("PT", "UPT") for o in x.operands
    )


def is_pred(token: str) -> bool:
    return bool(_PRED_RE.match(token.strip()))


def copy_source(x: Instruction) -> str | None:
    ops = x.operands
    if x.base in ("MOV", "R2UR") and len(ops) >= 2:
        return reg_name(ops[1]) if not ops[1].startswith(("-", "~", "|")) else None
    if (
        x.base == "IMAD"
        and x.opcode in ("IMAD.MOV.U32", "IMAD.U32", "IMAD.MOV")
        and len(ops) == 4
        and ops[1] == "RZ"
        and ops[2] == "RZ"
        and not ops[3].startswith(("-", "~", "|"))
    ):
        return reg_name(ops[3])
    return None


SIDE_EFFECT_OPS = NO_DEST_OPS | {
    "ATOM",
    "ATOMG",
    "ATOMS",
    "LDGSTS",
    "UTMALDG",
    "SETMAXREG",
    "USETMAXREG",
    "VOTE",
    "VOTEU",
    "SHFL",
    "MATCH",
    "REDUX",
    "S2R_BAR",
    "ELECT",
    "LDSM",
    "STSM",
}
ALL_REGS = "*"
_REG_TOKEN_RE = re.compile(r"\b(U?R\d+|U?P\d)\b")


def uses(x: Instruction) -> set[str]:
    """Registers and predicates an instruction may read: each register token, plus the registers
    after it where that operand is 64/128-bit wide (source_width); MMA-like ops read 'everything'."""
    if x.base in MMA_OPS:
        return {ALL_REGS}
    first_is_dest = x.base not in NO_DEST_OPS and bool(x.operands)
    out: set[str] = set()
    for k, op in enumerate(x.operands):
        if k == 0 and first_is_dest and "[" not in op:
            continue
        width = source_width(x, k)
        for tok in _REG_TOKEN_RE.findall(op):
            out.add(tok)
            if "R" in tok:
                out.update(reg_plus(tok, w) for w in range(1, width))
    if x.predicated:
        out.add(x.guard.lstrip("!"))
    return out


# type modifiers that make every register source a pair (IADD.64, SEL.64, ISETP.NE.S64, F2F.F32.F64);
# not TRANS64 (SYNCS' transaction count) or RSQ64H (MUFU reads the high word only)
_PAIR_TYPES = {"64", "B64", "F64", "S64", "U64"}
_DOUBLE_OPS = {"DADD", "DFMA", "DMUL", "DSETP", "DSET", "DMNMX"}
_FUNNEL_OPS = {"SHF", "USHF"}  # SHF.L.U64.HI R5, R2, 0x2, R3: two 32-bit halves, each named


def source_width(x: Instruction, k: int) -> int:
    """Registers read by the register tokens of operand k (a source). An address is 64-bit where it
    says so ([R4.64], desc[UR4]); IMAD.WIDE multiplies two 32-bit sources and adds a 64-bit one (the
    last, before any carry-in predicate); a store's data is as wide as the opcode; otherwise the
    opcode's type modifiers decide for every source. Over-approximated where unsure: a missed read
    would let cfg liveness accept a branch as a capacity guard when a register it skips is live."""
    op = x.operands[k]
    mods = x.opcode.split(".")[1:]
    if "[" in op:
        return 2 if ".64" in op or "desc[" in op else 1
    if x.base in STORE_OPS and k == len(x.operands) - 1:
        return reg_width(x.opcode)
    if x.base in ("IMAD", "UIMAD") and "WIDE" in mods:
        sources = [j for j, o in enumerate(x.operands) if j > 0 and not is_pred(o)]
        return 2 if sources and k == sources[-1] else 1
    if x.base in _FUNNEL_OPS:
        return 1
    if "128" in mods or ".128" in op:
        return 4
    if x.base in _DOUBLE_OPS or _PAIR_TYPES & set(mods) or "WIDE" in mods or ".64" in op:
        return 2
    return 1


def writes(x: Instruction) -> list[str]:
    """Registers / predicates written: the GPR destinations plus leading predicate destinations."""
    out = list(may_defs(x))
    if x.base in NO_DEST_OPS or not x.operands:
        return out
    for k, op in enumerate(x.operands[:3]):
        if is_pred(op) and not op.startswith("!") and op not in ("PT", "UPT") and (k == 0 or out):
            out.append(op)
        elif k > 0:
            break
    return out



def ends_flow(x: Instruction) -> bool:
    return x.base in ("EXIT", "BRA", "RET", "BRX", "JMX", "JMP", "KILL") and not conditional(x) and not x.never
