"""Run the twin kernel once and save the ikp capture; run it under IKET's launcher to get IKET's trace of
the same launch:

    python3 -m iket.cli.main --working-dir WD profile --postprocess all -- \
        python3 /abs/path/examples/interop/capture_twin.py --out DIR/ikp_twin.npy
"""

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--threads", type=int, default=128)
    p.add_argument("--tiles", type=int, default=8)
    args = p.parse_args(argv)

    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.interop.twin_kernel import launch_twin

    warps = args.threads // 32
    x = torch.rand(args.blocks * args.tiles * args.threads, device="cuda")
    y = torch.full((args.blocks * args.threads,), float("nan"), device="cuda")
    spec = ikp_cute.ProfileSpec(
        num_groups=warps,
        num_blocks=args.blocks,
        warps_per_group=1,
        records_per_lane=7 * args.tiles + 8,
        events=["tile", "load", "math", "tile_done"],
    )
    session = ikp_cute.Session(spec, groups=[f"warp {w}" for w in range(warps)], kernel="twin_kernel")
    xa, ya = from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16)
    compiled = cute.compile(launch_twin, xa, ya, Int32(args.tiles), session.kernel_arg(), session.spec,
                            args.blocks, args.threads)
    with session.zeroed_then_synced():
        compiled(xa, ya, Int32(args.tiles), session.kernel_arg())
    assert not torch.isnan(y).any(), "kernel left outputs unwritten"
    path = session.save(args.out)
    trace = session.decode()
    print(f"ikp: saved {path}: {len(trace.spans)} spans, lost={trace.loss.lost}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
