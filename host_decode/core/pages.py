"""Buffers the decoder may free as it goes: a .npy capture read into anonymous memory that only one decode
sees (`read_owned`, used by host_decode.load.capture.load_capture), whose pages `PageRelease` hands back to
the kernel once every chunk that reads them is decoded.

Invariants a change could break, with the test guarding each
(tests/unit/host_decode/core/test_decode.py::test_owned_buffer_decodes_like_a_loaded_one):
* An owned buffer decodes exactly like the same buffer read by np.load.
* A buffer of anyone else (a caller's array, a torch tensor's view) is never touched: only an array over an
  `OwnedBuffer` (found through views by `mapping_of`) is released.
* `read_owned` takes only what it can read whole (1-D little-endian int64/uint64, not truncated); anything
  else returns None and np.load reads it, or names what is wrong with it.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np


class OwnedBuffer(mmap.mmap):
    """Anonymous memory holding a buffer read from a .npy file, owned by one decode: pages it has finished
    with are handed back to the kernel (they then read as zero), so the buffer and the span table are
    never both whole in memory."""


def read_owned(path: Path) -> np.ndarray | None:
    """A 1-D little-endian int64/uint64 .npy read into an OwnedBuffer (for load_capture: nothing else sees the
    array); None for anything else (np.load then reads it, or names what is wrong with it)."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                return None
            shape, fortran, dtype = read_header[version](f)
            if len(shape) != 1 or fortran or dtype.str not in ("<i8", "<u8") or shape[0] == 0:
                return None
            if f.tell() + 8 * shape[0] > Path(path).stat().st_size:
                return None  # truncated: np.load says so
            # private, in huge pages as numpy's large arrays (shared never is): 80 MB read 3x faster
            private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
            mm = OwnedBuffer(-1, 8 * shape[0], **private)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                mm.madvise(mmap.MADV_HUGEPAGE)
            if f.readinto(mm) != 8 * shape[0]:
                return None
    except Exception:  # noqa: BLE001 -- anything odd about the file: np.load judges it and names it
        return None
    return np.frombuffer(mm, dtype=dtype, count=shape[0])


def mapping_of(buf: np.ndarray) -> OwnedBuffer | None:
    """The OwnedBuffer under an array (through views and the memoryview np.frombuffer keeps), or None."""
    base = buf
    while base is not None and not isinstance(base, OwnedBuffer):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base


class PageRelease:
    """Hands the pages of an owned buffer (OwnedBuffer) back to the kernel once every chunk that reads them is
    decoded: chunks go column by column, so after columns [0, c1) of every row are done, the whole pages
    inside each row's prefix are. Peak memory is then about the span table, not buffer + span table
    (tests/unit/host_decode/core/test_decode.py::test_owned_buffer_decodes_like_a_loaded_one). A buffer of anyone else
    is never touched."""

    def __init__(self, buf: np.ndarray, stride: int) -> None:
        self.map = mapping_of(buf) if hasattr(mmap, "MADV_DONTNEED") else None
        self.stride, self.done, self.rows = stride, 0, (buf.size - 1) // stride + 1
        self.step = max(1, (16 * mmap.PAGESIZE) // 8)  # release when rows advanced by >= 16 pages

    def __call__(self, c1: int) -> None:
        if self.map is None or (c1 - self.done < self.step and c1 < self.stride):
            return
        page, base = mmap.PAGESIZE, 8  # body slot 0 is buffer slot 1
        rows = np.arange(self.rows, dtype=np.int64) * (8 * self.stride) + base
        lo = -(-(rows + 8 * self.done) // page) * page  # whole pages inside [done, c1) of each row
        hi = (rows + 8 * c1) // page * page
        hi = np.minimum(hi, len(self.map) // page * page)
        for a, b in zip(lo.tolist(), hi.tolist()):
            if b > a:
                self.map.madvise(mmap.MADV_DONTNEED, a, b - a)
        self.done = c1
