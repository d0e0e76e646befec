"""`ikp record -- CMD` (host_decode/cli/commands/record.py, ikp_cute/record/child.py): bad options are usage
errors naming the bad part before anything runs; CMD runs as a child whose Python starts the recorder before
the program (after the site's own sitecustomize), and the folder appears whole; Ctrl-C and SIGTERM leave the
launches recorded so far, in complete files only. CPU only: the program runs as a dry run."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time

import pytest

from host_decode.cli import main
from tests.support.record_cli import TINY, ikp_record, start_ikp_record

# the programs run in child processes: this one must not import cutlass (its DSL would take no arch)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")


@pytest.mark.parametrize("argv, says", [
    (["--launches", "flash=x", "--", "python", "x.py"], "in item 'flash=x', 'x' is not a launch selection"),
    (["--launches", "1,2", "--", "python", "x.py"], "two defaults"),
    (["--kernels", "(oops", "--", "python", "x.py"], "--kernels '(oops' is not a regular expression"),
    (["--pool-size", "lots", "--", "python", "x.py"], "'lots' is not a size"),
    (["--level", "everything", "--", "python", "x.py"], "invalid choice: 'everything'"),
    (["--arch", "sm_90a", "--", "python", "x.py"], "--arch is the architecture of a --dry-run"),
    (["--"], "give the program to run after --"),
    ([], "give the program to run after --"),
    (["-o", "no/such/dir/rec", "--", "python", "x.py"], "does not exist"),
])
def test_bad_options_are_usage_errors_naming_the_part(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        code = main(["record", *argv])
        raise SystemExit(code)
    assert e.value.code == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_an_existing_folder_is_refused_before_the_program_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rec").mkdir()
    assert main(["record", "-o", "rec", "--", sys.executable, "-c", "open('ran', 'w')"]) == 2
    assert "rec: exists; use -f/--force" in capsys.readouterr().err and not (tmp_path / "ran").exists()


def test_the_child_records_and_the_folder_appears_whole(tmp_path):
    """A dry run of a tiny program: the recorder starts in the program's process after the site's own
    sitecustomize (which runs: it leaves a file), launches are intercepted and counted, the folder is
    complete, and nothing temporary is left (no staging folder, no generated site directory)."""
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['TMPDIR'], '..', 'site_ran').write_text('yes')\n")
    r = ikp_record(tmp_path, "-o", "rec", "--dry-run", "--launches", "tensorptr=every=2,default=none", "--",
                   sys.executable, TINY, "--launches", "3", site_dirs=[user_site])
    assert r.returncode == 0, r.stderr
    assert "tiny: 3 launches" in r.stdout and (tmp_path / "site_ran").read_text() == "yes"
    out = tmp_path / "rec"
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "record.json", "summary.json", "summary.txt"]
    m = json.loads((out / "record.json").read_text())
    (kernel,) = m["kernels"]
    assert kernel["traced"] and kernel["host_launches"] == 3 and kernel["selection"] == "every=2"
    assert kernel["kernel_id"] == 0  # the id the tracer took from the (fake) pool for this compile
    assert m["dry_run"]["launches_skipped"] == 3 and m["status"] == "complete"
    assert "3 launches intercepted and skipped" in r.stdout and "pipelines: ring, side_named" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec", "site_ran", "tmp", "user_site"]
    assert not list((tmp_path / "tmp").glob("ikp-record-site-*"))  # the generated sitecustomize's folder is gone


def test_nothing_recorded_writes_nothing(tmp_path):
    r = ikp_record(tmp_path, "-o", "rec", "--", sys.executable, "-c", "print('hello')")
    assert r.returncode == 2 and "hello" in r.stdout
    assert "nothing recorded: no process of CMD compiled a CuTe DSL kernel" in r.stderr
    assert not (tmp_path / "rec").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ikp")]


def wait_for(proc, text: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"ended before {text!r}: {proc.stderr.read()}")
    raise AssertionError(f"no {text!r} within {timeout} s")


def complete_files_only(folder) -> None:
    for path in folder.rglob("*"):
        assert not path.name.startswith("."), path  # no temporary
        if path.suffix == ".json":
            json.loads(path.read_text())


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupting_leaves_what_was_recorded_in_complete_files(tmp_path, how):
    """Ctrl-C at the terminal (SIGINT to the whole process group) or SIGTERM to `ikp record`: the program is
    ended, it writes what it recorded so far, and the folder is finished from it."""
    proc = start_ikp_record(tmp_path, "-o", "rec", "--dry-run", "--", sys.executable, TINY, "--launches", "2",
                            "--wait", "120")
    try:
        wait_for(proc, "waiting")
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    sig = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
    assert proc.returncode == 128 + sig, err
    out = tmp_path / "rec"
    complete_files_only(out)
    m = json.loads((out / "record.json").read_text())
    assert m["status"] == "interrupted" and m["signal"] == sig.name
    assert m["kernels"][0]["host_launches"] == 2
    assert f"(ended by {sig.name})" in (out / "summary.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec", "tmp"]
