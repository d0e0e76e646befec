"""What the product tells people to run, run as printed, in order, in one folder: every command's
`ikp COMMAND --help` example (in workflow order), every `next:` hint's commands (written between
backticks), and the big-capture benchmark the docs name. Two that write the same file fail (outputs are
never replaced without -f), so a hint names an output that does not exist yet; no hint sends a trace to
ui.perfetto.dev: `ikp view` serves it from this machine."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9_]*(\.[a-z0-9.]+)?\b|\.\.\.|\bA B\b")
COMMANDS_IN_HINT = re.compile(r"`(ikp [^`]+)`")


@pytest.fixture
def scratch(tmp_path):
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=ignore)
    shutil.copytree(ROOT / "tests" / "fixtures", tmp_path / "tests" / "fixtures", ignore=ignore)
    return tmp_path


def ikp(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    env.pop("DISPLAY", None)
    if argv[0] == "view":  # serves until stopped: it must print its URL, then stop cleanly
        proc = subprocess.Popen([sys.executable, "-m", "host_decode.cli", *argv, "--no-browser"], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        url = proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(argv, proc.returncode if url.startswith("http://") else 2, url + out, err)
    return subprocess.run([sys.executable, "-m", "host_decode.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def commands_of_example(text: str) -> list[list[str]]:
    """The runnable command lines of an EXAMPLE: continuations joined, comments and notes dropped, synopses
    (UPPERCASE placeholders) and lines marked `# on a GPU` left out (this test runs on machines without one)."""
    import shlex

    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        if line.rstrip().endswith("# on a GPU"):  # a GPU-only line (ikp record running a CUDA program)
            continue
        line = re.sub(r"\s+(#|\().*$", "", line.strip())
        if line.startswith("ikp ") and not PLACEHOLDER.search(line[4:]):
            out.append(shlex.split(line)[1:])
    return out


def test_every_example_runs_in_workflow_order(scratch):
    from host_decode.cli import WORKFLOW, _modules

    ran = 0
    for module in sorted(_modules(), key=lambda m: WORKFLOW.index(m.NAME) if m.NAME in WORKFLOW else 99):
        for argv in commands_of_example(getattr(module, "EXAMPLE", "")):
            r = ikp(argv, scratch)
            assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (argv, r.stderr[-2000:])
            assert "exists; use -f" not in r.stderr, (argv, r.stderr)
            ran += 1
    assert ran >= 10


HINTED = [  # commands whose next: hints are followed, in this order, in one folder
    ["decode", "examples/basic/capture.npy"],
    ["decode", "examples/basic/capture.npy", "-o", "basic.pftrace"],
    ["stats", "examples/basic/capture.npy"],
    ["waits", "examples/pipelines/fa4_sm90_signals.npy"],
    ["pc2region", "tests/fixtures/pc/tiles_real_ncu.cubin", "-o", "map.json"],
    ["join", "--map", "map.json", "--ncu", "tests/fixtures/pc/tiles_real_ncu.csv"],
    ["merge", "examples/insight/launch_0.npy", "examples/insight/launch_1.npy", "-o", "session.json.gz"],
    ["kernels", "examples/insight/torch_trace.json.gz", "--no-cache"],
    ["plot", "examples/insight/launch_0.npy", "-o", "plots"],
    ["diff", "examples/insight/launch_0.npy", "examples/insight/launch_1.npy"],
    ["report", "examples/basic/capture.npy", "-o", "basic.html"],
    ["waits", "tests/fixtures/flag_ranks"],
    ["merge", "tests/fixtures/flag_ranks", "-o", "ranks.pftrace"],
    ["export", "tests/fixtures/flag_ranks", "-o", "tables"],
]


def test_every_next_hint_runs_as_printed(scratch):
    for name in ("report.html", "capture.html", "waits.html", "waits.pftrace", "fa4_sm90_signals.html",
                 "fa4_sm90_signals.pftrace", "merged.json.gz", "flag_ranks.pftrace"):
        (scratch / name).write_text("a file the user already has")
    followed = 0
    for argv in HINTED:
        r = ikp(argv, scratch)
        assert r.returncode == 0, (argv, r.stderr[-2000:])
        hints = [line for line in r.stderr.splitlines() if line.startswith("next: ")]
        assert len(hints) == 1, (argv, r.stderr)
        assert "ui.perfetto.dev" not in hints[0]
        for command in COMMANDS_IN_HINT.findall(hints[0]):
            if PLACEHOLDER.search(command[4:]):
                continue
            import shlex

            h = ikp(shlex.split(command)[1:], scratch)
            assert h.returncode == 0, (argv, command, h.stderr[-2000:])
            followed += 1
    assert followed >= 10


def test_trace_hints_point_at_ikp_view(scratch):
    for argv in (["decode", "examples/basic/capture.npy", "-o", "t.pftrace"],
                 ["merge", "examples/insight/launch_0.npy", "-o", "t.json"]):
        hint = next(line for line in ikp(argv, scratch).stderr.splitlines() if line.startswith("next: "))
        assert "`ikp view t." in hint, hint


def test_bigcap_benchmark_runs_two_sizes_in_one_folder(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bigcap_bench.py"), "--records", "2e4",
                        "--records", "3e4", "--repeat", "1", "--no-warpscope", "--json-out", str(tmp_path / "b.json")],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert importlib.import_module("json").loads((tmp_path / "b.json").read_text())["sizes"][1]["records"] == 30000
