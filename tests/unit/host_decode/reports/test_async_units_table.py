"""The async-unit table of `ikp waits` (host_decode.reports.tables.async_units) shows the numbers of its JSON
output, a measurement only in the measured columns."""

import json
from pathlib import Path

from host_decode.reports.tables.async_units import print_async_units
from host_decode.reports.tables.console import make_console

CAPTURE = Path(__file__).resolve().parents[4] / "examples" / "pipelines" / "fa4_sm90_signals.npy"


def test_table_shows_the_json_numbers(capsys, tmp_path):
    from host_decode.cli import main

    assert main(["waits", str(CAPTURE), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    stats = {s["pipeline"]: s for s in data["async_units"]}
    q, k = stats["q"], stats["k"]
    # FA4's Q load is waited on (blocked) by every consumer warp: exact; K's consumers found the data ready (a
    # try_wait) and left no wait, so K's ready is bounded by their releases only
    assert q["classes"]["exact"] == q["uses"] == 16 and q["latency_ns"]["exact"]["p50"] == 480.0
    assert k["classes"]["ready_bounded"] == k["uses"] == 128 and k["latency_ns"]["exact"]["count"] == 0
    assert q["bytes_per_stage"] == 32768 and q["bytes_per_s"]["per"] == "cta"
    out = tmp_path / "table.txt"
    with open(out, "w") as f:
        print_async_units(data, make_console(file=f))
    lines = out.read_text().splitlines()
    row = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in lines if ln.startswith("│")}
    assert row["q TMA"][:6] == ["16", "16", "480", f"{q['latency_ns']['exact']['p99']:.0f}", "0", "–"]
    b = k["latency_ns"]["bounded"]
    # no bound as a p50: k's exact columns are empty, its bounds in their own column
    assert row["k TMA"][:6] == ["128", "0", "–", "–", "128 ready", f"{b['at_least_p50']:.0f}..{b['at_most_p50']:.0f}"]
    assert row["k TMA"][-1] == f"{k['bytes_per_s']['p50'] / 1e9:.3g}" and "GB/s per CTA" in out.read_text()
    assert any(ln.startswith("  k: issue = commit (measured: within 96 ns after it); ready = wait end") for ln in lines)


def test_no_async_unit_prints_nothing(tmp_path):
    out = tmp_path / "t.txt"
    with open(out, "w") as f:
        print_async_units({"async_units": []}, make_console(file=f))
    assert out.read_text() == ""
