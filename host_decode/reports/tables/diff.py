"""The table `ikp diff` prints: A -> B per region (means, delta with its 95% CI, p50 delta, Welch and
Mann-Whitney p values, verdict coloured), then the launch length line.

Invariants, and the tests that guard them: fits 80 columns (tests/unit/host_decode/cli/test_cli_grammar.py::
test_every_table_command_fits_80_columns_end_to_end); a missing number (NaN, None) prints as "-"
(tests/unit/host_decode/analysis/test_diff.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import table


def _v(x, fmt="{:.0f}"):
    return "-" if x is None or x != x else fmt.format(x)


def print_diff(rows: list, launches: dict, console, *, metric: str, unit: str, alpha: float) -> None:
    """Per-region deltas (analysis.diff.compare rows) and the launch length line (compare_launches); on a
    narrow terminal the secondary columns (counts, CI, p50, Mann-Whitney) go."""
    headers = ["group", "region", "n A", "n B", "mean A ns", "mean B ns", "delta", "95% CI", "p50 delta", "p (Welch)",
               "p (MW)", "verdict"]
    style = {"slower": "red", "faster": "green", "only_a": "yellow", "only_b": "yellow"}
    cells = []
    for r in rows:
        ci = (
            f"[{_v(r.get('ci_low_pct'), '{:+.1f}')}, {_v(r.get('ci_high_pct'), '{:+.1f}')}]%"
            if "ci_low_pct" in r
            else "-"
        )
        cells.append({"style": style.get(r["status"]), "cells": [
            r["group"], r["event"], str(r["n_a"]), str(r["n_b"]), _v(r.get("mean_a")), _v(r.get("mean_b")),
            _v(r.get("delta_pct"), "{:+.2f}%"), ci, _v(r.get("delta_p50_pct"), "{:+.2f}%"),
            _v(r.get("p_welch"), "{:.2g}"), _v(r.get("p_mw"), "{:.2g}"), r["status"]]})
    t = table(console, f"A -> B per region ({metric}, samples per {unit}, alpha {alpha})", headers,
              cells, secondary=("n A", "n B", "95% CI", "p50 delta", "p (MW)"), text=("group", "region"))
    console.print(t)
    if launches.get("n_a") and launches.get("n_b"):
        console.print(
            f"launch length: A {_v(launches['mean_a'])} ns ({launches['n_a']} launch(es)), "
            f"B {_v(launches['mean_b'])} ns ({launches['n_b']}), delta {_v(launches['delta_pct'], '{:+.2f}%')}"
            + (f", p {_v(launches.get('p_welch'), '{:.2g}')}" if launches["n_a"] > 1 and launches["n_b"] > 1 else "")
        )
