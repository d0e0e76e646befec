"""Statistics core on the span table: per (group, event) count, total, mean, min, max, p50/p90/p95/p99, cv.

Linear time in the number of regions: rows get a dense (group, event) id from a lookup table, each
pair's durations are picked by a mask (or grouped by a radix sort when pairs are many), and percentiles
are read from the pair's order statistics after one np.partition (linear interpolation, numpy's
default method).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import span_durations
from host_decode.core.model import Trace

SUMMARY_DTYPE = np.dtype(
    [
        ("group", np.int64),
        ("event", np.int64),
        ("count", np.int64),
        ("total_ns", np.int64),
        ("mean_ns", np.float64),
        ("min_ns", np.int64),
        ("max_ns", np.int64),
        ("p50_ns", np.float64),
        ("p90_ns", np.float64),
        ("p95_ns", np.float64),
        ("p99_ns", np.float64),
        ("cv", np.float64),  # std / mean (population std); 0 for a single span
    ]
)
PERCENTILES = (50, 90, 95, 99)


def region_summary(trace: Trace, by_group: bool = True) -> np.ndarray:
    """One row per (group, event) (or per event with group=-1 when by_group is False)."""
    spans = trace.spans
    group = spans["group"] if by_group else np.full(spans.size, -1, np.int32)

    return summarize(group, spans["event"], lambda rows: span_durations(spans, rows))


FEW_KEYS = 64  # up to this many (group, event) pairs, each pair's durations are picked by a mask


def summarize(group: np.ndarray, event: np.ndarray, dur) -> np.ndarray:
    """One SUMMARY_DTYPE row per (group, event), sorted by (group, event). Percentiles interpolate
    linearly between order statistics (numpy's default method), read after one np.partition of the
    pair's durations (linear time: no sort of the table); mean = exact integer total / count.
    `dur`: the durations, or a function of a row mask giving those rows' durations (so that a whole
    duration column is never needed when pairs are few). Temporaries: a small dense pair id per row and
    one pair's durations at a time (few pairs), or the durations grouped by a radix sort (many).
    Guarded by tests/unit/host_decode/analysis/test_stats.py (against np.percentile per group)."""
    if np.size(group) == 0:
        return np.zeros(0, SUMMARY_DTYPE)
    ids, key_group, key_event = pair_ids(np.asarray(group), np.asarray(event))
    nkeys = key_group.size
    out = np.zeros(nkeys, SUMMARY_DTYPE)
    out["group"], out["event"] = key_group, key_event
    pick = dur if callable(dur) else (lambda m, d=np.asarray(dur, np.int64): d[m])
    if nkeys <= FEW_KEYS:
        for k in range(nkeys):
            _fill_row(out, k, np.asarray(pick(ids == k), np.int64))
        return out
    count = np.bincount(ids, minlength=nkeys)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    d = np.asarray(pick(np.argsort(ids.astype(np.uint16) if nkeys <= 1 << 16 else ids, kind="stable")), np.int64)
    for k in range(nkeys):
        _fill_row(out, k, d[first[k] : first[k] + count[k]])
    return out


def _fill_row(out: np.ndarray, k: int, d: np.ndarray) -> None:
    """Row k from the durations of its (group, event) (reordered in place by the partition)."""
    n = d.size
    total = int(d.sum())
    mean = total / n
    x = d.astype(np.float64)  # exact: durations are below 2**53 ns
    x -= int(mean)  # shifted by about the mean: no cancellation in the variance (exact, in place)
    var = max(float(np.dot(x, x)) / n - (float(x.sum()) / n) ** 2, 0.0)
    pos = [(n - 1) * (p / 100.0) for p in PERCENTILES]
    kth = sorted({0, n - 1} | {int(np.floor(q)) for q in pos} | {min(int(np.floor(q)) + 1, n - 1) for q in pos})
    d.partition(kth)
    row = out[k : k + 1]
    row["count"], row["total_ns"], row["mean_ns"] = n, total, mean
    row["cv"] = np.sqrt(var) / mean if mean > 0 else 0.0
    row["min_ns"], row["max_ns"] = d[0], d[n - 1]
    for p, q in zip(PERCENTILES, pos):
        lo = int(np.floor(q))
        hi = min(lo + 1, n - 1)
        row[f"p{p}_ns"] = float(d[lo]) + (float(d[hi]) - float(d[lo])) * (q - lo)


def pair_ids(group: np.ndarray, event: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dense id per row, group and event of each id) of the (group, event) pairs, ids in (group, event)
    order (the order of summarize's rows): a lookup table when the pairs span a modest range (the usual
    case), else np.unique."""
    gmin, gmax, emin, emax = int(group.min()), int(group.max()), int(event.min()), int(event.max())
    width = emax - emin + 1
    span = (gmax - gmin + 1) * width
    if span <= 4 * group.size + (1 << 16):
        dtype = np.uint16 if span <= 1 << 16 else np.int32 if span < 1 << 31 else np.int64
        # key = (group - gmin) * width + (event - emin), in place in one array of the key's width (the
        # offsets wrap in unsigned types and come back: the result is in range)
        key = group.astype(dtype)
        key -= _wrapped(dtype, gmin)
        key *= dtype(width)
        np.add(key, event, out=key, casting="unsafe")
        key -= _wrapped(dtype, emin)
        present = np.zeros(span, bool)
        for rows in _chunks(key.size):  # numpy indexes with an intp copy of the index: a chunk at a time
            present[key[rows]] = True
        k = np.flatnonzero(present)
        lut = (np.cumsum(present) - 1).astype(np.uint8 if k.size <= 1 << 8 else np.int32)  # small ids: small rows
        ids = np.empty(key.size, lut.dtype)
        for rows in _chunks(key.size):
            ids[rows] = lut[key[rows]]
        return ids, gmin + k // width, emin + k % width
    g64, e64 = group.astype(np.int64), event.astype(np.int64)
    keys, ids = np.unique((g64 << 32) | (e64 + (1 << 31)), return_inverse=True)
    return ids.reshape(-1), keys >> 32, (keys & 0xFFFF_FFFF) - (1 << 31)


def _chunks(n: int, size: int = 1 << 20):
    return (slice(i, min(i + size, n)) for i in range(0, n, size))


def _wrapped(dtype, value: int):
    """`value` as a scalar of `dtype`, modulo 2**bits for an unsigned one (its arithmetic wraps)."""
    if np.issubdtype(dtype, np.unsignedinteger):
        return dtype(value % (1 << (8 * np.dtype(dtype).itemsize)))
    return dtype(value)


def summary_rows(summary: np.ndarray, names) -> list[dict]:
    """Rows with names, for printing and JSON."""
    rows = []
    for r in summary:
        row = {k: r[k].item() for k in SUMMARY_DTYPE.names}
        row["region"] = names.event(r["event"])
        row["group_name"] = names.group(r["group"]) if r["group"] >= 0 else "*"
        rows.append(row)
    return rows
