"""Analyses on the trace model: bubbles, overlap between groups, waves/tail/imbalance, critical lanes.

Every function takes a :class:`~host_decode.core.model.Trace` and returns numpy structured arrays (one row per
lane / block / SM / ...) plus, where useful, a small dict of scalars. All work is whole-array numpy:
sorting and segmented reductions, no Python loop per span (loops run only over group pairs).

Definitions (all times in ns on the trace's timeline):

* **window of a lane** = [lane.first_ns, lane.last_ns]: its first and last timed record (anchors and
  finalize included, so set-up before the first region and work after the last one count).
* **busy time of a lane** = |union of the lane's spans| (all depths; nested or overlapping regions count
  once), clipped to the window.
* **bubble of a lane** = window length - busy time: time the lane spent in no region.
* **gap** = one maximal interval of the window covered by no span of the lane. A gap has the region
  that ended last before it (``prev_event``, -1 when it is the lead-in) and the region that starts
  right after it (``next_event``, -1 when it is the tail after the last region).
* **overlap(A by B) of a block** = |U(A) ∩ U(B)| / |U(A)| where U(X) is the union of the spans of all
  lanes of group X in that block. 1.0 means all of A's region time ran while B was in some region.
* **block interval** = [min first_ns, max last_ns] over the block's lanes; its SM is the SM of its lanes
  (the finalize record carries it; -1 unknown).
* **SM busy time** = |union of the intervals of the blocks that ran on it|.
* **imbalance** = max / mean, over SMs with a known id, of SM busy time; and max / mean over blocks of
  (block end - launch start).
* **tail** = last block end - median (p50) block end; ``tail_sm_utilization`` = mean over SMs of the
  fraction of the tail window [p50 end, last end] during which the SM had a block resident.
* **waves of an SM** = ceil(blocks on the SM / most blocks resident on it at one time).
* **critical lane of a block** = the lane with the latest last_ns; ``slack_ns`` = its last_ns minus the
  second latest lane end in the block (0 for single-lane blocks); ``last_event`` = the region of that
  lane that ended last (-1 when the lane has no region).

Guarded by tests/test_analysis.py (hand-computed values on small traces).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import distinct_small, positions_in_sorted, segmented_cummax
from host_decode.core.model import Trace
from host_decode.core.wire import MAX_EVENT_ID

# --- interval primitives ---------------------------------------------------------------------------


def union_intervals(key: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Union of [start, end) intervals per integer key.

    Returns (key, lo, hi, member_seg): disjoint merged intervals sorted by (key, lo), and for each input
    interval (in input order) the index of the merged interval containing it. Intervals that merely
    touch (end == next start) merge.
    """
    u = _union_sorted(key, start, end)
    member = np.empty(u.order.size, np.int64)
    member[u.order] = u.seg
    return u.key, u.lo, u.hi, member


class _Union:
    """Union of intervals with the bookkeeping callers need: `order` sorts the input by (key, start);
    in that order `seg` is each interval's merged interval and `first` the first index of each."""

    __slots__ = ("order", "seg", "first", "key", "lo", "hi", "s_end")


def _union_sorted(key, start, end) -> _Union:
    key = np.asarray(key, np.int64)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    u = _Union()
    n = key.size
    if n and _is_sorted(key, start):  # decoder output is sorted by lane, then program (= start) order
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


def _is_sorted(key: np.ndarray, start: np.ndarray) -> bool:
    dk = np.diff(key)
    return bool((dk >= 0).all() and (start[1:][dk == 0] >= start[:-1][dk == 0]).all())


def _clip(lo, hi, wlo, whi):
    """Clip intervals to per-interval windows; empty ones get length 0."""
    a = np.maximum(lo, wlo)
    b = np.minimum(hi, whi)
    return a, np.maximum(b, a)


def _intersection_length(key_a, lo_a, hi_a, key_b, lo_b, hi_b, keys: np.ndarray) -> np.ndarray:
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
    lifted = _lift(k, t)
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


def _lift(key: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """One int64 sort key ordering by (key, t): key rank * (time range + 1) + t - min(t); None when
    that overflows int64 (time range x key range: lanes days apart)."""
    rel = t - t.min()
    span = int(rel.max()) + 1
    rank = key - key.min()
    if int(rank.max()) * span >= (1 << 62):
        return None
    return rank * span + rel


def _percentile_of_sorted(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def _timed_lanes(trace: Trace) -> np.ndarray:
    """Lanes that wrote a timed record, sorted by lane id (searchsorted relies on it)."""
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    if lanes.size > 1 and not (np.diff(lanes["lane"]) > 0).all():
        lanes = lanes[np.argsort(lanes["lane"], kind="stable")]
    return lanes


# --- bubbles -----------------------------------------------------------------------------------------

LANE_BUBBLE_DTYPE = np.dtype(
    [
        ("lane", np.int64),
        ("block", np.int64),
        ("group", np.int64),
        ("sm", np.int64),
        ("window_ns", np.int64),
        ("busy_ns", np.int64),
        ("bubble_ns", np.int64),
        ("bubble_frac", np.float64),
        ("gaps", np.int64),
        ("largest_gap_ns", np.int64),
    ]
)

GAP_DTYPE = np.dtype(
    [
        ("lane", np.int64),
        ("block", np.int64),
        ("group", np.int64),
        ("start_ns", np.int64),
        ("end_ns", np.int64),
        ("dur_ns", np.int64),
        ("prev_event", np.int64),  # region that ended last before the gap; -1: lead-in
        ("next_event", np.int64),  # region that begins right after it; -1: tail
    ]
)


CHUNK_SPANS = 1 << 16  # spans analysed at a time (runs of whole blocks): ~150 B of temporaries a span


def _block_runs(trace: Trace, chunk_spans: int | None = None):
    """Yield (spans, timed lanes) per run of whole blocks, in lane order: the analyses per lane and per
    block are done run by run, so their temporaries stay bounded by a run (every timed lane is in
    exactly one run, also one without spans). Guarded by tests/test_analysis.py::test_runs_change_nothing."""
    sp = trace.spans
    lanes = _timed_lanes(trace)
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


def lane_gaps(trace: Trace) -> np.ndarray:
    """All gaps of all lanes (GAP_DTYPE), sorted by (lane, start_ns). See the module docstring."""
    parts = [_gaps(lanes, sp) for sp, lanes in _block_runs(trace)]
    return np.concatenate(parts) if parts else np.zeros(0, GAP_DTYPE)


def _gaps(lanes: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """The gaps of `lanes` (timed lanes, sorted), given all their spans (GAP_DTYPE, by lane then time)."""
    cols = _gap_columns(lanes, sp)
    # per lane the parts are already in time order (lead-in < between < tail): a stable sort by lane
    # merges the four sorted runs
    return _gap_rows(lanes, *(c[np.argsort(cols[0], kind="stable")] for c in cols))


def _rows_of(lane_ids: np.ndarray, lane_col: np.ndarray) -> np.ndarray:
    """Row of each lane_col value in the sorted lane_ids, -1 where absent (a lookup table over the ids'
    range when it is modest: runs hold nearby lanes)."""
    if lane_col.size == 0 or lane_ids.size == 0:
        return np.full(lane_col.size, -1, np.int64)
    lo, hi = int(lane_ids[0]), int(lane_ids[-1])
    if hi - lo <= 4 * lane_col.size + (1 << 16):
        lut = np.full(hi - lo + 1, -1, np.int64)
        lut[lane_ids - lo] = np.arange(lane_ids.size)
        rel = lane_col.astype(np.int64) - lo
        inside = (rel >= 0) & (rel <= hi - lo)
        return np.where(inside, lut[np.clip(rel, 0, hi - lo)], -1)
    row = np.minimum(np.searchsorted(lane_ids, lane_col), lane_ids.size - 1)
    return np.where(lane_ids[row] == lane_col, row, -1)


def _gap_columns(lanes: np.ndarray, sp: np.ndarray) -> tuple:
    """The gaps of `lanes` as columns (lane row, start, end, prev_event, next_event): lead-ins, gaps
    between unions, tails and whole empty windows, each part in (lane, time) order; empty gaps left out."""
    # spans clipped to their lane window (a span cannot legally leave it; clip anyway so numbers add up)
    row = _rows_of(lanes["lane"], sp["lane"])
    known = row >= 0
    if not known.all():
        sp, row = sp[known], row[known]
    s, e = _clip(sp["start_ns"], sp["end_ns"], lanes["first_ns"][row], lanes["last_ns"][row])
    u = _union_sorted(sp["lane"], s, e)
    ukey, ulo, uhi = u.key, u.lo, u.hi
    ev_sorted = sp["event"][u.order].astype(np.int64)
    # next_event of a gap: the first span (by start) of the union after it
    seg_first_event = ev_sorted[u.first] if u.first.size else np.zeros(0, np.int64)
    # prev_event: the span that ended last in the union before it (last index reaching the union's end)
    idx = np.arange(u.seg.size)
    reaches = u.s_end == uhi[u.seg] if u.seg.size else np.zeros(0, bool)
    last_idx = np.maximum.reduceat(np.where(reaches, idx, -1), u.first) if u.first.size else np.zeros(0, np.int64)
    seg_last_event = ev_sorted[last_idx] if u.first.size else np.zeros(0, np.int64)

    # gap candidates: [lane first, first union lo], between unions, [last union hi, lane last]
    lane_rows = np.searchsorted(lanes["lane"], ukey)
    n_lanes = lanes.size
    has_seg = np.zeros(n_lanes, bool)
    has_seg[lane_rows] = True
    seg_first_of_lane = np.r_[True, ukey[1:] != ukey[:-1]] if ukey.size else np.zeros(0, bool)
    seg_last_of_lane = np.r_[ukey[1:] != ukey[:-1], True] if ukey.size else np.zeros(0, bool)

    first, last, mid = lane_rows[seg_first_of_lane], lane_rows[seg_last_of_lane], ~seg_last_of_lane
    empty = np.flatnonzero(~has_seg)
    none = lambda k: np.full(k, -1, np.int64)  # noqa: E731
    row = np.concatenate([first, lane_rows[mid], last, empty])
    start = np.concatenate([lanes["first_ns"][first], uhi[mid], uhi[seg_last_of_lane], lanes["first_ns"][empty]])
    end = np.concatenate([ulo[seg_first_of_lane], np.roll(ulo, -1)[mid], lanes["last_ns"][last],
                          lanes["last_ns"][empty]])
    prev = np.concatenate([none(first.size), seg_last_event[mid], seg_last_event[seg_last_of_lane], none(empty.size)])
    nxt = np.concatenate([seg_first_event[seg_first_of_lane], np.roll(seg_first_event, -1)[mid], none(last.size),
                          none(empty.size)])
    keep = end > start
    return row[keep], start[keep], end[keep], prev[keep], nxt[keep]


def _gap_rows(lanes, rows, start, end, prev_event, next_event) -> np.ndarray:
    out = np.zeros(np.size(rows), GAP_DTYPE)
    out["lane"] = lanes["lane"][rows]
    out["block"] = lanes["block"][rows]
    out["group"] = lanes["group"][rows]
    out["start_ns"] = start
    out["end_ns"] = end
    out["dur_ns"] = np.asarray(end) - np.asarray(start)
    out["prev_event"] = prev_event
    out["next_event"] = next_event
    return out


def lane_bubbles(trace: Trace, gaps: np.ndarray | None = None) -> np.ndarray:
    """Per lane (LANE_BUBBLE_DTYPE): window, busy, bubble = window - busy, gap count, largest gap."""
    if gaps is None:
        return bubbles_and_largest_gaps(trace, 0)[0]
    return _bubbles(_timed_lanes(trace), gaps)


def bubbles_and_largest_gaps(trace: Trace, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """lane_bubbles and largest_gaps(lane_gaps(trace), k), run by run from gap columns: the gaps of all
    lanes (about one per region) are never held at once, and only the k longest become rows."""
    bubbles, top = [], []
    for sp, lanes in _block_runs(trace):
        row, start, end, prev, nxt = _gap_columns(lanes, sp)
        dur = end - start
        out = np.zeros(lanes.size, LANE_BUBBLE_DTYPE)
        for f in ("lane", "block", "group", "sm"):
            out[f] = lanes[f]
        out["window_ns"] = lanes["last_ns"] - lanes["first_ns"]
        out["bubble_ns"] = np.bincount(row, weights=dur, minlength=lanes.size).astype(np.int64)  # exact below 2**53
        out["busy_ns"] = out["window_ns"] - out["bubble_ns"]
        out["gaps"] = np.bincount(row, minlength=lanes.size)
        if row.size:
            o = np.argsort(row, kind="stable")
            starts = np.flatnonzero(np.r_[True, row[o][1:] != row[o][:-1]])
            out["largest_gap_ns"][row[o][starts]] = np.maximum.reduceat(dur[o], starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["bubble_frac"] = np.where(out["window_ns"] > 0, out["bubble_ns"] / np.maximum(out["window_ns"], 1), 0.0)
        bubbles.append(out)
        if k <= 0:
            pick = np.zeros(0, np.int64)
        elif dur.size > k:  # every gap as long as the k-th longest (ties are ordered by largest_gaps)
            pick = np.flatnonzero(dur >= np.partition(dur, dur.size - k)[dur.size - k])
        else:
            pick = np.arange(dur.size)
        top.append(largest_gaps(_gap_rows(lanes, row[pick], start[pick], end[pick], prev[pick], nxt[pick]), k))
    if not bubbles:
        return np.zeros(0, LANE_BUBBLE_DTYPE), np.zeros(0, GAP_DTYPE)
    return np.concatenate(bubbles), largest_gaps(np.concatenate(top), k)


def _bubbles(lanes: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    out = np.zeros(lanes.size, LANE_BUBBLE_DTYPE)
    for f in ("lane", "block", "group", "sm"):
        out[f] = lanes[f]
    out["window_ns"] = lanes["last_ns"] - lanes["first_ns"]
    row = np.searchsorted(lanes["lane"], gaps["lane"])
    bubble = np.zeros(lanes.size, np.int64)
    np.add.at(bubble, row, gaps["dur_ns"])
    largest = np.zeros(lanes.size, np.int64)
    np.maximum.at(largest, row, gaps["dur_ns"])
    out["bubble_ns"] = bubble
    out["busy_ns"] = out["window_ns"] - bubble
    out["gaps"] = np.bincount(row, minlength=lanes.size)
    out["largest_gap_ns"] = largest
    with np.errstate(invalid="ignore", divide="ignore"):
        out["bubble_frac"] = np.where(out["window_ns"] > 0, bubble / np.maximum(out["window_ns"], 1), 0.0)
    return out


def largest_gaps(gaps: np.ndarray, k: int = 10) -> np.ndarray:
    """The k longest gaps, longest first; ties by start, then lane (a strict order: the k are the same
    whether taken from all gaps or from the k of each run)."""
    if gaps.size == 0 or k <= 0:
        return gaps[:0]
    if gaps.size > k:  # only the longest need sorting: every gap as long as the k-th longest
        cut = np.partition(gaps["dur_ns"], gaps.size - k)[gaps.size - k]
        gaps = gaps[gaps["dur_ns"] >= cut]
    order = np.lexsort((gaps["lane"], gaps["start_ns"], -gaps["dur_ns"]))
    return gaps[order[:k]]


# --- overlap between groups ---------------------------------------------------------------------------

OVERLAP_DTYPE = np.dtype(
    [
        ("block", np.int64),
        ("group_a", np.int64),
        ("group_b", np.int64),
        ("a_ns", np.int64),  # |U(A)| in the block
        ("b_ns", np.int64),
        ("both_ns", np.int64),  # |U(A) ∩ U(B)|
        ("a_overlapped", np.float64),  # both / a  (NaN when a == 0)
        ("b_overlapped", np.float64),  # both / b
    ]
)


def group_overlap(trace: Trace, pairs: list[tuple[int, int]] | None = None) -> np.ndarray:
    """Per block and group pair (OVERLAP_DTYPE). `pairs` default: every (a, b) with a < b among the
    groups that have spans. Blocks where neither group has spans are left out."""
    sp = trace.spans
    group = sp["group"]
    groups = distinct_small(group) if group.size and int(group.min()) >= 0 else np.unique(group)
    if pairs is None:
        pairs = [(int(a), int(b)) for i, a in enumerate(groups) for b in groups[i + 1 :]]
    rows: list = [[] for _ in pairs]
    for chunk, _ in _block_runs(trace):  # runs of whole blocks: a block's rows come from one run
        unions: dict = {}  # group -> its per-block union in this run, shared by the pairs
        for i, (a, b) in enumerate(pairs):  # few pairs: a Python loop over groups, never over spans
            rows[i].append(_overlap_pair(chunk, a, b, unions))
    flat = [r for per_pair in rows for r in per_pair]
    return np.concatenate(flat) if flat else np.zeros(0, OVERLAP_DTYPE)


def _block_union(sp: np.ndarray, group: int, unions: dict):
    if group not in unions:
        m = sp["group"] == group
        unions[group] = union_intervals(sp["block"][m], sp["start_ns"][m], sp["end_ns"][m])[:3]
    return unions[group]


def _union_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted distinct ids of a and b (each sorted): a presence table over their range (a run's blocks
    are nearby), else np.union1d."""
    if a.size == 0 or b.size == 0:
        return np.union1d(a, b)
    lo, hi = min(int(a[0]), int(b[0])), max(int(a[-1]), int(b[-1]))
    if hi - lo > 4 * (a.size + b.size) + (1 << 16):
        return np.union1d(a, b)
    present = np.zeros(hi - lo + 1, bool)
    present[a - lo] = True
    present[b - lo] = True
    return np.flatnonzero(present) + lo


def _overlap_pair(sp: np.ndarray, a: int, b: int, unions: dict | None = None) -> np.ndarray:
    unions = {} if unions is None else unions
    ka, loa, hia = _block_union(sp, a, unions)
    kb, lob, hib = _block_union(sp, b, unions)
    blocks = _union_ids(ka, kb)
    out = np.zeros(blocks.size, OVERLAP_DTYPE)
    out["block"], out["group_a"], out["group_b"] = blocks, a, b
    np.add.at(out["a_ns"], np.searchsorted(blocks, ka), hia - loa)
    np.add.at(out["b_ns"], np.searchsorted(blocks, kb), hib - lob)
    out["both_ns"] = _intersection_length(ka, loa, hia, kb, lob, hib, blocks)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["a_overlapped"] = np.where(out["a_ns"] > 0, out["both_ns"] / out["a_ns"], np.nan)
        out["b_overlapped"] = np.where(out["b_ns"] > 0, out["both_ns"] / out["b_ns"], np.nan)
    return out


def overlap_summary(per_block: np.ndarray) -> list[dict]:
    """Per group pair: time-weighted overlap (sum both / sum a) and the spread of per-block fractions."""
    out = []
    for a, b in sorted({(int(r["group_a"]), int(r["group_b"])) for r in per_block[["group_a", "group_b"]]}):
        m = per_block[(per_block["group_a"] == a) & (per_block["group_b"] == b)]
        sa, sb, both = int(m["a_ns"].sum()), int(m["b_ns"].sum()), int(m["both_ns"].sum())
        fa = m["a_overlapped"][~np.isnan(m["a_overlapped"])]
        fb = m["b_overlapped"][~np.isnan(m["b_overlapped"])]
        out.append(
            {
                "group_a": a,
                "group_b": b,
                "blocks": int(m.size),
                "a_overlapped": both / sa if sa else float("nan"),
                "b_overlapped": both / sb if sb else float("nan"),
                "a_overlapped_min": float(fa.min()) if fa.size else float("nan"),
                "a_overlapped_p50": float(np.median(fa)) if fa.size else float("nan"),
                "b_overlapped_min": float(fb.min()) if fb.size else float("nan"),
                "b_overlapped_p50": float(np.median(fb)) if fb.size else float("nan"),
            }
        )
    return out


# --- blocks, SMs: waves, tail, imbalance ---------------------------------------------------------------

BLOCK_DTYPE = np.dtype(
    [("block", np.int64), ("sm", np.int64), ("start_ns", np.int64), ("end_ns", np.int64), ("lanes", np.int64)]
)

SM_DTYPE = np.dtype(
    [
        ("sm", np.int64),
        ("blocks", np.int64),
        ("busy_ns", np.int64),
        ("first_ns", np.int64),
        ("last_ns", np.int64),
        ("max_resident", np.int64),
        ("waves", np.int64),
        ("tail_busy_ns", np.int64),
    ]
)


def block_intervals(trace: Trace) -> np.ndarray:
    """Per block (BLOCK_DTYPE): [min lane first_ns, max lane last_ns], SM (max over its lanes: -1 only
    when no lane knows it), lanes that wrote anything."""
    lanes = _timed_lanes(trace)
    blocks, inv = np.unique(lanes["block"], return_inverse=True)
    out = np.zeros(blocks.size, BLOCK_DTYPE)
    out["block"] = blocks
    out["start_ns"] = np.iinfo(np.int64).max
    np.minimum.at(out["start_ns"], inv, lanes["first_ns"])
    out["end_ns"] = np.iinfo(np.int64).min
    np.maximum.at(out["end_ns"], inv, lanes["last_ns"])
    out["sm"] = -1
    np.maximum.at(out["sm"], inv, lanes["sm"])
    out["lanes"] = np.bincount(inv, minlength=blocks.size)
    return out


def sm_table(trace: Trace, blocks: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Per SM (SM_DTYPE, SMs with a known id) and launch-level scalars: imbalance, tail, waves."""
    blocks = block_intervals(trace) if blocks is None else blocks
    launch_start = trace.start_ns
    ends = blocks["end_ns"]
    summary: dict = {
        "blocks": int(blocks.size),
        "launch_ns": int(ends.max() - launch_start) if blocks.size else 0,
    }
    if blocks.size:
        p50_end = float(np.percentile(ends, 50))
        rel_end = (ends - launch_start).astype(np.float64)
        summary.update(
            block_end_p50_ns=p50_end - launch_start,
            block_end_max_ns=int(ends.max() - launch_start),
            tail_ns=float(ends.max() - p50_end),
            tail_frac=float((ends.max() - p50_end) / max(ends.max() - launch_start, 1)),
            imbalance_block_end=float(rel_end.max() / rel_end.mean()) if rel_end.mean() > 0 else float("nan"),
        )
    known = blocks[blocks["sm"] >= 0]
    sms, inv = np.unique(known["sm"], return_inverse=True)
    table = np.zeros(sms.size, SM_DTYPE)
    table["sm"] = sms
    if sms.size:
        table["blocks"] = np.bincount(inv, minlength=sms.size)
        k, lo, hi, _ = union_intervals(known["sm"], known["start_ns"], known["end_ns"])
        rows = np.searchsorted(sms, k)
        np.add.at(table["busy_ns"], rows, hi - lo)
        table["first_ns"] = np.iinfo(np.int64).max
        np.minimum.at(table["first_ns"], inv, known["start_ns"])
        table["last_ns"] = np.iinfo(np.int64).min
        np.maximum.at(table["last_ns"], inv, known["end_ns"])
        table["max_resident"] = _max_concurrency(known["sm"], known["start_ns"], known["end_ns"], sms)
        table["waves"] = -(-table["blocks"] // np.maximum(table["max_resident"], 1))
        t50 = np.percentile(blocks["end_ns"], 50)
        a, b = _clip(lo, hi, np.float64(t50), np.float64(blocks["end_ns"].max()))
        np.add.at(table["tail_busy_ns"], rows, (b - a).astype(np.int64))
        busy = table["busy_ns"].astype(np.float64)
        summary.update(
            sms=int(sms.size),
            imbalance_sm_busy=float(busy.max() / busy.mean()) if busy.mean() > 0 else float("nan"),
            sm_busy_min_ns=int(busy.min()),
            sm_busy_max_ns=int(busy.max()),
            waves_max=int(table["waves"].max()),
            max_resident=int(table["max_resident"].max()),
        )
        if summary.get("tail_ns", 0) > 0:
            summary["tail_sm_utilization"] = float(table["tail_busy_ns"].sum() / (sms.size * summary["tail_ns"]))
    return table, summary


def _max_concurrency(key, start, end, keys) -> np.ndarray:
    """Most intervals open at one time, per key. At equal times ends come first (touching = not concurrent)."""
    k = np.concatenate([key, key])
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones_like(start), -np.ones_like(end)])
    order = np.lexsort((d, t, k))
    k, level = k[order], np.cumsum(d[order])  # returns to 0 at the end of each key
    out = np.zeros(keys.size, np.int64)
    np.maximum.at(out, np.searchsorted(keys, k), level)
    return out


# --- critical lane per block -----------------------------------------------------------------------

CRITICAL_DTYPE = np.dtype(
    [
        ("block", np.int64),
        ("lane", np.int64),
        ("group", np.int64),
        ("sm", np.int64),
        ("end_ns", np.int64),  # last_ns of the critical lane = block end
        ("slack_ns", np.int64),  # block end - latest end of any other lane of the block
        ("last_event", np.int64),  # region of that lane that ended last; -1 none
        ("last_event_end_ns", np.int64),
    ]
)


def critical_lanes(trace: Trace) -> np.ndarray:
    """Per block, the lane that finished last and what it did last (CRITICAL_DTYPE)."""
    lanes = _timed_lanes(trace)
    if lanes.size == 0:
        return np.zeros(0, CRITICAL_DTYPE)
    order = np.lexsort((lanes["last_ns"], lanes["block"]))  # within a block, latest end last
    sl = lanes[order]
    last = np.r_[sl["block"][1:] != sl["block"][:-1], True]
    crit = sl[last]
    out = np.zeros(crit.size, CRITICAL_DTYPE)
    for f in ("block", "lane", "group", "sm"):
        out[f] = crit[f]
    out["end_ns"] = crit["last_ns"]
    idx_last = np.flatnonzero(last)
    runner = idx_last - 1
    same_block = (runner >= 0) & (sl["block"][np.maximum(runner, 0)] == crit["block"])
    out["slack_ns"] = np.where(same_block, crit["last_ns"] - sl["last_ns"][np.maximum(runner, 0)], 0)
    # last region of each critical lane, run of whole blocks by run (a lane is in one run)
    out["last_event"] = -1
    out["last_event_end_ns"] = -1
    critical = _lane_mask(trace, crit["lane"])
    by_lane = np.argsort(out["lane"])
    for spans, _ in _block_runs(trace):
        cs = spans[critical[spans["lane"]]]  # the critical lanes' spans (one lane a block)
        if not cs.size:
            continue
        if not (np.diff(cs["lane"]) >= 0).all():
            cs = cs[np.argsort(cs["lane"], kind="stable")]
        first = np.flatnonzero(np.r_[True, cs["lane"][1:] != cs["lane"][:-1]])
        end = cs["end_ns"].astype(np.int64)
        seg = np.cumsum(np.r_[True, cs["lane"][1:] != cs["lane"][:-1]]) - 1
        seg_max = np.maximum.reduceat(end, first)
        idx = np.arange(cs.size)
        last = np.maximum.reduceat(np.where(end == seg_max[seg], idx, -1), first)  # last span ending last
        rows = by_lane[np.searchsorted(out["lane"], cs["lane"][first], sorter=by_lane)]
        out["last_event"][rows] = cs["event"][last]
        out["last_event_end_ns"][rows] = end[last]
    return out


def _lane_mask(trace: Trace, lanes: np.ndarray) -> np.ndarray:
    """Boolean table over lane ids (index with a lane column instead of np.isin)."""
    size = max(trace.num_lanes, int(trace.lanes["lane"].max(initial=-1)) + 1,
               int(trace.spans["lane"].max(initial=-1)) + 1)
    mask = np.zeros(size, bool)
    mask[lanes] = True
    return mask


CRITICAL_REGION_DTYPE = np.dtype(
    [("group", np.int64), ("event", np.int64), ("spans", np.int64), ("total_ns", np.int64), ("share", np.float64)]
)


def critical_regions(trace: Trace, crit: np.ndarray | None = None) -> np.ndarray:
    """What the critical lanes spent their time in: per (group, event), spans and inclusive time summed
    over all blocks' critical lanes; share = total / sum of the critical lanes' windows. Nested regions
    count in full for each level, so shares may add up to more than 1."""
    crit = critical_lanes(trace) if crit is None else crit
    mask = _lane_mask(trace, crit["lane"])
    lanes = trace.lanes[mask[trace.lanes["lane"]]]
    window = int((lanes["last_ns"] - lanes["first_ns"]).sum())
    # per run of whole blocks, the counts and times of its (group, event) codes; summed over runs below
    # (float sums of integer ns are exact below 2**53)
    run_keys, run_spans, run_totals = [], [], []
    for spans, _ in _block_runs(trace):
        cs = spans[mask[spans["lane"]]]
        code = cs["group"].astype(np.int64) * (MAX_EVENT_ID + 1) + cs["event"]
        keys, inv = np.unique(code, return_inverse=True)
        run_keys.append(keys)
        run_spans.append(np.bincount(inv, minlength=keys.size))
        run_totals.append(np.bincount(inv, weights=cs["end_ns"] - cs["start_ns"], minlength=keys.size))
    keys, inv = np.unique(np.concatenate(run_keys or [np.zeros(0, np.int64)]), return_inverse=True)
    spans_of = np.bincount(inv, weights=np.concatenate(run_spans or [np.zeros(0)]), minlength=keys.size)
    total_of = np.bincount(inv, weights=np.concatenate(run_totals or [np.zeros(0)]), minlength=keys.size)
    out = np.zeros(len(keys), CRITICAL_REGION_DTYPE)
    if len(keys):
        out["group"], out["event"] = np.divmod(keys, MAX_EVENT_ID + 1)
        out["spans"] = spans_of
        out["total_ns"] = total_of.astype(np.int64)  # float sums are exact below 2**53 ns
        out["share"] = out["total_ns"] / window if window else 0.0
    return out[np.argsort(-out["total_ns"], kind="stable")]


# --- histograms -----------------------------------------------------------------------------------------


def duration_histogram(trace: Trace, group: int, event: int, bins: int = 20, log: bool = False):
    """Counts and bin edges (ns) of the durations of one (group, event). `log`: geometric bins."""
    sp = trace.spans
    d = (sp["end_ns"] - sp["start_ns"])[(sp["group"] == group) & (sp["event"] == event)]
    if d.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    lo, hi = float(d.min()), float(d.max())
    if hi <= lo:
        edges = np.array([lo - 0.5, hi + 0.5])
    elif log and lo > 0:
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        edges = np.linspace(lo, hi, bins + 1)
    counts, edges = np.histogram(d, edges)
    return counts, edges


# --- everything at once (what `ikp stats` prints) -------------------------------------------------------


def launch_summary(trace: Trace) -> dict:
    """sm_table's scalars. For a session (meta['parts']: several launches in one trace) tail, waves and
    imbalance only mean something per launch: each is computed per launch, and the summary holds the
    median over launches of every number plus the per-launch list under 'per_launch'."""
    parts = (trace.meta or {}).get("parts")
    if not parts or len(parts) < 2:
        return sm_table(trace)[1]
    import dataclasses

    per = []
    for p in parts:  # per launch: few
        lo, hi = p["block_offset"], p["block_offset"] + p["num_blocks"]
        lm = (trace.lanes["block"] >= lo) & (trace.lanes["block"] < hi)
        sub = dataclasses.replace(trace, lanes=trace.lanes[lm], spans=trace.spans[:0])
        if (sub.lanes["first_ns"] >= 0).any():
            per.append(dict(sm_table(sub)[1], label=p.get("label")))
    keys = sorted({k for d in per for k, v in d.items() if isinstance(v, (int, float))})
    out: dict = {k: float(np.median([d[k] for d in per if k in d])) for k in keys}
    out["launches"] = len(per)
    out["per_launch"] = per
    return out


def analyze(trace: Trace, top_gaps: int = 10) -> dict:
    """All analyses as plain Python data (JSON-ready)."""
    bubbles, top = bubbles_and_largest_gaps(trace, top_gaps)
    launch = launch_summary(trace)
    crit = critical_lanes(trace)
    names = trace.names
    total_window = int(bubbles["window_ns"].sum())
    out = {
        "launch": launch,
        "bubbles": {
            "lanes": int(bubbles.size),
            "bubble_ns_total": int(bubbles["bubble_ns"].sum()),
            "bubble_frac": float(bubbles["bubble_ns"].sum() / total_window) if total_window else 0.0,
            "bubble_frac_p50": _percentile_of_sorted(bubbles["bubble_frac"], 50),
            "bubble_frac_max": float(bubbles["bubble_frac"].max()) if bubbles.size else 0.0,
            "per_group": _bubbles_per_group(bubbles, names),
            "largest_gaps": [_gap_json(g, names, trace.start_ns) for g in top],
        },
        "overlap": [
            dict(r, group_a=names.group(r["group_a"]), group_b=names.group(r["group_b"]))
            for r in overlap_summary(group_overlap(trace))
        ],
        "critical": {
            "blocks_by_group": {
                names.group(g): int(c) for g, c in zip(*np.unique(crit["group"], return_counts=True))
            },
            "last_event": {
                (names.event(e) if e >= 0 else "(none)"): int(c)
                for e, c in zip(*np.unique(crit["last_event"], return_counts=True))
            },
            "slack_ns_p50": _percentile_of_sorted(crit["slack_ns"], 50),
            "regions": [
                {
                    "group": names.group(r["group"]),
                    "event": names.event(r["event"]),
                    "spans": int(r["spans"]),
                    "total_ns": int(r["total_ns"]),
                    "share": float(r["share"]),
                }
                for r in critical_regions(trace, crit)
            ],
        },
    }
    return out


def _bubbles_per_group(bubbles: np.ndarray, names) -> list[dict]:
    out = []
    for g in np.unique(bubbles["group"]):
        m = bubbles[bubbles["group"] == g]
        w = int(m["window_ns"].sum())
        out.append(
            {
                "group": names.group(g),
                "lanes": int(m.size),
                "bubble_frac": float(m["bubble_ns"].sum() / w) if w else 0.0,
                "bubble_frac_max": float(m["bubble_frac"].max()),
                "largest_gap_ns": int(m["largest_gap_ns"].max()),
            }
        )
    return out


def _gap_json(g, names, origin: int) -> dict:
    return {
        "lane": int(g["lane"]),
        "block": int(g["block"]),
        "group": names.group(g["group"]),
        "start_ns": int(g["start_ns"] - origin),
        "dur_ns": int(g["dur_ns"]),
        "after": names.event(g["prev_event"]) if g["prev_event"] >= 0 else "(lane start)",
        "before": names.event(g["next_event"]) if g["next_event"] >= 0 else "(lane end)",
    }
