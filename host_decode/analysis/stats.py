"""Statistics core on the span table: per (group, event) count, total, mean, min, max, p50/p90/p95/p99, cv.

Vectorized: one stable sort by (group, event, duration), group bounds from the sorted keys, sums by
np.add.reduceat and percentiles read by index from each sorted run (linear interpolation, numpy's
default method), so the cost does not grow with the number of regions.
"""

from __future__ import annotations

import numpy as np

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
    dur = (spans["end_ns"] - spans["start_ns"]).astype(np.int64)
    group = spans["group"].astype(np.int64) if by_group else np.full(dur.size, -1, np.int64)
    return summarize(group, spans["event"].astype(np.int64), dur)


def summarize(group: np.ndarray, event: np.ndarray, dur: np.ndarray) -> np.ndarray:
    if dur.size == 0:
        return np.zeros(0, SUMMARY_DTYPE)
    order = np.lexsort((dur, event, group))
    g, e, d = group[order], event[order], dur[order]
    first = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (e[1:] != e[:-1])])
    count = np.diff(np.r_[first, d.size])
    last = first + count - 1
    out = np.zeros(first.size, SUMMARY_DTYPE)
    out["group"], out["event"], out["count"] = g[first], e[first], count
    df = d.astype(np.float64)
    out["total_ns"] = np.add.reduceat(d, first)
    mean = np.add.reduceat(df, first) / count
    out["mean_ns"] = mean
    out["min_ns"], out["max_ns"] = d[first], d[last]
    centered = df - np.repeat(mean, count)
    var = np.add.reduceat(centered * centered, first) / count
    out["cv"] = np.divide(np.sqrt(var), mean, out=np.zeros_like(mean), where=mean > 0)
    for p in PERCENTILES:
        pos = first + (count - 1) * (p / 100.0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, last)
        frac = pos - lo
        out[f"p{p}_ns"] = df[lo] + (df[hi] - df[lo]) * frac
    return out


def summary_rows(summary: np.ndarray, names) -> list[dict]:
    """Rows with names, for printing and JSON."""
    rows = []
    for r in summary:
        row = {k: r[k].item() for k in SUMMARY_DTYPE.names}
        row["region"] = names.event(r["event"])
        row["group_name"] = names.group(r["group"]) if r["group"] >= 0 else "*"
        rows.append(row)
    return rows
