"""The async-unit table `ikp waits` prints (analysis.async_units.async_unit_stats, the summary's
``async_units``): per pipeline with a TMA / UMMA unit, its uses by class, the issue -> ready latency of the
exact ones, what the bounded ones allow, bytes per stage and bytes per second per SM.

Invariants, and the tests that guard them: the table shows the numbers of `ikp waits --format json`, a bound
never in a measurement's column (tests/unit/host_decode/reports/test_async_units_table.py), whole at any
terminal width (tests/unit/host_decode/reports/test_tables_fit_terminal.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, print_tables

BOUND_WORDS = (("issue_bounded", "issue"), ("ready_bounded", "ready"), ("unbounded", "both"))


def _num(x, fmt="{:.0f}", scale=1.0) -> str:
    return "–" if x is None else fmt.format(x * scale)


def async_units_items(data: dict) -> list:
    """The table and its notes (prose lines and a Table); nothing when the capture has no async unit."""
    stats = data.get("async_units") or []
    if not stats:
        return []
    per = next((s["bytes_per_s"]["per"] for s in stats if s["bytes_per_s"]), "sm")

    def bounded(s):
        return " + ".join(f"{s['classes'][k]} {word}" for k, word in BOUND_WORDS if s["classes"][k]) or "0"

    def bounds(s):
        b = s["latency_ns"]["bounded"]
        return "–" if not b["count"] else f"{b['at_least_p50']:.0f}..{b['at_most_p50']:.0f}"

    columns = [
        Column("pipeline", value=lambda s: f"{s['pipeline']} {s['unit']}" + (" (frees)" if s["side"] == "empty"
                                                                              else ""), text=True),
        Column("uses", "uses"), Column("exact", value=lambda s: s["classes"]["exact"]),
        Column("p50 ns", value=lambda s: _num(s["latency_ns"]["exact"]["p50"])),
        Column("p99 ns", value=lambda s: _num(s["latency_ns"]["exact"]["p99"])),
        Column("bounded", value=bounded, text=True), Column("bounded ns", value=bounds),
        Column("open", "open"),
        Column("KiB/stage", value=lambda s: _num(s["bytes_per_stage"] / 1024 if s["bytes_per_stage"] else None)),
        Column(f"GB/s per {per.upper()}", value=lambda s: _num((s["bytes_per_s"] or {}).get("p50"), "{:.3g}",
                                                               scale=1e-9)),
    ]
    items: list = [Table("async units: issue -> ready per stage use", columns, stats, name="async_units", keys=1,
                         terms=("exact", "bounded", "open", "p50, p90, p99"))]
    step = stats[0]["timer_step_ns"]
    items.append(
        f"exact: issue and ready measured (ready to the timer's {step} ns step, the issue as the lines below say), "
        "p50 / p99 from the issue's record, over these only; "
        "bounded: only the issue / the ready / both ends bounded, bounded ns: p50 of the least and the most latency "
        "their bounds allow; open: a bound missing. GB/s: stage bytes landed over the "
        f"{per.upper()}'s recorded span, p50 over {per.upper()}s (every commit recorded: level signals)")
    seen = set()
    for s in stats:
        how = f"issue = {s['issue']}; ready = {s['ready']} ({s['completes']})"
        if how not in seen:
            seen.add(how)
            items.append(f"  {s['pipeline']}: {how}")
        if s["not_used"]:
            items.append(f"  {s['pipeline']}: not used: " + "; ".join(f"{v} {k}" for k, v in s["not_used"].items()))
    return items


def print_async_units(data: dict, console) -> None:
    """The async-unit table of `data` on `console` (nothing when the capture has no async unit)."""
    print_tables(async_units_items(data), console)
