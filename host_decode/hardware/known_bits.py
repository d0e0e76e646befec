"""Known-bits evaluation of SASS registers over reaching definitions (what pc2region uses to read a
marker's tag out of the code ptxas emits for it).

A value is ``Bits(mask, value, timer)``: ``mask`` marks the bits known, ``timer`` the indices of the
``%globaltimer`` reads it derives from. Invariants (tests/unit/host_decode/hardware/test_pc2region.py): a bit is marked
known only when every path that may define the register agrees on it
(test_predicated_tag_definitions_under_the_same_guard, test_guard_rewritten_between_def_and_store_is_not_trusted); the
tag shapes ptxas emits (MOV, IMAD.MOV, IADD3, LEA, LOP3, HFMA2 fp16 pairs) evaluate exactly
(test_tag_shapes_hfma2_lop3_iadd3_lea).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

import numpy as np

from host_decode.hardware import sass
from host_decode.hardware.cfg import Program
from host_decode.hardware.sass import Instruction

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
    # a = A + 2^ka x, b = B + 2^kb y (A, B the known low parts): a*b = A*B mod 2^min(ka + tz(B), kb + tz(A)),
    # so trailing zeros add up: block * 0x3000 (3 groups) has 12 known zero bits
    ka, kb = a.low_known(), b.low_known()
    k = min(ka + _trailing_zeros(b), kb + _trailing_zeros(a), 32)
    m = (1 << k) - 1
    return Bits(m, (a.value * b.value) & m, a.timer | b.timer)


def _trailing_zeros(x: Bits) -> int:
    """Known zero bits from bit 0 (all known low bits when they are all zero)."""
    k = x.low_known()
    low = x.value & ((1 << k) - 1)
    return k if low == 0 else (low & -low).bit_length() - 1


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
        self._defs = [sass.may_defs(x) for x in self.ins]
        self._memo_def: dict[tuple[int, str], Bits] = {}
        self._in_progress: set[tuple[int, str]] = set()
        self._callee_defs: dict[int, set[str]] = {}
        self._local = _local_stores(self.ins)
        self._blocks()

    def _blocks(self) -> None:
        """Straight-line blocks, with the registers each may write and the predicates it names, so
        backward searches skip whole blocks that cannot matter (linear in blocks, not instructions)."""
        pred, succ = self.prog.pred, self.prog.succ
        n = len(self.ins)
        self.block_start = [0] * n
        self._bdefs: dict[int, set[str]] = {}
        self._bpreds: dict[int, set[str]] = {}
        start = 0
        for i in range(n):
            if i == 0 or pred[i] != [i - 1] or succ[i - 1] != [i]:
                start = i
                self._bdefs[start] = set()
                self._bpreds[start] = set()
            self.block_start[i] = start
            self._bdefs[start].update(self._defs[i])
            x = self.ins[i]
            for entry in self.prog.callees.get(i, ()):
                self._bdefs[start] |= self.callee_defs(entry)
            if x.base in ("R2P", "UR2UP", "CALL"):
                self._bpreds[start].add("*")
            self._bpreds[start].update(o.lstrip("!") for o in x.operands if sass.is_pred(o))

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
            for callee in self.prog.callees.get(i, ()):
                out |= self.callee_defs(callee)
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
            b = self.block_start[j]
            if reg not in self._bdefs[b] and not (
                guard_valid and (guard.lstrip("!") in self._bpreds[b] or "*" in self._bpreds[b])
            ):  # nothing in this block can matter: continue at its predecessors
                if not self.prog.pred[b]:
                    found.append(_UNDEF)
                todo.extend((p, guard_valid) for p in self.prog.pred[b])
                continue
            if any(reg in self.callee_defs(e) for e in self.prog.callees.get(j, ())):
                found.append(_CLOBBER)
                continue
            if reg in self._defs[j] and not x.never:
                found.append(j)
                if not x.predicated or (guard_valid and x.guard == guard):
                    continue
            if guard_valid and sass.mentions_pred(x, guard):
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
        if sass.INT_RE.match(t):
            return Bits.const(int(t, 0))
        neg = t.startswith("-")
        inv = t.startswith("~")
        if t.startswith("|"):
            reg = sass.reg_name(t)
            return Bits.top(self.value(reg, at, depth).timer) if reg else Bits.top()
        reg = sass.reg_name(t)
        if reg is None:
            if t.lstrip("-~") in ("RZ", "URZ"):
                return Bits.const(0)
            return Bits.top()
        v = self.value(reg, at, depth)
        return _neg(v) if neg else _not(v) if inv else v

    def _transfer(self, j: int, reg: str, depth: int) -> Bits:
        x = self.ins[j]
        dests = self._defs[j]
        if sass.reads_timer(x):
            return Bits.top((j,))
        srcs = [o for o in x.operands[1:] if not sass.is_pred(o)]
        ev = lambda tok: self.operand(tok, j, depth)
        if x.base == "LDL":
            return self._local_load(x, dests.index(reg), j, depth)
        if reg != dests[0]:
            return Bits.top(self._timer_of(srcs, j, depth))  # second half of a wide result
        op, mods = x.base, x.opcode.split(".")[1:]
        try:
            return self._semantics(op, mods, srcs, ev) or Bits.top(self._timer_of(srcs, j, depth))
        except (ValueError, IndexError):
            return Bits.top(self._timer_of(srcs, j, depth))

    def _local_load(self, x: Instruction, k: int, j: int, depth: int) -> Bits:
        """Word k of an LDL: the meet of every STL in the section that writes the same frame offset
        (a Profiler passed by reference to a __noinline__ helper lives in local memory: its lane bits
        are stored by the kernel and reloaded by the helper, through another base register that
        points at the same frame). Keyed by offset alone, so a store through any base to that offset
        weakens the value; no forwarding at all when an address is not base+immediate or a generic ST
        could write local memory (test_suite_noinline_helper)."""
        offset = _local_offset(x.operands[1]) if len(x.operands) > 1 else None
        if self._local is None or offset is None or (offset + 4 * k) not in self._local:
            return Bits.top()
        result: Bits | None = None
        for store_index, stored in self._local[offset + 4 * k]:
            v = Bits.const(0) if stored is None else self.value(stored, store_index, depth + 1)
            result = v if result is None else _meet(result, v)
        return result if result is not None else Bits.top()

    def _timer_of(self, srcs: list[str], j: int, depth: int) -> frozenset:
        out: frozenset = frozenset()
        for s in srcs:
            reg = sass.reg_name(s)
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


_LOCAL_ADDR_RE = re.compile(r"^\[\s*(?:U?R\d+|U?RZ)?\s*(?:\+?\s*(-?0x[0-9a-fA-F]+|-?\d+))?\s*\]$")


def _local_offset(address: str) -> int | None:
    """Immediate offset of a local-memory address `[R13+0x1c]` / `[R1]`; None if register-indexed."""
    m = _LOCAL_ADDR_RE.match(address.strip())
    if not m:
        return None
    return int(m.group(1), 0) if m.group(1) else 0


def _local_stores(ins: list[Instruction]) -> dict[int, list[tuple[int, str | None]]] | None:
    """Frame offset -> the (STL index, stored register or None for RZ) writing that 32-bit word;
    None when local memory cannot be tracked (a register-indexed STL, or a generic ST)."""
    out: dict[int, list[tuple[int, str | None]]] = {}
    for i, x in enumerate(ins):
        if x.base == "ST":
            return None
        if x.base != "STL" or x.never:
            continue
        if len(x.operands) < 2:
            return None
        offset = _local_offset(x.operands[0])
        data = x.operands[1].strip()
        reg = sass.reg_name(data)
        if offset is None or (reg is None and data not in ("RZ", "URZ")):
            return None
        for k in range(sass.reg_width(x.opcode)):
            out.setdefault(offset + 4 * k, []).append((i, sass.reg_plus(reg, k) if reg else None))
    return out
