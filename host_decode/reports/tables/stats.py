"""The tables `ikp stats` prints from analysis.regions.stats_data: regions with percentiles and a
sparkline of each histogram, launch tail and imbalance, bubbles and the largest gaps, overlap between
groups, critical lanes.

Invariants, and the tests that guard them: every number shown is the JSON's, whole, at any terminal width
(tests/unit/host_decode/reports/test_tables_fit_terminal.py); a ring capture's launch line is the one
`ikp report` shows (load.ring.describe_ring;
tests/unit/ikp_cute/test_ring.py::test_stats_and_report_of_a_saved_ring_show_lost_launches_and_strays).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, make_console, print_tables

SPARK = " ▁▂▃▄▅▆▇█"
TABLES = ("regions", "launch", "bubbles", "gaps", "overlap", "critical")


def spark(counts) -> str:
    if not counts:
        return ""
    top = max(counts) or 1
    return "".join(SPARK[0 if c == 0 else max(1, round(8 * c / top))] for c in counts)


def _ns(x) -> str:
    if x is None:
        return "-"
    x = float(x)
    if abs(x) >= 1e6:
        return f"{x / 1e6:.3f} ms"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.2f} us"
    return f"{x:.0f} ns"


def _num(x) -> str:
    return "-" if x is None else f"{x:g}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ratio(x) -> str:
    return f"{x:.3f}" if x else "-"


def stats_items(d: dict) -> list:
    """The `ikp stats` output of `d` (analysis.regions.stats_data): prose lines and Tables."""
    from host_decode.load.ring import describe_ring

    items: list = []
    head = (f"{d.get('kernel') or 'kernel'}: {d['num_blocks']} blocks x {d['num_groups']} groups, "
            f"{d['launches']} launch(es)")
    if d["records_lost"]:
        items.append((head + f", {d['records_lost']} records lost (see `ikp decode`)", "red"))
    else:
        items.append(head)
    if d.get("ring"):
        ring = d["ring"]
        missed = ring["lost_launches"] or ring["stray_records"] or ring["launches_without_records"]
        items.append((describe_ring(ring), "red" if missed else None))
    if not d["regions"]:
        items.append(("no regions recorded (every lane is all bubble; see `ikp decode` for what was read)", "yellow"))
    items.append(Table("regions (durations)", [
        Column("group", "group_name", text=True), Column("region", "region", text=True), Column("count", "count"),
        Column("total", "total_ns", _ns), Column("mean", "mean_ns", _ns), Column("p50", "p50_ns", _ns),
        Column("p90", "p90_ns", _ns), Column("p99", "p99_ns", _ns), Column("max", "max_ns", _ns),
        Column("cv", "cv", "{:.2f}".format), Column("histogram (min..max)", "hist_counts", spark),
    ], d["regions"], name="regions", terms=("count", "p50, p90, p99", "cv", "histogram")))

    L = d["launch"]
    per = f" (median over {L['launches']} launches)" if L.get("launches") else ""
    measures = [
        ("launch length", _ns(L.get("launch_ns")), "earliest record to latest block end", L.get("launch_ns")),
        ("tail", _ns(L.get("tail_ns")), "last block end - median block end", L.get("tail_ns")),
        ("tail share", _pct(L.get("tail_frac")), "tail / launch length", L.get("tail_frac")),
        ("tail SM utilization", _pct(L.get("tail_sm_utilization")), "SMs holding a block during the tail",
         L.get("tail_sm_utilization")),
        ("imbalance, block end", _ratio(L.get("imbalance_block_end")), "max / mean block end",
         L.get("imbalance_block_end")),
        ("imbalance, SM busy", _ratio(L.get("imbalance_sm_busy")), "max / mean SM busy time",
         L.get("imbalance_sm_busy")),
        ("waves (max per SM)", _num(L.get("waves_max")), "blocks on an SM / most resident at once", L.get("waves_max")),
    ]
    items.append(Table("launch: tail and imbalance" + per, [
        Column("measure", "measure", text=True), Column("value", "shown"), Column("meaning", "meaning", text=True),
    ], [{"measure": m, "shown": v, "meaning": what, "value": raw} for m, v, what, raw in measures], name="launch",
        terms=("tail", "imbalance", "waves")))

    B = d["bubbles"]
    items.append(Table(f"bubbles: {_pct(B['bubble_frac'])} of lane time is in no region", [
        Column("group", "group", text=True), Column("lanes", "lanes"), Column("bubble share", "bubble_frac", _pct),
        Column("worst lane", "bubble_frac_max", _pct), Column("largest gap", "largest_gap_ns", _ns),
    ], B["per_group"], name="bubbles", terms=("bubble",)))
    if B["largest_gaps"]:
        items.append(Table("largest gaps", [
            Column("block", "block"), Column("group", "group", text=True), Column("lane", "lane"),
            Column("at (from trace start)", "start_ns", _ns), Column("length", "dur_ns", _ns),
            Column("after", "after", text=True), Column("before", "before", text=True),
        ], B["largest_gaps"], name="gaps", keys=3))
    if d["overlap"]:
        items.append(Table("overlap between groups (per block, time-weighted over blocks)", [
            Column("A", "group_a", text=True), Column("B", "group_b", text=True), Column("blocks", "blocks"),
            Column("A overlapped by B", "a_overlapped", _pct), Column("worst block", "a_overlapped_min", _pct),
            Column("B overlapped by A", "b_overlapped", _pct), Column("worst block ", "b_overlapped_min", _pct),
        ], d["overlap"], name="overlap", terms=("overlap",)))
    C = d["critical"]
    items.append(
        "critical lanes (last to finish in their block): by group "
        + ", ".join(f"{k}: {v}" for k, v in C["blocks_by_group"].items())
        + "; last region "
        + ", ".join(f"{k}: {v}" for k, v in C["last_event"].items())
        + f"; median lead over the next lane {_ns(C['slack_ns_p50'])}"
    )
    if C["regions"]:
        items.append(Table("time of the critical lanes by region (inclusive)", [
            Column("group", "group", text=True), Column("region", "event", text=True), Column("spans", "spans"),
            Column("total", "total_ns", _ns), Column("share", "share", _pct),
        ], C["regions"][:10], name="critical", terms=("critical lane",)))
    return items


def print_stats(d: dict, console=None) -> None:
    """The `ikp stats` tables of `d` (analysis.regions.stats_data)."""
    print_tables(stats_items(d), console or make_console())
