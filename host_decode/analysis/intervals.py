"""Interval primitives of the region analyses (host_decode.analysis.bubbles, overlap, launch): unions of
[start, end) intervals per key, intersection lengths, and the runs of whole blocks the per-lane and
per-block analyses go through.

Invariants, and the tests that guard them:
- a union is disjoint and sorted by (key, lo); intervals that merely touch (end == next start) merge
  (tests/unit/host_decode/analysis/test_analysis.py::test_union_intervals_merges_overlaps_and_touching_per_key);
- intersection lengths and unions agree with a per-nanosecond model on random traces
  (tests/unit/host_decode/analysis/test_analysis.py::test_random_traces_match_per_ns_model);
- block_runs holds whole blocks and every timed lane exactly once (also one without spans), so the
  analyses run run by run give what one run gives
  (tests/unit/host_decode/analysis/test_analysis.py::test_runs_change_nothing).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import positions_in_sorted, segmented_cummax
from host_decode.core.model import Trace


def union_intervals(key: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Union of [start, end) intervals per integer key.

    Returns (key, lo, hi, member_seg): disjoint merged intervals sorted by (key, lo), and for each input
    interval (in input order) the index of the merged interval containing it. Intervals that merely
    touch (end == next start) merge.
    """
    u = union_sorted(key, start, end)
    member = np.empty(u.order.size, np.int64)
    member[u.order] = u.seg
    return u.key, u.lo, u.hi, member


class Union:
    """Union of intervals with the bookkeeping callers need: `order` sorts the input by (key, start);
    in that order `seg` is each interval's merged interval and `first` the first index of each."""

    __slots__ = ("order", "seg", "first", "key", "lo", "hi", "s_end")


def union_sorted(key, start, end) -> Union:
    key = np.asarray(key, np.int64)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    u = Union()
    n = key.size
    if n and is_sorted(key, start):  # decoder output is sorted by lane, then program (= start) order
        u.order = np.arange(n)
        k, s, t = key, start, end
    else:
        u.order = np.lexsort((start, key))
        k, s, t = key[u.order], start[u.order], end[u.order]
    if n == 0:
        e = np.zeros(0, np.int64)
        u.seg, u.first, u.key, u.lo, u.hi, u.s_end = e, e, e, e, e, e
        return u
    running_end = segmented_cummax(t, np.cumsum(np.r_[True, k[1:] != k[:-1]]) - 1)
    new = np.ones(n, bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > running_end[:-1])
    u.first = np.flatnonzero(new)
    u.seg = np.cumsum(new) - 1
    u.key, u.lo, u.hi = k[u.first], s[u.first], np.maximum.reduceat(t, u.first)
    u.s_end = t
    return u


def is_sorted(key: np.ndarray, start: np.ndarray) -> bool:
    dk = np.diff(key)
    return bool((dk >= 0).all() and (start[1:][dk == 0] >= start[:-1][dk == 0]).all())


def clip(lo, hi, wlo, whi):
    """Clip intervals to per-interval windows; empty ones get length 0."""
    a = np.maximum(lo, wlo)
    b = np.minimum(hi, whi)
    return a, np.maximum(b, a)


def intersection_length(key_a, lo_a, hi_a, key_b, lo_b, hi_b, keys: np.ndarray) -> np.ndarray:
    """|A ∩ B| per key, where A and B are each disjoint interval sets sorted by (key, lo)
    (union_intervals output).

    Sweep: +1/-1 events for each side; because each side is disjoint per key its active count is 0 or 1
    and returns to 0 at the end of each key, so one global cumsum gives the state between events. Each
    side's events (lo0, hi0, lo1, ...) are already in (key, time) order, so ordering both is a merge of
    two sorted runs (a stable sort finds them). Ties at one time add zero length in any order."""
    out = np.zeros(keys.size, np.int64)
    if lo_a.size == 0 or lo_b.size == 0:
        return out
    k = np.concatenate([np.repeat(key_a, 2), np.repeat(key_b, 2)])
    t = np.concatenate([np.stack([lo_a, hi_a], 1).ravel(), np.stack([lo_b, hi_b], 1).ravel()])
    lifted = lift(k, t)
    na = 2 * lo_a.size
    # (key, time, side, start) packed: one value sort, no argsort + gathers
    if lifted is not None and int(lifted.max()) < 1 << 60:
        v = lifted << 2
        v[:na] |= 2  # side A
        v[0::2] |= 1  # every interval's lo (events alternate lo, hi on both sides)
        v.sort(kind="stable")  # two sorted runs: the stable sort (timsort) merges them in linear time
        side_a, start = (v & 2).astype(bool), (v & 1).astype(bool)
        lifted = v >> 2
        t_min, span = int(t.min()), int((t - t.min()).max()) + 1
        k, t = lifted // span + int(k.min()), lifted % span + t_min
        step = np.where(start, 1, -1)
    else:
        step = np.tile(np.array([1, -1], np.int64), lo_a.size + lo_b.size)
        side_a = np.r_[np.ones(na, bool), np.zeros(2 * lo_b.size, bool)]
        order = np.argsort(lifted, kind="stable") if lifted is not None else np.lexsort((t, k))
        k, t, step, side_a = k[order], t[order], step[order], side_a[order]
    a_on = np.cumsum(np.where(side_a, step, 0))
    b_on = np.cumsum(np.where(side_a, 0, step))
    both = (a_on[:-1] > 0) & (b_on[:-1] > 0) & (k[1:] == k[:-1])
    np.add.at(out, np.searchsorted(keys, k[:-1][both]), (t[1:] - t[:-1])[both])
    return out


def lift(key: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """One int64 sort key ordering by (key, t): key rank * (time range + 1) + t - min(t); None when
    that overflows int64 (time range x key range: lanes days apart)."""
    rel = t - t.min()
    span = int(rel.max()) + 1
    rank = key - key.min()
    if int(rank.max()) * span >= (1 << 62):
        return None
    return rank * span + rel


def percentile_or_zero(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def timed_lanes(trace: Trace) -> np.ndarray:
    """Lanes that wrote a timed record, sorted by lane id (searchsorted relies on it)."""
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    if lanes.size > 1 and not (np.diff(lanes["lane"]) > 0).all():
        lanes = lanes[np.argsort(lanes["lane"], kind="stable")]
    return lanes



CHUNK_SPANS = 1 << 16  # spans analysed at a time (runs of whole blocks): ~150 B of temporaries a span


def block_runs(trace: Trace, chunk_spans: int | None = None):
    """Yield (spans, timed lanes) per run of whole blocks, in lane order: the analyses per lane and per
    block are done run by run, so their temporaries stay bounded by a run (every timed lane is in
    exactly one run, also one without spans). Guarded by
    tests/unit/host_decode/analysis/test_analysis.py::test_runs_change_nothing."""
    sp = trace.spans
    lanes = timed_lanes(trace)
    lane_col = sp["lane"]
    perm = None if lane_col.size < 2 or (lane_col[1:] >= lane_col[:-1]).all() else np.argsort(lane_col, kind="stable")
    ordered = lane_col if perm is None else lane_col[perm]
    g = max(int(trace.num_groups), 1)
    at = np.arange(chunk_spans or CHUNK_SPANS, ordered.size, chunk_spans or CHUNK_SPANS)
    cuts = np.unique((ordered[at].astype(np.int64) // g) * g)  # first lane of a block
    span_cuts = np.concatenate([[0], positions_in_sorted(ordered, cuts), [ordered.size]])
    lane_cuts = np.concatenate([[0], np.searchsorted(lanes["lane"], cuts), [lanes.size]])
    for k in range(span_cuts.size - 1):
        a, b = int(span_cuts[k]), int(span_cuts[k + 1])
        yield (sp[a:b] if perm is None else sp[perm[a:b]]), lanes[lane_cuts[k] : lane_cuts[k + 1]]


