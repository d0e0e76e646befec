import sys

from host_decode.cli import main

sys.exit(main())
