"""Flag records traced into a recording pool (ikp_cute/pipelines/record_pool.py, PoolKernelState.record_with_payload):
the pool's own PTX blocks (decision, setup, records, regions, flag records with their payloads, refills,
epilogue) executed on the CPU by a PTX interpreter of each warp's elected lane (tests/support/ptx_lane.py),
warps interleaved at random, then read back by host_decode.load.pool and decoded:

* every record and its payloads come back in order, each payload with its record (trace.payloads);
* a record and its payloads never straddle two units (no unit opens with a payload);
* a pool too small for everything stores a flag record with all its payloads or counts all of them lost: no
  payload without its record, and stored + lost = made, lane by lane;
* a flag signal and a blocked wait in a kernel compiled into a pool record their payloads (the PTX of
  trace_pipelines(pool) holds the payload stores in the traced copy, none in the closed one).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")

from host_decode.core import wire  # noqa: E402
from host_decode.core.decoder import decode  # noqa: E402
from host_decode.load.pool import read_pool  # noqa: E402
from ikp_cute.pipelines import record_pool  # noqa: E402
from ikp_cute.testing.pool_model import PoolModel  # noqa: E402
from tests.support.ptx_lane import Lane  # noqa: E402

ADDRESS = 0x7F00_0000_0000
KERNEL = 3
B, E, INST = (int(t) for t in (wire.EventType.BEGIN, wire.EventType.END, wire.EventType.INSTANT))
ADDR, VALUE = wire.FLAG_ADDR_EVENT_ID, wire.FLAG_VALUE_EVENT_ID
M32 = 0xFFFF_FFFF


def _int32(v):
    return int(v) & M32


def _int64(v):
    return int(v) & (1 << 64) - 1


_int32.mlir_type, _int64.mlir_type = "i32", "i64"  # a result type: not None


class Block:
    """One block of `warps` warps of one launch, run by the interpreter: the pool state's methods called with
    their operands as ints (the module's Int32 / Int64 / %tid.x / inline_ptx replaced for the duration)."""

    def __init__(self, device, block: int, warps: int):
        self.device, self.block, self.warps = device, block, warps
        self.lane = Lane(device.words, ADDRESS, special={
            "%ctaid.x": block, "%ctaid.y": 0, "%ctaid.z": 0, "%nctaid.x": device.blocks, "%nctaid.y": 1,
            "%nctaid.z": 1, "%ntid.x": 32 * warps, "%ntid.y": 1, "%ntid.z": 1, "%tid.y": 0, "%tid.z": 0,
            "%smid": 7 + block})
        self.lane.clock = device.clock
        self.state = record_pool.PoolKernelState(0x100, device.geometry, KERNEL, warps, None, None)

    def warp(self, w: int):
        self.lane.special["%tid.x"] = 32 * w
        self.lane.clock = max(self.lane.clock, self.device.clock)
        return self

    def run(self, text, operands, outputs=0):
        out = self.lane.run(text, operands, outputs)
        self.device.clock = max(self.device.clock, self.lane.clock)  # one clock for the launch
        return out

    def asm(self, result_type, operands, text, constraints):
        out = self.run(text, operands, 0 if result_type is None else 1)
        return out[0] if out else None

    def asm_results(self, types, operands, text, constraints):
        return tuple(self.run(text, operands, len(types)))

    def time(self) -> int:
        """A timer read of the caller's (a flag's time, read before its update)."""
        self.lane.clock = self.device.clock = max(self.device.clock, self.lane.clock) + 100
        return self.device.clock & M32


class Device:
    def __init__(self, monkeypatch, size_bytes: int, blocks: int, warps: int):
        model = PoolModel(size_bytes, max_kernels=8, default="all")
        self.words = model.words
        self.geometry = record_pool.PoolGeometry(ADDRESS, 8, wire.pool_units(size_bytes, 8))
        self.blocks, self.clock = blocks, 1_700_000_000_000_000_000
        self.current = None
        monkeypatch.setattr(record_pool, "Int32", _int32)
        monkeypatch.setattr(record_pool, "Int64", _int64)
        monkeypatch.setattr(record_pool, "_thread_x", lambda: self.current.lane.special["%tid.x"])
        monkeypatch.setattr(record_pool, "inline_ptx", self)
        self.launch = []
        self.block_of = [Block(self, b, warps) for b in range(blocks)]
        for blk in self.block_of:  # every warp: the decision, then its setup
            for w in range(warps):
                self.on(blk, w)
                decided, e = blk.run(record_pool.decision_ptx(self.geometry, KERNEL), [], 2)
                assert decided & 1, "the default selection 'all' records"
                blk.run(record_pool.setup_ptx(self.geometry, KERNEL, warps), [0x100, 32 * w, e, decided >> 1])
                self.launch.append(e)

    def on(self, blk: Block, w: int) -> Block:
        self.current = blk.warp(w)
        return blk

    # inline_ptx, as record_pool calls it
    def asm(self, *args):
        return self.current.asm(*args)

    def asm_results(self, *args):
        return self.current.asm_results(*args)

    def read(self):
        got = read_pool(self.words, {KERNEL: {"name": "flags_test", "events": {}}})
        return got


def script(rng, n: int) -> list[tuple]:
    """A lane's program: plain instants and regions, flag signals (with or without a value, an optional amount)
    and flag waits (with 0, 1 or 2 values)."""
    ops = []
    for _ in range(n):
        kind = rng.choice(["instant", "region", "signal", "wait"], p=[0.3, 0.2, 0.25, 0.25])
        event = int(rng.integers(0, 64))
        addr = int(rng.integers(0, 1 << 40)) * 4
        values = [int(v) for v in rng.integers(0, 1 << 32, size=int(rng.integers(0, 3)))]
        optional = None
        if kind == "signal" and rng.random() < 0.5:  # several lanes added (1) or not (0)
            optional = (int(rng.integers(0, 2)), int(rng.integers(1, 99)))
        if kind == "signal":
            values = values[:1]
        ops.append((str(kind), event, addr, values, optional))
    return ops


def expected_records(op) -> list[tuple[int, int, int]]:
    """(event, type, timer or payload value) of what `op` stores, times replaced by None."""
    kind, event, addr, values, optional = op
    if kind == "instant":
        return [(event, INST, None)]
    if kind == "region":
        return [(event, B, None), (event, E, None)]
    head = [(event, INST, None)] if kind == "signal" else [(event, B, None), (event, E, None)]
    pay = [(ADDR, INST, (addr >> 2) & M32)] + [(VALUE, INST, v & M32) for v in values]
    if optional is not None and optional[0]:
        pay.append((VALUE, INST, optional[1] & M32))
    return head + pay


def execute(dev: Device, blk: Block, w: int, op) -> None:
    kind, event, addr, values, optional = op
    state = dev.on(blk, w).state
    if kind == "instant":
        state.record((event << 2) | INST, "instant")
    elif kind == "region":
        token = state.reserve_region((event << 2) | B, None, "begin")
        state.finish_region(token, label="end")
    elif kind == "signal":
        state.record_with_payload((event << 2) | INST, blk.time(), addr, values, optional, label="signal")
    else:
        token = state.record_with_payload((event << 2) | B, blk.time(), addr, values, region=True, label="wait")
        dev.on(blk, w)
        state.finish_region(token, label="wait end")


def run_launch(monkeypatch, size_bytes: int, blocks: int = 2, warps: int = 3, per_lane: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    dev = Device(monkeypatch, size_bytes, blocks, warps)
    programs = {(b, w): script(rng, per_lane) for b in range(blocks) for w in range(warps)}
    order = [key for key, ops in programs.items() for _ in ops]
    rng.shuffle(order)
    at = {key: 0 for key in programs}
    for key in order:
        b, w = key
        execute(dev, dev.block_of[b], w, programs[key][at[key]])
        at[key] += 1
    for blk in dev.block_of:
        for w in range(warps):
            dev.on(blk, w).state.epilogue()
    return dev, programs


def decoded(dev: Device):
    got = dev.read()
    assert len(got.captures) == 1, got.summary
    buf, meta = got.captures[0]
    return got, buf, decode(buf, meta=meta)


def lane_records(trace, lane: int) -> list[tuple]:
    """(event, type, value) of a lane's decoded records in program order: regions as BEGIN / END, payloads after
    their record, times left out (None)."""
    rows = []
    for s in trace.spans[trace.spans["lane"] == lane]:
        rows.append((int(s["start_ns"]), 0, (int(s["event"]), B, None)))
        rows.append((int(s["end_ns"]), 1, (int(s["event"]), E, None)))
    for i in trace.instants[trace.instants["lane"] == lane]:
        rows.append((int(i["ts_ns"]), 1, (int(i["event"]), INST, None)))
    for p in trace.payloads[trace.payloads["lane"] == lane]:
        rows.append((int(p["ts_ns"]), 2 + int(p["index"]), (int(p["payload"]), INST, int(p["value"]))))
    return [r for *_, r in sorted(rows, key=lambda r: (r[0], r[1]))]


def test_flag_records_come_back_whole_and_in_order(monkeypatch):
    dev, programs = run_launch(monkeypatch, 1 << 20)
    got, buf, trace = decoded(dev)
    assert trace.loss.lost == 0 and trace.loss.totals["payload_orphan"] == 0
    warps = 3
    for (b, w), ops in programs.items():
        want = [r for op in ops for r in expected_records(op)]
        assert lane_records(trace, b * warps + w) == want, (b, w)
    assert trace.payloads.size == sum(1 for ops in programs.values() for op in ops
                                      for r in expected_records(op) if r[0] in (ADDR, VALUE))


def units(dev: Device) -> np.ndarray:
    start = wire.pool_control_bytes(8) // 8
    n = dev.geometry.units
    return dev.words[start : start + n * wire.POOL_UNIT_WORDS].reshape(n, wire.POOL_UNIT_WORDS)


def test_no_record_straddles_two_units(monkeypatch):
    """Every unit a lane entered opens with a record that is not a payload, and a unit's records are followed by
    zeros only (the slots a refill left)."""
    dev, _ = run_launch(monkeypatch, 1 << 20, seed=1)
    body = units(dev)
    used = body[:, 0] != 0
    recs = body[used, wire.POOL_UNIT_HEADER_WORDS :]
    assert used.sum() > 10
    _, _, event, etype = wire.unpack_records(recs[:, 0])
    assert not np.isin(event[etype == INST], wire.PAYLOAD_IDS).any()
    filled = recs != 0
    assert (np.cumsum(~filled, axis=1)[filled] == 0).all()  # no record after an empty slot
    head = wire.unpack_unit_headers(body[used, : wire.POOL_UNIT_HEADER_WORDS])
    last = np.zeros(head["lane"].size, bool)  # each lane's last unit: where its records stopped
    for lane in np.unique(head["lane"]):
        mine = np.flatnonzero(head["lane"] == lane)
        last[mine[np.argmax(head["seq"][mine])]] = True
    left = wire.POOL_UNIT_RECORDS - filled.sum(axis=1)[~last]
    assert left.max() <= 4 and (left >= 2).any()  # a flag record's refill leaves up to need - 1 slots


def test_an_exhausted_pool_stores_each_flag_record_whole_or_counts_it(monkeypatch):
    """A pool of 12 units for six lanes of ~300 records: lanes go virtual; every flag record decoded has all its
    payloads, and per lane what is stored plus what is counted lost is everything the lane made."""
    dev, programs = run_launch(monkeypatch, wire.pool_control_bytes(8) + 12 * wire.POOL_UNIT_BYTES, seed=2)
    got, buf, trace = decoded(dev)
    assert trace.loss.totals["payload_orphan"] == 0 and trace.loss.dropped_on_device > 0
    dropped = {int(r["lane"]): int(r["dropped"]) for r in trace.lanes}
    warps = 3
    for (b, w), ops in programs.items():
        lane = b * warps + w
        made = sum(len(expected_records(op)) for op in ops)
        stored = lane_records(trace, lane)
        assert len(stored) + dropped.get(lane, 0) == made, (lane, len(stored), dropped.get(lane), made)
        # what is stored is a subsequence of whole operations: each op's records all present or all absent
        want = [expected_records(op) for op in ops]
        i = 0
        for rec in want:
            if stored[i : i + len(rec)] == rec:
                i += len(rec)
        assert i == len(stored), lane


@pytest.mark.parametrize("style,options", [("helper", {}), ("library", {}), ("hand", {"op": "store", "scope": "sys"})])
def test_a_pool_trace_of_the_flags_kernel_records_payloads(style, options):
    """trace_pipelines(pool) around the flags test kernel: ikp_cute.flags' helpers, the hooked library primitives,
    and a raw release store the IR pass traces. Every traced flag site's record block is the pool's (its payloads
    stored in one unit: the next unit taken first when they do not fit, then the stores), once: the closed copy
    has none."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.pool import Pool
    from ikp_cute.testing.kernels import flags_kernel as fk
    from ikp_cute.testing.sass import keep_options

    pool = Pool.fake(ADDRESS, 1 << 20, max_kernels=8)
    trace = trace_pipelines(pool, "waits")
    o = dict({"op": "add", "cmp": "ge", "sem": "acquire", "scope": "gpu", "constant": None, "passes": False}, **options)
    args = [fake(Int32, (4,)), Int32(3), Int32(5), style, o["op"], o["cmp"], o["sem"], o["scope"], o["constant"],
            o["passes"]]
    with trace:
        ptx = cute.compile(fk.launch, *args, options=keep_options()).__ptx__
    flags = trace.capture_metadata()["flags"]
    assert flags and {f["kind"] for f in flags} <= {"signal", "wait"}
    addr_tag = (ADDR << 2) | INST
    lines = ptx.splitlines()
    for f in flags:
        label = f"{f['kind']}@{f['site']}" + (" begin" if f["kind"] == "wait" else "")
        (block,) = [line for line in lines if line.rstrip().endswith(f"/* ikp {label} */")]
        assert f"or.b32 w, tag, {addr_tag};" in block and "STORE:" in block and block.count("atom.") == 1
        assert "setp.lt.s32 pre, room, need; @pre bra.uni REFILL;" in block
    assert ptx.count("/* ikp decision */") == 1
    if style == "helper":  # a signal whose amount is recorded when lanes add together; a wait's expected value
        signal, wait = flags
        block = next(line for line in lines if line.rstrip().endswith(f"/* ikp signal@{signal['site']} */"))
        assert "selp.u32 need, 3, 2, opt;" in block
        block = next(line for line in lines if line.rstrip().endswith(f"/* ikp wait@{wait['site']} begin */"))
        assert "mov.u32 need, 4;" in block  # BEGIN END ADDR VALUE
