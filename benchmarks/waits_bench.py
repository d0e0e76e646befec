"""Pipeline matching (host_decode.analysis.pipelines) and async-unit intervals (host_decode.analysis.async_units)
against decoding, side by side in one run.

    python benchmarks/waits_bench.py                          # 132 blocks x 500 iterations (~0.6 M records)
    python benchmarks/waits_bench.py --blocks 528 --iters 2000  # ~9.5 M records

The capture: per block a producer and two consumers on one 4-stage pipeline with commits and releases
(the schedule of tests/unit/host_decode/analysis/test_waits.py::test_many_stages_reused_many_times), repeated
over blocks with shifted times; the pipeline is a TMA one, so every commit is a load. Prints decode, match, async units,
summary (+ critical path, async units again) seconds and their ratios to decode.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from host_decode.analysis import async_units as au
from host_decode.analysis import pipelines as pl
from host_decode.analysis import waits as ws
from host_decode.core import wire
from host_decode.core.decoder import decode

ACQ, WAIT, COMMIT, RELEASE, STAGES, TICK = 10, 20, 30, 40, 4, 32
PIPELINE = {
    "name": "K",
    "class": "PipelineTmaAsync",
    "op_type": "TmaLoad",
    "tx_bytes": 16384,
    "num_stages": STAGES,
    "ids": {"acquire": ACQ, "wait": WAIT, "commit": COMMIT, "release": RELEASE},
}


def one_block(iters: int, rng) -> dict[int, list]:
    """(tick, event, type) per group: the producer acquires a free stage and commits; each consumer
    waits for the commit and releases a few ticks later."""
    recs: dict[int, list] = {0: [], 1: [], 2: []}
    t_prod, t_cons, rel = 0, {1: 0, 2: 0}, {}
    for i in range(iters):
        s, k = i % STAGES, i // STAGES
        a = t_prod
        z = max(a + 1, max(rel[(s, k - 1, g)] for g in (1, 2)) if k else a)
        recs[0] += [(a, ACQ + s, 0), (z, ACQ + s, 1)]
        commit = z + 1 + int(rng.integers(0, 3))
        recs[0].append((commit, COMMIT + s, 2))
        t_prod = commit + 1
        for g in (1, 2):
            a = t_cons[g]
            z = max(a + 1, commit + 1)
            release = z + 1 + int(rng.integers(1, 9))
            recs[g] += [(a, WAIT + s, 0), (z, WAIT + s, 1), (release, RELEASE + s, 2)]
            rel[(s, k, g)], t_cons[g] = release, release + 1
    return recs


def make_buffer(blocks: int, iters: int) -> np.ndarray:
    recs = one_block(iters, np.random.default_rng(1))
    groups, per_lane = 3, max(len(v) for v in recs.values())
    stride = blocks * groups
    buf = np.zeros(wire.buffer_slots(stride, per_lane), np.uint64)
    buf[0] = wire.pack_header(blocks, groups)
    for g, rows in recs.items():
        a = np.array(rows, np.int64)
        k = np.arange(a.shape[0])
        for b in range(blocks):
            lane = b * groups + g
            buf[wire.slot_index(lane, k, stride)] = wire.pack_records(
                (10_000 + 7 * b + a[:, 0]) * TICK, np.full(k.size, lane), a[:, 1], a[:, 2]
            )
    return buf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=132)
    ap.add_argument("--iters", type=int, default=500)
    args = ap.parse_args()
    buf = make_buffer(args.blocks, args.iters)
    t0 = time.perf_counter()
    trace = decode(buf, names={"groups": {"0": "producer", "1": "mma0", "2": "mma1"}}, meta={"pipelines": [PIPELINE]})
    t1 = time.perf_counter()
    pa = pl.analyze_pipelines(trace)
    t2 = time.perf_counter()
    units = au.analyze_async_units(trace, pa)
    t3 = time.perf_counter()
    summary = ws.waits_summary(trace, pa)
    t4 = time.perf_counter()
    dec, match, asy, summ = t1 - t0, t2 - t1, t3 - t2, t4 - t3
    print(
        f"{int(np.count_nonzero(buf)) - 1:,} records, {pa.waits.size:,} waits, {pa.flows().size:,} flows, "
        f"unmatched {summary['unmatched'] or 'none'}, {units.intervals.size:,} async-unit intervals"
    )
    print(f"{'step':<34}{'s':>8}{'x decode':>10}")
    for name, sec in (("decode", dec), ("match (analyze_pipelines)", match), ("async units (analyze_async_units)", asy),
                      ("summary + critical path + units", summ)):
        print(f"{name:<34}{sec:>8.2f}{sec / dec:>10.1f}")


if __name__ == "__main__":
    main()
