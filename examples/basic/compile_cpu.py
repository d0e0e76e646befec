"""Compile the example kernel on a machine without a GPU and write its cubin, for `ikp pc2region`.

    CUTE_DSL_ARCH=sm_90a python examples/basic/compile_cpu.py -o basic.cubin
    ikp pc2region basic.cubin --names examples/basic/capture.json

CuTe DSL compiles for the architecture CUTE_DSL_ARCH names without a device; fake tensors stand for
the kernel's arguments and `ikp_cute.fake_buffer` for the profiling buffer. The body of `compile_cubin`
is what docs/getting-started.md shows (tests/docs/test_docs.py checks it and runs this script).
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported


def compile_cubin(out: str, blocks: int = 8, tiles: int = 12) -> None:
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    import ikp_cute
    from examples.basic.kernel import THREADS, launch_tiles

    x = make_fake_compact_tensor(Float32, (blocks * tiles * THREADS,))  # shapes only: no device memory
    y = make_fake_compact_tensor(Float32, (blocks * THREADS,))
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=blocks, records_per_lane=5 * tiles + 8,
                                events=["tile", "load", "compute", "tile_done"])
    with tempfile.TemporaryDirectory() as dump:  # --keep-cubin also writes a file: there, not in the working directory
        compiled = cute.compile(launch_tiles, x, y, Int32(tiles), ikp_cute.fake_buffer(spec), spec, blocks,
                                options=f"--keep-cubin --generate-line-info --dump-dir={dump}")
    Path(out).write_bytes(bytes(compiled.__cubin__))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", default="basic.cubin", help="cubin to write (default basic.cubin)")
    args = p.parse_args(argv)
    if Path(args.output).exists():
        raise SystemExit(f"{args.output}: exists (choose another -o)")
    compile_cubin(args.output)
    print(f"wrote {args.output} ({os.environ['CUTE_DSL_ARCH']}); next: ikp pc2region {args.output} "
          "--names examples/basic/capture.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
