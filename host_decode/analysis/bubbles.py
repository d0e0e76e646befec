"""Bubbles: the time each lane spent in no region, and the gaps that make it up.

Definitions (all times in ns on the trace's timeline):
* **window of a lane** = [lane.first_ns, lane.last_ns]: its first and last timed record (anchors and
  finalize included, so set-up before the first region and work after the last one count).
* **busy time of a lane** = |union of the lane's spans| (all depths; nested or overlapping regions count
  once), clipped to the window.
* **bubble of a lane** = window length - busy time: time the lane spent in no region.
* **gap** = one maximal interval of the window covered by no span of the lane. A gap has the region
  that ended last before it (``prev_event``, -1 when it is the lead-in) and the region that starts
  right after it (``next_event``, -1 when it is the tail after the last region).

Invariants, and the tests that guard them:
- gaps and bubbles equal hand-computed values
  (tests/unit/host_decode/analysis/test_analysis.py::test_gaps_and_bubbles_hand_computed) and a per-nanosecond model on
  random traces (::test_random_traces_match_per_ns_model);
- window = busy + bubble per lane, and the tables do not depend on how the spans are cut into runs
  (::test_runs_change_nothing); an empty trace gives empty tables (::test_empty_trace_gives_empty_tables_not_errors).
"""

from __future__ import annotations

import numpy as np

from host_decode.analysis.intervals import block_runs, clip, timed_lanes, union_sorted
from host_decode.core.model import Trace

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



def lane_gaps(trace: Trace) -> np.ndarray:
    """All gaps of all lanes (GAP_DTYPE), sorted by (lane, start_ns). See the module docstring."""
    parts = [_gaps(lanes, sp) for sp, lanes in block_runs(trace)]
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
    s, e = clip(sp["start_ns"], sp["end_ns"], lanes["first_ns"][row], lanes["last_ns"][row])
    u = union_sorted(sp["lane"], s, e)
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
    return _bubbles(timed_lanes(trace), gaps)


def bubbles_and_largest_gaps(trace: Trace, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """lane_bubbles and largest_gaps(lane_gaps(trace), k), run by run from gap columns: the gaps of all
    lanes (about one per region) are never held at once, and only the k longest become rows."""
    bubbles, top = [], []
    for sp, lanes in block_runs(trace):
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


