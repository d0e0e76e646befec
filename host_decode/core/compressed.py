"""The one reader of input files that may be gzip-compressed: every place that opens a .gz input (torch traces,
foreign traces, per-PC JSON, the viewer's checks) reads it through `open_input`, which bounds what it
decompresses (size, and the size against the compressed bytes) and how long it reads, so that a small
file that inflates to gigabytes (a gzip bomb) is refused at once instead of filling memory.

Invariants, and the tests that guard them (tests/unit/host_decode/core/test_compressed_inputs.py):
- a gzip input decompressing to more than `ReadLimits.max_bytes`, or (unless --max-decompressed was given)
  to more than RATIO_GUARD times its compressed size beyond RATIO_FLOOR bytes, is a DecodeError naming the
  file, the bound and the flag that raises it; so is a read taking longer than `max_seconds`;
- a truncated or corrupt gzip stream is a DecodeError naming the file (never an OSError the CLI would pin
  on an output);
- plain files are read as they are.
`ikp` sets the limits from --max-decompressed / --read-timeout (cli/common.py add_read_limits) for the
command's duration; `read_limits(...)` does the same for API users.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import time
import zlib

from host_decode.core.errors import DecodeError

GZIP_MAGIC = b"\x1f\x8b"
RATIO_GUARD = 200  # gzip'd JSON traces inflate 5-30x; a stream past this ratio is a bomb, not a trace
RATIO_FLOOR = 64 << 20  # the ratio is judged only past this many decompressed bytes
READ_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class ReadLimits:
    max_bytes: int = 4 << 30  # decompressed bytes of one input
    max_seconds: float = 600.0  # reading one input
    ratio_guard: bool = True  # off once the user named max_bytes (--max-decompressed)


_limits = ReadLimits()


def current_limits() -> ReadLimits:
    return _limits


@contextlib.contextmanager
def read_limits(max_bytes: int | None = None, max_seconds: float | None = None):
    """Within: inputs read under these bounds (None keeps the current one). Naming max_bytes turns the ratio
    guard off: the user said how much is expected."""
    global _limits
    previous = _limits
    _limits = ReadLimits(
        max_bytes=previous.max_bytes if max_bytes is None else int(max_bytes),
        max_seconds=previous.max_seconds if max_seconds is None else float(max_seconds),
        ratio_guard=previous.ratio_guard and max_bytes is None,
    )
    try:
        yield _limits
    finally:
        _limits = previous


def size_text(n: float) -> str:
    """A byte count as people write it: 4 GiB, 1.5 MiB, 700 B."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f}".removesuffix(".0") + f" {unit}"
    return f"{int(n)} B"


def is_gzip(path: str | os.PathLike) -> bool:
    with open(path, "rb") as f:
        return f.read(len(GZIP_MAGIC)) == GZIP_MAGIC


class BoundedGzip(io.RawIOBase):
    """A read-only binary stream of a gzip file's decompressed bytes (every member), within ReadLimits."""

    def __init__(self, path: str | os.PathLike, limits: ReadLimits):
        self.path, self.limits = str(path), limits
        self._raw = open(path, "rb")
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._in_member = False  # the current decompressor has been fed part of a member
        self._feed = b""  # compressed bytes read but not yet fed (the start of the next member)
        self._pending = b""  # decompressed bytes not yet returned
        self._out = 0
        self._start = time.monotonic()
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending and not self._eof:
            self._fill()
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _fill(self) -> None:
        if time.monotonic() - self._start > self.limits.max_seconds:
            raise DecodeError(f"reading took longer than {self.limits.max_seconds:g} s (--read-timeout SECONDS "
                              "raises the bound)", source=self.path)
        data = self._inflate.unconsumed_tail or self._feed or self._raw.read(READ_BYTES)
        self._feed = b""
        if not self._in_member:
            data = data.lstrip(b"\0")  # zeros pad some gzip files after their last member
        if not data:
            if self._in_member or self._raw.read(1):
                raise DecodeError("not a readable gzip file: truncated or corrupt gzip stream (the file ends inside "
                                  "it)", source=self.path)
            self._eof = True
            return
        try:
            out = self._inflate.decompress(data, READ_BYTES)
        except zlib.error as e:
            raise DecodeError(f"not a readable gzip file: truncated or corrupt gzip stream ({e})",
                              source=self.path) from None
        self._in_member = True
        if self._inflate.eof:  # a member ended; another may follow
            self._feed = self._inflate.unused_data
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._in_member = False
        self._out += len(out)
        self._check()
        self._pending = out

    def _check(self) -> None:
        limits = self.limits
        if self._out > limits.max_bytes:
            raise DecodeError(f"decompresses to more than {size_text(limits.max_bytes)} "
                              "(--max-decompressed SIZE raises the bound)", source=self.path)
        read = max(self._raw.tell() - len(self._inflate.unconsumed_tail) - len(self._feed), 1)  # consumed
        if limits.ratio_guard and self._out > RATIO_FLOOR and self._out > RATIO_GUARD * read:
            raise DecodeError(f"decompresses to more than {RATIO_GUARD}x its compressed size ({size_text(self._out)} "
                              f"from {size_text(read)}): a gzip bomb, not a trace (--max-decompressed SIZE "
                              "allows it)", source=self.path)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_input(path: str | os.PathLike):
    """A binary stream of the file's contents: gunzipped within the current ReadLimits when it is gzip
    (buffered), the file itself otherwise."""
    if is_gzip(path):
        return io.BufferedReader(BoundedGzip(path, _limits), buffer_size=READ_BYTES)
    return open(path, "rb")


def read_input(path: str | os.PathLike, size: int | None = None) -> bytes:
    """The first `size` bytes of the file's contents (all of them for None), gunzipped when gzip."""
    with open_input(path) as f:
        return f.read() if size is None else f.read(size)
