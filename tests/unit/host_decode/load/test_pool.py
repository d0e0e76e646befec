"""host_decode/load/pool.py on pools built step by step as the device builds them
(ikp_cute/testing/pool_model.py): exact reassembly, loss accounting, the size that would have held everything,
bad input."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.core import wire
from host_decode.core.decoder import decode
from host_decode.core.errors import DecodeError
from host_decode.load.capture import load_capture, save_capture
from host_decode.load.pool import read_layout, read_pool
from ikp_cute.testing.pool_model import PoolModel

R = wire.POOL_UNIT_RECORDS
KERNELS = {0: {"name": "fa4_fwd", "events": {3: "wait_k"}}, 1: {"name": "gemm"}, 2: {"name": "norm"}}


def pool_bytes(units: int, kernels: int = 8) -> int:
    return wire.pool_control_bytes(kernels) + units * wire.POOL_UNIT_BYTES


def user_records(buf: np.ndarray, meta: dict) -> dict[int, list[int]]:
    """{lane: its records after the two anchors, before DROPPED / FINALIZE} of a v1 buffer."""
    stride, rows = meta["write_stride"], meta["records_per_lane"]
    body = buf[1:].reshape(rows, stride)
    out = {}
    for lane in range(stride):
        col = [int(v) for v in body[:, lane] if v]
        if not col:
            continue
        _, _, ev, ty = wire.unpack_records(np.array(col, np.uint64))
        assert ev[0] == wire.ANCHOR_LO_EVENT_ID and ev[1] == wire.ANCHOR_HI_EVENT_ID and ty[-1] == 3, lane
        keep = [c for c, e, t in zip(col, ev, ty) if t != 3 and not (t == 2 and e >= wire.DROPPED_EVENT_ID)]
        out[lane] = keep
    return out


def interleave_units(model: PoolModel, rng) -> None:
    """Move the shared area's units to random places, keeping each lane's units in their order (the order a
    lane asked for them): how several kernels and launches running at once would lay them out."""
    units = model.next
    base = model.unit_base
    area = model.words[base : base + units * wire.POOL_UNIT_WORDS].reshape(units, -1).copy()
    head = wire.unpack_unit_headers(area[:, :4])
    ident = head["kernel"] * 10**9 + head["launch"] * 10**6 + head["lane"]
    group = np.where(head["written"], ident, -1 - np.arange(units))
    keys = rng.random(units)
    new_keys = np.empty(units)
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        new_keys[idx] = np.sort(keys[idx])
    area = area[np.argsort(new_keys)]  # position j takes the unit of the j-th smallest key
    model.words[base : base + units * wire.POOL_UNIT_WORDS] = area.reshape(-1)


def test_interleaved_units_reassemble_exactly():
    rng = np.random.default_rng(1)
    model = PoolModel(pool_bytes(400))
    model.select(1, "all")
    assert model.launch(0, {0: 5}, wpb=12) is None  # launch 0: not selected by the default "1"
    expect = {}
    expect[(0, 1)] = model.launch(0, {0: 100, 1: 3, 13: 40, 35: 29, 36: 1}, wpb=12, rng=rng)
    expect[(1, 0)] = model.launch(1, {2: 70, 3: 57}, wpb=4, rng=rng, regions=True)
    expect[(1, 1)] = model.launch(1, {0: 600, 9: 2}, wpb=4, rng=rng)
    assert model.launch(0, {0: 5}, wpb=12) is None  # launch 2 of kernel 0: past its window
    interleave_units(model, rng)
    got = read_pool(model.words, KERNELS)
    assert [(m["pool"]["kernel_id"], m["launch_index"]) for _, m in got.captures] == sorted(expect)
    for buf, meta in got.captures:
        want = expect[(meta["pool"]["kernel_id"], meta["launch_index"])]
        assert user_records(buf, meta) == {ln: [r for r, stored in recs if stored] for ln, recs in want.items() if recs}
        assert meta["pool"]["lost_records"] == 0 and meta["pool"]["lanes_with_gaps"] == 0
        trace = decode(buf, names=meta, meta=meta)
        assert trace.loss.totals["malformed"] == 0 and trace.loss.dropped_on_device == 0
        assert (trace.lanes["sm"][trace.lanes["records"] > 0] >= 7).all()  # the unit's SM id, via FINALIZE
        assert trace.lanes["anchored"][trace.lanes["records"] > 0].all()
    buf, meta = got.captures[0]
    assert meta["kernel"] == "fa4_fwd" and meta["events"] == {3: "wait_k"}
    assert wire.unpack_header(int(buf[0])) == (4, 12)  # blocks 0..3 seen (lane 36 = block 3 warp 0), warps per block
    assert got.summary["kernels"][0]["launches_seen"] == 3 and got.summary["kernels"][0]["recorded_launches"] == [1]
    assert got.summary["kernels"][1]["selection"] == "all" and got.summary["kernels"][1]["launches_seen"] == 2
    assert not got.summary["exhausted"] and got.summary["bytes_needed"] <= got.summary["pool_bytes"]
    assert all(b["records"] == 0 for b in got.summary["loss"].values())


def test_a_lanes_runs_grow_and_its_units_stay_contiguous():
    model = PoolModel(pool_bytes(200))
    model.select(0, "all")
    model.launch(0, {0: (R - 1) * 31 - 1}, wpb=1)  # instants: 27 a unit; two slots left in unit 31
    assert model.next == 1 + 2 + 4 + 8 + 16  # 31 units in five requests
    (buf, meta), = read_pool(model.words, KERNELS).captures
    assert meta["pool"]["units"] == 31 and meta["records_per_lane"] == (R - 1) * 31 - 1 + 3
    model.launch(0, {0: R - 1}, wpb=1)  # a lane that leaves one slot takes the next run at once
    assert model.next == 31 + 1 + 2


def test_exhausted_pool_counts_lost_records_and_the_size_needed():
    rng = np.random.default_rng(2)
    counts = {lane: int(n) for lane, n in enumerate(rng.integers(0, 300, 40))}
    model = PoolModel(pool_bytes(60))
    model.select(0, "all")
    tried = model.launch(0, counts, wpb=8, rng=rng)
    got = read_pool(model.words, KERNELS)
    (buf, meta), = got.captures
    stored = sum(stored for recs in tried.values() for _, stored in recs)
    lost = sum(not stored for recs in tried.values() for _, stored in recs)
    assert lost > 0 and stored == meta["pool"]["records"]
    trace = decode(buf, names=meta, meta=meta)
    without = meta["pool"]["lost_records_without_unit"]
    assert trace.loss.dropped_on_device + without == lost  # DROPPED instants + the kernel's counters: every one
    unserved = [recs for recs in tried.values() if recs and not any(stored for _, stored in recs)]
    assert meta["pool"]["lanes_without_unit"] == len(unserved)
    s = got.summary
    assert s["exhausted"] and s["lost_records"] == lost and s["kernels"][0]["loss_launches"] == [0, 0]
    # the size the summary names holds every record of the same launch
    again = PoolModel(s["bytes_needed"])
    again.select(0, "all")
    again.launch(0, counts, wpb=8, rng=np.random.default_rng(3))
    redo = read_pool(again.words, KERNELS)
    assert redo.summary["lost_records"] == 0 and redo.summary["records"] == stored + lost


def test_lanes_that_never_got_a_unit_and_stray_lanes_are_counted():
    model = PoolModel(pool_bytes(2))
    model.select(2, "all")
    model.launch(2, {0: 10, 1: 10, 2: 10, 3: 10}, wpb=4, invalid={40: 6})
    (buf, meta), = read_pool(model.words, KERNELS).captures
    p = meta["pool"]
    assert p["records"] == 10 + 10  # two lanes got the two units
    assert p["lanes_without_unit"] == 2 and p["lost_records_without_unit"] == 20
    assert p["stray_records"] == 6 and meta["stray_records"] == 6


def test_garbage_headers_are_counted_not_decoded():
    model = PoolModel(pool_bytes(50))
    model.select(0, "all")
    model.launch(0, {0: 60, 1: 10}, wpb=2)
    clean = read_pool(model.words, KERNELS)
    total = clean.summary["records"]
    base = model.unit_base
    words = model.words.copy()
    unit = lambda i: slice(base + i * wire.POOL_UNIT_WORDS, base + (i + 1) * wire.POOL_UNIT_WORDS)  # noqa: E731
    head = wire.unpack_unit_headers(model.words[base : base + model.next * wire.POOL_UNIT_WORDS].reshape(-1, 32)[:, :4])
    second = int(np.flatnonzero((head["lane"] == 0) & (head["seq"] == 1) & head["written"])[0])
    words[unit(second)][0] ^= np.uint64(1 << 60)  # a flipped bit in the magic of lane 0's second unit
    dup = words[unit(0)].copy()
    other = int(np.flatnonzero((head["lane"] == 1) & head["written"])[0])
    words[unit(other)] = dup  # lane 1's unit replaced by a copy of unit 0: lane 0's seq 0 twice
    words[unit(45)][7] = np.uint64(12345)  # a record where no unit was handed out
    got = read_pool(words, KERNELS)
    loss = got.summary["loss"]
    in_bad = int(np.count_nonzero(model.words[unit(second)][4:]))
    in_replaced = int(np.count_nonzero(model.words[unit(other)][4:]))
    assert loss["unit_header_invalid"] == {"units": 1, "records": in_bad}
    assert loss["duplicate_unit"] == {"units": 1, "records": int(np.count_nonzero(dup[4:]))}
    assert loss["outside_allocation"] == {"units": 1, "records": 1}
    assert got.summary["records"] == total - in_bad - in_replaced
    (buf, meta), = got.captures
    assert meta["pool"]["lanes_with_gaps"] == 1  # lane 0 lost its second unit


def test_last_keeps_the_newest_launch_and_its_own_counts():
    model = PoolModel(pool_bytes(100))
    model.select(1, "last", half_units=20)
    records = {}
    for e in range(5):
        records[e] = model.launch(1, {0: 50 + e, 1: 3}, wpb=2)
    got = read_pool(model.words, KERNELS)
    (buf, meta), = got.captures
    assert meta["launch_index"] == 4 and meta["pool"]["region"] == "last"
    assert user_records(buf, meta)[0] == [r for r, _ in records[4][0]]
    row = next(r for r in got.summary["kernels"] if r["id"] == 1)
    assert row["selection"] == "last" and row["launches_seen"] == 5 and row["last_region"]["units_per_half"] == 20
    assert got.summary["loss"]["superseded"]["records"] > 0  # launch 3, in the other half


def test_a_capture_saves_and_loads_with_host_decode_unchanged(tmp_path):
    model = PoolModel(pool_bytes(40))
    model.select(0, "0")
    model.launch(0, {0: 9, 5: 30}, wpb=3, regions=True)
    (buf, meta), = read_pool(model.words, KERNELS).captures
    path = save_capture(tmp_path / "k.npy", buf, **meta)
    trace = load_capture(path)
    assert trace.meta["launch_index"] == 0 and trace.meta["pool"]["records"] == 78
    assert len(trace.spans) == 39 and trace.loss.totals["unmatched_begin"] == 0


def test_not_a_pool_is_refused():
    with pytest.raises(DecodeError, match="not a recording pool: word 0"):
        read_layout(np.zeros(64, np.uint64))
    model = PoolModel(pool_bytes(4))
    with pytest.raises(DecodeError, match="a truncated dump"):
        read_layout(model.words[:-8])
    words = model.words.copy()
    words.view(np.uint32)[2] = 9
    with pytest.raises(DecodeError, match="version is 9"):
        read_layout(words)
    with pytest.raises(DecodeError, match="64-bit words"):
        read_layout(np.zeros(5, np.float32))
    assert read_layout(model.words.view(np.uint8)).units == 4
