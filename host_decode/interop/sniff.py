"""Content sniffing and reading for foreign trace files (gzip transparently). Every failure to read an
input is a DecodeError naming that input: a gzip error is an OSError, which the CLI would otherwise
report against the command's output file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from host_decode.core.compressed import read_input
from host_decode.core.errors import DecodeError

HEAD_BYTES = 1 << 16
# Proton's naming: pid "<kernel> Core<sm> CTA<n>" (also in its 'M' metadata events), tid "warp <w> (line <l>)"
PROTON_PID = rb'"pid"\s*:\s*"[^"]* Core\d+ CTA\d+"'
PROTON_TID = rb'"tid"\s*:\s*"warp \d+ \(line \d+\)"'


def head(path: str | Path, size: int | None = HEAD_BYTES) -> bytes:
    """The first `size` bytes of the file (all of it for None), gunzipped when it is gzip (through the one
    bounded reader, core.compressed: a gzip error or a bomb is a DecodeError naming the file)."""
    return read_input(path, size)


def read_json(path: str | Path, what: str):
    """The whole file parsed as JSON; DecodeError naming the file and `what` it should have been."""
    raw = head(path, size=None)
    try:
        return json.loads(raw)
    except RecursionError:
        raise DecodeError(f"{what} is nested too deeply to read", source=str(path)) from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise DecodeError(f"{what} does not parse: {e}", source=str(path)) from None


def detect(path: str | Path) -> str | None:
    raw = head(path)
    if raw[:6] == b"\x93NUMPY":
        return None  # an ikp capture: the decoder's job
    if raw[:1] == b"\x0a" and b"Warp" in raw and (b"CTA(" in raw or b"StackedRanges" in raw):
        return "iket-pftrace"  # a Perfetto Trace (field 1 packets) with IKET's track names
    text = raw.lstrip()
    # IKET's decoded JSON: top-level "launches" with "ranges"/"markers"/"locationTable"
    if text[:1] == b"{" and re.search(rb'"(launches|locationTable|stringTable|graphLaunches)"\s*:', text):
        return "iket-json"
    # Proton: a Chrome trace ({"traceEvents": [...]} or Chrome's bare array of events) with Proton's naming;
    # the pid alone also shows in the 'M' metadata that may fill the first bytes
    chrome = (text[:1] == b"{" and b'"traceEvents"' in text) or text[:1] == b"["
    if chrome and (re.search(PROTON_TID, text) or re.search(PROTON_PID, text)):
        return "proton-chrome"
    return None


def describe(path: str | Path) -> str | None:
    """What a file that `detect` does not claim looks like, for an error message; None when it may be an
    ikp capture (anything that is not JSON)."""
    text = head(path).lstrip()
    naming = "Proton's intra-kernel naming (pid '<kernel> Core<sm> CTA<n>', tid 'warp <w> (line <l>)')"
    if text[:1] == b"[":
        return f"a JSON array (Chrome's array form of a trace?) without {naming} in its first 64 KiB"
    if text[:1] == b"{" and b'"traceEvents"' in text:
        if re.search(rb'"traceEvents"\s*:\s*\[\s*\]', text):
            return "a Chrome trace with no events ('traceEvents' is empty)"
        return f"a Chrome trace without {naming} in its first 64 KiB"
    if text[:1] == b"{":
        return "a JSON object that is neither IKET's trace (no 'launches') nor a Chrome trace (no 'traceEvents')"
    return None
