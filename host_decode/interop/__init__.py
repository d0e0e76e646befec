"""Traces written by other intra-kernel tracers, read into ikp's trace model so that every analysis
(stats, diff, waits, report, view) works on them: NVIDIA IKET (its decoded JSON and its .pftrace) and
Triton Proton's intra-kernel mode (its Chrome trace).

Invariants a change could break (tests/unit/host_decode/interop/test_interop.py guards each, on real files in
examples/interop/):
* Detection is by content, never by extension alone: :func:`detect` reads the first bytes.
* Every foreign record is a span, an instant, or counted in the loss report's ``malformed`` bucket with a
  reason (a record of no kernel or grid: in the first one's report); what the foreign format cannot tell
  (drops it does not count, clock facts) is stated in ``trace.meta["source"]["cannot_tell"]``.
* Bad input never escapes as another exception: a bad launch-wide field is a DecodeError naming the file and
  the field, a bad record is counted; times and indices are bounded (interop/tables.py) so nothing overflows
  int64 and no table is sized by an index value.
* One Trace per kernel launch; lanes are (block, warp) with warp = the warp index in the block.
"""

from __future__ import annotations

from pathlib import Path

from host_decode.core.errors import DecodeError
from host_decode.core.model import Trace

KINDS = ("iket-json", "iket-pftrace", "proton-chrome")


def detect(path: str | Path) -> str | None:
    """The foreign format of `path` from its content, or None when it is none of ours to read."""
    from host_decode.interop import sniff

    return sniff.detect(path)


def describe(path: str | Path) -> str | None:
    """What a file `detect` does not claim looks like (a Chrome trace without Proton's naming, ...), or None
    when it may be an ikp capture."""
    from host_decode.interop import sniff

    return sniff.describe(path)


def read_foreign(path: str | Path) -> list[Trace]:
    """Every launch in a foreign trace file, one Trace each; DecodeError naming the file otherwise."""
    kind = detect(path)
    if kind == "iket-json":
        from host_decode.interop.iket import read_iket_json

        return read_iket_json(path)
    if kind == "iket-pftrace":
        from host_decode.interop.iket import read_iket_pftrace

        return read_iket_pftrace(path)
    if kind == "proton-chrome":
        from host_decode.interop.proton import read_proton_chrome

        return read_proton_chrome(path)
    raise DecodeError(not_readable(path), source=str(path))


def refuse_unreadable(path: str | Path) -> None:
    """A DecodeError saying what `path` looks like when it is JSON no reader of ikp's takes (so that it is
    not reported as a broken .npy buffer); nothing for a file that may be an ikp capture."""
    looks = describe(path)
    if looks:
        from host_decode.core.errors import DecodeError

        raise DecodeError(_not_readable(looks), source=str(path))


def not_readable(path: str | Path) -> str:
    """Why `path` is none of the formats ikp reads, saying what it looks like where that can be told."""
    return _not_readable(describe(path))


def _not_readable(looks: str | None) -> str:
    return (f"not a trace ikp can read{': it is ' + looks if looks else ''}; expected an ikp capture (.npy), an "
            "IKET trace (.trace.json / .pftrace) or a Proton intra-kernel Chrome trace (.chrome_trace)")
