"""Captures of the flags tracer, built record by record as docs/flags.md specifies (a test builder: the
device side writes the same records on a GPU).

Per lane (block, warp) in program order: two anchors (ANCHOR_LO, ANCHOR_HI) at the lane's first time, then

* a region: BEGIN, END of its event id;
* a signal: INSTANT of its call site's id at its time, then FLAG_ADDR (timer field: the flag's address >> 2,
  low 32 bits), then FLAG_VALUE when the signal has one (an add's amount when it is not the site's `value`, a
  store's value when the site's `value` is "recorded");
* a wait that blocked: BEGIN, END of its site's id, FLAG_ADDR, then FLAG_VALUE for its expected value when the
  site's `expected` is "recorded" and for its reset value when the site's `reset` is.

The sidecar carries ``flags`` (one entry per call site), ``flag_buffers`` (this rank's mappings), ``rank``,
``clock_offset_ns``, ``clock_error_ns`` and ``clock_reference``. Times given to the builder are on the
rank's own clock.

Call sites are entries of the sidecar schema's FLAG_SITE (host_decode/load/sidecar.py); the reserved ids are
host_decode.core.wire's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from host_decode.core import wire
from host_decode.load.capture import save_capture

FLAG_ADDR = wire.FLAG_ADDR_EVENT_ID
FLAG_VALUE = wire.FLAG_VALUE_EVENT_ID
BEGIN, END, INSTANT = (int(wire.EventType.BEGIN), int(wire.EventType.END), int(wire.EventType.INSTANT))
M32 = 0xFFFF_FFFF


def signal_site(event_id: int, site: str, op: str = "red_add1", scope: str = "gpu", update: str = "add",
                value=1) -> dict:
    """A signal site: `update` "add" (of `value` per lane) or "store" (of `value`); "recorded": in FLAG_VALUE."""
    return {"id": event_id, "kind": "signal", "op": op, "order": "release", "scope": scope, "site": site,
            "update": update, "value": value}


def wait_site(event_id: int, site: str, expected="recorded", cmp: str = "ge", scope: str = "gpu",
              op: str = "spin_lock_ld_lt_relaxed_wait", reset=None) -> dict:
    """A wait site: until the flag `cmp` `expected` ("recorded": in FLAG_VALUE); `reset`: an atom.cas wait's."""
    entry = {"id": event_id, "kind": "wait", "op": op, "order": "relaxed", "scope": scope, "cmp": cmp, "site": site,
             "expected": expected}
    if reset is not None:
        entry["reset"] = reset
    return entry


@dataclasses.dataclass
class RankCapture:
    """One rank's launch: `warps` lanes per block; records added in any order, written per lane in time
    order (equal times: in the order added)."""

    rank: int
    num_blocks: int
    warps: int = 1
    sites: list = dataclasses.field(default_factory=list)
    flag_buffers: list = dataclasses.field(default_factory=list)
    events: dict = dataclasses.field(default_factory=dict)
    clock_offset_ns: int | None = 0
    clock_error_ns: int | None = 0
    clock_reference: str | None = "rank 0 %globaltimer"
    launch_index: int = 0
    kernel: str = "flags_test"

    def __post_init__(self):
        self.items: dict[int, list] = {}  # lane -> [(time, order, [(timer, event, type)])]
        self._n = 0
        for s in self.sites:
            self.events.setdefault(s["id"], f"{s['kind']}@{s['site']}")

    def _add(self, block: int, warp: int, t: int, records: list) -> None:
        lane = block * self.warps + warp
        self.items.setdefault(lane, []).append((int(t), self._n, records))
        self._n += 1

    def region(self, block: int, warp: int, event: int, t0: int, t1: int) -> None:
        self._add(block, warp, t0, [(t0, event, BEGIN)])
        self._add(block, warp, t1, [(t1, event, END)])

    def signal(self, block: int, warp: int, site: int, t: int, addr: int, value: int | None = None) -> None:
        recs = [(t, site, INSTANT), ((addr >> 2) & M32, FLAG_ADDR, INSTANT)]
        if value is not None:
            recs.append((value & M32, FLAG_VALUE, INSTANT))
        self._add(block, warp, t, recs)

    def wait(self, block: int, warp: int, site: int, t0: int, t1: int, addr: int, value: int | None = None,
             reset: int | None = None) -> None:
        recs = [(t0, site, BEGIN), (t1, site, END), ((addr >> 2) & M32, FLAG_ADDR, INSTANT)]
        recs += [(v & M32, FLAG_VALUE, INSTANT) for v in (value, reset) if v is not None]
        self._add(block, warp, t0, recs)

    def raw(self, lane: int, records: list, t: int) -> None:
        """Records of the caller's choosing (malformed sequences), at time t in the lane's order."""
        self._add(lane // self.warps, lane % self.warps, t, records)

    def buffer(self) -> np.ndarray:
        lanes = self.num_blocks * self.warps
        per_lane = {lane: sorted(items) for lane, items in self.items.items()}
        depth = 2 + max((sum(len(r) for *_, r in items) for items in per_lane.values()), default=0) + 2
        buf = np.zeros(1 + lanes * depth, np.uint64)
        buf[0] = wire.pack_header(self.num_blocks, self.warps)
        for lane, items in per_lane.items():
            first = items[0][0]
            recs = [(first & M32, wire.ANCHOR_LO_EVENT_ID, INSTANT), (first >> 32, wire.ANCHOR_HI_EVENT_ID, INSTANT)]
            recs += [r for *_, rs in items for r in rs]
            timer = np.array([r[0] & M32 for r in recs], np.uint64)
            words = wire.pack_records(timer, np.full(len(recs), lane, np.uint64),
                                      np.array([r[1] for r in recs], np.uint64),
                                      np.array([r[2] for r in recs], np.uint64))
            buf[1 + lane + lanes * np.arange(len(recs))] = words
        self.records_per_lane = depth
        return buf

    def sidecar(self) -> dict:
        return {"rank": self.rank, "launch_index": self.launch_index, "kernel": self.kernel,
                "write_stride": self.num_blocks * self.warps, "records_per_lane": self.records_per_lane,
                "flags": self.sites, "flag_buffers": self.flag_buffers, "clock_offset_ns": self.clock_offset_ns,
                "clock_error_ns": self.clock_error_ns, "clock_reference": self.clock_reference,
                "pipeline_lanes": "warp"}

    def save(self, path: str | Path) -> Path:
        buf = self.buffer()
        return save_capture(path, buf, {"events": {str(k): v for k, v in self.events.items()}}, **self.sidecar())


def symmetric_bases(world: int, bytes_per_rank: int, seed: int = 0) -> np.ndarray:
    """[viewer, owner] -> the base address at which `viewer` maps `owner`'s copy of a symmetric buffer: every
    process maps the copies at addresses of its own (so a peer's store and the owner's wait differ)."""
    rng = np.random.default_rng(seed)
    span = 1 << 24
    start = 0x7F00_0000_0000 + rng.integers(0, 1 << 20, size=world) * span
    return np.array([[int(start[v]) + o * max(bytes_per_rank, 4096) * 4 for o in range(world)] for v in range(world)],
                    dtype=object)


def symmetric_entries(name: str, bases: np.ndarray, viewer: int, nbytes: int, elem_bytes: int = 4) -> list[dict]:
    """`viewer`'s flag_buffers entries of a symmetric buffer: one per owner rank."""
    return [{"name": name, "owner_rank": o, "base": int(bases[viewer][o]), "bytes": nbytes, "elem_bytes": elem_bytes}
            for o in range(len(bases[viewer]))]
