"""Synthetic captures of two flag patterns with a known answer (tests/support/flag_captures.py writes them):

* `all_gather`: `world` ranks of `blocks` blocks, two warps a block. Warp 0 pushes its rank's row block `b` to
  every rank ("push", PUSH_NS) and adds one to the flag (src rank, b) of every destination's symmetric buffer
  ``flags``; warp 1 runs the GEMM of its own rows, then for every other rank (the next rank first) waits until
  that rank's flag is >= 1 (recorded only when it blocked) and runs its GEMM ("gemm", GEMM_NS). One block of
  one rank starts `delay_ns` late. Each rank's clock is off by a known amount: the sidecar states an estimate
  and its error bound, the true offset differs from the estimate by less than that bound.
* `megakernel`: one rank, persistent blocks taking tasks from one queue in order: layer-1 tasks ("l1_task")
  each add one to their row block's counter in the local buffer ``ready``; a layer-2 task ("l2_task") first
  waits until its row block's counter is >= the number of layer-1 tiles. One layer-1 task runs `delay_ns`
  longer (a spin before its work).

Both return the truth a test checks the analysis against.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from tests.support.flag_captures import RankCapture, signal_site, symmetric_bases, symmetric_entries, wait_site

T0 = 1_750_000_000_000_000_000  # ns: a %globaltimer reading
PUSH_NS, GEMM_NS, LATENCY_NS = 5000, 1500, 400
SIGNAL_ID, WAIT_ID, PUSH_ID, GEMM_ID = 1, 2, 10, 11
L1_NS, L2_NS = 2000, 1500
L1_ID, L2_ID = 20, 21


def all_gather(out: Path, world: int, blocks: int = 4, delay: tuple = (1, 2, 20_000), seed: int = 0,
               error_ns: int = 100) -> dict:
    """Writes rank_<r>.npy captures into `out`; returns the truth (module docstring)."""
    rng = np.random.default_rng(seed)
    d_rank, d_block, d_ns = delay
    est = rng.integers(-50_000_000, 50_000_000, size=world)
    est[0] = 0
    true_off = est + rng.integers(-error_ns + 1, error_ns, size=world)  # device = true - true_off
    true_off[0] = 0
    start = T0 + rng.integers(0, 300, size=(world, blocks))
    start[d_rank, d_block] += d_ns
    push_end = start + PUSH_NS + rng.integers(0, 64, size=(world, blocks))
    nbytes = world * blocks * 4
    bases = symmetric_bases(world, nbytes, seed)
    sites = [signal_site(SIGNAL_ID, "ag_gemm.py:93", scope="sys"), wait_site(WAIT_ID, "ag_gemm.py:120", expected=1,
                                                                             scope="sys")]
    for r in range(world):
        cap = RankCapture(rank=r, num_blocks=blocks, warps=2, sites=sites,
                          flag_buffers=symmetric_entries("flags", bases, r, nbytes),
                          clock_offset_ns=int(est[r]), clock_error_ns=error_ns,
                          events={PUSH_ID: "push", GEMM_ID: "gemm"}, kernel="ag_gemm")
        dev = lambda t: int(t - true_off[r])  # noqa: E731 - the rank's own clock
        for b in range(blocks):
            s = int(start[r, b])
            cap.region(b, 0, PUSH_ID, dev(s), dev(push_end[r, b]))
            for j in range(world):
                dst = (r + 1 + j) % world
                cap.signal(b, 0, SIGNAL_ID, dev(push_end[r, b]), bases[r][dst] + (r * blocks + b) * 4)
            t = s
            cap.region(b, 1, GEMM_ID, dev(t), dev(t + GEMM_NS))
            t += GEMM_NS
            for j in range(1, world):
                src = (r + j) % world
                ready = int(push_end[src, b]) + LATENCY_NS
                if ready > t:
                    cap.wait(b, 1, WAIT_ID, dev(t), dev(ready), bases[r][r] + (src * blocks + b) * 4)
                    t = ready
                cap.region(b, 1, GEMM_ID, dev(t), dev(t + GEMM_NS))
                t += GEMM_NS
        cap.save(out / f"rank_{r}.npy")
    return {"rank": d_rank, "block": d_block, "delay_ns": d_ns, "start": start, "true_offset": true_off}


def megakernel(out: Path, blocks: int = 8, row_blocks: int = 4, tiles: int = 6, delayed: int = 9,
               delay_ns: int = 20_000, seed: int = 0, clock_offset_ns: int = 0) -> dict:
    """Writes megakernel.npy into `out`; returns the truth (module docstring). `delayed`: the index of the
    delayed layer-1 task in the queue."""
    rng = np.random.default_rng(seed)
    base = 0x7F12_3400_0000
    cap = RankCapture(rank=0, num_blocks=blocks, warps=1,
                      sites=[signal_site(SIGNAL_ID, "megakernel_deps.py:71"),
                             wait_site(WAIT_ID, "megakernel_deps.py:88", expected=tiles)],
                      flag_buffers=[{"name": "ready", "owner_rank": 0, "base": base, "bytes": 4 * row_blocks,
                                     "elem_bytes": 4}],
                      clock_offset_ns=clock_offset_ns, clock_error_ns=0, events={L1_ID: "l1_task", L2_ID: "l2_task"},
                      kernel="megakernel_deps")
    tasks = [(1, rb, j) for rb in range(row_blocks) for j in range(tiles)]
    tasks += [(2, rb, j) for rb in range(row_blocks) for j in range(tiles)]
    free = [(T0 + int(rng.integers(0, 200)), b) for b in range(blocks)]
    heapq.heapify(free)
    count_done = {rb: [] for rb in range(row_blocks)}  # times the counter was incremented
    where = {}
    dev = lambda t: int(t - clock_offset_ns)  # noqa: E731
    for i, (layer, rb, _) in enumerate(tasks):
        t, b = heapq.heappop(free)
        if layer == 1:
            dur = L1_NS + int(rng.integers(0, 100)) + (delay_ns if i == delayed else 0)
            cap.region(b, 0, L1_ID, dev(t), dev(t + dur))
            t += dur
            cap.signal(b, 0, SIGNAL_ID, dev(t), base + 4 * rb)
            count_done[rb].append(t)
            where[i] = b
        else:
            ready = max(count_done[rb]) + LATENCY_NS
            if ready > t:
                cap.wait(b, 0, WAIT_ID, dev(t), dev(ready), base + 4 * rb)
                t = ready
            dur = L2_NS + int(rng.integers(0, 100))
            cap.region(b, 0, L2_ID, dev(t), dev(t + dur))
            t += dur
        heapq.heappush(free, (t, b))
    cap.save(out / "megakernel.npy")
    return {"block": where[delayed], "delay_ns": delay_ns, "row_block": tasks[delayed][1]}


def ring(out: Path, world: int, blocks: int = 2, seed: int = 0) -> dict:
    """`world` small rank captures of a ring exchange (rank r's block b adds one to block b's flag of rank r + 1,
    then waits on its own, set by rank r - 1): the same few records per rank whatever the rank count, so an
    export's work grows linearly with it. Returns the waits that blocked per rank (all of them here)."""
    rng = np.random.default_rng(seed)
    base = 0x7E00_0000_0000
    nbytes = 4 * blocks
    sites = [signal_site(SIGNAL_ID, "ring.py:1", scope="sys"), wait_site(WAIT_ID, "ring.py:2", expected=1, scope="sys")]
    start = T0 + rng.integers(0, 300, size=(world, blocks))
    sent = start + PUSH_NS
    for r in range(world):
        buffers = [{"name": "ring", "owner_rank": o, "base": base + o * (1 << 20), "bytes": nbytes, "elem_bytes": 4}
                   for o in {r, (r + 1) % world}]
        cap = RankCapture(rank=r, num_blocks=blocks, sites=sites, flag_buffers=buffers, clock_offset_ns=0,
                          clock_error_ns=50, events={PUSH_ID: "push", GEMM_ID: "gemm"}, kernel="ring")
        for b in range(blocks):
            cap.region(b, 0, PUSH_ID, int(start[r, b]), int(sent[r, b]))
            cap.signal(b, 0, SIGNAL_ID, int(sent[r, b]), base + ((r + 1) % world) * (1 << 20) + 4 * b)
            ready = int(sent[(r - 1) % world, b]) + LATENCY_NS
            begin = int(sent[r, b]) + 10
            cap.wait(b, 0, WAIT_ID, begin, max(ready, begin + 64), base + r * (1 << 20) + 4 * b)
            cap.region(b, 0, GEMM_ID, max(ready, begin + 64), max(ready, begin + 64) + GEMM_NS)
        cap.save(out / f"rank_{r:05d}.npy")
    return {"waits": world * blocks, "signals": world * blocks}
