"""Array helpers shared by the stages after the decoder (writers, analysis, reports)."""

from __future__ import annotations

import bisect

import numpy as np


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each value among the distinct values, the sorted distinct values): the same order in a
    range below values.size, for keys that pack times with other fields and would overflow int64 over a
    very long time range (a trace whose lanes sit days apart)."""
    distinct, rank = np.unique(values, return_inverse=True)
    return rank.reshape(-1).astype(np.int64, copy=False), distinct


def segmented_cummax(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Running max of int64 `values` restarting where `segment` (nondecreasing segment numbers) changes.
    Each segment is lifted above the ones before, so one running max never carries across segments; by
    the values' range, or by their ranks where range x segments would overflow int64 (lanes days apart,
    epoch times beside a time near 0)."""
    if values.size == 0:
        return values.copy()
    segment = segment.astype(np.int64)
    low = int(values.min())
    width = int(values.max()) - low + 1
    if width * (int(segment[-1]) + 1) < 1 << 62:
        lift = segment * width
        return np.maximum.accumulate((values - low) + lift) - lift + low
    rank, distinct = _ranks(values)
    lift = segment * distinct.size
    return distinct[np.maximum.accumulate(rank + lift) - lift]


def positions_in_sorted(column: np.ndarray, keys) -> np.ndarray:
    """np.searchsorted(column, keys) (side="left") for a few keys in a long nondecreasing column, without
    the contiguous copy np.searchsorted makes of a strided column (a span table's "lane") or of a column
    narrower than the keys (int32 lanes, int64 keys: 40 MB for 5 M spans): one binary search per key,
    reading O(log n) elements of the column in place."""
    return np.array([bisect.bisect_left(column, int(key)) for key in np.asarray(keys).ravel()], np.int64)


CHUNK_ROWS = 1 << 18  # rows of a column read at a time: each chunk's intp or int64 temporary is 2 MB


def distinct_small(column: np.ndarray, chunk: int = CHUNK_ROWS) -> np.ndarray:
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


def count_of(column: np.ndarray, value, chunk: int = CHUNK_ROWS) -> int:
    """np.count_nonzero(column == value), a chunk at a time (no mask of the whole column)."""
    return sum(int(np.count_nonzero(column[i : i + chunk] == value)) for i in range(0, column.size, chunk))


def positions_of(column: np.ndarray, value, chunk: int = CHUNK_ROWS) -> np.ndarray:
    """np.flatnonzero(column == value), as int32 when the column is shorter than 2**31, a chunk at a time
    (no mask of the whole column, no int64 positions)."""
    index = np.int32 if column.size < 1 << 31 else np.int64
    out = np.empty(count_of(column, value, chunk), index)
    filled = 0
    for i in range(0, column.size, chunk):
        found = np.flatnonzero(column[i : i + chunk] == value)
        out[filled : filled + found.size] = found
        out[filled : filled + found.size] += i
        filled += found.size
    return out


def span_durations(spans: np.ndarray, rows: np.ndarray, chunk: int = CHUNK_ROWS) -> np.ndarray:
    """end_ns - start_ns (int64) of the spans picked by `rows`, a boolean mask or positions, gathered a
    chunk at a time: no second gathered column (5 MB per million spans) is ever whole."""
    if rows.dtype == bool:
        out = np.empty(int(np.count_nonzero(rows)), np.int64)
        filled = 0
        for i in range(0, rows.size, chunk):
            part, picked = spans[i : i + chunk], rows[i : i + chunk]
            end = part["end_ns"][picked]
            out[filled : filled + end.size] = end
            out[filled : filled + end.size] -= part["start_ns"][picked]
            filled += end.size
        return out
    out = np.empty(rows.size, np.int64)
    for i in range(0, rows.size, chunk):
        picked = rows[i : i + chunk]
        out[i : i + chunk] = spans["end_ns"][picked]
        out[i : i + chunk] -= spans["start_ns"][picked]
    return out
