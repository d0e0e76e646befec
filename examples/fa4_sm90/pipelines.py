"""FlashAttention-4's Hopper forward traced with no source change and no subclass: every wait and signal of
its K, V and Q pipelines and of its warp-scheduler barriers (`ikp_cute.trace_pipelines`), optionally
together with the phase regions only a subclass can mark (fa4_instrumented.py, `--phases`, its own
session: per warp group lanes) in the same compiled kernel. GPU:

    python examples/fa4_sm90/pipelines.py [--causal] [--level waits|signals|all] [--phases] [-o out]
    ikp decode out/fa4_pipelines.npy -o fa4.pftrace

Prints the per pipeline x op x warp group table (docs/pipelines.md has the H100 numbers).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pipelines"), str(HERE.parents[1])]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--level", default="waits")
    parser.add_argument("--phases", action="store_true", help="also record fa4_instrumented's phase regions")
    parser.add_argument("-o", "--out", default="fa4_out")
    args = parser.parse_args(argv)


    import summary
    import torch
    from compile_cpu import fa4_private_cache
    from flash_attn.cute.interface import flash_attn_func

    import ikp_cute
    from ikp_cute.pipelines import session_for, trace_pipelines

    q, k, v = (torch.randn(args.batch, args.seqlen, args.heads, 128, dtype=torch.bfloat16, device="cuda")
               for _ in range(3))
    ctas = args.batch * args.heads * math.ceil(args.seqlen / 128)
    pipes = session_for(ctas, 12, records_per_lane=512, kernel="fa4_sm90_forward")
    phases = contextlib.nullcontext()
    if args.phases:
        import fa4_instrumented as fi

        phase_spec = ikp_cute.ProfileSpec(mode="lean", num_groups=len(fi.GROUPS), num_blocks=ctas,
                                          records_per_lane=256, events=fi.events_for("iter"))
        phase_session = ikp_cute.Session(phase_spec, groups=list(fi.GROUPS), bake_address=True)
        phases = fi.patched_interface(phase_session.spec, "iter")
    with fa4_private_cache(), phases, trace_pipelines(pipes, level=args.level) as trace:
        flash_attn_func(q, k, v, causal=args.causal)  # compiles FA4 with the hooks in place
        with pipes.zeroed_then_synced():
            if args.phases:
                phase_session.reset()
            flash_attn_func(q, k, v, causal=args.causal)
    out = Path(args.out)
    path = trace.save(pipes, out / "fa4_pipelines.npy")
    if args.phases:
        phase_session.save(out / "fa4_phases.npy")
    from host_decode.load.capture import load_capture
    from host_decode.load.sidecar import read_sidecar

    meta = read_sidecar(path)
    print(summary.format_table(summary.table(load_capture(path), meta)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
