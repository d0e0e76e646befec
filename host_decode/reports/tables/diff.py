"""The table `ikp diff` prints: A -> B per region (means, delta with its 95% CI, p50 delta, Welch and
Mann-Whitney p values, verdict coloured), then the launch length line.

Invariants, and the tests that guard them: every number shown is the JSON's, whole, at any terminal width
(tests/unit/host_decode/reports/test_tables_fit_terminal.py); a missing number (NaN, None) prints as "-"
(tests/unit/host_decode/analysis/test_diff.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, print_tables

STYLES = {"slower": "red", "faster": "green", "only_a": "yellow", "only_b": "yellow"}


def _v(x, fmt="{:.0f}"):
    return "-" if x is None or x != x else fmt.format(x)


def _ci(r: dict) -> str:
    if "ci_low_pct" not in r:
        return "-"
    return f"[{_v(r.get('ci_low_pct'), '{:+.1f}')}, {_v(r.get('ci_high_pct'), '{:+.1f}')}]%"


def diff_items(rows: list, launches: dict, *, metric: str, unit: str, alpha: float) -> list:
    """Per-region deltas (analysis.diff.compare rows) and the launch length line (compare_launches)."""
    def fmt(spec):
        return lambda x: _v(x, spec)

    items: list = [Table(f"A -> B per region ({metric}, samples per {unit}, alpha {alpha})", [
        Column("group", "group", text=True), Column("region", "event", text=True), Column("n A", "n_a"),
        Column("n B", "n_b"), Column("mean A ns", "mean_a", fmt("{:.0f}")),
        Column("mean B ns", "mean_b", fmt("{:.0f}")),
        Column("delta", "delta_pct", fmt("{:+.2f}%")), Column("95% CI", value=_ci),
        Column("p50 delta", "delta_p50_pct", fmt("{:+.2f}%")), Column("p (Welch)", "p_welch", fmt("{:.2g}")),
        Column("p (MW)", "p_mw", fmt("{:.2g}")), Column("verdict", "status", text=True),
    ], rows, name="regions", styles=[STYLES.get(r["status"]) for r in rows],
        terms=("delta", "95% CI", "p (Welch)", "p (MW)", "verdict"))]
    if launches.get("n_a") and launches.get("n_b"):
        items.append(
            f"launch length: A {_v(launches['mean_a'])} ns ({launches['n_a']} launch(es)), "
            f"B {_v(launches['mean_b'])} ns ({launches['n_b']}), delta {_v(launches['delta_pct'], '{:+.2f}%')}"
            + (f", p {_v(launches.get('p_welch'), '{:.2g}')}" if launches["n_a"] > 1 and launches["n_b"] > 1 else "")
        )
    return items


def print_diff(rows: list, launches: dict, console, *, metric: str, unit: str, alpha: float) -> None:
    print_tables(diff_items(rows, launches, metric=metric, unit=unit, alpha=alpha), console)
