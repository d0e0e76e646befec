"""Benchmark of `ikp kernels` on a generated torch.profiler-shaped trace (issue 9).

Writes a Kineto-formatted trace (pretty-printed like `export_chrome_trace`: ProfilerStep#N annotations,
cpu_op rows, cudaLaunchKernel runtime rows, kernel rows with correlation ids on 2 devices x 2 streams and
the ac2g flow pair Kineto writes per launch)
of about --size-mb into a temporary directory, then runs `ikp kernels TRACE --format json` twice in
subprocesses: a cold parse (which writes the cache) and a cached run. Prints wall time, the child's peak
RSS and its ratio to the file size. Targets (issue 9): cold < 30 s, peak RSS < 2x file size for 1 GB.

    python benchmarks/kernels_bench.py                 # ~1 GB, ~5 M events
    python benchmarks/kernels_bench.py --size-mb 100   # quicker
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "void at::native::(anonymous namespace)::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast"
    "<at::native::AddFunctor<float> >(at::TensorIteratorBase&, at::native::AddFunctor<float> const&)::"
    "{lambda(int)#1}>(int, at::native::AddFunctor<float>)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "triton_poi_fused_add_mul_0",
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalEEEvNT_6ParamsE",
]

CPU_OP = """  {{
    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {corr},"Record function id": 0, "Sequence number": 0, "Fwd thread id": 0, "Ev Idx": {corr}
    }}
  }},
"""
RUNTIME = """  {{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {corr}, "cbid": 211, "correlation": {corr}
    }}
  }},
"""
KERNEL = """  {{
    "ph": "X", "cat": "kernel", "name": "{name}", "pid": {dev}, "tid": {stream},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {corr}, "queued": 0, "device": {dev}, "context": 1, "stream": {stream}, "correlation": {corr},
      "registers per thread": 32, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0,
      "grid": [66, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 3
    }}
  }},
"""
FLOWS = """  {{
    "ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": {cpu:.3f},
    "cat": "ac2g", "name": "ac2g"
  }},
  {{
    "ph": "f", "id": {corr}, "pid": {dev}, "tid": {stream}, "ts": {ts:.3f},
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }},
"""
STEP = """  {{
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": 0, "Record function id": 0, "Ev Idx": 0
    }}
  }},
"""
HEAD = '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": [\n'
TAIL = '  {\n    "ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": %.3f\n  }\n' \
       '],\n  "traceName": "bench", "displayTimeUnit": "ms"\n}\n'


def write_trace(path: Path, size_mb: float, launches_per_step: int = 2000) -> int:
    """Kineto-shaped trace of about size_mb; returns the number of events written."""
    target = int(size_mb * (1 << 20))
    events, written, corr, ts, step = 0, 0, 0, 1_000_000.0, 0
    with open(path, "w", buffering=1 << 22) as f:
        f.write(HEAD)
        while written < target:
            parts = [STEP.format(n=step, ts=ts, dur=launches_per_step * 6.0)]
            gpu_ts = ts + 20.0
            for i in range(launches_per_step):
                corr += 1
                cpu = ts + i * 6.0
                dev, stream = (corr >> 1) & 1, 7 + (corr & 1)
                dur = 2.0 + (corr * 7919 % 1000) / 100.0
                parts.append(CPU_OP.format(ts=cpu, dur=5.0, corr=corr))
                parts.append(RUNTIME.format(ts=cpu + 1.0, dur=3.5, corr=corr))
                parts.append(KERNEL.format(name=KERNELS[corr % len(KERNELS)], dev=dev, stream=stream,
                                           ts=max(gpu_ts, cpu + 4.0), dur=dur, corr=corr))
                parts.append(FLOWS.format(corr=corr, cpu=cpu + 1.0, dev=dev, stream=stream, ts=max(gpu_ts, cpu + 4.0)))
                gpu_ts = max(gpu_ts, cpu + 4.0) + dur + (corr * 31 % 50) / 10.0
            text = "".join(parts)
            f.write(text)
            written += len(text)
            events += 1 + 5 * launches_per_step
            ts = max(gpu_ts, ts + launches_per_step * 6.0) + 50.0
            step += 1
        f.write(TAIL % ts)
    return events + 1


def run_child(trace: Path, extra: list) -> dict:
    """One `ikp kernels --format json` equivalent (load + every table + JSON) in a fresh process: wall seconds, CPU
    seconds (parser workers and c++filt included), peak RSS of the process and the largest peak RSS among
    its parser workers, as each worker measured itself (bytes), exit code."""
    code = """
import argparse, json, resource, sys
from host_decode.core.jsonable import dumps
from host_decode.torch_traces import trace as tt
from host_decode.cli.commands import kernels
ap = argparse.ArgumentParser()
kernels.add_arguments(ap)
args = ap.parse_args(sys.argv[1:])
trace = tt.load_torch_trace(args.trace, cache=not args.no_cache, workers=args.jobs, parser=args.parser)
dumps(kernels.build_report(trace, args))
s = resource.getrusage(resource.RUSAGE_SELF)
c = resource.getrusage(resource.RUSAGE_CHILDREN)
print('USAGE', s.ru_maxrss * 1024, trace.meta.get('worker_peak_rss', 0),
      s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, file=sys.stderr)
"""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(trace), *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    usage = next((line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("USAGE")), None)
    if proc.returncode or usage is None:
        print(proc.stderr, file=sys.stderr)
        usage = usage or [-1, -1, -1]
    return {"wall": wall, "rss": int(usage[0]), "worker_rss": int(usage[1]), "cpu": float(usage[2]),
            "rc": proc.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=1024.0, help="trace size to generate (default 1024)")
    ap.add_argument("--dir", default=None, help="where to write the trace (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the generated trace")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="parser processes to time (default 1 2)")
    ap.add_argument("--parser", default="auto", choices=("auto", "orjson", "msgspec"))
    ap.add_argument("--trace", default=None, help="time an existing trace instead of generating one")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ikp_kernels_bench_", dir=args.dir)
    trace = Path(tmp) / "bench.pt.trace.json"
    try:
        t0 = time.perf_counter()
        if args.trace:
            trace = Path(tmp) / Path(args.trace).name
            os.symlink(os.path.abspath(args.trace), trace)  # the cache goes to tmp, not next to the original
            n = -1
        else:
            n = write_trace(trace, args.size_mb)
        size = trace.stat().st_size
        what = f"{n:,} events, written in {time.perf_counter() - t0:.1f} s" if n > 0 else "given"
        print(f"trace {size / 2**20:.1f} MiB ({what}): {trace}")
        tiny = Path(tmp) / "tiny.json"
        tiny.write_text('{"traceEvents": []}')
        base = run_child(tiny, ["--no-cache"])
        print(f"python + imports + an empty trace: peak RSS {base['rss'] / 2**20:.0f} MiB")
        for jobs in args.jobs:
            cache = Path(str(trace) + ".ikpcache.npz")
            if cache.exists():
                cache.unlink()
            cold = run_child(trace, ["-j", str(jobs), "--parser", args.parser])
            workers = (f", + each of {jobs} workers <= {cold['worker_rss'] / 2**20:.0f} MiB"
                       f" (all together {(cold['rss'] + jobs * cold['worker_rss']) / size:.2f}x)") if jobs > 1 else ""
            print(f"-j {jobs} cold parse + tables: {cold['wall']:.2f} s wall, {cold['cpu']:.2f} s CPU; peak RSS "
                  f"{cold['rss'] / 2**20:.0f} MiB = {cold['rss'] / size:.2f}x file size{workers}; "
                  f"{size / 2**20 / cold['wall']:.0f} MiB/s"
                  + (f", {n / cold['wall'] / 1e6:.2f} M events/s" if n > 0 else "")
                  + ("" if cold["rc"] == 0 else f"  FAILED rc={cold['rc']}"))
            warm = run_child(trace, ["-j", str(jobs)])
            print(f"-j {jobs} cached run: {warm['wall']:.2f} s wall, {warm['cpu']:.2f} s CPU, peak RSS "
                  f"{warm['rss'] / 2**20:.0f} MiB (cache file {cache.stat().st_size / 2**20:.0f} MiB)"
                  + ("" if warm["rc"] == 0 else f"  FAILED rc={warm['rc']}"))
    finally:
        if not args.keep:
            for p in Path(tmp).iterdir():
                p.unlink()
            os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
