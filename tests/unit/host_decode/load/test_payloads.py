"""Payload records (FLAG_ADDR / FLAG_VALUE) split out at load time (host_decode/load/payloads.py)."""

import json

import numpy as np

from host_decode.core import wire
from host_decode.core.decoder import decode
from host_decode.load.capture import load_capture
from host_decode.load.payloads import attach_payloads, split_payloads
from tests.support.flag_captures import FLAG_ADDR, FLAG_VALUE, INSTANT, RankCapture, signal_site, wait_site

T = 1_750_000_000_123_000_000
SITES = [signal_site(1, "k.py:1"), wait_site(2, "k.py:2")]


def capture(tmp_path, with_payloads=True, name="cap"):
    """Two blocks, two warps: regions, signals and waits, addresses chosen so that unsigned steps through them
    would wrap (their low 32 bits are far from the times')."""
    cap = RankCapture(rank=0, num_blocks=2, warps=2, sites=SITES, events={5: "work"})
    for lane in range(4):
        b, w = divmod(lane, 2)
        t = T + 1000 * lane
        cap.region(b, w, 5, t, t + 500)
        addr = 0x7F00_0000_0000 + ((lane * 0x9E37_79B9) & 0xFFFF_FFF0)
        if with_payloads:
            cap.signal(b, w, 1, t + 600, addr, value=3 if lane == 1 else None)
            cap.wait(b, w, 2, t + 700, t + 900, addr + 4, value=7)
        else:
            cap.raw(lane, [(t + 600, 1, INSTANT)], t + 600)
            cap.raw(lane, [(t + 700, 2, 0), (t + 900, 2, 1)], t + 700)
        cap.region(b, w, 5, t + 1000, t + 1500)
    return cap.save(tmp_path / f"{name}.npy")


def test_payloads_leave_the_timeline_alone(tmp_path):
    a = load_capture(capture(tmp_path, True, "a"))
    b = load_capture(capture(tmp_path, False, "b"))
    assert np.array_equal(a.spans, b.spans)
    assert np.array_equal(a.instants, b.instants)
    assert a.spans["end_ns"].max() == T + 3000 + 1500  # no lane moved by 2**32 ns
    assert a.loss.totals == {**b.loss.totals, "instant": b.loss.totals["instant"] + a.payloads.size}


def test_every_payload_is_kept_or_counted(tmp_path):
    trace = load_capture(capture(tmp_path))
    p = trace.payloads
    assert p.size == 4 * 3 + 1  # per lane: a signal's address (lane 1: and a value), a wait's address and value
    addr = p[p["event"] == FLAG_ADDR]
    assert (addr["of_event"] == np.tile([1, 2], 4)).all()
    assert (addr["of_type"] == np.tile([INSTANT, 1], 4)).all()  # a signal's INSTANT, a wait's END
    assert (addr["ts_ns"] == np.concatenate([[T + 1000 * k + 600, T + 1000 * k + 900] for k in range(4)])).all()
    expect = [((0x7F00_0000_0000 + ((k * 0x9E37_79B9) & 0xFFFF_FFF0) + 4 * j) >> 2) & 0xFFFF_FFFF
              for k in range(4) for j in range(2)]
    assert addr["value"].tolist() == expect
    val = p[p["event"] == FLAG_VALUE]
    assert val["value"].tolist() == [7, 3, 7, 7, 7]
    assert not np.isin(trace.instants["event"], [FLAG_ADDR, FLAG_VALUE]).any()


def test_a_payload_the_decoder_sets_aside_is_counted_once(tmp_path):
    path = capture(tmp_path)
    buf = np.load(path)
    stride = json.loads(path.with_suffix(".json").read_text())["write_stride"]
    # lane 3's signal address claims lane 2: malformed for the decoder and left out of the split alike
    slot = 1 + 3 + 5 * stride  # lane 3, record 5 (2 anchors, BEGIN, END, INSTANT, ADDR)
    timer, lane, event, etype = wire.unpack_records(buf[slot:slot + 1])
    assert event[0] == FLAG_ADDR
    buf[slot] = wire.pack_records(timer, np.array([2]), event, etype)[0]
    np.save(path, buf)
    trace = load_capture(path)
    assert trace.loss.totals["malformed"] == 1
    assert (trace.payloads["lane"] == 3).sum() == 2 and trace.payloads.size == 12
    assert "payload_losses" not in trace.meta


def test_lanes_whose_payloads_do_not_line_up_keep_none(tmp_path):
    path = capture(tmp_path)
    buf = np.load(path)
    side = json.loads(path.with_suffix(".json").read_text())
    found = split_payloads(buf, side["write_stride"], 4)
    trace = decode(buf, meta=side)
    extra = found[found["lane"] == 0][:1]  # one payload of lane 0 the decoded trace does not hold
    both = np.concatenate([found, extra])
    attach_payloads(trace, both[np.argsort(both["lane"], kind="stable")])
    assert 0 not in trace.payloads["lane"].tolist() and trace.payloads.size == 13 - 3
    assert trace.meta["payload_losses"] == {"set_aside_by_decoder": 4}


def test_captures_without_flags_are_untouched(tmp_path):
    path = capture(tmp_path)
    side = json.loads(path.with_suffix(".json").read_text())
    side.pop("flags")
    path.with_suffix(".json").write_text(json.dumps(side))
    trace = load_capture(path)
    raw = decode(np.load(path), names=trace.names, meta=dict(side, source=str(path)), source=str(path))
    assert trace.payloads.size == 0  # decoded as the buffer is: payload ids are user instants
    assert np.array_equal(trace.instants, raw.instants) and np.array_equal(trace.spans, raw.spans)


def test_split_finds_the_record_each_payload_follows():
    buf = np.zeros(1 + 1 * 8, np.uint64)
    buf[0] = wire.pack_header(1, 1)
    recs = [(100, 7, INSTANT), (0xDEAD, FLAG_ADDR, INSTANT), (0xBEEF, FLAG_VALUE, INSTANT), (200, 7, INSTANT)]
    words = wire.pack_records(np.array([r[0] for r in recs]), np.zeros(4, np.int64), np.array([r[1] for r in recs]),
                              np.array([r[2] for r in recs]))
    buf[1:5] = words
    found = split_payloads(buf, 1, 1)
    assert found["value"].tolist() == [0xDEAD, 0xBEEF]
    assert found["of_event"].tolist() == [7, 7]
    timer, *_ = wire.unpack_records(buf[1:5])
    assert timer.tolist() == [100, 100, 100, 200]  # payloads now sit at their record's time
