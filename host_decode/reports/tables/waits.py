"""The tables `ikp waits` prints from analysis.waits.waits_summary: waits per pipeline x role, roles,
the critical path's segments, and why any wait was left unmatched (every status is named: REASONS).

Invariants, and the tests that guard them: the table shows the numbers of `ikp waits --format json`
(tests/unit/host_decode/analysis/test_waits.py::test_ikp_waits_command), every one whole at any terminal
width, and each "role count" of whom a wait waited on stays together
(tests/unit/host_decode/reports/test_tables_fit_terminal.py); the coverage audit comes first
(reports.tables.coverage), the async units' table last (reports.tables.async_units).
"""

from __future__ import annotations

from host_decode.reports.tables.async_units import async_units_items
from host_decode.reports.tables.console import Column, Table, make_console, print_tables
from host_decode.reports.tables.coverage import coverage_lines, pipeline_ops_lines

TABLES = ("waits", "roles", "critical_path", "async_units")

REASONS = {
    "producer_dropped": "a producer lane of the block/cluster overflowed; its later commits were never written",
    "consumer_dropped": "a consumer lane of the block/cluster overflowed; its later releases were never written",
    "participant_dropped": "a lane on that named barrier overflowed",
    "lane_missing": "a signalling lane of the block/cluster wrote nothing at all",
    "occurrence_beyond_signal": "more waits than signals, with every signalling lane present and complete",
    "signal_in_other_cta": "no lane of the block signals this pipeline, other blocks' do: a cluster-scoped "
    "pipeline whose metadata lacks its cluster (try --cluster 2)",
    "bound_not_recorded": "inferred match (signal not traced) found no earlier acquire/wait to bound it: "
    "a try_acquire/try_wait skipped it",
    "no_signal_recorded": "nothing signals this pipeline in the capture (e.g. only waits traced on both sides)",
}


def waits_items(data: dict) -> list:
    """The `ikp waits` output of `data` (analysis.waits.waits_summary): prose lines and Tables."""
    from host_decode.analysis.pipeline_match import MATCHED_STATUSES

    st = data["status"]
    matched = sum(st[status] for status in MATCHED_STATUSES)
    items: list = coverage_lines(data) + [
        f"{data.get('kernel') or 'capture'}: {data['waits']} waits, {matched} matched "
        f"({st['matched']} to a recorded signal, {st['inferred']} inferred from program order, "
        f"{st['self']} self-released barriers, {st['first_use']} first uses, {st['tma_store']} TMA-store "
        f"acquires freed by the TMA unit), {data['flows']} flows; "
        f"blocked = the wait lasted longer than {data['blocked_above_ns']} ns (timer step {data['timer_step_ns']} ns "
        f"from the {data['timer_step_source']}; a first acquire, which cannot block, takes "
        f"{data['pass_through_ns'] or '?'} ns); "
        f"level {data.get('level') or '?'}, roles = {data['roles_by'].replace('_', ' ')}s"
    ]
    checks = data["occurrence_checks"]
    if data["late_signals"] or any(checks.values()):
        items.append(
            f"{checks['time_ahead_of_count']} waits matched by time past their lane's count (earlier waits left "
            f"no record: a try_wait found the data ready); {data['late_signals']} signals recorded after the "
            "wait they released ended"
        )
    num = lambda x, fmt="{:.0f}": "–" if x is None else fmt.format(x)  # noqa: E731
    share = lambda x: "–" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    us = lambda v: f"{v / 1e3:.1f}"  # noqa: E731
    items.append(Table("waits per pipeline x role", [
        Column("pipeline", "channel", text=True), Column("op", "op", text=True), Column("role", "role", text=True),
        Column("lanes", "lanes"), Column("uses", "uses", num), Column("waits", "waits"),
        Column("blocked", "blocked"), Column("passed", "passed"), Column("no record", "not_recorded", num),
        Column("total us", "total_ns", us), Column("p50 ns", "p50_ns", num),
        Column("p99 ns", "p99_ns", num), Column("max ns", "max_ns", num),
        Column("of role time", "share_of_role_time", share),
        Column("waited on (blocked)", "waited_on", lambda w: ", ".join(f"{k} {v}" for k, v in w.items()) or "–",
               text=True, sep=", "),
    ], data["rows"], name="waits", keys=3,
        terms=("waits", "uses", "blocked", "passed", "no record", "of role time", "waited on", "itself", "first use")))
    items.append(Table("roles", [
        Column("role", "role", text=True), Column("lanes", "lanes"),
        Column("time us", "time_ns", us), Column("in waits us", "wait_ns", us),
        Column("blocked us", "blocked_ns", us), Column("blocked share", "share_blocked", share),
    ], data["roles"], name="roles", terms=("role", "blocked")))
    cp = data["critical_path"]
    mean = cp["mean_path_ns"]
    items.append(
        f"critical path: {cp['blocks']} of {cp['blocks_total']} blocks, mean "
        f"{'–' if mean is None else f'{mean / 1e3:.2f} us'} (walked back from each block's last lane"
        + (
            "; every block has an overflowed lane: paths end at the last record, not at the block's end)"
            if cp["partial"]
            else f"; {cp['blocks_overflowed']} blocks with an overflowed lane left out)"
            if cp["blocks_overflowed"]
            else ")"
        )
    )
    segment = (lambda r: f"{r['role']} works" if r["what"] == "work"
               else f"{r['role']} waits on {r['channel']} for {r['on']}")
    items.append(Table("", [
        Column("segment", value=segment, text=True), Column("share", "share", share),
        Column("total us", "ns", us),
    ], cp["segments"], name="critical_path", terms=("critical path",)))
    if data["unmatched"]:
        items.append("not matched: " + "; ".join(f"{k} {v} ({REASONS.get(k, k)})"
                                                 for k, v in data["unmatched"].items()))
    else:
        items.append("every wait matched (or passed through as a stage's first use)")
    return items + pipeline_ops_lines(data) + async_units_items(data)


def print_waits(data: dict, console=None) -> None:
    """The `ikp waits` tables of `data` (analysis.waits.waits_summary)."""
    print_tables(waits_items(data), console or make_console())
