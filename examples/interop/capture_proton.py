"""Record a Triton kernel with Proton's intra-kernel mode (instrumentation backend, timeline trace) and
keep its Chrome trace as Proton wrote it:

    python3 examples/interop/capture_proton.py --out DIR/proton_add   # -> DIR/proton_add.chrome_trace
"""

import argparse


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output name without extension (Proton adds .chrome_trace)")
    p.add_argument("--size", type=int, default=4 * 1024)
    args = p.parse_args(argv)

    import torch
    import triton
    import triton.language as tl
    import triton.profiler as proton
    import triton.profiler.language as pl

    @triton.jit
    def scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pl.enter_scope("kernel")
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        with pl.scope("load"):
            x = tl.load(x_ptr + offs, mask=mask)
            y = tl.load(y_ptr + offs, mask=mask)
        with pl.scope("math"):
            z = x * 0.5 + y
        tl.store(out_ptr + offs, z, mask=mask)
        pl.exit_scope("kernel")

    pl.enable_semantic("triton")
    x = torch.rand(args.size, device="cuda")
    y = torch.rand(args.size, device="cuda")
    out = torch.empty_like(x)
    proton.start(args.out, data="trace", backend="instrumentation", mode=proton.mode.Default())
    scaled_add[(triton.cdiv(args.size, 1024),)](x, y, out, args.size, BLOCK=1024, num_warps=4)
    torch.cuda.synchronize()
    proton.finalize()
    torch.testing.assert_close(out, x * 0.5 + y)
    print(f"proton: wrote {args.out}.chrome_trace")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
