"""The tables `ikp decode` prints: the loss report (every record decoded or counted in a named bucket)
and the region summary; `decode_json` is the same as JSON (`ikp decode --format json`).

Invariants, and the tests that guard them: the loss table lists every bucket of core.model.LOSS_BUCKETS
with its total (tests/unit/host_decode/cli/test_cli_grammar.py); a foreign trace kept in SM cycles is
labelled in cycles, never in ns (tests/unit/host_decode/interop/test_interop.py); every number of the JSON
is whole in the tables at any width (tests/unit/host_decode/reports/test_tables_fit_terminal.py).
"""

from __future__ import annotations

from host_decode.analysis.stats import region_summary, summary_rows
from host_decode.core.model import LOSS_BUCKETS, Trace
from host_decode.reports.tables.console import Column, Table, make_console, print_tables


def decode_json(trace: Trace, summary=None) -> dict:
    """What `ikp decode --format json` prints: the loss report and the region summary rows. summary:
    region_summary(trace) when the caller has it already (analysis.stats.RunSummary, counted as a writer
    streamed the spans)."""
    summary = region_summary(trace) if summary is None else summary
    return {"loss": trace.loss.to_json(), "regions": summary_rows(summary, trace.names)}


def loss_items(trace: Trace) -> list:
    loss = trace.loss
    items: list = [f"{trace.num_blocks} blocks x {trace.num_groups} groups, write_stride {trace.write_stride}"]
    lost = LOSS_BUCKETS[4:]
    rows = [{"bucket": b, "records": int(loss.totals[b])} for b in LOSS_BUCKETS]
    rows.append({"bucket": "total", "records": int(sum(loss.totals.values()))})
    rows.append({"bucket": "dropped on device (never written)", "records": int(loss.dropped_on_device)})
    styles = [("red" if r["bucket"] in lost and r["records"] else None) for r in rows]
    styles[-2] = "bold"
    styles[-1] = "red" if loss.dropped_on_device else None
    items.append(Table(f"records: {loss.nonzero_slots} non-zero slots", [
        Column("bucket", "bucket", text=True), Column("records", "records")], rows, name="loss", styles=styles,
        terms=("non-zero slots", *LOSS_BUCKETS, "dropped on device", "write_stride")))
    if loss.malformed_reasons:
        items.append("malformed: " + ", ".join(f"{k}={v}" for k, v in loss.malformed_reasons.items()))
    lossy = loss.per_lane[sum(loss.per_lane[b] for b in lost) > 0] if loss.per_lane.size else loss.per_lane
    if lossy.size:
        items.append(f"{lossy.size} lane(s) with losses; first: " + ", ".join(
            f"lane {int(r['lane'])} (" + ", ".join(f"{b}={int(r[b])}" for b in lost if r[b]) + ")"
            for r in lossy[:5]))
    return items


def summary_table(trace: Trace, rows: list | None = None) -> Table:
    rows = summary_rows(region_summary(trace), trace.names) if rows is None else rows
    # a foreign trace may keep its own time unit (Proton: SM cycles, interop/proton.py): label it, never "ns"
    unit, total_unit = ("cyc", "kcyc") if trace.meta.get("time_unit") == "cycles" else ("ns", "us")
    title = (f"regions ({trace.spans.size} spans, {trace.instants.size} instants; "
             f"{'absolute' if trace.absolute else 'relative'} time"
             f"{'; times in SM cycles' if unit == 'cyc' else ''})")
    f0 = "{:.0f}".format
    columns = [
        Column("group", "group_name", text=True), Column("region", "region", text=True), Column("count", "count"),
        Column(f"total {total_unit}", "total_ns", lambda v: f"{v / 1e3:.1f}"), Column(f"mean {unit}", "mean_ns", f0),
        Column(f"min {unit}", "min_ns"), Column(f"p50 {unit}", "p50_ns", f0), Column(f"p90 {unit}", "p90_ns", f0),
        Column(f"p99 {unit}", "p99_ns", f0), Column(f"max {unit}", "max_ns"), Column("cv", "cv", "{:.2f}".format),
    ]
    return Table(title, columns, rows, name="regions", terms=("count", "p50, p90, p99", "cv", "absolute time"))


def print_loss(trace: Trace, console=None) -> None:
    print_tables(loss_items(trace), console or make_console())


def print_summary(trace: Trace, console=None) -> None:
    print_tables([summary_table(trace)], console or make_console())
