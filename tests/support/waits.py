"""Hand-built pipeline captures whose dependencies are known (the timelines are drawn in fa_like's docstring,
in ticks of 32 ns).
"""

from pathlib import Path

from host_decode.core import wire
from host_decode.core.decoder import decode
from host_decode.reports.html import build_report_data, render_html
from tests.support.buffers import INST, B, BufferBuilder, E, F

TICK = 32
ACQ, WAIT, COMMIT, RELEASE = 10, 20, 30, 40  # first event id of each op of pipeline K (stage s: id + s)
PRODUCER, MMA0, MMA1 = 0, 1, 2
GROUPS = {PRODUCER: "producer", MMA0: "mma0", MMA1: "mma1"}


def k_pipeline(ops=("acquire", "wait", "commit", "release"), stages=2, **extra):
    base = {"acquire": ACQ, "wait": WAIT, "commit": COMMIT, "release": RELEASE}
    return {
        "name": "K",
        "class": "PipelineTmaAsync",
        "site": "k.py:1",
        "num_stages": stages,
        "producer_arrivals": 1,
        "consumer_arrivals": 2,
        "tx_bytes": 16384,
        "ids": {op: base[op] for op in ops},
        **extra,
    }


class Capture:
    """Records per lane as (tick, event, type); written in program order with a time origin `base_ns`."""

    def __init__(self, num_blocks, num_groups, base_ns=1_000_000 * TICK):
        self.num_blocks, self.num_groups, self.base = num_blocks, num_groups, base_ns
        self.lanes: dict[int, list] = {}
        self.dropped: dict[int, int] = {}

    def lane(self, block, group):
        return self.lanes.setdefault(block * self.num_groups + group, [])

    def region(self, block, group, event, a, z):
        self.lane(block, group).extend([(a, event, B), (z, event, E)])
        return self

    def instant(self, block, group, event, t):
        self.lane(block, group).append((t, event, INST))
        return self

    def overflow(self, block, group, keep, dropped):
        """Keep the first `keep` records of the lane (program order), as a device that ran out of room."""
        lane = block * self.num_groups + group
        self.lanes[lane] = self.lanes[lane][:keep]
        self.dropped[lane] = dropped
        return self

    def buffer(self):
        n = max(len(v) for v in self.lanes.values()) + 4
        b = BufferBuilder(self.num_blocks, self.num_groups, n)
        for lane, recs in sorted(self.lanes.items()):
            ticks = [r[0] for r in recs]
            assert ticks == sorted(ticks), f"lane {lane}: a device timer never runs backwards in program order"
            last = 0
            for tick, event, etype in recs:
                b.put(lane, self.base + tick * TICK, event, etype)
                last = tick
            if lane in self.dropped:
                b.put(lane, self.dropped[lane], wire.DROPPED_EVENT_ID, INST)
            b.put(lane, self.base + last * TICK, 0, F)
        return b.buf

    def trace(self, pipelines, barriers=None, **meta):
        meta = {"pipelines": pipelines, **meta}
        if barriers:
            meta["barriers"] = barriers
        return decode(self.buffer(), names={"groups": {str(k): v for k, v in GROUPS.items()}}, meta=meta)


def fa_like(signals=True, base_ns=1_000_000 * TICK):
    """One block: producer and two consumers on pipeline K, 2 stages each used twice.

    producer: acq0 0-1 | c0@2 | acq1 3-4 | c1@5 | acq0 6-20 (freed by mma1's r0@20) | c0@21 |
              acq1 22-30 (freed by mma1's r1@30) | c1@34
    mma0:     w0 1-3 (c0@2) r0@10 | w1 11-12 r1@18 | w0 19-22 (c0@21) r0@25 | w1 26-35 (c1@34) r1@40
    mma1:     w0 0-3 (c0@2) r0@20 | w1 21-22 r1@30 | w0 31-32 r0@33 | w1 33-35 (c1@34) r1@45
    """
    c = Capture(1, 3, base_ns)
    P, M0, M1 = PRODUCER, MMA0, MMA1
    for a, z, s, commit in [(0, 1, 0, 2), (3, 4, 1, 5), (6, 20, 0, 21), (22, 30, 1, 34)]:
        c.region(0, P, ACQ + s, a, z)
        if signals:
            c.instant(0, P, COMMIT + s, commit)
    for g, waits in [
        (M0, [(1, 3, 0, 10), (11, 12, 1, 18), (19, 22, 0, 25), (26, 35, 1, 40)]),
        (M1, [(0, 3, 0, 20), (21, 22, 1, 30), (31, 32, 0, 33), (33, 35, 1, 45)]),
    ]:
        for a, z, s, release in waits:
            c.region(0, g, WAIT + s, a, z)
            if signals:
                c.instant(0, g, RELEASE + s, release)
    return c


def synthetic_page(tmp_path: Path) -> tuple[Path, dict]:
    trace = fa_like().trace([k_pipeline()], kernel="synthetic_fa")
    data = build_report_data(trace)
    path = tmp_path / "report.html"
    path.write_text(render_html(data))
    return path, data
