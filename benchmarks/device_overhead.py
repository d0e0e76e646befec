"""Cost of recording, every ikp_cute mode side by side (issue 10, item 7).

Kernel (tests/kernels/overhead.py): 528 blocks x 8 warps, every warp is a lane and records
`regions` regions, each holding 32 dependent FMAs (issue-bound). Reported per variant: median kernel
time, the spread of two interleaved rounds, ns per event per warp = (t - t_uninstrumented) / events per
warp, % over uninstrumented, and SASS instructions per event (from the cubin). A latency-bound
single-warp launch (1 block x 32 threads) is timed the same way.

    python benchmarks/device_overhead.py [--json out.json] [--iket]

--iket adds NVIDIA's IKET-instrumented twin; it records only when this script runs under IKET's
launcher (python3 -m iket.cli.main --working-dir DIR profile --postprocess perfetto -- python3 /abs/path).
Without it the IKET row is omitted and the prior measurement (docs/gpu.md) is printed,
labelled as such. Timing: CUDA events around each launch, buffer re-zeroed outside the events before
every launch (all variants alike, so atomic counters start from zero), medians of `--reps` launches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

PRIOR_IKET = "IKET (prior measurement, H200, docs/gpu.md; not this run): +30 ns/event/warp, +37%"

VARIANTS = [  # (label, mode or None for uninstrumented, fence)
    ("uninstrumented", None, "none"),
    ("cursor", "cursor", "none"),  # the default: begin record stored at the begin
    ("cursor deferred", "cursor", "none"),  # defer_begin=True: begin record stored with the end record
    ("cursor smem", "cursor", "none"),  # stage="smem": records in shared memory, copied out at finalize
    ("cursor lean", "cursor", "none"),  # lean=True: no state in registers between records (FA4-class kernels)
    ("cursor+fence", "cursor", "cta"),
    ("static", "static", "none"),
    ("atomic", "atomic", "none"),
]


def build(variant, blocks, warps, regions_per_warp, x):
    """-> (launch(), zero(), sass instructions per event or None)."""
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from tests.kernels.overhead import launch_iket_overhead, launch_overhead

    label, mode, fence = variant
    x_arg = from_dlpack(x, assumed_align=16)
    iters = Int32(regions_per_warp)
    threads = warps * 32
    if label == "iket":
        compiled = cute.compile(launch_iket_overhead, x_arg, iters, 1, blocks, threads)
        scratch = torch.zeros(1, dtype=torch.int64, device="cuda")
        return (lambda: compiled(x_arg, iters)), scratch.zero_, None
    session = ikp_cute.Session(
        groups=warps,
        num_blocks=blocks,
        records_per_lane=2 * regions_per_warp + 8,
        mode=mode or "cursor",
        enabled=mode is not None,
        warps_per_group=1,
        fence=fence,
        defer_begin=label == "cursor deferred",
        stage="smem" if label == "cursor smem" else "global",
        lean=label == "cursor lean",
    )
    buf = session.kernel_arg()
    compiled = cute.compile(launch_overhead, x_arg, iters, buf, session.spec, 1, -1, blocks, threads)
    scratch = (
        session.buffer
        if session.buffer is not None
        else torch.zeros(
            ikp_cute.ProfileSpec(
                num_groups=warps,
                num_blocks=blocks,
                write_stride=warps * blocks,
                records_per_lane=2 * regions_per_warp + 8,
            ).total_slots,
            dtype=torch.int64,
            device="cuda",
        )
    )
    return (lambda: compiled(x_arg, iters, buf)), scratch.zero_, None


def sass_per_event(label, mode, fence):
    """Marginal SASS instructions per record of the overhead kernel (see tests/test_device_compile.py)."""
    if mode is None:
        return 0.0
    from tests.kernels.overhead import sass_instructions_per_event

    return sass_instructions_per_event(
        mode,
        fence=fence,
        defer_begin=label == "cursor deferred",
        stage="smem" if label == "cursor smem" else "global",
        lean=label == "cursor lean",
    )


def time_launches(launch, zero, reps):
    import torch

    times = []
    for _ in range(reps):
        zero()
        start, end = (
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(enable_timing=True),
        )
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(variants, blocks, warps, regions, reps, rounds=2):
    import torch

    x = torch.rand(blocks * warps * 32, device="cuda", dtype=torch.float32)
    built = {v[0]: build(v, blocks, warps, regions, x) for v in variants}
    for (
        launch,
        zero,
        _,
    ) in built.values():  # warm up: module load, first-launch costs, clocks
        for _ in range(20):
            zero()
            launch()
    torch.cuda.synchronize()
    results = {label: [] for label in built}
    for _ in range(rounds):  # interleaved rounds: drift hits every variant alike
        for label, (launch, zero, _) in built.items():
            results[label].append(time_launches(launch, zero, reps))
    return results


def table(results, regions, base_label="uninstrumented", sass_counts=None):
    base = statistics.median(results[base_label])
    events = 2 * regions
    rows = []
    for label, ms in results.items():
        med = statistics.median(ms)
        rows.append(
            {
                "variant": label,
                "ms": med,
                "spread_ms": max(ms) - min(ms),
                "ns_per_event_per_warp": (med - base) * 1e6 / events,
                "pct": (med / base - 1) * 100,
                "sass_per_event": (sass_counts or {}).get(label),
            }
        )
    return rows


def format_rows(title, rows):
    out = [
        title,
        f"{'variant':<16}{'ms':>10}{'spread':>9}{'ns/ev/warp':>12}{'% over':>9}{'SASS/ev':>9}",
    ]
    for r in rows:
        sass_cell = "" if r["sass_per_event"] is None else f"{r['sass_per_event']:.1f}"
        out.append(
            f"{r['variant']:<16}{r['ms']:>10.4f}{r['spread_ms']:>9.4f}{r['ns_per_event_per_warp']:>12.1f}"
            f"{r['pct']:>8.1f}%{sass_cell:>9}"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=528)
    p.add_argument("--warps", type=int, default=8)
    p.add_argument("--regions", type=int, default=256, help="regions per warp")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--iket", action="store_true", help="add the IKET twin (needs IKET's launcher)")
    p.add_argument("--json", help="write all numbers here")
    args = p.parse_args(argv)

    import torch

    variants = list(VARIANTS) + ([("iket", None, "none")] if args.iket else [])
    sass_counts = {}
    for label, mode, fence in VARIANTS:
        try:
            sass_counts[label] = sass_per_event(label, mode, fence)
        except (
            FileNotFoundError,
            subprocess.CalledProcessError,
        ) as exc:  # nvdisasm missing: timing still runs
            print(f"SASS count for {label} unavailable: {exc}", file=sys.stderr)

    main_results = measure(variants, args.blocks, args.warps, args.regions, args.reps)
    single_results = measure([v for v in variants if v[0] != "iket"], 1, 1, args.regions, args.reps)
    device = torch.cuda.get_device_name()
    main_rows = table(main_results, args.regions, sass_counts=sass_counts)
    single_rows = table(single_results, args.regions, sass_counts=sass_counts)
    report = {
        "device": device,
        "config": vars(args),
        "throughput": main_rows,
        "latency_single_warp": single_rows,
        "raw_ms": {"throughput": main_results, "latency_single_warp": single_results},
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(
        format_rows(
            f"[{device}] {args.blocks} blocks x {args.warps} warps, {args.regions} regions/warp "
            f"(32 dependent FMAs each), medians of {args.reps} launches x 2 rounds",
            main_rows,
        )
    )
    print(format_rows("latency-bound: 1 block x 1 warp, same program", single_rows))
    if args.iket:
        print("iket row: valid only when this script runs under IKET's launcher (otherwise IKET records nothing)")
    else:
        print(PRIOR_IKET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
