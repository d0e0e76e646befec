"""python -m host_decode.cli: the same as the `ikp` script."""

import sys

from host_decode.cli import main

if __name__ == "__main__":
    sys.exit(main())
