"""Vectorized v1 decoder: raw buffer -> Trace (spans, instants, payloads, lanes, loss report).

How it works (no Python loop per record; per chunk of lanes only), module by module:
1. The buffer after the header is viewed as ``(rows, write_stride)``: column ``c`` holds the records
   of lane ``c`` in program order, so a transposed copy of a chunk of columns is lane-major and
   slot-ordered for free. A record whose tag names another lane than its column (or a lane past
   ``num_lanes``) is *malformed* (core/columns.py).
2. Per lane: records after the first FINALIZE are *after_finalize*; the 32-bit timer is unwrapped
   with the deltas between consecutive timed records (slot order). One writer per lane (cursor modes,
   peers' buffers) writes in time order, so deltas are unsigned (a region longer than 2**31 ns with
   nothing inside comes out right); the atomic and static modes (sidecar ``mode``,
   wire.OUT_OF_ORDER_MODES) reserve slots out of time order, so there they are signed, except from a
   region's BEGIN to its adjacent END. In time-ordered lanes a record whose timer jumps >= 2**31 ns away
   from both neighbours and back (a flipped high bit) is an *impossible_time* record: set aside (its
   partner, if any, is then unmatched) and given its predecessor's time, so the rest of its lane keeps
   its time (core/columns.py, core/timeline.py).
3. Pairing per (lane, event id) is a stack (core/pairing.py). Left-over BEGINs are *unmatched_begin*,
   an END at depth 0 is an *unmatched_end*; a pair whose END is earlier than its BEGIN (corrupted timer
   bits) is an *impossible_span* (both records), set aside so that everything else is still written.
   Payload instants (wire.PAYLOAD_IDS: a flag's address and value) carry data, not time: each goes to
   ``trace.payloads`` with the record it belongs to (the one before it in its lane: a user instant or a
   paired END), or to *payload_orphan* (core/columns.py; docs/flags.md).
4. Lanes are put on one 64-bit timeline: from their ANCHOR_LO/ANCHOR_HI pair when present (absolute
   ``%globaltimer`` ns), otherwise by the signed 32-bit distance of each lane's first record to a
   reference lane (lanes of one launch start far less than 2**31 ns apart). Each lane's origin is
   folded into the prefix sum of step 2 (core/timeline.py: Timeline), so times come out absolute with
   no extra pass; the assembly (`_assemble`) adds what a chunk could not know yet.

Speed: chunks of CHUNK_SLOTS slots keep the scratch arrays in the L2 cache; a chunk whose every slot
holds a record skips compaction; span rows are written as packed words (`_fill_spans`).

Memory: the span table is sized by an upper bound but only written rows are touched; a buffer that
load_capture read for this decode alone (core/pages.py: OwnedBuffer) gives its pages back as the column
chunks pass them (PageRelease), so buffer and span table are never both whole
(benchmarks/bigcap_bench.py). Input checks happen before anything is sized by them (write_stride: an
integer within [num_lanes, buffer length]; the inferred stride is checked on records spread over the
buffer).

Invariants a change could break, with the test guarding each:
* Every non-zero slot after the header is in exactly one loss bucket (LossReport checks it;
  tests/unit/host_decode/core/test_decode.py and tests/unit/host_decode/core/test_decode_props.py fuzz it).
* Chunking changes nothing: any CHUNK_SLOTS decodes like one chunk (tests/unit/host_decode/core/test_decode.py::
  test_many_chunks_decode_like_one, tests/unit/host_decode/core/test_decode_timeline.py).
* Unusable input (dtype, shape, header, stride) is a DecodeError naming the slot and source, raised
  before anything is sized by it (tests/unit/host_decode/core/test_decode.py::test_unusable_input_raises_decode_error,
  ::test_huge_write_stride_is_refused_before_allocating).
* The decoder needs numpy alone (tests/unit/host_decode/test_numpy_only.py).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.columns import decode_columns
from host_decode.core.errors import DecodeError
from host_decode.core.model import (
    INSTANT_DTYPE,
    LANE_DTYPE,
    LOSS_BUCKETS,
    PAYLOAD_DTYPE,
    SPAN_DTYPE,
    LossReport,
    Names,
    Trace,
)
from host_decode.core.pages import PageRelease
from host_decode.core.stride import check_stride, infer_write_stride
from host_decode.core.timeline import Timeline, aligned

CHUNK_SLOTS = 1 << 16  # slots decoded at a time: a chunk's scratch arrays stay in the L2 cache (2x faster than 1 << 20)


# --- input -----------------------------------------------------------------------------------------


def as_uint64(buffer: Any, source: str | None = None) -> np.ndarray:
    """numpy or torch int64/uint64 1-D buffer -> uint64 numpy view (no copy for numpy input)."""
    if hasattr(buffer, "detach") and hasattr(buffer, "cpu"):  # torch tensor, without importing torch
        buffer = buffer.detach().cpu().numpy()
    if not isinstance(buffer, np.ndarray):
        raise DecodeError(f"buffer must be a numpy array or torch tensor, got {type(buffer).__name__}", source=source)
    if buffer.dtype not in (np.dtype(np.int64), np.dtype(np.uint64)):
        raise DecodeError(f"wrong dtype {buffer.dtype}: a v1 buffer is int64 or uint64", source=source)
    if buffer.ndim != 1:
        raise DecodeError(f"wrong shape {buffer.shape}: a v1 buffer is one-dimensional", source=source)
    if buffer.size == 0:
        raise DecodeError("empty buffer: no header", slot=0, source=source)
    return np.ascontiguousarray(buffer).view(np.uint64)


def _check_header(buf: np.ndarray, source: str | None) -> tuple[int, int]:
    header = int(buf[0])
    if header == 0:
        raise DecodeError("missing header: slot 0 is zero (the header is (num_groups << 32) | num_blocks)", slot=0,
                          source=source)
    num_blocks, num_groups = wire.unpack_header(header)
    if num_blocks == 0 or num_groups == 0 or num_blocks * num_groups > wire.MAX_LANES:
        raise DecodeError(
            f"impossible header 0x{header:016x}: num_blocks={num_blocks}, num_groups={num_groups} "
            f"(each must be >= 1 and their product <= {wire.MAX_LANES})",
            slot=0,
            source=source,
        )
    return num_blocks, num_groups


# --- decode ----------------------------------------------------------------------------------------


def decode(
    buffer: Any,
    names: Names | dict | None = None,
    write_stride: int | None = None,
    meta: dict | None = None,
    source: str | None = None,
) -> Trace:
    """Decode a v1 buffer. `write_stride` defaults to the sidecar's (meta) or is inferred."""
    buf = as_uint64(buffer, source)
    num_blocks, num_groups = _check_header(buf, source)
    num_lanes = num_blocks * num_groups
    body = buf[1:]
    if body.size < num_lanes:
        raise DecodeError(
            f"truncated buffer: {body.size} slots after the header, fewer than the {num_lanes} lanes "
            f"(num_blocks={num_blocks} x num_groups={num_groups}) the header declares",
            slot=buf.size,
            source=source,
        )
    meta = dict(meta or {})
    given = "write_stride" if write_stride is not None else "the sidecar's write_stride"
    if write_stride is None:
        write_stride = meta.get("write_stride")
    if write_stride is None:
        write_stride = infer_write_stride(body, num_lanes)
    write_stride = check_stride(write_stride, given, num_lanes, body.size, source)
    meta["write_stride"] = write_stride
    mode = meta.get("mode")
    if mode is not None and mode not in wire.RECORDING_MODES:  # a misspelt out-of-order mode decodes 2**32 ns late
        raise DecodeError(f"'mode' must be one of {', '.join(map(repr, wire.RECORDING_MODES))}, got {mode!r:.60}",
                          source=source)
    in_time_order = mode not in wire.OUT_OF_ORDER_MODES
    if not isinstance(names, Names):
        names = Names.from_json(names or {})

    # spans go straight into one table sized by an upper bound (a span takes two non-zero slots), with
    # times on the provisional timeline of Timeline (final unless _assemble finds it must correct
    # them). Peak memory stays near the table itself plus one chunk's scratch.
    nonzero = int(np.count_nonzero(body))
    spans = np.empty(nonzero // 2 + 1, SPAN_DTYPE)
    dense = nonzero == body.size and body.size % write_stride == 0  # every slot written: no compaction
    timeline = Timeline()
    parts, at = [], 0
    step = _chunk_lanes(body.size, write_stride)
    release = PageRelease(buf, write_stride)
    for c0 in range(0, write_stride, step):
        part = decode_columns(body, c0, min(c0 + step, write_stride), write_stride, num_lanes, dense, timeline,
                               in_time_order)
        m = _fill_spans(spans[at:], part.pop("spans"), part, num_groups)
        part["span_range"] = (at, at + m)
        at += m
        parts.append(part)
        release(min(c0 + step, write_stride))
    spans = spans[:at] if at * 4 >= spans.size * 3 else spans[:at].copy()
    return _assemble(parts, spans, num_blocks, num_groups, write_stride, names, meta, source)


def _chunk_lanes(body_slots: int, write_stride: int) -> int:
    rows = max(1, math.ceil(body_slots / write_stride))
    return max(1, min(write_stride, CHUNK_SLOTS // rows))


def _assemble(parts, spans, num_blocks, num_groups, write_stride, names, meta, source) -> Trace:
    """Concatenate chunk results (per-lane arrays cover columns 0..write_stride) onto one timeline."""
    cat = lambda key: np.concatenate([p[key] for p in parts])  # noqa: E731
    records = cat("records")
    malformed_range = sum(p["malformed_range"] for p in parts)
    malformed_column = sum(p["malformed_column"] for p in parts)
    nonzero = int(records.sum()) + malformed_range + malformed_column
    if nonzero == 0:
        raise DecodeError("no records: every slot after the header is zero", slot=1, source=source)

    # one timeline: per-lane origin, absolute from anchors, else aligned to a reference lane
    first_raw, abs_base, anchored, has = cat("first_raw"), cat("abs_base"), cat("anchored"), cat("has")
    timed = cat("timed")
    absolute = bool(anchored.any())
    if absolute:
        ref_abs = int(abs_base[np.flatnonzero(anchored)[0]])
    else:
        ref_abs = int(first_raw[np.flatnonzero(timed)[0]]) if timed.any() else 0
    base = np.where(anchored, abs_base, aligned(np.where(timed, first_raw, ref_abs & 0xFFFF_FFFF), ref_abs))
    if not absolute and has.any() and base[has].min() < 0:
        base += 1 << 32  # stay non-negative; still equal to the device timer modulo 2**32
    missing = np.where(has, base - cat("applied"), 0)  # final origin minus the one the chunk applied

    instants = np.empty(sum(p["instants"]["loc"].size for p in parts), INSTANT_DTYPE)
    payloads = np.empty(sum(p["payloads"]["loc"].size for p in parts), PAYLOAD_DTYPE)
    at = at_payload = 0
    for p in parts:  # rarely needed (see Timeline): add what a chunk's origins missed, in place
        fix = missing[p["c0"] : p["c0"] + p["nloc"]].any()
        if fix:
            view = spans[p["span_range"][0] : p["span_range"][1]]
            origin = missing[view["lane"]]
            view["start_ns"] += origin
            view["end_ns"] += origin
        m = _fill(instants[at:], p["instants"], p, num_groups)
        k = _fill(payloads[at_payload:], p["payloads"], p, num_groups)
        if fix:
            instants["ts_ns"][at : at + m] += missing[instants["lane"][at : at + m]]
            rows = payloads[at_payload : at_payload + k]
            origin = missing[rows["lane"]]
            rows["ts_ns"] += origin
            rows["begin_ns"] += origin
        at += m
        at_payload += k

    lane_ids = np.flatnonzero(has)
    lanes = np.zeros(lane_ids.size, LANE_DTYPE)
    lanes["lane"] = lane_ids
    lanes["block"] = lane_ids // num_groups
    lanes["group"] = lane_ids % num_groups
    lanes["sm"] = cat("sm")[lane_ids]
    b = missing[lane_ids]
    lane_timed = timed[lane_ids]
    lanes["first_ns"] = np.where(lane_timed, b + cat("rel_min")[lane_ids], -1)  # -1: no timed record
    lanes["last_ns"] = np.where(lane_timed, b + cat("rel_max")[lane_ids], -1)
    has_fin = cat("has_fin")[lane_ids]
    lanes["finalize_ns"] = np.where(has_fin, b + cat("fin_rel")[lane_ids], -1)
    lanes["records"] = records[lane_ids]
    lanes["dropped"] = cat("dropped")[lane_ids]
    lanes["anchored"] = anchored[lane_ids]

    malformed = np.zeros(records.size, np.int64)
    for p in parts:
        np.add.at(malformed, p["malformed_loc"] + p["c0"], 1)
    counts = {bucket: (malformed if bucket == "malformed" else cat(bucket)) for bucket in LOSS_BUCKETS}
    touched = np.flatnonzero(has | (malformed > 0))
    per_lane = np.zeros(touched.size, [("lane", np.int64)] + [(bk, np.int64) for bk in LOSS_BUCKETS])
    per_lane["lane"] = touched  # malformed records are reported under the lane whose slot they occupy
    for bucket, c in counts.items():
        per_lane[bucket] = c[touched]
    totals = {bucket: int(c.sum()) for bucket, c in counts.items()}
    reasons = {k: v for k, v in (("lane_out_of_range", malformed_range), ("slot_of_another_lane", malformed_column))
               if v}
    bad_slots = cat("first_bad_slot")
    if bad_slots.size:
        meta.setdefault("first_malformed_slot", int(bad_slots.min()))
    loss = LossReport(nonzero_slots=nonzero, totals=totals, per_lane=per_lane, malformed_reasons=reasons,
                      dropped_on_device=int(lanes["dropped"].sum()))
    if source:
        meta.setdefault("source", str(source))
    return Trace(num_blocks=num_blocks, num_groups=num_groups, write_stride=write_stride, spans=spans,
                 instants=instants, lanes=lanes, loss=loss, names=names, absolute=absolute, meta=meta,
                 payloads=payloads)


# the span rows as words (lane|block int64, group int32, event|depth int32, start, end) on little-endian
_SPAN_WORDS = sys.byteorder == "little" and SPAN_DTYPE.itemsize == 32 and [
    (SPAN_DTYPE.fields[f][1], SPAN_DTYPE[f].itemsize) for f in SPAN_DTYPE.names
] == [(0, 4), (4, 4), (8, 4), (12, 2), (14, 2), (16, 8), (24, 8)]


def _fill_spans(out: np.ndarray, cols: dict, part: dict, num_groups: int) -> int:
    """Write one chunk's spans at the start of `out`; returns the row count. They are sorted by lane, so
    lane, block and group are repeats of per-lane values; writing 4- and 8-byte words of the 32-byte
    rows takes fewer strided passes than a field at a time."""
    per_lane = part["paired_begin"]
    m = int(per_lane.sum())
    view = out[:m]
    lanes = np.arange(part["c0"], part["c0"] + part["nloc"], dtype=np.int64)
    block, group = lanes // num_groups, lanes % num_groups
    if not _SPAN_WORDS:  # a layout or byte order the word writes do not know: a field at a time
        view["lane"], view["block"], view["group"] = (np.repeat(x, per_lane) for x in (lanes, block, group))
        for field in ("event", "depth", "start_ns", "end_ns"):
            view[field] = cols[field]
        return m
    words, halves = view.view(np.int64).reshape(m, 4), view.view(np.int32).reshape(m, 8)
    words[:, 0] = np.repeat(lanes | (block << 32), per_lane)
    halves[:, 2] = np.repeat(group.astype(np.int32), per_lane)
    event_depth = cols["depth"].astype(np.int32) << 16  # int16 depth in the high half (wraps as a cast would)
    event_depth |= cols["event"]
    halves[:, 3] = event_depth
    words[:, 2] = cols["start_ns"]
    words[:, 3] = cols["end_ns"]
    return m


def _fill(out: np.ndarray, cols: dict, part: dict, num_groups: int) -> int:
    """Write one chunk's rows (lane-relative times) at the start of `out`; returns the row count."""
    loc = cols["loc"]
    m = loc.size
    view = out[:m]
    c0, nloc = part["c0"], part["nloc"]
    lanes_here = np.arange(c0, c0 + nloc, dtype=np.int32)
    view["lane"] = loc + np.int32(c0)
    view["block"] = (lanes_here // num_groups)[loc]
    view["group"] = (lanes_here % num_groups)[loc]
    for field in out.dtype.names:
        if field in cols:
            view[field] = cols[field]
    return m
