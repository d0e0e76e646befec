"""Decode throughput and peak memory.

    python benchmarks/decode_bench.py                  # 1 M records: records/s vs a per-record Python loop
    python benchmarks/decode_bench.py --records 100e6  # peak memory for a 100 M-record buffer (needs ~4 GB)

Goals (issue 2): >= 20 M records/s on a 2-core CPU; decoder peak memory <= 3x the raw buffer.
Peak memory is what the decoder allocates on top of the input (tracemalloc sees numpy's allocations).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from host_decode.core import wire
from host_decode.core.decoder import decode


def make_buffer(records: int, groups: int = 4, regions_per_lane: int = 256, seed: int = 0,
                lane_spread_ns: int = 2**32) -> np.ndarray:
    """A full buffer: per lane two anchors, then (outer B, inner B, inner E, outer E) per iteration and a
    finalize; filled a few thousand lanes at a time so that 100 M records fit in memory. Lanes start at
    random times within lane_spread_ns (the default, a whole timer period, makes every lane's timeline
    cross the 2**32 wrap somewhere)."""
    rpl = 2 * regions_per_lane + 3
    lanes = max(groups, (records // rpl) // groups * groups)
    rng = np.random.default_rng(seed)
    k = np.arange(rpl)
    j = np.maximum(k - 2, 0)
    ev = np.array([1, 2, 2, 1])[j % 4]
    ty = np.array([0, 0, 1, 1])[j % 4]
    ev[:2], ty[:2] = [wire.ANCHOR_LO_EVENT_ID, wire.ANCHOR_HI_EVENT_ID], int(wire.EventType.INSTANT)
    ev[-1], ty[-1] = 5, int(wire.EventType.FINALIZE)
    buf = np.zeros(wire.buffer_slots(lanes, rpl), np.uint64)
    buf[0] = wire.pack_header(lanes // groups, groups)
    rows = buf[1:].reshape(rpl, lanes)
    for l0 in range(0, lanes, 4096):
        l1 = min(lanes, l0 + 4096)
        steps = np.cumsum(rng.integers(1, 400, (rpl, l1 - l0)), axis=0)
        t = (1 << 40) + rng.integers(0, lane_spread_ns, l1 - l0)[None, :] + steps
        t[1] = t[0] >> 32  # ANCHOR_HI's field is the high half of the anchor read
        lane = np.broadcast_to(np.arange(l0, l1), t.shape)
        event, etype = np.broadcast_to(ev[:, None], t.shape), np.broadcast_to(ty[:, None], t.shape)
        rows[:, l0:l1] = wire.pack_records(t, lane, event, etype)
    return buf


def python_loop_decode(buf: np.ndarray) -> int:
    """The per-record loop peers use (reference speed only)."""
    nb, ng = wire.unpack_header(int(buf[0]))
    open_, spans = {}, 0
    for i in range(1, buf.size):
        r = int(buf[i])
        if not r:
            continue
        tag = r & 0xFFFFFFFF
        key = (tag >> 12, (tag >> 2) & 1023)
        typ = tag & 3
        if typ == 0:
            open_.setdefault(key, []).append(r >> 32)
        elif typ == 1 and open_.get(key):
            open_[key].pop()
            spans += 1
    return spans


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=float, default=1e6)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = int(args.records)
    buf = make_buffer(n)
    nrec = int(np.count_nonzero(buf[1:]))
    raw = buf.nbytes
    decode(buf)  # warm up
    times = []
    for _ in range(args.repeat if n <= 10_000_000 else 1):
        t0 = time.perf_counter()
        trace = decode(buf)
        times.append(time.perf_counter() - t0)
    best = min(times)
    med = float(np.median(times))
    tracemalloc.start()
    decode(buf)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sub = buf[: min(buf.size, 200_001)].copy()
    t0 = time.perf_counter()
    python_loop_decode(sub)
    loop_rate = (np.count_nonzero(sub[1:])) / (time.perf_counter() - t0)
    rate = nrec / med
    print(f"buffer: {nrec:,} records, {raw / 2**20:.1f} MiB raw, {trace.spans.size:,} spans, "
          f"{trace.num_lanes} lanes")
    print(f"{'decoder':<28}{'records/s':>14}{'vs loop':>10}")
    print(f"{'ikp (median of %d)' % len(times):<28}{rate / 1e6:>12.1f} M{rate / loop_rate:>9.1f}x")
    print(f"{'ikp (best)':<28}{nrec / best / 1e6:>12.1f} M{nrec / best / loop_rate:>9.1f}x")
    print(f"{'per-record Python loop':<28}{loop_rate / 1e6:>12.2f} M{1.0:>9.1f}x")
    print(f"peak decoder memory: {peak / 2**20:.1f} MiB = {peak / raw:.2f}x the raw buffer (goal <= 3x)")


if __name__ == "__main__":
    main()
