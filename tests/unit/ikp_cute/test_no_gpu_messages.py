"""Without a GPU: `Session(spec)` and the examples say in one line what they need (no torch traceback), and
a kernel traced for no chosen architecture is announced once, naming CUTE_DSL_ARCH (ikp_cute/session.py,
ikp_cute/profiler.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = pytest.mark.skipif(has_gpu(), reason="checks what a machine without a GPU says")


def python(code: str, env: dict | None = None, *args) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "CUTE_DSL_ARCH"}
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], capture_output=True, text=True,
                          cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300)


def test_session_without_a_gpu_is_one_clear_error():
    pytest.importorskip("torch")
    r = python("import ikp_cute\n"
               "try:\n"
               "    ikp_cute.Session(ikp_cute.ProfileSpec(num_groups=1, num_blocks=1, records_per_lane=8))\n"
               "except ikp_cute.GpuUnavailable as e:\n"
               "    print(e)\n")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "\n" not in line and "Session" in line and "CUDA GPU" in line and "CUTE_DSL_ARCH" in line, line


@pytest.mark.parametrize("example", ["basic", "pipeline", "megakernel"])
def test_examples_say_what_they_need(example):
    pytest.importorskip("torch")
    r = python("", None, str(ROOT / "examples" / example / "run.py"), "--out", "/nonexistent/capture.npy")
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr and "CUDA GPU" in lines[0], r.stderr[-3000:]


TRACE_TWICE = """
import warnings
warnings.simplefilter("default")
from cutlass import Float32, Int32, cute
from cutlass.cute.runtime import make_fake_compact_tensor
import ikp_cute
from examples.basic.kernel import THREADS, launch_tiles
x = make_fake_compact_tensor(Float32, (8 * 12 * THREADS,))
y = make_fake_compact_tensor(Float32, (8 * THREADS,))
spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=8, records_per_lane=68, events=["tile", "load", "compute",
                                                                                    "tile_done"])
for _ in range(2):
    cute.compile(launch_tiles, x, y, Int32(12), ikp_cute.fake_buffer(spec), spec, 8)
print("compiled")
"""


def test_a_defaulted_architecture_is_announced_once():
    pytest.importorskip("cutlass")
    r = python(TRACE_TWICE)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-3000:]
    said = [line for line in r.stderr.splitlines() if "CUTE_DSL_ARCH" in line]
    assert len(said) == 1 and "sm_100a" in said[0], r.stderr[-3000:]
    r = python(TRACE_TWICE, {"CUTE_DSL_ARCH": "sm_90a"})
    assert r.returncode == 0 and "CUTE_DSL_ARCH" not in r.stderr, r.stderr[-3000:]
