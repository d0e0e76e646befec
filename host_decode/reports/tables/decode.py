"""The tables `ikp decode` prints: the loss report (every record decoded or counted in a named bucket)
and the region summary.

Invariants, and the tests that guard them: the loss table lists every bucket of core.model.LOSS_BUCKETS
with its total (tests/unit/host_decode/cli/test_cli_grammar.py); a foreign trace kept in SM cycles is labelled in
cycles, never in ns (tests/unit/host_decode/interop/test_interop.py).
"""

from __future__ import annotations

from host_decode.analysis.stats import region_summary, summary_rows
from host_decode.core.model import LOSS_BUCKETS, Trace
from host_decode.reports.tables.console import make_console, table


def print_loss(trace: Trace, console=None) -> None:
    from rich.table import Table

    console = console or make_console()
    loss = trace.loss
    console.print(f"{trace.num_blocks} blocks x {trace.num_groups} groups, write_stride {trace.write_stride}")
    t = Table(title=f"records: {loss.nonzero_slots} non-zero slots", title_justify="left")
    t.add_column("bucket")
    t.add_column("records", justify="right")
    for b in LOSS_BUCKETS:
        t.add_row(b, str(loss.totals[b]), style="red" if b in LOSS_BUCKETS[4:] and loss.totals[b] else None)
    t.add_row("total", str(sum(loss.totals.values())), style="bold")
    t.add_row("dropped on device (never written)", str(loss.dropped_on_device),
              style="red" if loss.dropped_on_device else None)
    console.print(t)
    if loss.malformed_reasons:
        console.print("malformed: " + ", ".join(f"{k}={v}" for k, v in loss.malformed_reasons.items()))
    lossy = loss.per_lane[sum(loss.per_lane[b] for b in LOSS_BUCKETS[4:]) > 0] if loss.per_lane.size else loss.per_lane
    if lossy.size:
        console.print(f"{lossy.size} lane(s) with losses; first: " + ", ".join(
            f"lane {int(r['lane'])} (" + ", ".join(f"{b}={int(r[b])}" for b in LOSS_BUCKETS[4:] if r[b]) + ")"
            for r in lossy[:5]))


def print_summary(trace: Trace, console=None) -> None:

    console = console or make_console()
    rows = summary_rows(region_summary(trace), trace.names)
    # a foreign trace may keep its own time unit (Proton: SM cycles, interop/proton.py): label it, never "ns"
    unit, total_unit = ("cyc", "kcyc") if trace.meta.get("time_unit") == "cycles" else ("ns", "us")
    title = (f"regions ({trace.spans.size} spans, {trace.instants.size} instants; "
             f"{'absolute' if trace.absolute else 'relative'} time"
             f"{'; times in SM cycles' if unit == 'cyc' else ''})")
    cells = [[r["group_name"], r["region"], str(r["count"]), f"{r['total_ns'] / 1e3:.1f}", f"{r['mean_ns']:.0f}",
              str(r["min_ns"]), f"{r['p50_ns']:.0f}", f"{r['p90_ns']:.0f}", f"{r['p99_ns']:.0f}", str(r["max_ns"]),
              f"{r['cv']:.2f}"] for r in rows]
    headers = ["group", "region", "count", f"total {total_unit}", f"mean {unit}", f"min {unit}", f"p50 {unit}",
               f"p90 {unit}", f"p99 {unit}", f"max {unit}", "cv"]
    secondary = (f"total {total_unit}", f"min {unit}", f"p90 {unit}", "cv")
    console.print(table(console, title, headers, cells, secondary=secondary, text=("group", "region")))
