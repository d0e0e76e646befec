"""Sub-tracks: within one (lane, sub-track) slices nest strictly. Regions of different ids that overlap
without nesting move to sibling sub-tracks, one region id per (lane, sub-track) move, so an id keeps one
row per lane; lanes whose regions all nest keep everything on sub-track 0.

A span nests iff the count of spans open in its (lane, sub-track) is the same just after its BEGIN and
just before its END in the one event order (host_decode.writers.order); only lanes with a crossing take
part, and a few rounds of moves settle them (a per-span first fit is the fallback).

Invariants, and the tests that guard them: slices on one track nest strictly
(tests/unit/host_decode/writers/test_perfetto.py::test_overlap_goes_to_sibling_track, ::test_random_traces_nest); one
pass over runs of lanes and two passes give the same file (::test_one_pass_falls_back_to_two).
"""

from __future__ import annotations

import numpy as np

from host_decode.writers.ids import in_set, present
from host_decode.writers.order import EventOrder, SpanColumns


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


