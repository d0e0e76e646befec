"""One chunk of lanes decoded (steps 1-3 of host_decode.core.decoder): the records of slot columns
[c0, c1) gathered lane-major, sorted into loss buckets, unwrapped onto the chunk's provisional timeline
(host_decode.core.timeline) and paired (host_decode.core.pairing). The result is a dict of per-lane
arrays and per-record columns that the decoder concatenates (decoder._assemble).

Invariants a change could break, with the test guarding each:
* Every non-zero slot of the chunk lands in exactly one loss bucket (malformed, after_finalize, finalize,
  instant, paired, unmatched, impossible_*):
  tests/unit/host_decode/core/test_decode.py::test_nested_overlap_and_every_bucket,
  tests/unit/host_decode/core/test_decode_props.py::test_garbage_raises_only_decode_error_and_accounting_holds.
* A record whose tag names another lane than its slot's column, or a lane past num_lanes, is malformed
  and counted under the lane whose slot it occupies (tests/unit/host_decode/core/test_decode.py::
  test_malformed_records_are_counted_not_fatal, tests/unit/host_decode/core/test_decode_timeline.py::
  test_dense_chunk_with_a_malformed_record).
* Steps between consecutive records of a lane are unsigned in time-ordered lanes and signed (except a
  region's own BEGIN -> END) in the out-of-order modes (wire.OUT_OF_ORDER_MODES):
  tests/unit/host_decode/core/test_decode.py:: test_long_region_with_nothing_inside_decodes_forward,
  ::test_out_of_order_modes_keep_signed_steps.
* Untimed records (ANCHOR_HI, DROPPED, payloads) take their nearest timed neighbour's time in their own lane
  (tests/unit/host_decode/core/test_decode.py::test_untimed_first_record_takes_the_first_timed_time); a payload
  belongs to the record before it (a user instant or a paired END) or is a payload_orphan
  (tests/unit/host_decode/core/test_payloads.py).
* Dense chunks (every slot written) and sparse ones decode alike (tests/unit/host_decode/core/test_decode_timeline.py::
  test_dense_and_sparse_chunks_decode_alike).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.pairing import pair_records
from host_decode.core.timeline import MAX_ANCHOR_HI, Timeline, timer_outliers

_BEGIN, _END, _INSTANT, _FINALIZE = (int(t) for t in wire.EventType)


def decode_columns(body: np.ndarray, c0: int, c1: int, stride: int, num_lanes: int, dense: bool, timeline: Timeline,
                   in_time_order: bool = True) -> dict:
    """Decode the records of slot columns [c0, c1) (lanes c0..c1-1), lane-major in program order.

    in_time_order: each lane's slots are in time order (one writer per lane: the cursor modes and the
    peers' buffers), so steps between consecutive records are unsigned 32-bit (a region longer than
    2**31 ns with nothing inside decodes right); False for modes that reserve slots ahead of time
    (atomic, static), whose steps are signed except from a region's BEGIN to its adjacent END.

    Per-lane arrays are indexed by local lane (lane - c0); per-record index sets are kept sorted so
    per-lane counts are searchsorted differences, never a pass over all records. Times come out on the
    provisional timeline of `timeline` (per-lane origin `applied`, corrected by the decoder's assembly if needed)."""
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

    # instants: anchors, drop counts and payloads are ours; the rest are the user's
    inst = np.flatnonzero(etype == _INSTANT)
    inst_ev = event[inst]
    hi = inst[inst_ev == wire.ANCHOR_HI_EVENT_ID]
    lo = inst[inst_ev == wire.ANCHOR_LO_EVENT_ID]
    dropped = inst[inst_ev == wire.DROPPED_EVENT_ID]
    payload = inst[(inst_ev >= _FIRST_PAYLOAD) & (inst_ev <= _LAST_PAYLOAD)]
    user = inst[(inst_ev < min(wire.RESERVED_INSTANT_IDS))]
    out["instant"] = per_lane(inst)

    # ANCHOR_HI, DROPPED and payloads carry no time: they take the time of the nearest timed record of their
    # lane (the one before, else the one after); a lane with no timed record at all has no time (`timed`)
    t = timer
    untimed = np.sort(np.concatenate((hi, dropped, payload))) if dropped.size or payload.size else hi  # disjoint
    timed = np.ones(nloc, bool)
    if untimed.size:
        t = timer.copy()
        # a payload takes the time after it when there is one: its record then stays the only record at
        # that record's time, so a flipped bit in the record's timer is still seen (timer_outliers)
        after_first = np.isin(untimed, payload) if payload.size else None
        source, lane_untimed = _timed_neighbour(untimed, loc, bounds, lane_loc, nloc, after_first)
        t[untimed] = t[source]
        timed[lane_untimed] = False
    # a record whose timer jumps >= 2**31 ns away from both neighbours of its lane and back (a flipped
    # high bit) would shift the rest of its lane by 2**32 ns under unsigned steps: set it aside
    outlier = timer_outliers(t, bounds) if in_time_order else np.zeros(0, np.int64)
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
    bad_hi = hi_first[a][timer[hi_first[a]] >= np.uint32(MAX_ANCHOR_HI)]
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
    begins, begin_event, ends, depth, unmatched_begin, unmatched_end = pair_records(etype, event, loc, bounds, not_be)
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
    out["payloads"], orphans = _payloads(payload, loc, event, etype, timer, rel, user, begins, ends)
    out["payload_orphan"] = per_lane(orphans)
    if orphans.size:  # out of the instants' bucket, into their own
        out["instant"] = per_lane(np.setdiff1d(inst, orphans, assume_unique=True))
    return out


_FIRST_PAYLOAD, _LAST_PAYLOAD = min(wire.PAYLOAD_IDS), max(wire.PAYLOAD_IDS)
assert _LAST_PAYLOAD - _FIRST_PAYLOAD + 1 == len(wire.PAYLOAD_IDS)  # contiguous: one range test


def _payloads(payload, loc, event, etype, timer, rel, user, begins, ends) -> tuple[dict, np.ndarray]:
    """The payload instants (sorted record indices `payload`) with the record each belongs to: the nearest
    record before it in its lane that is not a payload, which must be a user instant (`user`) or the END of a
    paired region (`ends`, paired with `begins`). Returns (their columns, the indices of the orphans: no such
    record, or one that was set aside)."""
    cols = {"loc": loc[:0], "event": event[:0], "kind": etype[:0], "payload": event[:0],
            "index": np.zeros(0, np.int64), "value": timer[:0], "ts_ns": rel[:0], "begin_ns": rel[:0]}
    if not payload.size:
        return cols, payload
    n = loc.size
    is_payload = np.zeros(n, bool)
    is_payload[payload] = True
    owner = np.maximum.accumulate(np.where(is_payload, -1, np.arange(n)))[payload]
    held = owner >= 0
    held[held] &= loc[owner[held]] == loc[payload[held]]
    order = np.argsort(ends, kind="stable")
    at = np.minimum(np.searchsorted(ends[order], owner), max(ends.size - 1, 0))
    is_end = held & (ends.size > 0) & (ends[order][at] == owner) if ends.size else np.zeros(payload.size, bool)
    is_user = held & np.isin(owner, user)
    ok = is_end | is_user
    kept, own = payload[ok], owner[ok]
    begin = np.where(is_end[ok], rel[begins[order][at[ok]]] if ends.size else 0, rel[own])
    cols = {"loc": loc[kept], "event": event[own], "kind": etype[own], "payload": event[kept],
            "index": kept - own - 1, "value": timer[kept], "ts_ns": rel[own], "begin_ns": begin}
    return cols, payload[~ok]


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


def _timed_neighbour(untimed: np.ndarray, loc: np.ndarray, bounds: np.ndarray, lane_loc: np.ndarray, nloc: int,
                     after_first: np.ndarray | None = None):
    """For sorted indices of untimed records: the index of the nearest timed record of the same lane,
    the one before if any, else the one after (so a lane that opens with ANCHOR_HI or DROPPED takes its
    first timed record's time, never its drop count or another lane's time); where `after_first` is set,
    the one after if any, else the one before; and the local lanes that hold no timed record at all
    (their untimed records point at themselves).
    Guarded by tests/unit/host_decode/core/test_decode.py::test_untimed_first_record_takes_the_first_timed_time."""
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
    if after_first is not None:
        source = np.where(after_first & has_after, after, source)
    none = ~(has_before | has_after)
    return source, np.unique(lanes[none]).astype(np.int64)
