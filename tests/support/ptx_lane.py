"""A PTX interpreter for the tracer's inline-PTX blocks, run by one warp's elected lane on the CPU: the lane that
stores records and writes the warp's state (every thread of a warp takes the same branches there: they read the
same shared state), so its stores are the warp's. Enough of PTX for ikp_cute/pipelines/record_pool.py's blocks
(setup, records, regions, flag records, refills, epilogue): 32/64-bit integer arithmetic, predicates, shared and
global loads and stores (scalar and .v2 / .v4), atomics and reductions, bra, elect / activemask / shfl of a warp
of one active lane, %globaltimer (a clock that ticks per read) and the special registers of a launch.

Used by tests/unit/ikp_cute/test_pool_flags.py: what a block does to memory, checked against the pool reader."""

from __future__ import annotations

import re

import numpy as np

WIDTH = {"u32": 32, "s32": 32, "b32": 32, "u64": 64, "s64": 64, "b64": 64, "u16": 16, "s16": 16, "b16": 16}
_OPERAND = re.compile(r"\$(\d+)")


def _split(args: str) -> list[str]:
    """Operands separated by commas outside braces and brackets."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Lane:
    """One elected lane: `shared` (bytearray, addresses from 0), `memory` (uint64 words of global memory starting
    at byte address `base`), the special registers `special` ({"%tid.x": ..., "%smid": ...})."""

    def __init__(self, memory: np.ndarray, base: int, shared_bytes: int = 1 << 16, special: dict | None = None,
                 clock: int = 1_000_000_000_000):
        self.memory = memory.view(np.uint8)
        self.base = base
        self.shared = bytearray(shared_bytes)
        self.special = dict(special or {})
        self.clock = clock
        self.steps = 0

    # --- memory ----------------------------------------------------------------------------------------------

    def _bytes(self, space: str, addr: int, n: int):
        if space == "shared":
            if not 0 <= addr <= len(self.shared) - n:
                raise IndexError(f"shared address {addr:#x} outside the block's shared memory")
            return self.shared, addr
        off = addr - self.base
        if not 0 <= off <= self.memory.size - n:
            raise IndexError(f"global address {addr:#x} outside the buffer at {self.base:#x}")
        return self.memory, off

    def load(self, space: str, addr: int, n: int) -> int:
        buf, off = self._bytes(space, addr, n)
        return int.from_bytes(bytes(buf[off:off + n]), "little")

    def store(self, space: str, addr: int, n: int, value: int) -> None:
        buf, off = self._bytes(space, addr, n)
        raw = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        buf[off:off + n] = raw if isinstance(buf, bytearray) else np.frombuffer(raw, np.uint8)

    # --- running a block -------------------------------------------------------------------------------------

    def run(self, text: str, operands=(), outputs: int = 0, max_steps: int = 100_000) -> list[int]:
        """Execute one inline-PTX block: $0..$outputs-1 are its results (returned), the rest its `operands`."""
        body = re.sub(r"/\*.*?\*/", "", text).strip()
        if body.startswith("{"):
            body = body[1 : body.rindex("}")]
        body = _OPERAND.sub(lambda m: f"%out{m.group(1)}" if int(m.group(1)) < outputs
                            else str(int(operands[int(m.group(1)) - outputs])), body)
        program, labels = [], {}
        for piece in body.split(";"):
            piece = piece.strip()
            while (m := re.match(r"^([A-Za-z_]\w*):\s*", piece)):
                labels[m.group(1)] = len(program)
                piece = piece[m.end():]
            if piece and not piece.startswith(".reg"):
                program.append(piece)
        self.regs: dict[str, int] = {}
        pc = 0
        while pc < len(program):
            self.steps += 1
            if self.steps > max_steps:
                raise RuntimeError("PTX block did not finish (a loop?)")
            line = program[pc]
            pc += 1
            guard = None
            if line.startswith("@"):
                guard, line = line.split(None, 1)
                neg = guard.startswith("@!")
                if bool(self.regs.get(guard[2 if neg else 1:], 0)) == neg:
                    continue
            op, _, args = line.partition(" ")
            target = self.execute(op, _split(args))
            if target is not None:
                pc = labels[target]
        return [self.regs.get(f"%out{i}", 0) for i in range(outputs)]

    def value(self, token: str, bits: int = 64) -> int:
        token = token.strip()
        if token.startswith("!"):
            return int(not self.value(token[1:]))
        if token == "%globaltimer":
            self.clock += 100
            return self.clock
        if token in self.special:
            return int(self.special[token])
        if token in self.regs:
            return self.regs[token]
        if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", token):
            return int(token, 0) & ((1 << bits) - 1)
        raise KeyError(f"unknown operand {token!r}")

    def set(self, name: str, value: int, bits: int = 64) -> None:
        if name != "_":
            self.regs[name] = value & ((1 << bits) - 1)

    def address(self, token: str) -> int:
        inner = token.strip()[1:-1]
        return sum(self.value(t) for t in re.split(r"\+", inner) if t) & ((1 << 64) - 1)

    def execute(self, op: str, a: list[str]) -> str | None:
        parts = op.split(".")
        name = parts[0]
        typ = parts[-1]
        bits = WIDTH.get(typ, 64)
        v = lambda t, b=bits: self.value(t, b)  # noqa: E731
        if name == "bra":
            return a[0]
        if name == "activemask":
            self.set(a[0], 1, 32)
        elif name == "elect":
            for dest, val in zip(a[0].split("|"), (0, 1)):
                self.set(dest, val, 32)
        elif name == "shfl":
            self.set(a[0], v(a[1]), 32)
        elif name == "mov":
            if a[0].startswith("{"):  # unpack
                lo, hi = (x.strip() for x in a[0][1:-1].split(","))
                w = v(a[1], 64)
                self.set(lo, w, 32)
                self.set(hi, w >> 32, 32)
            elif a[1].startswith("{"):
                lo, hi = (x.strip() for x in a[1][1:-1].split(","))
                self.set(a[0], (v(lo, 32) & 0xFFFFFFFF) | (v(hi, 32) & 0xFFFFFFFF) << 32, 64)
            else:
                self.set(a[0], v(a[1]), bits)
        elif name in ("ld", "st"):
            space = "shared" if "shared" in parts else "global"
            n = WIDTH[typ] // 8
            vec = 4 if "v4" in parts else 2 if "v2" in parts else 1
            if name == "ld":
                addr = self.address(a[1])
                dests = [x.strip() for x in a[0][1:-1].split(",")] if vec > 1 else [a[0]]
                for i, d in enumerate(dests):
                    self.set(d, self.load(space, addr + i * n, n), 8 * n)
            else:
                addr = self.address(a[0])
                srcs = [x.strip() for x in a[1][1:-1].split(",")] if vec > 1 else [a[1]]
                for i, src in enumerate(srcs):
                    self.store(space, addr + i * n, n, v(src, 8 * n))
        elif name in ("atom", "red"):
            kind = parts[-2]
            addr = self.address(a[1] if name == "atom" else a[0])
            n = bits // 8
            old = self.load("global", addr, n)
            x = v(a[2] if name == "atom" else a[1])
            new = {"add": old + x, "min": min(old, x), "max": max(old, x)}[kind]
            self.store("global", addr, n, new)
            if name == "atom":
                self.set(a[0], old, bits)
        elif name == "setp":
            cmp = parts[1]
            x, y = v(a[1]), v(a[2])
            if typ.startswith("s"):
                x, y = _signed(x, bits), _signed(y, bits)
            r = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[cmp]
            if len(parts) == 4:  # setp.cmp.and/or.type d, a, b, c
                c = bool(v(a[3]))
                r = (r and c) if parts[2] == "and" else (r or c)
            self.set(a[0], int(r), 1)
        elif name == "selp":
            self.set(a[0], v(a[1]) if self.value(a[3]) else v(a[2]), bits)
        elif typ == "pred":
            x, y = bool(self.value(a[1])), bool(self.value(a[2]))
            self.set(a[0], int(x and y if name == "and" else x or y), 1)
        elif name in ("add", "sub", "and", "or", "xor", "min", "max", "rem", "shl", "shr"):
            x, y = v(a[1]), v(a[2])
            if typ.startswith("s"):
                x, y = _signed(x, bits), _signed(y, bits)
            if name in ("shl", "shr"):
                y = min(v(a[2], 32), bits)  # PTX clamps shift amounts to the width
            r = {"add": lambda: x + y, "sub": lambda: x - y, "and": lambda: x & y, "or": lambda: x | y,
                 "xor": lambda: x ^ y, "min": lambda: min(x, y), "max": lambda: max(x, y),
                 "rem": lambda: x % y if y else 0, "shl": lambda: x << y, "shr": lambda: x >> y}[name]()
            self.set(a[0], r, bits)
        elif name == "neg":
            self.set(a[0], -_signed(v(a[1]), bits), bits)
        elif name == "clz":
            x = v(a[1], 32)
            self.set(a[0], 32 - x.bit_length(), 32)
        elif name in ("mul", "mad"):
            wide = "wide" in parts
            src_bits = 32 if wide else bits
            x, y = v(a[1], src_bits), v(a[2], src_bits)
            if typ.startswith("s"):
                x, y = _signed(x, src_bits), _signed(y, src_bits)
            r = x * y + (v(a[3], 64 if wide else bits) if name == "mad" else 0)
            self.set(a[0], r, 64 if wide else bits)
        elif name == "cvt":
            self.set(a[0], v(a[1], WIDTH[parts[2]]), WIDTH[parts[1]])
        elif name == "bfe":
            pos, length = v(a[2], 32), v(a[3], 32)
            self.set(a[0], (v(a[1]) >> pos) & ((1 << length) - 1), bits)
        elif name == "bfi":
            pos, length = v(a[3], 32), v(a[4], 32)
            mask = ((1 << length) - 1) << pos
            self.set(a[0], (v(a[2]) & ~mask) | ((v(a[1]) << pos) & mask), bits)
        else:
            raise NotImplementedError(f"PTX {op} is not interpreted here")
        return None
