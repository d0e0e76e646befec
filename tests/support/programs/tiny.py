"""A tiny program for `ikp record` tests: compiles a small pipelined CuTe DSL kernel
(ikp_cute.testing.kernels.pipelines_kernel) on fake tensors and calls it LAUNCHES times; with --wait it then
says "waiting" and sleeps (a test sends it a signal there). No ikp_cute call: the recorder is started by
`ikp record`."""

import argparse
import sys
import time

from cutlass import Int32, cute
from cutlass.cute.runtime import make_fake_compact_tensor

from ikp_cute.testing.kernels import pipelines_kernel as pk

parser = argparse.ArgumentParser()
parser.add_argument("--launches", type=int, default=3)
parser.add_argument("--wait", type=float, default=0.0)
args = parser.parse_args()
out = make_fake_compact_tensor(Int32, (4,))
compiled = cute.compile(pk.launch, out, Int32(5), 4)
for _ in range(args.launches):
    compiled(out, Int32(5))
print(f"tiny: {args.launches} launches", flush=True)
if args.wait:
    print("waiting", flush=True)
    time.sleep(args.wait)
sys.exit(0)
