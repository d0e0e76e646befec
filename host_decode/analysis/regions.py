"""What `ikp stats` and `ikp report` show of a trace's regions and launch, composed from the analyses:
analyze (bubbles, overlap, launch tail / imbalance, critical lanes as plain data), stats_data (the whole
`ikp stats` model) and region_rows (the report's per-region rows).

The analyses themselves live by job: host_decode.analysis.bubbles (lane windows, gaps, bubbles),
overlap (between groups), launch (blocks, SMs, waves, tail, imbalance, critical lanes), nesting (span
parents, exclusive time), histograms, stats (per-region percentiles); intervals holds their primitives.
All work is whole-array numpy: sorting and segmented reductions, no Python loop per span (loops run only
over group pairs and, in region_rows, over (group, region) rows).

Invariants, and the tests that guard them:
- analyze and stats_data are JSON-ready (tests/unit/host_decode/analysis/test_analysis.py::test_analyze_is_json_ready;
  the `ikp stats` JSON and table: tests/unit/host_decode/cli/test_cli_grammar.py) and do not depend on how spans are cut
  into runs (tests/unit/host_decode/analysis/test_analysis.py::test_runs_change_nothing);
- region_rows: a region's exclusive time is its time minus the spans directly inside it, and its parent is
  the region it runs inside most often
  (tests/unit/host_decode/reports/test_report_timeline.py::test_region_rows_exclusive_and_parent); runs of whole lanes
  change nothing (::test_runs_of_lanes_change_nothing).
"""

from __future__ import annotations

import numpy as np

from host_decode.analysis.bubbles import bubbles_and_largest_gaps
from host_decode.analysis.histograms import duration_histogram, region_histogram
from host_decode.analysis.intervals import percentile_or_zero
from host_decode.analysis.launch import critical_lanes, critical_regions, launch_summary, sm_table
from host_decode.analysis.nesting import nesting_by_row
from host_decode.analysis.overlap import group_overlap, overlap_summary
from host_decode.analysis.stats import FEW_KEYS, pair_ids, region_summary, summary_rows
from host_decode.core.arrays import CHUNK_ROWS, positions_of, span_durations
from host_decode.core.jsonable import to_jsonable
from host_decode.core.model import Trace


def stats_data(trace: Trace, top_gaps: int = 10, bins: int = 16) -> dict:
    """Everything `ikp stats` reports, JSON-ready: kernel facts, per-region statistics with a `bins`-bin
    histogram each, and analyze (with the `top_gaps` largest gaps)."""
    from host_decode.load.ring import ring_counts

    summary = region_summary(trace)
    regions = summary_rows(summary, trace.names)
    for row, r in zip(regions, summary):
        counts, edges = region_histogram(trace, int(r["group"]), int(r["event"]), bins=bins)
        row["hist_counts"] = counts.tolist()
        row["hist_edges_ns"] = [float(x) for x in edges]
    out = {
        "kernel": (trace.meta or {}).get("kernel"),
        "num_blocks": trace.num_blocks,
        "num_groups": trace.num_groups,
        "absolute_time": bool(trace.absolute),
        "launches": len((trace.meta or {}).get("parts", [])) or 1,
        "records_lost": int(trace.loss.lost),
        "ring": ring_counts(trace),  # a capture window's launches seen / recorded / lost, strays (else None)
        "regions": regions,
    }
    out.update(analyze(trace, top_gaps=top_gaps))
    return to_jsonable(out)


def analyze(trace: Trace, top_gaps: int = 10) -> dict:
    """All analyses as plain Python data (JSON-ready)."""
    bubbles, top = bubbles_and_largest_gaps(trace, top_gaps)
    launch = launch_summary(trace)
    crit = critical_lanes(trace)
    names = trace.names
    total_window = int(bubbles["window_ns"].sum())
    out = {
        "launch": launch,
        "bubbles": {
            "lanes": int(bubbles.size),
            "bubble_ns_total": int(bubbles["bubble_ns"].sum()),
            "bubble_frac": float(bubbles["bubble_ns"].sum() / total_window) if total_window else 0.0,
            "bubble_frac_p50": percentile_or_zero(bubbles["bubble_frac"], 50),
            "bubble_frac_max": float(bubbles["bubble_frac"].max()) if bubbles.size else 0.0,
            "per_group": _bubbles_per_group(bubbles, names),
            "largest_gaps": [_gap_json(g, names, trace.start_ns) for g in top],
        },
        "overlap": [
            dict(r, group_a=names.group(r["group_a"]), group_b=names.group(r["group_b"]))
            for r in overlap_summary(group_overlap(trace))
        ],
        "critical": {
            "blocks_by_group": {
                names.group(g): int(c) for g, c in zip(*np.unique(crit["group"], return_counts=True))
            },
            "last_event": {
                (names.event(e) if e >= 0 else "(none)"): int(c)
                for e, c in zip(*np.unique(crit["last_event"], return_counts=True))
            },
            "slack_ns_p50": percentile_or_zero(crit["slack_ns"], 50),
            "regions": [
                {
                    "group": names.group(r["group"]),
                    "event": names.event(r["event"]),
                    "spans": int(r["spans"]),
                    "total_ns": int(r["total_ns"]),
                    "share": float(r["share"]),
                }
                for r in critical_regions(trace, crit)
            ],
        },
    }
    return out


def sm_rows(trace: Trace) -> list[dict]:
    """The per-SM table (launch.sm_table) as JSON rows."""
    sms, _ = sm_table(trace)
    return [{k: int(r[k]) for k in sms.dtype.names} for r in sms]


def _bubbles_per_group(bubbles: np.ndarray, names) -> list[dict]:
    out = []
    for g in np.unique(bubbles["group"]):
        m = bubbles[bubbles["group"] == g]
        w = int(m["window_ns"].sum())
        out.append(
            {
                "group": names.group(g),
                "lanes": int(m.size),
                "bubble_frac": float(m["bubble_ns"].sum() / w) if w else 0.0,
                "bubble_frac_max": float(m["bubble_frac"].max()),
                "largest_gap_ns": int(m["largest_gap_ns"].max()),
            }
        )
    return out


def _gap_json(g, names, origin: int) -> dict:
    return {
        "lane": int(g["lane"]),
        "block": int(g["block"]),
        "group": names.group(g["group"]),
        "start_ns": int(g["start_ns"] - origin),
        "dur_ns": int(g["dur_ns"]),
        "after": names.event(g["prev_event"]) if g["prev_event"] >= 0 else "(lane start)",
        "before": names.event(g["next_event"]) if g["next_event"] >= 0 else "(lane end)",
    }


def region_rows(trace: Trace) -> list[dict]:
    """Per (group, event): stats.region_summary + histogram + share of the group's lane time + spread
    across blocks. Temporaries stay at one row's spans (or one run of lanes): of the whole table only
    the one-byte row id of each span is held (with few rows)."""
    summary = region_summary(trace)
    rows = summary_rows(summary, trace.names)
    sp = trace.spans
    if not sp.size:
        return rows
    ids = pair_ids(sp["group"], sp["event"])[0]  # row of each span (the summary's rows, in its order)
    exclusive, parent_event = nesting_by_row(sp, ids, summary.size)
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    window_by_group = {
        int(g): int((lanes["last_ns"] - lanes["first_ns"])[lanes["group"] == g].sum())
        for g in np.unique(lanes["group"])
    }
    by_row = starts = None
    if summary.size > FEW_KEYS:  # many rows: one stable sort by row instead of a scan per row
        by_row = np.argsort(ids, kind="stable")
        starts = np.searchsorted(ids[by_row], np.arange(summary.size + 1))
    for k, (row, r) in enumerate(zip(rows, summary)):
        g, e = int(r["group"]), int(r["event"])
        members = positions_of(ids, k) if by_row is None else by_row[starts[k] : starts[k + 1]]
        dur = span_durations(sp, members)
        counts, edges, geometric = duration_histogram(dur)
        row["hist_counts"] = counts
        row["hist_edges_ns"] = edges
        row["hist_log"] = geometric
        window = window_by_group.get(g, 0)
        row["share_of_group_time"] = r["total_ns"] / window if window else None
        row["tail_ratio"] = float(r["p99_ns"] / r["p50_ns"]) if r["p50_ns"] > 0 else None
        per_block = sum_by_block(sp, members, dur)
        row["blocks"] = int(per_block.size)
        row["block_imbalance"] = float(per_block.max() / per_block.mean()) if per_block.size else None
        row["key"] = f"{g}:{e}"
        row["exclusive_ns"] = int(exclusive[k])
        # the region this one runs inside most often (its row is indented under that one)
        row["parent_key"] = f"{g}:{int(parent_event[k])}" if parent_event[k] >= 0 else None
        row["exclusive_share_of_group_time"] = row["exclusive_ns"] / window if window else None
    return rows


def sum_by_block(sp: np.ndarray, members: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The non-zero per-block sums of `dur` (the durations of spans `members`), in block order, a chunk
    at a time (exact: integer sums below 2**53)."""
    total = np.zeros(0)
    for i in range(0, members.size, CHUNK_ROWS):
        part = np.bincount(sp["block"][members[i : i + CHUNK_ROWS]], weights=dur[i : i + CHUNK_ROWS])
        if part.size > total.size:
            part[: total.size] += total
            total = part
        else:
            total[: part.size] += part
    return total[total > 0]


