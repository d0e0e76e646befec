"""Running `ikp record` in a subprocess for tests: this tree's CLI and packages (ikp_cute.pool, the real
recording pool: a dry run records into ``Pool.fake``), CuTe DSL compiling for sm_90a."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "support" / "programs" / "tiny.py"


def record_env(tmp_path: Path, *site_dirs: Path, own_tmp: bool = True) -> dict:
    """own_tmp: TMPDIR in tmp_path/tmp (to see what is left there; compile caches start cold in it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, site_dirs)]),
               CUTE_DSL_ARCH="sm_90a", COLUMNS="120")
    if own_tmp:
        env["TMPDIR"] = str(tmp_path / "tmp")
        (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def ikp_record(tmp_path: Path, *argv, site_dirs=(), timeout: int = 600, own_tmp: bool = True,
               **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "host_decode.cli", "record", *map(str, argv)], cwd=tmp_path,
                          env=record_env(tmp_path, *site_dirs, own_tmp=own_tmp), capture_output=True, text=True,
                          timeout=timeout, **popen)


def start_ikp_record(tmp_path: Path, *argv, **popen) -> subprocess.Popen:
    """In a session of its own (its process group is what a terminal's Ctrl-C reaches)."""
    return subprocess.Popen([sys.executable, "-m", "host_decode.cli", "record", *map(str, argv)], cwd=tmp_path,
                            env=record_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
