"""Protobuf encoding for the Perfetto writer: padded fixed-width varint records built a whole column at a
time with numpy, and the few scalar helpers the preamble (interning, track descriptors) needs.

A record (``Layout``) is a sequence of constant bytes and padded-varint columns; every record of one
layout has the same width, so a table of them is built as 64-bit words (``Layout.rows``) and each record
placed at its byte offset in the file with one fancy assignment (``scatter_rows``). Padded varints
(continuation bits on leading zero groups) are valid protobuf: tests/unit/host_decode/writers/test_perfetto.py parses
them with the official protos (test_padded_varints_parse, test_layout_widths_parse, test_scatter_rows_places_records).
Columns of minimal varints (put_varints_at, for the track descriptors) are the scalar varint's bytes
(test_put_varints_at_is_varint).
"""

from __future__ import annotations

import numpy as np


class Layout:
    """A fixed-width protobuf record: constant bytes and padded-varint columns, filled a whole column
    at a time (constants from one template row)."""

    def __init__(self) -> None:
        self.parts: list = []  # ("c", bytes) | ("v", values, width) | ("f", uint64 values, 8)

    @property
    def width(self) -> int:
        return sum(part_width(p) for p in self.parts)

    def const(self, b: bytes) -> "Layout":
        self.parts.append(("c", bytes(b)))
        return self

    def varint(self, field: int, values: np.ndarray | int, width: int) -> "Layout":
        self.const(tag(field, 0))
        if isinstance(values, (int, np.integer)):
            self.const(varint(int(values), width))
        else:
            self.parts.append(("v", values, width))
        return self

    def fixed64(self, field: int, values: np.ndarray) -> "Layout":
        """A fixed64 / double column (8 little-endian bytes; doubles as their bits)."""
        self.const(tag(field, 1))
        self.parts.append(("f", np.asarray(values).view(np.uint64), 8))
        return self

    def message(self, field: int, inner: "Layout") -> "Layout":
        self.const(tag(field, 2) + varint(inner.width))
        self.parts.extend(inner.parts)
        return self

    def extend(self, other: "Layout") -> "Layout":
        self.parts.extend(other.parts)
        return self

    def fill(self, n: int) -> np.ndarray:
        """-> (n, width) uint8, contiguous."""
        rows = self.rows(n)
        return rows if rows.shape[1] == self.width else np.ascontiguousarray(rows[:, : self.width])

    def rows(self, n: int, shared: dict | None = None) -> np.ndarray:
        """-> (n, >= width) uint8: row i starts with record i. Built as 64-bit words: the constant bytes
        (continuation bits of the padded varints included) come from one template row, each per-row
        field is ORed in at its byte offset (a padded varint of <= 8 bytes is one uint64 with its
        7-bit groups spread over its bytes). `shared` keeps spread columns for other layouts that
        hold the same column at the same byte offset in a word (BEGIN and END share the track uuid)."""
        width = self.width
        nwords = (width + 7) // 8
        template = np.zeros(nwords * 8, np.uint8)
        col = 0
        for p in self.parts:
            if p[0] == "c":
                template[col : col + len(p[1])] = np.frombuffer(p[1], np.uint8)
            elif p[0] == "v":
                template[col : col + p[2] - 1] = 0x80
            col += part_width(p)
        if any(p[0] == "v" and p[2] > 8 for p in self.parts):
            return self._fill_bytes(n, template)
        shared = {} if shared is None else shared
        words: list = [None] * nwords  # per word: the ORed per-row fields, or None
        owned = [False] * nwords  # whether words[j] may be changed in place

        def put(j: int, value: np.ndarray) -> None:
            if words[j] is None:
                words[j] = value
            elif owned[j]:
                np.bitwise_or(words[j], value, out=words[j])
            else:
                words[j], owned[j] = words[j] | value, True

        col = 0
        for p in self.parts:
            if p[0] in "vf":
                j, shift = divmod(col, 8)
                key = (id(p[1]), p[0], p[2], shift)
                if key not in shared:
                    value = spread_bits(p[1], p[2]) if p[0] == "v" else p[1].astype(np.uint64, copy=True)
                    high = value >> np.uint64(64 - 8 * shift) if shift + p[2] > 8 else None  # into the next word
                    if shift:
                        np.left_shift(value, np.uint64(8 * shift), out=value)
                    shared[key] = (value, high)
                value, high = shared[key]
                put(j, value)
                if high is not None:
                    put(j + 1, high)
            col += part_width(p)
        out = np.empty((n, nwords), np.uint64)
        for j, (w, const) in enumerate(zip(words, template.view(np.uint64).tolist())):
            if w is None:
                out[:, j] = const
            else:
                np.bitwise_or(w, np.uint64(const), out=out[:, j])
        return out.view(np.uint8)

    def _fill_bytes(self, n: int, template: np.ndarray) -> np.ndarray:
        out = np.empty((n, self.width), np.uint8)
        out[:] = template[: self.width]
        col = 0
        for p in self.parts:
            if p[0] == "v":
                put_varint(out, col, p[1], p[2])
            elif p[0] == "f":
                out[:, col : col + 8] = p[1].astype("<u8").view(np.uint8).reshape(-1, 8)
            col += part_width(p)
        return out


def part_width(p) -> int:
    return len(p[1]) if p[0] == "c" else p[2]


def scatter_rows(out: np.ndarray, offsets: np.ndarray, rows: np.ndarray, width: int) -> None:
    """out[offsets[i] : offsets[i] + width] = rows[i, :width] for every i, as one fancy assignment of
    `width`-byte items (out seen as overlapping items, one starting at every byte)."""
    if offsets.size == 0:
        return
    item = np.dtype(f"V{width}")
    dst = np.ndarray((out.size - width + 1,), item, buffer=out, strides=(1,))
    src = np.ndarray((rows.shape[0],), item, buffer=rows, strides=(rows.strides[0],))
    dst[offsets] = src


def spread_bits(values: np.ndarray, width: int) -> np.ndarray:
    """uint64 whose first `width` bytes hold the 7-bit groups of each value (width <= 8, values below
    2**(7 * width)), continuation bits left 0. Adding x & ~(2**b - 1) to x inserts a 0 bit at bit b."""
    x = values.astype(np.int64, copy=False).view(np.uint64)
    if width == 1:
        return x.copy()
    spread = None
    tmp = np.empty_like(x)
    for k in range(1, width):
        np.bitwise_and(x if spread is None else spread, np.uint64(((1 << 64) - 1) ^ ((1 << (8 * k - 1)) - 1)), out=tmp)
        if spread is None:
            spread = x + tmp
        else:
            spread += tmp
    return spread


def put_varint(out: np.ndarray, col: int, values: np.ndarray, width: int) -> None:
    """Padded varint of `width` bytes per row. Up to 8 bytes: spread the 7-bit groups into the bytes
    of one uint64 with the continuation bits set, then copy its first `width` bytes."""
    v = values.astype(np.int64, copy=False)
    if width <= 8:
        spread = spread_bits(v, width)
        spread |= np.uint64(int.from_bytes(b"\x80" * (width - 1), "little"))
        out[:, col : col + width] = spread.view(np.uint8).reshape(-1, 8)[:, :width]
        return
    for k in range(width):
        b = v.view(np.uint64) >> np.uint64(7 * k) if k else v.view(np.uint64)
        b = (b & np.uint64(0x7F)).astype(np.uint8)
        if k < width - 1:
            b |= 0x80
        out[:, col + k] = b


def varint_widths(values: np.ndarray) -> np.ndarray:
    """Bytes of the minimal varint of each int64 (negative ones take 10, as two's complement)."""
    v = values.astype(np.int64, copy=False)
    width = np.ones(v.size, np.int64)
    for k in range(1, 9):
        width += v >= (1 << (7 * k))
    width[v < 0] = 10
    return width


def put_varints_at(out: np.ndarray, at: np.ndarray, values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Write the minimal varint of values[i] (widths[i] bytes, varint_widths) at out[at[i]]; -> the
    positions after them."""
    v = values.astype(np.int64, copy=False).view(np.uint64)
    for k in range(int(widths.max()) if widths.size else 0):
        rows = np.flatnonzero(widths > k)
        byte = (v[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= (widths[rows] > k + 1).astype(np.uint64) << np.uint64(7)
        out[at[rows] + k] = byte
    return at + widths


def uwidth(values: np.ndarray) -> int:
    """Padded-varint width that holds every value (negative int64 take 10 bytes)."""
    if values.size == 0:
        return 1
    if int(values.min()) < 0:
        return 10
    return varint_width(int(values.max()))


def varint_width(v: int) -> int:
    return max(1, (int(v).bit_length() + 6) // 7)


def varint(v: int, width: int | None = None) -> bytes:
    if width is None and 0 <= v < 1 << 21:  # the track descriptors' uuids and lengths: no loop
        if v < 128:
            return SMALL_VARINTS[v]
        if v < 16384:
            return bytes((v & 0x7F | 0x80, v >> 7))
        return bytes((v & 0x7F | 0x80, (v >> 7) & 0x7F | 0x80, v >> 14))
    v &= (1 << 64) - 1
    width = width or varint_width(v)
    out = bytearray()
    for k in range(width):
        b = (v >> (7 * k)) & 0x7F
        out.append(b | 0x80 if k < width - 1 else b)
    if v >> (7 * width):
        raise ValueError(f"value {v} does not fit a {width}-byte varint")
    return bytes(out)


SMALL_VARINTS = [bytes([i]) for i in range(128)]


def tag(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def f_varint(field: int, v: int) -> bytes:
    return tag(field, 0) + varint(v)


def f_bytes(field: int, b: bytes) -> bytes:
    return tag(field, 2) + varint(len(b)) + b


def packet(body: bytes) -> bytes:
    return f_bytes(1, body)


def packet_layout(body: Layout) -> Layout:
    """A TracePacket record around `body` (field 1 of Trace)."""
    return Layout().message(1, body)
