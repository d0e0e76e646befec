"""Run the example kernel on the GPU, save the capture, decode it and write a Perfetto trace.

    python examples/basic/run.py [--out examples/basic/capture.npy] [--trace trace.pftrace]

Then `ikp view trace.pftrace` (the Perfetto UI, served offline) or `ikp stats capture.npy`.
The body of `record` is what the README and docs/getting-started.md show (tests/docs/test_docs.py checks it).
"""

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def record(out: str, blocks: int = 8, tiles: int = 12):
    """Compile, launch once, save `out` (+ its .json sidecar); -> the decoded host_decode Trace."""
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.basic.kernel import THREADS, launch_tiles

    x = torch.rand(blocks * tiles * THREADS, device="cuda")
    y = torch.full((blocks * THREADS,), float("nan"), device="cuda")  # every element must be written
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=blocks, records_per_lane=5 * tiles + 8,
                                events=["tile", "load", "compute", "tile_done"])
    session = ikp_cute.Session(spec, groups=["producer", "consumer"], kernel="tiles_kernel")
    x_arg, y_arg = from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16)
    compiled = cute.compile(launch_tiles, x_arg, y_arg, Int32(tiles), session.kernel_arg(), session.spec, blocks)
    with session.zeroed_then_synced():  # zero the buffer, launch, synchronize
        compiled(x_arg, y_arg, Int32(tiles), session.kernel_arg())
    session.save(out)  # the raw buffer + a .json sidecar: names, geometry, device
    trace = session.decode()  # spans, instants, lanes and the loss report
    assert not torch.isnan(y).any(), "kernel left outputs unwritten"
    return trace


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "capture.npy"))
    p.add_argument("--trace", default=None, help="Perfetto output (.pftrace); default next to --out")
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--tiles", type=int, default=12)
    args = p.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/basic/run.py')  # one line where there is no GPU

    trace = record(args.out, args.blocks, args.tiles)
    path = Path(args.out)
    print(
        f"saved {path} ({path.stat().st_size} bytes): {len(trace.spans)} spans, {len(trace.instants)} instants, "
        f"{len(trace.lanes)} lanes, lost={trace.loss.lost}, absolute={trace.absolute}"
    )
    from host_decode import write_trace

    out = args.trace or str(path.with_suffix(".pftrace"))
    write_trace(trace, out)
    print(f"wrote {out}: ikp view {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
