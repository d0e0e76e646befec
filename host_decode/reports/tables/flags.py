"""The tables `ikp waits` prints for flags and counters (host_decode.analysis.flag_paths.flags_summary): the
ranks and their clocks, what was matched (and every unmatched or malformed record by its reason), the waits
per rank, and per step what bounded it: the chain from the block that ended last back to where the path
starts, each block with the wait it ended on and who released it, and the regions that made the head late.

Invariants, and the tests that guard them: every number the chain and the head show is in `ikp waits
--format json` (tests/unit/host_decode/reports/test_flags_tables.py::test_tables_show_the_json_numbers);
tables go through the one table helper (reports.tables.console.table).
"""

from __future__ import annotations

from host_decode.reports.tables.console import make_console, table

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


def print_flags(data: dict, console=None) -> None:
    """The flag tables of `data` (analysis.flag_paths.flags_summary)."""
    con = console or make_console()
    clock, ev, match = data["clock"], data["events"], data["match"]
    bound = f"{clock['error_bound_ns']} ns" + ("" if clock["error_stated"] else " (some rank states no error)")
    con.print(f"flags: {ev['signals']} signals, {ev['waits']} waits on {len(ev['buffers'])} buffer(s); "
              f"{match['matched']} waits matched; clocks agree within {bound}", markup=False)
    rows = [[str(r["rank"]), r["label"], str(r["launch"]), str(r["clock_offset_ns"]),
             "?" if r["clock_error_ns"] is None else str(r["clock_error_ns"]), str(r["clock_reference"] or "")]
            for r in data["ranks"]]
    if len(rows) > 1:
        con.print(table(con, "ranks and their clocks", ["rank", "capture", "launch", "offset ns", "error ns",
                                                         "reference"], rows, text=("capture", "reference"),
                        secondary=("reference",)))
    waits = [[str(r["rank"]), str(r["waits"]), us(r["wait_ns"]), str(r["signals"]), str(r["unmatched"])]
             for r in data["per_rank"]]
    con.print(table(con, "waits per rank", ["rank", "waits", "waited us", "signals", "unmatched"], waits))
    named = [(k, v) for k, v in {**{k: match[k] for k in match if k in REASONS}, **data["problems"]}.items() if v]
    if clock["clock_residual"]:
        named.append(("clock_residual", clock["clock_residual"]))
    if named:
        why = dict(REASONS, clock_residual=f"matched signals placed after their wait's end by the clocks' residual "
                                           f"error (within {clock['error_bound_ns']} ns): drawn at the wait's end")
        con.print(table(con, "unmatched and malformed, by reason", ["reason", "count", "meaning"],
                        [[k, str(v), why.get(k, "")] for k, v in named], text=("reason", "meaning")))
    for step in data["steps"]:
        print_step(step, con)


def print_step(step: dict, con) -> None:
    scope = "" if step["rank"] is None else f" (rank {step['rank']})"
    con.print(f"step {step['launch']}{scope}: critical path {us(step['path_ns'])} us", markup=False)
    rows = []
    for c in step["chain"]:
        for w in c.get("waits") or [{}]:
            by = w.get("released_by")
            after = w.get("after_signal_ns")
            rows.append([str(c["rank"]), str(c["block"]), us(c["work_ns"]), str(w.get("flag", "")),
                         us(w["wait_ns"]) if w else "", us(after) if after is not None else "",
                         f"rank {by['rank']} block {by['block']} warp {by['warp']}" if by else
                         ("unmatched" if w else "")])
    con.print(table(con, "what bounded the step (from the block that ended last back)",
                    ["rank", "block", "work us", "waited on", "waited us", "after signal us", "released by"], rows,
                    text=("waited on", "released by"), secondary=("after signal us",)))
    head = step["head"]
    if head:
        con.print(f"path starts on rank {head['rank']} block {head['block']}, {us(head['late_start_ns'])} us after "
                  "the median block's start", markup=False)
        regions = [[r["region"], str(r["warp"]), us(r["duration_ns"]), us(r["median_ns"]), us(r["excess_ns"])]
                   for link in step["links"] if link["kind"] == "work" for r in link["regions"]
                   if r["excess_ns"] > 0]
        if regions:
            con.print(table(con, "regions on the path longer than their median",
                            ["region", "warp", "us", "median us", "excess us"], regions, text=("region",)))
