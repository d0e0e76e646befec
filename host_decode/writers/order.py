"""The one event order and sub-track assignment of every trace writer (Perfetto and Chrome JSON).

Order (the file order of a Perfetto trace; Chrome JSON writes its regions in the BEGIN order of it):
per lane by time; at equal time a lane's ENDs (inner region first), then its instants, then its BEGINs
(outer region first, i.e. by row of the span table in (lane, begin) order); a zero-length region is its
BEGIN immediately followed by its END. Trace processor sorts by timestamp and keeps file order for ties,
and the other order silently nests back-to-back slices.

Sub-tracks: within one (lane, sub-track) slices nest strictly; regions of different ids that overlap
without nesting move to sibling sub-tracks, one region id per (lane, sub-track) move, so an id keeps one
row per lane (lanes whose regions all nest keep everything on sub-track 0).

Both are computed on runs of whole lanes (``lane_chunks``): the stream is lane by lane, so each run's
events are contiguous in the file and the writers stream run by run in bounded memory.

Guarded by tests/test_perfetto.py (test_file_order_is_merged_stream_order against the slow reference in
tests/stream_oracle.py, test_equal_timestamps_end_before_begin, test_overlap_goes_to_sibling_track,
test_random_traces_nest, test_lexsort_order_and_chunking_give_the_same_file) and tests/test_chrome_json.py.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np

from host_decode.core.arrays import positions_in_sorted, segmented_cummax
from host_decode.core.model import Trace

CHUNK_SPANS = 1 << 16  # spans ordered and encoded at a time (whole lanes): temporaries stay ~20 MB
LANE_COUNTERS_AUTO = 1 << 16  # writers' default: lanes-inside counters (~2 samples a region) up to this many regions
TRACK_BITS = 20  # LaneTable.tracks packs (lane, sub-track) as lane << TRACK_BITS | sub


def trace_origin(trace: Trace) -> int:
    """The ns that becomes t=0: the launch's first record, or earlier if an event is earlier."""
    origin = trace.start_ns if trace.lanes.size else None
    lows = [int(trace.spans["start_ns"].min())] if trace.spans.size else []
    if trace.instants.size:
        lows.append(int(trace.instants["ts_ns"].min()))
    if lows and (origin is None or min(lows) < origin):
        origin = min(lows)
    return int(origin or 0)


def check_input(spans: np.ndarray, instants: np.ndarray) -> None:
    if spans.size:
        check_spans(spans, spans["lane"], spans["event"], spans["start_ns"], spans["end_ns"])
    check_instants(instants)


def check_spans(spans: np.ndarray, lane: np.ndarray, event: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """lane/event/start/end: the span table's columns (any common time offset)."""
    bad = np.flatnonzero(end < start)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{bad.size} span(s) end before they begin (first: span row {i}, lane {int(spans['lane'][i])}, "
            f"start {int(spans['start_ns'][i])} ns > end {int(spans['end_ns'][i])} ns)"
        )
    check_span_ids(lane, event)


def check_span_ids(lane: np.ndarray, event: np.ndarray) -> None:
    if int(lane.min()) < 0 or int(event.min()) < 0:
        raise ValueError("span table has negative lane or event ids")


def check_instants(instants: np.ndarray) -> None:
    if instants.size and (int(instants["lane"].min()) < 0 or int(instants["event"].min()) < 0):
        raise ValueError("instant table has negative lane or event ids")


KEY_BITS = 63  # packed sort keys (lane, time, kind, row) up to this width; wider traces take a lexsort


@dataclasses.dataclass
class SpanColumns:
    table: np.ndarray  # the span rows in (lane, begin) order (the trace's own array when already so)
    lane: np.ndarray  # int64 columns of `table`, each field read once
    event: np.ndarray
    tb: np.ndarray  # begin, ns after the origin
    te: np.ndarray  # end, ns after the origin
    dur: np.ndarray  # te - tb
    tbits: int  # bits of the largest time (spans and instants)
    key_bits: int  # bits of (lane << tbits) | time over spans and instants
    lk: np.ndarray | None  # ((lane - lane0) << tbits) | tb, the sort key, when key_bits <= 63
    lane0: int = 0  # the lowest lane of the run


def span_columns(spans: np.ndarray, instants: np.ndarray, origin: int) -> SpanColumns:
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    tb = spans["start_ns"] - origin
    te = spans["end_ns"] - origin
    dur = te - tb
    if spans.size:
        if int(dur.min()) < 0:
            check_spans(spans, lane, event, tb, te)  # raises, naming the first such span
        check_span_ids(lane, event)
    check_instants(instants)
    times, lanes, lows = [0], [0], []
    if spans.size:
        times.append(int(te.max()))
        lane_sorted = nondecreasing(lane)  # a run of whole lanes in lane order: the usual table
        lanes.append(int(lane[-1]) if lane_sorted else int(lane.max()))
        lows.append(int(lane[0]) if lane_sorted else int(lane.min()))
    if instants.size:
        times.append(int(instants["ts_ns"].max()) - origin)
        lanes.append(int(instants["lane"].max()))
        lows.append(int(instants["lane"].min()))
    lane0 = min(lows) if lows else 0  # keys hold lane - lane0: a run of lanes needs few bits
    tbits = max(times).bit_length()
    lk = None
    key_bits = (max(lanes) - lane0).bit_length() + tbits
    if key_bits <= 63:
        lk = lane - lane0
        lk <<= tbits
        lk |= tb
        in_order = nondecreasing(lk)
    else:
        same = lane[1:] == lane[:-1]
        in_order = lane.size < 2 or bool(((lane[1:] > lane[:-1]) | (same & (tb[1:] >= tb[:-1]))).all())
    if not in_order:
        perm = np.argsort(lk, kind="stable") if lk is not None else np.lexsort((tb, lane))
        # stable: spans that begin together keep their (program) order
        spans, lane, event, tb, te, dur = spans[perm], lane[perm], event[perm], tb[perm], te[perm], dur[perm]
        lk = lk[perm] if lk is not None else None
    return SpanColumns(spans, lane, event, tb, te, dur, tbits, key_bits, lk, lane0)


@dataclasses.dataclass
class EventOrder:
    """Where each event sits in the file's event stream, and how many events of each kind come before
    it. A zero-length span is one stream event (its END packet directly follows its BEGIN packet)."""

    pb: np.ndarray  # stream position of each span's BEGIN, by row (increasing: rows are in file order)
    end_rows: np.ndarray  # spans with an END event of their own (not zero-length), in stream order
    pe: np.ndarray  # ... that END's stream position (increasing)
    inst_rows: np.ndarray  # instant rows in stream order
    pi: np.ndarray  # ... their stream positions
    zero: np.ndarray  # bool per span: zero-length
    zc: np.ndarray | None  # zero-length spans among rows [0, k) for k = 0..n; None when there are none
    ib: np.ndarray | int  # instants before each BEGIN (0: no instants)
    ie: np.ndarray | int  # instants before each END
    bi: np.ndarray  # BEGINs before each instant

    @functools.cached_property
    def be(self) -> np.ndarray:
        """BEGINs before each END: every event before it is an END, an instant or a BEGIN."""
        be = self.pe - np.arange(self.pe.size)
        if self.pi.size:
            be -= self.ie
        return be


def event_order(cols: SpanColumns, instants: np.ndarray, origin: int) -> EventOrder:
    """The one order: per lane by time; at equal time ENDs (inner first), instants, then BEGINs (outer
    first, i.e. by row)."""
    n, m = cols.lane.size, instants.size
    ilane = instants["lane"].astype(np.int64)
    ti = instants["ts_ns"] - origin
    zero = cols.dur == 0
    has_zero = bool(zero.any())
    ends = np.flatnonzero(~zero) if has_zero else None  # spans with an END event of their own
    rbits = max(n, m).bit_length()
    if cols.lk is not None and cols.key_bits + 2 + rbits <= KEY_BITS:
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, rbits)
    elif cols.lk is not None and cols.key_bits + 2 <= KEY_BITS:  # no room for rows: argsorts
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, 0)
    else:
        pb, end_rows, pe, inst_rows, pi = _order_lexsort(cols.lane, cols.tb, cols.te, ends, ilane, ti)
    zc = np.concatenate([[0], np.cumsum(zero)]) if has_zero else None
    ib = np.searchsorted(pi, pb) if m else 0
    ie = np.searchsorted(pi, pe) if m else 0
    bi = np.searchsorted(pb, pi)
    return EventOrder(pb, end_rows, pe, inst_rows, pi, zero, zc, ib, ie, bi)


def _order_packed(cols: SpanColumns, ends: np.ndarray | None, ilane: np.ndarray, ti: np.ndarray, rbits: int):
    """Sort keys ((lane, time), kind, row field) packed into one int64: distinct values, so plain value
    sorts, and the row comes back from the key's low bits. The row field of an END counts down, so
    at equal (lane, time) the later-begun (inner) span closes first. BEGIN keys are sorted already.
    rbits = 0: no row field; ENDs and instants take stable argsorts (ENDs in reverse row order)."""
    shift, rmask = rbits + 2, (1 << rbits) - 1
    n, m = cols.lane.size, ilane.size
    ne = n if ends is None else ends.size
    merged = np.empty(ne + m + n, np.int64)
    ke, ki, kb = merged[:ne], merged[ne : ne + m], merged[ne + m :]
    rows_e = np.arange(n) if ends is None else ends
    if ends is None:
        np.add(cols.lk, cols.dur, out=ke)
    else:
        np.add(cols.lk[ends], cols.dur[ends], out=ke)
    ke <<= shift  # (lane << tbits) | end, then kind END = 0
    if rbits:
        ke |= rmask - rows_e
        ke.sort(kind="stable")  # nearly sorted already: timsort runs
        end_rows = rmask - (ke & rmask)
    else:
        o = np.argsort(ke[::-1], kind="stable")
        end_rows = rows_e[::-1][o]
        ke[:] = ke[::-1][o]
    if m:
        ki[:] = (((ilane - cols.lane0) << cols.tbits) | ti) << shift
        ki |= KIND_INSTANT << rbits
        if rbits:
            ki |= np.arange(m)
            ki.sort(kind="stable")
            inst_rows = ki & rmask
        else:
            inst_rows = np.argsort(ki, kind="stable")
            ki[:] = ki[inst_rows]
    else:
        inst_rows = np.zeros(0, np.int64)
    np.left_shift(cols.lk, shift, out=kb)
    kb |= (np.arange(n) if rbits else 0) | (KIND_BEGIN << rbits)
    merged.sort(kind="stable")  # a merge of three sorted runs
    if m:
        kind = (merged >> rbits) & 3
        return (np.flatnonzero(kind == KIND_BEGIN), end_rows, np.flatnonzero(kind == KIND_END), inst_rows,
                np.flatnonzero(kind == KIND_INSTANT))
    if sys.byteorder == "little":  # the BEGIN bit, read from the one byte of each key that holds it
        bit = rbits + 1
        is_begin = ((merged.view(np.uint8)[bit // 8 :: 8] >> (bit % 8)) & 1).view(bool)
    else:
        is_begin = (merged & (KIND_BEGIN << rbits)).astype(bool)
    return np.flatnonzero(is_begin), end_rows, np.flatnonzero(~is_begin), inst_rows, np.zeros(0, np.int64)


def _order_lexsort(lane, tb, te, ends, ilane, ti):
    """The same order for keys too wide to pack (very long traces): one lexsort of all events."""
    n, m = lane.size, ilane.size
    ends = np.arange(n) if ends is None else ends
    kind = np.concatenate([np.full(ends.size, KIND_END, np.int8), np.full(m, KIND_INSTANT, np.int8),
                           np.full(n, KIND_BEGIN, np.int8)])
    tie = np.concatenate([-ends, np.arange(m), np.arange(n)])  # ENDs: later rows first
    o = np.lexsort((tie, kind, np.concatenate([te[ends], ti, tb]), np.concatenate([lane[ends], ilane, lane])))
    kind, tie = kind[o], tie[o]
    pe, pi = np.flatnonzero(kind == KIND_END), np.flatnonzero(kind == KIND_INSTANT)
    return np.flatnonzero(kind == KIND_BEGIN), -tie[pe], pe, tie[pi], pi


def crossing_ends(order: EventOrder) -> np.ndarray:
    """Per END (stream order): its span does not nest strictly among all spans of its lane, i.e. the
    spans open just after its BEGIN and just before its END differ in number (the stream is lane by
    lane and each lane balanced, so counts over the whole stream are per-lane counts)."""
    n, ne = order.pb.size, order.pe.size
    after_begin = np.arange(1, 2 * n + 1, 2) - order.pb  # BEGINs so far minus ENDs so far
    if order.pi.size:
        after_begin += order.ib
    if order.zc is None and not order.pi.size:
        before_end = order.pe - np.arange(0, 2 * ne, 2)  # BEGINs before it (pe - j) minus ENDs before it (j)
    else:
        before_end = order.be - np.arange(ne)
    if order.zc is not None:  # zero-length spans have no END event: they never count as open
        after_begin -= order.zc[1:]
        before_end -= order.zc[order.be]
    return after_begin[order.end_rows] != before_end


def subtracks(cols: SpanColumns, order: EventOrder) -> np.ndarray:
    n = cols.lane.size
    sub = np.zeros(n, np.int64)
    crossing = crossing_ends(order)
    if not crossing.any():
        return sub
    # only lanes with a crossing take part: runs of rows in the sorted table, and runs of ENDs in the
    # stream (a lane's ENDs are its spans that are not zero-length)
    lanes = present(cols.lane[order.end_rows[crossing]])
    lo, hi = np.searchsorted(cols.lane, lanes, "left"), np.searchsorted(cols.lane, lanes, "right")
    rows = _runs(lo, hi)
    elo, ehi = (lo, hi) if order.zc is None else (lo - order.zc[lo], hi - order.zc[hi])
    ends = _runs(elo, ehi)
    first = np.cumsum(hi - lo) - (hi - lo)  # where each lane's rows start among `rows`
    local = order.end_rows[ends] - np.repeat(lo - first, ehi - elo)  # index in `rows` of each END's span
    # stream positions doubled, so that a zero-length span's END sits between its BEGIN and the next event
    pos_begin = 2 * order.pb[rows]
    pos_end = pos_begin + 1  # zero-length spans
    pos_end[local] = 2 * order.pe[ends]
    bad = np.zeros(rows.size, bool)
    bad[local] = crossing[ends]
    alane = np.repeat(np.arange(lanes.size), hi - lo)
    sub[rows] = _move_crossing(alane, cols.event[rows], pos_begin, pos_end, bad)
    return sub


def _runs(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers of the ranges [lo[k], hi[k]), one range after the other."""
    size = hi - lo
    return np.arange(int(size.sum())) + np.repeat(lo - (np.cumsum(size) - size), size)


KIND_END, KIND_INSTANT, KIND_BEGIN = 0, 1, 2  # order of events of one lane at one timestamp


def present(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct non-negative ids (np.unique without the sort, for ids of modest range)."""
    if ids.size == 0:
        return np.zeros(0, np.int64)
    if ids.dtype.itemsize > 2 and int(ids.max()) > 4 * ids.size + (1 << 16):  # 16-bit ids never are (no pass)
        return np.unique(ids).astype(np.int64)
    return np.flatnonzero(np.bincount(ids))


def in_set(ids: np.ndarray, members: np.ndarray) -> np.ndarray:
    """ids in members (both non-negative), via a dense lookup table."""
    if ids.size == 0 or members.size == 0:
        return np.zeros(ids.size, bool)
    table = np.zeros(max(int(ids.max()), int(members.max())) + 1, bool)
    table[members] = True
    return table[ids]


def index_of(distinct: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of each id in `distinct` (sorted, and holding every id): a lookup table for ids of
    modest range, else a binary search."""
    if ids.size == 0:
        return np.zeros(0, np.int64)
    top = int(distinct[-1])
    if top > 4 * ids.size + (1 << 16):
        return np.searchsorted(distinct, ids)
    lut = np.zeros(top + 1, np.int64)
    lut[distinct] = np.arange(distinct.size)
    return lut[ids]


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a and b (each sorted distinct); usually b is empty (no instants)."""
    return a if b.size == 0 else np.unique(np.concatenate([a, b]))


def per_lane(lanes: np.ndarray, values: np.ndarray, lane_col: np.ndarray) -> np.ndarray:
    """values[i] belongs to lanes[i] (sorted, holding every lane of lane_col): the value of each row."""
    if lane_col.size and int(lanes[-1]) <= 4 * lane_col.size + (1 << 16):
        lut = np.zeros(int(lanes[-1]) + 1, values.dtype)
        lut[lanes] = values
        return lut[lane_col]
    return values[np.searchsorted(lanes, lane_col)]


def some_row(lane_col: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Per lane of `lanes` (sorted), one row of lane_col that holds it (-1 for none); a sorted column
    (the span table's) by binary search, else by scatter."""
    out = np.full(lanes.size, -1, np.int64)
    if lane_col.size == 0:
        return out
    if nondecreasing(lane_col):
        first = np.searchsorted(lane_col, lanes)
        hit = first < lane_col.size
        hit[hit] = lane_col[first[hit]] == lanes[hit]
        out[hit] = first[hit]
    else:
        out[index_of(lanes, lane_col)] = np.arange(lane_col.size)
    return out


def nondecreasing(a: np.ndarray) -> bool:
    return bool(a.size < 2 or (a[1:] >= a[:-1]).all())


def _move_crossing(alane: np.ndarray, aevent: np.ndarray, pos_begin: np.ndarray, pos_end: np.ndarray,
                   a_bad: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """_resolve_crossings on the spans of the lanes that take part (alane: dense lane index)."""
    nest = _NestCheck(pos_begin, pos_end)
    asub = np.zeros(alane.size, np.int64)
    for _ in range(max_rounds):
        if not a_bad.any():
            return asub
        subs = int(asub.max()) + 1
        group = alane * subs + asub  # dense (lane, sub-track) index
        move_event = np.full(int(alane.max() + 1) * subs, -1, np.int64)
        np.maximum.at(move_event, group[a_bad], aevent[a_bad])  # per offending group: its largest offending id
        asub[move_event[group] == aevent] += 1
        a_bad = nest.crossing(asub)
    still = in_set(alane, alane[a_bad])
    _first_fit(np.flatnonzero(still), alane, pos_begin, pos_end, asub)
    return asub


class _NestCheck:
    """Which spans do not nest strictly within their (lane, sub-track), for changing sub-tracks: the
    spans' events are put in stream order once; a span nests iff the count of open spans of its
    sub-track is the same just after its BEGIN and just before its END (each (lane, sub-track) is
    balanced and lanes follow each other in the stream, so counts over all lanes suffice)."""

    def __init__(self, pos_begin: np.ndarray, pos_end: np.ndarray) -> None:
        a = pos_begin.size
        ibits = a.bit_length()
        top = max(int(pos_begin.max()), int(pos_end.max())) if a else 0
        if top.bit_length() + ibits + 1 <= 63:  # packed (position, span, is END): a value sort
            keys = np.empty(2 * a, np.int64)
            np.left_shift(pos_begin, ibits + 1, out=keys[:a])
            keys[:a] |= np.arange(a) << 1
            np.left_shift(pos_end, ibits + 1, out=keys[a:])
            keys[a:] |= (np.arange(a) << 1) | 1
            keys.sort(kind="stable")  # BEGINs are nearly in order, ENDs too: timsort runs
            is_end = (keys & 1).astype(bool)
            self.span = (keys >> 1) & ((1 << ibits) - 1)  # span of each event, in stream order
        else:
            order = np.argsort(np.concatenate([pos_begin, pos_end]))  # positions are distinct
            is_end = order >= a
            self.span = np.where(is_end, order - a, order)
        self.delta = 1 - 2 * is_end.astype(np.int32)
        self.max_depth = int(np.cumsum(self.delta).max()) if a else 0  # no sub-track is deeper
        self.rank_begin = np.empty(a, np.int64)
        self.rank_end = np.empty(a, np.int64)
        ends = np.flatnonzero(is_end)
        begins = np.flatnonzero(~is_end)
        self.rank_begin[self.span[begins]] = begins
        self.rank_end[self.span[ends]] = ends

    def crossing(self, sub: np.ndarray) -> np.ndarray:
        sub_ev = sub[self.span]
        subs = int(sub.max()) + 1
        if subs > 8:  # many sub-tracks: one stable (radix) sort by sub-track, one running count
            o = np.argsort(sub_ev.astype(np.int16) if subs < (1 << 15) else sub_ev, kind="stable")
            depth = np.empty(o.size, np.int32)
            depth[o] = np.cumsum(self.delta[o])
            return depth[self.rank_begin] != depth[self.rank_end] + 1
        if subs <= 4 and self.max_depth < (1 << 16):  # or one running count of 16-bit fields, one per sub-track
            field = (16 * sub_ev).astype(np.uint64)
            depth = np.cumsum(np.left_shift(self.delta.astype(np.int64).view(np.uint64), field))  # mod 2**64
            field = (16 * sub).astype(np.uint64)
            after_begin = np.right_shift(depth[self.rank_begin], field) & np.uint64(0xFFFF)
            before_end = np.right_shift(depth[self.rank_end], field) & np.uint64(0xFFFF)
            return after_begin != before_end + np.uint64(1)
        bad = np.zeros(sub.size, bool)
        for k in range(subs):  # a running count per sub-track
            depth = np.cumsum(np.where(sub_ev == k, self.delta, 0))
            rows = np.flatnonzero(sub == k)
            bad[rows] = depth[self.rank_begin[rows]] != depth[self.rank_end[rows]] + 1
        return bad


def _first_fit(rows: np.ndarray, lane: np.ndarray, pos_begin: np.ndarray, pos_end: np.ndarray, sub: np.ndarray) -> None:
    """Per-span fallback: each BEGIN goes to the lowest sub-track whose open slice contains it."""
    if rows.size == 0:
        return
    pb, pe = pos_begin, pos_end
    stacks: dict[int, list[list[int]]] = {}
    events = sorted([(int(pb[r]), 1, int(r)) for r in rows] + [(int(pe[r]), 0, int(r)) for r in rows])
    where: dict[int, int] = {}
    for _, is_begin, r in events:
        tracks = stacks.setdefault(int(lane[r]), [])
        if is_begin:
            k = 0
            while k < len(tracks) and tracks[k] and pe[tracks[k][-1]] < pe[r]:
                k += 1
            if k == len(tracks):
                tracks.append([])
            tracks[k].append(r)
            where[r] = k
        else:
            tracks[where[r]].remove(r)  # the top, since everything above r ended inside it
    for r, k in where.items():
        sub[r] = k


# --- counters --------------------------------------------------------------------------------------


def lanes_inside(spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per region id, the number of lanes inside it over time: (event, ts_ns, value) change points,
    sorted by (event, ts). A lane inside nested regions of the same id counts once. At equal time the
    decrements apply first, so back-to-back regions of one lane never count twice."""
    z = np.zeros(0, np.int64)
    if spans.size == 0:
        return z, z, z
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    start, end = spans["start_ns"], spans["end_ns"]
    t0 = int(start.min())
    outer = _outermost_same_id(lane, event, start - t0, end - t0)
    ev = event[outer]
    t = np.concatenate([end[outer], start[outer]]) - t0
    up = np.concatenate([np.zeros(ev.size, np.int64), np.ones(ev.size, np.int64)])
    e2 = np.concatenate([ev, ev])
    if int(t.max()) < (1 << 42) and int(e2.max()) < (1 << 15):
        key = np.sort(((e2 << 42 | t) << 1) | up)  # ids, then time, decrements (0) first
        up, t, e2 = key & 1, (key >> 1) & ((1 << 42) - 1), key >> 43
    else:
        o = np.lexsort((up, t, e2))
        up, t, e2 = up[o], t[o], e2[o]
    value = np.cumsum(2 * up - 1)  # each id's run returns to 0, so the running sum is per id
    last = np.r_[(e2[1:] != e2[:-1]) | (t[1:] != t[:-1]), True]
    return e2[last], t[last] + t0, value[last]


def _outermost_same_id(lane, event, start, end) -> np.ndarray:
    """Rows of spans not nested inside another span of the same (lane, event id)."""
    same_lane = lane[1:] == lane[:-1]
    if np.all(lane[1:] >= lane[:-1]) and np.all(start[1:][same_lane] >= start[:-1][same_lane]):
        o = np.argsort((lane << 16) | event, kind="stable")  # rows are in begin order within a lane
    else:
        o = np.lexsort((-end, start, event, lane))
    grp = (lane[o] << 16) | event[o]
    new = np.r_[True, grp[1:] != grp[:-1]]
    # the running max of end inside each group: a span starting at or after it is outermost (the first
    # of a group always is, whatever the previous group's max)
    runmax = segmented_cummax(end[o], np.cumsum(new) - 1)
    prev = np.r_[-1, runmax[:-1]]
    is_outer = new | (start[o] >= prev)
    return np.sort(o[is_outer])




# --- runs of whole lanes -------------------------------------------------------------------------------


@dataclasses.dataclass
class LaneChunks:
    """The span and instant tables cut into runs of whole lanes of about CHUNK_SPANS spans each, in lane
    order (a table not sorted by lane is read through a stable permutation, never copied whole)."""

    spans: np.ndarray
    instants: np.ndarray
    span_perm: np.ndarray | None  # stable lane order of the span table; None when it is already so
    inst_perm: np.ndarray | None
    span_cuts: np.ndarray  # chunk k holds lane-ordered span rows span_cuts[k]:span_cuts[k + 1]
    inst_cuts: np.ndarray

    def __len__(self) -> int:
        return self.span_cuts.size - 1

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(spans, instants) of chunk k, in lane order (stable)."""
        return (_rows(self.spans, self.span_perm, self.span_cuts[k], self.span_cuts[k + 1]),
                _rows(self.instants, self.inst_perm, self.inst_cuts[k], self.inst_cuts[k + 1]))


def _rows(table: np.ndarray, perm: np.ndarray | None, a: int, b: int) -> np.ndarray:
    return table[a:b] if perm is None else table[perm[a:b]]


def lane_chunks(spans: np.ndarray, instants: np.ndarray, chunk_spans: int | None = None) -> LaneChunks:
    chunk_spans = chunk_spans or CHUNK_SPANS
    span_lane, span_perm = _lane_order(spans)
    inst_lane, inst_perm = _lane_order(instants)
    # cut at the first lane of every chunk_spans-th span (a lane larger than that is a chunk of its own),
    # and lanes holding only instants go with the span lanes around them
    cut_lanes = [np.zeros(0, np.int64)]
    if span_lane.size:
        at = np.arange(chunk_spans, span_lane.size, chunk_spans)
        cut_lanes.append(np.asarray(span_lane[at], np.int64))
    if inst_lane.size and not span_lane.size:
        at = np.arange(chunk_spans, inst_lane.size, chunk_spans)
        cut_lanes.append(np.asarray(inst_lane[at], np.int64))
    cuts = np.unique(np.concatenate(cut_lanes))
    span_cuts = np.concatenate([[0], positions_in_sorted(span_lane, cuts), [span_lane.size]]).astype(np.int64)
    inst_cuts = np.concatenate([[0], positions_in_sorted(inst_lane, cuts), [inst_lane.size]]).astype(np.int64)
    return LaneChunks(spans, instants, span_perm, inst_perm, span_cuts, inst_cuts)


def _lane_order(table: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The table's lane column in lane order, and the stable permutation that sorts it (None if sorted)."""
    lane = table["lane"]
    if nondecreasing(lane):
        return lane, None
    perm = np.argsort(lane, kind="stable")
    return lane[perm], perm


@dataclasses.dataclass
class OrderedChunk:
    """One run of whole lanes, ordered: its span rows in (lane, begin) order, the event order and the
    sub-track of each span."""

    cols: SpanColumns
    instants: np.ndarray
    order: EventOrder
    sub: np.ndarray


def ordered_chunks(chunks: LaneChunks, origin: int, subs: dict | None = None):
    """Yield an OrderedChunk per chunk. subs: {chunk: sub-track per span} from an earlier pass (chunks
    missing from it have every span on sub-track 0), so that a second pass skips the sub-track work."""
    for k in range(len(chunks)):
        spans, instants = chunks[k]
        cols = span_columns(spans, instants, origin)
        order = event_order(cols, instants, origin)
        if subs is None:
            sub = subtracks(cols, order)
        else:
            sub = subs.get(k)
            if sub is None:
                sub = np.zeros(cols.lane.size, np.int64)
        yield OrderedChunk(cols, instants, order, sub)


@dataclasses.dataclass
class LaneTable:
    """Per lane that holds a span or an instant (sorted): its block, group and sub-track count, with the
    chunks' sub-track assignments kept only where a chunk moved a span (the usual trace moves none)."""

    lanes: np.ndarray
    block: np.ndarray
    group: np.ndarray
    nsub: np.ndarray
    subs: dict  # chunk -> sub per span of the chunk (rows in (lane, begin) order); only chunks with moves
    span_events: np.ndarray  # distinct event ids of the spans
    span_lanes: np.ndarray  # lanes that hold a span (sorted)
    tracks: np.ndarray  # distinct (lane << TRACK_BITS) | sub-track in use, by a span or (sub 0) an instant


def lane_facts(chunks: LaneChunks) -> LaneTable:
    """The lane table of a stream that keeps every span on its lane's first track: the per-lane facts of
    the track tree, nothing ordered. A one-pass writer streams with it and checks each run's sub-tracks
    as it goes (perfetto.write_perfetto); lane_table adds the moves a first pass finds."""
    parts = [_chunk_facts(*chunks[k]) for k in range(len(chunks))]
    cat = lambda i: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64)  # noqa: E731
    lanes, events = cat(0), cat(5)
    return LaneTable(lanes, cat(1), cat(2), np.ones(lanes.size, np.int64), {}, np.unique(events).astype(np.int64),
                     cat(3), lanes << TRACK_BITS)


def _chunk_facts(spans: np.ndarray, inst: np.ndarray) -> tuple:
    """(lanes, block, group, span lanes, instant lanes, span event ids) of one run of whole lanes (rows in
    lane order): a lane's block and group are those of its first span row, else of its first instant."""
    span_lane = spans["lane"]
    inst_lane = inst["lane"].astype(np.int64)
    first_rows = np.flatnonzero(changes(span_lane))
    sl, il = span_lane[first_rows].astype(np.int64), present_sorted(inst_lane)
    lanes = union(sl, il)
    if not il.size:  # no instants (the usual run): each lane's first span row is known already
        block, group = (spans[field][first_rows].astype(np.int64) for field in ("block", "group"))
        return lanes, block, group, sl, il, present(spans["event"])
    any_sp, any_in = some_row(span_lane, lanes), some_row(inst_lane, lanes)
    from_sp = any_sp >= 0
    b = np.empty(lanes.size, np.int64)
    g = np.empty(lanes.size, np.int64)
    b[from_sp] = spans["block"][any_sp[from_sp]]
    g[from_sp] = spans["group"][any_sp[from_sp]]
    b[~from_sp] = inst["block"][any_in[~from_sp]]
    g[~from_sp] = inst["group"][any_in[~from_sp]]
    return lanes, b, g, sl, il, present(spans["event"])


def lane_table(chunks: LaneChunks, origin: int) -> LaneTable:
    """The first pass of a two-pass writer: lane_facts plus the sub-track moves of every chunk (kept only
    for the chunks that move a span: the usual trace moves none)."""
    table = lane_facts(chunks)
    for k, oc in enumerate(ordered_chunks(chunks, origin)):
        if oc.sub.any():
            add_moves(table, k, oc)
    return table


def add_moves(table: LaneTable, k: int, oc: OrderedChunk) -> None:
    """Record chunk k's sub-track moves in the table: its subs, the sub-track counts of its lanes and the
    (lane, sub-track) tracks in use."""
    cols, inst = oc.cols, oc.instants
    table.subs[k] = oc.sub
    moved = np.flatnonzero(oc.sub)
    np.maximum.at(table.nsub, index_of(table.lanes, cols.lane[moved]), oc.sub[moved] + 1)
    il = present_sorted(inst["lane"].astype(np.int64))
    tracks = np.unique(np.concatenate([(cols.lane << TRACK_BITS) | oc.sub, il << TRACK_BITS]))
    lo, hi = np.searchsorted(table.tracks, [tracks[0] & ~((1 << TRACK_BITS) - 1), tracks[-1] + 1])
    table.tracks = np.concatenate([table.tracks[:lo], tracks, table.tracks[hi:]])


def present_sorted(ids: np.ndarray) -> np.ndarray:
    """Distinct values of a sorted column."""
    return ids[changes(ids)].astype(np.int64)


def changes(ids: np.ndarray) -> np.ndarray:
    """Per row of a sorted column: whether it holds the first row of its value."""
    keep = np.empty(ids.size, bool)
    if ids.size:
        keep[0] = True
        np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    return keep
