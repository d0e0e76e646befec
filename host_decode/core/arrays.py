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
