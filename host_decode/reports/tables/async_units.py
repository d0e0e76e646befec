"""The async-unit table `ikp waits` prints (analysis.async_units.async_unit_stats, the summary's
``async_units``): per pipeline with a TMA / UMMA unit, its uses by class, the issue -> ready latency of the
exact ones, what the bounded ones allow, bytes per stage and bytes per second per SM.

Invariants, and the tests that guard them: the table shows the numbers of `ikp waits --format json`, a bound
never in a measurement's column (tests/unit/host_decode/reports/test_async_units_table.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import table

HEADERS = ["pipeline", "uses", "exact", "p50 ns", "p99 ns", "bounded", "bounded ns", "open", "KiB/stage", "GB/s"]
SECONDARY = ("open", "KiB/stage")
BOUND_WORDS = (("issue_bounded", "issue"), ("ready_bounded", "ready"), ("unbounded", "both"))


def _num(x, fmt="{:.0f}", scale=1.0) -> str:
    return "–" if x is None else fmt.format(x * scale)


def print_async_units(data: dict, console) -> None:
    """The table and its notes; nothing when the capture has no async unit."""
    stats = data.get("async_units") or []
    if not stats:
        return
    per = next((s["bytes_per_s"]["per"] for s in stats if s["bytes_per_s"]), "sm")
    headers = HEADERS[:-1] + [f"GB/s per {per.upper()}"]
    rows = []
    for s in stats:
        c, lat = s["classes"], s["latency_ns"]
        b = lat["bounded"]
        name = f"{s['pipeline']} {s['unit']}" + (" (frees)" if s["side"] == "empty" else "")
        bounded = " + ".join(f"{c[k]} {word}" for k, word in BOUND_WORDS if c[k]) or "0"
        rows.append([name, str(s["uses"]), str(c["exact"]), _num(lat["exact"]["p50"]), _num(lat["exact"]["p99"]),
                     bounded, "–" if not b["count"] else f"{b['at_least_p50']:.0f}..{b['at_most_p50']:.0f}",
                     str(s["open"]), _num(s["bytes_per_stage"] / 1024 if s["bytes_per_stage"] else None),
                     _num((s["bytes_per_s"] or {}).get("p50"), "{:.3g}", scale=1e-9)])
    console.print(table(console, "async units: issue -> ready per stage use", headers, rows,
                        secondary=SECONDARY, text=("pipeline", "bounded")))
    step = stats[0]["timer_step_ns"]
    console.print(
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
            console.print(f"  {s['pipeline']}: {how}")
        if s["not_used"]:
            console.print(f"  {s['pipeline']}: not used: " + "; ".join(f"{v} {k}" for k, v in s["not_used"].items()))
