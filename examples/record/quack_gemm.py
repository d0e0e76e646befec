"""quack's GEMM (quack.gemm_interface.gemm: its persistent warp-specialized Hopper GEMM on sm_90) called in a
loop: a plain program with no profiler code in it, what `ikp record` records.

    python examples/record/quack_gemm.py                                 # on a GPU
    ikp record -o rec -- python examples/record/quack_gemm.py            # recorded; then: ikp view rec
    ikp record --dry-run --arch sm_90a -- python examples/record/quack_gemm.py   # no GPU: what would be traced

quack keeps compiled kernels in memory and, by default, as .o files on disk keyed on the GEMM's arguments;
under `ikp record` both are set aside, so the kernel is compiled traced and no traced build reaches the disk
(docs/guides/recording.md). Under a dry run (IKP_RECORD_DRY_RUN set) the tensors are fake and the launch is
skipped by the recorder.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from quack.gemm_interface import gemm

DRY_RUN = os.environ.get("IKP_RECORD_DRY_RUN")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    a = torch.randn(args.m, args.k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.k, args.n, device="cuda", dtype=torch.bfloat16)
    gemm(a, b, tuned=False)  # compiles
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.iters):
        d = gemm(a, b, tuned=False)
    torch.cuda.synchronize()
    if DRY_RUN:
        print(f"quack gemm: compiled for {DRY_RUN} (the dry run launches nothing)")
        return
    ms = (time.perf_counter() - start) * 1e3 / args.iters
    tflops = 2 * args.m * args.n * args.k / ms / 1e9
    error = (d[:256].float() - a[:256].float() @ b.float()).abs().max().item()
    print(f"quack gemm {args.m}x{args.n}x{args.k}: {args.iters} calls, {ms:.3f} ms each (host clock), "
          f"{tflops:.0f} TFLOP/s, max error {error:.2e}")


if __name__ == "__main__":
    main()
