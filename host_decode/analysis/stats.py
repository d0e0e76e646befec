"""Statistics core on the span table: per (group, event) count, total, mean, min, max, p50/p90/p95/p99, cv.

Linear time in the number of regions, the span table read a chunk at a time (never masked once per pair):
rows get a dense (group, event) id from a lookup table; then, when every duration lies in a range small
against the row count (the usual case: integer nanoseconds), one pass counts a histogram per pair and
every statistic is read from it exactly; otherwise the durations are gathered by pair (a counting sort)
and each pair's percentiles read after one np.partition. Percentiles interpolate linearly between order
statistics (numpy's default method) either way.

Invariants, and the tests that guard them: every statistic equals numpy's on each pair's durations
(np.percentile, mean, std; tests/unit/host_decode/analysis/test_stats.py,
tests/unit/host_decode/analysis/test_summary_paths.py for both paths); the summary `ikp decode` prints
costs a fraction of the decode (benchmarks/bigcap_bench.py measures the whole command against the decoder
alone).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import CHUNK_ROWS
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
FEW_KEYS = 64  # up to this many (group, event) pairs, callers may scan the table once per pair
# histograms when (group, event) cells x duration range <= this x the rows (+ 2**16): their counts (8 bytes a
# bin, twice while a chunk is added) then stay below a span row's 32 bytes per row
HISTOGRAM_RANGE = 0.5


def region_summary(trace: Trace, by_group: bool = True) -> np.ndarray:
    """One row per (group, event) (or per event with group=-1 when by_group is False)."""
    spans = trace.spans
    group = spans["group"] if by_group else np.full(spans.size, -1, np.int32)
    return summarize(group, spans["event"], (spans["start_ns"], spans["end_ns"]))


def summarize(group: np.ndarray, event: np.ndarray, dur) -> np.ndarray:
    """One SUMMARY_DTYPE row per (group, event), sorted by (group, event). `dur`: the durations, or a
    (start, end) pair of columns (durations = end - start, computed a chunk at a time). Mean = exact
    integer total / count. Temporaries: a histogram per pair (narrow durations), else a small dense pair
    id per row and the durations grouped by pair (8 bytes a row); chunk-sized arrays otherwise. Guarded by
    tests/unit/host_decode/analysis/test_stats.py (against np.percentile per group)."""
    group, event = np.asarray(group), np.asarray(event)
    if group.size == 0:
        return np.zeros(0, SUMMARY_DTYPE)
    histograms = pair_histograms(group, event, dur)
    if histograms is not None:
        counts, key_group, key_event, lo_ns = histograms
        out = np.zeros(key_group.size, SUMMARY_DTYPE)
        out["group"], out["event"] = key_group, key_event
        for k in range(key_group.size):
            _fill_row_from_histogram(out, k, counts[k], lo_ns)
        return out
    ids, key_group, key_event = pair_ids(group, event)
    nkeys = key_group.size
    out = np.zeros(nkeys, SUMMARY_DTYPE)
    out["group"], out["event"] = key_group, key_event
    grouped, first = grouped_durations(ids, nkeys, dur)
    for k in range(nkeys):
        _fill_row(out, k, grouped[first[k] : first[k + 1]])
    return out


def _durations(dur, rows: slice) -> np.ndarray:
    if isinstance(dur, tuple):
        return np.asarray(dur[1][rows], np.int64) - dur[0][rows]
    return np.asarray(dur[rows], np.int64)


def pair_histograms(group: np.ndarray, event: np.ndarray, dur, chunk: int = CHUNK_ROWS):
    """(counts[pair, duration - lo_ns], group and event of each pair, lo_ns), pairs in (group, event)
    order, when one histogram per (group, event) cell over the durations' whole range is small against the
    row count; else None. Two passes over the columns, a chunk at a time (no whole-column temporary): the
    ranges of group, event and duration, then the counts of cell x duration."""
    bounds = None
    for i in range(0, group.size, chunk):
        rows = slice(i, i + chunk)
        d = _durations(dur, rows)
        found = (int(group[rows].min()), int(group[rows].max()), int(event[rows].min()), int(event[rows].max()),
                 int(d.min()), int(d.max()))
        bounds = found if bounds is None else tuple(
            min(a, b) if j % 2 == 0 else max(a, b) for j, (a, b) in enumerate(zip(bounds, found)))
    gmin, gmax, emin, emax, lo_ns, hi_ns = bounds
    events, width = emax - emin + 1, hi_ns - lo_ns + 1
    cells = (gmax - gmin + 1) * events
    if cells * width > int(HISTOGRAM_RANGE * group.size) + (1 << 16):
        return None
    counts = np.zeros(cells * width, np.int64)
    step = max(chunk, cells * width)  # a chunk's counts cost no more than the rows it counts
    for i in range(0, group.size, step):
        rows = slice(i, i + step)
        key = group[rows].astype(np.int64)
        key -= gmin
        key *= events
        key += event[rows]
        key -= emin
        key *= width
        key += _durations(dur, rows)
        key -= lo_ns
        counts += np.bincount(key, minlength=cells * width)
    counts = counts.reshape(cells, width)
    present = np.flatnonzero(counts.any(axis=1))
    return counts[present], gmin + present // events, emin + present % events, lo_ns


class RunSummary:
    """region_summary(trace)'s rows counted from runs of span rows as a writer streams them (every span once,
    in any order): a histogram per (group, event) over the bounding box of the runs seen, grown as they
    come; the rows are then read from it as summarize reads pair_histograms', so they are the same.
    result() is None where summarize would not take histograms (the box passes its bound), where one run's
    box is large against its rows (its counts would cost more than the separate pass), or where not every
    span was seen: the caller then runs region_summary. restart() starts over (a writer that starts its
    stream again). Guarded by tests/unit/host_decode/analysis/test_summary_paths.py::test_run_summary_*."""

    def __init__(self, rows: int):
        self.rows = rows
        self.restart()

    def restart(self) -> None:
        self.counts: np.ndarray | None = None  # [group, event, duration] over the box from self.low
        self.low = (0, 0, 0)
        self.seen = 0
        self.spread = False

    def add(self, group: np.ndarray, event: np.ndarray, dur: np.ndarray) -> None:
        """One run's spans: their group, event and duration columns (equally long)."""
        if self.spread or not group.size:
            return
        low = (int(group.min()), int(event.min()), int(dur.min()))
        shape = (int(group.max()) - low[0] + 1, int(event.max()) - low[1] + 1, int(dur.max()) - low[2] + 1)
        if shape[0] * shape[1] * shape[2] > 4 * group.size + (1 << 16):
            self.spread, self.counts = True, None
            return
        key = group.astype(np.int64)
        key -= low[0]
        key *= shape[1]
        key += event
        key -= low[1]
        key *= shape[2]
        key += dur
        key -= low[2]
        counts = np.bincount(key, minlength=shape[0] * shape[1] * shape[2]).reshape(shape)
        if self.counts is None:
            self.counts, self.low = counts, low
        else:
            self._grow(low, shape)
            if self.spread:
                return
            at = tuple(slice(a - b, a - b + n) for a, b, n in zip(low, self.low, shape))
            self.counts[at] += counts
        self.seen += group.size

    def _grow(self, low: tuple, shape: tuple) -> None:
        """Widen the box to hold a run's box (low, shape); past summarize's bound: spread."""
        new_low = tuple(min(a, b) for a, b in zip(low, self.low))
        new_high = tuple(max(a + n, b + m) for a, n, b, m in zip(low, shape, self.low, self.counts.shape))
        new_shape = tuple(h - lo for h, lo in zip(new_high, new_low))
        if new_shape == self.counts.shape:
            return
        if new_shape[0] * new_shape[1] * new_shape[2] > int(HISTOGRAM_RANGE * self.rows) + (1 << 16):
            self.spread, self.counts = True, None
            return
        grown = np.zeros(new_shape, np.int64)
        grown[tuple(slice(a - b, a - b + n) for a, b, n in zip(self.low, new_low, self.counts.shape))] = self.counts
        self.counts, self.low = grown, new_low

    def result(self) -> np.ndarray | None:
        if self.rows == 0:
            return np.zeros(0, SUMMARY_DTYPE)
        if self.spread or self.seen != self.rows:
            return None
        groups, events, width = self.counts.shape
        if groups * events * width > int(HISTOGRAM_RANGE * self.rows) + (1 << 16):
            return None  # summarize takes the grouped path (its figures may differ in the last bit)
        counts = self.counts.reshape(groups * events, width)
        present = np.flatnonzero(counts.any(axis=1))
        out = np.zeros(present.size, SUMMARY_DTYPE)
        out["group"], out["event"] = self.low[0] + present // events, self.low[1] + present % events
        for k, cell in enumerate(present.tolist()):
            _fill_row_from_histogram(out, k, counts[cell], self.low[2])
        return out


def _fill_row_from_histogram(out: np.ndarray, k: int, h: np.ndarray, lo_ns: int) -> None:
    """Row k from its histogram `h` (h[v]: durations of lo_ns + v ns): the same figures as _fill_row."""
    seen = np.flatnonzero(h)
    h = h[seen[0] : seen[-1] + 1]
    lo_ns += int(seen[0])
    n = int(h.sum())
    offsets = np.arange(h.size, dtype=np.int64)
    total = n * lo_ns + int(np.dot(h, offsets))
    mean = total / n
    x = (offsets + (lo_ns - int(mean))).astype(np.float64)  # shifted by about the mean, as _fill_row
    weights = h.astype(np.float64)
    var = max(float(np.dot(weights, x * x)) / n - (float(np.dot(weights, x)) / n) ** 2, 0.0)
    below = np.cumsum(h)  # below[v]: durations <= lo_ns + v
    pos = [(n - 1) * (p / 100.0) for p in PERCENTILES]
    row = out[k : k + 1]
    row["count"], row["total_ns"], row["mean_ns"] = n, total, mean
    row["cv"] = np.sqrt(var) / mean if mean > 0 else 0.0
    row["min_ns"], row["max_ns"] = lo_ns, lo_ns + h.size - 1
    for p, q in zip(PERCENTILES, pos):
        lo = int(np.floor(q))
        hi = min(lo + 1, n - 1)
        a, b = (lo_ns + int(v) for v in np.searchsorted(below, [lo, hi], side="right"))
        row[f"p{p}_ns"] = float(a) + (float(b) - float(a)) * (q - lo)


def grouped_durations(ids: np.ndarray, nkeys: int, dur, chunk: int = CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """(durations ordered by pair id, stable within a pair; the offset of each pair's first, nkeys + 1 of
    them): a counting sort done a chunk of rows at a time, so that no whole-table index is ever made."""
    count = np.zeros(nkeys, np.int64)
    for i in range(0, ids.size, chunk):
        count += np.bincount(ids[i : i + chunk], minlength=nkeys)
    first = np.zeros(nkeys + 1, np.int64)
    np.cumsum(count, out=first[1:])
    fill = first[:-1].copy()  # where each pair's next duration goes
    grouped = np.empty(ids.size, np.int64)
    for i in range(0, ids.size, chunk):
        d = _durations(dur, slice(i, i + chunk))
        part = ids[i : i + chunk]
        order = np.argsort(part, kind="stable")  # a radix sort of small ids
        keys = part[order]
        starts = np.searchsorted(keys, np.arange(nkeys))
        rank = np.arange(keys.size) - starts[keys]  # position within its pair in this chunk
        grouped[fill[keys] + rank] = d[order]
        fill += np.bincount(keys, minlength=nkeys)
    return grouped, first


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
