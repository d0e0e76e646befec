"""The tables `ikp kernels` prints from its report (torch_traces analyses of a PyTorch profiler trace):
per device busy time, per-name tables (kernels, memory operations, runtime), an attached capture's
regions, idle gaps per stream, the gap histogram and kernel pairs; and one table of it as CSV.

Invariants, and the tests that guard them: fits 80 columns, names fold and are escaped for rich markup
(tests/unit/host_decode/cli/test_cli_grammar.py::test_every_table_command_fits_80_columns_end_to_end);
the CSV of a table has one row per row dict under a header of its keys
(tests/unit/host_decode/torch_traces/test_kernels.py::test_cli_json_csv_and_report).
"""

from __future__ import annotations

import csv
import io

from host_decode.reports.tables.console import table


def csv_text(report: dict, table: str) -> str:
    """One table of the report (a list of row dicts) as CSV text with a header row ("" when empty)."""
    rows = report.get(table, [])
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def print_kernels(report: dict, console, *, verbose: bool = False, pairs_by: str = "count") -> None:
    """Every table of the report: devices, kernels, memory operations, runtime, an attached capture's
    regions, idle gaps per stream, the gap histogram and the kernel pairs (sorted by gap `pairs_by`)."""
    from rich.markup import escape
    from rich.table import Table

    sel = report["selection"]
    console.print(
        f"[bold]{escape(report['trace'])}[/]: {report['events']:,} complete events; phases {report['phases']}"
        + (f"; skipped {report['skipped']}" if report["skipped"] else "")
    )
    if verbose:
        console.print(f"cache: {report['cache']}; parsed with {report['parser']}")
    if "step_assignment" in sel:
        s = sel["step_assignment"]
        console.print(
            f"ProfilerStep#{s['number']}: {s['by_launch']} rows by their launch's correlation id, "
            f"{s['by_time']} by start time (no launch row); {s['in_no_step']} selected rows are in no step"
        )
    for dev, d in report["devices"].items():
        util = d["union_us"] / d["span_us"] if d["span_us"] else 0.0
        console.print(
            f"device {dev}: {d['events']:,} rows, sum of durations {d['sum_us']:,.1f} us, busy (union) "
            f"{d['union_us']:,.1f} us of {d['span_us']:,.1f} us span ({util:.1%})"
        )
    title = f"{', '.join(sel['categories'])}: {sel['rows']:,} rows"
    console.print(_name_table(console, report["kernels"], title))
    if report.get("memory"):
        console.print(_name_table(console, report["memory"], "memory operations (memcpy, memset)"))
    if report["runtime"]:
        console.print(_name_table(console, report["runtime"], "CUDA runtime / driver (CPU side)"))
    if "capture" in report:
        _capture_table(console, Table, report["capture"])
    if "streams" not in report:
        return
    t = Table(
        title="idle gaps per stream (gap = start - latest earlier end on the stream; kernels and memory operations)"
    )
    for col in ("device", "stream", "count", "busy us", "idle us", "span us", "idle %", "overlaps"):
        t.add_column(col, justify="right")
    for r in report["streams"]:
        t.add_row(
            str(r["device"]),
            str(r["stream"]),
            f"{r['count']:,}",
            f"{r['busy_us']:,.1f}",
            f"{r['idle_us']:,.1f}",
            f"{r['span_us']:,.1f}",
            f"{r['idle_share']:.1%}",
            str(r["overlaps"]),
        )
    console.print(t)
    g = report["gaps"]
    lo, hi = g["range_us"]
    hi = "inf" if hi is None else hi
    t = Table(
        title=f"gap histogram: {g['n_in_range']:,} of {g['n_gaps']:,} gaps in [{lo}, {hi}] us; "
        f"{g['zero_or_overlap_in_range']:,} of them 0 (back-to-back or overlap)"
    )
    for col in ("from us", "to us", "count", ""):
        t.add_column(col, justify="right" if col else "left")
    peak = max([h["count"] for h in report["histogram"]] or [1]) or 1
    for h in report["histogram"]:
        t.add_row(f"{h['lo_us']:.3g}", f"{h['hi_us']:.3g}", f"{h['count']:,}", "#" * round(30 * h["count"] / peak))
    console.print(t)
    t = Table(title=f"kernel pairs A -> B by gap {pairs_by} (gaps in range)")
    for col in ("A", "B", "count", "total us", "mean us", "std us", "min us", "max us"):
        t.add_column(col, justify="left" if col in ("A", "B") else "right", overflow="fold")
    for r in report["pairs"]:
        t.add_row(
            escape(r["prev"]),
            escape(r["next"]),
            f"{r['count']:,}",
            f"{r['total_us']:,.2f}",
            f"{r['mean_us']:.3f}",
            f"{r['std_us']:.3f}",
            f"{r['min_us']:.3f}",
            f"{r['max_us']:.3f}",
        )
    console.print(t)


def _name_table(console, rows: list, title: str):
    """Per-name table; on a narrow terminal std/min/max and the launch share go, names fold."""
    from rich.markup import escape

    headers = ["name", "kind", "count", "launch %", "total us", "mean us", "std us", "min us", "max us", "time %"]
    cells = [[escape(r["name"]), r["kind"], f"{r['count']:,}", f"{r['launch_share']:.1%}", f"{r['total_us']:,.2f}",
              f"{r['mean_us']:.3f}", f"{r['std_us']:.3f}", f"{r['min_us']:.3f}", f"{r['max_us']:.3f}",
              f"{r['time_share']:.1%}"] for r in rows]
    return table(console, escape(title), headers, cells, secondary=("launch %", "std us", "min us", "max us"),
                 text=("name", "kind"))


def _capture_table(console, Table, cap: dict) -> None:
    from rich.markup import escape

    where = ", ".join(cap["matched_rows"]) or "no kernel row (capture kernel name not found in the table)"
    t = Table(title=escape(f"regions of {cap['capture']} (kernel '{cap['kernel']}' -> {where})"))
    for col in ("group", "region", "count", "total us", "mean us", "p50 us", "p99 us", "max us"):
        t.add_column(col, justify="left" if col in ("group", "region") else "right")
    for r in cap["regions"]:
        t.add_row(
            escape(str(r["group_name"])),
            escape(str(r["region"])),
            f"{r['count']:,}",
            f"{r['total_ns'] / 1e3:,.2f}",
            f"{r['mean_ns'] / 1e3:.3f}",
            f"{r['p50_ns'] / 1e3:.3f}",
            f"{r['p99_ns'] / 1e3:.3f}",
            f"{r['max_ns'] / 1e3:.3f}",
        )
    console.print(t)


