"""`ikp decode X -o X.pftrace` (as typed: loss report and region summary printed) of two checkouts in turns.

    python benchmarks/decode_ab.py OLD_CHECKOUT NEW_CHECKOUT [--records 1e7] [--repeat 20]

Each round runs both (their order alternating), each in a fresh process with its checkout first on
PYTHONPATH, on one synthetic buffer (decode_bench.make_buffer, lanes within 100 us, as bigcap_bench.py);
prints per checkout the least and the median wall and CPU (user + system, every thread), and the ratios
new / old: a difference of a few percent, which the whole of bigcap_bench.py does not resolve on a
shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_bench import make_buffer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="checkout (repository root) measured first in even rounds")
    ap.add_argument("new")
    ap.add_argument("--records", type=float, default=1e7)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    roots = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    walls: dict = {k: [] for k in roots}
    cpus: dict = {k: [] for k in roots}
    with tempfile.TemporaryDirectory() as d:
        buf = Path(d) / "cap.npy"
        np.save(buf, make_buffer(int(args.records), lane_spread_ns=100_000))
        for i in range(args.repeat):
            for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
                out = Path(d) / f"{name}.pftrace"
                out.unlink(missing_ok=True)  # ikp never writes over a file
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import sys; from host_decode.cli import main; sys.exit(main())",
                                "decode", str(buf), "-o", str(out)], env=dict(os.environ, PYTHONPATH=roots[name]),
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                walls[name].append(time.perf_counter() - t0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for name in roots:
        w, c = np.array(walls[name]), np.array(cpus[name])
        print(f"{name}: wall least {w.min():.3f} s, median {np.median(w):.3f} s; CPU least {c.min():.3f} s, "
              f"median {np.median(c):.3f} s  ({roots[name]})")
    ratio = {f: f(np.array(walls["new"])) / f(np.array(walls["old"])) for f in (np.min, np.median)}
    print(f"new / old: wall least {ratio[np.min]:.3f}, median {ratio[np.median]:.3f}; CPU median "
          f"{np.median(cpus['new']) / np.median(cpus['old']):.3f}  "
          f"({args.repeat} rounds, {int(args.records):,} records)")


if __name__ == "__main__":
    main()
