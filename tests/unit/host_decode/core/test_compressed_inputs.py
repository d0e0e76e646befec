"""Compressed inputs are read through one bounded reader (host_decode/core/compressed.py): a gzip bomb is
refused at once by every command that reads gzip, with one line naming the file, the bound and the flag
that raises it; raising the bound reads it in linear time; gzip damage is named; no other module inflates."""

from __future__ import annotations

import ast
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from host_decode.core import compressed
from host_decode.core.errors import DecodeError

ROOT = Path(__file__).resolve().parents[4]
TORCH = ROOT / "examples" / "insight" / "torch_trace.json.gz"
WHITESPACE_MIB = 80  # past RATIO_FLOOR, and far past RATIO_GUARD times its compressed size


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """A ~80 KB .json.gz of a Chrome trace whose events array is 80 MiB of whitespace."""
    path = tmp_path_factory.mktemp("bomb") / "trace.json.gz"
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(WHITESPACE_MIB):
            f.write(b" " * (1 << 20))
        f.write(b"]}")
    assert path.stat().st_size < 200_000
    return path


def ikp(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "host_decode.cli", *map(str, argv)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, cwd=ROOT, timeout=timeout)


def test_a_gzip_bomb_is_refused_by_every_reader(bomb, tmp_path):
    capture = ROOT / "examples" / "insight" / "launch_0.npy"
    cupti = tmp_path / "pc.json.gz"
    shutil.copy(bomb, cupti)
    commands = [  # (argv, whether it must read the whole input: else a look at its head may refuse it)
        (["kernels", bomb, "--no-cache"], True),
        (["merge", capture, "--torch", bomb, "-o", tmp_path / "m.json"], True),
        (["view", bomb, "--no-browser", "--port", "0"], True),
        (["join", "--map", ROOT / "tests/fixtures/pc/tiles_real_ncu.map.json", "--cupti", cupti], True),
        (["decode", bomb], False),  # sniffed from its first 64 KiB: a Chrome trace, not one ikp decodes
    ]
    for argv, whole in commands:
        r = ikp(*argv, timeout=60)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2, (argv[0], r.returncode, r.stderr[-2000:])
        assert len(lines) == 1 and "Traceback" not in r.stderr and ".json.gz: " in lines[0], (argv, r.stderr[-2000:])
        if whole:
            assert lines[0].count("--max-decompressed") == 1 and "gzip bomb" in lines[0], (argv[0], lines)
    assert not (tmp_path / "m.json").exists()


def test_the_size_bound_names_its_flag_and_raising_it_reads_the_input(bomb):
    r = ikp("kernels", TORCH, "--no-cache", "--max-decompressed", "1k")
    assert r.returncode == 2 and "decompresses to more than 1 KiB (--max-decompressed SIZE raises" in r.stderr
    r = ikp("kernels", bomb, "--no-cache", "--format", "json", "--max-decompressed", "1G")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["events"] == 0


def test_the_reader_reads_members_and_names_damage(tmp_path):
    data = bytes(range(256)) * 5000
    one = tmp_path / "one.gz"
    one.write_bytes(gzip.compress(data) + gzip.compress(b"tail") + b"\0" * 8)
    assert compressed.read_input(one) == data + b"tail"
    assert compressed.read_input(one, 10) == data[:10]
    plain = tmp_path / "plain.json"
    plain.write_bytes(b"{}")
    assert compressed.read_input(plain) == b"{}"
    for name, raw in (("cut.gz", gzip.compress(data)[:-50]), ("junk.gz", gzip.compress(b"x") + b"junk!"),
                      ("head.gz", b"\x1f\x8b\x07" + gzip.compress(data)[3:])):
        p = tmp_path / name
        p.write_bytes(raw)
        with pytest.raises(DecodeError, match="not a readable gzip file") as e:
            compressed.read_input(p)
        assert str(p) in str(e.value)
    with compressed.read_limits(max_seconds=0.0):
        with pytest.raises(DecodeError, match="--read-timeout"):
            compressed.read_input(one)


def test_no_other_module_inflates():
    """gzip.open for reading, gzip.decompress, zlib.decompress(obj), GzipFile: only core/compressed.py."""
    found = []
    for path in (ROOT / "host_decode").rglob("*.py"):
        if path.name == "compressed.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = getattr(node.func.value, "id", "")
            name = node.func.attr
            writing = any(isinstance(a, ast.Constant) and str(a.value).startswith(("w", "a", "x"))
                          for a in node.args[1:2])
            if (owner, name) in (("gzip", "decompress"), ("zlib", "decompress"), ("zlib", "decompressobj"),
                                 ("gzip", "GzipFile")) or (owner, name) == ("gzip", "open") and not writing:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
