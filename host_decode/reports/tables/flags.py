"""The tables `ikp waits` prints for flags and counters (host_decode.analysis.flag_paths.flags_summary): the
ranks and their clocks, what was matched (and every unmatched or malformed record by its reason), the waits
per rank, and per step what bounded it: the chain from the block that ended last back to where the path
starts, each block with the wait it ended on and who released it, and the regions that made the head late.

Invariants, and the tests that guard them: every number the chain and the head show is in `ikp waits
--format json` (tests/unit/host_decode/reports/test_flags_tables.py::test_tables_show_the_json_numbers), whole
at any terminal width (tests/unit/host_decode/reports/test_tables_fit_terminal.py); the tables are of the one
table model (reports.tables.console.Table), so that --format csv --table NAME prints any of them.
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, make_console, print_tables

TABLES = ("flag_ranks", "flag_waits", "flag_reasons", "flag_chain", "flag_regions")
REASONS = {
    "initial_value": "the condition held at the launch's start: nothing recorded released it",
    "no_signal": "no signal of that flag was recorded",
    "signal_after_wait": "crossing signals exist, all after the wait ended beyond the clocks' error",
    "value_never_reached": "signals of the flag exist but none crossed the wait's condition",
    "record_without_address": "a signal or wait without its FLAG_ADDR record",
    "wait_without_value": "a wait without a FLAG_VALUE its site records (the expected or the reset value)",
    "signal_without_value": "a signal without the FLAG_VALUE its site records (a store's value, a runtime amount)",
    "payload_without_record": "a FLAG_ADDR / FLAG_VALUE record that belongs to no flag record",
    "extra_payload": "more FLAG_ADDR / FLAG_VALUE records than the record's site writes",
    "ambiguous_address": "an address inside two flag buffers' ranges (aliasing modulo 16 GiB): left out",
    "zero_increments": "an add whose amount was 0",
    "negative_add": "an add of a negative amount (the matching counts increments): left out",
}


def us(ns: int) -> str:
    return f"{ns / 1000:.3f}"


def _us(ns) -> str:
    return "" if ns is None else us(ns)


def flags_items(data: dict) -> list:
    """The flag output of `data` (analysis.flag_paths.flags_summary): prose lines and Tables."""
    clock, ev, match = data["clock"], data["events"], data["match"]
    bound = f"{clock['error_bound_ns']} ns" + ("" if clock["error_stated"] else " (some rank states no error)")
    items: list = [f"flags: {ev['signals']} signals, {ev['waits']} waits on {len(ev['buffers'])} buffer(s); "
                   f"{match['matched']} waits matched; clocks agree within {bound}"]
    if len(data["ranks"]) > 1:
        items.append(Table("ranks and their clocks", [
            Column("rank", "rank"), Column("capture", "label", text=True), Column("launch", "launch"),
            Column("offset ns", "clock_offset_ns"),
            Column("error ns", "clock_error_ns", lambda v: "?" if v is None else str(v)),
            Column("reference", "clock_reference", lambda v: str(v or ""), text=True),
        ], data["ranks"], name="flag_ranks", keys=1, terms=("clock error",)))
    items.append(Table("waits per rank", [
        Column("rank", "rank"), Column("waits", "waits"), Column("waited us", "wait_ns", us),
        Column("signals", "signals"), Column("unmatched", "unmatched"),
    ], data["per_rank"], name="flag_waits", keys=1, terms=("unmatched",)))
    named = [(k, v) for k, v in {**{k: match[k] for k in match if k in REASONS}, **data["problems"]}.items() if v]
    if clock["clock_residual"]:
        named.append(("clock_residual", clock["clock_residual"]))
    if named:
        why = dict(REASONS, clock_residual=f"matched signals placed after their wait's end by the clocks' residual "
                                           f"error (within {clock['error_bound_ns']} ns): drawn at the wait's end")
        items.append(Table("unmatched and malformed, by reason", [
            Column("reason", "reason", text=True), Column("count", "count"), Column("meaning", "meaning", text=True),
        ], [{"reason": k, "count": v, "meaning": why.get(k, "")} for k, v in named], name="flag_reasons", keys=1,
                           terms=("unmatched",)))
    chain, regions = [], []
    for step in data["steps"]:
        items += step_lines(step)
        for c in step["chain"]:
            for w in c.get("waits") or [{}]:
                by = w.get("released_by")
                chain.append({"step": step["launch"], "rank": c["rank"], "block": c["block"], "work_ns": c["work_ns"],
                              "flag": w.get("flag", ""), "wait_ns": w.get("wait_ns"),
                              "after_signal_ns": w.get("after_signal_ns"),
                              "released_by": f"rank {by['rank']} block {by['block']} warp {by['warp']}" if by else
                              ("unmatched" if w else "")})
        regions += [{"step": step["launch"], **r} for link in step["links"] if link["kind"] == "work"
                    for r in link["regions"] if r["excess_ns"] > 0]
    if chain:
        items.append(Table("what bounded each step (from the block that ended last back)", [
            Column("step", "step"), Column("rank", "rank"), Column("block", "block"),
            Column("work us", "work_ns", us), Column("waited on", "flag", text=True),
            Column("waited us", "wait_ns", _us), Column("after signal us", "after_signal_ns", _us),
            Column("released by", "released_by", text=True),
        ], chain, name="flag_chain", keys=3,
            terms=("critical path", "after signal", "released by")))
    if regions:
        items.append(Table("regions on the path longer than their median", [
            Column("step", "step"), Column("region", "region", text=True), Column("warp", "warp"),
            Column("us", "duration_ns", us), Column("median us", "median_ns", us),
            Column("excess us", "excess_ns", us),
        ], regions, name="flag_regions", keys=2, terms=("critical path",)))
    return items


def step_lines(step: dict) -> list[str]:
    """A step's critical path and where it starts, in words."""
    scope = "" if step["rank"] is None else f" (rank {step['rank']})"
    lines = [f"step {step['launch']}{scope}: critical path {us(step['path_ns'])} us"]
    head = step["head"]
    if head:
        lines.append(f"  path starts on rank {head['rank']} block {head['block']}, {us(head['late_start_ns'])} us "
                     "after the median block's start")
    return lines


def print_flags(data: dict, console=None) -> None:
    """The flag tables of `data` (analysis.flag_paths.flags_summary)."""
    print_tables(flags_items(data), console or make_console())
