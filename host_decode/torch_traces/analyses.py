"""Analyses of a loaded torch trace (host_decode.torch_traces.columns.TorchTrace): ProfilerStep assignment,
row selection, per-name tables, busy time and per-stream gap analysis. Definitions: README, `ikp kernels`.

Invariants (tests/unit/host_decode/torch_traces/test_kernels.py): durations and gaps are computed on int64 ns (exact,
for any time range the loader admits: test_gaps_exact_across_epoch_and_zero); every selected row is in exactly one table
row; a GPU row belongs to the step in which its launch happened.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host_decode.core.arrays import segmented_cummax
from host_decode.torch_traces.columns import DEVICE_CATS, RUNTIME_CATS, STEP_CATS, STEP_RE, TorchTrace
from host_decode.torch_traces.names import short_names

# ------------------------------------------------------------------------------------------------ steps


def profiler_steps(trace: TorchTrace) -> dict:
    """ProfilerStep#N rows (CPU side): columns number, start_ns, end_ns, sorted by start."""
    step_ids = {i: int(m.group(1)) for i, n in enumerate(trace.names) if (m := STEP_RE.match(n))}
    mask = trace.cat_mask(STEP_CATS) & np.isin(trace.columns["name"], list(step_ids) or [-1])
    start = trace.columns["ts_ns"][mask]
    number = np.array([step_ids[i] for i in trace.columns["name"][mask]], dtype=np.int64)
    _, first = np.unique(number, return_index=True)  # one row per step (a trace may have it twice)
    first = first[np.argsort(start[first], kind="stable")]
    return {"number": number[first], "start_ns": start[first],
            "end_ns": (start + trace.columns["dur_ns"][mask])[first]}


BY_NONE, BY_LAUNCH, BY_TIME = 0, 1, 2


def assign_steps(trace: TorchTrace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step number of each row in `rows` (-1: none) and how it was found (BY_LAUNCH, BY_TIME, BY_NONE).

    A GPU activity belongs to the step during whose CPU span its launch (the runtime/driver row with the
    same correlation id) happened: kernels run asynchronously, often after the step's CPU span ended.
    Rows without such a launch row fall back to their own start time: step k covers
    [start_k, start_{k+1}), the last step [start, end]."""
    steps = profiler_steps(trace)
    c = trace.columns
    out = np.full(len(rows), -1, dtype=np.int64)
    how = np.full(len(rows), BY_NONE, dtype=np.int8)
    if len(steps["number"]) == 0:
        return out, how
    launch_ts = _launch_times(trace, c["correlation"][rows])
    by_launch = launch_ts >= 0
    k = np.searchsorted(steps["start_ns"], launch_ts, side="right") - 1
    ok = by_launch & (k >= 0) & (launch_ts <= steps["end_ns"][np.maximum(k, 0)])
    out[ok] = steps["number"][k[ok]]
    ts = c["ts_ns"][rows]
    k2 = np.searchsorted(steps["start_ns"], ts, side="right") - 1
    window_end = np.append(steps["start_ns"][1:], steps["end_ns"][-1] + 1)
    ok2 = ~by_launch & (k2 >= 0) & (ts < window_end[np.maximum(k2, 0)])
    out[ok2] = steps["number"][k2[ok2]]
    how[ok], how[ok2] = BY_LAUNCH, BY_TIME
    return out, how


def _launch_times(trace: TorchTrace, correlation: np.ndarray) -> np.ndarray:
    """Start of the runtime/driver row with each correlation id (-1 where none)."""
    c = trace.columns
    rt = np.flatnonzero(trace.cat_mask(RUNTIME_CATS) & (c["correlation"] >= 0))
    out = np.full(len(correlation), -1, dtype=np.int64)
    if rt.size == 0:
        return out
    order = np.argsort(c["correlation"][rt], kind="stable")
    corr_sorted, ts_sorted = c["correlation"][rt][order], c["ts_ns"][rt][order]
    i = np.minimum(np.searchsorted(corr_sorted, correlation), len(corr_sorted) - 1)
    hit = (corr_sorted[i] == correlation) & (correlation >= 0)
    out[hit] = ts_sorted[i[hit]]
    return out


# ---------------------------------------------------------------------------------------------- selection


@dataclass
class Selection:
    """Rows chosen for a table, with their lane (device/stream for GPU rows, pid/tid otherwise)."""

    rows: np.ndarray
    lane_a: np.ndarray
    lane_b: np.ndarray
    note: dict


def select(trace: TorchTrace, *, categories=None, step=None, stream=None, device=None) -> Selection:
    """Rows of the given categories (default: kernels, memcpy, memset), optionally of one ProfilerStep
    number, one stream (tid for CPU rows) and one device (pid for CPU rows)."""
    cats = {c.lower() for c in (categories or DEVICE_CATS)}
    rows = np.flatnonzero(trace.cat_mask(cats))
    c = trace.columns
    gpu = np.isin(c["cat"][rows], [i for i, n in enumerate(trace.cats) if n.lower() in DEVICE_CATS])
    # GPU rows: args.device/args.stream; Kineto also puts them in pid/tid, used when args lack them.
    lane_a = np.where(gpu & (c["device"][rows] >= 0), c["device"][rows], c["pid"][rows])
    lane_b = np.where(gpu & (c["stream"][rows] >= 0), c["stream"][rows], c["tid"][rows])
    note = {}
    if step is not None:
        numbers, how = assign_steps(trace, rows)
        available = sorted(set(profiler_steps(trace)["number"].tolist()))
        if step not in available:
            raise ValueError(f"no ProfilerStep#{step} in {trace.source}; steps: {available or 'none'}")
        keep = numbers == step
        note["step_assignment"] = {"number": step, "by_launch": int((how[keep] == BY_LAUNCH).sum()),
                        "by_time": int((how[keep] == BY_TIME).sum()), "in_no_step": int((how == BY_NONE).sum())}
        rows, lane_a, lane_b = rows[keep], lane_a[keep], lane_b[keep]
    for value, lane in ((stream, "b"), (device, "a")):
        if value is not None:
            keep = (lane_b if lane == "b" else lane_a) == value
            rows, lane_a, lane_b = rows[keep], lane_a[keep], lane_b[keep]
    return Selection(rows, lane_a, lane_b, note)


# ------------------------------------------------------------------------------------------------ tables


def _group_stats(values: np.ndarray, groups: np.ndarray, n_groups: int) -> dict:
    """count/total/mean/std(ddof=0)/min/max of `values` (ns) per group id 0..n_groups-1 (every id
    present), as microseconds."""
    count = np.bincount(groups, minlength=n_groups)
    total = np.bincount(groups, weights=values, minlength=n_groups)
    mean = total / np.maximum(count, 1)
    var = np.bincount(groups, weights=(values - mean[groups]) ** 2, minlength=n_groups) / np.maximum(count, 1)
    order = np.lexsort((values, groups))
    bounds = np.searchsorted(groups[order], np.arange(n_groups + 1), side="left")
    sorted_values = values[order]
    vmin = sorted_values[bounds[:-1]] if n_groups else np.zeros(0)
    vmax = sorted_values[bounds[1:] - 1] if n_groups else np.zeros(0)
    return {"count": count, "total_us": total / 1e3, "mean_us": mean / 1e3, "std_us": np.sqrt(var) / 1e3,
            "min_us": vmin / 1e3, "max_us": vmax / 1e3}


NAME_TABLE_COLUMNS = ("name", "kind", "count", "launch_share", "total_us", "mean_us", "std_us", "min_us", "max_us",
                      "time_share", "full_name")
PAIR_TABLE_COLUMNS = ("prev", "next", "count", "total_us", "mean_us", "std_us", "min_us", "max_us", "prev_full",
                      "next_full")
SORT_KEYS = {"count": "count", "total": "total_us", "mean": "mean_us", "share": "time_share",
             "max": "max_us", "std": "std_us"}


def name_table(trace: TorchTrace, sel: Selection, *, sort: str = "total", top: int | None = None,
               verbose: bool = False) -> dict:
    """Per-name statistics of the selected rows (columns of equal length, sorted descending by `sort`).
    Rows group by full name; `name` is shortened unless verbose (`full_name` is always the full one)."""
    c = trace.columns
    name_ids = c["name"][sel.rows]
    uniq, first, groups = np.unique(name_ids, return_index=True, return_inverse=True)
    dur = c["dur_ns"][sel.rows].astype(np.float64)
    stats = _group_stats(dur, groups.astype(np.int64).ravel(), len(uniq))
    first_row = sel.rows[first]
    n = max(int(stats["count"].sum()), 1)
    busy = max(float(stats["total_us"].sum()), 1e-300)
    table = {"full_name": [trace.names[i] for i in uniq],
             "kind": [trace.kind_of(int(k)) for k in c["cat"][first_row]],
             **stats, "launch_share": stats["count"] / n, "time_share": stats["total_us"] / busy}
    if verbose:
        table["name"] = table["full_name"]
    else:
        display = _display_names(trace, sel)
        table["name"] = [display[i] for i in uniq.tolist()]
    table = {k: table[k] for k in NAME_TABLE_COLUMNS}
    key = SORT_KEYS[sort]
    order = np.lexsort((np.arange(len(uniq)), -np.asarray(table[key], dtype=np.float64)))
    if top is not None:
        order = order[:top]
    return _take(table, order)


def _display_names(trace: TorchTrace, sel: Selection) -> dict:
    """name id -> short name, computed over every name of the selection at once, so that the kernel and
    pair tables name a kernel the same way (disambiguation depends on which names are present)."""
    c = trace.columns
    ids, first = np.unique(c["name"][sel.rows], return_index=True)
    kinds = [trace.kind_of(int(k)) for k in c["cat"][sel.rows[first]]]
    return dict(zip(ids.tolist(), short_names([trace.names[i] for i in ids], kinds)))


def _take(table: dict, order: np.ndarray) -> dict:
    return {k: ([v[i] for i in order] if isinstance(v, list) else np.asarray(v)[order]) for k, v in table.items()}


def busy_summary(trace: TorchTrace, sel: Selection) -> dict:
    """Sum of durations, union busy time (overlaps counted once) and span, per lane_a (device)."""
    c = trace.columns
    out = {}
    for dev in np.unique(sel.lane_a):
        rows = sel.rows[sel.lane_a == dev]
        start, end = c["ts_ns"][rows], c["ts_ns"][rows] + c["dur_ns"][rows]
        out[int(dev)] = {"events": int(len(rows)), "sum_us": float(c["dur_ns"][rows].sum()) / 1e3,
                         "union_us": _union_ns(start, end) / 1e3,
                         "span_us": float(end.max() - start.min()) / 1e3}
    return out


def _union_ns(start: np.ndarray, end: np.ndarray) -> float:
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, idx)
    return float((block_end - s[idx]).sum())


# -------------------------------------------------------------------------------------------------- gaps


def gap_analysis(trace: TorchTrace, sel: Selection, *, gap_min_us: float = 0.0, gap_max_us: float = np.inf,
                 bins: int = 10, log_bins: bool = True, pair_sort: str = "count", top: int | None = 20,
                 verbose: bool = False) -> dict:
    """Idle time between consecutive rows of each lane (device, stream).

    Rows of a lane sort by start; the gap before a row is its start minus the latest end of all earlier
    rows of the lane (so a long earlier kernel still covers it). A negative value is an overlap (e.g.
    programmatic dependent launch): counted in `overlaps`, gap 0. Per-lane totals use every gap; the
    histogram and the A -> B pair table (A = the row started just before B on that lane) use the gaps in
    [gap_min_us, gap_max_us]."""
    c = trace.columns
    start = c["ts_ns"][sel.rows]
    end = start + c["dur_ns"][sel.rows]
    order = np.lexsort((end, start, sel.lane_b, sel.lane_a))
    a, b, s, e = sel.lane_a[order], sel.lane_b[order], start[order], end[order]
    names = c["name"][sel.rows][order]
    lane_start = np.ones(len(s), dtype=bool)
    lane_start[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    lane_id = np.cumsum(lane_start) - 1
    reach = segmented_cummax(e, lane_id)
    follows = ~lane_start  # rows with a predecessor on their lane
    raw_gap = np.zeros(len(s), dtype=np.int64)
    raw_gap[1:] = s[1:] - reach[:-1]
    raw_gap[~follows] = 0
    overlap = follows & (raw_gap < 0)
    gap = np.maximum(raw_gap, 0)
    streams = _lane_table(a, b, s, e, lane_start, lane_id, gap, overlap)
    lo, hi = gap_min_us * 1e3, gap_max_us * 1e3
    in_range = follows & (gap >= lo) & (gap <= hi)
    gaps_us = gap[in_range] / 1e3
    pairs = _pair_table(trace, names, in_range, gap, pair_sort, top, None if verbose else _display_names(trace, sel))
    return {"streams": streams, "histogram": _histogram(gaps_us, bins, log_bins, gap_min_us, gap_max_us),
            "pairs": pairs, "n_gaps": int(follows.sum()), "n_in_range": int(in_range.sum()),
            "range_us": [gap_min_us, gap_max_us]}


def _lane_table(a, b, s, e, lane_start, lane_id, gap, overlap) -> dict:
    first = np.flatnonzero(lane_start)
    n_lanes = len(first)
    span = (np.maximum.reduceat(e, first) - s[first]).astype(np.float64) if n_lanes else np.zeros(0)
    busy = np.bincount(lane_id, weights=(e - s).astype(np.float64), minlength=n_lanes)
    idle = np.bincount(lane_id, weights=gap.astype(np.float64), minlength=n_lanes)
    return {"device": a[first], "stream": b[first], "count": np.bincount(lane_id, minlength=n_lanes),
            "busy_us": busy / 1e3, "idle_us": idle / 1e3, "span_us": span / 1e3,
            "idle_share": idle / np.maximum(span, 1),
            "overlaps": np.bincount(lane_id, weights=overlap, minlength=n_lanes).astype(np.int64)}


def _histogram(gaps_us: np.ndarray, bins: int, log_bins: bool, gmin: float, gmax: float) -> dict:
    zero = int((gaps_us == 0).sum())
    pos = gaps_us[gaps_us > 0]
    if pos.size == 0:
        return {"edges_us": [], "counts": [], "zero": zero}
    lo = max(gmin, float(pos.min())) if log_bins else gmin
    hi = min(gmax, float(pos.max()))
    if hi <= lo:
        hi = lo * 1.0001 + 1e-9
    edges = np.geomspace(lo, hi, bins + 1) if log_bins and lo > 0 else np.linspace(lo, hi, bins + 1)
    counts, edges = np.histogram(pos, bins=edges)
    return {"edges_us": edges, "counts": counts, "zero": zero}


def _pair_table(trace, names, in_range, gap, pair_sort, top, display) -> dict:
    idx = np.flatnonzero(in_range)
    n_names = max(len(trace.names), 1)
    key = names[idx - 1].astype(np.int64) * n_names + names[idx]
    uniq, groups = np.unique(key, return_inverse=True)
    stats = _group_stats(gap[idx].astype(np.float64), groups.astype(np.int64).ravel(), len(uniq))
    prev_full = [trace.names[int(k // n_names)] for k in uniq]
    next_full = [trace.names[int(k % n_names)] for k in uniq]
    table = {"prev_full": prev_full, "next_full": next_full, **stats}
    table["prev"] = prev_full if display is None else [display[int(k // n_names)] for k in uniq]
    table["next"] = next_full if display is None else [display[int(k % n_names)] for k in uniq]
    table = {k: table[k] for k in PAIR_TABLE_COLUMNS}
    sort_key = {"count": "count", "mean": "mean_us", "max": "max_us", "std": "std_us", "total": "total_us"}[pair_sort]
    order = np.lexsort((np.arange(len(uniq)), -np.asarray(table[sort_key], dtype=np.float64)))
    return _take(table, order[:top] if top is not None else order)


