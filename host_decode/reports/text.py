"""Terminal tables (rich) for the loss report and the region summary; shared by the CLI commands."""

from __future__ import annotations

from host_decode.core.model import LOSS_BUCKETS, Trace
from host_decode.analysis.stats import region_summary, summary_rows


def make_console(file=None):
    """The rich console every command prints with: the terminal's width on a terminal, 160 columns when
    piped or written to a file (rich's 80 would wrap every table), no colour codes in files."""
    import sys

    from rich.console import Console

    if file is not None:
        return Console(file=file, width=200, color_system=None, force_terminal=False, highlight=False)
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def print_loss(trace: Trace, console=None) -> None:
    from rich.table import Table

    console = console or make_console()
    loss = trace.loss
    t = Table(title=f"records: {loss.nonzero_slots} non-zero slots, {trace.num_blocks} blocks x {trace.num_groups} groups, "
                    f"write_stride {trace.write_stride}", title_justify="left")
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
    from rich.table import Table

    console = console or make_console()
    rows = summary_rows(region_summary(trace), trace.names)
    t = Table(title=f"regions ({trace.spans.size} spans, {trace.instants.size} instants; "
                    f"{'absolute' if trace.absolute else 'relative'} time)", title_justify="left")
    for col in ("group", "region", "count", "total us", "mean ns", "min ns", "p50 ns", "p90 ns", "p99 ns", "max ns", "cv"):
        t.add_column(col, justify="left" if col in ("group", "region") else "right")
    for r in rows:
        t.add_row(r["group_name"], r["region"], str(r["count"]), f"{r['total_ns'] / 1e3:.1f}", f"{r['mean_ns']:.0f}",
                  str(r["min_ns"]), f"{r['p50_ns']:.0f}", f"{r['p90_ns']:.0f}", f"{r['p99_ns']:.0f}", str(r["max_ns"]),
                  f"{r['cv']:.2f}")
    console.print(t)
