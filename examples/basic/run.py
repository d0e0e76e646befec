"""Run the example kernel on the GPU, save the capture, decode it and write a Perfetto trace.

    python examples/basic/run.py [--out examples/basic/capture.npy] [--trace trace.pftrace]

Then open the .pftrace at https://ui.perfetto.dev (or `ikp decode capture.npy -o trace.pftrace`).
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
    p.add_argument("--out", default=str(HERE / "capture.npy"))
    p.add_argument(
        "--trace",
        default=None,
        help="Perfetto output (.pftrace); default next to --out",
    )
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--tiles", type=int, default=12)
    args = p.parse_args(argv)

    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.basic.kernel import THREADS, launch_tiles

    x = torch.rand(args.blocks * args.tiles * THREADS, device="cuda")
    y = torch.full((args.blocks * THREADS,), float("nan"), device="cuda")  # poisoned: every element must be written
    spec = ikp_cute.ProfileSpec(
        num_groups=2,
        num_blocks=args.blocks,
        records_per_lane=5 * args.tiles + 8,  # 5 records per tile + anchors + trailer + slack
        events=["tile", "load", "compute", "tile_done"],
    )
    session = ikp_cute.Session(spec, groups=["producer", "consumer"], kernel="tiles_kernel")
    x_arg, y_arg = from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16)
    compiled = cute.compile(
        launch_tiles,
        x_arg,
        y_arg,
        Int32(args.tiles),
        session.kernel_arg(),
        session.spec,
        args.blocks,
    )
    with session.zeroed_then_synced():
        compiled(x_arg, y_arg, Int32(args.tiles), session.kernel_arg())
    assert not torch.isnan(y).any(), "kernel left outputs unwritten"

    path = session.save(args.out)
    trace = session.decode()
    print(
        f"saved {path} ({path.stat().st_size} bytes): {len(trace.spans)} spans, {len(trace.instants)} instants, "
        f"{len(trace.lanes)} lanes, lost={trace.loss.lost}, absolute={trace.absolute}"
    )
    from host_decode.writers.perfetto import write_perfetto

    out = args.trace or str(Path(args.out).with_suffix(".pftrace"))
    write_perfetto(trace, out)
    print(f"wrote {out}: open it at https://ui.perfetto.dev")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
