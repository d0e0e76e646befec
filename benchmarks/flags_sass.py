"""SASS that flag tracing adds per event, compiled on the CPU (no GPU): docs/flags.md, "Cost per event".

    python benchmarks/flags_sass.py [--arch sm_90a] [--listing]

The kernel of ikp_cute/testing/kernels/flags_kernel.py (block 0 signals a flag, block 1 waits for it) with the
library primitives (red_add1, spin_lock_ld_lt_relaxed_wait), compiled four ways: plain, traced with only the
signal recorded (`ops={"flag_signal"}`), only the wait, both. Per event: signal = both - wait only; wait = both -
signal only; the prologue (once per warp and launch) = signal only + wait only - both - plain. The wait's
instructions split into its passing path (the time read, the first probe, its compare) and its blocked path
(the reservation made while blocked, then the END time and stores after the value arrived): the listing of the
traced wait shows where each goes (--listing). Needs nvdisasm (the CUDA wheel's).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def compile_variants(arch: str) -> dict[str, list[str]]:
    os.environ.setdefault("CUTE_DSL_ARCH", arch)
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute import ProfileSpec
    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels import flags_kernel as fk

    spec = ProfileSpec(num_groups=2, num_blocks=2, records_per_lane=16, warps_per_group=1)
    args = [fake(Int32, (4,)), Int32(3), Int32(5), "library", "add", "ge", "relaxed", "gpu", None, False]

    def build(ops):
        if ops == "plain":
            return sass.disassemble(cute.compile(fk.launch, *args, options=sass.keep_options()).__cubin__)
        with trace_pipelines(spec, address=0x7F0012340000, ops=ops):
            return sass.disassemble(cute.compile(fk.launch, *args, options=sass.keep_options()).__cubin__)

    return {"plain": build("plain"), "signal only": build({"flag_signal"}), "wait only": build({"flag_wait"}),
            "both": build(None)}


def wait_paths(listing: list[str]) -> tuple[list[str], list[str]]:
    """(passing path, blocked path) of the last block's wait in a traced listing: from the timer read just before
    its first probe to the branch after that probe; then up to the final store of the kernel's own flag."""
    probes = [i for i, ins in enumerate(listing) if ins.split()[0].startswith("LDG.E.STRONG")]
    first = probes[0]
    start = max(i for i in range(first) if "SR_GLOBALTIMER" in listing[i])
    branch = next(i for i in range(first, len(listing)) if listing[i].split()[0] == "BRA")
    return listing[start:branch + 1], listing[branch + 1:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--listing", action="store_true", help="print the traced wait's SASS, path by path")
    a = ap.parse_args(argv)
    from ikp_cute.testing import sass

    if sass.nvdisasm_path() is None:
        print("nvdisasm not found: install the CUDA wheel (nvidia-cuda-nvdisasm) or put nvdisasm on PATH")
        return 1
    v = compile_variants(a.arch)
    n = {k: len(x) for k, x in v.items()}
    passing, blocked = wait_paths(v["wait only"])
    print(f"SASS instructions, {a.arch} ({', '.join(f'{k} {c}' for k, c in n.items())})")
    print(f"  signal (red_add1):            +{n['both'] - n['wait only']}")
    print(f"  wait (spin_lock_ld_lt_...):   +{n['both'] - n['signal only']} in all; passing path: "
          f"{', '.join(i.split()[0] for i in passing)}")
    print(f"  prologue (per warp, launch):  +{n['signal only'] + n['wait only'] - n['both'] - n['plain']}")
    if a.listing:
        print("passing path:\n  " + "\n  ".join(passing))
        print("blocked path and after:\n  " + "\n  ".join(blocked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
