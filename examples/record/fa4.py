"""FlashAttention-4's forward (flash_attn.cute: Hopper on sm_90, Blackwell on sm_100) called in a loop, causal
and not: a plain program with no profiler code in it, what `ikp record` records.

    python examples/record/fa4.py                                   # on a GPU
    ikp record -o rec -- python examples/record/fa4.py              # recorded; then: ikp view rec
    ikp record --dry-run --arch sm_90a -- python examples/record/fa4.py   # no GPU: what would be traced

FA4 compiles one kernel per (causal, shape, ...) on first use and keeps it in its compile cache; under
`ikp record` that cache is set aside, so the two kernels are compiled traced (docs/guides/recording.md).
Under a dry run (IKP_RECORD_DRY_RUN set) the tensors are fake, FA4 compiles and launches nothing itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
from flash_attn.cute.interface import flash_attn_func

DRY_RUN = os.environ.get("IKP_RECORD_DRY_RUN")


def attention(q, k, v, causal: bool):
    out = flash_attn_func(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--profile", action="store_true",
                        help="run the timed loops under torch.profiler and write its trace (into $IKP_RECORD_OUT "
                             "when ikp record runs the program, where ikp record finds it; else here)")
    args = parser.parse_args()
    profiler = contextlib.nullcontext()
    if args.profile and not DRY_RUN:
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    shape = (args.batch, args.seqlen, args.heads, args.dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with profiler:
        loops(q, k, v, args, shape)
    if args.profile and not DRY_RUN:
        path = os.path.join(os.environ.get("IKP_RECORD_OUT", "."), "fa4_torch_trace.json")
        profiler.export_chrome_trace(path)
        print(f"torch.profiler trace: {path}")


def loops(q, k, v, args, shape) -> None:
    for causal in {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]:
        attention(q, k, v, causal)  # compiles
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            out = attention(q, k, v, causal)
        torch.cuda.synchronize()
        if DRY_RUN:
            print(f"fa4 causal={causal}: compiled for {DRY_RUN} (the dry run launches nothing)")
            continue
        ms = (time.perf_counter() - start) * 1e3 / args.iters
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:1, :256].transpose(1, 2), k[:1].transpose(1, 2), v[:1].transpose(1, 2), is_causal=False)
        note = "" if causal else f", max error vs SDPA {(out[:1, :256] - ref.transpose(1, 2)).abs().max().item():.2e}"
        print(f"fa4 causal={causal} {shape}: {args.iters} calls, {ms:.3f} ms each (host clock){note}")


if __name__ == "__main__":
    main()
