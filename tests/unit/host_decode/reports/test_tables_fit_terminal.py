"""Every console table fits the terminal it is printed on and never cuts a number: at 60 to 200 columns,
every number each table command takes from its JSON output appears whole in its table output, and no
line is wider than the terminal (host_decode/reports/tables/console.py measures each table and wraps,
splits or stacks it to fit).

The expected numbers are worked out here from `--format json` with each table's documented format
(the oracle), not by the table code: a table that drops a column, crops a cell ("22" for 2208) or
loses a row fails. `--format csv` prints each command's rows too."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from host_decode.cli import main
from host_decode.core.model import LOSS_BUCKETS

ROOT = Path(__file__).resolve().parents[4]
EX = ROOT / "examples"
PC = ROOT / "tests" / "fixtures" / "pc"
WIDTHS = (60, 80, 100, 120, 160, 200)


def ns(x) -> str:
    """The unit-scaled duration of `ikp stats` ("816 ns", "1.02 us", "1.234 ms"): its number."""
    x = float(x)
    return f"{x / 1e6:.3f}" if abs(x) >= 1e6 else f"{x / 1e3:.2f}" if abs(x) >= 1e3 else f"{x:.0f}"


def pct(x) -> str:
    return f"{100 * x:.1f}%"


def si(x) -> str:
    x = float(x)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def stats_numbers(d):
    out = []
    for r in d["regions"]:
        out += [str(r["count"]), *(ns(r[k]) for k in ("total_ns", "mean_ns", "p50_ns", "p90_ns", "p99_ns",
                                                       "max_ns")), f"{r['cv']:.2f}"]
    L = d["launch"]
    out += [ns(L["launch_ns"]), ns(L["tail_ns"]), pct(L["tail_frac"]), f"{L['imbalance_block_end']:.3f}"]
    for g in d["bubbles"]["per_group"]:
        out += [str(g["lanes"]), pct(g["bubble_frac"]), pct(g["bubble_frac_max"]), ns(g["largest_gap_ns"])]
    for g in d["bubbles"]["largest_gaps"]:
        out += [str(g["block"]), str(g["lane"]), ns(g["start_ns"]), ns(g["dur_ns"])]
    for o in d["overlap"]:
        out += [str(o["blocks"]), *(pct(o[k]) for k in ("a_overlapped", "a_overlapped_min", "b_overlapped",
                                                          "b_overlapped_min"))]
    for r in d["critical"]["regions"][:10]:
        out += [str(r["spans"]), ns(r["total_ns"]), pct(r["share"])]
    return out


def waits_numbers(d):
    out = []
    for r in d["rows"]:
        out += [str(r["lanes"]), str(r["waits"]), str(r["blocked"]), str(r["passed"]), f"{r['total_ns'] / 1e3:.1f}"]
        out += [f"{r[k]:.0f}" for k in ("uses", "not_recorded", "p50_ns", "p99_ns", "max_ns") if r[k] is not None]
        if r["share_of_role_time"] is not None:
            out.append(pct(r["share_of_role_time"]))
        out += [str(v) for v in r["waited_on"].values()]
    for r in d["roles"]:
        out += [str(r["lanes"]), *(f"{r[k] / 1e3:.1f}" for k in ("time_ns", "wait_ns", "blocked_ns"))]
    for r in d["critical_path"]["segments"]:
        out += [f"{r['ns'] / 1e3:.1f}"] + ([pct(r["share"])] if r["share"] is not None else [])
    for s in d.get("async_units", []):
        lat, c = s["latency_ns"], s["classes"]
        out += [str(s["uses"]), str(c["exact"]), str(s["open"])]
        out += [f"{lat['exact'][k]:.0f}" for k in ("p50", "p99") if lat["exact"][k] is not None]
        if lat["bounded"]["count"]:
            out.append(f"{lat['bounded']['at_least_p50']:.0f}..{lat['bounded']['at_most_p50']:.0f}")
        if s["bytes_per_s"]:
            out.append(f"{s['bytes_per_s']['p50'] / 1e9:.3g}")
    return out


def flags_numbers(d):
    us = lambda ns: f"{ns / 1000:.3f}"  # noqa: E731
    out = []
    for r in d["ranks"]:
        out += [str(r["clock_offset_ns"]), str(r["clock_error_ns"])]
    for r in d["per_rank"]:
        out += [str(r["waits"]), us(r["wait_ns"]), str(r["signals"]), str(r["unmatched"])]
    for step in d["steps"]:
        for c in step["chain"]:
            out.append(us(c["work_ns"]))
            for w in c.get("waits", []):
                out += [us(w["wait_ns"])] + ([us(w["after_signal_ns"])] if w["after_signal_ns"] is not None else [])
    return out


def export_numbers(d):
    return [str(t["rows"]) for t in d["tables"].values()]


def merge_perfetto_numbers(d):
    return [str(p[k]) for p in d["parts"] for k in ("num_blocks", "num_groups", "shift_ns")]


def kernels_numbers(d):
    out = []
    for table in ("kernels", "memory", "runtime"):
        for r in d.get(table, []):
            out += [f"{r['count']:,}", f"{r['launch_share']:.1%}", f"{r['total_us']:,.2f}", f"{r['time_share']:.1%}"]
            out += [f"{r[k]:.3f}" for k in ("mean_us", "std_us", "min_us", "max_us")]
    for r in d["streams"]:
        out += [f"{r['count']:,}", f"{r['busy_us']:,.1f}", f"{r['idle_us']:,.1f}", f"{r['span_us']:,.1f}",
                f"{r['idle_share']:.1%}", str(r["overlaps"])]
    for h in d["histogram"]:
        out += [f"{h['lo_us']:.3g}", f"{h['hi_us']:.3g}", f"{h['count']:,}"]
    for r in d["pairs"]:
        out += [f"{r['count']:,}", f"{r['total_us']:,.2f}", *(f"{r[k]:.3f}" for k in ("mean_us", "std_us", "min_us",
                                                                                       "max_us"))]
    return out


def join_numbers(d):
    out = []
    for r in d["exclusive"]:
        if r["path"].startswith("<") and not r.get("samples") and not r.get("inst_executed"):
            continue
        out += [si(r["inst_executed"]), f"{100 * r['inst_share']:.1f}", si(r["samples"]),
                f"{100 * r['samples_share']:.1f}", *(f"{100 * f:.0f}%" for _, f in r["top_stalls"])]
    return out


def diff_numbers(d):
    def v(x, fmt):
        return [] if x is None else [fmt.format(x)]

    out = []
    for r in d["regions"]:
        out += [str(r["n_a"]), str(r["n_b"]), *v(r.get("mean_a"), "{:.0f}"), *v(r.get("mean_b"), "{:.0f}"),
                *v(r.get("delta_pct"), "{:+.2f}%"), *v(r.get("delta_p50_pct"), "{:+.2f}%"),
                *v(r.get("p_welch"), "{:.2g}"), *v(r.get("p_mw"), "{:.2g}")]
    return out


def merge_numbers(d):
    return [str(p[k]) for p in d["parts"] for k in ("lanes", "written", "lanes_left_out", "spans_left_out")]


def pc2region_numbers(d):
    return [str(r["instructions"]) for r in d["rows"]] + [str(r["marker_instructions"]) for r in d["rows"]]


def decode_numbers(d):
    out = [str(d["loss"][b]) for b in LOSS_BUCKETS] + [str(d["loss"]["dropped_on_device"])]
    for r in d["regions"]:
        out += [str(r["count"]), f"{r['total_ns'] / 1e3:.1f}", f"{r['mean_ns']:.0f}", str(r["min_ns"]),
                f"{r['p50_ns']:.0f}", f"{r['p90_ns']:.0f}", f"{r['p99_ns']:.0f}", str(r["max_ns"]), f"{r['cv']:.2f}"]
    return out


FA4 = EX / "pipelines" / "fa4_sm90_signals.npy"
TORCH = EX / "insight" / "torch_trace.json.gz"
FLAG_RANKS = ROOT / "tests" / "fixtures" / "flag_ranks"
COMMANDS = {
    "stats": (["stats", FA4], stats_numbers),
    "waits": (["waits", FA4], waits_numbers),
    "kernels": (["kernels", TORCH, "--no-cache"], kernels_numbers),
    "join": (["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", PC / "tiles_real_ncu.csv"], join_numbers),
    "diff": (["diff", EX / "insight" / "launch_0.npy", EX / "insight" / "launch_1.npy"], diff_numbers),
    "merge": (["merge", EX / "insight" / "launch_0.npy", EX / "insight" / "launch_1.npy", "-o", "m.json",
               "-f"], merge_numbers),
    "pc2region": (["pc2region", PC / "tiles_real_ncu.cubin"], pc2region_numbers),
    "decode": (["decode", FA4], decode_numbers),
    "waits (flags)": (["waits", FLAG_RANKS], flags_numbers),
    "export": (["export", FLAG_RANKS, "-o", "tables", "-f"], export_numbers),
    "merge (perfetto)": (["merge", EX / "insight" / "launch_0.npy", EX / "insight" / "launch_1.npy", "-o", "m.pftrace",
                          "-f"], merge_perfetto_numbers),
}


def run(argv, tmp_path, capsys, monkeypatch, columns=None) -> str:
    monkeypatch.chdir(tmp_path)  # outputs by short relative names: a long path is the user's line, not a table's
    shutil.rmtree(tmp_path / "tables", ignore_errors=True)  # ikp export writes a new folder, never over one
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    assert main([str(a) for a in argv]) == 0, argv
    return capsys.readouterr().out


def occurrences(text: str, number: str) -> int:
    return len(re.findall(r"(?<![\w.,+-])" + re.escape(number) + r"(?![\w.])", text))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_number_whole_at_every_width(name, tmp_path, capsys, monkeypatch):
    argv, numbers = COMMANDS[name]
    data = json.loads(run(argv + ["--format", "json"], tmp_path, capsys, monkeypatch))
    want = Counter(numbers(data))
    assert want, "no number to look for"
    for width in WIDTHS:
        text = run(argv, tmp_path, capsys, monkeypatch, columns=width)
        wide = [line for line in text.splitlines() if len(line) > width]
        assert not wide, (width, wide[:3])
        missing = {n: c for n, c in want.items() if occurrences(text, n) < c}
        assert not missing, (width, missing, text[:3000])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_csv_beside_table_and_json(name, tmp_path, capsys, monkeypatch):
    argv, _ = COMMANDS[name]
    text = run(argv + ["--format", "csv"], tmp_path, capsys, monkeypatch)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and all(len(r) == len(rows[0]) for r in rows), text[:500]


def test_waits_keeps_whom_each_wait_waited_on(tmp_path, capsys, monkeypatch):
    """The cell that was cut ("wg1 336, itsel / 59", "wg2 192," dropped): each "role count" stays whole."""
    argv, _ = COMMANDS["waits"]
    data = json.loads(run(argv + ["--format", "json"], tmp_path, capsys, monkeypatch))
    for width in WIDTHS:
        text = " ".join(run(argv, tmp_path, capsys, monkeypatch, columns=width).split())
        for r in data["rows"]:
            for who, n in r["waited_on"].items():
                assert f"{who} {n}" in text, (width, who, n)
