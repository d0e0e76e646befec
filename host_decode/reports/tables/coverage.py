"""What `ikp waits` prints about the tracing's coverage (analysis.pipeline_coverage): the audit line of each
kernel first, and the pipelines traced only in part, each op left out with its reason and the records it left
unmatched.

Invariants, and the tests that guard them: the audit lines come first and equal the device side's
(tests/unit/host_decode/analysis/test_pipeline_coverage.py::test_ikp_waits_prints_the_audit_first); a partly
traced pipeline is named with its reasons (::test_partial_pipelines_are_counted).
"""

from __future__ import annotations


def coverage_lines(data: dict) -> list[str]:
    """The audit lines (or that the sidecar has none)."""
    cov = data.get("coverage")
    if cov is None:
        return ["coverage: the sidecar carries no audit (traced with audit=False, or by a tracer without one)"]
    lines = [f"coverage: {line}" for line in cov["lines"]]
    if cov["not_traced"]:
        lines.append("  sites not traced: " + "; ".join(f"{n} x {why}" for why, n in cov["not_traced"].items()))
    if cov["hooks_replaced"]:
        lines.append("  hooks the kernel replaced while traced: " + ", ".join(map(str, cov["hooks_replaced"])))
    return lines


def pipeline_ops_lines(data: dict) -> list[str]:
    """Pipelines with no traced op, or whose traced records have no traced counterpart."""
    level = data.get("level")
    lines = []
    for p in data.get("pipeline_ops") or []:
        if not p["traced"]:
            why = "; ".join(f"{op}: {r}" for op, r in p["missing"].items()) or "no op seen"
            lines.append(f"pipeline {p['name']} ({p['class']}, {p['site']}): nothing traced ({why})")
            continue
        for op, u in p["unmatched"].items():
            lines.append(f"pipeline {p['name']}: {u['records']} {op} records with nothing to match ({u['reason']})")
        other = {op: r for op, r in p["missing"].items() if r != f"level {level} does not record {op}"}
        if other and not p["unmatched"]:
            lines.append(f"pipeline {p['name']}: not traced: " + "; ".join(f"{op} ({r})" for op, r in other.items()))
    return lines
