"""Pairing of BEGIN and END records into regions (step 3 of host_decode.core.decoder), whole-array.

Invariants a change could break, with the test guarding each:
* Pairing is a stack per (lane, event id): an END pairs with the latest open BEGIN of its id in its lane;
  an END at depth 0 is unmatched, a BEGIN left open is unmatched (tests/unit/host_decode/core/test_decode.py::
  test_nested_overlap_and_every_bucket, ::test_recursive_same_id_three_deep).
* A span's depth is the number of paired regions of its lane open at its BEGIN, whatever their ids
  (tests/unit/host_decode/core/test_decode.py::test_recursive_same_id_three_deep,
  tests/unit/host_decode/core/test_decode_timeline.py:: test_span_rows_round_trip_every_field).
* The fast path (balanced, properly nested lanes: one pass per nesting level) and the general path (a
  radix sort by (event, lane) and nesting level) pair alike: tests/unit/host_decode/core/test_decode_props.py checks
  random programs, nested and overlapping, against a per-record reference. No Python loop per record on either.
"""

from __future__ import annotations

import numpy as np

from host_decode.core import wire

_BEGIN, _END = int(wire.EventType.BEGIN), int(wire.EventType.END)


def pair_records(etype, event, loc, bounds, not_be):
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
