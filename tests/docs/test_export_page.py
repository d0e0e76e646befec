"""docs/export.md is what `ikp export` writes: its tables list every column of every Parquet file with its type,
and its DuckDB query, run on a fresh export of tests/fixtures/flag_ranks, prints the output the page shows.
Needs pyarrow and duckdb (the `export` extra): skipped, saying so, without them."""

import os
import re
from pathlib import Path

import pytest

from host_decode.cli import main
from tests.support.flag_scenarios import all_gather

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "export.md"
FIXTURE = ROOT / "tests" / "fixtures" / "flag_ranks"
TYPES = {"int16": "int16", "int32": "int32", "int64": "int64", "string": "string", "bool": "bool"}


def fenced(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.MULTILINE | re.DOTALL)


def render(columns: list, rows: list) -> str:
    """Right-aligned columns two spaces apart, the header first (the page's text block)."""
    cells = [list(map(str, columns))] + [[str(v) for v in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c[i].rjust(widths[i]) for i in range(len(columns))) for c in cells) + "\n"


def test_the_fixture_is_what_the_builder_writes(tmp_path):
    all_gather(tmp_path, 4, blocks=2, delay=(2, 1, 20000), seed=11)
    for f in sorted(FIXTURE.iterdir()):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in FIXTURE.iterdir())


def test_the_page_lists_every_column_with_its_type():
    pytest.importorskip("pyarrow", reason="the export extra (pyarrow) is not installed")
    from host_decode.writers.parquet import table_schemas

    text = PAGE.read_text()
    for table, fields in table_schemas().items():
        m = re.search(rf"^## {table}\.parquet.*?\n\n\| column .*?\n\|---.*?\n((?:\|.*\n)+)", text, re.MULTILINE)
        assert m, f"docs/export.md has no table for {table}.parquet"
        rows = [r.split("|")[1:3] for r in m.group(1).splitlines()]
        documented = [(c.strip().strip("`"), t.strip()) for c, t in rows]
        assert documented == [(name, TYPES[str(typ)]) for name, typ in fields], table


def test_the_query_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow", reason="the export extra (pyarrow) is not installed")
    duckdb = pytest.importorskip("duckdb", reason="the export extra (duckdb) is not installed")
    monkeypatch.chdir(tmp_path)
    command = next(b for b in fenced("bash") if "ikp export" in b).split()
    assert command[:3] == ["ikp", "export", "tests/fixtures/flag_ranks"]
    assert main([command[1], str(FIXTURE), *command[3:], "-q"]) == 0
    assert "rank(s)" in capsys.readouterr().out
    (sql,), (shown,) = fenced("sql"), fenced("text")
    result = duckdb.connect().sql(sql)
    assert render(result.columns, result.fetchall()) == shown
    assert os.path.exists("tables/export.json")
