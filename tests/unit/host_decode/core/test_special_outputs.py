"""`-f/--force` replaces regular files only: never a device, a FIFO or a socket (host_decode.core.files).

Outputs are regular files (or the folder `ikp plot` writes); a special file named as an output is refused,
with or without -f, by one line that says what it is, and it is left as it was."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from host_decode.cli import main
from host_decode.core.files import OutputError, OutputFiles

ROOT = Path(__file__).resolve().parents[4]
CAPTURE = ROOT / "examples" / "basic" / "capture.npy"


@pytest.fixture
def capture(tmp_path):
    for suffix in (".npy", ".json"):
        shutil.copy(CAPTURE.with_suffix(suffix), tmp_path / f"capture{suffix}")
    return tmp_path / "capture.npy"


def special_files(d: Path) -> dict:
    """{kind: path} of every special file this machine lets us make in `d`."""
    made = {}
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo")
        made["FIFO"] = d / "fifo"
    try:
        os.mknod(d / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made["character device"] = d / "null"
    except (PermissionError, AttributeError):
        pass
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(d / "sock"))
        made["socket"] = d / "sock"
    except OSError:
        pass
    finally:
        sock.close()
    return made


def kind_of(p: Path) -> int:
    return stat.S_IFMT(os.lstat(p).st_mode)


@pytest.mark.parametrize("force", [False, True])
def test_force_never_replaces_a_special_file(capture, tmp_path, capsys, force):
    made = special_files(tmp_path)
    assert made, "no special file could be made here"
    for kind, path in made.items():
        before = kind_of(path)
        argv = ["stats", str(capture), "-o", str(path)] + (["-f"] if force else [])
        assert main(argv) == 2, kind
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}: is a {kind}" in err and "regular files" in err, err
        assert "use -f" not in err  # -f would not help: it must not be suggested
        assert kind_of(path) == before, f"{kind} replaced"


def test_symlink_to_a_device_is_refused_too(capture, tmp_path, capsys):
    link = tmp_path / "out.json"
    link.symlink_to(os.devnull)
    assert main(["stats", str(capture), "-o", str(link), "-f"]) == 2
    assert "is a character device" in capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == os.devnull


def test_api_refuses_special_files_for_files_and_folders(tmp_path):
    made = special_files(tmp_path)
    for path in made.values():
        for add in (lambda out, p: out.add(p), lambda out, p: out.add_new_dir(p)):
            with pytest.raises(OutputError, match="regular files"):
                with OutputFiles([], force=True) as out:
                    add(out, path)
