"""Id helpers of the writers: sorted distinct ids, membership, positions, per-lane lookups, each by a
dense lookup table for ids of modest range (lanes, event ids) and by a sort or binary search otherwise.

Invariants, and the tests that guard them: each equals its plain numpy spelling (np.unique, np.isin,
np.searchsorted) on the ids the writers meet; the writers' byte-identical outputs
(tests/unit/host_decode/writers/test_perfetto.py, tests/unit/host_decode/writers/test_chrome_json.py,
tests/golden/test_golden_outputs.py) go through them.
"""

from __future__ import annotations

import numpy as np


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
