"""The tables `ikp waits` prints from analysis.waits.waits_summary: waits per pipeline x role, roles,
the critical path's segments, and why any wait was left unmatched (every status is named: REASONS).

Invariants, and the tests that guard them: the table shows the numbers of `ikp waits --format json`
(tests/unit/host_decode/analysis/test_waits.py::test_ikp_waits_command); below NARROW columns the table keeps its main
columns and fits 80 (tests/unit/host_decode/analysis/test_waits.py::test_waits_tables_fit_80_columns).
"""

from __future__ import annotations

from host_decode.analysis.pipeline_match import MATCHED_STATUSES
from host_decode.reports.tables.async_units import print_async_units
from host_decode.reports.tables.console import make_console
from host_decode.reports.tables.coverage import print_coverage, print_pipeline_ops

NARROW = 120  # below this many columns the waits table keeps its main columns only
SHORT_OPS = {"acquire": "acq", "bar_sync": "sync"}


def short(op: str) -> str:
    return SHORT_OPS.get(op, op)


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


def print_waits(data: dict, console=None) -> None:
    """The `ikp waits` tables of `data` (analysis.waits.waits_summary)."""
    from rich import box
    from rich.table import Table

    console = console or make_console()
    print_coverage(data, console)
    st = data["status"]
    matched = sum(st[status] for status in MATCHED_STATUSES)
    console.print(
        f"[b]{data.get('kernel') or 'capture'}[/b]: {data['waits']} waits, {matched} matched "
        f"({st['matched']} to a recorded signal, {st['inferred']} inferred from program order, "
        f"{st['self']} self-released barriers, {st['first_use']} first uses, {st['tma_store']} TMA-store "
        f"acquires freed by the TMA unit), {data['flows']} flows; "
        f"blocked = longer than {data['blocked_above_ns']} ns (timer step {data['timer_step_ns']} ns from the "
        f"{data['timer_step_source']}; a first acquire, which cannot block, takes "
        f"{data['pass_through_ns'] or '?'} ns); "
        f"level {data.get('level') or '?'}, roles = {data['roles_by'].replace('_', ' ')}s"
    )
    checks = data["occurrence_checks"]
    if data["late_signals"] or any(checks.values()):
        console.print(
            f"{checks['time_ahead_of_count']} waits matched by time past their lane's count (earlier waits left "
            f"no record: a try_wait found the data ready); {data['late_signals']} signals recorded after the "
            "wait they released ended"
        )
    narrow = (console.width or NARROW) < NARROW
    t = Table(title="waits per pipeline x role", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    cols = (
        ("pipeline", "op", "role", "waits", "blocked", "of role", "waited on")
        if narrow
        else (
            "pipeline",
            "op",
            "role",
            "lanes",
            "uses",
            "waits",
            "blocked",
            "passed",
            "no record",
            "total us",
            "p50 ns",
            "p99 ns",
            "max ns",
            "of role time",
            "waited on (blocked)",
        )
    )
    names = {"pipeline": "channel", "op": "op", "role": "role"}
    for col in cols:
        left = col in names or col.startswith("waited")
        # names stay whole (as wide as the longest, up to 22); numbers take what they need
        width = (
            min(
                20 if narrow else 22,
                max(
                    [len(col)]
                    + [len(short(r[names[col]]) if col == "op" and narrow else r[names[col]]) for r in data["rows"]]
                ),
            )
            if col in names
            else None
        )
        t.add_column(col, justify="left" if left else "right", overflow="fold", no_wrap=not left, min_width=width)
    num = lambda x, fmt="{:.0f}": "–" if x is None else fmt.format(x)  # noqa: E731
    for r in data["rows"]:
        cell = {
            "pipeline": r["channel"],
            "op": r["op"],
            "role": r["role"],
            "lanes": str(r["lanes"]),
            "uses": num(r["uses"]),
            "waits": str(r["waits"]),
            "blocked": str(r["blocked"]),
            "passed": str(r["passed"]),
            "no record": num(r["not_recorded"]),
            "total us": f"{r['total_ns'] / 1e3:.1f}",
            "p50 ns": num(r["p50_ns"]),
            "p99 ns": num(r["p99_ns"]),
            "max ns": num(r["max_ns"]),
            "of role time": "–" if r["share_of_role_time"] is None else f"{100 * r['share_of_role_time']:.1f}%",
            "waited on (blocked)": ", ".join(f"{k} {v}" for k, v in r["waited_on"].items()) or "–",
        }
        cell["of role"], cell["waited on"] = cell["of role time"], cell["waited on (blocked)"]
        if narrow:
            cell["op"] = short(r["op"])
        t.add_row(*(cell[c] for c in cols))
    console.print(t)
    console.print(
        "uses: releases (consumer) / commits (producer) of the role, one per use of a stage, when traced; "
        "no record: uses without a wait record (a try_wait found the stage ready, so no wait ran)"
    )
    t = Table(title="roles", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("role", "lanes", "time us", "in waits us", "blocked us", "blocked share"):
        t.add_column(col, justify="left" if col == "role" else "right")
    for r in data["roles"]:
        share = "–" if r["share_blocked"] is None else f"{100 * r['share_blocked']:.1f}%"
        t.add_row(
            r["role"],
            str(r["lanes"]),
            f"{r['time_ns'] / 1e3:.1f}",
            f"{r['wait_ns'] / 1e3:.1f}",
            f"{r['blocked_ns'] / 1e3:.1f}",
            share,
        )
    console.print(t)
    cp = data["critical_path"]
    mean = cp["mean_path_ns"]
    console.print(
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
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("segment", "share", "total us"):
        t.add_column(col, justify="left" if col == "segment" else "right")
    for r in cp["segments"]:
        what = f"{r['role']} works" if r["what"] == "work" else f"{r['role']} waits on {r['channel']} for {r['on']}"
        t.add_row(what, "–" if r["share"] is None else f"{100 * r['share']:.1f}%", f"{r['ns'] / 1e3:.1f}")
    console.print(t)
    if data["unmatched"]:
        console.print(
            "[b]not matched[/b]: " + "; ".join(f"{k} {v} ({REASONS.get(k, k)})" for k, v in data["unmatched"].items())
        )
    else:
        console.print("every wait matched (or passed through as a stage's first use)")
    print_pipeline_ops(data, console)
    print_async_units(data, console)
