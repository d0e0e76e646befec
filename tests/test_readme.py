"""Every shell command and every Python snippet of README.md runs against the shipped data.

Blocks are extracted from the README (never copied here): each fenced ```bash / ```python block is run
in a scratch directory holding copies of examples/ and tests/fixtures/ (so nothing in the repository is
written), with `ikp` being this tree's host_decode.cli. A block is skipped only when an HTML comment
`<!-- readme-test: skip (REASON) -->` stands right before it (GPU/torch code, a synopsis with
placeholders). `pip install` and `python -m pytest` lines are what .ci/run executes; they are checked
against .ci/run instead of being run here. An unfenced or untagged block holding an `ikp` command fails
the test: every command must be runnable or explicitly marked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((.+?)\)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NOT_RUN_HERE = ("pip install", "python -m pytest")  # .ci/run runs these (test_ci_runs_the_readme_install)


def blocks() -> list[dict]:
    """Fenced code blocks: language, first line number, text, skip reason (or None)."""
    out, lines = [], README.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2).lower(), i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.search(before)
        out.append(
            {"lang": lang, "line": start + 1, "text": "\n".join(body) + "\n", "skip": skip.group(1) if skip else None}
        )
        i += 1
    return out


def runnable(kind: str) -> list:
    return [pytest.param(b, id=f"line{b['line']}") for b in blocks() if b["lang"] in kind and not b["skip"]]


@pytest.fixture
def scratch(tmp_path):
    """A working directory with copies of the shipped data and an `ikp` that runs this tree."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "tests" / "fixtures", tmp_path / "tests" / "fixtures", ignore=shutil.ignore_patterns("__pycache__")
    )
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    ikp = bin_dir / "ikp"
    ikp.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m host_decode.cli "$@"\n')
    ikp.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        COLUMNS="100",
        MPLBACKEND="Agg",
    )
    return tmp_path, env


@pytest.mark.parametrize("block", runnable({"bash", "sh", "shell"}))
def test_readme_shell_block(block, scratch):
    cwd, env = scratch
    script = "\n".join(ln for ln in block["text"].splitlines() if not ln.strip().startswith(NOT_RUN_HERE))
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, f"README line {block['line']}:\n{script}\n--- stderr ---\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("block", runnable({"python", "py"}))
def test_readme_python_block(block, scratch):
    cwd, env = scratch
    r = subprocess.run(
        [sys.executable, "-c", block["text"]], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, f"README line {block['line']}:\n{block['text']}\n--- stderr ---\n{r.stderr[-3000:]}"


def test_every_command_is_in_a_runnable_or_marked_block():
    """No `ikp` command hides in an untagged or indented block, and every skip says why."""
    text = README.read_text()
    fenced = set()
    for b in blocks():
        fenced.update(range(b["line"], b["line"] + b["text"].count("\n") + 2))
        has_command = any(ln.strip().startswith(("ikp ", "$ ikp")) for ln in b["text"].splitlines())
        if has_command and b["lang"] not in ("bash", "sh", "shell"):
            assert b["skip"], f"README line {b['line']}: an ikp command in a ```{b['lang']} block (tag it bash)"
        if b["skip"]:
            assert len(b["skip"].strip()) > 5, f"README line {b['line']}: say why the block is skipped"
    for n, line in enumerate(text.splitlines(), 1):
        if n not in fenced and re.match(r"^( {4,}|\t)(\$ )?ikp ", line):
            pytest.fail(f"README line {n}: an indented ikp command outside a fenced block: {line.strip()}")
    assert len(runnable({"bash"})) >= 8 and len(runnable({"python"})) >= 3


def test_ci_runs_the_readme_install():
    """.ci/run installs and runs exactly what the README's quick start says."""
    quick = next(b for b in blocks() if b["lang"] == "bash")["text"].splitlines()
    readme_cmds = [ln.split("#")[0].strip() for ln in quick if ln.strip() and not ln.strip().startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in readme_cmds and "python -m pytest -q" in readme_cmds
    for cmd in readme_cmds:
        if cmd.startswith(("pip install -e", "python -m pytest", "ikp ")):
            assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
    assert "pip install ." in readme_cmds  # the light install for users who only decode and view
