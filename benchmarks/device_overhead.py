"""Cost of recording, every ikp_cute mode side by side (issue 10, item 7).

Kernel (ikp_cute/testing/kernels/overhead.py): 528 blocks x 8 warps, every warp is a lane and records
`regions` regions, each holding 32 dependent FMAs (issue-bound). Reported per variant: median kernel
time, the spread of two interleaved rounds, ns per event per warp = (t - t_uninstrumented) / events per
warp, % over uninstrumented, and SASS instructions per event (from the cubin). A latency-bound
single-warp launch (1 block x 32 threads) is timed the same way.

    python benchmarks/device_overhead.py [--json out.json] [--iket]

--iket adds NVIDIA's IKET-instrumented twin; it records only when this script runs under IKET's
launcher (python3 -m iket.cli.main --working-dir DIR profile --postprocess perfetto -- python3 /abs/path).
Without it the IKET row is omitted and the prior measurement (docs/gpu.md) is printed,
labelled as such. Timing: CUDA events around each launch, buffer re-zeroed outside the events before
every launch (all variants alike, so atomic counters start from zero); the variants take turns launch
by launch; per variant the median of `--reps` launches in each of `--rounds` rounds, and the median of
those (the spread column: the rounds' max - min).
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "pipeline"))  # measure.time_alternating
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

PRIOR_IKET = ("IKET's twin of this kernel (earlier runs under IKET's launcher, docs/gpu.md; not this run): "
              "22.5 ns/event/warp on the H200, 22.3 on the H100 (2026-11-27)")

VARIANTS = [  # (label, mode or None for uninstrumented, fence)
    ("uninstrumented", None, "none"),
    ("cursor", "cursor", "none"),  # the default: records stored at once, one check per straight-line group
    ("deferred", "deferred", "none"),  # begin record stored with the end record
    ("smem", "smem", "none"),  # records in shared memory, copied out at finalize
    ("lean", "lean", "none"),  # no state in registers between records (FA4-class kernels)
    ("cursor+fence", "cursor", "cta"),
    ("static", "static", "none"),
    ("atomic", "atomic", "none"),
]


def build(variant, blocks, warps, regions_per_warp, x, recorder_class=None):
    """-> (launch(), zero()). `recorder_class`: instead of the mode's recorder (benchmarks/record_ablation.py)."""
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels.overhead import launch_iket_overhead, launch_overhead

    label, mode, fence = variant
    x_arg = from_dlpack(x, assumed_align=16)
    iters = Int32(regions_per_warp)
    threads = warps * 32
    if label == "iket":
        compiled = cute.compile(launch_iket_overhead, x_arg, iters, 1, blocks, threads)
        scratch = torch.zeros(1, dtype=torch.int64, device="cuda")
        return (lambda: compiled(x_arg, iters)), scratch.zero_
    geometry = {
        "num_groups": warps, "num_blocks": blocks, "records_per_lane": 2 * regions_per_warp + 8, "warps_per_group": 1
    }
    spec = ikp_cute.ProfileSpec(mode=mode, fence=fence, **geometry) if mode else ikp_cute.disabled()
    session = ikp_cute.Session(spec)
    buf = session.kernel_arg()
    compiled = cute.compile(launch_overhead, x_arg, iters, buf, session.spec, 1, -1, blocks, threads, recorder_class)
    # the uninstrumented kernel zeroes a buffer of the same size, so every variant pays the same reset
    scratch = session.buffer if session.buffer is not None else torch.zeros(
        ikp_cute.ProfileSpec(**geometry).total_slots, dtype=torch.int64, device="cuda"
    )
    return (lambda: compiled(x_arg, iters, buf)), scratch.zero_


def sass_per_event(label, mode, fence):
    """Marginal SASS instructions per record of the overhead kernel, by opcode (ikp_cute.testing)."""
    if mode is None:
        return {}
    from ikp_cute.testing.kernels.overhead import opcodes_per_event

    return opcodes_per_event(mode, fence=fence)


def time_interleaved(launches: dict, reps: int) -> dict:
    """{label: median ms} of `reps` launches of each variant (label: (launch, zero)), the variants taking
    turns launch by launch so that clock and thermal drift hit every variant alike, each launch between its
    own CUDA events with its buffer re-zeroed before the start event, all queued behind a sleep kernel so
    that the Python launch path opens no gap inside a timed interval (examples/pipeline/measure.py)."""
    from measure import time_alternating

    times = time_alternating({label: (zero, launch) for label, (launch, zero) in launches.items()}, reps)
    return {label: float(statistics.median(t)) for label, t in times.items()}


def measure(variants, blocks, warps, regions, reps, rounds=3):
    """{label: [median ms of each round]}: `rounds` rounds of `reps` interleaved launches per variant."""
    import torch

    x = torch.rand(blocks * warps * 32, device="cuda", dtype=torch.float32)
    built = {v[0]: build(v, blocks, warps, regions, x) for v in variants}
    return measure_built(built, reps, rounds)


def measure_built(built: dict, reps: int, rounds: int) -> dict:
    import torch

    for launch, zero in built.values():  # warm up: module load, first-launch costs, clocks
        for _ in range(20):
            zero()
            launch()
    torch.cuda.synchronize()
    results = {label: [] for label in built}
    for _ in range(rounds):
        for label, ms in time_interleaved(built, reps).items():
            results[label].append(ms)
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
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iket", action="store_true", help="add the IKET twin (needs IKET's launcher)")
    p.add_argument("--json", help="write all numbers here")
    p.add_argument("--iket-fixture", action="store_true",
                   help="only launch the IKET twin once on 2 blocks x 2 warps x 4 regions (a small IKET trace)")
    args = p.parse_args(argv)
    if args.iket_fixture:
        import torch

        x = torch.rand(2 * 2 * 32, device="cuda")
        launch, _ = build(("iket", None, "none"), 2, 2, 4, x)
        launch()
        torch.cuda.synchronize()
        print("iket fixture: twin kernel launched once (2 blocks x 2 warps x 4 regions)")
        return 0

    import torch

    variants = list(VARIANTS) + ([("iket", None, "none")] if args.iket else [])
    sass_counts, ablation = {}, {}
    for label, mode, fence in VARIANTS:
        try:
            ablation[label] = sass_per_event(label, mode, fence)
            sass_counts[label] = sum(ablation[label].values())
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:  # nvdisasm missing: timing still runs
            print(f"SASS count for {label} unavailable: {exc}", file=sys.stderr)

    main_results = measure(variants, args.blocks, args.warps, args.regions, args.reps, args.rounds)
    single_results = measure([v for v in variants if v[0] != "iket"], 1, 1, args.regions, args.reps, args.rounds)
    device = torch.cuda.get_device_name()
    main_rows = table(main_results, args.regions, sass_counts=sass_counts)
    single_rows = table(single_results, args.regions, sass_counts=sass_counts)
    report = {
        "device": device,
        "config": vars(args),
        "throughput": main_rows,
        "sass_per_event_by_opcode": ablation,
        "latency_single_warp": single_rows,
        "raw_ms": {"throughput": main_results, "latency_single_warp": single_results},
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(
        format_rows(
            f"[{device}] {args.blocks} blocks x {args.warps} warps, {args.regions} regions/warp "
            f"(32 dependent FMAs each), medians of {args.reps} interleaved launches x {args.rounds} rounds",
            main_rows,
        )
    )
    print(format_rows("latency-bound: 1 block x 1 warp, same program", single_rows))
    print("SASS per event by opcode (where each instruction of a record goes):")
    for label, ops in ablation.items():
        if ops:
            print(f"  {label:<14}" + " ".join(f"{op} {n:g}" for op, n in ops.items()))
    base = next(r for r in main_rows if r["variant"] == "cursor")["ns_per_event_per_warp"]
    for r in main_rows:
        if r["variant"] not in ("uninstrumented", "cursor") and base > 0:
            print(f"  {r['variant']:<14} {r['ns_per_event_per_warp'] / base:.2f}x cursor")
    if args.iket:
        print("iket row: valid only when this script runs under IKET's launcher (otherwise IKET records nothing)")
    else:
        print(PRIOR_IKET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
