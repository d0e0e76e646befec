"""Golden buffers built by hand: one test per record kind and layout; expected values computed by hand."""

import numpy as np
import pytest

from host_decode.core import wire
from host_decode.core.decoder import decode, infer_write_stride
from host_decode.core.errors import DecodeError
from host_decode.core.model import LOSS_BUCKETS
from host_decode.load.capture import load_capture, save_capture
from tests.support.buffers import INST, B, BufferBuilder, E, F


def spans_of(trace):
    s = trace.spans
    return sorted(zip(s["lane"].tolist(), s["event"].tolist(), (s["start_ns"] - trace.start_ns).tolist(),
                      (s["end_ns"] - trace.start_ns).tolist(), s["depth"].tolist()))


def test_nested_overlap_and_every_bucket():
    b = BufferBuilder(2, 2, 8)
    # lane 0: A and B overlap without nesting (async work); finalize with SM 7
    b.put(0, 100, 1, B).put(0, 110, 2, B).put(0, 120, 1, E).put(0, 130, 2, E).put(0, 140, 7, F)
    # lane 1: re-entrant A inside A, then one END too many
    b.put(1, 100, 1, B).put(1, 105, 1, B).put(1, 110, 1, E).put(1, 120, 1, E).put(1, 125, 1, E)
    # lane 2: an instant and an unmatched begin
    b.put(2, 100, 4, INST).put(2, 101, 3, B)
    # lane 3: begin, finalize, then an end after the finalize
    b.put(3, 50, 1, B).put(3, 60, 0, F).put(3, 70, 1, E)
    t = decode(b.buf)
    assert spans_of(t) == [(0, 1, 50, 70, 0), (0, 2, 60, 80, 1), (1, 1, 50, 70, 0), (1, 1, 55, 60, 1)]
    assert t.loss.totals == dict(paired_begin=4, paired_end=4, instant=1, finalize=2, unmatched_begin=2,
                                 unmatched_end=1, after_finalize=1, malformed=0, impossible_span=0,
                                 impossible_time=0, payload_orphan=0)
    assert t.loss.nonzero_slots == 15
    assert t.instants["event"].tolist() == [4] and t.instants["lane"].tolist() == [2]
    sm = dict(zip(t.lanes["lane"].tolist(), t.lanes["sm"].tolist()))
    assert sm == {0: 7, 1: -1, 2: -1, 3: 0}
    per = {int(r["lane"]): {k: int(r[k]) for k in LOSS_BUCKETS} for r in t.loss.per_lane}
    assert per[1]["unmatched_end"] == 1 and per[3]["after_finalize"] == 1 and per[3]["unmatched_begin"] == 1
    assert t.spans["block"].tolist() == [0, 0, 0, 0] and t.spans["group"].tolist() == [0, 0, 1, 1]


def test_recursive_same_id_three_deep():
    b = BufferBuilder(1, 1, 8)
    for ts, ty in [(0, B), (1, B), (2, B), (3, E), (4, E), (5, B), (6, E), (7, E)]:
        b.put(0, ts * 10, 9, ty)
    assert spans_of(decode(b.buf)) == [(0, 9, 0, 70, 0), (0, 9, 10, 40, 1), (0, 9, 20, 30, 2), (0, 9, 50, 60, 1)]


def test_wrap_inside_a_lane():
    b = BufferBuilder(1, 1, 4)
    b.put(0, 2**32 - 40, 1, B).put(0, 24, 1, E)  # the timer wrapped between begin and end
    t = decode(b.buf)
    assert (t.spans["end_ns"] - t.spans["start_ns"]).tolist() == [64]


def test_wrap_across_lanes():
    b = BufferBuilder(2, 1, 4)
    b.put(0, 10, 1, B).put(0, 30, 1, E)  # lane 0 starts just after the wrap
    b.put(1, 2**32 - 20, 1, B).put(1, 50, 1, E)  # lane 1 just before it
    t = decode(b.buf)
    assert spans_of(t) == [(0, 1, 30, 50, 0), (1, 1, 0, 70, 0)]
    assert t.start_ns >= 0


def test_anchors_give_absolute_time():
    t0 = (0x1234 << 32) + 2**32 - 100  # the low half wraps 100 ns after the anchor
    b = BufferBuilder(1, 2, 8)
    b.anchor(0, t0).put(0, (t0 + 50) & 0xFFFFFFFF, 1, B).put(0, (t0 + 300) & 0xFFFFFFFF, 1, E)
    b.anchor(1, t0 + 10).put(1, (t0 + 60) & 0xFFFFFFFF, 2, B).put(1, (t0 + 70) & 0xFFFFFFFF, 2, E)
    t = decode(b.buf)
    assert t.absolute and t.lanes["anchored"].all()
    assert t.spans["start_ns"].tolist() == [t0 + 50, t0 + 60]
    assert t.spans["end_ns"].tolist() == [t0 + 300, t0 + 70]
    assert t.instants.size == 0 and t.loss.totals["instant"] == 4  # anchors are decoded instants, not user ones


def test_lane_without_anchor_joins_the_absolute_timeline():
    t0 = (7 << 32) + 1000
    b = BufferBuilder(2, 1, 8)
    b.anchor(0, t0).put(0, (t0 + 5) & 0xFFFFFFFF, 1, B).put(0, (t0 + 9) & 0xFFFFFFFF, 1, E)
    b.put(1, (t0 - 40) & 0xFFFFFFFF, 1, B).put(1, (t0 + 40) & 0xFFFFFFFF, 1, E)  # a peer-style lane
    t = decode(b.buf)
    assert t.absolute
    assert sorted(t.spans["start_ns"].tolist()) == [t0 - 40, t0 + 5]


def test_dropped_records_are_counted():
    b = BufferBuilder(1, 1, 6)  # capacity 2 after anchors and trailer
    b.anchor(0, 1 << 40).put(0, 5, 1, B).put(0, 9, 1, E).put(0, 17, wire.DROPPED_EVENT_ID, INST).put(0, 20, 3, F)
    t = decode(b.buf)
    assert t.loss.dropped_on_device == 17 and t.lanes["dropped"].tolist() == [17]
    assert t.loss.lost == 17 and t.lanes["sm"].tolist() == [3]


def test_3d_grid_lanes_flatten():
    gx, gy, gz, ng = 3, 2, 2, 2
    nb = gx * gy * gz
    b = BufferBuilder(nb, ng, 4)
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                bl = wire.block_linear(x, y, z, gx, gy)
                for g in range(ng):
                    b.put(bl * ng + g, 100 + bl, g, B).put(bl * ng + g, 200 + bl, g, E)
    t = decode(b.buf)
    assert t.spans.size == nb * ng
    assert sorted(zip(t.spans["block"].tolist(), t.spans["group"].tolist())) == [
        (bl, g) for bl in range(nb) for g in range(ng)
    ]


def test_persistent_layout_with_larger_stride():
    b = BufferBuilder(3, 2, 5, write_stride=10)  # 6 lanes, stride 10 (e.g. sized for more SMs)
    for lane in range(6):
        for it in range(2):
            b.put(lane, 1000 * it + lane, 1, B).put(lane, 1000 * it + lane + 100, 1, E)
    assert infer_write_stride(b.buf[1:], 6) == 10
    t = decode(b.buf)
    assert t.write_stride == 10 and t.spans.size == 12 and t.loss.totals["malformed"] == 0
    t2 = decode(b.buf, write_stride=6)  # the wrong stride: records land in other lanes' columns
    assert t2.loss.totals["malformed"] > 0
    assert sum(t2.loss.totals.values()) == t2.loss.nonzero_slots


def test_malformed_records_are_counted_not_fatal():
    b = BufferBuilder(1, 2, 4)
    b.put(0, 1, 1, B).put(0, 2, 1, E)
    b.put(1, 5, 1, B, tag_lane=7)  # lane 7 does not exist
    b.put(1, 6, 1, B, tag_lane=0)  # lane 0's tag in lane 1's slot
    t = decode(b.buf)
    assert t.loss.totals["malformed"] == 2
    assert t.loss.malformed_reasons == {"lane_out_of_range": 1, "slot_of_another_lane": 1}
    assert t.spans.size == 1


def test_capacity_overflow_leftovers_pair_what_fits():
    # a peer writer without our trailer: the lane ran out mid-region, the last BEGIN has no END
    b = BufferBuilder(1, 1, 3)
    b.put(0, 1, 1, B).put(0, 2, 1, E).put(0, 3, 1, B)
    t = decode(b.buf)
    assert t.spans.size == 1 and t.loss.totals["unmatched_begin"] == 1


@pytest.mark.parametrize(
    "buf, match",
    [
        (np.zeros(0, np.uint64), "empty buffer"),
        (np.zeros(8, np.uint64), "missing header"),
        (np.array([1 << 32, 0, 0], np.uint64), "impossible header"),
        (np.array([(1 << 32) | 4, 0, 0], np.uint64), "truncated"),
        (np.array([(1 << 32) | 1, 0, 0], np.uint64), "no records"),
        (np.zeros(8, np.float32), "wrong dtype"),
        (np.zeros((2, 4), np.int64), "wrong shape"),
        ([1, 2, 3], "numpy array or torch tensor"),
    ],
)
def test_unusable_input_raises_decode_error(buf, match):
    with pytest.raises(DecodeError, match=match):
        decode(buf)


def test_errors_name_the_slot():
    with pytest.raises(DecodeError) as e:
        decode(np.array([(3 << 32) | 5, 0], np.uint64))
    assert e.value.slot == 2 and "slot 2" in str(e.value)


def test_int64_and_uint64_decode_alike():
    b = BufferBuilder(1, 1, 4)
    b.put(0, 2**32 - 1, 1, B).put(0, 2**31 + 5, 1, E)  # high bit set: negative as int64
    a, c = decode(b.buf), decode(b.buf.view(np.int64))
    assert spans_of(a) == spans_of(c)


def test_capture_round_trip_and_bad_files(tmp_path):
    b = BufferBuilder(1, 2, 4)
    b.put(0, 1, 0, B).put(0, 9, 0, E).put(1, 2, 1, B).put(1, 4, 1, E)
    path = save_capture(tmp_path / "cap.npy", b.buf, {"events": ["load", "mma"], "groups": ["producer", "consumer"]},
                        kernel="k", write_stride=2)
    t = load_capture(path)
    assert t.names.event(1) == "mma" and t.names.group(0) == "producer" and t.meta["kernel"] == "k"
    assert t.names.event(5) == "event_5"
    trunc = tmp_path / "trunc.npy"
    trunc.write_bytes(path.read_bytes()[:-9])
    with pytest.raises(DecodeError, match="truncated"):
        load_capture(trunc)
    pickled = tmp_path / "obj.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DecodeError, match="cannot read"):
        load_capture(pickled)


def test_torch_tensor_input():
    torch = pytest.importorskip("torch")
    b = BufferBuilder(1, 1, 4)
    b.put(0, 10, 1, B).put(0, 20, 1, E)
    t = decode(torch.from_numpy(b.buf.view(np.int64)))
    assert t.spans.size == 1


def test_many_chunks_decode_like_one(monkeypatch):
    rng = np.random.default_rng(1)
    b = BufferBuilder(64, 4, 16)
    for lane in range(256):
        ts = 0
        for _ in range(6):
            ev = int(rng.integers(0, 3))
            ts += int(rng.integers(1, 50))
            b.put(lane, ts, ev, B)
            ts += int(rng.integers(1, 50))
            b.put(lane, ts, ev, E)
    whole = decode(b.buf)
    import host_decode.core.decoder as d

    monkeypatch.setattr(d, "CHUNK_SLOTS", 40)  # a few lanes per chunk
    parts = decode(b.buf)
    assert spans_of(whole) == spans_of(parts)
    assert whole.loss.totals == parts.loss.totals


# --- big-capture correctness (issue 16) -------------------------------------------------------------


def test_long_region_with_nothing_inside_decodes_forward(tmp_path):
    # one writer per lane: time never goes back, so a 3 s step (> 2**31 ns) is 3 s forward, not back
    b = BufferBuilder(1, 2, 6)
    b.put(0, 1000, 1, B).put(0, 1000 + 3_000_000_000, 1, E).put(0, 1000 + 3_000_000_100, 0, F)
    b.put(1, 1000, 2, B).put(1, 2000, 2, E).put(1, 2000 + 2**31 + 5, 2, B).put(1, 2100 + 2**31 + 5, 2, E)
    t = decode(b.buf)
    late = 1000 + 2**31 + 5
    assert spans_of(t) == [(0, 1, 0, 3_000_000_000, 0), (1, 2, 0, 1000, 0), (1, 2, late, late + 100, 0)]
    assert t.loss.totals["impossible_span"] == 0
    path = save_capture(tmp_path / "long.npy", b.buf)
    from host_decode.cli import main

    assert main(["decode", str(path), "-o", str(tmp_path / "long.pftrace"), "-q"]) == 0
    assert (tmp_path / "long.pftrace").stat().st_size > 0


def test_out_of_order_modes_keep_signed_steps():
    # atomic mode: the outer region's END sits in the slot after its BEGIN (slots reserved at the begin),
    # so the next slot (the inner region) is earlier in time: a step back, read as signed
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 1, B).put(0, 500, 1, E).put(0, 200, 2, B).put(0, 300, 2, E)
    t = decode(b.buf, meta={"mode": "atomic"})
    assert spans_of(t) == [(0, 1, 0, 400, 0), (0, 2, 100, 200, 0)]
    # a region's own BEGIN -> adjacent END step stays unsigned even there
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 1, B).put(0, 100 + 3_000_000_000, 1, E)
    assert spans_of(decode(b.buf, meta={"mode": "static"})) == [(0, 1, 0, 3_000_000_000, 0)]


def test_impossible_span_is_set_aside_and_the_rest_written(tmp_path):
    # static mode (slots chosen by the user, steps signed): a flipped timer bit makes the outer region's
    # BEGIN later than its END; that pair goes to its own bucket, the inner region is kept
    b = BufferBuilder(1, 2, 8)
    b.put(0, 1000, 1, B).put(0, 100, 2, B).put(0, 200, 2, E).put(0, 300, 1, E).put(0, 400, 0, F)
    b.put(1, 100, 3, B).put(1, 150, 3, E)
    t = decode(b.buf, meta={"mode": "static"})
    kept = [(int(r["lane"]), int(r["event"]), int(r["end_ns"] - r["start_ns"])) for r in t.spans]
    assert kept == [(0, 2, 100), (1, 3, 50)]
    assert t.loss.totals["impossible_span"] == 2 and t.loss.totals["paired_begin"] == 2
    assert sum(t.loss.totals.values()) == t.loss.nonzero_slots == 7
    per = {int(r["lane"]): int(r["impossible_span"]) for r in t.loss.per_lane}
    assert per == {0: 2, 1: 0}
    assert t.loss.lost == 2
    path = save_capture(tmp_path / "flip.npy", b.buf, mode="static")
    from host_decode.cli import main

    assert main(["decode", str(path), "-o", str(tmp_path / "flip.pftrace"), "-q"]) == 0
    assert (tmp_path / "flip.pftrace").stat().st_size > 0


@pytest.mark.parametrize("flipped", [2, 4])
def test_flipped_timer_bit_is_set_aside_and_the_lane_keeps_its_time(tmp_path, flipped):
    # cursor mode (one writer, unsigned steps): bit 31 of one record's timer flipped. Without the check
    # the steps into and out of it are both ~2**31 forward, so everything after it lands 2**32 ns late.
    times = [100, 200, 300, 400, 500, 600]
    kinds = [(1, B), (2, B), (2, E), (1, E), (5, INST), (0, F)]
    b = BufferBuilder(1, 1, 8)
    for k, (ts, (ev, ty)) in enumerate(zip(times, kinds)):
        b.put(0, ts + (1 << 31) * (k == flipped), ev, ty)
    t = decode(b.buf)
    assert t.loss.totals["impossible_time"] == 1
    assert sum(t.loss.totals[k] for k in LOSS_BUCKETS) == t.loss.nonzero_slots == 6
    assert t.loss.lost == 1 + (flipped == 2)  # the END's BEGIN is left unmatched
    assert int(t.lanes["last_ns"][0] - t.lanes["first_ns"][0]) == 500  # the finalize is where it was
    if flipped == 2:  # inner END: the inner region is gone, the outer one keeps its 300 ns
        assert spans_of(t) == [(0, 1, 0, 300, 0)] and t.loss.totals["unmatched_begin"] == 1
        assert t.instants["ts_ns"].tolist() == [400 + int(t.spans["start_ns"][0])]
    else:  # the instant
        assert spans_of(t) == [(0, 1, 0, 300, 0), (0, 2, 100, 200, 1)] and t.instants.size == 0
    path = save_capture(tmp_path / "flip.npy", b.buf)
    from host_decode.cli import main

    assert main(["decode", str(path), "-o", str(tmp_path / "flip.pftrace"), "-q"]) == 0


def test_one_long_step_is_kept_even_between_unrelated_records():
    # an idle lane: one step of 3 s between an instant and the next region (no way back): kept forward
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 5, INST).put(0, 100 + 3_000_000_000, 1, B).put(0, 200 + 3_000_000_000, 1, E)
    t = decode(b.buf)
    assert spans_of(t) == [(0, 1, 3_000_000_000, 3_000_000_100, 0)] and t.loss.totals["impossible_time"] == 0


@pytest.mark.parametrize("stride", ["x", float("nan"), 3.7, "8", 8.0, True, None])
def test_bad_write_stride_is_a_decode_error(tmp_path, stride):
    b = BufferBuilder(2, 2, 3)
    b.put(0, 10, 1, B).put(0, 20, 1, E)
    with pytest.raises(DecodeError, match="write_stride must be an integer"):
        decode(b.buf, write_stride=stride) if stride is not None else decode(b.buf, meta={"write_stride": "4"})
    path = save_capture(tmp_path / "s.npy", b.buf)
    import json

    side = path.with_suffix(".json")
    meta = json.loads(side.read_text())
    nan = isinstance(stride, float) and np.isnan(stride)
    meta["write_stride"] = "4" if stride is None else ("NaN" if nan else stride)
    side.write_text(json.dumps(meta))
    with pytest.raises(DecodeError, match="s.json: 'write_stride' must be an integer >= 1, got"):  # the sidecar schema
        load_capture(path)


def test_huge_write_stride_is_refused_before_allocating():
    b = BufferBuilder(2, 2, 3)  # 13 slots
    b.put(0, 10, 1, B).put(0, 20, 1, E)
    with pytest.raises(DecodeError, match="exceeds the 12 slots after the header"):
        decode(b.buf, write_stride=10**8)
    with pytest.raises(DecodeError, match="sidecar's write_stride 13 exceeds"):
        decode(b.buf, meta={"write_stride": 13})
    assert decode(b.buf, write_stride=12).spans.size == 0  # a one-row layout: record k=1 is then malformed


def test_inferred_stride_is_checked():
    # the first 65,536 lanes hold only a finalize (row 0) and the other lanes fill rows 0..4 up to the
    # end of the buffer: the sampled windows then see records of row 4 only and propose 4 * stride,
    # which leaves most records malformed; the stride that leaves none is taken instead
    num_lanes, rows = 70_000, 5
    buf = np.zeros(1 + num_lanes * rows, np.uint64)
    buf[0] = wire.pack_header(num_lanes, 1)
    lane = np.arange(num_lanes, dtype=np.uint64)

    def put(lanes, k, timer, event, etype):
        tag = wire.make_tag(lanes, np.uint64(event), np.uint64(etype))
        buf[wire.slot_index(lanes, k, num_lanes)] = wire.pack_record(np.uint64(timer), tag)

    put(lane[:65_536], 0, 100, 3, F)
    rest = lane[65_536:]
    for k, (timer, etype) in enumerate([(100, B), (200, E), (300, B), (400, E), (500, F)]):
        put(rest, k, timer, 1 if etype != F else 0, etype)
    assert infer_write_stride(buf[1:], num_lanes) == num_lanes
    t = decode(buf)
    assert t.spans.size == 2 * rest.size and t.loss.totals["malformed"] == 0


@pytest.mark.parametrize("untimed", ["dropped", "anchor_hi"])
def test_untimed_first_record_takes_the_first_timed_time(untimed):
    # lane 0 is the reference lane (the first with records) and opens with an untimed record: its
    # timer field (a drop count, or a high half) is no time; the lane's first timed record is
    b = BufferBuilder(2, 1, 6)
    if untimed == "dropped":
        b.put(0, 7, wire.DROPPED_EVENT_ID, INST)
    else:
        b.put(0, 0x1234, wire.ANCHOR_HI_EVENT_ID, INST)
    b.put(0, 0xFFFF_FF00, 1, B).put(0, 0xFFFF_FF80, 1, E)
    b.put(1, 0xFFFF_FF10, 1, B).put(1, 0xFFFF_FF90, 1, E)
    t = decode(b.buf)
    assert not t.absolute
    start = dict(zip(t.spans["lane"].tolist(), t.spans["start_ns"].tolist()))
    assert start[1] - start[0] == 16
    assert (t.spans["end_ns"] - t.spans["start_ns"]).tolist() == [128, 128]
    assert t.lanes["first_ns"].tolist() == [start[0], start[1]]
    if untimed == "dropped":
        assert t.lanes["dropped"].tolist() == [7, 0]


def test_lane_with_no_timed_record_has_no_time():
    b = BufferBuilder(2, 1, 4)
    b.put(0, 0x55, wire.ANCHOR_HI_EVENT_ID, INST)  # nothing else in lane 0
    b.put(1, 1000, 1, B).put(1, 1100, 1, E)
    t = decode(b.buf)
    assert t.lanes["first_ns"].tolist() == [-1, t.spans["start_ns"][0]]
    assert t.start_ns == int(t.spans["start_ns"][0])


def test_owned_buffer_decodes_like_a_loaded_one(tmp_path, monkeypatch):
    # load_capture reads a 1-D int64/uint64 .npy into memory only its decode sees, and decode hands
    # finished pages back to the kernel (madvise): the trace is the same as from np.load's array
    from host_decode.core import decoder, pages

    rng = np.random.default_rng(5)
    b = BufferBuilder(5000, 4, 6)  # 20,000 lanes: rows of 160 KB, many pages each
    for lane in rng.choice(20_000, 3000, replace=False).tolist():
        t = int(rng.integers(0, 2**32))
        b.put(lane, t, 1, B).put(lane, t + 100, 2, B).put(lane, t + 150, 2, E).put(lane, t + 400, 1, E)
        b.put(lane, t + 500, int(rng.integers(0, 64)), F)
    path = save_capture(tmp_path / "big.npy", b.buf)
    owned = pages.read_owned(path)
    assert isinstance(pages.mapping_of(owned), pages.OwnedBuffer) and (owned == b.buf).all()
    released = []
    real = pages.OwnedBuffer.madvise
    spy = lambda self, *a: released.append(a) or real(self, *a)  # noqa: E731
    monkeypatch.setattr(pages.OwnedBuffer, "madvise", spy, raising=False)
    monkeypatch.setattr(decoder, "CHUNK_SLOTS", 1 << 12)
    got = load_capture(path)
    want = decode(np.load(path))
    assert released and got.spans.size == 6000
    assert got.spans.tobytes() == want.spans.tobytes() and got.lanes.tobytes() == want.lanes.tobytes()
    assert got.loss.totals == want.loss.totals
    # a caller's array is never released, and what np.load must judge is read by np.load
    buf = np.load(path)
    decode(buf)
    assert (buf == b.buf).all() and pages.mapping_of(buf) is None
    np.save(tmp_path / "be.npy", b.buf.astype(">u8"))
    assert pages.read_owned(tmp_path / "be.npy") is None
    with pytest.raises(DecodeError, match="wrong dtype >u8"):
        load_capture(tmp_path / "be.npy")
    np.save(tmp_path / "2d.npy", b.buf[:12].reshape(3, 4))
    with pytest.raises(DecodeError, match="one-dimensional"):
        load_capture(tmp_path / "2d.npy")


def test_out_of_order_mode_travels_through_the_sidecar(tmp_path):
    # the README's C++ route: save_capture(..., mode="static") then load_capture (or `ikp decode`); the
    # nested region's slot comes after the outer END (a step back in time) and must decode in place
    b = BufferBuilder(1, 1, 8)
    b.put(0, 100, 1, B).put(0, 500, 1, E).put(0, 200, 2, B).put(0, 300, 2, E)
    path = save_capture(tmp_path / "static.npy", b.buf, mode="static")
    assert spans_of(load_capture(path)) == [(0, 1, 0, 400, 0), (0, 2, 100, 200, 0)]


def _anchored_launch(num_blocks=8, num_groups=4):
    """Every lane anchored at a %globaltimer reading (ns since the epoch), 4 region ids each."""
    b = BufferBuilder(num_blocks, num_groups, 12)
    t0 = 1_770_000_000_000_000_000
    for lane in range(num_blocks * num_groups):
        t = t0 + 1000 * lane
        b.anchor(lane, t)
        for ev in range(4):
            b.put(lane, t + 100 + 20 * ev, ev, B).put(lane, t + 110 + 20 * ev, ev, E)
        b.put(lane, t + 500, lane % 7, F)
    return b


def test_a_flipped_anchor_bit_still_writes_every_output(tmp_path):
    # one high bit of one lane's ANCHOR_HI: a plausible time 208 days away. The trace spans those days;
    # the writers and summaries used to refuse it (packed int64 keys of time x lanes overflowed)
    b = _anchored_launch(64, 4)
    b.buf[wire.slot_index(7, 1, 256)] ^= np.uint64(1 << 54)
    path = save_capture(tmp_path / "flip.npy", b.buf)
    t = load_capture(path)
    assert t.spans.size == 256 * 4 and t.loss.lost == 0
    assert int(t.spans["end_ns"].max() - t.spans["start_ns"].min()) > 1 << 54
    from host_decode.cli import main

    for out in ("flip.pftrace", "flip_trace.json"):
        assert main(["decode", str(path), "-o", str(tmp_path / out), "-q", "--lane-counters", "on"]) == 0
    assert main(["stats", str(path)]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0


@pytest.mark.parametrize("hi", [0x4000_0000, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF])
def test_an_impossible_anchor_is_set_aside_and_its_lane_placed_without_it(tmp_path, hi):
    # an ANCHOR_HI >= 2**30 is a time >= 2**62 ns (year 2116): corrupted, never a %globaltimer reading.
    # Kept, it made times negative or past int64 (an OverflowError in the Perfetto writer)
    b = _anchored_launch(2, 1)
    slot = wire.slot_index(1, 1, 2)  # lane 1's ANCHOR_HI: its timer word is the high half of the anchor
    b.buf[slot] = np.uint64(b.buf[slot]) & np.uint64(0xFFFF_FFFF) | np.uint64(hi << 32)
    t = decode(b.buf)
    assert t.loss.totals["impossible_time"] == 1 and t.loss.lost == 1
    assert sum(t.loss.totals[k] for k in LOSS_BUCKETS) == t.loss.nonzero_slots
    assert (t.spans["start_ns"] > 0).all() and (t.spans["end_ns"] - t.spans["start_ns"] == 10).all()
    # the lane is placed by its low timer word next to the anchored lane: 1000 ns after it, as written
    assert int(t.lanes["first_ns"][1] - t.lanes["first_ns"][0]) == 1000
    path = save_capture(tmp_path / "hi.npy", b.buf)
    from host_decode.cli import main

    assert main(["decode", str(path), "-o", str(tmp_path / "hi.pftrace"), "-q"]) == 0


@pytest.mark.parametrize("content, match", [
    (b'{"format": "ikp-v1", "events": 5}', "sidecar names: names.events"),
    (b'\xff\xfe{}', "not valid UTF-8 JSON"),
    (b'{"format": "ikp-v1", "events": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
])
def test_a_bad_sidecar_is_a_decode_error_naming_it(tmp_path, content, match):
    b = BufferBuilder(1, 1, 6)
    b.put(0, 10, 1, B).put(0, 20, 1, E)
    np.save(tmp_path / "c.npy", b.buf)
    (tmp_path / "c.json").write_bytes(content)
    with pytest.raises(DecodeError, match=match) as e:
        load_capture(tmp_path / "c.npy")
    assert "c.json" in str(e.value)


def test_one_corrupted_tag_does_not_break_stride_inference():
    # a persistent grid (stride 132 > 100 lanes), one tag's lane field flipped (5 -> 4): both gcds of the
    # offsets became meaningless and inference fell back to num_lanes, leaving 800 of 900 records malformed
    b = BufferBuilder(100, 1, 10, write_stride=132)
    for lane in range(100):
        t = 1000 + lane
        for _ in range(4):
            b.put(lane, t, 1, B).put(lane, t + 10, 1, E)
            t += 20
        b.put(lane, t, 0, F)
    b.buf[wire.slot_index(5, 3, 132)] ^= np.uint64(1 << wire.LANE_SHIFT)
    t = decode(b.buf)
    assert t.write_stride == 132 and t.loss.totals["malformed"] == 1 and t.spans.size == 399


def test_spans_csv_round_trip(tmp_path):
    """`ikp decode --spans-csv`: one row per span (block, group, event, start, end, duration), exact ns."""
    from host_decode.cli import main

    b = BufferBuilder(2, 2, 8)
    for lane in range(4):
        b.put(lane, 10 + lane, 1, B).put(lane, 20, 2, B).put(lane, 30, 2, E).put(lane, 45, 1, E)
    cap = save_capture(tmp_path / "cap.npy", b.buf)
    assert main(["decode", str(cap), "--spans-csv", str(tmp_path / "s.csv"), "-q"]) == 0
    text = (tmp_path / "s.csv").read_text()
    assert text.splitlines()[0] == "block,group,event,start_ns,end_ns,duration_ns"
    rows = np.loadtxt(tmp_path / "s.csv", delimiter=",", skiprows=1, dtype=np.int64)
    s = load_capture(cap).spans
    dur = s["end_ns"] - s["start_ns"]
    want = np.column_stack([s["block"], s["group"], s["event"], s["start_ns"], s["end_ns"], dur])
    assert rows.shape == (8, 6) and (rows == want).all()
