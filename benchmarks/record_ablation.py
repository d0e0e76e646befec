"""Where a record's time goes (issue 17): the cursor record with one part taken out at a time, beside the
shipped cursor and, under IKET's launcher, IKET's twin, in one process.

Kernel: benchmarks/device_overhead.py's (528 blocks x 8 warps, every warp a lane, 256 regions of 32
dependent FMAs per warp: issue-bound, so a record costs what its instructions take to issue), built with
each recorder of ikp_cute/testing/record_variants.py in place of the cursor's. Reported per row: median
kernel time (CUDA events, the rows taking turns launch by launch, medians of --reps launches in each
of --rounds rounds), ns per event per warp
over the uninstrumented kernel, the ratio to IKET when it ran, and the marginal SASS instructions per
record by opcode (from the cubin: 8 vs 4 regions per loop iteration, overhead.opcodes_per_event). Before
timing, --check launches of the shipped cursor are decoded: every region of every warp, nothing lost.

    python benchmarks/record_ablation.py [--json out.json] [--iket] [--check 20]

--iket adds IKET's twin; it records only under IKET's launcher (python3 -m iket.cli.main --working-dir DIR
profile --postprocess none -- python3 /abs/path/benchmarks/record_ablation.py --iket), which runs the
script twice: read the last table. gpu/device_suite.py runs it so (step "ablation").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from benchmarks.device_overhead import build, measure_built  # noqa: E402

BLOCKS, WARPS, REGIONS = 528, 8, 256


def check_cursor(launches: int) -> int:
    """Launches of the shipped cursor whose capture is not every region of every warp with nothing lost."""
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels.overhead import launch_overhead

    x_arg = from_dlpack(torch.rand(BLOCKS * WARPS * 32, device="cuda"), assumed_align=16)
    spec = ikp_cute.ProfileSpec(mode="cursor", num_groups=WARPS, num_blocks=BLOCKS,
                                records_per_lane=2 * REGIONS + 8, warps_per_group=1)
    session = ikp_cute.Session(spec)
    buf = session.kernel_arg()
    compiled = cute.compile(launch_overhead, x_arg, Int32(REGIONS), buf, session.spec, 1, -1, BLOCKS, 32 * WARPS)
    bad = 0
    for _ in range(launches):
        session.reset()
        compiled(x_arg, Int32(REGIONS), buf)
        torch.cuda.synchronize()
        trace = session.decode()
        bad += len(trace.spans) != BLOCKS * WARPS * REGIONS or trace.loss.lost != 0
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--check", type=int, default=20, help="launches of the shipped cursor decoded first")
    p.add_argument("--iket", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)

    import torch

    from ikp_cute.testing.kernels.overhead import opcodes_per_event
    from ikp_cute.testing.record_variants import VARIANTS

    opcodes = {"cursor": opcodes_per_event("cursor")}
    opcodes |= {name: opcodes_per_event(mode, recorder_class=cls) for name, (mode, cls) in VARIANTS.items()}
    bad = check_cursor(args.check) if args.check else 0
    x = torch.rand(BLOCKS * WARPS * 32, device="cuda", dtype=torch.float32)
    launches = {
        "uninstrumented": build(("uninstrumented", None, "none"), BLOCKS, WARPS, REGIONS, x),
        "cursor": build(("cursor", "cursor", "none"), BLOCKS, WARPS, REGIONS, x),
    }
    for name, (mode, cls) in VARIANTS.items():
        launches[name] = build((name, mode, "none"), BLOCKS, WARPS, REGIONS, x, recorder_class=cls)
    if args.iket:
        launches["iket"] = build(("iket", None, "none"), BLOCKS, WARPS, REGIONS, x)
    times = measure_built(launches, args.reps, args.rounds)
    base = statistics.median(times["uninstrumented"])
    ns = {name: (statistics.median(t) - base) * 1e6 / (2 * REGIONS) for name, t in times.items()}
    device = torch.cuda.get_device_name()
    print(f"[{device}] {BLOCKS} blocks x {WARPS} warps, {REGIONS} regions/warp, medians of {args.reps} launches "
          f"x {args.rounds} rounds; shipped cursor decoded exactly in {args.check - bad} of {args.check} launches")
    print(f"{'row':<18}{'ms':>9}{'spread':>8}{'ns/ev/warp':>12}{'x IKET':>8}{'SASS/ev':>9}  where the instructions go")
    for name, t in times.items():
        ops = opcodes.get(name, {})
        vs_iket = f"{ns[name] / ns['iket']:.2f}" if ns.get("iket", 0) > 0 and name != "uninstrumented" else ""
        print(f"{name:<18}{statistics.median(t):>9.4f}{max(t) - min(t):>8.4f}{ns[name]:>12.1f}{vs_iket:>8}"
              f"{sum(ops.values()):>9.2f}  " + " ".join(f"{op} {n:g}" for op, n in ops.items()))
    if not args.iket:
        print("(no IKET row: run under IKET's launcher with --iket)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": device, "config": vars(args), "cursor_launches_not_exact": bad, "ms": times,
            "ns_per_event_per_warp": ns, "sass_per_event_by_opcode": opcodes,
        }, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
