"""The tables `ikp stats` prints from analysis.regions.stats_data: regions with percentiles and a
sparkline of each histogram, launch tail and imbalance, bubbles and the largest gaps, overlap between
groups, critical lanes.

Invariants, and the tests that guard them: readable at 80 columns, names whole
(tests/unit/host_decode/cli/test_cli_grammar.py::test_tables_readable_at_80_columns,
::test_every_table_command_fits_80_columns_end_to_end); a ring capture's launch line is the one `ikp report` shows
(load.ring.describe_ring;
tests/unit/ikp_cute/test_ring.py::test_stats_and_report_of_a_saved_ring_show_lost_launches_and_strays).
"""

from __future__ import annotations

from host_decode.load.ring import describe_ring
from host_decode.reports.tables.console import make_console, table

SPARK = " ▁▂▃▄▅▆▇█"


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


def print_stats(d: dict, console=None) -> None:
    """The `ikp stats` tables of `d` (analysis.regions.stats_data)."""
    from rich.table import Table

    console = console or make_console()
    head = (f"{d.get('kernel') or 'kernel'}: {d['num_blocks']} blocks x {d['num_groups']} groups, "
            f"{d['launches']} launch(es)")
    if d["records_lost"]:
        head += f", [red]{d['records_lost']} records lost[/red] (see `ikp decode`)"
    console.print(head)
    if d.get("ring"):
        ring = d["ring"]
        missed = ring["lost_launches"] or ring["stray_records"] or ring["launches_without_records"]
        console.print(f"[red]{describe_ring(ring)}[/red]" if missed else describe_ring(ring))

    if not d["regions"]:
        console.print(
            "[yellow]no regions recorded[/yellow] (every lane is all bubble; see `ikp decode` for what was read)"
        )
    t = table(
        console,
        "regions (durations)",
        ["group", "region", "count", "total", "mean", "p50", "p90", "p99", "max", "cv", "histogram (min..max)"],
        [
            [
                r["group_name"],
                r["region"],
                str(r["count"]),
                _ns(r["total_ns"]),
                _ns(r["mean_ns"]),
                _ns(r["p50_ns"]),
                _ns(r["p90_ns"]),
                _ns(r["p99_ns"]),
                _ns(r["max_ns"]),
                f"{r['cv']:.2f}",
                spark(r["hist_counts"]),
            ]
            for r in d["regions"]
        ],
        secondary=("total", "p90", "cv", "histogram (min..max)"),
        text=("group", "region"),
    )
    if d["regions"]:
        console.print(t)

    L = d["launch"]
    per = f" (median over {L['launches']} launches)" if L.get("launches") else ""
    t = Table(title="launch: tail and imbalance" + per, title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("meaning")
    rows = [
        ("launch length", _ns(L.get("launch_ns")), "earliest record to latest block end"),
        ("tail", _ns(L.get("tail_ns")), "last block end - median block end"),
        ("tail share", _pct(L.get("tail_frac")), "tail / launch length"),
        ("tail SM utilization", _pct(L.get("tail_sm_utilization")), "SMs holding a block during the tail"),
        (
            "imbalance, block end",
            f"{L['imbalance_block_end']:.3f}" if L.get("imbalance_block_end") else "-",
            "max / mean block end",
        ),
        (
            "imbalance, SM busy",
            f"{L['imbalance_sm_busy']:.3f}" if L.get("imbalance_sm_busy") else "-",
            "max / mean SM busy time",
        ),
        ("waves (max per SM)", _num(L.get("waves_max")), "blocks on an SM / most resident at once"),
    ]
    for r in rows:
        t.add_row(*r)
    console.print(t)

    B = d["bubbles"]
    t = Table(title=f"bubbles: {_pct(B['bubble_frac'])} of lane time is in no region", title_justify="left")
    for c in ("group", "lanes", "bubble share", "worst lane", "largest gap"):
        t.add_column(c, justify="left" if c == "group" else "right")
    for g in B["per_group"]:
        t.add_row(
            g["group"], str(g["lanes"]), _pct(g["bubble_frac"]), _pct(g["bubble_frac_max"]), _ns(g["largest_gap_ns"])
        )
    console.print(t)
    if B["largest_gaps"]:
        t = Table(title="largest gaps", title_justify="left")
        for c in ("block", "group", "lane", "at (from trace start)", "length", "after", "before"):
            t.add_column(c)
        for g in B["largest_gaps"]:
            t.add_row(
                str(g["block"]),
                g["group"],
                str(g["lane"]),
                _ns(g["start_ns"]),
                _ns(g["dur_ns"]),
                g["after"],
                g["before"],
            )
        console.print(t)

    if d["overlap"]:
        t = Table(title="overlap between groups (per block, time-weighted over blocks)", title_justify="left")
        for c in ("A", "B", "blocks", "A overlapped by B", "worst block", "B overlapped by A", "worst block "):
            t.add_column(c)
        for o in d["overlap"]:
            t.add_row(
                o["group_a"],
                o["group_b"],
                str(o["blocks"]),
                _pct(o["a_overlapped"]),
                _pct(o["a_overlapped_min"]),
                _pct(o["b_overlapped"]),
                _pct(o["b_overlapped_min"]),
            )
        console.print(t)

    C = d["critical"]
    console.print(
        "critical lanes (last to finish in their block): by group "
        + ", ".join(f"{k}: {v}" for k, v in C["blocks_by_group"].items())
        + "; last region "
        + ", ".join(f"{k}: {v}" for k, v in C["last_event"].items())
        + f"; median lead over the next lane {_ns(C['slack_ns_p50'])}"
    )
    if C["regions"]:
        t = Table(title="time of the critical lanes by region (inclusive)", title_justify="left")
        for c in ("group", "region", "spans", "total", "share"):
            t.add_column(c)
        for r in C["regions"][:10]:
            t.add_row(r["group"], r["event"], str(r["spans"]), _ns(r["total_ns"]), _pct(r["share"]))
        console.print(t)
