"""The header-only CUDA C++ twin of ikp_cute (ikp.cuh); `include_dir()` is what `nvcc -I` needs."""

from pathlib import Path


def include_dir() -> str:
    return str(Path(__file__).resolve().parent)
