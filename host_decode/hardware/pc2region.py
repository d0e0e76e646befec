"""pc2region: map every SASS PC of an instrumented kernel to the region path it executes in.

How (facts in docs/pc2region.md):

1. Disassemble (host_decode.hardware.sass) and find the markers: a 64-bit store (STG/ST/STS .64/.128) of a
   register pair in which one register derives from a ``%globaltimer`` read (``S2UR``/``CS2R``/``S2R``
   of ``SR_GLOBALTIMER*``) and the other holds the tag ``(lane << 12) | (event_id << 2) | type``.
2. Recover each tag's low 12 bits with a known-bits data-flow evaluation over reaching definitions:
   the lane is a runtime value shifted by 12 (its low 12 bits are known zeros) and ptxas materializes
   the constant part with MOV / IMAD.MOV / IADD3 / VIADD / LEA / LOP3 / HFMA2.MMA (two fp16 halves).
   Unknown bits are resolved from a trace-time marker table when one is given, then from other markers
   on the same source line (unrolled copies), else the marker is reported unresolved.
3. Propagate a region stack over the control-flow graph to a fixed point: BEGIN pushes, END pops
   (the innermost open region of that id, so overlapping async regions do not mis-nest), reserved
   instants and FINALIZE change nothing. Predicated branches fall through and jump, EXIT / RET end,
   CALL enters the subroutine with a return address (states carry a call stack, so a helper called
   from two regions is seen in both and correctly returns to each caller), indirect branches go to
   every label of the function. The timer reads bounding a region belong to it.
4. Per PC: no state reached it -> ``<unreachable>``, one empty stack -> ``<outside>``, one stack ->
   its path (event names joined by "/"), several -> ``<ambiguous>``.

A linear scan between markers is wrong (unrolled loops duplicate markers, subroutines sit after EXIT,
loads move across markers); tests/test_pc2region.py checks maps of real cubins against the known
program structure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from host_decode.hardware import sass

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.hardware.sass import Function, Instruction

MAP_FORMAT = "ikp-pc2region-v1"
OUTSIDE = "<outside>"
AMBIGUOUS = "<ambiguous>"
UNREACHABLE = "<unreachable>"
SPECIAL_PATHS = (OUTSIDE, AMBIGUOUS, UNREACHABLE)

MAX_REGION_DEPTH = 64  # deeper stacks mean BEGINs without ENDs in a loop: stop, report
MAX_CALL_DEPTH = 16  # recursion guard

# ================================================================================================
# Register operands and which instructions define what
# ================================================================================================

_REG_RE = re.compile(r"^(U?R)(\d+|Z)$")
_TIMER_SR_RE = re.compile(r"SR_GLOBALTIMER")
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
_MMA_OPS = {"HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "QGMMA", "IGMMA", "BGMMA", "GMMA", "OMMA", "UTCHMMA", "UTCQMMA"}


def _reg_name(token: str) -> str | None:
    """'R8' / 'R8.reuse' / '-R8' / '~UR4' / '|R3|' / 'R26.64' -> 'R8' ...; None if not a GPR/uniform reg."""
    t = token.strip().lstrip("-~!|").rstrip("|")
    t = t.split(".", 1)[0]
    m = _REG_RE.match(t)
    if not m or m.group(2) == "Z":
        return None
    return t


def _reg_plus(reg: str, k: int) -> str:
    m = _REG_RE.match(reg)
    return f"{m.group(1)}{int(m.group(2)) + k}"


def _width(opcode: str) -> int:
    mods = opcode.split(".")[1:]
    for mod, w in (("256", 8), ("128", 4), ("64", 2), ("WIDE", 2)):
        if mod in mods:
            return w
    return 1


_GMMA_SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def _mma_dest_registers(opcode: str) -> int:
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
    dest = _reg_name(ins.operands[0])
    if dest is None:
        return []
    if ins.base in _MMA_OPS:
        width = _mma_dest_registers(ins.opcode)
    elif ins.base == "CS2R":
        width = 1 if ".32" in ins.opcode else 2
    else:
        width = _width(ins.opcode)
    return [_reg_plus(dest, k) for k in range(width)]


# ================================================================================================
# Known-bits values: (mask, value, timer_reads) -- `mask` marks the bits known, `timer_reads` the
# indices of the %globaltimer reads the value derives from (empty: not timer data).
# ================================================================================================

FULL = 0xFFFF_FFFF


@dataclasses.dataclass(frozen=True)
class Bits:
    mask: int
    value: int
    timer: frozenset = frozenset()

    @staticmethod
    def const(c: int) -> Bits:
        return Bits(FULL, c & FULL)

    @staticmethod
    def top(timer: Iterable[int] = ()) -> Bits:
        return Bits(0, 0, frozenset(timer))

    def low_known(self) -> int:
        """Number of consecutive known bits from bit 0."""
        inv = ~self.mask & FULL
        return 32 if inv == 0 else (inv & -inv).bit_length() - 1

    @property
    def is_const(self) -> bool:
        return self.mask == FULL


def _meet(a: Bits, b: Bits) -> Bits:
    mask = a.mask & b.mask & ~(a.value ^ b.value) & FULL
    return Bits(mask, a.value & mask, a.timer | b.timer)


def _add(*xs: Bits) -> Bits:
    k = min(x.low_known() for x in xs)
    m = (1 << k) - 1
    return Bits(m, sum(x.value for x in xs) & m, frozenset().union(*(x.timer for x in xs)))


def _neg(x: Bits) -> Bits:
    m = (1 << x.low_known()) - 1
    return Bits(m, (-x.value) & m, x.timer)


def _not(x: Bits) -> Bits:
    return Bits(x.mask, ~x.value & x.mask, x.timer)


def _shl(x: Bits, s: int) -> Bits:
    s &= 31
    return Bits(((x.mask << s) | ((1 << s) - 1)) & FULL, (x.value << s) & FULL, x.timer)


def _shr(x: Bits, s: int) -> Bits:
    s &= 31
    high = FULL ^ (FULL >> s)
    return Bits((x.mask >> s) | high, x.value >> s, x.timer)


def _mul(a: Bits, b: Bits) -> Bits:
    for x, y in ((a, b), (b, a)):
        if y.is_const and y.value and y.value & (y.value - 1) == 0:
            return _shl(x, y.value.bit_length() - 1)
        if y.is_const and y.value == 0:
            return Bits(FULL, 0, x.timer)
    k = min(a.low_known(), b.low_known())
    m = (1 << k) - 1
    return Bits(m, (a.value * b.value) & m, a.timer | b.timer)


def _lop3(a: Bits, b: Bits, c: Bits, lut: int) -> Bits:
    """Bitwise 3-input LUT: an output bit is known when the LUT agrees over all unknown inputs."""
    mask = value = 0
    for bit in range(32):
        outs = set()
        for va in _bit_options(a, bit):
            for vb in _bit_options(b, bit):
                for vc in _bit_options(c, bit):
                    outs.add((lut >> ((va << 2) | (vb << 1) | vc)) & 1)
        if len(outs) == 1:
            mask |= 1 << bit
            value |= outs.pop() << bit
    return Bits(mask, value, a.timer | b.timer | c.timer)


def _bit_options(x: Bits, bit: int) -> tuple[int, ...]:
    return ((x.value >> bit) & 1,) if (x.mask >> bit) & 1 else (0, 1)


def _fp16_bits(token: str) -> int | None:
    try:
        return int(np.float16(float(token)).view(np.uint16))
    except (ValueError, OverflowError):
        return None


_INT_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_PRED_RE = re.compile(r"^!?U?P(\d+|T)$")


def _mentions_pred(x: Instruction, guard: str) -> bool:
    """Whether `x` names the guard's predicate register in its operands (may write it)."""
    pred = guard.lstrip("!")
    return any(o.lstrip("!") == pred for o in x.operands) or x.base in ("R2P", "UR2UP", "CALL")


def _conditional(x: Instruction) -> bool:
    """May the instruction not take effect: a guard (`@P0 BRA`) or, on sm_100-style listings, a
    predicate operand (`BRA.U !UP0, target`)."""
    if x.never:
        return False
    if x.predicated:
        return True
    return x.base in ("BRA", "JMP", "EXIT", "RET", "BRX", "JMX", "CALL") and any(
        _is_pred(o) and o.lstrip("!") not in ("PT", "UPT") for o in x.operands
    )


def _is_pred(token: str) -> bool:
    return bool(_PRED_RE.match(token.strip()))


# ================================================================================================
# Control flow
# ================================================================================================


@dataclasses.dataclass
class Program:
    """A function's instructions with intra-procedural successor / predecessor lists (by index)."""

    fn: Function
    succ: list[list[int]]  # fall-through and branch edges (CALL -> return site summary edge too)
    pred: list[list[int]]
    call_target: dict[int, int]  # CALL index -> callee entry index
    problems: list[str]
    skips: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)  # see find_skips

    @property
    def instructions(self) -> list[Instruction]:
        return self.fn.instructions


def build_program(fn: Function) -> Program:
    ins = fn.instructions
    index = fn.index_of_pc()
    label_index = {name: index[pc] for name, pc in fn.labels.items() if pc in index}
    all_labels = sorted(set(label_index.values()))
    succ: list[list[int]] = [[] for _ in ins]
    call_target: dict[int, int] = {}
    problems: list[str] = []
    n = len(ins)
    for i, x in enumerate(ins):
        base = x.base
        falls = i + 1 < n and (_conditional(x) or x.never)
        if x.never:
            succ[i] = [i + 1] if i + 1 < n else []
            continue
        if base in ("BRA", "JMP") and x.targets:
            succ[i] = [label_index[t] for t in x.targets if t in label_index] + ([i + 1] if falls else [])
            missing = [t for t in x.targets if t not in label_index]
            if missing:
                problems.append(f"pc {x.pc:#x}: branch target(s) {missing} not in the listing")
            if ".DIV" in x.opcode and i + 1 < n and i + 1 not in succ[i]:
                succ[i].append(i + 1)
        elif base in ("BRX", "JMX", "BRA", "JMP"):  # indirect: every label of the function
            named = [label_index[t] for t in x.targets if t in label_index]
            succ[i] = (named or all_labels) + ([i + 1] if falls else [])
        elif base in ("EXIT", "RET", "KILL") or (base == "BPT" and "TRAP" in x.opcode):
            succ[i] = [i + 1] if falls else []
        elif base == "CALL":
            callee = [label_index[t] for t in x.targets if t in label_index]
            if callee:
                call_target[i] = callee[0]
            else:
                problems.append(f"pc {x.pc:#x}: call target {x.targets or x.operands} not resolved (treated as no-op)")
            succ[i] = [i + 1] if i + 1 < n else []  # summary edge: the call returns to the next instruction
        else:
            succ[i] = [i + 1] if i + 1 < n else []
    pred: list[list[int]] = [[] for _ in ins]
    for i, ss in enumerate(succ):
        for s in ss:
            pred[s].append(i)
    for c, entry in call_target.items():
        pred[entry].append(c)  # registers reaching the callee were defined before the call
    prog = Program(fn, succ, pred, call_target, problems)
    prog.skips = find_skips(prog)
    return prog


# ================================================================================================
# Value evaluation over reaching definitions
# ================================================================================================

_UNDEF = -1  # reaching the function entry without a definition
_CLOBBER = -2  # a called subroutine may write the register


class ValueAnalysis:
    """Demand-driven known-bits evaluation of a register at an instruction."""

    MAX_DEPTH = 48

    def __init__(self, prog: Program):
        self.prog = prog
        self.ins = prog.instructions
        self._defs = [may_defs(x) for x in self.ins]
        self._memo_def: dict[tuple[int, str], Bits] = {}
        self._in_progress: set[tuple[int, str]] = set()
        self._callee_defs: dict[int, set[str]] = {}
        self._blocks()

    def _blocks(self) -> None:
        """Straight-line blocks, with the registers each may write and the predicates it names, so
        backward searches skip whole blocks that cannot matter (linear in blocks, not instructions)."""
        pred, succ = self.prog.pred, self.prog.succ
        n = len(self.ins)
        self._bstart = [0] * n
        self._bdefs: dict[int, set[str]] = {}
        self._bpreds: dict[int, set[str]] = {}
        start = 0
        for i in range(n):
            if i == 0 or pred[i] != [i - 1] or succ[i - 1] != [i]:
                start = i
                self._bdefs[start] = set()
                self._bpreds[start] = set()
            self._bstart[i] = start
            self._bdefs[start].update(self._defs[i])
            x = self.ins[i]
            if i in self.prog.call_target:
                self._bdefs[start] |= self.callee_defs(self.prog.call_target[i])
            if x.base in ("R2P", "UR2UP", "CALL"):
                self._bpreds[start].add("*")
            self._bpreds[start].update(o.lstrip("!") for o in x.operands if _is_pred(o))

    # -- reaching definitions --
    def callee_defs(self, entry: int) -> set[str]:
        """Registers the subroutine at `entry` (and what it calls) may write."""
        if entry in self._callee_defs:
            return self._callee_defs[entry]
        self._callee_defs[entry] = set()  # recursion guard
        out: set[str] = set()
        seen, todo = set(), [entry]
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            out.update(self._defs[i])
            if i in self.prog.call_target:
                out |= self.callee_defs(self.prog.call_target[i])
            if self.ins[i].base != "RET":
                todo.extend(self.prog.succ[i])
        self._callee_defs[entry] = out
        return out

    def reaching_defs(self, reg: str, at: int) -> list[int]:
        """Definitions of `reg` that may reach instruction `at`. A predicated definition kills only
        for a use under the same guard with the guard's predicate not rewritten in between (ptxas
        if-converts guarded record writes into `@!P0 CS2R ... @!P0 STG` sequences)."""
        if not self.prog.pred[at]:
            return [_UNDEF]
        guard = self.ins[at].guard if self.ins[at].predicated else ""
        found: list[int] = []
        seen: set[tuple[int, bool]] = set()
        todo = [(j, bool(guard)) for j in self.prog.pred[at]]
        while todo:
            j, guard_valid = todo.pop()
            if (j, guard_valid) in seen:
                continue
            seen.add((j, guard_valid))
            x = self.ins[j]
            b = self._bstart[j]
            if reg not in self._bdefs[b] and not (
                guard_valid and (guard.lstrip("!") in self._bpreds[b] or "*" in self._bpreds[b])
            ):  # nothing in this block can matter: continue at its predecessors
                if not self.prog.pred[b]:
                    found.append(_UNDEF)
                todo.extend((p, guard_valid) for p in self.prog.pred[b])
                continue
            if j in self.prog.call_target and reg in self.callee_defs(self.prog.call_target[j]):
                found.append(_CLOBBER)
                continue
            if reg in self._defs[j] and not x.never:
                found.append(j)
                if not x.predicated or (guard_valid and x.guard == guard):
                    continue
            if guard_valid and _mentions_pred(x, guard):
                guard_valid = False  # the predicate may be rewritten here: same-guard kills stop
            preds = self.prog.pred[j]
            if not preds:
                found.append(_UNDEF)
            todo.extend((p, guard_valid) for p in preds)
        return found

    # -- evaluation --
    def value(self, reg: str, at: int, depth: int = 0) -> Bits:
        result: Bits | None = None
        for d in self.reaching_defs(reg, at):
            v = Bits.top() if d < 0 else self._def_value(d, reg, depth + 1)
            result = v if result is None else _meet(result, v)
        return result if result is not None else Bits.top()

    def _def_value(self, j: int, reg: str, depth: int) -> Bits:
        key = (j, reg)
        if key in self._memo_def:
            return self._memo_def[key]
        if key in self._in_progress or depth > self.MAX_DEPTH:
            return Bits.top()
        self._in_progress.add(key)
        try:
            v = self._transfer(j, reg, depth)
        finally:
            self._in_progress.discard(key)
        self._memo_def[key] = v
        return v

    def operand(self, token: str, at: int, depth: int) -> Bits:
        t = token.strip()
        if t in ("RZ", "URZ"):
            return Bits.const(0)
        if _INT_RE.match(t):
            return Bits.const(int(t, 0))
        neg = t.startswith("-")
        inv = t.startswith("~")
        if t.startswith("|"):
            reg = _reg_name(t)
            return Bits.top(self.value(reg, at, depth).timer) if reg else Bits.top()
        reg = _reg_name(t)
        if reg is None:
            if t.lstrip("-~") in ("RZ", "URZ"):
                return Bits.const(0)
            return Bits.top()
        v = self.value(reg, at, depth)
        return _neg(v) if neg else _not(v) if inv else v

    def _transfer(self, j: int, reg: str, depth: int) -> Bits:
        x = self.ins[j]
        dests = self._defs[j]
        if x.base in ("S2UR", "CS2R", "S2R") and any(_TIMER_SR_RE.search(o) for o in x.operands):
            return Bits.top((j,))
        srcs = [o for o in x.operands[1:] if not _is_pred(o)]
        ev = lambda tok: self.operand(tok, j, depth)
        if reg != dests[0]:
            return Bits.top(self._timer_of(srcs, j, depth))  # second half of a wide result
        op, mods = x.base, x.opcode.split(".")[1:]
        try:
            return self._semantics(op, mods, srcs, ev) or Bits.top(self._timer_of(srcs, j, depth))
        except (ValueError, IndexError):
            return Bits.top(self._timer_of(srcs, j, depth))

    def _timer_of(self, srcs: list[str], j: int, depth: int) -> frozenset:
        out: frozenset = frozenset()
        for s in srcs:
            reg = _reg_name(s)
            if reg:
                out |= self.value(reg, j, depth).timer
        return out

    @staticmethod
    def _semantics(op: str, mods: list[str], srcs: list[str], ev) -> Bits | None:
        """Known-bits result of the first destination, or None when not modelled."""
        if op in ("MOV", "UMOV", "R2UR", "MOV32I", "IMOV"):
            return ev(srcs[0])
        if op in ("IMAD", "UIMAD") and not ({"WIDE", "HI", "X"} & set(mods)):
            a, b, c = ev(srcs[0]), ev(srcs[1]), ev(srcs[2])
            return _add(_mul(a, b), c)
        if op in ("IADD3", "UIADD3") and "X" not in mods:
            return _add(*(ev(s) for s in srcs[:3]))
        if op in ("VIADD", "IADD", "IADD32I", "UIADD") and "X" not in mods:
            return _add(ev(srcs[0]), ev(srcs[1]))
        if op in ("LEA", "ULEA") and "HI" not in mods and "X" not in mods:
            s = ev(srcs[2])
            if not s.is_const:
                return None
            return _add(_shl(ev(srcs[0]), s.value), ev(srcs[1]))
        if op in ("LOP3", "ULOP3"):
            lut = ev(srcs[3])
            if not lut.is_const:
                return None
            return _lop3(ev(srcs[0]), ev(srcs[1]), ev(srcs[2]), lut.value)
        if op in ("SHF", "USHF") and "U32" in mods:
            if "L" in mods and "HI" not in mods:
                s = ev(srcs[1])
                return _shl(ev(srcs[0]), s.value) if s.is_const and s.value < 32 else None
            if "R" in mods and "HI" in mods:
                s = ev(srcs[1])
                return _shr(ev(srcs[2]), s.value) if s.is_const and s.value < 32 else None
            return None
        if op in ("SHL", "USHL"):
            s = ev(srcs[1])
            return _shl(ev(srcs[0]), s.value) if s.is_const and s.value < 32 else None
        if op in ("SHR", "USHR") and "U32" in mods:
            s = ev(srcs[1])
            return _shr(ev(srcs[0]), s.value) if s.is_const and s.value < 32 else None
        if op in ("SEL", "USEL"):
            return _meet(ev(srcs[0]), ev(srcs[1]))
        if op == "HFMA2" and len(srcs) >= 4 and "RZ" in (srcs[0].lstrip("-"), srcs[1].lstrip("-")):
            # a*b == 0, so the result is the constant c, printed as two fp16 halves (high, low)
            hi, lo = _fp16_bits(srcs[2]), _fp16_bits(srcs[3])
            if hi is None or lo is None:
                return None
            return Bits.const((hi << 16) | lo)
        return None


# ================================================================================================
# Markers
# ================================================================================================


@dataclasses.dataclass
class Marker:
    timer_index: int  # the %globaltimer read (region boundary)
    store_index: int  # the record store
    tag_mask: int  # known bits of tag32
    tag_value: int
    event_id: int | None = None
    event_type: int | None = None
    how: str = "unresolved"  # dataflow | table | line | unresolved
    cost_indices: tuple = ()  # instructions that exist only for this marker (lower bound)

    @property
    def resolved(self) -> bool:
        """Known enough to act on: BEGIN/END need the id; an INSTANT or FINALIZE changes no stack."""
        if self.event_type in (wire.EventType.INSTANT, wire.EventType.FINALIZE):
            return True
        return self.event_id is not None and self.event_type is not None

    @property
    def is_boundary(self) -> bool:
        return self.resolved and self.event_type in (wire.EventType.BEGIN, wire.EventType.END)


_LOW12 = (1 << wire.LANE_SHIFT) - 1


def find_markers(prog: Program, va: ValueAnalysis) -> tuple[list[Marker], list[str]]:
    markers: list[Marker] = []
    problems: list[str] = []
    ins = prog.instructions
    for s, x in enumerate(ins):
        if x.base not in STORE_OPS or not x.operands:
            continue
        data = _reg_name(x.operands[-1])
        width = _width(x.opcode)
        if data is None:
            continue
        values = [va.value(_reg_plus(data, k), s) for k in range(width)]
        if not any(v.timer for v in values):
            continue
        if width < 2:
            problems.append(f"pc {x.pc:#x}: 32-bit store of a timer value (not a v1 64-bit record), ignored")
            continue
        for pair in range(width // 2):
            lo, hi = values[2 * pair], values[2 * pair + 1]
            if bool(lo.timer) == bool(hi.timer):
                continue  # not a record or both halves timer data
            tag, timer = (lo, hi) if hi.timer else (hi, lo)
            tag_reg = _reg_plus(data, 2 * pair + (0 if hi.timer else 1))
            reads = sorted(timer.timer)
            if len(reads) > 1:
                problems.append(
                    f"pc {x.pc:#x}: record timer comes from several reads {[hex(ins[r].pc) for r in reads]}"
                )
            m = Marker(reads[-1], s, tag.mask, tag.value)
            m.cost_indices = tuple(
                sorted(_marker_cost(prog, va, m, _reg_plus(data, 2 * pair + (1 if hi.timer else 0)), tag_reg))
            )
            if m.tag_mask & _LOW12 == _LOW12:
                low = m.tag_value & _LOW12
                m.event_id, m.event_type, m.how = low >> wire.EVENT_ID_SHIFT, low & 3, "dataflow"
            elif m.tag_mask & 3 == 3 and m.tag_value & 3 in (wire.EventType.INSTANT, wire.EventType.FINALIZE):
                # e.g. FINALIZE carries the SM id in its event id: the id is a run-time value
                m.event_type, m.how = m.tag_value & 3, "dataflow (id computed at run time)"
            markers.append(m)
    return markers, problems


def _marker_cost(prog: Program, va: ValueAnalysis, m: Marker, timer_reg: str, tag_reg: str) -> set[int]:
    """Instructions that exist only to write this record: the timer read (+ its NOP), copies of the
    timer into the stored register, register copies forming the pair, and the store. Address and tag
    arithmetic shared with other code is not counted (so this is a lower bound)."""
    ins = prog.instructions
    out = {m.timer_index, m.store_index}
    if m.timer_index + 1 < len(ins) and ins[m.timer_index + 1].base == "NOP":
        out.add(m.timer_index + 1)
    for reg in (timer_reg, tag_reg):
        at = m.store_index
        for _ in range(4):  # follow plain copies back
            defs = va.reaching_defs(reg, at)
            if len(defs) != 1 or defs[0] < 0:
                break
            d = ins[defs[0]]
            src = _copy_source(d)
            if src is None:
                break
            out.add(defs[0])
            reg, at = src, defs[0]
    return out


def _copy_source(x: Instruction) -> str | None:
    ops = x.operands
    if x.base in ("MOV", "R2UR") and len(ops) >= 2:
        return _reg_name(ops[1]) if not ops[1].startswith(("-", "~", "|")) else None
    if x.base == "IMAD" and x.opcode in ("IMAD.MOV.U32", "IMAD.U32", "IMAD.MOV") and len(ops) == 4:
        if ops[1] == "RZ" and ops[2] == "RZ" and not ops[3].startswith(("-", "~", "|")):
            return _reg_name(ops[3])
    return None


_SIDE_EFFECT_OPS = NO_DEST_OPS | {
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
_ALL_REGS = "*"
_REG_TOKEN_RE = re.compile(r"\b(U?R\d+|U?P\d)\b")


def _uses(x: Instruction) -> set[str]:
    """Registers and predicates an instruction may read: each register token, plus the registers
    after it where the operand or the opcode is 64/128-bit wide; MMA-like ops read 'everything'."""
    if x.base in _MMA_OPS:
        return {_ALL_REGS}
    first_is_dest = x.base not in NO_DEST_OPS and bool(x.operands)
    wide_op = any(t in x.opcode for t in ("64", "128", "WIDE")) or x.base in ("DADD", "DFMA", "DMUL", "DSETP")
    out: set[str] = set()
    for k, op in enumerate(x.operands):
        if k == 0 and first_is_dest and "[" not in op:
            continue
        for tok in _REG_TOKEN_RE.findall(op):
            out.add(tok)
            if "R" not in tok:
                continue
            if x.base in STORE_OPS and k == len(x.operands) - 1:
                out.update(_reg_plus(tok, w) for w in range(1, _width(x.opcode)))
            elif wide_op or ".64" in op or ".128" in op:  # a register pair (or more) may be read
                out.update(_reg_plus(tok, w) for w in range(1, 4 if ".128" in op or "128" in x.opcode else 2))
    if x.predicated:
        out.add(x.guard.lstrip("!"))
    return out


def _writes(x: Instruction) -> list[str]:
    """Registers / predicates written: the GPR destinations plus leading predicate destinations."""
    out = list(may_defs(x))
    if x.base in NO_DEST_OPS or not x.operands:
        return out
    for k, op in enumerate(x.operands[:3]):
        if _is_pred(op) and not op.startswith("!") and op not in ("PT", "UPT") and (k == 0 or out):
            out.append(op)
        elif k > 0:
            break
    return out


def marker_only_instructions(prog: Program, va: ValueAnalysis, base: set[int]) -> set[int]:
    """Grow the markers' own instructions by those whose results only feed marker instructions
    within their block (address arithmetic of the record, guard compares, tag copies, a reloaded
    buffer base). Results that may live past the block (a loop-carried cursor) are not claimed, so
    the instrumentation cost stays a lower bound."""
    ins = prog.instructions
    cost = set(base)
    uses = [None] * len(ins)
    changed = True
    while changed:
        changed = False
        for i, x in enumerate(ins):
            if i in cost or x.base in _SIDE_EFFECT_OPS or x.base in _MMA_OPS or x.never:
                continue
            written = _writes(x)
            if not written or not _only_feeds(i, written, cost, va, uses):
                continue
            cost.add(i)
            changed = True
    return cost


def _only_feeds(i: int, written: list[str], cost: set[int], va: ValueAnalysis, uses: list) -> bool:
    ins = va.ins
    end = i + 1
    while end < len(ins) and va._bstart[end] == va._bstart[i]:
        end += 1
    used = False
    for reg in written:
        for k in range(i + 1, end):
            if uses[k] is None:
                uses[k] = _uses(ins[k])
            if reg in uses[k] or _ALL_REGS in uses[k]:
                if k not in cost:
                    return False
                used = True
            if reg in _writes(ins[k]) and not ins[k].predicated:
                break  # redefined: later uses read another value
        else:
            last = ins[end - 1]
            if not (last.base == "EXIT" and not _conditional(last)):
                return False  # may be live past the block (nothing is live after an EXIT)
    return used


def resolve_markers(markers: list[Marker], prog: Program, allowed: set[tuple[int, int]] | None) -> None:
    """Fill in markers whose tag bits are partly unknown: first from the trace-time table of
    (event_id, type) pairs, then from resolved markers on the same source line."""
    if allowed:
        for m in markers:
            if m.event_id is not None and m.event_type is not None and (m.event_id, m.event_type) not in allowed:
                m.how = "dataflow (not in marker table)"
            if m.resolved:
                continue
            low_mask, low_val = m.tag_mask & _LOW12, m.tag_value & _LOW12
            cands = [(e, t) for e, t in allowed if ((e << wire.EVENT_ID_SHIFT) | t) & low_mask == low_val]
            if len(cands) == 1:
                m.event_id, m.event_type = cands[0]
                m.how = "table"
    ins = prog.instructions
    by_line: dict[tuple, set] = {}
    for m in markers:
        x = ins[m.timer_index]
        if m.event_id is not None and m.event_type is not None and x.line is not None:
            by_line.setdefault((x.file, x.line), set()).add((m.event_id, m.event_type))
    for m in markers:
        x = ins[m.timer_index]
        if m.resolved or x.line is None:
            continue
        cands = by_line.get((x.file, x.line), set())
        low_mask, low_val = m.tag_mask & _LOW12, m.tag_value & _LOW12
        cands = {c for c in cands if ((c[0] << wire.EVENT_ID_SHIFT) | c[1]) & low_mask == low_val}
        if len(cands) == 1:
            m.event_id, m.event_type = next(iter(cands))
            m.how = "line"


# ================================================================================================
# Region-stack propagation
# ================================================================================================


def _apply(stack: tuple, marker: Marker | None) -> tuple:
    if marker is None or not marker.resolved:
        return stack
    eid, etype = marker.event_id, marker.event_type
    if etype == wire.EventType.BEGIN:
        return stack + (eid,)
    if etype == wire.EventType.END:
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] == eid:
                return stack[:k] + stack[k + 1 :]
        return stack  # an END whose BEGIN is not open on this path: counted by the caller
    return stack  # INSTANT (reserved ones included) and FINALIZE are not boundaries


def propagate(prog: Program, markers: list[Marker], entry: int = 0) -> tuple[list[set], list[str]]:
    """Fixed point of region stacks over (instruction, region stack, call stack) states.
    Returns per-instruction sets of region stacks (as seen by that instruction) and problems."""
    ins = prog.instructions
    at_timer = {m.timer_index: m for m in markers}
    seen_stacks: list[set] = [set() for _ in ins]
    visited: set = set()
    problems: set[str] = set()
    todo = [(entry, (), ())]
    while todo:
        i, rstack, cstack = todo.pop()
        while True:  # walk straight-line code without touching the worklist
            if (i, rstack, cstack) in visited:
                break
            visited.add((i, rstack, cstack))
            x = ins[i]
            marker = at_timer.get(i)
            after = _apply(rstack, marker)
            if marker is not None and marker.resolved and marker.event_type == wire.EventType.END and after == rstack:
                problems.add(f"pc {x.pc:#x}: END of event {marker.event_id} with no open BEGIN on some path")
            # the timer reads bounding a region belong to it: a BEGIN read sees the new stack, an END read the old
            seen_stacks[i].add(after if marker is not None and marker.event_type == wire.EventType.BEGIN else rstack)
            if len(after) > MAX_REGION_DEPTH:
                problems.add(
                    f"pc {x.pc:#x}: region stack deeper than {MAX_REGION_DEPTH} (BEGIN without END in a loop?)"
                )
                break
            nxt = _successors(prog, i, after, cstack, problems, at_timer)
            if not nxt:
                break
            (i, rstack, cstack), rest = nxt[0], nxt[1:]
            todo.extend(rest)
    return seen_stacks, sorted(problems)


def _successors(
    prog: Program, i: int, rstack: tuple, cstack: tuple, problems: set, skip_effects: dict[int, Marker]
) -> list[tuple]:
    x = prog.instructions[i]
    if x.base == "RET" and not x.never:
        out = []
        if cstack:
            out.append((cstack[-1], rstack, cstack[:-1]))
        if _conditional(x) and i + 1 < len(prog.instructions):
            out.append((i + 1, rstack, cstack))
        return out
    if i in prog.call_target and not x.never:
        if len(cstack) >= MAX_CALL_DEPTH:
            problems.add(f"pc {x.pc:#x}: call depth above {MAX_CALL_DEPTH} (recursion), not followed")
            return []
        out = [(prog.call_target[i], rstack, cstack + (i + 1,))]
        if _conditional(x):
            out.append((i + 1, rstack, cstack))
        return out
    out = []
    for s in prog.succ[i]:
        guarded = prog.skips.get(i)
        if guarded is not None and s == guarded[1] and _conditional(x):
            out.append((s, _apply_range(rstack, guarded, skip_effects), cstack))
        else:
            out.append((s, rstack, cstack))
    return out


def _apply_range(rstack: tuple, rng: tuple[int, int], effects: dict[int, Marker]) -> tuple:
    for k in range(rng[0], rng[1]):
        if k in effects:
            rstack = _apply(rstack, effects[k])
    return rstack


def find_skips(prog: Program) -> dict[int, tuple[int, int]]:
    """Conditional forward branches that jump over a closed range of code [b+1, t) (every edge of the
    range stays in it or falls into t, nothing else enters it, no EXIT/RET in it). Markers inside such
    a range are guarded by a run-time condition (a capacity check, a leader test); the region
    structure must not depend on it, so the skip edge carries the range's marker effects too."""
    ins = prog.instructions
    skips: dict[int, tuple[int, int]] = {}
    for b, x in enumerate(ins):
        if x.base != "BRA" or not _conditional(x) or len(prog.succ[b]) != 2:
            continue
        t = max(prog.succ[b])
        if t <= b + 1 or min(prog.succ[b]) != b + 1:
            continue
        closed = True
        for k in range(b + 1, t):
            y = ins[k]
            if y.base in ("EXIT", "RET", "BRX", "JMX", "KILL") or any(not (b < s <= t) for s in prog.succ[k]):
                closed = False
                break
            if k > b + 1 and any(not (b <= p < t) for p in prog.pred[k] if p not in prog.call_target or p < b):
                closed = False
                break
        if closed:
            skips[b] = (b + 1, t)
    return skips


# ================================================================================================
# The map
# ================================================================================================


@dataclasses.dataclass
class RegionMap:
    """Per-PC region assignment of one kernel (columnar; JSON via to_json / load_map)."""

    kernel: str
    cubin_sha256: str | None
    pc: np.ndarray  # int64 function-relative byte offsets, ascending
    opcode: list[str]
    region: np.ndarray  # int64 index into `paths`
    is_marker: np.ndarray  # bool: instruction exists only for a marker (instrumentation cost)
    line: np.ndarray  # int64 source line, -1 unknown
    ends_flow: np.ndarray  # bool: unpredicated EXIT / BRA / RET / BRX: the next PC is not its successor
    paths: list[str]  # region paths; the special buckets are always present
    stacks: list[list[int] | None]  # event-id stack per path (None for the special buckets)
    markers: list[dict]
    events: dict[int, str]
    problems: list[str]
    ambiguous_candidates: dict[int, list[str]] = dataclasses.field(default_factory=dict)  # pc -> paths

    def path_of_pc(self) -> dict[int, str]:
        return {int(p): self.paths[r] for p, r in zip(self.pc, self.region)}

    def pcs_in(self, path: str) -> set[int]:
        k = self.paths.index(path) if path in self.paths else -1
        return {int(p) for p in self.pc[self.region == k]}

    @property
    def code_size(self) -> int:
        return int(self.pc[-1]) + 16 if self.pc.size else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MAP_FORMAT,
            "kernel": self.kernel,
            "cubin_sha256": self.cubin_sha256,
            "num_instructions": int(self.pc.size),
            "code_size": self.code_size,
            "events": {str(k): v for k, v in sorted(self.events.items())},
            "paths": self.paths,
            "stacks": self.stacks,
            "pc": self.pc.tolist(),
            "opcode": self.opcode,
            "region": self.region.tolist(),
            "is_marker": self.is_marker.astype(int).tolist(),
            "ends_flow": self.ends_flow.astype(int).tolist(),
            "line": self.line.tolist(),
            "markers": self.markers,
            "ambiguous_candidates": {str(k): v for k, v in sorted(self.ambiguous_candidates.items())},
            "problems": self.problems,
        }

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)

    def summary(self) -> dict[str, int]:
        counts = np.bincount(self.region, minlength=len(self.paths))
        return {p: int(c) for p, c in zip(self.paths, counts)}


def load_map(path_or_obj: str | dict) -> RegionMap:
    if isinstance(path_or_obj, dict):
        obj, source = path_or_obj, "map"
    else:
        source = str(path_or_obj)
        try:
            with open(path_or_obj) as f:
                obj = json.load(f)
        except json.JSONDecodeError as e:
            raise DecodeError(f"not JSON: {e}", source=source) from None
    if not isinstance(obj, dict) or obj.get("format") != MAP_FORMAT:
        raise DecodeError(f"not a pc2region map (format must be {MAP_FORMAT!r})", source=source)
    try:
        n = len(obj["pc"])
        cols = [obj["opcode"], obj["region"], obj["is_marker"], obj["line"], obj["ends_flow"]]
        if any(len(c) != n for c in cols):
            raise DecodeError("columns pc/opcode/region/is_marker/line/ends_flow differ in length", source=source)
        region = np.asarray(obj["region"], np.int64)
        if region.size and (region.min() < 0 or region.max() >= len(obj["paths"])):
            raise DecodeError("region index out of range of 'paths'", source=source)
        return RegionMap(
            kernel=obj["kernel"],
            cubin_sha256=obj.get("cubin_sha256"),
            pc=np.asarray(obj["pc"], np.int64),
            opcode=list(obj["opcode"]),
            region=region,
            is_marker=np.asarray(obj["is_marker"], bool),
            line=np.asarray(obj["line"], np.int64),
            ends_flow=np.asarray(obj["ends_flow"], bool),
            paths=list(obj["paths"]),
            stacks=list(obj["stacks"]),
            markers=list(obj.get("markers", [])),
            events={int(k): v for k, v in obj.get("events", {}).items()},
            problems=list(obj.get("problems", [])),
            ambiguous_candidates={int(k): v for k, v in obj.get("ambiguous_candidates", {}).items()},
        )
    except KeyError as e:
        raise DecodeError(f"missing key {e}", source=source) from None


def _event_name(events: dict[int, str], eid: int) -> str:
    return events.get(int(eid), f"event_{int(eid)}")


def _path_name(stack: tuple, events: dict[int, str]) -> str:
    return "/".join(_event_name(events, e) for e in stack) if stack else OUTSIDE


def _str_keys(obj: Any) -> Any:
    return {str(k): v for k, v in obj.items()} if isinstance(obj, dict) else obj


def _events_and_table(names: Any, marker_table: Any) -> tuple[dict[int, str], set[tuple[int, int]] | None]:
    """names: Names | {id: name} | sidecar dict with 'events' | None;
    marker_table: iterable of (event_id, type) (program order is not needed) | None."""
    events: dict[int, str] = {}
    if names is not None:
        if hasattr(names, "events"):
            events = dict(names.events)
        elif isinstance(names, dict) and "events" in names:
            from host_decode.core.model import Names

            events = Names.from_json({"events": _str_keys(names["events"])}).events
        elif isinstance(names, dict):
            from host_decode.core.model import Names

            events = Names.from_json({"events": _str_keys(names)}).events
        else:
            raise ValueError("names must be a Names, an {id: name} dict or a capture sidecar dict")
    allowed = None
    if marker_table is not None:
        allowed = set()
        for item in marker_table:
            try:
                eid, etype = int(item[0]), int(item[1])
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"marker table entries must be (event_id, event_type), got {item!r}") from None
            allowed.add((eid, etype))
    elif events:
        # a names table says which ids exist: each may begin, end or be an instant
        allowed = {(e, t) for e in events for t in (0, 1, 2)} | {(e, 2) for e in wire.RESERVED_INSTANT_IDS}
        allowed |= {(e, 3) for e in range(wire.MAX_EVENT_ID + 1)}
    return events, allowed


def build_map(
    cubin: bytes,
    kernel: str | None = None,
    names: Any = None,
    marker_table: Any = None,
    nvdisasm: str | None = None,
    listing: str | None = None,
) -> RegionMap:
    """pc2region map of one kernel of a cubin (bytes). `names`: event names (Names, {id: name} or a
    capture sidecar dict); `marker_table`: the (event_id, type) pairs the kernel can write (trace-time
    knowledge used to resolve tags whose bits ptxas computes at run time). `listing`: a precomputed
    `nvdisasm -c -g` text (for tests / tools that already ran it)."""
    text = listing if listing is not None else sass.disassemble(cubin, nvdisasm)
    fn = sass.select_function(_kernels_with_markers_first(sass.parse_listing(text)), kernel)
    return map_function(fn, sass.cubin_sha256(cubin) if cubin else None, names, marker_table)


def _kernels_with_markers_first(functions: list[Function]) -> list[Function]:
    with_timer = [f for f in functions if any(_TIMER_SR_RE.search(x.text) for x in f.instructions)]
    return with_timer if len(with_timer) == 1 and len(functions) > 1 else functions


def map_function(fn: Function, sha: str | None, names: Any = None, marker_table: Any = None) -> RegionMap:
    if not fn.instructions:
        raise DecodeError(f"kernel {fn.name} has no instructions", source="cubin")
    events, allowed = _events_and_table(names, marker_table)
    prog = build_program(fn)
    va = ValueAnalysis(prog)
    markers, problems = find_markers(prog, va)
    resolve_markers(markers, prog, allowed)
    problems = prog.problems + problems
    for m in markers:
        if not m.resolved:
            problems.append(
                f"pc {fn.instructions[m.timer_index].pc:#x}: marker tag not resolved "
                f"(known bits {m.tag_mask & _LOW12:#05x} = {m.tag_value & _LOW12:#05x}); it is not a boundary"
            )
    boundary_timers = [m.timer_index for m in markers if m.is_boundary or not m.resolved]
    for t in sorted({t for t in boundary_timers if sum(m.timer_index == t for m in markers) > 1}):
        problems.append(f"pc {fn.instructions[t].pc:#x}: one timer read feeds several records; the first is used")
    entry = fn.index_of_pc().get(fn.symbols.get(fn.name, 0), 0)
    seen, prop_problems = propagate(prog, _unique_by_timer(markers), entry)
    problems += prop_problems
    cost = marker_only_instructions(prog, va, {i for m in markers for i in m.cost_indices})
    return _assemble(fn, sha, events, markers, seen, problems, cost)


def _unique_by_timer(markers: list[Marker]) -> list[Marker]:
    """One marker per timer read: the first boundary record stored from it (else the first record)."""
    out: dict[int, Marker] = {}
    for m in markers:
        if m.timer_index not in out or (m.is_boundary and not out[m.timer_index].is_boundary):
            out[m.timer_index] = m
    return list(out.values())


def _assemble(fn, sha, events, markers, seen, problems, cost: set[int]) -> RegionMap:
    ins = fn.instructions
    paths = list(SPECIAL_PATHS)
    stacks: list = [None, None, None]
    index: dict[tuple, int] = {}
    region = np.empty(len(ins), np.int64)
    ambiguous: dict[int, list[str]] = {}
    for i, st in enumerate(seen):
        if not st:
            region[i] = paths.index(UNREACHABLE)
        elif len(st) > 1:
            region[i] = paths.index(AMBIGUOUS)
            ambiguous[ins[i].pc] = sorted(_path_name(s, events) for s in st)
        else:
            (s,) = st
            if not s:
                region[i] = paths.index(OUTSIDE)
                continue
            if s not in index:
                index[s] = len(paths)
                paths.append(_path_name(s, events))
                stacks.append(list(s))
            region[i] = index[s]
    is_marker = np.zeros(len(ins), bool)
    is_marker[sorted(cost)] = True
    marker_rows = [
        {
            "pc": ins[m.timer_index].pc,
            "store_pc": ins[m.store_index].pc,
            "event_id": m.event_id,
            "event_type": m.event_type,
            "event": _event_name(events, m.event_id) if m.event_id is not None else None,
            "how": m.how,
            "tag_known_mask": m.tag_mask,
            "tag_known_value": m.tag_value,
            "line": ins[m.timer_index].line,
            "cost_instructions": len(m.cost_indices),
        }
        for m in sorted(markers, key=lambda m: m.timer_index)
    ]
    return RegionMap(
        kernel=fn.name,
        cubin_sha256=sha,
        pc=np.array([x.pc for x in ins], np.int64),
        opcode=[x.opcode for x in ins],
        region=region,
        is_marker=is_marker,
        line=np.array([x.line if x.line is not None else -1 for x in ins], np.int64),
        ends_flow=np.array([_ends_flow(x) for x in ins], bool),
        paths=paths,
        stacks=stacks,
        markers=marker_rows,
        events=dict(events),
        problems=problems,
        ambiguous_candidates=ambiguous,
    )


def _ends_flow(x: Instruction) -> bool:
    return x.base in ("EXIT", "BRA", "RET", "BRX", "JMX", "JMP", "KILL") and not _conditional(x) and not x.never


def map_compiled(compiled: Any, **kwargs) -> RegionMap:
    """Map a compiled CuTe DSL function (compiled with options="--keep-cubin"); no cutlass import."""
    cubin = getattr(compiled, "__cubin__", None)
    if cubin is None:
        artifacts = getattr(compiled, "artifacts", None)
        cubin = getattr(artifacts, "CUBIN", None) if artifacts is not None else None
    if not cubin:
        raise ValueError('the compiled function kept no cubin: compile with options="--keep-cubin"')
    return build_map(bytes(cubin), **kwargs)


def read_cubin(path: str) -> bytes:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as f:
        return f.read()
