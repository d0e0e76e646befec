"""The tables `ikp kernels` prints from its report (torch_traces analyses of a PyTorch profiler trace):
per device busy time, per-name tables (kernels, memory operations, runtime), an attached capture's
regions, idle gaps per stream, the gap histogram and kernel pairs; and one table of it as CSV.

Invariants, and the tests that guard them: every number shown is the JSON's, whole, at any terminal width;
a name longer than two lines is cut with "…" and the note says --format csv shows it whole
(tests/unit/host_decode/reports/test_tables_fit_terminal.py); names are printed as they are, never read
as markup (tests/unit/host_decode/torch_traces/test_kernels.py); the CSV of a table has one row per row dict
under a header of its keys (tests/unit/host_decode/torch_traces/test_kernels.py::test_cli_json_csv_and_report).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, print_tables

CSV_TABLES = ("kernels", "memory", "runtime", "streams", "pairs", "histogram")
NAME_LINES = 2  # a kernel name longer than this many lines is cut ("…"): --format csv or -v shows it whole


def csv_text(report: dict, table: str) -> str:
    """One table of the report (a list of row dicts) as CSV text with a header row ("" when empty)."""
    return Table("", [], report.get(table, [])).csv()


def kernels_items(report: dict, *, verbose: bool = False, pairs_by: str = "count") -> list:
    """Every table of the report: devices, kernels, memory operations, runtime, an attached capture's
    regions, idle gaps per stream, the gap histogram and the kernel pairs (sorted by gap `pairs_by`)."""
    sel = report["selection"]
    items: list = [
        (f"{report['trace']}: {report['events']:,} complete events; phases {report['phases']}"
         + (f"; skipped {report['skipped']}" if report["skipped"] else ""), "bold")
    ]
    if verbose:
        items.append(f"cache: {report['cache']}; parsed with {report['parser']}")
    if "step_assignment" in sel:
        s = sel["step_assignment"]
        items.append(
            f"ProfilerStep#{s['number']}: {s['by_launch']} rows by their launch's correlation id, "
            f"{s['by_time']} by start time (no launch row); {s['in_no_step']} selected rows are in no step"
        )
    for dev, d in report["devices"].items():
        util = d["union_us"] / d["span_us"] if d["span_us"] else 0.0
        items.append(
            f"device {dev}: {d['events']:,} rows, sum of durations {d['sum_us']:,.1f} us, busy (union) "
            f"{d['union_us']:,.1f} us of {d['span_us']:,.1f} us span ({util:.1%})"
        )
    items.append(_name_table(report["kernels"], f"{', '.join(sel['categories'])}: {sel['rows']:,} rows", "kernels"))
    if report.get("memory"):
        items.append(_name_table(report["memory"], "memory operations (memcpy, memset)", "memory"))
    if report["runtime"]:
        items.append(_name_table(report["runtime"], "CUDA runtime / driver (CPU side)", "runtime"))
    if "capture" in report:
        items.append(_capture_table(report["capture"]))
    if "streams" not in report:
        return items
    f1, f2, f3 = "{:,.1f}".format, "{:,.2f}".format, "{:.3f}".format
    items.append(Table(
        "idle gaps per stream (gap = start - latest earlier end on the stream; kernels and memory operations)", [
            Column("device", "device"), Column("stream", "stream"), Column("count", "count", "{:,}".format),
            Column("busy us", "busy_us", f1), Column("idle us", "idle_us", f1), Column("span us", "span_us", f1),
            Column("idle %", "idle_share", "{:.1%}".format), Column("overlaps", "overlaps"),
        ], report["streams"], name="streams", keys=2, terms=("gap", "idle", "overlaps")))
    g = report["gaps"]
    lo, hi = g["range_us"]
    hi = "inf" if hi is None else hi
    peak = max([h["count"] for h in report["histogram"]] or [1]) or 1
    items.append(Table(
        f"gap histogram: {g['n_in_range']:,} of {g['n_gaps']:,} gaps in [{lo}, {hi}] us; "
        f"{g['zero_or_overlap_in_range']:,} of them 0 (back-to-back or overlap)", [
            Column("from us", "lo_us", "{:.3g}".format), Column("to us", "hi_us", "{:.3g}".format),
            Column("count", "count", "{:,}".format),
            Column("", "count", lambda c: "#" * round(30 * c / peak), text=True),
        ], report["histogram"], name="histogram", keys=2))
    items.append(Table(f"kernel pairs A -> B by gap {pairs_by} (gaps in range)", [
        Column("A", "prev", text=True, max_lines=NAME_LINES), Column("B", "next", text=True, max_lines=NAME_LINES),
        Column("count", "count", "{:,}".format), Column("total us", "total_us", f2), Column("mean us", "mean_us", f3),
        Column("std us", "std_us", f3), Column("min us", "min_us", f3), Column("max us", "max_us", f3),
    ], report["pairs"], name="pairs"))
    return items


def _name_table(rows: list, title: str, name: str) -> Table:
    f3 = "{:.3f}".format
    return Table(title, [
        Column("name", "name", text=True, max_lines=NAME_LINES), Column("kind", "kind", text=True),
        Column("count", "count", "{:,}".format), Column("launch %", "launch_share", "{:.1%}".format),
        Column("total us", "total_us", "{:,.2f}".format), Column("mean us", "mean_us", f3),
        Column("std us", "std_us", f3), Column("min us", "min_us", f3), Column("max us", "max_us", f3),
        Column("time %", "time_share", "{:.1%}".format),
    ], rows, name=name, terms=("launch %", "time %"))


def _capture_table(cap: dict) -> Table:
    where = ", ".join(cap["matched_rows"]) or "no kernel row (capture kernel name not found in the table)"
    us2, us3 = (lambda v: f"{v / 1e3:,.2f}"), (lambda v: f"{v / 1e3:.3f}")
    return Table(f"regions of {cap['capture']} (kernel '{cap['kernel']}' -> {where})", [
        Column("group", "group_name", text=True), Column("region", "region", text=True),
        Column("count", "count", "{:,}".format), Column("total us", "total_ns", us2), Column("mean us", "mean_ns", us3),
        Column("p50 us", "p50_ns", us3), Column("p99 us", "p99_ns", us3), Column("max us", "max_ns", us3),
    ], cap["regions"], name="capture")


def print_kernels(report: dict, console, *, verbose: bool = False, pairs_by: str = "count") -> None:
    print_tables(kernels_items(report, verbose=verbose, pairs_by=pairs_by), console)
