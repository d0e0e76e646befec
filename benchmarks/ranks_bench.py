"""Time of `ikp export` (and of `ikp waits`'s matching) over many rank captures: linear in the rank count.

    python benchmarks/ranks_bench.py                   # 256 and 1,024 ranks, side by side, 3 runs each
    python benchmarks/ranks_bench.py --ranks 256 4096  # any counts; the ratios are to the first

The captures are synthetic (tests/support/flag_scenarios.py `ring`: each rank signals the next rank's flag and
waits on its own, the same few records a rank whatever the count), written to a temporary folder first. Each
count is measured in turn within one run (best of --runs, CPU seconds of this process and wall seconds), and
the table prints per count the time, the time per capture, and the time ratio to the smallest count next to
the ratio of the counts: linear time keeps the two ratios alike.

* export: host_decode.writers.parquet.export_tables (streams capture by capture; pass 2 matches per bucket);
* waits: load the folder as one merged trace and run the flag analysis (host_decode.analysis.flag_paths
  .flags_summary), what `ikp waits DIR --format json` does in memory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from host_decode.analysis.flag_paths import flags_summary  # noqa: E402
from host_decode.analysis.sessions import load_trace  # noqa: E402
from host_decode.writers.parquet import export_tables  # noqa: E402
from tests.support.flag_scenarios import ring  # noqa: E402


def best(fn, runs: int) -> tuple[float, float]:
    """(CPU s, wall s) of the fastest of `runs` calls."""
    out = []
    for _ in range(runs):
        c, w = time.process_time(), time.perf_counter()
        fn()
        out.append((time.process_time() - c, time.perf_counter() - w))
    return min(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--skip-waits", action="store_true", help="time the export only")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ranks_bench_"))
    try:
        folders = {}
        for n in args.ranks:
            folders[n] = root / f"r{n}"
            folders[n].mkdir()
            ring(folders[n], n, blocks=2)
        export_tables([folders[args.ranks[0]]], _fresh(root))  # imports and first-use caches before timing
        rows = []
        for n in args.ranks:
            ex = best(lambda: export_tables([folders[n]], _fresh(root)), args.runs)
            wa = (0.0, 0.0) if args.skip_waits else best(lambda: flags_summary(load_trace([folders[n]])), args.runs)
            rows.append((n, ex, wa))
        base_n, base_ex, base_wa = rows[0]
        print(f"{'ranks':>6} {'ratio':>6} | {'export cpu s':>12} {'wall s':>7} {'us/rank':>8} {'ratio':>6} | "
              f"{'waits cpu s':>11} {'wall s':>7} {'ratio':>6}")
        for n, ex, wa in rows:
            print(f"{n:>6} {n / base_n:>6.2f} | {ex[0]:>12.3f} {ex[1]:>7.3f} {1e6 * ex[0] / n:>8.0f} "
                  f"{ex[0] / base_ex[0]:>6.2f} | {wa[0]:>11.3f} {wa[1]:>7.3f} "
                  f"{(wa[0] / base_wa[0]) if base_wa[0] else 0:>6.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


_count = [0]


def _fresh(root: Path) -> Path:
    _count[0] += 1
    out = root / f"out{_count[0]}"
    out.mkdir()
    return out


if __name__ == "__main__":
    sys.exit(main())
