"""No internal or library chatter on a terminal unless -v: what a command prints is its own result, its
`wrote` lines and its `next:` hint; the writer's phase timings, temporary file names and library warnings
appear only with -v/--verbose. Nothing is left in the temporary folder."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from host_decode.cli import main

ROOT = Path(__file__).resolve().parents[4]
CAPTURE = ROOT / "examples" / "basic" / "capture.npy"


def on_a_terminal(argv: list[str], cwd: Path) -> str:
    """What `ikp argv` prints when stdout and stderr are a terminal (a pty), as one text."""
    leader, follower = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from host_decode.cli import main; sys.exit(main())",
                             *argv], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower side closed: the process ended
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_decode_on_a_terminal_prints_no_writer_internals(tmp_path):
    text = on_a_terminal(["decode", str(CAPTURE), "-o", "b.pftrace"], tmp_path)
    assert "wrote b.pftrace" in text and "next:" in text
    assert "perfetto:" not in text and ".ikp-tmp-" not in text, text
    text = on_a_terminal(["decode", str(CAPTURE), "-o", "c.pftrace", "-v"], tmp_path)
    assert "perfetto:" in text  # asked for: the phase timings


NOISY_PLOT = """
import sys, warnings
from host_decode.cli import main
from host_decode.reports import plots
real = plots.plot_overlap
def noisy(*args, **kwargs):
    warnings.warn("a library's internal remark", UserWarning)
    return real(*args, **kwargs)
plots.plot_overlap = noisy
sys.exit(main(sys.argv[1:]))
"""


def test_library_warnings_show_only_with_verbose(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for extra, shown in (([], False), (["-v"], True)):
        out = tmp_path / f"p{len(extra)}"
        proc = subprocess.run([sys.executable, "-c", NOISY_PLOT, "plot", str(CAPTURE), "-o", str(out), *extra],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert ("internal remark" in proc.stderr) == shown, proc.stderr


def test_plot_legends_have_fixed_places(tmp_path, monkeypatch):
    """matplotlib's loc="best" searches every drawn point for a free corner (and warns it is slow on big
    sessions): every legend of the plots is placed explicitly."""
    import matplotlib.legend

    def searched(*args, **kwargs):
        raise AssertionError("a legend searched for its place (loc='best')")

    monkeypatch.setattr(matplotlib.legend.Legend, "_find_best_position", searched)
    assert main(["plot", str(ROOT / "examples" / "insight" / "launch_0.npy"), "-o", str(tmp_path / "p")]) == 0


def test_keep_options_leaves_no_dump_folder(tmp_path):
    pytest.importorskip("cutlass")
    code = ("from ikp_cute.testing.sass import keep_options; import os, re; "
            "d = re.search(r'--dump-dir=(\\S+)', keep_options()).group(1); assert os.path.isdir(d)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), CUTE_DSL_ARCH="sm_90a")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("ikp_cute_dump_")]
