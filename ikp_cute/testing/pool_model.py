"""A recording pool built on the host, step by step as the device builds it (no GPU): the reference the pool
reader is tested against (tests/unit/host_decode/load/test_pool.py) and the device is checked against
(gpu/pool_suite.py, stage "protocol").

PoolModel follows ikp_cute/pipelines/record_pool.py's protocol record by record: the decision and the launch
count (wire.pool_decide), every lane taking its first unit when it starts and the next one after a record that
leaves fewer than two slots in its unit (a region's two records never straddle units), in runs of 1, 2, 4, ...
units with one add on NEXT each, the unit header written on entering a unit, the virtual units of a lane the
pool cannot serve (records counted, not stored), the lane's end (its losses written into its last unit, or
added to its kernel's counters). Records are generated with known tags and times, so a test knows every record
a capture must hold.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.core import wire

R = wire.POOL_UNIT_RECORDS


@dataclasses.dataclass
class Lane:
    lane: int
    invalid: bool = False
    room: int = 0
    virtual: bool = False
    unit: int = -1  # current unit (or, virtual, the last real one); -1: never had one
    seq: int = 0
    grabs: int = 0
    run_left: int = 0
    lost: int = 0
    records: list = dataclasses.field(default_factory=list)  # what the lane tried to record, in order


class PoolModel:
    """The pool's words (uint64) and the device steps that write them."""

    def __init__(self, size_bytes: int, max_kernels: int = 8, default: str = "1"):
        self.words = np.zeros(size_bytes // 8, np.uint64)
        self.max_kernels = max_kernels
        self.w32 = self.words.view(np.uint32)
        self.w32[:8] = wire.pool_header_words(size_bytes, max_kernels)
        self.units = wire.pool_units(size_bytes, max_kernels)
        self.unit_base = wire.pool_control_bytes(max_kernels) // 8
        for k in range(max_kernels):
            self.select(k, default)
            for s in range(3):
                self.w32[wire.pool_set(max_kernels, k, s, wire.POOL_SET_LOSS_MIN) // 4] = 0xFFFFFFFF
        self.clock = 1_000_000_000_000  # ns; every record is 100 ns after the previous one of any lane

    @classmethod
    def over(cls, words: np.ndarray, max_kernels: int) -> PoolModel:
        """The device's steps on an existing pool's words (uint64, shared: e.g. the host buffer of an
        ikp_cute Pool created on the CPU), its control block as the host left it."""
        model = cls.__new__(cls)
        model.words, model.max_kernels, model.w32 = words, max_kernels, words.view(np.uint32)
        model.units = wire.pool_units(8 * words.size, max_kernels)
        model.unit_base = wire.pool_control_bytes(max_kernels) // 8
        model.clock = 1_000_000_000_000
        return model

    # --- host ops ----------------------------------------------------------------------------------

    def select(self, k: int, selection: str, half_units: int | None = None) -> None:
        start, stop, every, mode = wire.pool_selection(selection)
        self.w32[wire.pool_window(k) // 4 : wire.pool_window(k) // 4 + 4] = (start, stop, every, mode)
        if mode == wire.POOL_LAST and half_units is not None:
            self.carve(k, half_units)

    def carve(self, k: int, half: int) -> None:
        top = int(self.w32[wire.POOL_HEADER_WORDS32["top"]]) - 2 * half
        self.w32[wire.POOL_HEADER_WORDS32["top"]] = top
        self.u32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_FIRST), top)
        self.u32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_HALF), half if self.next <= top else 0)
        for s in wire.POOL_LAST_SETS:
            self.reset_set(k, s)

    # --- fields --------------------------------------------------------------------------------------

    def u32(self, offset: int, value: int | None = None) -> int:
        if value is not None:
            self.w32[offset // 4] = value & 0xFFFFFFFF
        return int(self.w32[offset // 4])

    def u64(self, offset: int, value: int | None = None) -> int:
        if value is not None:
            self.words[offset // 8] = value & (1 << 64) - 1
        return int(self.words[offset // 8])

    @property
    def next(self) -> int:
        return self.u64(wire.POOL_NEXT)

    def reset_set(self, k: int, s: int) -> None:
        for field in (wire.POOL_SET_NEXT, wire.POOL_SET_NOCHUNK_RECORDS, wire.POOL_SET_STRAY,
                      wire.POOL_SET_NOCHUNK_LANES):
            self.u64(wire.pool_set(self.max_kernels, k, s, field), 0)
        self.u32(wire.pool_set(self.max_kernels, k, s, wire.POOL_SET_LOSS_MIN), 0xFFFFFFFF)
        self.u32(wire.pool_set(self.max_kernels, k, s, wire.POOL_SET_LOSS_MAX), 0)

    # --- a launch ------------------------------------------------------------------------------------

    def launch(self, k: int, counts: dict[int, int], wpb: int, rng=None, regions: bool = False,
               invalid: dict[int, int] | None = None) -> dict | None:
        """One launch of kernel `k`: lane -> records it makes (instants, or with `regions` BEGIN/END pairs
        reserved two at a time), in an order `rng` interleaves; `invalid`: lanes that cannot record ->
        records they try. Returns {lane: [records stored or not, in order]} when it recorded, else None."""
        window = wire.pool_window(k)
        start, stop, every, mode = (self.u32(window + 4 * i) for i in range(4))
        ticks_at = wire.pool_counter(self.max_kernels, k, wire.POOL_TICKS)
        e = self.u64(ticks_at) >> wire.POOL_TICK_BITS
        recording, emptied = wire.pool_decide(start, stop, every, mode, e)
        if emptied:
            self.u32(window, 0)
            self.u32(window + 4, 0)
        self.u64(ticks_at, self.u64(ticks_at) + (1 << wire.POOL_TICK_BITS))
        if not recording:
            return None
        half = int(self.u32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_HALF)))
        if mode == wire.POOL_LAST:
            s = 1 + (e & 1)
            self.reset_set(k, 1 + ((e + 1) & 1))
            next_at = wire.pool_set(self.max_kernels, k, s, wire.POOL_SET_NEXT)
            first = self.u32(wire.pool_counter(self.max_kernels, k, wire.POOL_LAST_FIRST)) + (e & 1) * half
            limit = half
        else:
            s, next_at, first, limit = 0, wire.POOL_NEXT, 0, int(self.w32[wire.POOL_HEADER_WORDS32["top"]])
        lanes = {ln: Lane(ln) for ln in counts}
        lanes.update({ln: Lane(ln, invalid=True, room=1 << 30) for ln in (invalid or {})})
        ctx = (k, e, wpb, next_at, first, limit)
        starts = [ln for ln in counts]
        if rng is not None:
            rng.shuffle(starts)
        for ln in starts:  # the setup: each lane's first unit
            self.refill(lanes[ln], *ctx)
        calls = [ln for ln, n in counts.items() for _ in range(n)] + [ln for ln, n in (invalid or {}).items()
                                                                       for _ in range(n)]
        if rng is not None:
            rng.shuffle(calls)
        for ln in calls:
            self.record(lanes[ln], ctx, 2 if regions else 1)
        for lane in lanes.values():
            self.end(lane, k, s, e)
        return {ln: lane.records for ln, lane in lanes.items() if not lane.invalid}

    def record(self, lane: Lane, ctx, need) -> None:
        self.clock += 100
        t = self.clock
        kinds = (int(wire.EventType.BEGIN), int(wire.EventType.END)) if need == 2 else (int(wire.EventType.INSTANT),)
        for j, kind in enumerate(kinds):
            event = (len(lane.records) // need) % 1000
            rec = int(wire.pack_record((t + j) & 0xFFFFFFFF, wire.make_tag(lane.lane, event, kind)))
            stored = not lane.virtual and not lane.invalid
            if stored:
                unit = self.unit_base + lane.unit * wire.POOL_UNIT_WORDS
                self.words[unit + wire.POOL_UNIT_HEADER_WORDS + R - lane.room + j] = rec
            lane.records.append((rec, stored))
        lane.room -= need
        if lane.room < 2 and not lane.invalid:  # a unit's last slot an instant leaves stays 0
            self.refill(lane, *ctx)

    def refill(self, lane: Lane, k, e, wpb, next_at, first, limit) -> None:
        if lane.virtual:
            lane.lost -= lane.room
        if not lane.virtual and lane.run_left > 0:
            lane.run_left -= 1
            self.enter(lane, lane.unit + 1, k, e, wpb)
            return
        size = min(1 << lane.grabs, wire.POOL_MAX_RUN)
        lane.grabs = min(lane.grabs + 1, 4)
        idx = self.u64(next_at)
        self.u64(next_at, idx + size)
        usable = max(0, min(limit - idx, size))
        if usable:
            lane.virtual, lane.run_left = False, usable - 1
            self.enter(lane, first + idx, k, e, wpb)
        else:
            lane.virtual, lane.room, lane.run_left = True, size * R, 0
            lane.lost += size * R

    def enter(self, lane: Lane, unit: int, k, e, wpb) -> None:
        at = self.unit_base + unit * wire.POOL_UNIT_WORDS
        sm = 7 + lane.lane % 5
        t = self.clock + 50  # read when the unit is taken: before its first record
        self.words[at : at + 4] = wire.pack_unit_header(k, e, t, lane.lane, wpb, lane.seq % (1 << 16), sm)
        lane.unit, lane.seq, lane.room = unit, lane.seq + 1, R

    def end(self, lane: Lane, k, s, e) -> None:
        at = lambda field: wire.pool_set(self.max_kernels, k, s, field)  # noqa: E731
        if lane.invalid:
            tried = (1 << 30) - lane.room
            if tried:
                self.u64(at(wire.POOL_SET_STRAY), self.u64(at(wire.POOL_SET_STRAY)) + tried)
            return
        lost = lane.lost - (lane.room if lane.virtual else 0)
        if not lost:
            return
        if lane.seq:
            self.words[self.unit_base + lane.unit * wire.POOL_UNIT_WORDS + 3] = lost
        else:
            self.u64(at(wire.POOL_SET_NOCHUNK_LANES), self.u64(at(wire.POOL_SET_NOCHUNK_LANES)) + 1)
            self.u64(at(wire.POOL_SET_NOCHUNK_RECORDS), self.u64(at(wire.POOL_SET_NOCHUNK_RECORDS)) + lost)
        self.u32(at(wire.POOL_SET_LOSS_MIN), min(self.u32(at(wire.POOL_SET_LOSS_MIN)), e))
        self.u32(at(wire.POOL_SET_LOSS_MAX), max(self.u32(at(wire.POOL_SET_LOSS_MAX)), e))
