"""What `ikp merge` prints: the parts of a merged session (one row per launch or rank: lanes written and
left out over --max-lanes in a Chrome JSON trace; blocks and shift in a Perfetto one), or how a capture was
aligned into a torch.profiler trace (one row per launch: the kernel slice, lead and tail).

Invariants, and the tests that guard them: every number shown is the JSON's, whole, at any terminal width;
the kernel's name is never cut (tests/unit/host_decode/reports/test_tables_fit_terminal.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table


def session_items(summary: dict, *, parts: int, by: str, mode: str, output: str) -> list:
    """A merged session: reports.merged.write_session's summary (Chrome JSON: lanes written and left out per
    part), or the Perfetto writer's (`notes`; the parts as analysis.sessions.concat placed them)."""
    if "notes" in summary:
        notes = "; ".join(summary["notes"])
        dash = lambda v: "-" if v is None else str(v)  # noqa: E731
        return [f"merged {parts} {by}(s) ({mode}) into {output}" + (f" ({notes})" if notes else ""),
                Table("parts", [
                    Column(by, "label", text=True), Column("launch", "launch_index", dash),
                    Column("rank", "rank", dash), Column("blocks", "num_blocks"), Column("groups", "num_groups"),
                    Column("first block", "block_offset"), Column("shift ns", "shift_ns"),
                ], summary["parts"], name="parts", terms=())]
    left = sum(p["lanes_left_out"] for p in summary["parts"])
    items: list = [f"merged {parts} {by}(s) ({mode}) into {output}"
                   + (f"; {left} lane(s) over --max-lanes left out" if left else "")]
    items.append(Table("parts", [
        Column(by, "label", text=True), Column("lanes", "lanes"), Column("written", "written"),
        Column("shift ns", "shift_ns"), Column("lanes left out", "lanes_left_out"),
        Column("regions left out", "spans_left_out"), Column("instants left out", "instants_left_out"),
    ], summary["parts"], name="parts", terms=("written",)))
    return items


def torch_items(alignment: dict) -> list:
    """A capture merged into a torch.profiler trace (analysis.align.Alignment.to_json)."""
    a = alignment
    state = "consistent" if a["consistent"] else "INCONSISTENT (regions longer than the kernel slice)"
    line = (f"aligned {len(a['occurrences'])} launch(es) of {a['kernel_name']!r}: offset {a['offset_ns']} ns "
            f"(clocks {a['raw_offset_ns']} ns apart before solving), accuracy +-{a['accuracy_ns']:.0f} ns, "
            f"slack {a['slack_ns']} ns, {state}")
    rows = [{"launch": i, "slice": s, "lead_ns": lead, "tail_ns": tail}
            for i, (s, lead, tail) in enumerate(zip(a["occurrences"], a["lead_ns"], a["tail_ns"]))]
    return [(line, None if a["consistent"] else "red"), Table("launches", [
        Column("launch", "launch"), Column("kernel slice", "slice"),
        Column("lead ns (slice start -> first record)", "lead_ns"),
        Column("tail ns (last record -> slice end)", "tail_ns"),
    ], rows, name="launches", terms=("slack", "accuracy", "lead, tail"))]
