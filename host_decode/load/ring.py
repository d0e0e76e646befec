"""What a launch ring says beyond the launches decoded (ikp_cute/ring.py): its block in every sidecar of a
``ring.save`` (and in ``ring.decode()``'s meta) and the ring summary PREFIX_ring.json that ``ring.save``
always writes, so that a window that recorded nothing still leaves its counts.

Invariants a change could break, with the test guarding each:
* The ring block is checked by the one schema (load.sidecar.RING_BLOCK) wherever it is read: a bad count
  is a DecodeError naming the file and the key
  (tests/unit/host_decode/load/test_sidecar.py::test_every_key_refuses_a_value_outside_its_set).
* The summary is written by the one writer (load.sidecar.sidecar_text, atomically) and read back by
  `no_captures_reason`: a folder holding no capture but a summary is refused saying why the ring left no
  capture (tests/unit/ikp_cute/test_ring.py::test_save_of_a_window_that_never_opened_says_so).
* `ring_counts` / `describe_ring` are the one reading of the counts that ``ikp stats`` and ``ikp report``
  show (tests/unit/ikp_cute/test_ring.py::test_stats_and_report_of_a_saved_ring_show_lost_launches_and_strays).
"""

from __future__ import annotations

from pathlib import Path

from host_decode.core.errors import DecodeError
from host_decode.core.model import Trace
from host_decode.load.sidecar import RING_FORMAT, RING_SUMMARY, read_json, ring_block, sidecar_text, validate


def write_ring_summary(directory: str | Path, prefix: str, kernel: str | None, block: dict, saved: list[int]) -> Path:
    """DIRECTORY/PREFIX_ring.json: the ring block and the launches saved as captures (validated, atomic)."""
    from host_decode.core.files import OutputFiles

    path = Path(directory) / f"{prefix}_ring.json"
    summary = {"format": RING_FORMAT, "kernel": kernel, "ring": block, "saved": saved}
    text = sidecar_text(summary, RING_SUMMARY, str(path))
    with OutputFiles(force=True) as out:
        out.add(path).write_text(text)
    return path


def ring_counts(trace: Trace) -> dict | None:
    """What a capture window's ring said about the launches of `trace` (None: not from a ring):
    {launches_seen, recorded, lost_launches, stray_records, launches_without_records, rings}. launches_seen
    counts every launch of the kernel since the session's count began; recorded = the ring slots filled
    (those without records among them); lost = launches in the window that found the ring full; stray
    records = records of lanes outside the session, counted per ring, not per launch."""
    meta = trace.meta or {}
    block = ring_block(meta, sidecar_name(meta, "trace"))
    return None if block is None else counts_of(block)


def counts_of(block: dict) -> dict:
    """ring_counts of a checked ring block (load.sidecar.ring_block)."""
    return {
        "launches_seen": block["launches_seen"],
        "recorded": block["filled"],
        "lost_launches": block["lost_launches"],
        "stray_records": block["stray_records"],
        "launches_without_records": block["launches_without_records"],
        "rings": int(block.get("rings", 1)),
    }


def describe_ring(counts: dict) -> str:
    """One line of ring_counts: 'ring: 6 launches seen, 2 recorded, 3 lost to a full ring, 40 stray records'."""
    without = counts["launches_without_records"]
    recorded = f"{counts['recorded']} recorded"
    if without:
        recorded += f" ({len(without)} without records: launch {', '.join(map(str, without[:8]))}" + (
            ", ...)" if len(without) > 8 else ")")
    rings = f" over {counts['rings']} rings" if counts["rings"] > 1 else ""
    return (f"ring{rings}: {counts['launches_seen']} launches seen, {recorded}, "
            f"{counts['lost_launches']} lost to a full ring, {counts['stray_records']} stray records")


def sidecar_name(meta: dict, fallback: str) -> str:
    """Where a trace's meta came from, for an error: its capture's sidecar, else `fallback` (a foreign trace's
    source is no path)."""
    import os

    from host_decode.core.files import sidecar_of

    source = meta.get("source")
    return str(sidecar_of(source)) if isinstance(source, (str, os.PathLike)) else fallback


def no_captures_reason(directory: Path) -> str:
    """Why a directory holds no capture: the ring summary's counts when ring.save left one there."""
    why = "directory holds no captures (BUFFER.npy files)"
    for summary in sorted(directory.glob("*_ring.json")):
        try:
            meta = read_json(summary)
        except (OSError, DecodeError):
            continue  # not a summary: the plain message stands
        if not isinstance(meta, dict) or meta.get("ring") is None:
            continue  # some other file of that name: not ours to judge
        block = ring_block(validate(meta, RING_SUMMARY, str(summary)), str(summary))
        counts = counts_of(block)
        window = block.get("window") or {}
        bounds = ", ".join(f"{k} {window[k]}" for k in ("start", "stop", "every") if k in window)
        reason = (f"the window{f' ({bounds})' if bounds else ''} recorded no launch" if not counts["recorded"]
                  else "no recorded launch wrote a record")
        return f"{why}: {reason} ({summary.name}: {describe_ring(counts)})"
    return why
