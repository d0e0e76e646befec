"""Executable documentation: every command and snippet of README.md and of the site's pages (docs/**/*.md)
runs against the shipped data, a page's blocks in order in one directory, as a reader would run them.

Blocks are extracted from the pages (never copied here). Each page gets a scratch directory holding copies
of examples/ and tests/fixtures/ (nothing in the repository is written), with `ikp` being this tree's
host_decode.cli and `python` this interpreter; its fenced ```bash / ```python blocks run there one after
another, so two commands that write the same file fail the test (outputs are never replaced without -f).
`ikp view FILE` lines run as a check: the server starts, prints the viewer URL, and stops on SIGTERM.
An HTML comment on the line before a block says what else to do with it:

    <!-- docs-test: skip (REASON) -->     not run (it needs a GPU, torch, or is a synopsis); REASON required
    <!-- docs-test: excerpt (PATH) -->    not run; its lines must appear, in order and contiguous, in PATH
    <!-- docs-test: ci (REASON) -->       README's install block: every line is in .ci/run (checked), not run

A block that holds an `ikp` command but is neither runnable nor marked fails, and so does an indented
`ikp` command outside a fence. The generated pages' hooks (docs/hooks/) are checked here too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
MARK = re.compile(r"<!--\s*docs-test:\s*(skip|excerpt|ci)\s*\((.+?)\)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)")
SHELL, PYTHON = {"bash", "sh", "shell"}, {"python", "py"}
VIEW = re.compile(r"^(\s*)ikp view ", re.MULTILINE)

# `ikp view` serves until stopped: run it in the background, wait for the URL it prints, stop it with SIGTERM
# (a background job of a non-interactive shell ignores SIGINT), and require a clean exit and a viewer URL.
VIEW_CHECK = r"""
ikp_view() {
  local log rc=0; log=$(mktemp)
  ikp view "$@" --no-browser >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1200); do grep -q '^http://' "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  if ! grep -q '^http://127\.0\.0\.1:[0-9]*/#!/viewer?url=' "$log" || [ "$rc" != 0 ]; then
    echo "ikp view $* (exit $rc):" >&2; cat "$log" >&2; return 1
  fi
}
"""


def blocks(page: Path) -> list[dict]:
    """Fenced blocks of a page: language, first line number, text (dedented to the fence), mark, mark arg."""
    out, lines = [], page.read_text().splitlines()
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
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.search(before)
        out.append({"lang": lang, "line": start + 1, "text": "\n".join(body) + "\n",
                    "mark": mark.group(1) if mark else None, "arg": mark.group(2) if mark else None})
        i += 1
    return out


def runnable(page: Path) -> list[dict]:
    return [b for b in blocks(page) if b["lang"] in SHELL | PYTHON and b["mark"] is None]


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def scratch(tmp_path):
    """A working directory with copies of the shipped data and an `ikp` that runs this tree."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=ignore)
    shutil.copytree(ROOT / "tests" / "fixtures", tmp_path / "tests" / "fixtures", ignore=ignore)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    ikp = bin_dir / "ikp"
    ikp.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m host_decode.cli "$@"\n')
    ikp.chmod(0o755)
    for name in ("python", "python3"):  # the interpreter running the tests, whatever PATH says
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT),
               COLUMNS="100", MPLBACKEND="Agg")
    env.pop("DISPLAY", None)
    return tmp_path, env


@pytest.mark.parametrize("page", [pytest.param(p, id=rel(p)) for p in PAGES if runnable(p)])
def test_page_runs_in_order(page, scratch):
    cwd, env = scratch
    for block in runnable(page):
        where = f"{rel(page)}:{block['line']}"
        if block["lang"] in SHELL:
            script = VIEW_CHECK + VIEW.sub(r"\1ikp_view ", block["text"])
            cmd = ["bash", "-euo", "pipefail", "-c", script]
        else:
            cmd = [sys.executable, "-c", block["text"]]
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{where}:\n{block['text']}\n--- stderr ---\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, f"{where}:\n{r.stderr[-3000:]}"


def excerpt_cases():
    return [pytest.param(page, b, id=f"{rel(page)}:{b['line']}")
            for page in PAGES for b in blocks(page) if b["mark"] == "excerpt"]


@pytest.mark.parametrize("page,block", excerpt_cases())
def test_excerpt_is_the_code_that_exists(page, block):
    """An excerpt is a run of consecutive lines of its file (each line compared after dedenting by the
    indentation of the excerpt's first line there), so a change of the file shows up in the docs."""
    source = (ROOT / block["arg"]).read_text().splitlines()
    shown = block["text"].rstrip("\n").splitlines()
    assert shown, f"{rel(page)}:{block['line']}: empty excerpt"
    for start, line in enumerate(source):
        if line.strip() != shown[0].strip():
            continue
        indent = len(line) - len(line.lstrip())
        window = [s[indent:] if s[:indent].strip() == "" else s for s in source[start:start + len(shown)]]
        if [s.rstrip() for s in window] == [s.rstrip() for s in shown]:
            return
    pytest.fail(f"{rel(page)}:{block['line']}: not a contiguous excerpt of {block['arg']}")


def test_every_command_is_in_a_runnable_or_marked_block():
    """No `ikp` command hides in an untagged or indented block, and every mark says why."""
    total = 0
    for page in PAGES:
        fenced = set()
        for b in blocks(page):
            fenced.update(range(b["line"], b["line"] + b["text"].count("\n") + 2))
            has_command = any(ln.strip().startswith(("ikp ", "$ ikp")) for ln in b["text"].splitlines())
            if has_command and b["lang"] not in SHELL:
                assert b["mark"], f"{rel(page)}:{b['line']}: an ikp command in a ```{b['lang']} block (tag it bash)"
            if b["mark"]:
                assert len(b["arg"].strip()) > 5, f"{rel(page)}:{b['line']}: say why the block is marked"
            total += b["lang"] in SHELL | PYTHON and b["mark"] is None
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if n not in fenced and re.match(r"^( {4,}|\t)(\$ )?ikp ", line):
                pytest.fail(f"{rel(page)}:{n}: an indented ikp command outside a fenced block: {line.strip()}")
    assert total >= 20, total  # the pages are executable (a parser that finds no block would pass the rest)


def test_ci_installs_as_the_readme_says():
    """.ci/run runs every line of the README's install block but the torch line (CI reaches PyPI only and
    has torch's CPU wheel on its disk), and the README shows that torch line as a real command."""
    install = next(b for b in blocks(ROOT / "README.md") if b["mark"] == "ci")["text"].splitlines()
    commands = [ln.split("#")[0].strip() for ln in install if ln.strip() and not ln.strip().startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text()
    torch_line = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert torch_line in commands
    assert 'pip install -e ".[dev,docs]"' in commands and "python -m pytest -q" in commands
    assert "mkdocs build --strict" in commands
    for cmd in commands:
        if cmd != torch_line:
            assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
    quick = next(b for b in blocks(ROOT / "README.md") if b["lang"] in SHELL and b["mark"] is None)["text"]
    first = next(ln for ln in quick.splitlines() if ln.startswith("ikp "))
    assert first in ci, "CI runs the quick start's first command"


def test_readme_fits_one_screen_of_reading():
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024


def test_every_page_is_in_the_nav_and_no_page_names_work_history():
    """The site has no orphan page, and docs describe the product: no heading names a session, an issue
    or a round of work."""
    nav = (ROOT / "mkdocs.yml").read_text()
    history = re.compile(r"\b(session|issue|round)s? \d|_s\d+\.json", re.IGNORECASE)
    for page in PAGES:
        name = str(page.relative_to(DOCS if page.is_relative_to(DOCS) else ROOT))
        if page.is_relative_to(DOCS):
            assert f" {name}" in nav, f"{name} is not in mkdocs.yml's nav"
        found = history.search(page.read_text())
        assert not found, f"{name}: names work history ({found.group(0)!r})"


# --- the hooks that generate pages (docs/hooks/) ---------------------------------------------------------


def hook(name: str):
    return load_script(DOCS / "hooks" / f"{name}.py", f"docs_hook_{name}")


def test_cli_reference_lists_every_command():
    from host_decode.cli import build_parser

    cli = hook("cli_reference")
    text = cli.on_page_markdown("# x\n\n<!-- ikp:cli-reference -->\n", None, None, None)
    commands = cli.subcommands(build_parser())
    assert len(commands) >= 10
    sections = dict(re.findall(r"^## ikp (\S+) \{#ikp-\1\}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL))
    assert list(sections) == list(commands)
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings == ["-h", "--help"]:
                continue  # said once for all commands
            for flag in action.option_strings:
                assert f"`{flag}" in sections[name] or f", {flag}" in sections[name], (name, flag)
            if not action.option_strings:
                assert f"| `{action.metavar or action.dest}" in sections[name], (name, action.dest)
    assert "<!-- ikp:cli-reference -->" not in text


def test_api_directives_resolve():
    pytest.importorskip("griffe")
    api = hook("api_reference")
    import host_decode
    import ikp_cute

    for package in (host_decode, ikp_cute):
        paths = dict(api.public_paths(package.__name__))
        assert list(paths) == list(package.__all__)
        for name, path in paths.items():
            assert path.startswith(package.__name__ + "."), (name, path)
    assert api.find_definition("ikp_cute", "Ring").endswith(".Ring")
    with pytest.raises(ValueError, match="no_such_name: 0 definitions"):
        api.find_definition("ikp_cute", "no_such_name")
    for page in PAGES:
        for m in api.DIRECTIVE.finditer(page.read_text()):
            assert api.render(m.group(1), m.group(2), m.group(3).split()).startswith(":::")


def test_results_render():
    """Every results directive of the site renders from its file; a wrong kind or path is an error."""
    res = hook("results")
    found = 0
    for page in PAGES:
        for m in res.DIRECTIVE.finditer(page.read_text()):
            table = res.render(m.group(1), m.group(2))
            assert table.count("\n|") >= 3 and m.group(2) in table
            found += 1
    assert found >= 8
    with pytest.raises(ValueError, match="unknown kind"):
        res.render("nope", "docs/device_results/x.json")
    with pytest.raises(ValueError, match="no_such.json"):
        res.render("overhead", "docs/device_results/no_such.json")


def test_docstring_layout_is_kept():
    pytest.importorskip("griffe")
    layout = hook("docstrings").layout
    text = textwrap.dedent("""\
        One line of ``prose``.

        mode:     how records reach the buffer
                  (continued under it)
        """)
    out = layout(text)
    assert out.startswith("One line of `prose`.")
    assert "```text\nmode:     how records reach the buffer\n          (continued under it)\n```" in out
