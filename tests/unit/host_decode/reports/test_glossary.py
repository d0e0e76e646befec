"""The terms of the output are explained in one place (host_decode/reports/glossary.py): `ikp glossary`
prints them, docs/glossary.md is the same table, and every table of every command names the terms it uses in
its footer, each of them in the glossary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host_decode.cli import main
from host_decode.reports.glossary import GLOSSARY, markdown
from host_decode.reports.tables.console import Table, render

ROOT = Path(__file__).resolve().parents[4]
EX = ROOT / "examples"
PC = ROOT / "tests" / "fixtures" / "pc"
FA4 = EX / "pipelines" / "fa4_sm90_signals.npy"


def test_the_docs_page_is_the_glossary():
    assert markdown() in (ROOT / "docs" / "glossary.md").read_text()


def json_of(argv, capsys, monkeypatch, tmp_path) -> dict:
    monkeypatch.chdir(tmp_path)
    assert main([str(a) for a in argv] + ["--format", "json", "-q"]) == 0, argv
    return json.loads(capsys.readouterr().out)


def every_table(capsys, monkeypatch, tmp_path) -> list[Table]:
    from host_decode.load.capture import load_capture
    from host_decode.reports.tables import decode, diff, flags, hardware, kernels, merge, stats, waits

    j = lambda *argv: json_of(argv, capsys, monkeypatch, tmp_path)  # noqa: E731
    d = j("diff", EX / "insight" / "launch_0.npy", EX / "insight" / "launch_1.npy")
    trace = load_capture(FA4)
    items = (stats.stats_items(j("stats", FA4)) + waits.waits_items(j("waits", FA4))
             + kernels.kernels_items(j("kernels", EX / "insight" / "torch_trace.json.gz", "--no-cache"))
             + hardware.join_items(j("join", "--map", PC / "tiles_real_ncu.map.json", "--ncu",
                                     PC / "tiles_real_ncu.csv"))
             + diff.diff_items(d["regions"], d["launch"], metric="mean", unit="span", alpha=0.01)
             + hardware.map_items(j("pc2region", PC / "tiles_real_ncu.cubin"))
             + merge.session_items(j("merge", EX / "insight" / "launch_0.npy", "-o", "m.json"), parts=1,
                                   by="launch", mode="timeline", output="m.json")
             + merge.session_items(j("merge", EX / "insight" / "launch_0.npy", "-o", "m.pftrace"), parts=1,
                                   by="launch", mode="timeline", output="m.pftrace")
             + flags.flags_items(j("waits", ROOT / "tests" / "fixtures" / "flag_ranks"))
             + decode.loss_items(trace) + [decode.summary_table(trace)])
    return [t for t in items if isinstance(t, Table)]


def test_every_table_names_its_terms_and_each_is_explained(capsys, monkeypatch, tmp_path):
    tables = every_table(capsys, monkeypatch, tmp_path)
    assert len(tables) >= 20
    for t in tables:
        assert t.terms is not None, t.title
        unknown = [term for term in t.terms if term not in GLOSSARY]
        assert not unknown, (t.title, unknown)
        footer = " ".join(line for line, _ in render(t, 100)[-4:])
        assert "`ikp glossary`" in footer, (t.title, footer)


def test_the_words_users_asked_about_are_explained(capsys):
    for term in ("passed", "no record", "itself", "blocked"):
        assert main(["glossary", term, "--format", "json", "-q"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert any(r["term"] == term and len(r["meaning"]) > 20 for r in rows), term
    assert main(["glossary", "no such term here"]) == 2
    assert "not in the glossary" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"]])
def test_help_points_to_the_glossary(argv, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert "ikp glossary" in capsys.readouterr().out
