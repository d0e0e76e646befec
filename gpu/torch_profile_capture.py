"""Capture a small real GPU torch.profiler trace for tests/fixtures/torch/ (issue 9). Run on the GPU machine:

    python gpu/torch_profile_capture.py            # writes $OUT/torch_gpu_2streams.json.gz (or ./ without $OUT)

What it records (kept small, well under 300 KB gzipped): 4 ProfilerStep#N steps (wait=1, warmup=1, active=4)
of a tiny MLP on the default stream (matmul, relu, add, softmax kernels), a side stream with its own kernels
(fill, mul) and an async host->device copy, a torch.zeros (a fill kernel) and a device->host copy per step.
Prints the torch/CUDA versions and the device; the trace header carries the device properties.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def workload(x, w1, w2, side, host_buf, side_out):
    with record_function("mlp"):
        h = torch.relu(x @ w1)
        y = torch.softmax(h @ w2 + 1.0, dim=-1)
    with torch.cuda.stream(side):
        side_out.fill_(0.5)
        side_out.mul_(3.0)
        dev = host_buf.to("cuda", non_blocking=True)
        side_out.add_(dev[: side_out.numel()].view_as(side_out))
    torch.cuda.current_stream().wait_stream(side)
    z = torch.zeros(256, device="cuda")  # memset
    return y.sum().item() + z.sum().item()  # device->host copy


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 1
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "torch_gpu_2streams.json.gz"
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="cuda")
    w1 = torch.randn(512, 512, device="cuda")
    w2 = torch.randn(512, 128, device="cuda")
    side = torch.cuda.Stream()
    host_buf = torch.randn(4096).pin_memory()
    side_out = torch.empty(64, 64, device="cuda")
    workload(x, w1, w2, side, host_buf, side_out)  # warm up outside the profiler (cuBLAS handles, caches)
    torch.cuda.synchronize()

    def export(prof):
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            with open(raw, "rb") as src, gzip.open(target, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)

    sched = schedule(wait=1, warmup=1, active=4, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 on_trace_ready=export) as prof:
        for _ in range(7):
            workload(x, w1, w2, side, host_buf, side_out)
            prof.step()
    torch.cuda.synchronize()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    print(f"wrote {target} ({target.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
