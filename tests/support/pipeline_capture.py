"""Hand-built pipeline captures for tests: a v1 buffer written lane by lane as the device's pipeline tracer
would (regions around blocking calls, instants for signals), with the sidecar metadata beside it.

Times are given in timer ticks of TICK ns from `base_ns`; a base near 2**32 ns puts the 32-bit timer's wrap
inside the capture (the decoder unwraps it, so analyses see the same times either way).
"""

from __future__ import annotations

import numpy as np

from host_decode.core import wire
from host_decode.core.decoder import decode

TICK = 32  # ns: %globaltimer's step on H100/H200
BEGIN, END, INSTANT, FINALIZE = (int(t) for t in wire.EventType)


def pipeline_entry(name: str, ids: dict, stages: int, cls: str = "PipelineTmaAsync", **extra) -> dict:
    """One sidecar ``pipelines`` entry with the keys the device side writes."""
    return {"name": name, "class": cls, "site": f"{name}.py:1", "num_stages": stages, "producer_arrivals": 1,
            "consumer_arrivals": 1, "tx_bytes": 16384, "ids": dict(ids), **extra}


class PipelineCapture:
    """Records per lane as (tick, event, type), kept in program order; `trace()` decodes them."""

    def __init__(self, num_blocks: int, num_groups: int, base_ns: int = 1_000_000 * TICK, anchored: bool = False,
                 anchor_tick: int | None = None):
        """anchored: each lane starts with the device's two anchor records (the 64-bit %globaltimer at its
        start), so the decoded times are absolute, as in a real capture (base_ns then e.g. ~1.7e18). The anchors
        are at the lane's first record's tick, or at `anchor_tick` (the kernel's entry, where the device writes
        them, before any call of the lane)."""
        self.num_blocks, self.num_groups, self.base, self.anchored = num_blocks, num_groups, base_ns, anchored
        self.anchor_tick = anchor_tick
        self.lanes: dict[int, list] = {}
        self.dropped: dict[int, int] = {}

    def lane(self, block: int, group: int) -> list:
        return self.lanes.setdefault(block * self.num_groups + group, [])

    def region(self, block: int, group: int, event: int, start: int, end: int) -> "PipelineCapture":
        self.lane(block, group).extend([(start, event, BEGIN), (end, event, END)])
        return self

    def instant(self, block: int, group: int, event: int, t: int) -> "PipelineCapture":
        self.lane(block, group).append((t, event, INSTANT))
        return self

    def overflow(self, block: int, group: int, keep: int, dropped: int) -> "PipelineCapture":
        """Keep the lane's first `keep` records (a program-order prefix) and say `dropped` were lost."""
        lane = block * self.num_groups + group
        self.lanes[lane] = self.lanes[lane][:keep]
        self.dropped[lane] = dropped
        return self

    def ns(self, tick: int) -> int:
        """The absolute time of a tick, as the decoded trace holds it."""
        return self.base + tick * TICK

    def buffer(self) -> np.ndarray:
        per_lane = max(len(v) for v in self.lanes.values()) + 4
        stride = self.num_blocks * self.num_groups
        buf = np.zeros(wire.buffer_slots(stride, per_lane), np.uint64)
        buf[0] = wire.pack_header(self.num_blocks, self.num_groups)
        for lane, recs in sorted(self.lanes.items()):
            ticks = [r[0] for r in recs]
            assert ticks == sorted(ticks), f"lane {lane}: a device timer never runs backwards in program order"
            out = [(self.ns(t), e, kind) for t, e, kind in recs]
            if self.anchored:
                start = self.ns(self.anchor_tick if self.anchor_tick is not None else ticks[0] if ticks else 0)
                out = [(start, wire.ANCHOR_LO_EVENT_ID, INSTANT), (start >> 32, wire.ANCHOR_HI_EVENT_ID, INSTANT)] + out
            if lane in self.dropped:
                out.append((self.dropped[lane], wire.DROPPED_EVENT_ID, INSTANT))
            out.append((self.ns(ticks[-1] if ticks else 0), 0, FINALIZE))
            for k, (t, e, kind) in enumerate(out):
                buf[wire.slot_index(lane, k, stride)] = wire.pack_record(t & 0xFFFF_FFFF, wire.make_tag(lane, e, kind))
        return buf

    def trace(self, pipelines: list, group_names: dict | None = None, **meta):
        meta = {"pipelines": pipelines, **meta}
        names = {"groups": {str(k): v for k, v in (group_names or {}).items()}}
        return decode(self.buffer(), names=names, meta=meta)


def simulate_pipeline(rng, stages: int, uses: int, consumers: int, *, blocked_only: bool, skip: float = 0.5,
                      anchor_tick: int | None = None, details: bool = False):
    """One block of a TMA pipeline run by the protocol, in ticks: a producer (group 0) acquires each stage use,
    commits (the issue) and its data lands 5..30 ticks later; each consumer (groups 1..) waits (a region; a
    waiter wakes 0..1 tick after the data lands), works, releases. A wait that found the data ready is skipped
    (a try_wait) with probability `skip`; `blocked_only` keeps only regions of >= 8 ticks (the device's
    default). Returns (PipelineCapture, truth {(stage, k): (issue, ready)}, ids), and with `details` a fourth
    item: {"use": {(group, stage, begin tick): (stage, k)} of every recorded region, "release": {(stage, k): the latest
    consumer release of that use}}. `anchor_tick`: every lane's anchor records at that tick (the kernel's entry;
    the capture's times are then absolute)."""
    ids = {"acquire": 10, "wait": 20, "commit": 30, "release": 40}
    cap = PipelineCapture(1, 1 + consumers, anchored=anchor_tick is not None, anchor_tick=anchor_tick)
    region_use = {}
    free = {}  # (stage, k) -> the tick its empty barrier completes (the latest release of the use before)
    truth = {}
    consumer_t = [int(rng.integers(0, 5)) for _ in range(consumers)]
    producer_t = 0
    recorded = [[] for _ in range(1 + consumers)]
    releases: dict = {}
    for n in range(uses):
        s, k = n % stages, n // stages
        # the producer: its acquire waits for every consumer's release of this stage's previous use
        begin = producer_t
        ready_to_fill = free.get((s, k), 0)
        end = max(begin, ready_to_fill + int(rng.integers(0, 2)))
        commit = end + int(rng.integers(0, 2))
        ready = commit + int(rng.integers(5, 31))
        truth[(s, k)] = (commit, ready)
        if not blocked_only or end - begin >= 8:
            recorded[0].append((begin, "r", ids["acquire"] + s, end))
            region_use[(0, s, begin)] = (s, k)
        recorded[0].append((commit, "i", ids["commit"] + s, None))
        producer_t = commit + int(rng.integers(0, 4))
        rel = []
        for c in range(consumers):
            b = consumer_t[c]
            if b >= ready and rng.random() < skip:
                e = b  # a try_wait found the data: no wait ran
            else:
                e = max(b, ready + int(rng.integers(0, 2))) if b < ready else b + int(rng.integers(0, 2))
                if not blocked_only or e - b >= 8:
                    recorded[1 + c].append((b, "r", ids["wait"] + s, e))
                    region_use[(1 + c, s, b)] = (s, k)
            r = e + int(rng.integers(1, 12))
            recorded[1 + c].append((r, "i", ids["release"] + s, None))
            rel.append(r)
            consumer_t[c] = r + int(rng.integers(0, 3))
        releases[(s, k)] = max(rel)
        free[(s, k + 1)] = max(rel)
    for g, recs in enumerate(recorded):
        for t, kind, event, end in recs:
            cap.region(0, g, event, t, end) if kind == "r" else cap.instant(0, g, event, t)
    if details:
        return cap, truth, ids, {"use": region_use, "release": releases}
    return cap, truth, ids


# A known schedule: one block, pipeline K of 2 stages used 3 times each (use n: stage n % 2, k = n // 2; k = 2 is
# past the phase bit's wrap), ticks. Per use: the producer's acquire region, its commit (= the TMA issue), the
# data's true ready time, each consumer's wait region (None: a try_wait found the data ready, no wait ran) and
# release. Ids: K_IDS; groups: producer 0, consumers 1 and 2.
K_IDS = {"acquire": 10, "wait": 20, "commit": 30, "release": 40}
#   n  s  k  acquire   commit  ready  c1 wait   c1 rel  c2 wait   c2 rel
K_SCHEDULE = [
    (0, 0, 0, (0, 1), 2, 20, (3, 20), 25, None, 26),
    (1, 1, 0, (3, 4), 5, 30, None, 33, None, 31),
    (2, 0, 1, (6, 27), 27, 40, (35, 41), 45, (32, 40), 44),
    (3, 1, 1, (28, 34), 35, 50, (51, 52), 55, None, 53),
    (4, 0, 2, (36, 46), 46, 60, (56, 60), 62, (54, 61), 63),
    (5, 1, 2, (47, 56), 56, 70, None, 72, None, 71),
]


def k_capture(schedule=K_SCHEDULE, signals: bool = True, base_ns: int = 1_000_000 * TICK,
              anchored: bool = False) -> PipelineCapture:
    """The records of `schedule` (K_SCHEDULE's columns) as the tracer writes them: at level signals the commits
    and releases too."""
    ids = K_IDS
    cap = PipelineCapture(1, 3, base_ns, anchored)
    for _, s, _, acq, commit, _, _, _, _, _ in schedule:
        cap.region(0, 0, ids["acquire"] + s, *acq)
        if signals:
            cap.instant(0, 0, ids["commit"] + s, commit)
    for group, wait_col, rel_col in ((1, 6, 7), (2, 8, 9)):
        events = []
        for row in schedule:
            s, wait, rel = row[1], row[wait_col], row[rel_col]
            if wait is not None:
                events.append((wait[0], "region", ids["wait"] + s, wait))
            if signals:
                events.append((rel, "instant", ids["release"] + s, rel))
        for _, kind, event, t in sorted(events, key=lambda e: e[0]):
            cap.region(0, group, event, *t) if kind == "region" else cap.instant(0, group, event, t)
    return cap
