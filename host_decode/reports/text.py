"""Terminal tables (rich) for the loss report and the region summary; shared by the CLI commands."""

from __future__ import annotations

from host_decode.analysis.stats import region_summary, summary_rows
from host_decode.core.model import LOSS_BUCKETS, Trace

NARROW_COLUMNS = 100  # below this console width tables drop their secondary columns (80-column terminals)


def is_narrow(con) -> bool:
    return con.width < NARROW_COLUMNS


def table(con, title: str, headers: list, rows: list, *, secondary: tuple = (), text: tuple = ()):
    """A rich table that stays readable at 80 columns: on a narrow console (is_narrow) the `secondary`
    columns are left out; `text` columns (names) keep at least 10 characters and fold instead of being
    cut to a few letters; numeric columns never wrap. A row is a list of cells or {"cells", "style"}."""
    from rich.table import Table

    narrow = is_narrow(con)
    keep = [i for i, h in enumerate(headers) if not (narrow and h in secondary)]
    t = Table(title=title, title_justify="left", pad_edge=not narrow, collapse_padding=narrow)
    for i in keep:
        if headers[i] in text:
            t.add_column(headers[i], justify="left", min_width=10, overflow="fold")
        else:
            t.add_column(headers[i], justify="right", no_wrap=True)
    for r in rows:
        style = None
        if isinstance(r, dict):
            style, r = r.get("style"), r["cells"]
        t.add_row(*[r[i] for i in keep], style=style)
    return t


def make_console(file=None):
    """The rich console every command prints with: the terminal's width on a terminal (or $COLUMNS), 160
    columns when piped or written to a file (rich's 80 would wrap every table), no colour codes in files."""
    import sys

    from rich.console import Console

    if file is not None:
        return Console(file=file, width=200, color_system=None, force_terminal=False, highlight=False)
    import os

    # $COLUMNS wins when set (COLUMNS=80 ikp ... | less gets the narrow layout); a pipe otherwise gets 160
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 160
    return Console(highlight=False, width=width)


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
