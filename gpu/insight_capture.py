"""Insight on a real GPU (issue 7): a torch.profiler trace and ikp captures of the same run, merged;
a session over several launches; and, with 2+ GPUs, how well their %globaltimer clocks agree.

    python gpu/insight_capture.py [--launches 5] [--blocks 264]      (repo root; needs torch, nvcc, a GPU)

Writes to $OUT (or ./insight_out):
  captures/launch_<i>.npy/.json   one capture per launch (sidecar: launch_index, host_ns, kernel, device)
  torch_trace.json.gz             torch.profiler Chrome trace of the same launches (CPU + CUDA)
  merged_launch0.json.gz          the profiler trace + the regions of launch 0 inside its kernel slice
  merged_session.json.gz          the profiler trace + every launch (one offset solved for all)
  session.json                    all launches as track groups on one timeline (ikp merge)
  stats.json, plots/*.png         `ikp stats` / `ikp plot` of the session
  ranks/, ranks_merged.json       with 2+ GPUs: the kernel on each GPU, merged one track group per rank
  results.json                    every number printed below
Prints a short table last.

The kernel (CUDA C++, cuda_include/ikp.cuh, built with nvcc): 2 warp groups x 2 warps per block; group 0
("producer") runs `load` regions whose length depends on the block (imbalance to find), group 1
("consumer") runs `mma` regions, both end with `epilogue`.

Clock agreement between two GPUs, two ways:
  host brackets  per GPU: host time_ns() before a 1-thread kernel that reads %globaltimer, and after the
                 synchronize; offset = globaltimer - bracket midpoint, from the narrowest of many brackets.
                 The launch/sync asymmetry is about the same on both GPUs, so the difference of the two
                 offsets is the better number; its uncertainty is the brackets' half widths.
  peer ping-pong both kernels run at once; GPU 0 writes ping[i] (its globaltimer) into GPU 1's memory,
                 GPU 1 answers pong[i] = its globaltimer when it sees it, GPU 0 notes its time on receipt:
                 offset(1 - 0) = t1 - (t0_send + t0_recv) / 2 +- rtt / 2 (NTP-style; symmetric links).
                 Needs peer access; skipped (and said) otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

KERNEL = "ikp_insight_kernel"
EVENTS = {0: "load", 1: "mma", 2: "epilogue"}
GROUPS = {0: "producer", 1: "consumer"}
NUM_GROUPS, WARPS_PER_GROUP = 2, 2

SOURCE = r"""
#include <cuda_runtime.h>
#include "ikp.cuh"

enum : unsigned { LOAD = 0, MMA = 1, EPILOGUE = 2 };

__device__ __forceinline__ float work(float x, int n) {
  for (int i = 0; i < n; ++i) x = fmaf(x, 1.0001f, 0.5f);
  return x;
}

__global__ void ikp_insight_kernel(void* buf, float* out, int write_stride, int records_per_lane, int iters) {
  const int group = ikp::warp_id() / 2;
  ikp::Profiler<> prof(buf, 2, group, ikp::group_leader(2), write_stride, records_per_lane);
  float x = threadIdx.x * 1e-3f;
  for (int i = 0; i < iters; ++i) {
    if (group == 0) {
      ikp::Region r(prof, LOAD);
      x = work(x, 64 + 32 * (blockIdx.x % 4));   // blocks differ: imbalance to find
    } else {
      ikp::Region r(prof, MMA);
      x = work(x, 128);
    }
  }
  {
    ikp::Region r(prof, EPILOGUE);
    x = work(x, 32);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
  prof.finalize();
}

__global__ void ikp_timer_probe(unsigned long long* out) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out[0] = t;
}

__device__ __forceinline__ unsigned long long gt() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// GPU 0 side: rec[3*i] = t0 send, rec[3*i+1] = t1 (from pong), rec[3*i+2] = t0 receive.
__global__ void ikp_ping(volatile unsigned long long* ping_remote, volatile unsigned long long* pong_local,
                         unsigned long long* rec, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    unsigned long long t0 = gt();
    ping_remote[i] = t0 | 1ull;   // never 0 (0 = not yet written)
    __threadfence_system();
    unsigned long long deadline = t0 + 2000000000ull, v;
    while ((v = pong_local[i]) == 0ull && gt() < deadline) {}
    unsigned long long t2 = gt();
    rec[3 * i] = t0; rec[3 * i + 1] = v; rec[3 * i + 2] = t2;
    if (v == 0ull) return;   // peer never answered: give up (timeout), host sees zeros
  }
}

// GPU 1 side: wait for ping[i] (local), answer with its own globaltimer into GPU 0's memory.
__global__ void ikp_pong(volatile unsigned long long* ping_local, volatile unsigned long long* pong_remote,
                         int rounds) {
  unsigned long long deadline = gt() + 4000000000ull;
  for (int i = 0; i < rounds; ++i) {
    while (ping_local[i] == 0ull) { if (gt() > deadline) return; }
    unsigned long long t1 = gt();
    pong_remote[i] = t1 | 1ull;
    __threadfence_system();
  }
}

// Every launcher selects its device first: a stream of another device than the current one is an error.
extern "C" int insight_launch(int dev, void* buf, float* out, int blocks, int write_stride, int records_per_lane,
                              int iters, void* stream) {
  cudaSetDevice(dev);
  ikp_insight_kernel<<<blocks, 32 * 2 * 2, 0, (cudaStream_t)stream>>>(buf, out, write_stride, records_per_lane, iters);
  return (int)cudaGetLastError();
}
extern "C" int probe_launch(int dev, unsigned long long* out, void* stream) {
  cudaSetDevice(dev);
  ikp_timer_probe<<<1, 1, 0, (cudaStream_t)stream>>>(out);
  return (int)cudaGetLastError();
}
extern "C" int enable_peer(int dev, int peer) {
  int can = 0;
  cudaDeviceCanAccessPeer(&can, dev, peer);
  if (!can) return -1;
  cudaSetDevice(dev);
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) { cudaGetLastError(); return 0; }
  return (int)e;
}
extern "C" int ping_launch(int dev, unsigned long long* ping_remote, unsigned long long* pong_local,
                           unsigned long long* rec, int rounds, void* stream) {
  cudaSetDevice(dev);
  ikp_ping<<<1, 1, 0, (cudaStream_t)stream>>>(ping_remote, pong_local, rec, rounds);
  return (int)cudaGetLastError();
}
extern "C" int pong_launch(int dev, unsigned long long* ping_local, unsigned long long* pong_remote, int rounds,
                           void* stream) {
  cudaSetDevice(dev);
  ikp_pong<<<1, 1, 0, (cudaStream_t)stream>>>(ping_local, pong_remote, rounds);
  return (int)cudaGetLastError();
}
"""


def find_nvcc() -> str:
    for c in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if c and os.path.isfile(c):
            return c
    raise SystemExit("nvcc not found (PATH or $CUDA_HOME/bin)")


def build(torch) -> ctypes.CDLL:
    from cuda_include import include_dir

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    d = Path(tempfile.mkdtemp(prefix="ikp_insight_"))
    (d / "insight.cu").write_text(SOURCE)
    cmd = [find_nvcc(), "-O3", "-std=c++17", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", f"-I{include_dir()}",
           "-o", str(d / "libinsight.so"), str(d / "insight.cu")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"nvcc failed: {' '.join(cmd)}\n{res.stderr}")
    lib = ctypes.CDLL(str(d / "libinsight.so"))
    for fn in ("insight_launch", "probe_launch", "enable_peer", "ping_launch", "pong_launch"):
        getattr(lib, fn).restype = ctypes.c_int
    lib.insight_launch.argtypes = (
        [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 4 + [ctypes.c_void_p]
    )
    lib.probe_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.enable_peer.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.ping_launch.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_void_p]
    lib.pong_launch.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 2 + [ctypes.c_int, ctypes.c_void_p]
    return lib


def _check(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what} failed: CUDA error {err}")


def layout(blocks: int, iters: int) -> tuple[int, int]:
    write_stride = blocks * NUM_GROUPS
    records_per_lane = 2 * iters + 2 + 4  # regions + epilogue + anchors/trailer
    return write_stride, records_per_lane


def launch_insight(lib, torch, device: int, blocks: int, iters: int):
    """One launch on `device` with a fresh zeroed buffer -> (buffer tensor, host_ns before the launch)."""
    ws, rpl = layout(blocks, iters)
    with torch.cuda.device(device):
        buf = torch.zeros(1 + ws * rpl, dtype=torch.int64, device=f"cuda:{device}")
        out = torch.empty(blocks * 128, dtype=torch.float32, device=f"cuda:{device}")
        stream = torch.cuda.current_stream(device).cuda_stream
        host_ns = time.time_ns()
        _check(
            lib.insight_launch(device, buf.data_ptr(), out.data_ptr(), blocks, ws, rpl, iters, stream), "insight launch"
        )
    return buf, host_ns


def save(buf, path, torch, device, blocks, iters, **meta):
    from host_decode.load.capture import save_capture

    ws, rpl = layout(blocks, iters)
    props = torch.cuda.get_device_properties(device)
    return save_capture(path, buf.cpu().numpy(), {"events": {str(k): v for k, v in EVENTS.items()},
                                                  "groups": {str(k): v for k, v in GROUPS.items()}},
                        write_stride=ws, records_per_lane=rpl, kernel=KERNEL, device=props.name,
                        sm_count=props.multi_processor_count, **meta)


def _auto_match(align, trace, path) -> dict:
    """Does matching by absolute time alone (no occurrence given) find slice 0 for launch 0?"""
    from host_decode.core.errors import DecodeError

    try:
        r, _ = align.align(trace, align.load_chrome(path), KERNEL)
        return {"slice": r.occurrences[0], "correct": r.occurrences[0] == 0}
    except DecodeError as e:
        return {"refused": str(e)}


# --- clocks ------------------------------------------------------------------------------------------


def host_bracket_offset(lib, torch, device: int, repeats: int = 200) -> dict:
    """globaltimer - host time_ns at the narrowest bracket (see the module docstring)."""
    with torch.cuda.device(device):
        out = torch.zeros(1, dtype=torch.int64, device=f"cuda:{device}")
        stream = torch.cuda.current_stream(device)
        rows = []
        for _ in range(repeats):
            h0 = time.time_ns()
            _check(lib.probe_launch(device, out.data_ptr(), stream.cuda_stream), "probe launch")
            stream.synchronize()
            h1 = time.time_ns()
            rows.append((int(out.item()), h0, h1))
    r = np.array(rows, np.int64)
    width = r[:, 2] - r[:, 1]
    best = int(np.argmin(width))
    offsets = r[:, 0] - (r[:, 1] + r[:, 2]) // 2
    narrow = width <= np.percentile(width, 10)
    return {"device": device, "offset_ns": int(offsets[best]), "half_width_ns": int(width[best] // 2),
            "offset_p50_narrowest10pct_ns": float(np.median(offsets[narrow])),
            "offset_spread_narrowest10pct_ns": float(offsets[narrow].max() - offsets[narrow].min())}


def peer_pingpong(lib, torch, rounds: int = 200) -> dict:
    for dev, peer in ((0, 1), (1, 0)):
        err = lib.enable_peer(dev, peer)
        if err:
            return {"skipped": f"peer access {dev}->{peer} not available (code {err})"}
    ping = torch.zeros(rounds, dtype=torch.int64, device="cuda:1")  # written by GPU 0, read by GPU 1
    pong = torch.zeros(rounds, dtype=torch.int64, device="cuda:0")  # written by GPU 1, read by GPU 0
    rec = torch.zeros(3 * rounds, dtype=torch.int64, device="cuda:0")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    s1 = torch.cuda.current_stream(1).cuda_stream
    s0 = torch.cuda.current_stream(0).cuda_stream
    _check(lib.pong_launch(1, ping.data_ptr(), pong.data_ptr(), rounds, s1), "pong launch")
    _check(lib.ping_launch(0, ping.data_ptr(), pong.data_ptr(), rec.data_ptr(), rounds, s0), "ping launch")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    r = rec.cpu().numpy().astype(np.int64).reshape(rounds, 3)
    ok = r[:, 1] != 0
    if not ok.any():
        return {"skipped": "GPU 1 never answered (kernels did not run concurrently)"}
    r = r[ok]
    rtt = r[:, 2] - r[:, 0]
    offset = r[:, 1] - (r[:, 0] + r[:, 2]) // 2  # GPU 1 clock - GPU 0 clock
    fast = rtt <= np.percentile(rtt, 25)
    return {"rounds": int(ok.sum()), "rtt_ns_min": int(rtt.min()), "rtt_ns_p50": float(np.median(rtt)),
            "offset_1_minus_0_ns": float(np.median(offset[fast])),
            "offset_spread_ns": float(offset[fast].max() - offset[fast].min()),
            "uncertainty_ns": float(rtt[fast].max() / 2)}


# --- main ------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=0, help="grid size (default: 2 x SM count)")
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from host_decode.analysis import align, diff
    from host_decode.analysis import sessions as multi
    from host_decode.analysis.regions import stats_data
    from host_decode.reports import merged, plots

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    out = Path(os.environ.get("OUT", "insight_out"))
    (out / "captures").mkdir(parents=True, exist_ok=True)
    lib = build(torch)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks = args.blocks or 2 * sms
    results: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "blocks": blocks,
                     "launches": args.launches}

    for _ in range(3):  # warm up outside the profiler (module load, first-launch costs)
        launch_insight(lib, torch, 0, blocks, args.iters)
    torch.cuda.synchronize()

    bufs = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(args.launches):
            bufs.append(launch_insight(lib, torch, 0, blocks, args.iters))
            torch.cuda.synchronize()
    raw = Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(raw))
    import gzip

    with open(raw, "rb") as src, gzip.open(out / "torch_trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    paths = [
        save(b, out / "captures" / f"launch_{i}.npy", torch, 0, blocks, args.iters, launch_index=i, host_ns=h, rank=0)
        for i, (b, h) in enumerate(bufs)
    ]

    parts = multi.load_parts(paths, progress=False)
    session = multi.concat(parts)
    a0 = merged.merge_with_torch_trace(out / "torch_trace.json.gz", parts[0].trace, out / "merged_launch0.json.gz",
                                      kernel_name=KERNEL, occurrence=0)
    results["auto_match_launch0"] = _auto_match(align, parts[0].trace, out / "torch_trace.json.gz")
    aS = merged.merge_with_torch_trace(out / "torch_trace.json.gz", session, out / "merged_session.json.gz",
                                      kernel_name=KERNEL, occurrence=0)
    per_launch = []
    doc = align.load_chrome(out / "torch_trace.json.gz")
    for i, p in enumerate(parts):  # each launch on its own (slice i: only our launches were profiled)
        r, _ = align.align(p.trace, doc, KERNEL, occurrence=i)
        per_launch.append({"launch": p.launch_index, "slice": r.occurrences[0], "raw_offset_ns": r.raw_offset_ns,
                           "offset_ns": r.offset_ns, "slack_ns": r.slack_ns, "accuracy_ns": r.accuracy_ns})
    results["align_launch0"] = a0.to_json()
    results["align_session"] = aS.to_json()
    results["align_per_launch"] = per_launch
    results["host_clock_vs_globaltimer_gpu0"] = host_bracket_offset(lib, torch, 0)

    merged.write_session(parts, out / "session.json")
    stats = stats_data(session)
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    plots.plot_all(session, out / "plots")
    half = len(parts) // 2
    if half:
        rows = diff.compare(multi.concat(parts[:half]), multi.concat(parts[half:]))
        results["diff_first_vs_second_half"] = [
            {k: r.get(k) for k in ("group", "event", "delta_pct", "p_welch", "status")} for r in rows
        ]
    results["stats_launch"] = stats["launch"]

    if torch.cuda.device_count() >= 2:
        results["gpu1_host_bracket"] = host_bracket_offset(lib, torch, 1)
        g0, g1 = results["host_clock_vs_globaltimer_gpu0"], results["gpu1_host_bracket"]
        results["bracket_offset_1_minus_0_ns"] = g1["offset_ns"] - g0["offset_ns"]
        results["bracket_uncertainty_ns"] = g0["half_width_ns"] + g1["half_width_ns"]
        try:
            results["peer_pingpong"] = peer_pingpong(lib, torch)
        except Exception as e:  # noqa: BLE001 - report, do not lose the rest of the run
            results["peer_pingpong"] = {"skipped": f"{type(e).__name__}: {e}"}
        (out / "ranks").mkdir(exist_ok=True)
        rank_paths = []
        for dev in (0, 1):  # the same kernel on each GPU, launched back to back
            b, h = launch_insight(lib, torch, dev, blocks, args.iters)
            torch.cuda.synchronize(dev)
            rank_paths.append(save(b, out / "ranks" / f"rank_{dev}.npy", torch, dev, blocks, args.iters, rank=dev,
                                   host_ns=h, launch_index=0))
        rparts = multi.load_parts(rank_paths, by="rank", progress=False)
        results["ranks_merge"] = merged.write_session(rparts, out / "ranks_merged.json")

    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print_table(results)
    return 0


def print_table(r: dict) -> None:
    a0, aS = r["align_launch0"], r["align_session"]
    hb = r["host_clock_vs_globaltimer_gpu0"]
    rows = [
        ("device / torch", f"{r['device']} / {r['torch']}"),
        ("kernel slices matched", f"{aS['occurrences']} of {aS['kernel_name'][:40]}"),
        ("profiler clock - globaltimer (raw, launch 0)", f"{a0['raw_offset_ns']} ns"),
        ("launch 0: slack (slice - regions extent)", f"{a0['slack_ns']} ns"),
        ("launch 0: offset accuracy bound", f"+-{a0['accuracy_ns']:.0f} ns"),
        (
            "session: offset accuracy bound (intersected)",
            f"+-{aS['accuracy_ns']:.0f} ns, consistent={aS['consistent']}",
        ),
        ("per-launch solved offsets (ns)", ", ".join(str(p["offset_ns"]) for p in r["align_per_launch"])),
        ("launch 0 matched by absolute time alone", json.dumps(r.get("auto_match_launch0"))),
        ("globaltimer - host time_ns (GPU 0)", f"{hb['offset_ns']} ns +- {hb['half_width_ns']} ns"),
        ("launch length / tail / imbalance(SM busy)",
         f"{r['stats_launch'].get('launch_ns')} ns / {r['stats_launch'].get('tail_ns', 0):.0f} ns / "
         f"{r['stats_launch'].get('imbalance_sm_busy', float('nan')):.3f}"),
    ]
    if "bracket_offset_1_minus_0_ns" in r:
        rows.append(
            (
                "GPU1 - GPU0 globaltimer (host brackets)",
                f"{r['bracket_offset_1_minus_0_ns']} ns +- {r['bracket_uncertainty_ns']} ns",
            )
        )
        pp = r["peer_pingpong"]
        rows.append(("GPU1 - GPU0 globaltimer (peer ping-pong)",
                     pp.get("skipped") or f"{pp['offset_1_minus_0_ns']:.0f} ns +- {pp['uncertainty_ns']:.0f} ns "
                                          f"(rtt min {pp['rtt_ns_min']} ns, {pp['rounds']} rounds)"))
    w = max(len(k) for k, _ in rows)
    print("\n== ikp insight on a GPU ==")
    for k, v in rows:
        print(f"{k:<{w}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
