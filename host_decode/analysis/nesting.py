"""Nesting of regions within a lane: each span's parent (the span directly around it), exclusive
durations (a span's time minus the spans directly inside it), and per (group, region) row the sum of
exclusive time and the region it runs inside most often.

Spans are sorted by lane, then begin in program order (core.model); ``depth`` counts the regions of
the lane open when a span began. Every pass goes run of whole lanes by run (lane_runs: a span's parent
is in its lane), so no per-span index of the whole table is held beyond the parents themselves.

Invariants, and the tests that guard them:
- a span's parent is the last span of the same lane, in program order, one level shallower; never a span
  of another lane (tests/unit/host_decode/reports/test_report_timeline.py::test_nesting_and_exclusive_time);
- exclusive time is never below 0, and the exclusive times of one group add up to at most its lane time
  (::test_nesting_and_exclusive_time, ::test_region_rows_exclusive_and_parent);
- runs of whole lanes give what one run gives; a table out of lane order is one run
  (::test_runs_of_lanes_change_nothing).
"""

from __future__ import annotations

import numpy as np

from host_decode.core import wire
from host_decode.core.arrays import runs_of_whole_lanes

LANE_RUN_SPANS = 1 << 18  # spans per run of whole lanes in the report's per-span passes


def lane_runs(sp: np.ndarray):
    """Slices of the span table holding whole lanes (about LANE_RUN_SPANS spans each) when it is in lane
    order (decoded traces are), else the whole table as one slice."""
    lane = sp["lane"]
    if lane.size and not bool((lane[1:] >= lane[:-1]).all()):
        return iter([slice(0, lane.size)])
    return runs_of_whole_lanes(lane, LANE_RUN_SPANS)


def span_parents(sp: np.ndarray) -> np.ndarray:
    """Index of each span's enclosing span (-1 for none): the last span of the same lane, in program
    order, one level shallower (``depth`` counts regions open when a span began). Spans are sorted by
    lane, then begin in program order (core.model): then run of whole lanes by run;
    tests/unit/host_decode/reports/test_report_timeline.py::test_nesting_and_exclusive_time."""
    n = sp.size
    index = np.int32 if n < 1 << 31 else np.int64  # indices, half the memory for any real capture
    parent = np.full(n, -1, index)
    if n == 0:
        return parent
    lane = sp["lane"]
    if bool((lane[1:] >= lane[:-1]).all()):  # decoded traces: already in lane order
        for part in lane_runs(sp):
            found = _parents_in_lane_order(lane[part], sp["depth"][part], index)
            found[found >= 0] += part.start
            parent[part] = found
        return parent
    order = np.argsort(lane, kind="stable").astype(index)
    found = _parents_in_lane_order(lane[order], sp["depth"][order], index)
    ok = found >= 0
    parent[order[ok]] = order[found[ok]]
    return parent


def _parents_in_lane_order(lane: np.ndarray, depth: np.ndarray, index) -> np.ndarray:
    """span_parents of spans already in lane order (positions in these arrays)."""
    parent = np.full(lane.size, -1, index)
    for d in range(1, int(depth.max()) + 1 if depth.size else 1):
        kids, cands = np.flatnonzero(depth == d).astype(index), np.flatnonzero(depth == d - 1).astype(index)
        if not kids.size or not cands.size:
            continue
        k = np.searchsorted(cands, kids) - 1
        ok = k >= 0
        found = cands[np.maximum(k, 0)]
        ok &= lane[found] == lane[kids]
        parent[kids[ok]] = found[ok]
    return parent


def exclusive_durations(sp: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each span's duration minus the time of the spans directly inside it (never below 0: regions of
    other ids that overlap without nesting can cover more than their parent)."""
    dur = (sp["end_ns"] - sp["start_ns"]).astype(np.int64)
    inner = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=sp.size).astype(np.int64)
    return np.maximum(dur - inner, 0)



def nesting_by_row(sp: np.ndarray, ids: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the sum of its spans' exclusive_durations, and the event its spans run inside most often
    (ties: the smaller id; -1, no parent, before any event). Both are found run of whole lanes by run (a
    span's parent is in its lane), so no parent index of the whole table is held; exact: each run's
    per-row sums are integers below 2**53."""
    exclusive = np.zeros(rows, np.int64)
    codes, counts = [], []  # per run: distinct (row, parent event + 1) codes and how many spans have each
    for part in lane_runs(sp):
        spans = sp[part]
        parent = span_parents(spans)
        exclusive += np.rint(np.bincount(ids[part], weights=exclusive_durations(spans, parent),
                                         minlength=rows)).astype(np.int64)
        up = np.where(parent >= 0, spans["event"][np.maximum(parent, 0)], -1).astype(np.int64)
        code, count = np.unique(ids[part] * np.int64(wire.MAX_EVENT_ID + 2) + (up + 1), return_counts=True)
        codes.append(code)
        counts.append(count)
    code, where = np.unique(np.concatenate(codes), return_inverse=True)
    count = np.bincount(where, weights=np.concatenate(counts))
    row, up = np.divmod(code, wire.MAX_EVENT_ID + 2)
    best = np.lexsort((up, -count, row))  # per row, the most spans first, then the smaller event
    first = best[np.r_[True, row[best][1:] != row[best][:-1]]]
    parent_event = np.full(rows, -1, np.int64)
    parent_event[row[first]] = up[first] - 1
    return exclusive, parent_event


