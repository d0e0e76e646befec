"""Payload instants (wire.PAYLOAD_IDS: FLAG_ADDR, FLAG_VALUE) in the decoder, on hand-built buffers: each one is
decoded into trace.payloads with the record it belongs to (the record of its lane just before it, a user instant or
the END of a paired region), or counted as a payload_orphan; none is a user instant, none moves a time."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.core import decoder, wire
from host_decode.core.decoder import decode
from host_decode.core.model import LOSS_BUCKETS

B, E, INST, F = (int(t) for t in wire.EventType)
ADDR, VALUE = wire.FLAG_ADDR_EVENT_ID, wire.FLAG_VALUE_EVENT_ID
T0 = 1 << 40  # absolute ns of the lanes' anchors


def buffer(lanes: list[list[tuple[int, int, int]]], records_per_lane: int = 16) -> np.ndarray:
    """A v1 buffer whose lane i holds the records lanes[i] = [(timer, event id, type)] in slot order (one group)."""
    n = len(lanes)
    buf = np.zeros(wire.buffer_slots(n, records_per_lane), np.uint64)
    buf[0] = wire.pack_header(n, 1)
    for lane, records in enumerate(lanes):
        for k, (timer, event, etype) in enumerate(records):
            buf[wire.slot_index(lane, k, n)] = wire.pack_record(timer & 0xFFFF_FFFF, wire.make_tag(lane, event, etype))
    return buf


def anchors(t64: int = T0) -> list[tuple[int, int, int]]:
    return [(t64 & 0xFFFF_FFFF, wire.ANCHOR_LO_EVENT_ID, INST), (t64 >> 32, wire.ANCHOR_HI_EVENT_ID, INST)]


def flag_lane() -> list[tuple[int, int, int]]:
    """A signal (instant 5 + its address and value), a wait (region 6 + its address), a plain instant 9."""
    return anchors() + [
        (1000, 5, INST), (0x0001_2345, ADDR, INST), (0xFFFF_FFFF, VALUE, INST),
        (1100, 6, B), (1500, 6, E), (0x8000_0000, ADDR, INST),
        (1600, 9, INST), (1700, 0, F),
    ]


def check_accounting(trace) -> None:
    totals = trace.loss.totals
    assert sum(totals[b] for b in LOSS_BUCKETS) == trace.loss.nonzero_slots


def test_payloads_belong_to_the_record_before_them():
    trace = decode(buffer([flag_lane()]))
    base = T0 - (T0 & 0xFFFF_FFFF)  # the lanes' 64-bit origin
    p = trace.payloads
    assert p["payload"].tolist() == [ADDR, VALUE, ADDR]
    assert p["event"].tolist() == [5, 5, 6] and p["kind"].tolist() == [INST, INST, E]
    assert p["index"].tolist() == [0, 1, 0]
    assert p["value"].tolist() == [0x0001_2345, 0xFFFF_FFFF, 0x8000_0000]
    assert (p["ts_ns"] - base).tolist() == [1000, 1000, 1500]
    assert (p["begin_ns"] - base).tolist() == [1000, 1000, 1100]  # the wait's BEGIN
    assert trace.instants["event"].tolist() == [5, 9]  # no payload among the user's instants
    assert (trace.spans["start_ns"] - base).tolist() == [1100] and (trace.spans["end_ns"] - base).tolist() == [1500]
    assert trace.loss.totals["payload_orphan"] == 0 and trace.loss.lost == 0
    assert trace.loss.totals["instant"] == 2 + 2 + 3  # anchors, user instants, payloads: decoded instants
    check_accounting(trace)


def test_payload_values_move_no_time():
    """Payloads carry data, not time: the same lane without them decodes to the same times."""
    with_payloads = decode(buffer([flag_lane()]))
    plain = decode(buffer([[r for r in flag_lane() if r[1] not in wire.PAYLOAD_IDS]]))
    for table in ("spans", "instants"):
        assert np.array_equal(getattr(with_payloads, table), getattr(plain, table))
    for field in ("first_ns", "last_ns", "finalize_ns"):
        assert with_payloads.lanes[field].tolist() == plain.lanes[field].tolist()


def test_orphans_are_counted_not_decoded():
    lanes = [
        [(0x1234, ADDR, INST), (100, 3, INST)],  # first record of its lane: nothing before it
        anchors() + [(0x1234, ADDR, INST)],  # after ANCHOR_HI: not a record a payload can belong to
        [(100, 4, B), (0x1234, ADDR, INST), (0x5, VALUE, INST)],  # after a BEGIN that never ended
        [(100, 4, E), (0x1234, ADDR, INST)],  # after an END without its BEGIN
        [(100, 2, INST), (0x1234, ADDR, INST), (300, 2, INST), (0x99, VALUE, INST)],  # both belong
    ]
    trace = decode(buffer(lanes))
    assert trace.loss.totals["payload_orphan"] == 5
    assert trace.payloads["lane"].tolist() == [4, 4] and trace.payloads["value"].tolist() == [0x1234, 0x99]
    per_lane = {int(r["lane"]): int(r["payload_orphan"]) for r in trace.loss.per_lane}
    assert per_lane == {0: 1, 1: 1, 2: 2, 3: 1, 4: 0}
    assert trace.loss.lost == 5 + 1 + 1  # the orphans, the unmatched BEGIN and END
    check_accounting(trace)
    assert trace.loss.to_json()["payload_orphan"] == 5


def test_a_flipped_bit_in_a_signal_time_orphans_its_payloads():
    """A signal instant whose timer has a flipped high bit is set aside (impossible_time) even though payloads
    follow it (they take the time after them, not its time); its payloads then belong to nothing."""
    lane = anchors() + [(1000, 5, INST), (1000 | 1 << 31, 5, INST), (0x42, ADDR, INST), (0x7, VALUE, INST),
                        (1200, 5, INST), (0x43, ADDR, INST), (1300, 0, F)]
    trace = decode(buffer([lane]))
    assert trace.loss.totals["impossible_time"] == 1 and trace.loss.totals["payload_orphan"] == 2
    assert trace.payloads["value"].tolist() == [0x43]
    assert trace.lanes["last_ns"][0] - trace.lanes["first_ns"][0] < 1 << 20  # no 2**31 ns jump
    check_accounting(trace)


def test_chunks_decode_payloads_like_one(monkeypatch):
    lanes = [flag_lane() for _ in range(9)]
    whole = decode(buffer(lanes))
    monkeypatch.setattr(decoder, "CHUNK_SLOTS", 16)
    chunked = decode(buffer(lanes))
    assert chunked.payloads.size == 27 and np.array_equal(chunked.payloads, whole.payloads)


def test_the_buffer_stays_v1():
    """What a peer's v1 decoder reads: every record's tag names its own lane, an id of 10 bits and a type; the
    payloads are INSTANT records (a peer shows them as extra instants)."""
    buf = buffer([flag_lane(), flag_lane()])
    body = buf[1:]
    slots = np.flatnonzero(body)
    _, lane, event, etype = wire.unpack_records(body[slots])
    assert (lane == slots % 2).all() and (event <= wire.MAX_EVENT_ID).all()
    assert set(etype[np.isin(event, wire.PAYLOAD_IDS)].tolist()) == {INST}


@pytest.mark.parametrize("mode", ["cursor", "atomic"])
def test_both_step_rules_keep_payloads(mode):
    trace = decode(buffer([flag_lane()]), meta={"mode": mode})
    assert trace.payloads.size == 3 and trace.loss.lost == 0


def test_a_merge_of_launches_keeps_each_payload_with_its_record():
    """analysis.sessions.concat renumbers lanes and blocks and moves times per part: payloads move with them."""
    from host_decode.analysis import sessions

    one = decode(buffer([flag_lane()]), meta={"launch_index": 0})
    two = decode(buffer([flag_lane(), flag_lane()]), meta={"launch_index": 1})
    merged = sessions.concat(sessions.parts_from_traces([one, two]), mode="stacked")
    p = merged.payloads
    assert p.size == 9 and p["block"].tolist() == [0] * 3 + [1] * 3 + [2] * 3
    instants = merged.instants[merged.instants["event"] == 5]
    assert p["ts_ns"][p["event"] == 5].tolist() == np.repeat(instants["ts_ns"], 2).tolist()
