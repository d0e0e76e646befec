"""Vectorized v1 decoder: raw buffer -> Trace (spans, instants, lanes, loss report).

How it works (no Python loop per record; per chunk of lanes only):
1. The buffer after the header is viewed as ``(rows, write_stride)``: column ``c`` holds the records
   of lane ``c`` in program order, so a transposed copy of a chunk of columns is lane-major and
   slot-ordered for free. A record whose tag names another lane than its column (or a lane past
   ``num_lanes``) is *malformed*.
2. Per lane: records after the first FINALIZE are *after_finalize*; the 32-bit timer is unwrapped
   with the deltas between consecutive timed records (slot order). One writer per lane (cursor modes,
   peers' buffers) writes in time order, so deltas are unsigned (a region longer than 2**31 ns with
   nothing inside comes out right); the atomic and static modes (sidecar ``mode``) reserve slots out of
   time order, so there they are signed, except from a region's BEGIN to its adjacent END.
3. Pairing per (lane, event id) is a stack, done with a clamped prefix sum (an END at depth 0 is an
   *unmatched_end*) and a radix sort by nesting level: inside one (event, lane, level) run BEGIN and
   END alternate, so each END pairs with the element before it. Left-over BEGINs are *unmatched_begin*;
   a pair whose END is earlier than its BEGIN (corrupted timer bits) is an *impossible_span* (both
   records), set aside so that everything else is still written. In time-ordered lanes a record whose
   timer jumps >= 2**31 ns away from both neighbours and back (a flipped high bit) is an
   *impossible_time* record: set aside (its partner, if any, is then unmatched) and given its
   predecessor's time, so the rest of its lane keeps its time.
4. Lanes are put on one 64-bit timeline: from their ANCHOR_LO/ANCHOR_HI pair when present (absolute
   ``%globaltimer`` ns), otherwise by the signed 32-bit distance of each lane's first record to a
   reference lane (lanes of one launch start far less than 2**31 ns apart). Each lane's origin is
   folded into the prefix sum of step 2 (see _Timeline), so times come out absolute with no extra pass.

Speed: chunks of CHUNK_SLOTS slots keep the scratch arrays in the L2 cache; a chunk whose every slot
holds a record skips compaction; span rows are written as packed words (_fill_spans).

Memory: the span table is sized by an upper bound but only written rows are touched; a buffer that
load_capture read for this decode alone (_NpyMap) gives its pages back as the column chunks pass them
(_PageRelease), so buffer and span table are never both whole (benchmarks/bigcap_bench.py). Input
checks happen before anything is sized by them (write_stride: an integer within [num_lanes, buffer
length]; the inferred stride is checked on records spread over the buffer).

Invariant (LossReport checks it; tests/test_decode.py fuzzes it): every non-zero slot after the header
is in exactly one loss bucket.
"""

from __future__ import annotations

import json
import math
import mmap
import sys
from pathlib import Path
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.core.files import sidecar_of
from host_decode.core.model import (
    INSTANT_DTYPE,
    LANE_DTYPE,
    LOSS_BUCKETS,
    SPAN_DTYPE,
    LossReport,
    Names,
    Trace,
)
from host_decode.core.stride import check_stride, infer_write_stride

CHUNK_SLOTS = 1 << 16  # slots decoded at a time: a chunk's scratch arrays stay in the L2 cache (2x faster than 1 << 20)
_ORIGIN_LIMIT = 1 << 62  # origins beyond this are added after decoding (keeps int64 sums exact)

_BEGIN, _END, _INSTANT, _FINALIZE = (int(t) for t in wire.EventType)
OUT_OF_ORDER_MODES = ("atomic", "static")  # sidecar modes whose slots are not in time order within a lane
_BUCKET_INDEX = {name: i for i, name in enumerate(LOSS_BUCKETS)}


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
    in_time_order = meta.get("mode") not in OUT_OF_ORDER_MODES
    if not isinstance(names, Names):
        names = Names.from_json(names or {})

    # spans go straight into one table sized by an upper bound (a span takes two non-zero slots), with
    # times on the provisional timeline of _Timeline (final unless _assemble finds it must correct
    # them). Peak memory stays near the table itself plus one chunk's scratch.
    nonzero = int(np.count_nonzero(body))
    spans = np.empty(nonzero // 2 + 1, SPAN_DTYPE)
    dense = nonzero == body.size and body.size % write_stride == 0  # every slot written: no compaction
    timeline = _Timeline()
    parts, at = [], 0
    step = _chunk_lanes(body.size, write_stride)
    release = _PageRelease(buf, write_stride)
    for c0 in range(0, write_stride, step):
        part = _decode_columns(body, c0, min(c0 + step, write_stride), write_stride, num_lanes, dense, timeline,
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


def _decode_columns(body: np.ndarray, c0: int, c1: int, stride: int, num_lanes: int, dense: bool, timeline: _Timeline,
                    in_time_order: bool = True) -> dict:
    """Decode the records of slot columns [c0, c1) (lanes c0..c1-1), lane-major in program order.

    in_time_order: each lane's slots are in time order (one writer per lane: the cursor modes and the
    peers' buffers), so steps between consecutive records are unsigned 32-bit (a region longer than
    2**31 ns with nothing inside decodes right); False for modes that reserve slots ahead of time
    (atomic, static), whose steps are signed except from a region's BEGIN to its adjacent END.

    Per-lane arrays are indexed by local lane (lane - c0); per-record index sets are kept sorted so
    per-lane counts are searchsorted differences, never a pass over all records. Times come out on the
    provisional timeline of `timeline` (per-lane origin `applied`, corrected by _assemble if needed)."""
    nloc = c1 - c0
    timer, tag, counts, flat, rows = _gather(body, c0, c1, stride, dense)
    lane, event, etype = wire.tag_fields(tag)
    del tag
    out: dict[str, Any] = {"c0": c0, "nloc": nloc}

    # malformed: the tag names another lane than the slot's column, or a lane that does not exist
    columns = np.arange(c0, c1, dtype=np.uint32)
    if flat is None:  # every slot of the chunk holds a record: compare row-wise, no per-record column array
        malformed = (lane.reshape(nloc, rows) != columns[:, None]).reshape(-1)
    else:
        malformed = lane != np.repeat(columns, counts)
    if c1 > num_lanes:
        malformed |= lane >= num_lanes
    bad = np.flatnonzero(malformed) if malformed.any() else np.zeros(0, np.int64)
    del malformed
    out["malformed_loc"] = out["first_bad_slot"] = bad  # (empty) unless some are malformed
    out["malformed_range"] = out["malformed_column"] = 0
    if bad.size:
        pos = bad if flat is None else flat[bad]  # position in the (nloc, rows) chunk
        out["malformed_loc"] = pos // rows
        out["malformed_range"] = int((lane[bad] >= num_lanes).sum())
        out["malformed_column"] = bad.size - out["malformed_range"]
        bad_slots = 1 + c0 + out["malformed_loc"] + (pos % rows) * stride
        out["first_bad_slot"] = bad_slots[[bad_slots.argmin()]]
        ok = np.ones(lane.size, bool)
        ok[bad] = False
        timer, lane, event, etype = timer[ok], lane[ok], event[ok], etype[ok]
        counts = counts - np.bincount(out["malformed_loc"], minlength=nloc)
    lane -= np.uint32(c0)  # in place: lane is ours
    loc = lane.view(np.int32)
    del lane

    n = loc.size
    has = counts > 0
    lane_loc = np.flatnonzero(has)
    bounds = np.concatenate(([0], np.cumsum(counts[has])))
    starts = bounds[:-1]
    per_lane = lambda idx: _per_lane(idx, bounds, lane_loc, nloc)  # noqa: E731
    out["records"] = counts.astype(np.int64)

    # records after the first FINALIZE of their lane are set aside (after_finalize)
    is_fin = etype == _FINALIZE
    fin = np.flatnonzero(is_fin)
    fin_is_last = bounds[np.minimum(np.searchsorted(bounds, fin + 1), bounds.size - 1)] == fin + 1
    after = np.zeros(0, np.int64)
    if not fin_is_last.all():
        cf = np.cumsum(is_fin, dtype=np.int32)
        before_lane = (cf - is_fin)[starts]
        after_mask = (cf - is_fin - np.repeat(before_lane, np.diff(bounds))) > 0
        after = np.flatnonzero(after_mask)
        keep = ~after_mask
        out["after_finalize"] = per_lane(after)
        timer, loc, event, etype = timer[keep], loc[keep], event[keep], etype[keep]
        n = loc.size
        starts = np.flatnonzero(np.r_[True, loc[1:] != loc[:-1]]) if n else np.zeros(0, np.int64)
        bounds = np.r_[starts, n]
        lane_loc = loc[starts].astype(np.int64)
        fin = np.flatnonzero(etype == _FINALIZE)
    else:
        out["after_finalize"] = np.zeros(nloc, np.int64)
    del is_fin
    out["finalize"] = per_lane(fin)

    # instants: anchors and drop counts are ours; the rest are the user's
    inst = np.flatnonzero(etype == _INSTANT)
    inst_ev = event[inst]
    hi = inst[inst_ev == wire.ANCHOR_HI_EVENT_ID]
    lo = inst[inst_ev == wire.ANCHOR_LO_EVENT_ID]
    dropped = inst[inst_ev == wire.DROPPED_EVENT_ID]
    user = inst[(inst_ev < wire.DROPPED_EVENT_ID)]
    out["instant"] = per_lane(inst)

    # ANCHOR_HI and DROPPED carry no time: they take the time of the nearest timed record of their lane
    # (the one before, else the one after); a lane with no timed record at all has no time (`timed`)
    t = timer
    untimed = np.sort(np.concatenate((hi, dropped))) if dropped.size else hi  # disjoint: different ids
    timed = np.ones(nloc, bool)
    if untimed.size:
        t = timer.copy()
        source, lane_untimed = _timed_neighbour(untimed, loc, bounds, lane_loc, nloc)
        t[untimed] = t[source]
        timed[lane_untimed] = False
    # a record whose timer jumps >= 2**31 ns away from both neighbours of its lane and back (a flipped
    # high bit) would shift the rest of its lane by 2**32 ns under unsigned steps: set it aside
    outlier = _timer_outliers(t, bounds) if in_time_order else np.zeros(0, np.int64)
    out["impossible_time"] = np.zeros(nloc, np.int64)
    if outlier.size:
        if t is timer:
            t = timer.copy()
        t[outlier] = t[outlier - 1]  # a neutral time: the step out of it becomes neighbour to neighbour
        outlier = outlier[np.isin(outlier, lo, invert=True) & (etype[outlier] != _FINALIZE)]
        lost_instants = outlier[np.isin(outlier, user)]
        user = np.setdiff1d(user, lost_instants, assume_unique=True)
        inst = np.setdiff1d(inst, lost_instants, assume_unique=True)
        out["instant"] = per_lane(inst)
        etype = etype.copy()
        etype[outlier] = _INSTANT  # out of the pairing: its partner, if any, is left unmatched
        out["impossible_time"] = per_lane(outlier)
    first_raw = _scatter(nloc, lane_loc, t[starts].astype(np.int64), fill=-1)
    first_raw[~timed] = -1
    out["first_raw"] = first_raw
    out["has"] = has if not after.size else out["records"] > out["after_finalize"]
    out["timed"] = out["has"] & timed

    # anchors: absolute ns of the ANCHOR_LO read of each anchored lane
    lo_first, hi_first = _first_of_lane(loc, lo, nloc), _first_of_lane(loc, hi, nloc)
    anchored = (lo_first >= 0) & (hi_first >= 0)
    a = np.flatnonzero(anchored)
    # an ANCHOR_HI at or past 2**30 puts the lane at or past 2**62 ns (year 2116): corrupted bits, not a
    # %globaltimer reading. It is set aside (impossible_time) and its lane placed as an unanchored one,
    # so that no time comes near the int64 limit
    bad_hi = hi_first[a][timer[hi_first[a]] >= np.uint32(_MAX_ANCHOR_HI)]
    if bad_hi.size:
        anchored[loc[bad_hi]] = False
        a = np.flatnonzero(anchored)
        inst = np.setdiff1d(inst, bad_hi, assume_unique=True)
        out["instant"] = per_lane(inst)
        out["impossible_time"] = out["impossible_time"] + per_lane(bad_hi)
        outlier = np.concatenate((outlier, bad_hi))
    anchor_ns = np.full(nloc, -1, np.int64)
    anchor_ns[a] = (timer[hi_first[a]].astype(np.int64) << 32) | timer[lo_first[a]].astype(np.int64)

    # one 64-bit timeline per lane: signed 32-bit steps between consecutive records (program order),
    # each lane's running sum starting at its (provisional) origin, so times come out absolute
    applied = timeline.origins(first_raw, anchor_ns, anchored, lane_loc)
    out["applied"] = applied
    d = np.empty(n, np.int64)
    if n:
        d[0] = 0
        step = np.subtract(t[1:], t[:-1])  # uint32 difference: the step modulo 2**32
        if in_time_order:  # one writer, slots in program order: time never goes back, steps are unsigned
            d[1:] = step
        else:  # slots reserved out of time order: signed steps, except a region's own begin -> end
            d[1:] = step.view(np.int32)
            own = np.flatnonzero((etype[1:] == _END) & (etype[:-1] == _BEGIN) & (event[1:] == event[:-1]))
            d[own + 1] = step[own]
        d[starts] = 0
        lane_end = np.add.reduceat(d, starts)
        origin = applied[lane_loc]
        lane_end += origin
        d[starts] = origin
        d[starts[1:]] -= lane_end[:-1]  # makes the running sum restart at every lane's origin
    rel = np.cumsum(d)
    del d
    out["rel_min"] = _scatter(nloc, lane_loc, np.minimum.reduceat(rel, starts) if n else rel[:0], fill=0)
    out["rel_max"] = _scatter(nloc, lane_loc, np.maximum.reduceat(rel, starts) if n else rel[:0], fill=0)
    abs_base = np.full(nloc, -1, np.int64)
    abs_base[a] = anchor_ns[a] - (rel[lo_first[a]] - applied[a])  # origin: the anchor minus its lane-relative time
    out["anchored"], out["abs_base"] = anchored, abs_base

    # per-lane facts
    sm = np.full(nloc, -1, np.int64)
    fin_rel = np.full(nloc, -1, np.int64)
    sm[loc[fin]] = event[fin]
    fin_rel[loc[fin]] = rel[fin]
    out["sm"], out["fin_rel"], out["has_fin"] = sm, fin_rel, out["finalize"] > 0
    out["dropped"] = np.zeros(nloc, np.int64)
    if dropped.size:
        counts = np.bincount(loc[dropped], weights=timer[dropped].astype(np.float64), minlength=nloc)
        out["dropped"] = counts.astype(np.int64)

    # pairing
    not_be = np.concatenate((inst, fin, outlier))
    begins, begin_event, ends, depth, unmatched_begin, unmatched_end = _pair(etype, event, loc, bounds, not_be)
    impossible = rel[ends] < rel[begins]  # an END before its BEGIN: corrupted records (bit flips)
    out["impossible_span"] = np.zeros(nloc, np.int64)
    if impossible.any():
        out["impossible_span"] = 2 * per_lane(begins[impossible])  # both records of the pair
        keep = ~impossible
        begins, begin_event, ends, depth = begins[keep], begin_event[keep], ends[keep], depth[keep]
    out["paired_begin"] = per_lane(begins)
    out["paired_end"] = out["paired_begin"]  # pairs never cross lanes
    out["unmatched_begin"] = per_lane(unmatched_begin)
    out["unmatched_end"] = per_lane(unmatched_end)
    out["spans"] = {"event": begin_event, "depth": depth, "start_ns": rel[begins], "end_ns": rel[ends]}
    out["instants"] = {"loc": loc[user], "event": event[user], "ts_ns": rel[user]}
    return out


def _timer_outliers(t: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sorted indices of records whose unsigned steps in and out (same lane) are both >= 2**31 ns: a
    flipped high timer bit (the steps are ~2**31 there and ~2**31 back). A single long step (a region
    longer than 2**31 ns with nothing inside, a lane idle that long) is kept. The one legal history this
    sets aside: a lane idle for more than 2**31 ns (2.1 s) just before AND just after one record, which
    32-bit timers cannot tell from a flipped bit. tests/test_decode.py::test_flipped_timer_bit_*."""
    if t.size < 3:
        return np.zeros(0, np.int64)
    step = np.subtract(t[1:], t[:-1])
    jump = step >= np.uint32(1 << 31)
    if not jump.any():
        return np.zeros(0, np.int64)
    jump[bounds[1:-1] - 1] = False  # from the last record of a lane to the first of the next
    into = np.flatnonzero(jump[:-1] & jump[1:]) + 1  # record k: jump into it (k-1 -> k) and out (k -> k+1)
    return into.astype(np.int64)


_MAX_ANCHOR_HI = 1 << 30  # ANCHOR_HI words from here on are impossible (times >= 2**62 ns)


class _Timeline:
    """Provisional per-lane origins while chunks are decoded, chosen as _assemble will choose them from
    what is known so far (the reference lane: the first anchored lane, else the first lane with
    records). Exact for the usual buffers (anchors first in their lane, or none at all); otherwise
    _assemble adds the difference to the final origin."""

    def __init__(self) -> None:
        self.ref: int | None = None
        self.absolute = False

    def origins(self, first_raw: np.ndarray, anchor_ns: np.ndarray, anchored: np.ndarray,
                lane_loc: np.ndarray) -> np.ndarray:
        a = np.flatnonzero(anchored)
        if a.size and not self.absolute:
            self.ref, self.absolute = int(anchor_ns[a[0]]), True
        elif self.ref is None and (first_raw >= 0).any():
            self.ref = int(first_raw[np.flatnonzero(first_raw >= 0)[0]])
        if self.ref is None:
            return np.zeros(first_raw.size, np.int64)
        origin = np.where(anchored, anchor_ns, _aligned(np.where(first_raw >= 0, first_raw, self.ref), self.ref))
        used = origin[lane_loc]
        if ((used >= _ORIGIN_LIMIT) | (used <= -_ORIGIN_LIMIT)).any():
            return np.zeros(first_raw.size, np.int64)  # far from zero: _assemble adds it
        return origin


def _aligned(first_raw: np.ndarray, ref_abs: int) -> np.ndarray:
    """Each lane's origin on the reference lane's timeline: the signed 32-bit distance of its first raw
    timer value from the reference's (lanes of one launch start far less than 2**31 ns apart)."""
    return ref_abs + (((first_raw - (ref_abs & 0xFFFF_FFFF) + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31))


def _gather(body: np.ndarray, c0: int, c1: int, stride: int, dense: bool):
    """Non-zero records of columns [c0, c1), lane-major (a transposed copy of the chunk), as (timer,
    tag) uint32 arrays, with each column's record count, their flat positions in the (lanes, rows)
    chunk (None when every slot of the chunk holds a record: positions are then the record indices)
    and the row length."""
    full_rows = body.size // stride
    nloc = c1 - c0
    if dense and sys.byteorder == "little":  # transpose the two halves straight into their arrays
        halves = body.view(np.uint32).reshape(full_rows, stride, 2)[:, c0:c1]
        timer, tag = (np.ascontiguousarray(halves[:, :, k].T).reshape(-1) for k in (1, 0))
        return timer, tag, np.full(nloc, full_rows, np.int64), None, full_rows
    block = body[: full_rows * stride].reshape(full_rows, stride)[:, c0:c1].T
    tail = body[full_rows * stride :]
    if c0 < tail.size:  # a partial last row (a buffer that is not a whole number of rows)
        extra = np.zeros((nloc, 1), np.uint64)
        part = tail[c0:c1]
        extra[: part.size, 0] = part
        block = np.concatenate([block, extra], axis=1)
    block = np.ascontiguousarray(block).reshape(-1)
    rows = block.size // nloc
    if dense or np.count_nonzero(block) == block.size:
        return *wire.split_records(block), np.full(nloc, rows, np.int64), None, rows
    flat = np.flatnonzero(block != 0)  # (5x faster than on the uint64 values)
    at = np.searchsorted(flat, np.arange(0, block.size + 1, rows))
    if sys.byteorder == "little":  # gather each half straight from the chunk
        halves = block.view(np.uint32)
        return halves[1::2][flat], halves[0::2][flat], at[1:] - at[:-1], flat, rows
    return *wire.split_records(block[flat]), at[1:] - at[:-1], flat, rows


def _per_lane(idx: np.ndarray, bounds: np.ndarray, lane_loc: np.ndarray, nloc: int) -> np.ndarray:
    """How many of the sorted record indices idx fall in each local lane (`bounds`: the record ranges
    of the lanes lane_loc)."""
    if not idx.size:
        return np.zeros(nloc, np.int64)
    at = np.searchsorted(idx, bounds)
    counts = at[1:] - at[:-1]
    return counts if lane_loc.size == nloc else _scatter(nloc, lane_loc, counts)


def _scatter(nloc: int, lane_loc: np.ndarray, values: np.ndarray, fill: int = 0) -> np.ndarray:
    out = np.full(nloc, fill, np.int64)
    out[lane_loc] = values
    return out


def _first_of_lane(loc: np.ndarray, idx: np.ndarray, nloc: int) -> np.ndarray:
    """Index of the first of the (sorted) record indices idx in each lane, -1 where none."""
    first = np.full(nloc, -1, np.int64)
    if idx.size:
        lanes = loc[idx]
        keep = np.empty(lanes.size, bool)
        keep[0] = True
        np.not_equal(lanes[1:], lanes[:-1], out=keep[1:])
        first[lanes[keep]] = idx[keep]
    return first


def _timed_neighbour(untimed: np.ndarray, loc: np.ndarray, bounds: np.ndarray, lane_loc: np.ndarray, nloc: int):
    """For sorted indices of untimed records: the index of the nearest timed record of the same lane,
    the one before if any, else the one after (so a lane that opens with ANCHOR_HI or DROPPED takes its
    first timed record's time, never its drop count or another lane's time); and the local lanes that
    hold no timed record at all (their untimed records point at themselves).
    Guarded by tests/test_decode.py::test_untimed_first_record_takes_the_first_timed_time."""
    n = loc.size
    is_timed = np.ones(n, bool)
    is_timed[untimed] = False
    timed_idx = np.flatnonzero(is_timed)
    lane_start = np.zeros(nloc, np.int64)
    lane_stop = np.zeros(nloc, np.int64)
    lane_start[lane_loc], lane_stop[lane_loc] = bounds[:-1], bounds[1:]
    lanes = loc[untimed]
    k = np.searchsorted(timed_idx, untimed)  # timed_idx[k - 1] < u < timed_idx[k]
    before = timed_idx[np.maximum(k - 1, 0)] if timed_idx.size else untimed
    after = timed_idx[np.minimum(k, timed_idx.size - 1)] if timed_idx.size else untimed
    has_before = (k > 0) & (before >= lane_start[lanes])
    has_after = (k < timed_idx.size) & (after < lane_stop[lanes])
    source = np.where(has_before, before, np.where(has_after, after, untimed))
    none = ~(has_before | has_after)
    return source, np.unique(lanes[none]).astype(np.int64)


def _pair(etype, event, loc, bounds, not_be):
    """Stack pairing per (lane, event id) of the BEGIN/END records among all records of a chunk
    (lane-major program order; `bounds` are the lane boundaries, `not_be` the indices of the other
    records, in any order).

    Returns sorted record indices of paired begins, their event ids, the matching ends (same order),
    each span's depth (paired regions of the lane open at its begin), and sorted unmatched begins /
    ends. Fast path: when every lane is balanced and nests properly across ids (the usual case), pairs
    come from one pass per nesting level. Otherwise the general path pairs per (event, lane)."""
    n = etype.size
    step = (etype == _BEGIN).view(np.int8) - (etype == _END).view(np.int8)
    shift = n.bit_length()  # partner packs (depth << shift) | end index; both are < n
    if n and 2 * shift < 63:
        s = np.cumsum(step, dtype=np.int32)
        if s.min() >= 0 and not s[bounds[1:] - 1].any():
            level = s  # in place: a BEGIN's level is its depth after the push, an END's before the pop
            level += step < 0
            level[not_be] = 0
            partner = np.empty(n, np.int64)
            if _pair_by_level(level, partner, shift) * 2 == n - not_be.size:
                bi = np.flatnonzero(step > 0)
                end_depth = partner[bi]
                ends = end_depth & ((1 << shift) - 1)
                begin_event = event[bi]
                if (begin_event == event[ends]).all():  # else regions of different ids overlap
                    none = np.zeros(0, np.int64)
                    return bi, begin_event, ends, end_depth >> shift, none, none
    be = np.flatnonzero(step != 0)
    begins, ends, depth, ub, ue = _pair_general(be, step[be].astype(np.int32), event[be], loc[be])
    return begins, event[begins], ends, depth, ub, ue


def _pair_by_level(level: np.ndarray, partner: np.ndarray, shift: int) -> int:
    """Balanced, properly nested records: among the records of one level (program order) BEGIN and
    END alternate, so the pairs are (0, 1), (2, 3), ... of each level. Fills partner[begin] with
    (depth << shift) | end and returns the number of pairs (-1 if a level is not alternating); the
    caller checks that the ids of each pair agree."""
    top = int(level.max())
    if top > 8:  # deep nesting: one sort instead of a pass per level
        order = _sort_small(level)
        order = order[np.searchsorted(level[order], 1) :]
        b, e = order[0::2], order[1::2]
        if b.size != e.size:
            return -1
        partner[b] = e | (level[b].astype(np.int64) - 1) << shift
        return b.size
    pairs = 0  # shallow nesting (the usual case): a pass per level beats a sort
    for lv in range(1, top + 1):
        idx = np.flatnonzero(level == lv)
        b, e = idx[0::2], idx[1::2]
        if b.size != e.size:
            return -1
        partner[b] = e | (lv - 1) << shift if lv > 1 else e
        pairs += b.size
    return pairs


def _pair_general(be, step, event, loc):
    m = be.size
    pr = np.argsort(event.astype(np.uint16), kind="stable")  # radix sort: (event, lane, program order)
    st = step[pr].astype(np.int64)
    key = event[pr].astype(np.int64) * (1 << 32) + loc[pr]
    g_first = np.r_[True, key[1:] != key[:-1]] if m else np.zeros(0, bool)
    g = np.cumsum(g_first) - 1
    s = np.cumsum(st)
    g_starts = np.flatnonzero(g_first)
    s_in = s - np.repeat((s - st)[g_starts], np.diff(np.r_[g_starts, m]))  # running sum inside the group
    big = 2 * m + 2
    run_min = np.minimum.accumulate(s_in - big * g) + big * g  # segmented running minimum
    depth_after = s_in - np.minimum(run_min, 0)  # stack depth, unmatched ENDs ignored
    prev_depth = np.r_[0, depth_after[:-1]]
    prev_depth[g_first] = 0
    unmatched_end = (st < 0) & (prev_depth == 0)
    level = np.where(st > 0, depth_after, prev_depth)
    cand = np.flatnonzero(~unmatched_end)
    order = cand[_sort_small(level[cand])]
    # inside each (level, group) run BEGIN and END alternate: an END pairs with its predecessor
    o_st, o_g = st[order], g[order]
    is_pair_end = np.zeros(order.size, bool)
    is_pair_end[1:] = (o_st[1:] < 0) & (o_g[1:] == o_g[:-1])
    e_pos = np.flatnonzero(is_pair_end)
    if (o_st[e_pos - 1] < 0).any():
        raise AssertionError("pairing invariant broken: an END paired with an END")
    b_sub, e_sub = pr[order[e_pos - 1]], pr[order[e_pos]]  # indices into be
    by_begin = np.argsort(b_sub, kind="stable")
    b_sub, e_sub = b_sub[by_begin], e_sub[by_begin]
    paired = np.zeros(m, np.int64)
    paired[b_sub] = 1
    paired[e_sub] = -1
    open_before = np.cumsum(paired) - paired  # pairs stay in their lane, so lanes balance
    unmatched_b = np.ones(m, bool)
    unmatched_b[b_sub] = False
    unmatched_b &= step > 0
    um_end = np.sort(pr[unmatched_end])
    return be[b_sub], be[e_sub], open_before[b_sub], be[np.flatnonzero(unmatched_b)], be[um_end]


def _sort_small(values: np.ndarray) -> np.ndarray:
    """Stable argsort; a radix sort when the values fit 16 bits (nesting levels always do in practice)."""
    if values.size and values.min() >= 0 and values.max() < (1 << 16):
        return np.argsort(values.astype(np.uint16), kind="stable")
    return np.argsort(values, kind="stable")


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
    base = np.where(anchored, abs_base, _aligned(np.where(timed, first_raw, ref_abs & 0xFFFF_FFFF), ref_abs))
    if not absolute and has.any() and base[has].min() < 0:
        base += 1 << 32  # stay non-negative; still equal to the device timer modulo 2**32
    missing = np.where(has, base - cat("applied"), 0)  # final origin minus the one the chunk applied

    instants = np.empty(sum(p["instants"]["loc"].size for p in parts), INSTANT_DTYPE)
    at = 0
    for p in parts:  # rarely needed (see _Timeline): add what a chunk's origins missed, in place
        fix = missing[p["c0"] : p["c0"] + p["nloc"]].any()
        if fix:
            view = spans[p["span_range"][0] : p["span_range"][1]]
            origin = missing[view["lane"]]
            view["start_ns"] += origin
            view["end_ns"] += origin
        m = _fill(instants[at:], p["instants"], p, num_groups)
        if fix:
            instants["ts_ns"][at : at + m] += missing[instants["lane"][at : at + m]]
        at += m

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
                 instants=instants, lanes=lanes, loss=loss, names=names, absolute=absolute, meta=meta)


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


# --- captures on disk ------------------------------------------------------------------------------


def read_sidecar(path: str | Path) -> dict:
    """The JSON sidecar of a capture (BUFFER.json next to BUFFER.npy: files.sidecar_of, the file outputs
    never replace); {} when there is none."""
    side = sidecar_of(path)
    if not side.exists():
        return {}
    try:
        obj = json.loads(side.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"sidecar is not valid UTF-8 JSON: {e}", source=str(side)) from None
    except RecursionError:
        raise DecodeError("sidecar is nested too deeply to be a capture sidecar", source=str(side)) from None
    if not isinstance(obj, dict):
        raise DecodeError("sidecar must be a JSON object", source=str(side))
    if obj.get("format", FORMAT_NAME) != FORMAT_NAME or not SIDECAR_KEYS.intersection(obj):
        what = "a Chrome trace" if "traceEvents" in obj else f"keys {sorted(obj)[:6]}"
        raise DecodeError(f"is not an ikp capture sidecar ({what}; expected format {FORMAT_NAME!r} with "
                          "events/groups): rename it, or pass names with --names", source=str(side))
    return obj


FORMAT_NAME = "ikp-v1"  # host_decode.core.capture.FORMAT
SIDECAR_KEYS = frozenset({"format", "events", "groups", "write_stride", "records_per_lane", "num_blocks", "num_groups"})


class _NpyMap(mmap.mmap):
    """Anonymous memory holding a buffer read from a .npy file, owned by one decode: pages it has finished
    with are handed back to the kernel (they then read as zero), so the buffer and the span table are
    never both whole in memory."""


def _read_owned(path: Path) -> np.ndarray | None:
    """A 1-D little-endian int64/uint64 .npy read into a _NpyMap (for load_capture: nothing else sees the
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
            mm = _NpyMap(-1, 8 * shape[0], **private)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                mm.madvise(mmap.MADV_HUGEPAGE)
            if f.readinto(mm) != 8 * shape[0]:
                return None
    except Exception:  # noqa: BLE001 -- anything odd about the file: load_buffer judges it and names it
        return None
    return np.frombuffer(mm, dtype=dtype, count=shape[0])


def mapping_of(buf: np.ndarray) -> _NpyMap | None:
    """The _NpyMap under an array (through views and the memoryview np.frombuffer keeps), or None."""
    base = buf
    while base is not None and not isinstance(base, _NpyMap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base


class _PageRelease:
    """Hands the pages of an owned buffer (_NpyMap) back to the kernel once every chunk that reads them is
    decoded: chunks go column by column, so after columns [0, c1) of every row are done, the whole pages
    inside each row's prefix are. Peak memory is then about the span table, not buffer + span table
    (tests/test_decode.py::test_owned_buffer_decodes_like_a_loaded_one). A buffer of anyone else is
    never touched."""

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


def load_buffer(path: str | Path) -> np.ndarray:
    """Read a raw v1 buffer saved with numpy (.npy; never unpickled)."""
    path = Path(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as e:  # noqa: BLE001 - numpy's header parser raises ValueError, SyntaxError, TokenError...
        # numpy's own text may advise allow_pickle=True: never pass that on (loading a pickle runs code)
        reason = "" if "pickle" in str(e) else f": {e}"
        raise DecodeError(f"cannot read as a .npy buffer (truncated or not a numpy file){reason}",
                          source=str(path)) from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        raise DecodeError("expected a .npy array, got a .npz archive", source=str(path))
    return arr


def load_capture(path: str | Path, names: Names | dict | None = None, write_stride: int | None = None) -> Trace:
    """Decode BUFFER.npy with its sidecar BUFFER.json (names, write_stride, device facts) if present."""
    path = Path(path)
    side = read_sidecar(path)
    if names is None:
        try:
            names = Names.from_json(side)
        except ValueError as e:
            raise DecodeError(f"sidecar names: {e}", source=str(sidecar_of(path))) from None
    meta = {k: v for k, v in side.items() if k not in ("events", "groups")}
    buf = _read_owned(path)  # the decode below is the only reader: it frees pages as it goes
    if buf is None:
        buf = load_buffer(path)
    return decode(buf, names=names, write_stride=write_stride, meta=meta, source=str(path))
