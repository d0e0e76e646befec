"""Build ikp_example.cu with nvcc, run it on torch buffers, decode the records, save a capture.

    python examples/cuda_cpp/run.py [--out capture.npy] [--iters 6]

Needs a CUDA GPU, torch and nvcc. gpu/cuda_cross_check.py reuses `build_library` and `launch`.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO))

EVENTS = {0: "outer", 1: "inner", 2: "tick"}
GROUPS = {0: "producer", 1: "consumer"}
VARIANTS = {"nested": 0, "nested_plain": 1, "nested_off": 2, "flat_cursor": 3, "flat_static": 4, "flat_atomic": 5}


def find_nvcc() -> str:
    for candidate in (
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
    ):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise SystemExit("nvcc not found (PATH or $CUDA_HOME/bin)")


def device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major == 9 else "")


def build_library(build_dir: str | None = None) -> ctypes.CDLL:
    """nvcc -shared the example (about 3-10 s) and load it."""
    from cuda_include import include_dir

    build_dir = Path(build_dir or tempfile.mkdtemp(prefix="ikp_example_"))
    build_dir.mkdir(parents=True, exist_ok=True)
    lib = build_dir / "libikp_example.so"
    cmd = [find_nvcc(), "-O3", "-std=c++17", f"-arch={device_arch()}", "-shared", "-Xcompiler", "-fPIC",
           f"-I{include_dir()}", "-o", str(lib), str(HERE / "ikp_example.cu")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"nvcc failed ({' '.join(cmd)}):\n{res.stderr}")
    dll = ctypes.CDLL(str(lib))
    dll.ikp_example_launch.restype = ctypes.c_int
    dll.ikp_example_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_void_p]
    dll.ikp_example_error_string.restype = ctypes.c_char_p
    dll.ikp_example_error_string.argtypes = [ctypes.c_int]
    return dll


def launch(dll, variant: str, grid=(3, 2, 2), write_stride=32, records_per_lane=32, iters=6):
    """Zeroed buffers, one launch, synchronized -> (buffer int64 tensor, out float tensor)."""
    import torch

    num_blocks = grid[0] * grid[1] * grid[2]
    num_groups = dll.ikp_example_num_groups()
    if write_stride < num_blocks * num_groups:
        raise ValueError(f"write_stride {write_stride} < lanes {num_blocks * num_groups}")
    buf = torch.zeros(1 + write_stride * records_per_lane, dtype=torch.int64, device="cuda")
    counters = torch.zeros(write_stride, dtype=torch.int32, device="cuda")
    out = torch.zeros(num_blocks * dll.ikp_example_threads_per_block(), dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    err = dll.ikp_example_launch(VARIANTS[variant], buf.data_ptr(), counters.data_ptr(), out.data_ptr(), *grid,
                                 write_stride, records_per_lane, iters, stream)
    if err != 0:
        raise RuntimeError(f"launch of {variant} failed: {dll.ikp_example_error_string(err).decode()}")
    torch.cuda.synchronize()
    return buf, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ikp_cuda_example.npy", help="capture path (.npy + .json sidecar)")
    parser.add_argument("--iters", type=int, default=6)
    args = parser.parse_args()
    import ikp_cute

    ikp_cute.require_gpu('examples/cuda_cpp/run.py')  # one line where there is no GPU

    import torch

    from host_decode.core.decoder import decode
    from host_decode.core.model import Names
    from host_decode.load.capture import save_capture

    write_stride, records_per_lane = 32, 4 * args.iters + 8
    buf, _ = launch(
        build_library(), "nested", write_stride=write_stride, records_per_lane=records_per_lane, iters=args.iters
    )
    names = Names(events=dict(EVENTS), groups=dict(GROUPS))
    trace = decode(buf.cpu().numpy(), names=names, write_stride=write_stride)
    path = save_capture(
        args.out,
        buf.cpu().numpy(),
        names,
        write_stride=write_stride,
        records_per_lane=records_per_lane,
        kernel="ikp_example nested",
        device=torch.cuda.get_device_name(),
        sm_count=torch.cuda.get_device_properties(0).multi_processor_count,
    )
    durations = trace.durations()
    print(f"{trace.num_blocks} blocks x {trace.num_groups} groups, {trace.spans.size} spans, "
          f"{trace.instants.size} instants, lost {trace.loss.lost}, absolute time: {trace.absolute}")
    print(f"{'group':<10} {'event':<8} {'count':>6} {'mean ns':>9} {'max ns':>8}")
    for group in sorted(GROUPS):
        for event in sorted(EVENTS):
            sel = (trace.spans["group"] == group) & (trace.spans["event"] == event)
            if sel.any():
                print(f"{GROUPS[group]:<10} {EVENTS[event]:<8} {int(sel.sum()):>6} {durations[sel].mean():>9.0f} "
                      f"{durations[sel].max():>8}")
    print(f"capture: {path}  (ikp decode {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
