"""Array helpers shared by the stages after the decoder (writers, analysis, reports)."""

from __future__ import annotations

import bisect

import numpy as np


def positions_in_sorted(column: np.ndarray, keys) -> np.ndarray:
    """np.searchsorted(column, keys) (side="left") for a few keys in a long nondecreasing column, without
    the contiguous copy np.searchsorted makes of a strided column (a span table's "lane") or of a column
    narrower than the keys (int32 lanes, int64 keys: 40 MB for 5 M spans): one binary search per key,
    reading O(log n) elements of the column in place."""
    return np.array([bisect.bisect_left(column, int(key)) for key in np.asarray(keys).ravel()], np.int64)


def distinct_small(column: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """Sorted distinct values of an integer column of small non-negative values (group ids, event ids), a
    chunk at a time (np.bincount of the whole column would first copy it to intp: 40 MB at 5 M rows)."""
    seen = np.zeros(0, bool)
    for i in range(0, column.size, chunk):
        counts = np.bincount(column[i : i + chunk])
        if counts.size > seen.size:
            seen = np.concatenate([seen, np.zeros(counts.size - seen.size, bool)])
        seen[: counts.size] |= counts > 0
    return np.flatnonzero(seen)


def runs_of_whole_lanes(lane: np.ndarray, rows: int):
    """Slices of a nondecreasing lane column, each holding whole lanes and about `rows` rows (a lane longer
    than that is one slice of its own)."""
    n = lane.size
    cuts = np.unique(np.asarray(lane[np.arange(rows, n, rows)], np.int64))
    bounds = [0, *positions_in_sorted(lane, cuts).tolist(), n]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            yield slice(a, b)
