"""Golden tests for the decoder's special cases added for speed: the provisional per-lane origins of
_Timeline (and _assemble's correction when they turn out wrong), the dense-chunk path, the packed span
writes and the shortcut in stride inference. Each case is decoded with one chunk and with a chunk per
lane or two, and must give the hand-computed times."""

import numpy as np
import pytest

import host_decode.core.decoder as d
from host_decode.core import stride as stride_mod
from host_decode.core import wire
from host_decode.core.decoder import decode
from tests.support.buffers import INST, B, BufferBuilder, E, F

M = 0xFFFF_FFFF
CHUNKS = [1 << 16, 1, 8]  # one chunk; a chunk per lane; a few lanes per chunk


def spans_of(trace):
    return [tuple(int(x) for x in r) for r in trace.spans[["lane", "event", "start_ns", "end_ns", "depth"]]]


@pytest.fixture(params=CHUNKS)
def chunk_slots(request, monkeypatch):
    monkeypatch.setattr(d, "CHUNK_SLOTS", request.param)
    return request.param


def test_anchor_after_the_lanes_first_record(chunk_slots):
    # the origin of lane 0 is only known once its cumulative time at the anchor is: corrected later
    t0 = (5 << 32) + 123
    b = BufferBuilder(2, 1, 8)
    b.put(0, (t0 - 100) & M, 1, B).anchor(0, t0).put(0, (t0 + 100) & M, 1, E)
    b.put(1, (t0 + 7) & M, 2, B).put(1, (t0 + 9) & M, 2, E)
    t = decode(b.buf)
    assert t.absolute
    assert spans_of(t) == [(0, 1, t0 - 100, t0 + 100, 0), (1, 2, t0 + 7, t0 + 9, 0)]
    assert t.lanes["first_ns"].tolist() == [t0 - 100, t0 + 7]
    assert t.start_ns == t0 - 100


def test_first_anchored_lane_in_a_later_chunk(chunk_slots):
    # lanes 0-2 (peer style, no anchors) come before the only anchored lane: with small chunks their
    # origins were applied on a relative timeline and must move onto the absolute one
    t0 = (9 << 32) + 2**32 - 50  # the low half wraps soon after the anchor
    b = BufferBuilder(4, 1, 8)
    for lane in range(3):
        b.put(lane, (t0 + 10 * lane) & M, 1, B).put(lane, (t0 + 10 * lane + 80) & M, 1, E)
        b.put(lane, (t0 + 10 * lane + 90) & M, 3, INST)
    b.anchor(3, t0 + 1).put(3, (t0 + 2) & M, 2, B).put(3, (t0 + 3) & M, 2, E).put(3, (t0 + 4) & M, 7, F)
    t = decode(b.buf)
    assert t.absolute
    assert spans_of(t) == [(lane, 1, t0 + 10 * lane, t0 + 10 * lane + 80, 0) for lane in range(3)] + [
        (3, 2, t0 + 2, t0 + 3, 0)
    ]
    assert t.instants["ts_ns"].tolist() == [t0 + 90, t0 + 100, t0 + 110]
    assert t.lanes["finalize_ns"].tolist() == [-1, -1, -1, t0 + 4]
    assert t.lanes["last_ns"].tolist() == [t0 + 90, t0 + 100, t0 + 110, t0 + 4]


def test_relative_timeline_shifted_non_negative_after_the_fact(chunk_slots):
    # no anchors; lane 1 starts 40 ns "before" timer 0 of lane 0: the launch origin moves by 2**32
    b = BufferBuilder(2, 1, 4)
    b.put(0, 10, 1, B).put(0, 30, 1, E)
    b.put(1, 2**32 - 30, 1, B).put(1, 5, 1, E)
    t = decode(b.buf)
    assert not t.absolute
    assert spans_of(t) == [(0, 1, 2**32 + 10, 2**32 + 30, 0), (1, 1, 2**32 - 30, 2**32 + 5, 0)]
    assert t.start_ns == 2**32 - 30


def test_far_origin_is_added_after_decoding(chunk_slots):
    # an origin at or beyond 2**62 ns (an unanchored lane placed just after an anchor below it; an anchor
    # itself that far is impossible): the chunk keeps lane-relative times, _assemble adds the origin
    t0 = (1 << 62) - 2000
    b = BufferBuilder(1, 2, 8)
    b.anchor(0, t0).put(0, (t0 + 5) & M, 1, B).put(0, (t0 + 9) & M, 1, E)
    b.put(1, (t0 + 3000) & M, 1, B).put(1, (t0 + 3004) & M, 1, E)
    t = decode(b.buf)
    assert spans_of(t) == [(0, 1, t0 + 5, t0 + 9, 0), (1, 1, t0 + 3000, t0 + 3004, 0)]
    assert t.lanes["first_ns"].tolist() == [t0, t0 + 3000]


def test_dense_and_sparse_chunks_decode_alike(chunk_slots):
    # every slot written (the dense path) vs the same records with a spare zero column (compaction)
    rng = np.random.default_rng(3)
    nb, ng, rpl = 3, 2, 10
    per_lane = {}
    for lane in range(nb * ng):
        ts = int(rng.integers(0, 2**32))
        recs = [(ts, wire.ANCHOR_LO_EVENT_ID, INST), (0, wire.ANCHOR_HI_EVENT_ID, INST)]
        for k in range(rpl - 3):  # nested regions of two ids, depth up to 2, wrapping the timer
            ts += int(rng.integers(1, 2**30))
            recs.append((ts, [1, 2, 2, 1, 3, 3, 4][k], [B, B, E, E, B, E, INST][k]))
        recs.append((ts + 1, 9, F))
        per_lane[lane] = recs
    traces = []
    for stride in (nb * ng, nb * ng + 1):
        b = BufferBuilder(nb, ng, rpl, write_stride=stride)
        for lane, recs in per_lane.items():
            for ts, ev, ty in recs:
                b.put(lane, ts & M, ev, ty)
        if stride == nb * ng:
            assert np.count_nonzero(b.buf[1:]) == b.buf.size - 1  # really dense
        traces.append(decode(b.buf, write_stride=stride))
    dense, sparse = traces
    assert dense.spans.tobytes() == sparse.spans.tobytes()
    assert dense.instants.tobytes() == sparse.instants.tobytes()
    assert dense.lanes.tobytes() == sparse.lanes.tobytes()
    assert dense.loss.totals == sparse.loss.totals
    assert dense.spans["depth"].tolist() == [0, 1, 0] * (nb * ng)
    assert dense.spans["group"].tolist() == [lane % ng for lane in range(nb * ng) for _ in range(3)]
    assert dense.spans["block"].tolist() == [lane // ng for lane in range(nb * ng) for _ in range(3)]


def test_dense_chunk_with_a_malformed_record(chunk_slots):
    b = BufferBuilder(2, 1, 2)
    b.put(0, 10, 1, B).put(0, 20, 1, E)
    b.put(1, 11, 1, B).put(1, 21, 1, E, k=1, tag_lane=0)  # lane 1's second slot claims lane 0
    t = decode(b.buf, write_stride=2)
    assert t.loss.totals["malformed"] == 1 and t.loss.totals["unmatched_begin"] == 1
    assert t.meta["first_malformed_slot"] == 1 + 1 + 1 * 2
    assert spans_of(t) == [(0, 1, 10, 20, 0)]


def test_span_rows_round_trip_every_field():
    # the packed writes put each field where SPAN_DTYPE says, including depths past int16 (wrapping)
    nb, ng = 3, 5
    depth = 40_000
    b = BufferBuilder(nb, ng, 2 * depth + 2)
    lane = nb * ng - 1
    for k in range(depth):
        b.put(lane, k, 1000 - k % 7 if k % 7 else 1000, B)
    for k in range(depth - 1, -1, -1):
        b.put(lane, 2 * depth - k, 1000 - k % 7 if k % 7 else 1000, E)
    t = decode(b.buf)
    s = t.spans
    assert s.size == depth and (s["lane"] == lane).all()
    assert (s["block"] == lane // ng).all() and (s["group"] == lane % ng).all()
    assert s["event"].tolist() == [1000 - k % 7 if k % 7 else 1000 for k in range(depth)]
    assert s["depth"].tolist() == np.arange(depth).astype(np.int16).tolist()
    assert s["start_ns"].tolist() == list(range(depth))
    assert s["end_ns"].tolist() == [2 * depth - k for k in range(depth)]


def test_stride_inference_shortcut_agrees_with_full_gcd():
    rng = np.random.default_rng(0)
    for g in (1, 3, 7, 1940, 2**20 + 1):
        v = rng.integers(1, 2**40 // g, 1000) * g
        assert stride_mod._all_multiples(v, g)
        w = v.copy()
        w[int(rng.integers(0, w.size))] += 1
        assert stride_mod._all_multiples(w, g) == (g == 1)


def test_field_by_field_span_writes_match_the_packed_ones(monkeypatch):
    # the fallback for a SPAN_DTYPE layout or byte order the packed writes do not know
    b = BufferBuilder(2, 3, 8)
    for lane in range(6):
        b.anchor(lane, (3 << 32) + 100 * lane).put(lane, 100 * lane + 5, lane % 4, B).put(lane, 100 * lane + 6, 9, B)
        b.put(lane, 100 * lane + 7, 9, E).put(lane, 100 * lane + 8, lane % 4, E)
    packed = decode(b.buf)
    monkeypatch.setattr(d, "_SPAN_WORDS", False)
    plain = decode(b.buf)
    assert packed.spans.size == 12 and packed.spans.tobytes() == plain.spans.tobytes()
