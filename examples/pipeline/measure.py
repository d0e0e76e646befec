"""Measurement helpers shared by the example runners (examples/*/run.py): alternating timing of
kernel variants and the standard outputs of a decoded trace. GPU + torch needed when called; host_decode
only for outputs. Kept here (not in ikp_cute) because they are example scaffolding, not the profiler."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np


def time_alternating(variants: dict, launches: int) -> dict[str, np.ndarray]:
    """Per-launch GPU times (ms) of each variant, launched round-robin (order rotated every round).

    A variant is a callable, or a (setup, launch) pair whose setup (e.g. zeroing a work counter) runs
    outside the timed interval. Launches queue up behind a sleep kernel sized from the measured host
    time, so a slow Python launch path does not open gaps inside the timed intervals.
    """
    import torch

    variants = {n: (v if isinstance(v, tuple) else (None, v)) for n, v in variants.items()}
    names = list(variants)
    times = {n: [] for n in names}
    chunk = 8  # rounds enqueued behind one sleep kernel
    for setup, fn in variants.values():  # warm-up (compile, caches)
        _call(setup, fn)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for setup, fn in variants.values():
        _call(setup, fn)
    torch.cuda.synchronize()
    host_ms_per_launch = (time.perf_counter() - t0) * 1e3 / len(names)
    sleep_cycles = int(2e6 * host_ms_per_launch * len(names) * chunk * 1.5)  # ~2 GHz: cycles per ms
    done = 0
    while done < launches:
        torch.cuda._sleep(sleep_cycles)
        events = []
        for r in range(min(chunk, launches - done)):
            order = names[(done + r) % len(names):] + names[: (done + r) % len(names)]
            for n in order:
                setup, fn = variants[n]
                if setup is not None:
                    setup()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                events.append((n, start, end))
        torch.cuda.synchronize()
        for n, start, end in events:
            times[n].append(start.elapsed_time(end))
        done += chunk
    return {n: np.asarray(t) for n, t in times.items()}


def _call(setup, fn):
    if setup is not None:
        setup()
    fn()


def write_outputs(trace, out_dir: Path, stem: str, plots: bool) -> dict:
    from host_decode.analysis.regions import analyze
    from host_decode.analysis.stats import region_summary, summary_rows
    from host_decode.writers.perfetto import write_perfetto

    out_dir.mkdir(parents=True, exist_ok=True)
    stats = {
        "regions": summary_rows(region_summary(trace), trace.names),
        "analysis": analyze(trace),
        "loss": trace.loss.to_json(),
    }
    (out_dir / f"{stem}_stats.json").write_text(json.dumps(stats, indent=1, default=float))
    write_perfetto(trace, out_dir / f"{stem}.pftrace.gz")
    if plots:
        from host_decode.reports.plots import plot_all

        plot_all(trace, out_dir / f"{stem}_plots")
    return stats


def save_capture_with_problem(session, dest: Path, **problem) -> Path:
    """session.save(dest) plus an `example` sidecar key describing the problem, which the CPU tests
    (tests/unit/examples/test_examples_compile.py) use to derive the structure the capture must decode to."""
    from host_decode.load.capture import save_capture

    meta = session.meta()
    meta.pop("format", None)
    return save_capture(dest, session.records(), session.names(), example=problem, **meta)


def example_main(doc: str, default_out: str, small_capture, run, argv=None) -> int:
    """The run.py command line every example shares: write the small committed-size capture, then time
    and trace the full problem (`run(out, launches=...)` yields JSON-able result rows)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(default_out))
    ap.add_argument("--launches", type=int, default=200)
    args = ap.parse_args(argv)
    import sys

    import ikp_cute

    ikp_cute.require_gpu(f"examples/{Path(sys.argv[0]).resolve().parent.name}/run.py")  # one line without a GPU
    args.out.mkdir(parents=True, exist_ok=True)
    small_capture(args.out / "capture.npy")
    for row in run(args.out, launches=args.launches):
        print(json.dumps(row, default=float))
    return 0
