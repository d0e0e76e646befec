"""One timeline of a folder of rank captures: `ikp decode DIR -o t.pftrace`, `ikp merge DIR -o t.pftrace` and
`write_trace` write the same bytes; each rank is a top-level track group (rank -> SM/block -> warp lanes) and
every matched flag wait is a flow from the signal that released it, across ranks."""

import pytest

from host_decode.analysis.sessions import load_trace
from host_decode.cli import main
from host_decode.writers import write_trace
from tests.support.flag_scenarios import all_gather

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def parse(data: bytes):
    """(tracks {uuid: descriptor}, flow instants [(name, track uuid, ts, flow ids, terminating ids)])."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    names, tracks, flows = {}, {}, []
    for p in trace.packet:
        if p.HasField("interned_data"):
            names.update({en.iid: en.name for en in p.interned_data.event_names})
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("track_event"):
            te = p.track_event
            if te.flow_ids or te.terminating_flow_ids:
                flows.append((names[te.name_iid], te.track_uuid, p.timestamp, list(te.flow_ids),
                              list(te.terminating_flow_ids)))
    return tracks, flows


def path_of(tracks, uuid):
    out = []
    while uuid:
        d = tracks[uuid]
        out.append(d.name)
        uuid = d.parent_uuid if d.HasField("parent_uuid") else 0
    return out[::-1]


def test_decode_merge_and_write_trace_give_one_timeline(tmp_path, capsys):
    caps = tmp_path / "ranks"
    caps.mkdir()
    truth = all_gather(caps, 4, blocks=3, delay=(2, 1, 10_000), seed=4)
    assert main(["decode", str(caps), "-o", str(tmp_path / "d.pftrace"), "-q"]) == 0
    assert main(["merge", str(caps), "-o", str(tmp_path / "m.pftrace"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "flag flows" in out
    write_trace(load_trace([caps]), tmp_path / "w.pftrace")
    data = (tmp_path / "d.pftrace").read_bytes()
    assert data == (tmp_path / "m.pftrace").read_bytes() == (tmp_path / "w.pftrace").read_bytes()

    tracks, flows = parse(data)
    roots = [u for u, d in tracks.items() if not d.HasField("parent_uuid")]
    assert len(roots) == 1
    groups = [d.name for u, d in sorted(tracks.items()) if d.HasField("parent_uuid") and d.parent_uuid == roots[0]]
    assert [g for g in groups if g.startswith("rank")] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    lanes = {u: path_of(tracks, u) for u in tracks}
    # a warp lane sits under its rank and its own block number
    assert ["rank 2", "block 1", "group_0"] == lanes[next(u for u, p in lanes.items()
                                                            if p[1:] == ["rank 2", "block 1", "group_0"])][1:]
    starts = {f[3][0]: f for f in flows if f[3]}
    ends = {f[4][0]: f for f in flows if f[4]}
    assert starts and set(starts) == set(ends)
    cross = 0
    for fid, (kind, src, ts, _, _) in starts.items():
        _, dst, te, _, _ = ends[fid]
        assert kind == "flag release" and ts <= te
        cross += lanes[src][1] != lanes[dst][1]
    assert cross == len(starts)  # in the all-gather every wait is released by another rank
    # the delayed block's pushes release waits on every other rank
    delayed = {fid for fid, (_, src, *_r) in starts.items() if lanes[src][1:3] == ["rank 2", "block 1"]}
    assert {lanes[ends[f][1]][1] for f in delayed} == {"rank 0", "rank 1", "rank 3"}
    assert truth["rank"] == 2


def test_merge_to_chrome_json_still_works_and_refuses_torch_into_pftrace(tmp_path, capsys):
    caps = tmp_path / "ranks"
    caps.mkdir()
    all_gather(caps, 2, blocks=2, delay=(1, 1, 5_000), seed=1)
    assert main(["merge", str(caps), "-o", str(tmp_path / "m.json"), "-q"]) == 0
    assert "merged 2 rank(s)" in capsys.readouterr().out
    assert main(["merge", str(caps), "--torch", str(tmp_path / "t.json"), "-o", str(tmp_path / "x.pftrace")]) != 0
    assert "Chrome JSON" in capsys.readouterr().err
    assert not (tmp_path / "x.pftrace").exists()


def test_clock_offsets_of_the_sidecars_place_the_ranks(tmp_path):
    all_gather(tmp_path, 2, blocks=2, delay=(1, 1, 5_000), seed=5)
    trace = load_trace([tmp_path])
    parts = trace.meta["parts"]
    assert [p["label"] for p in parts] == ["rank 0", "rank 1"]
    assert parts[1]["shift_ns"] == parts[1]["clock_offset_ns"] != 0
    # on the common clock the ranks' blocks start within the injected jitter (300 ns) and the clock error
    firsts = trace.lanes["first_ns"]
    block = trace.lanes["block"]  # merged: rank 0's blocks 0, 1; rank 1's 2, 3 (its block 1 is the delayed one)
    assert abs(int(firsts[block == 0].min()) - int(firsts[block == 2].min())) < 300 + 2 * 100
