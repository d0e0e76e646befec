"""`python -m ikp_cute --include`: print the directory holding ikp.cuh (for `nvcc -I"$(...)"`).

Imports nothing but cuda_include, so it works without CuTe DSL or torch.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ikp_cute", description=__doc__.splitlines()[0])
    parser.add_argument("--include", action="store_true", help="print the CUDA C++ include directory (ikp.cuh)")
    args = parser.parse_args(argv)
    if not args.include:
        parser.print_help()
        return 2
    from cuda_include import include_dir

    print(include_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
