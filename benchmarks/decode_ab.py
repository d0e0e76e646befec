"""`ikp decode X -o X.pftrace` (as typed: loss report and region summary printed) of two checkouts in turns.

    python benchmarks/decode_ab.py OLD_CHECKOUT NEW_CHECKOUT [--records 1e7] [--repeat 20]

Each round runs both (their order alternating), each in a fresh process with its checkout first on
PYTHONPATH, on one synthetic buffer (decode_bench.make_buffer, lanes within 100 us, as bigcap_bench.py);
prints per checkout the least and the median wall and CPU (user + system, every thread), and the ratios
new / old. With --in-process N, each process calls the command N times (imports and first-touch page faults
paid once) and reports the calls: a difference of a few percent, which whole processes on a shared machine
resolve only now and then. With --summary-paths N (NEW only), one process alternates N times the two ways the
new code can give the region summary of `ikp decode -o`: a pass of its own over the span table before the
trace is written, or counted by the writer (analysis.stats.RunSummary), and checks they print the same.
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

SUMMARY_PATHS = """
import os, sys, time
from host_decode.analysis.stats import RunSummary
from host_decode.cli.common import load_input
from host_decode.reports.tables.decode import decode_json
from host_decode.writers import write_trace
trace, out, n = load_input(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def own_pass():
    data = decode_json(trace)
    write_trace(trace, out)
    return data
def counted():
    seen = RunSummary(trace.spans.size)
    write_trace(trace, out, spans_seen=seen)
    return decode_json(trace, seen.result())
for i in range(2 * n):
    f = (own_pass, counted)[(i + i // 2) % 2]  # own, counted, counted, own, ...: each first half the time
    if os.path.exists(out):
        os.unlink(out)
    t0, c0 = time.perf_counter(), time.process_time()
    data = f()
    print(f.__name__, time.perf_counter() - t0, time.process_time() - c0)
assert own_pass() == counted()
"""

IN_PROCESS = """
import contextlib, io, os, sys, time
from host_decode.cli import main
buf, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for _ in range(n):
    if os.path.exists(out):
        os.unlink(out)  # ikp never writes over a file
    t0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["decode", buf, "-o", out])
    print(time.perf_counter() - t0, time.process_time() - c0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="checkout (repository root) measured first in even rounds")
    ap.add_argument("new")
    ap.add_argument("--records", type=float, default=1e7)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--in-process", type=int, default=0, metavar="N", help="calls per process (0: one process a call)")
    ap.add_argument("--summary-paths", type=int, default=0, metavar="N",
                    help="in NEW: the summary's own pass against the writer's count, N turns in one process")
    args = ap.parse_args()
    roots = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    walls: dict = {k: [] for k in roots}
    cpus: dict = {k: [] for k in roots}
    with tempfile.TemporaryDirectory() as d:
        buf = Path(d) / "cap.npy"
        np.save(buf, make_buffer(int(args.records), lane_spread_ns=100_000))
        if args.summary_paths:
            lines = subprocess.run([sys.executable, "-c", SUMMARY_PATHS, str(buf), str(Path(d) / "t.pftrace"),
                                    str(args.summary_paths)], env=dict(os.environ, PYTHONPATH=roots["new"]),
                                   check=True, capture_output=True, text=True).stdout.split("\n")
            for way in ("own_pass", "counted"):
                w, c = (np.array([float(x.split()[k]) for x in lines if x.startswith(way)]) for k in (1, 2))
                print(f"{way:>8}: decode_json + write_trace wall least {w.min() * 1e3:.0f} ms, median "
                      f"{np.median(w) * 1e3:.0f} ms; CPU least {c.min() * 1e3:.0f} ms, "
                      f"median {np.median(c) * 1e3:.0f} ms")
            return
        for i in range(args.repeat):
            for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
                out = Path(d) / f"{name}.pftrace"
                out.unlink(missing_ok=True)  # ikp never writes over a file
                env = dict(os.environ, PYTHONPATH=roots[name])
                if args.in_process:
                    calls = subprocess.run([sys.executable, "-c", IN_PROCESS, str(buf), str(out), str(args.in_process)],
                                           env=env, check=True, capture_output=True, text=True).stdout.split()
                    walls[name] += [float(x) for x in calls[0::2]]
                    cpus[name] += [float(x) for x in calls[1::2]]
                    continue
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import sys; from host_decode.cli import main; sys.exit(main())",
                                "decode", str(buf), "-o", str(out)], env=env,
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
          f"({args.repeat} rounds{f' of {args.in_process} calls' if args.in_process else ''}, "
          f"{int(args.records):,} records)")


if __name__ == "__main__":
    main()
