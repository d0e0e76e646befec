"""The Perfetto writer, checked the way trace processor would import it.

The bytes are decoded with the official protos (``perfetto`` package) and replayed: every packet parses,
no field anywhere is unknown to the protos, interned ids are defined before use on the one sequence,
the track tree is whole (parents exist, explicit ordering, ranks), events sorted by timestamp (file
order for ties, as the importer does) nest strictly on every track, and the resulting slices, instants
and counters equal what the span table says. The validator itself is tested on corrupted traces.
"""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.core.model import SPAN_DTYPE, Names, Trace
from host_decode.writers import lane_counters as lc
from host_decode.writers import lanes as ln
from host_decode.writers import order as od
from host_decode.writers import perfetto as pf
from host_decode.writers import protobuf
from host_decode.writers.options import TraceOptions
from tests.support.perfetto_replay import (
    ORIGIN,
    TraceError,
    check_against_trace,
    lane_of_track,
    make_trace,
    random_trace,
    replay,
    unknown_fields,
)
from tests.support.stream_oracle import KIND_BEGIN, KIND_INSTANT, merged_stream

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

# --- the validator: what trace processor would do ---------------------------------------------------


def brute_lanes_inside(trace: Trace, event: int, t_rel: int) -> int:
    origin = pf.trace_origin(trace)
    sp = trace.spans[trace.spans["event"] == event]
    inside = (sp["start_ns"] - origin <= t_rel) & (t_rel < sp["end_ns"] - origin)
    return len(set(sp["lane"][inside].tolist()))


def check_counters(trace: Trace, result: dict) -> None:
    tracks = result["tracks"]
    by_name = {d.name: u for u, d in tracks.items() if d.HasField("counter")}
    origin = pf.trace_origin(trace)
    ids = sorted(set(trace.spans["event"].tolist()))
    assert set(by_name) == {f"lanes in {trace.names.event(e)}" for e in ids}
    for e in ids:
        samples = result["counters"][by_name[f"lanes in {trace.names.event(e)}"]]
        ts = [t for t, _ in samples]
        assert ts == sorted(set(ts)), "one sample per timestamp, in order"
        assert samples[0] == (0, 0) or samples[0][0] == 0
        sp = trace.spans[trace.spans["event"] == e]
        probe = sorted(set((sp["start_ns"] - origin).tolist()) | set((sp["end_ns"] - origin).tolist()) | set(ts))
        for t in probe:  # the step function at every boundary equals an independent count
            k = np.searchsorted(ts, t, side="right") - 1
            assert samples[k][1] == brute_lanes_inside(trace, e, t), (e, t)


def check_strict_nesting_matches_depth(trace: Trace, result: dict) -> None:
    """For lanes without overlapping ids, each slice's depth on its track is the model's depth."""
    lane_of = lane_of_track(result["tracks"], trace.num_groups)
    origin = pf.trace_origin(trace)
    depth = {}
    for r in trace.spans:
        depth.setdefault((int(r["lane"]), int(r["start_ns"] - origin), int(r["end_ns"] - r["start_ns"])), []).append(
            int(r["depth"])
        )
    for s in result["slices"]:
        if not s["instant"]:
            assert s["depth"] in depth[(lane_of[s["track"]], s["ts"], s["dur"])]


def tree_checks(result: dict, trace: Trace) -> None:
    tracks = result["tracks"]
    roots = [d for d in tracks.values() if not d.HasField("parent_uuid")]
    assert len(roots) == 1
    root = roots[0]
    assert root.child_ordering == pb.TrackDescriptor.EXPLICIT
    for d in tracks.values():
        if any(c.parent_uuid == d.uuid for c in tracks.values()):
            assert d.child_ordering == pb.TrackDescriptor.EXPLICIT, d.name
        if d.sibling_merge_key:
            assert d.sibling_merge_behavior == pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
            assert d.name == trace.names.group(int(d.sibling_merge_key.split()[1]))


def write_and_replay(trace: Trace, tmp_path, name="t.pftrace", args=True, lane_counters="auto") -> dict:
    path = tmp_path / name
    stats = pf.write_perfetto(trace, path, TraceOptions(slice_args=args, lane_counters=lane_counters))
    data = path.read_bytes()
    assert stats.bytes == len(data)
    return replay(data)


# --- tests -----------------------------------------------------------------------------------------


def test_nested_and_reentrant_one_track(tmp_path):
    lanes = {
        0: [("B", 0, 0), ("B", 1, 10), ("B", 1, 20), ("E", 1, 30), ("E", 1, 40), ("I", 5, 45), ("E", 0, 50)],
        3: [("B", 0, 5), ("E", 0, 15)],
    }
    trace = make_trace(
        lanes,
        sm={0: 4, 3: 9},
        names=Names(events={0: "mainloop", 1: "mma"}, groups={0: "producer", 1: "consumer"}),
        meta={"kernel": "gemm", "device": "H100"},
    )
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    check_strict_nesting_matches_depth(trace, res)
    check_counters(trace, res)
    tree_checks(res, trace)
    group_tracks = [d for d in res["tracks"].values() if d.sibling_merge_key]
    assert len(group_tracks) == 2  # no overlap: one track per lane
    names = {d.name for d in res["tracks"].values()}
    assert {"gemm on H100", "SM 4", "SM 9", "block 0 (SM 4)", "block 1 (SM 9)", "producer", "consumer",
            "lanes in mainloop", "lanes in mma"} <= names
    mma = [s for s in res["slices"] if s["name"] == "mma"]
    assert sorted((s["depth"], s["dur"]) for s in mma) == [(1, 30), (2, 10)]
    inst = [s for s in res["slices"] if s["instant"]]
    assert len(inst) == 1 and inst[0]["depth"] == 1 and inst[0]["args"]["lane"] == 0


def test_overlap_goes_to_sibling_track(tmp_path):
    # tma (8) and mma (1) cross inside mainloop (0): tma (the larger id) moves to a sibling track with
    # the same merge key
    lanes = {
        1: [("B", 0, 0), ("B", 8, 10), ("B", 1, 20), ("E", 8, 30), ("B", 8, 35), ("E", 1, 40), ("E", 8, 45),
            ("E", 0, 60)]
    }
    trace = make_trace(lanes, names=Names(events={0: "mainloop", 1: "mma", 8: "tma"}, groups={1: "consumer"}))
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    check_counters(trace, res)
    tree_checks(res, trace)
    sib = [u for u, d in res["tracks"].items() if d.sibling_merge_key == "group 1"]
    assert len(sib) == 2
    d0, d1 = (res["tracks"][u] for u in sib)
    assert d0.parent_uuid == d1.parent_uuid and d0.name == d1.name == "consumer"
    assert d0.sibling_order_rank != d1.sibling_order_rank
    track_of = {s["name"]: set() for s in res["slices"]}
    for s in res["slices"]:
        track_of[s["name"]].add(s["track"])
    assert track_of["mainloop"] == track_of["mma"] != track_of["tma"]  # the largest crossing id moves
    assert all(s["parent"] is not None for s in res["slices"] if s["name"] == "mma")
    assert all(s["depth"] == 0 for s in res["slices"] if s["name"] == "tma")


def test_equal_timestamps_end_before_begin(tmp_path):
    # back-to-back regions at equal timestamps, a zero-length region between them, and nested
    # regions ending together: none may nest into its neighbour
    lanes = {0: [("B", 0, 0), ("E", 0, 10), ("B", 1, 10), ("E", 1, 10), ("B", 0, 10), ("B", 1, 10), ("B", 2, 15),
                 ("E", 2, 20), ("E", 1, 20), ("E", 0, 20), ("B", 0, 20), ("E", 0, 30)]}
    trace = make_trace(lanes)
    res = write_and_replay(trace, tmp_path, args=False)
    check_against_trace(trace, res, args=False)
    check_strict_nesting_matches_depth(trace, res)
    check_counters(trace, res)
    got = sorted((s["name"], s["ts"], s["dur"], s["depth"]) for s in res["slices"])
    assert got == [("event_0", 0, 10, 0), ("event_0", 10, 10, 0), ("event_0", 20, 10, 0), ("event_1", 10, 0, 0),
                   ("event_1", 10, 10, 1), ("event_2", 15, 5, 2)]


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_nest(tmp_path, seed):
    trace = random_trace(seed)
    res = write_and_replay(trace, tmp_path, args=seed % 2 == 0, name=f"r{seed}.pftrace.gz")
    check_against_trace(trace, res, args=seed % 2 == 0)
    check_counters(trace, res)
    tree_checks(res, trace)


def test_first_fit_fallback_for_crossing_same_id(tmp_path):
    # foreign input: two same-id spans that cross (the decoder never pairs like this)
    sp = np.array([(0, 0, 0, 3, 0, 0, 20), (0, 0, 0, 3, 1, 10, 30), (0, 0, 0, 4, 0, 12, 14)], SPAN_DTYPE)
    trace = make_trace({0: [("I", 1, 0)]})
    trace.spans = sp
    res = write_and_replay(trace, tmp_path, args=False)
    check_against_trace(trace, res, args=False)
    assert len([d for d in res["tracks"].values() if d.sibling_merge_key]) == 2


def test_interning_defined_before_use(tmp_path):
    trace = random_trace(11, num_lanes=3, regions=20)
    res = write_and_replay(trace, tmp_path)
    first = res["packets"][0]
    assert first.sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert {n.iid - 1 for n in first.interned_data.event_names} == (
        set(trace.spans["event"].tolist()) | set(trace.instants["event"].tolist())
    )
    assert [n.name for n in first.interned_data.debug_annotation_names] == list(pf.ARG_NAMES)


def test_no_sm_no_counters_no_args(tmp_path):
    trace = random_trace(3, num_lanes=4)
    trace.lanes["sm"] = -1
    res = write_and_replay(trace, tmp_path, args=False, lane_counters="off")
    assert not any(d.HasField("counter") for d in res["tracks"].values())
    assert not any(d.name.startswith("SM") for d in res["tracks"].values())
    assert all(not s["args"] for s in res["slices"])
    check_against_trace(trace, res, args=False)


def test_empty_trace(tmp_path):
    trace = make_trace({0: [("I", 1, 0)]})
    trace.instants = trace.instants[:0]
    res = write_and_replay(trace, tmp_path)
    assert res["slices"] == [] and len(res["tracks"]) == 1


def test_rejects_span_ending_before_it_begins(tmp_path):
    trace = make_trace({0: [("B", 0, 10), ("E", 0, 20)]})
    trace.spans["end_ns"][0] = trace.spans["start_ns"][0] - 1
    with pytest.raises(ValueError, match="end before they begin"):
        pf.write_perfetto(trace, tmp_path / "x.pftrace")


def test_lanes_inside_counts_lanes_once():
    lanes = {0: [("B", 0, 0), ("B", 0, 5), ("E", 0, 8), ("E", 0, 10)], 1: [("B", 0, 10), ("E", 0, 20)],
             2: [("B", 0, 3), ("E", 0, 12)]}
    trace = make_trace(lanes)
    ev, t, v = lc.lanes_inside(trace.spans)
    assert (t - ORIGIN).tolist() == [0, 3, 10, 12, 20] and v.tolist() == [1, 2, 2, 1, 0]


# --- the validator must be able to fail ------------------------------------------------------------


def _packets(data: bytes) -> list[bytes]:
    t = pb.Trace()
    t.ParseFromString(data)
    return [p.SerializeToString() for p in t.packet]


def _frame(packets: list[bytes]) -> bytes:
    out = bytearray()
    for p in packets:
        out += protobuf.packet(p)
    return bytes(out)


def _valid_bytes() -> tuple[Trace, bytes]:
    lanes = {0: [("B", 0, 0), ("E", 0, 10), ("B", 1, 10), ("E", 1, 20)]}
    trace = make_trace(lanes)
    return trace, pf.perfetto_bytes(trace, TraceOptions(slice_args=True))


def test_validator_rejects_unknown_field():
    _, data = _valid_bytes()
    replay(data)
    with pytest.raises(TraceError, match="unknown fields"):
        replay(data + protobuf.packet(protobuf.f_varint(10, pf.SEQUENCE_ID) + protobuf.f_varint(1999, 5)))
    # a known field with the wrong wire type is unknown to the parser too
    with pytest.raises(TraceError, match="unknown fields"):
        replay(data + protobuf.packet(protobuf.f_varint(10, pf.SEQUENCE_ID) + protobuf.f_bytes(8, b"\x01")))


def test_validator_rejects_missing_interning():
    _, data = _valid_bytes()
    packets = _packets(data)
    with pytest.raises(TraceError):
        replay(_frame(packets[1:]))


def test_validator_rejects_begin_before_end_at_equal_time():
    trace, data = _valid_bytes()
    packets = _packets(data)
    parsed = [pb.TracePacket.FromString(p) for p in packets]
    ends = [
        i
        for i, p in enumerate(parsed)
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_END and p.timestamp == 10
    ]
    begins = [
        i
        for i, p in enumerate(parsed)
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN and p.timestamp == 10
    ]
    i, j = ends[0], begins[0]
    assert i < j
    packets[i], packets[j] = packets[j], packets[i]
    res = replay(_frame(packets))  # the importer accepts it ... and nests the slices
    with pytest.raises(AssertionError):
        check_against_trace(trace, res, args=True)


def test_validator_rejects_slice_on_undefined_track():
    _, data = _valid_bytes()
    packets = _packets(data)
    parsed = [pb.TracePacket.FromString(p) for p in packets]
    keep = [
        p
        for p, q in zip(packets, parsed)
        if not (q.HasField("track_descriptor") and q.track_descriptor.sibling_merge_key)
    ]
    with pytest.raises(TraceError, match="undefined track"):
        replay(_frame(keep))


def test_padded_varints_parse():
    layout = protobuf.Layout().varint(8, np.array([5, 300]), 4)
    rows = layout.fill(2)
    for row, want in zip(rows, (5, 300)):
        p = pb.TracePacket.FromString(row.tobytes())
        assert p.timestamp == want and not unknown_fields(p)


def test_varints_match_the_general_encoding():
    """protobuf.varint's short paths (1, 2 and 3 bytes, for track uuids and lengths) against the
    7-bit-group loop of a padded varint of the minimal width."""
    for v in (0, 127, 128, 16383, 16384, 300_000, (1 << 21) - 1, 1 << 21, 1 << 35):
        assert protobuf.varint(v) == protobuf.varint(v, protobuf.varint_width(v))


# --- end to end from a raw buffer ------------------------------------------------------------------


def _decoded_trace():
    from host_decode.core.decoder import decode
    from tests.support.buffers import INST, B, BufferBuilder, E, F

    b = BufferBuilder(2, 2, 12)
    # lane 0: mainloop > (tma crosses mma); lane 1: re-entrant mma; lane 2: back-to-back at equal times
    (b.put(0, 100, 0, B).put(0, 110, 8, B).put(0, 120, 1, B).put(0, 130, 8, E).put(0, 140, 1, E).put(0, 150, 0, E)
     .put(0, 160, 3, F))
    b.put(1, 100, 1, B).put(1, 105, 1, B).put(1, 110, 1, E).put(1, 120, 1, E).put(1, 121, 4, INST).put(1, 130, 3, F)
    (b.put(2, 90, 0, B).put(2, 100, 0, E).put(2, 100, 0, B).put(2, 100, 1, B).put(2, 100, 1, E).put(2, 140, 0, E)
     .put(2, 150, 5, F))
    return decode(
        b.buf, names=Names(events={0: "mainloop", 1: "mma", 8: "tma", 4: "mark"}, groups={0: "producer", 1: "consumer"})
    )


def test_decoded_buffer_end_to_end(tmp_path):
    trace = _decoded_trace()
    assert trace.spans.size == 8 and trace.instants.size == 1
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    check_counters(trace, res)
    tree_checks(res, trace)
    names = {d.name for d in res["tracks"].values()}
    assert {"SM 3", "SM 5", "block 0 (SM 3)", "block 1 (SM 5)", "producer", "consumer"} <= names
    lane0 = [s for s in res["slices"] if s["args"].get("lane") == 0]
    assert len({s["track"] for s in lane0}) == 2  # tma and mma cross: two sibling tracks


def test_cli_decode_writes_pftrace(tmp_path):
    from host_decode.cli import main
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E

    b = BufferBuilder(1, 1, 4)
    b.put(0, 10, 2, B).put(0, 30, 2, E)
    npy = save_capture(tmp_path / "cap.npy", b.buf, Names(events={2: "mma"}), kernel="gemm")
    assert main(["decode", str(npy), "-o", str(tmp_path / "cap.pftrace"), "-q"]) == 0
    res = replay((tmp_path / "cap.pftrace").read_bytes())
    assert [(s["name"], s["dur"]) for s in res["slices"]] == [("mma", 20)]
    assert any(d.name == "gemm" for d in res["tracks"].values())


# --- fixed-width layouts: every padding choice still parses ----------------------------------------


@pytest.mark.parametrize("scale,lanes", [(1, 3), (1 << 20, 3), (1 << 29, 5), (1 << 36, 2), (3, 200)])
def test_layout_widths_parse(tmp_path, scale, lanes):
    # time scale changes the timestamp varint width, lane count the uuid width: different paddings
    base = random_trace(7, num_lanes=lanes, regions=12)
    sp = base.spans.copy()
    origin = pf.trace_origin(base)
    sp["start_ns"] = origin + (sp["start_ns"] - origin) * scale
    sp["end_ns"] = origin + (sp["end_ns"] - origin) * scale
    base.spans = sp
    ins = base.instants.copy()
    ins["ts_ns"] = origin + (ins["ts_ns"] - origin) * scale
    base.instants = ins
    for args in (False, True):
        res = write_and_replay(base, tmp_path, args=args)
        check_against_trace(base, res, args=args)


def _file_events(data: bytes) -> list[tuple[int, int, int]]:
    """(type, timestamp, track) of every slice/instant event, in file order."""
    t = pb.Trace()
    t.ParseFromString(data)
    return [(p.track_event.type, p.timestamp, p.track_event.track_uuid) for p in t.packet
            if p.HasField("track_event") and p.track_event.type != pb.TrackEvent.TYPE_COUNTER]


@pytest.mark.parametrize("seed,plain", [(s, p) for s in range(4) for p in (False, True)])
def test_file_order_is_merged_stream_order(seed, plain):
    # the writer orders events without merged_stream (BEGINs by row, one merge of sorted runs); the
    # file must still hold exactly merged_stream's order, zero-length regions and instants included;
    # plain: neither (offsets and depths take shortcuts then)
    trace = random_trace(seed)
    if plain:
        trace.spans = trace.spans[trace.spans["end_ns"] > trace.spans["start_ns"]]
        trace.instants = trace.instants[:0]
    data = pf.perfetto_bytes(trace, TraceOptions(lane_counters="off"))
    origin = pf.trace_origin(trace)
    stream = merged_stream(trace.spans, trace.instants, origin)
    sp, ins = trace.spans, trace.instants
    want = []
    for kind, i in zip(stream.kind.tolist(), stream.index.tolist()):
        if kind == KIND_INSTANT:
            want.append((pb.TrackEvent.TYPE_INSTANT, int(ins["ts_ns"][i]) - origin))
        elif kind == KIND_BEGIN:
            want.append((pb.TrackEvent.TYPE_SLICE_BEGIN, int(sp["start_ns"][i]) - origin))
        else:
            want.append((pb.TrackEvent.TYPE_SLICE_END, int(sp["end_ns"][i]) - origin))
    got = _file_events(data)
    assert [(t, ts) for t, ts, _ in got] == want
    # the cases that need care are exercised
    assert plain or ((sp["start_ns"] == sp["end_ns"]).any() and ins.size)
    res = replay(data)
    check_against_trace(trace, res, args=False)


def test_unsorted_span_table(tmp_path):
    trace = random_trace(21)
    data = pf.perfetto_bytes(trace)
    # lanes in another order, each lane's rows in order: sorted back stably, the same file
    lanes = np.unique(trace.spans["lane"])[::-1]
    perm = np.concatenate([np.flatnonzero(trace.spans["lane"] == lane) for lane in lanes])
    trace.spans = trace.spans[perm]
    assert pf.perfetto_bytes(trace) == data
    # any order: still a valid trace with the same slices
    trace.spans = trace.spans[np.random.default_rng(0).permutation(trace.spans.size)]
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    check_counters(trace, res)


@pytest.mark.parametrize("seed,plain", [(s, p) for s in range(3) for p in (False, True)])
def test_lexsort_order_and_chunking_give_the_same_file(monkeypatch, seed, plain):
    # keys too wide to pack take argsorts or a lexsort; records are built in row chunks: none of it
    # changes a byte (plain: no zero-length regions, no instants)
    trace = random_trace(seed)
    if plain:
        trace.spans = trace.spans[trace.spans["end_ns"] > trace.spans["start_ns"]]
        trace.instants = trace.instants[:0]
    data = pf.perfetto_bytes(trace)
    key_bits = od.span_columns(trace.spans, trace.instants, pf.trace_origin(trace)).key_bits
    monkeypatch.setattr(od, "KEY_BITS", key_bits + 2)  # (lane, time, kind) fits, the row field does not
    assert pf.perfetto_bytes(trace) == data
    monkeypatch.setattr(od, "KEY_BITS", 0)
    assert pf.perfetto_bytes(trace) == data
    monkeypatch.setattr(pf, "_CHUNK_ROWS", 7)
    assert pf.perfetto_bytes(trace) == data
    monkeypatch.setattr(ln, "CHUNK_SPANS", 5)  # runs of a few lanes: the same file, streamed
    assert pf.perfetto_bytes(trace) == data


CROSSING_LANE = [("B", 0, 0), ("B", 8, 10), ("B", 1, 20), ("E", 8, 30), ("E", 1, 40), ("E", 0, 60)]


@pytest.mark.parametrize("crossing", [False, True])
def test_one_pass_falls_back_to_two(tmp_path, monkeypatch, crossing):
    # one pass keeps every span on its lane's first track: the same bytes as two passes where every
    # lane's regions nest; a late run whose regions cross voids it, and the writers start over with two
    nested = [("B", 0, 0), ("B", 1, 5), ("E", 1, 9), ("B", 1, 9), ("I", 3, 9), ("E", 1, 9), ("E", 0, 20)]
    lanes = {lane: [(k, e, t + lane) for k, e, t in nested] for lane in range(12)}
    if crossing:
        lanes[9] = CROSSING_LANE
    trace = make_trace(lanes)
    monkeypatch.setattr(ln, "CHUNK_SPANS", 5)  # runs of a few lanes: the crossing lane is a late run
    chunks = ln.lane_chunks(trace.spans, trace.instants)
    two_pass = ln.lane_table(chunks, pf.trace_origin(trace))
    assert bool(two_pass.subs) == crossing
    want = b"".join(bytes(c) for c in pf.encode_perfetto(trace, one_pass=False)[0])
    one, _ = pf.encode_perfetto(trace, one_pass=True)
    if crossing:
        with pytest.raises(pf.SubTracksNeeded):
            b"".join(bytes(c) for c in one)
    else:
        facts = ln.lane_facts(chunks)
        for field in ("lanes", "block", "group", "nsub", "span_events", "span_lanes", "tracks"):
            assert np.array_equal(getattr(facts, field), getattr(two_pass, field)), field
        assert b"".join(bytes(c) for c in one) == want
    assert pf.perfetto_bytes(trace) == want
    path = tmp_path / "t.pftrace"
    path.write_bytes(b"x" * (2 * len(want)))  # the file is started over, never appended to
    pf.write_perfetto(trace, path)
    assert path.read_bytes() == want


def test_deferred_records_give_the_same_bytes(monkeypatch):
    # write_perfetto builds and places each run's records on its file-write thread (UnplacedEvents): the
    # placed chunks are the bytes of the stream that places them at once; zero-length regions, instants,
    # a crossing lane and runs of a few lanes included
    lanes = {lane: [("B", 0, lane), ("B", 1, lane + 5), ("E", 1, lane + 5), ("I", 3, lane + 7), ("B", 2, lane + 9),
                    ("E", 2, lane + 12), ("E", 0, lane + 20)] for lane in range(12)}
    lanes[7] = CROSSING_LANE
    trace = make_trace(lanes)
    monkeypatch.setattr(ln, "CHUNK_SPANS", 5)
    chunks = list(pf.encode_perfetto(trace, deferred=True)[0])
    assert sum(isinstance(c, pf.UnplacedEvents) for c in chunks) > 1
    placed = [c.place() if isinstance(c, pf.UnplacedEvents) else c for c in chunks]
    assert b"".join(bytes(c) for c in placed) == pf.perfetto_bytes(trace)


def test_sparse_lane_ids_find_their_tracks(tmp_path):
    # lane ids far apart: TrackTree.lane_uuid binary-searches instead of reading its lane -> uuid table
    lanes = {1: [("B", 0, 0), ("E", 0, 10)], 400_001: [("B", 1, 2), ("I", 2, 3), ("E", 1, 9)]}
    trace = make_trace(lanes)
    tree = pf.build_track_tree(trace, ln.lane_facts(ln.lane_chunks(trace.spans, trace.instants)), counters=False)
    assert tree._uuid_by_lane is None
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    tree_checks(res, trace)


@pytest.mark.parametrize(
    "lanes",
    [
        {0: [("I", 1, 0), ("I", 2, 5)], 3: [("I", 1, 7)]},  # instants only
        {0: [("B", 1, 5), ("E", 1, 5)], 1: [("B", 2, 0), ("E", 2, 0)]},  # zero-length only
    ],
)
def test_degenerate_tables(tmp_path, lanes):
    trace = make_trace(lanes)
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)


def test_scatter_rows_places_records():
    rng = np.random.default_rng(3)
    widths = rng.choice([3, 5, 7], 50)
    offsets = np.cumsum(widths) - widths
    out = np.zeros(int(widths.sum()), np.uint8)
    want = np.zeros_like(out)
    for w in (3, 5, 7):
        idx = np.flatnonzero(widths == w)
        rows = rng.integers(1, 255, (idx.size, 8), dtype=np.uint8)
        protobuf.scatter_rows(out, offsets[idx], rows, w)
        for k, i in enumerate(idx):
            want[offsets[i] : offsets[i] + w] = rows[k, :w]
    assert (out == want).all()


def test_put_varints_at_is_varint():
    # the track descriptors' column of minimal varints: the scalar varint's bytes, negative values and
    # every width boundary included
    rng = np.random.default_rng(5)
    edges = [0, 1, 127, 128, 16383, 16384, (1 << 56) - 1, 1 << 56, (1 << 63) - 1, -1, -2, -(1 << 63)]
    values = np.array(edges + rng.integers(-(1 << 40), 1 << 62, 200).tolist(), np.int64)
    widths = protobuf.varint_widths(values)
    want = b"".join(protobuf.varint(int(v)) for v in values.tolist())
    assert widths.tolist() == [len(protobuf.varint(int(v))) for v in values.tolist()]
    out = np.zeros(int(widths.sum()), np.uint8)
    at = np.cumsum(widths) - widths
    assert (protobuf.put_varints_at(out, at, values, widths) == at + widths).all()
    assert out.tobytes() == want


def test_slice_costs_34_bytes_in_the_goal_layout():
    # BEGIN 19 + END 15 bytes with 3-byte timestamps, 2-byte track uuids and 1-byte names (no args)
    lanes = {lane: [("B", 0, 0), ("E", 0, 1 << 20)] for lane in range(200)}
    trace = make_trace(lanes)
    chunks, _ = pf.encode_perfetto(trace, TraceOptions(lane_counters="off"))
    assert list(chunks)[-1].size == 34 * trace.spans.size


def test_mixed_known_and_unknown_sm(tmp_path):
    lanes = {0: [("B", 0, 0), ("E", 0, 10)], 2: [("B", 0, 5), ("E", 0, 8)], 4: [("I", 1, 3)]}
    trace = make_trace(lanes, sm={0: 7})  # lanes 2 and 4: SM unknown (-1, a 10-byte varint arg)
    res = write_and_replay(trace, tmp_path)
    check_against_trace(trace, res, args=True)
    names = {d.name for d in res["tracks"].values()}
    assert {"SM 7", "SM unknown", "block 0 (SM 7)", "block 1", "block 2"} <= names
    assert sorted(s["args"]["sm"] for s in res["slices"]) == [-1, -1, 7]


def test_session_gets_a_track_group_per_launch(tmp_path):
    from host_decode.analysis.sessions import concat, parts_from_traces

    a = make_trace({0: [("B", 0, 0), ("E", 0, 10)], 1: [("B", 1, 2), ("E", 1, 9)]}, sm={0: 3, 1: 3})
    b = make_trace({0: [("B", 0, 100), ("E", 0, 130)]}, sm={0: 5})
    merged = concat(parts_from_traces([a, b], labels=["launch 0", "launch 1"]))
    res = write_and_replay(merged, tmp_path)
    check_against_trace(merged, res, args=True)
    tree_checks(res, merged)
    tracks = res["tracks"]
    by_uuid = {d.uuid: d for d in tracks.values()}
    launch = {d.name: d for d in tracks.values() if d.name.startswith("launch ")}
    assert set(launch) == {"launch 0", "launch 1"}
    sm_parent = {d.name: by_uuid[d.parent_uuid].name for d in tracks.values() if d.name.startswith("SM ")}
    assert sm_parent == {"SM 3": "launch 0", "SM 5": "launch 1"}


def test_joined_hardware_data_describes_the_region_counter(tmp_path):
    trace = make_trace({0: [("B", 0, 0), ("E", 0, 10)], 1: [("B", 1, 2), ("E", 1, 9)]})
    trace.meta["regions_hw"] = {"by_event": {"1": {"samples_share": 0.46, "inst_executed": 12.8e6,
                                                   "stalls": {"long_scoreboard": 30.0, "wait": 10.0}}}}
    res = write_and_replay(trace, tmp_path)
    desc = {d.name: d.description for d in res["tracks"].values() if d.name.startswith("lanes in")}
    name1 = f"lanes in {trace.names.event(1)}"
    assert desc[name1] == (
        f"{trace.names.event(1)}: 46.0% of stall samples, long_scoreboard dominant (75%), 12.80 M instructions executed"
    )
    assert desc[f"lanes in {trace.names.event(0)}"] == ""
