"""Data safety of every `ikp` command (host_decode.core.files): never over an input or its sidecar,
outputs complete or absent, -f/--force to replace, a missing output directory is an error.
Each case was reproduced on the shipped data before the fix (docs/cli_safety.md)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from host_decode.cli import main
from host_decode.core.files import TEMP_PREFIX, OutputError, OutputFiles

ROOT = Path(__file__).resolve().parents[4]
FIX = ROOT / "tests" / "fixtures"


@pytest.fixture
def data(tmp_path):
    """Copies of shipped inputs (tests must never touch the repository's files)."""
    d = tmp_path / "in"
    d.mkdir()
    for name in ("capture.npy", "capture.json"):
        shutil.copy(ROOT / "examples" / "basic" / name, d / name)
    for name in ("launch_0.npy", "launch_0.json", "launch_1.npy", "launch_1.json", "torch_trace.json.gz"):
        shutil.copy(ROOT / "examples" / "insight" / name, d / name)
    for name in ("tiles_real_ncu.cubin", "tiles_real_ncu.csv", "tiles_real_ncu.map.json"):
        shutil.copy(FIX / "pc" / name, d / name)
    return d


def digest(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def no_temporaries(*dirs: Path) -> bool:
    return not any(p.name.startswith(TEMP_PREFIX) for d in dirs for p in d.iterdir())


def over_input_cases(d: Path) -> list:
    cap, side = str(d / "capture.npy"), str(d / "capture.json")
    l0, l1 = str(d / "launch_0.npy"), str(d / "launch_1.npy")
    torch = str(d / "torch_trace.json.gz")
    cubin, csv, cmap = (
        str(d / "tiles_real_ncu.cubin"),
        str(d / "tiles_real_ncu.csv"),
        str(d / "tiles_real_ncu.map.json"),
    )
    return [
        ["stats", cap, "-o", cap],
        ["stats", cap, "-o", side],
        ["report", cap, "-o", cap],
        ["report", cap, "-o", side],
        ["decode", cap, "-o", side],
        ["decode", cap, "-o", str(d / "t.pftrace"), "--spans-csv", cap],
        ["decode", cap, "--loss-json", side],
        ["decode", cap, "--spans-csv", side],
        ["merge", l0, l1, "-o", str(d / "launch_1.json")],
        ["merge", str(d), "-o", str(d / "launch_0.json")],
        ["merge", l0, "--torch", torch, "-o", torch],
        ["kernels", torch, "-o", torch],
        ["kernels", torch, "-o", torch + ".ikpcache.npz"],
        ["kernels", torch, "--merge", l0, "-o", torch],
        ["pc2region", cubin, "-o", cubin],
        ["join", "--map", cmap, "--ncu", csv, "-o", cmap],
        ["join", "--map", cmap, "--ncu", csv, "-o", csv],
        ["plot", cap, "-o", cap],
        ["diff", l0, l1, "-o", l1],
    ]


def test_every_command_refuses_to_write_over_its_input(data, capsys):
    before = digest(data)
    for argv in over_input_cases(data):
        for force in ([], ["-f"]):
            assert main(argv + force) == 2, argv + force
            err = capsys.readouterr().err
            assert "refusing to write over" in err and err.count("\n") == 1, (argv, err)
    assert digest(data) == before and no_temporaries(data)


def test_links_to_an_input_are_refused(data, capsys):
    cap = data / "capture.npy"
    (data / "link.json").symlink_to(data / "capture.json")
    os.link(cap, data / "hard.npy")
    before = digest(data)
    assert main(["stats", str(cap), "-o", str(data / "link.json"), "-f"]) == 2
    assert main(["stats", str(cap), "-o", str(data / "hard.npy"), "-f"]) == 2  # same inode, other name
    assert capsys.readouterr().err.count("refusing to write over") == 2
    assert digest(data) == before


def test_existing_output_needs_force_and_missing_directory_is_an_error(data, tmp_path, capsys):
    cap = str(data / "capture.npy")
    out = tmp_path / "s.json"
    assert main(["stats", cap, "-o", str(out)]) == 0
    first = out.read_text()
    out.write_text("previous")
    assert main(["stats", cap, "-o", str(out)]) == 2
    assert "exists; use -f/--force to replace it" in capsys.readouterr().err
    assert out.read_text() == "previous"
    assert main(["stats", cap, "-o", str(out), "--force"]) == 0 and out.read_text() == first
    missing = tmp_path / "no" / "such"
    for argv in (
        ["stats", cap, "-o", str(missing / "s.json")],
        ["decode", cap, "-o", str(missing / "t.pftrace")],
        ["report", cap, "-o", str(missing / "r.html")],
        ["plot", cap, "-o", str(missing / "png")],
        ["merge", cap, "-o", str(missing / "m.json")],
    ):
        assert main(argv) == 2, argv
        assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def _make_unwritable(d: Path) -> bool:
    """chmod 555, and as root (who ignores modes) the immutable attribute; True when it took."""
    d.chmod(0o555)
    probe = d / "probe"
    try:
        probe.touch()
    except OSError:
        return True
    probe.unlink()
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0:
        try:
            probe.touch()
        except OSError:
            return True
        probe.unlink()
    return False


def _make_writable(d: Path) -> None:
    if shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)
    d.chmod(0o755)


def test_read_only_output_directory(data, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    if not _make_unwritable(ro):
        pytest.skip("cannot make a directory read-only here")
    try:
        cap = str(data / "capture.npy")
        for argv in (
            ["decode", cap, "-o", str(ro / "t.pftrace")],
            ["stats", cap, "-o", str(ro / "s.json")],
            ["plot", cap, "-o", str(ro / "png")],
            ["report", cap, "-o", str(ro / "r.html")],
        ):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert str(ro) in err and "Traceback" not in err, err
        assert list(ro.iterdir()) == []
    finally:
        _make_writable(ro)


def _half_then_enospc(path, text):
    Path(path).write_bytes(text[: len(text) // 2].encode() if isinstance(text, str) else text[: len(text) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("case", ["decode-json", "decode-pftrace", "spans-csv", "stats", "merge", "plot", "report"])
def test_failed_write_leaves_no_partial_file_and_keeps_the_previous_output(data, tmp_path, monkeypatch, capsys, case):
    import host_decode.reports.html as html
    import host_decode.reports.merged as merged
    import host_decode.reports.plots as plots
    import host_decode.writers as writers
    import host_decode.writers.spans_csv as spans_csv

    cap, l0, l1 = str(data / "capture.npy"), str(data / "launch_0.npy"), str(data / "launch_1.npy")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if case.startswith("decode"):
        out = out_dir / ("t.json" if case == "decode-json" else "t.pftrace")
        argv = ["decode", cap, "-o", str(out), "-f", "-q"]
        monkeypatch.setattr(
            writers, "write_trace", lambda trace, path, *a, **k: _half_then_enospc(path, '{"traceEvents":[' * 50)
        )
    elif case == "spans-csv":
        out = out_dir / "spans.csv"
        argv = ["decode", cap, "--spans-csv", str(out), "-f", "-q"]
        monkeypatch.setattr(spans_csv, "write_spans_csv", lambda trace, path: _half_then_enospc(path, "1,2,3\n" * 50))
    elif case == "stats":
        out = out_dir / "s.json"
        argv = ["stats", cap, "-o", str(out), "-f", "--format", "json"]
        real = Path.write_text
        monkeypatch.setattr(
            Path,
            "write_text",
            lambda self, text, *a, **k: (
                _half_then_enospc(self, text) if self.name.startswith(TEMP_PREFIX) else real(self, text, *a, **k)
            ),
        )
    elif case == "merge":
        out = out_dir / "m.json"
        argv = ["merge", l0, l1, "-o", str(out), "-f"]
        monkeypatch.setattr(merged, "write_session", lambda parts, path, **k: _half_then_enospc(path, "[" * 99))
    elif case == "report":
        out = out_dir / "r.html"
        argv = ["report", cap, "-o", str(out), "-f"]
        monkeypatch.setattr(html, "write_report", lambda path, trace, **k: _half_then_enospc(path, "<html>" * 20))
    else:  # plot: two PNGs written, the third fails
        out = out_dir / "png"
        out.mkdir()
        for name in ("histograms.png", "gantt.png", "overlap.png"):
            (out / name).write_text("previous")
        argv = ["plot", l0, l1, "-o", str(out), "-f"]
        monkeypatch.setattr(plots, "plot_overlap", lambda trace, path, **k: _half_then_enospc(path, b"\x89PNG" * 10))
    if case != "plot":
        out.write_text("previous")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "untouched" in err and err.count("\n") == 1, err
    if case == "plot":
        assert sorted(p.read_text() for p in out.iterdir()) == ["previous"] * 3
        assert no_temporaries(out)
    else:
        assert out.read_text() == "previous"
    assert no_temporaries(out_dir)


def test_plot_builds_a_new_directory_whole(data, tmp_path, monkeypatch):
    import host_decode.reports.plots as plots

    out = tmp_path / "png"
    monkeypatch.setattr(plots, "plot_overlap", lambda trace, path, **k: _half_then_enospc(path, b"x" * 10))
    assert main(["plot", str(data / "capture.npy"), "-o", str(out)]) == 2
    assert not out.exists() and no_temporaries(tmp_path)
    monkeypatch.undo()
    assert main(["plot", str(data / "capture.npy"), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["gantt.png", "histograms.png", "overlap.png"]


def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(data, tmp_path, monkeypatch, capsys):
    import host_decode.load.inputs as inputs

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(inputs, "load_capture", interrupted)
    out = tmp_path / "t.pftrace"
    assert main(["decode", str(data / "capture.npy"), "-o", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "ikp decode: interrupted (no output written)"
    assert not out.exists() and no_temporaries(tmp_path)


def test_output_files_api_for_new_commands(tmp_path):
    """The API other commands use (host_decode.core.files): check early, temp in place, all or nothing."""
    src = tmp_path / "a.npy"
    src.write_bytes(b"x")
    with pytest.raises(OutputError, match="sidecar"):
        OutputFiles([src]).add(tmp_path / "a.json")
    with OutputFiles([src]) as out:
        t1, t2 = out.add(tmp_path / "one.txt"), out.add(tmp_path / "two.json.gz")
        assert t1.parent == tmp_path and t2.name.endswith("-two.json.gz") and t1.exists()
        t1.write_text("1")
        t2.write_text("2")
        assert not (tmp_path / "one.txt").exists()  # nothing in place before the end
    assert (tmp_path / "one.txt").read_text() == "1" and (tmp_path / "two.json.gz").read_text() == "2"
    with pytest.raises(RuntimeError):
        with OutputFiles([src], force=True) as out:
            out.add(tmp_path / "one.txt").write_text("new")
            raise RuntimeError("boom")
    assert (tmp_path / "one.txt").read_text() == "1" and no_temporaries(tmp_path)
    with pytest.raises(OutputError, match="named twice"):
        with OutputFiles(force=True) as out:
            out.add(tmp_path / "x")
            out.add(tmp_path / "x")


def test_save_capture_is_atomic(data, monkeypatch):
    """host_decode.load.capture.save_capture: an interrupted save leaves the previous capture whole."""
    import numpy as np

    from host_decode.load import capture

    cap = data / "capture.npy"
    before = digest(data)
    buf = np.load(cap)

    def half(f, arr, allow_pickle=False):
        f.write(b"\x93NUMPY" + b"\x00" * 20)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(capture.np, "save", half)
    with pytest.raises(OutputError, match="No space left"):
        capture.save_capture(cap, buf, names={"events": {"0": "x"}})
    assert digest(data) == before and no_temporaries(data)
    monkeypatch.undo()
    capture.save_capture(data / "again.npy", buf, names={"events": {"0": "x"}})
    assert np.array_equal(np.load(data / "again.npy"), buf) and (data / "again.json").exists()


def test_sidecar_of_a_capture_with_any_suffix_is_protected(data, capsys):
    """load.sidecar.read_sidecar reads NAME.json beside any capture (cap.bin, CAP.NPY): that file is an input too."""
    for capture, sidecar in (("cap.bin", "cap.json"), ("CAP2.NPY", "CAP2.json")):
        shutil.copy(data / "capture.npy", data / capture)
        shutil.copy(data / "capture.json", data / sidecar)
    before = digest(data)
    for argv in (["decode", str(data / "cap.bin"), "-o", str(data / "cap.json")],
                 ["stats", str(data / "CAP2.NPY"), "-o", str(data / "CAP2.json")]):
        assert main(argv + ["-f"]) == 2, argv
        err = capsys.readouterr().err
        assert "refusing to write over the sidecar" in err and err.count("\n") == 1, err
    assert digest(data) == before and no_temporaries(data)


def test_input_through_a_symlink_protects_the_real_sidecar(data, tmp_path, capsys):
    link = tmp_path / "link.npy"
    link.symlink_to(data / "capture.npy")
    before = digest(data)
    assert main(["decode", str(link), "-o", str(data / "capture.json"), "-f", "-q"]) == 2
    assert "refusing to write over the sidecar" in capsys.readouterr().err
    assert digest(data) == before and no_temporaries(data)


def test_sigterm_is_like_ctrl_c_and_leaves_nothing(data, tmp_path):
    """SIGTERM (timeout, Slurm, systemd) in the middle of `ikp plot`: exit 130, one line, no temporary."""
    import sys

    script = (
        "import os, signal, sys, time\n"
        "import host_decode.reports.plots as plots\n"
        "from host_decode.cli import main\n"
        "def killed(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "plots.plot_overlap = killed\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "png"
    run = subprocess.run([sys.executable, "-c", script, "plot", str(data / "capture.npy"), "-o", str(out)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 130, (run.returncode, run.stderr)  # not -15: killed before cleaning up
    assert run.stderr.strip() == "ikp plot: interrupted (no output written)"
    assert not out.exists() and no_temporaries(tmp_path)


def test_plot_onto_an_existing_file_is_refused_before_any_work(data, tmp_path, monkeypatch, capsys):
    import host_decode.analysis.sessions as sessions

    def no_work(*a, **k):
        raise AssertionError("the output should have been refused before loading")

    monkeypatch.setattr(sessions, "load_trace", no_work)
    out = tmp_path / "notadir"
    out.write_text("previous")
    for force in ([], ["-f"]):
        assert main(["plot", str(data / "capture.npy"), "-o", str(out)] + force) == 2
        err = capsys.readouterr().err
        assert f"{out}: exists and is not a directory" in err and TEMP_PREFIX not in err and err.count("\n") == 1
    assert out.read_text() == "previous" and no_temporaries(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_input_is_read_whole(data, tmp_path):
    """`--names <(...)`: the check for a capture's sidecar used to read the first bytes of every input,
    a pipe's included, so the names file lost them (and a pipe with no writer would block there)."""
    import json
    import threading

    fifo = tmp_path / "names.pipe"
    os.mkfifo(fifo)
    names = json.dumps({"events": {"0": "piped_region"}})

    def write() -> None:
        with open(fifo, "w") as f:
            f.write(names)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = tmp_path / "out.json"
    assert main(["decode", str(data / "capture.npy"), "--names", str(fifo), "-o", str(out), "-q"]) == 0
    writer.join(5)
    assert "piped_region" in out.read_text()


def test_sigterm_guard_does_not_chain_onto_errors_off_the_main_thread():
    import threading

    from host_decode.core.files import terminate_as_interrupt

    seen = []

    def run() -> None:
        try:
            with terminate_as_interrupt():
                raise RuntimeError("the command's own error")
        except RuntimeError as e:
            seen.append(e.__context__)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [None]
