"""A torch.nn.Module whose forward calls a CuTe DSL kernel (the row sums of examples/record/standalone.py),
run under torch.compile: a plain program with no profiler code in it, what `ikp record` records.

    python examples/record/torch_compile_module.py                            # on a GPU
    ikp record -o rec -- python examples/record/torch_compile_module.py       # recorded; then: ikp view rec
    ikp record --dry-run --arch sm_90a -- python examples/record/torch_compile_module.py

The kernel is compiled when the module is built (one shape, as serving code does) and reached from the
compiled graph through a torch custom op with a fake implementation, so torch.compile(fullgraph=True) holds;
the launches inside the compiled graph are CuTe DSL launches like any other and are recorded. Under a dry run
(IKP_RECORD_DRY_RUN set) tensors are fake: the module is built (the kernel compiles, traced) and called
eagerly, the op answering with its fake implementation.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standalone import ROWS, TILE, compile_row_sums  # noqa: E402

DRY_RUN = os.environ.get("IKP_RECORD_DRY_RUN")
KERNELS: dict = {}


@torch.library.custom_op("ikp_examples::row_sums", mutates_args=())
def row_sums(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    KERNELS[tuple(x.shape)](x, y)
    return y


@row_sums.register_fake
def _(x):
    return x.new_empty(x.shape[0])


class RowNormalize(torch.nn.Module):
    """x / (1 + |row sum|), rows summed by the CuTe DSL kernel."""

    def __init__(self, rows: int, cols: int):
        super().__init__()
        KERNELS[(rows, cols)] = compile_row_sums(rows, cols)

    def forward(self, x):
        return x / (1.0 + row_sums(x).abs()).unsqueeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=132 * ROWS * 4)
    parser.add_argument("--cols", type=int, default=TILE * 64)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    module = RowNormalize(args.rows, args.cols)
    x = torch.randn(args.rows, args.cols, device="cuda", dtype=torch.float32)
    run = module if DRY_RUN else torch.compile(module, fullgraph=True)
    for _ in range(args.iters):
        out = run(x)
    torch.cuda.synchronize()
    if DRY_RUN:
        print(f"row normalize: kernel compiled for {DRY_RUN}, module called eagerly on fake tensors")
        return
    ref = x / (1.0 + x.sum(dim=1).abs()).unsqueeze(1)
    print(f"row normalize under torch.compile: {args.iters} calls, max error {(out - ref).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
