"""Content sniffing for foreign trace files (first bytes only; gzip transparently)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

HEAD_BYTES = 1 << 16


def head(path: str | Path, size: int | None = HEAD_BYTES) -> bytes:
    """The first `size` bytes of the file (all of it for None), gunzipped when it is gzip."""
    with open(path, "rb") as f:
        raw = f.read(2)
    opener = gzip.open if raw == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        return f.read() if size is None else f.read(size)


def detect(path: str | Path) -> str | None:
    raw = head(path)
    if raw[:6] == b"\x93NUMPY":
        return None  # an ikp capture: the decoder's job
    if raw[:1] == b"\x0a" and b"Warp" in raw and (b"CTA(" in raw or b"StackedRanges" in raw):
        return "iket-pftrace"  # a Perfetto Trace (field 1 packets) with IKET's track names
    text = raw.lstrip()
    if text[:1] == b"{":
        # IKET's decoded JSON: top-level "launches" with "ranges"/"markers"/"locationTable"
        if re.search(rb'"(launches|locationTable|stringTable|graphLaunches)"\s*:', text):
            return "iket-json"
        # Proton: a Chrome trace whose events carry pid "<kernel> Core<sm> CTA<n>" and tid "warp <w> (line <l>)"
        if b'"traceEvents"' in text and re.search(rb'"tid"\s*:\s*"warp \d+ \(line \d+\)"', text):
            return "proton-chrome"
        return None
    return None
