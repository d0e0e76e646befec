"""Foreign traces (issue 22): IKET's JSON and .pftrace and Proton's Chrome trace, read from real files
written on an H100 (examples/interop/), into ikp's trace model."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from host_decode.core.errors import DecodeError
from host_decode.core.model import LOSS_BUCKETS
from host_decode.interop import detect, read_foreign
from host_decode.load.capture import load_capture
from ikp_cute.testing.sass import dump_options

HERE = Path(__file__).resolve().parents[4] / "examples" / "interop"
IKET_JSON = HERE / "iket_twin" / "iket_pid_0x217.trace.json"
IKET_PFTRACE = HERE / "iket_twin" / "iket_pid_0x217.pftrace"
PROTON = HERE / "proton_add.chrome_trace"
IKP = HERE / "ikp_twin.npy"
BLOCKS, WARPS, TILES = 4, 4, 8  # examples/interop/capture_twin.py defaults used for the fixtures


def spans_of(trace):
    return sorted(
        (int(s["lane"]), trace.names.event(s["event"]), int(s["start_ns"]), int(s["end_ns"]), int(s["depth"]))
        for s in trace.spans
    )


def test_detect_by_content_not_extension(tmp_path):
    assert detect(IKET_JSON) == "iket-json"
    assert detect(IKET_PFTRACE) == "iket-pftrace"
    assert detect(PROTON) == "proton-chrome"
    assert detect(IKP) is None  # an ikp capture is the decoder's
    for src in (IKET_JSON, IKET_PFTRACE, PROTON):
        renamed = tmp_path / (src.name + ".renamed.bin")
        shutil.copy(src, renamed)
        assert detect(renamed) == detect(src)
    other = tmp_path / "chrome.json"
    other.write_text(json.dumps({"traceEvents": [{"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 1}]}))
    assert detect(other) is None
    with pytest.raises(DecodeError, match="not a trace ikp can read"):
        read_foreign(other)


def test_iket_json_real_launch():
    (t,) = read_foreign(IKET_JSON)
    assert t.absolute and t.num_blocks == BLOCKS and t.num_groups == WARPS
    assert len(t.lanes) == BLOCKS * WARPS and (t.lanes["sm"] >= 0).all()
    names = [t.names.event(e) for e in t.spans["event"]]
    assert {n: names.count(n) for n in set(names)} == {n: BLOCKS * WARPS * TILES for n in ("tile", "load", "math")}
    assert len(t.instants) == BLOCKS * WARPS * TILES and set(t.names.event(e) for e in t.instants["event"]) == {
        "tile_done"
    }
    depth = dict(zip(names, t.spans["depth"].tolist()))
    assert depth == {"tile": 0, "load": 1, "math": 1}  # push/pop nesting recovered, math (range_start) inside tile
    assert (t.spans["end_ns"] >= t.spans["start_ns"]).all()
    # every foreign record accounted for: 2 per range, 1 per marker
    assert t.loss.nonzero_slots == 2 * len(t.spans) + len(t.instants)
    assert sum(t.loss.totals[b] for b in LOSS_BUCKETS) == t.loss.nonzero_slots and t.loss.lost == 0
    assert t.meta["source"]["cannot_tell"]
    # marker payloads are the tile index, in program order on every lane
    payloads = [p for p in t.meta["payloads"] if "payload" in p]
    per_lane = {}
    for p in sorted(payloads, key=lambda p: p["ts_ns"]):
        per_lane.setdefault((p["block"], p["warp"]), []).append(p["payload"])
    assert all(v == list(range(TILES)) for v in per_lane.values()) and len(per_lane) == BLOCKS * WARPS


def test_iket_pftrace_events_outside_warps_are_counted(tmp_path):
    """Nothing is dropped silently: an event on a track that is no warp's (other than a grid's kernel
    slice) is counted in the loss report, and the accounting identity holds."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from host_decode.interop.iket import OUTSIDE_WARPS, read_iket_pftrace

    trace = pb.Trace()
    trace.ParseFromString(IKET_PFTRACE.read_bytes())
    grid = next(p.track_descriptor.uuid for p in trace.packet
                if p.HasField("track_descriptor") and p.track_descriptor.name.startswith("Grid"))
    before = read_iket_pftrace(IKET_PFTRACE)[0]
    for k in range(3):  # instants on the grid track: no lane to put them on
        extra = trace.packet.add()
        extra.timestamp = 1000 + k
        extra.track_event.track_uuid = grid
        extra.track_event.type = extra.track_event.TYPE_INSTANT
        extra.track_event.name = f"stray {k}"
    path = tmp_path / "extra.pftrace"
    path.write_bytes(trace.SerializeToString())
    after = read_iket_pftrace(path)[0]
    assert after.loss.malformed_reasons.get(OUTSIDE_WARPS) == 3
    assert after.loss.totals["malformed"] == before.loss.totals["malformed"] + 3
    assert after.loss.nonzero_slots == before.loss.nonzero_slots + 3
    assert after.spans.size == before.spans.size and after.instants.size == before.instants.size


def test_iket_pftrace_agrees_with_its_json():
    (j,) = read_foreign(IKET_JSON)
    (p,) = read_foreign(IKET_PFTRACE)
    assert spans_of(p) == spans_of(j)
    assert (p.lanes["first_ns"] == j.lanes["first_ns"]).all() and (p.lanes["last_ns"] == j.lanes["last_ns"]).all()
    assert p.meta["kernel"] == j.meta["kernel"]


def test_proton_real_trace():
    (t,) = read_foreign(PROTON)
    assert t.meta["time_unit"] == "cycles" and not t.absolute
    assert t.meta["kernel"] == "scaled_add"
    names = [t.names.event(e) for e in t.spans["event"]]
    assert {n: names.count(n) for n in set(names)} == {"kernel": 16, "load": 16, "math": 16}
    depth = dict(zip(names, t.spans["depth"].tolist()))
    assert depth == {"kernel": 0, "load": 1, "math": 1}
    assert t.num_blocks == 4 and t.num_groups == 4 and (t.lanes["sm"] >= 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "12.5", None])
def test_proton_bad_times_are_counted_not_fatal(tmp_path, bad):
    """A ts or dur that is not a finite number (NaN, inf, a bool, a string) is a counted malformed pair of
    records; the other events still decode (was: NaN raised a bare ValueError)."""
    doc = json.loads(PROTON.read_text())
    first = next(i for i, ev in enumerate(doc["traceEvents"]) if ev.get("ph") == "X")
    (before,) = read_foreign(PROTON)
    for field in ("ts", "dur"):
        broken = json.loads(json.dumps(doc))
        broken["traceEvents"][first][field] = bad
        path = tmp_path / f"{field}.chrome_trace"
        path.write_text(json.dumps(broken))
        (t,) = read_foreign(path)
        assert t.loss.malformed_reasons.get("event without valid ts/dur") == 2
        assert t.spans.size == before.spans.size - 1


def test_proton_cycles_are_labelled_as_cycles():
    """Proton's times are SM cycles (kept as such): the region table says so instead of "ns"."""
    import io

    from host_decode.reports.tables.console import make_console
    from host_decode.reports.tables.decode import print_summary

    (t,) = read_foreign(PROTON)
    out = io.StringIO()
    print_summary(t, make_console(out))
    text = out.getvalue()
    assert "p50 cyc" in text and "SM cycles" in text and "p50 ns" not in text
    (j,) = read_foreign(IKET_JSON)
    out = io.StringIO()
    print_summary(j, make_console(out))
    assert "p50 ns" in out.getvalue()


def test_side_by_side_same_launch_ikp_and_iket():
    """ikp and IKET recorded the same launch (twin_kernel.py): the same lanes and occurrences, and each
    region's two durations within two 32 ns timer steps (ikp's records sit outside IKET's for `tile`)."""
    ikp = load_capture(IKP)
    (iket,) = read_foreign(IKET_JSON)

    def occurrences(t):
        out = {}
        for s in t.spans:
            out.setdefault((int(s["block"]), int(s["group"]), t.names.event(s["event"])), []).append(
                int(s["end_ns"]) - int(s["start_ns"])
            )
        return out

    a, b = occurrences(ikp), occurrences(iket)
    assert a.keys() == b.keys() and all(len(a[k]) == len(b[k]) for k in a)
    diff = np.array([x - y for k in a for x, y in zip(a[k], b[k])])
    assert np.abs(diff).max() <= 64
    assert diff.mean() >= 0  # ikp's regions enclose IKET's (its begin comes first in the kernel)


def test_iket_bad_records_are_counted(tmp_path):
    doc = json.loads(IKET_JSON.read_text())
    launch = doc["launches"][0]
    launch["ranges"][0]["endTs"] = launch["ranges"][0]["startTs"] - 1
    launch["ranges"][1]["warpLocIdxs"] = [999, 999]
    launch["markers"][0]["markerNameIdx"] = 99
    bad = tmp_path / "bad.trace.json"
    bad.write_text(json.dumps(doc))
    (t,) = read_foreign(bad)
    assert t.loss.malformed_reasons == {
        "range ends before it starts": 2,
        "range on an unknown warp location": 2,
        "marker without time or name": 1,
    }
    assert len(t.spans) == BLOCKS * WARPS * TILES * 3 - 2 and t.loss.lost == 5
    assert t.loss.nonzero_slots == 2 * len(t.spans) + len(t.instants) + 5
    doc["launches"] = "x"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DecodeError, match="bad.trace.json"):
        read_foreign(bad)


def test_proton_bad_events_are_counted(tmp_path):
    doc = json.loads(PROTON.read_text())
    doc["traceEvents"][0]["dur"] = -1
    doc["traceEvents"][1]["tid"] = "warp x"
    bad = tmp_path / "bad.chrome_trace"
    bad.write_text(json.dumps(doc))
    (t,) = read_foreign(bad)
    assert len(t.spans) == 46 and sum(t.loss.malformed_reasons.values()) == 4


def test_twin_kernel_compiles_on_the_current_device_api():
    """examples/interop/twin_kernel.py (the kernel behind the committed twin fixtures) still compiles for
    sm_90a on the CPU with ikp_cute's current API (Profiler.create, ProfileSpec): the runner that
    re-records the fixtures must not rot while nothing in CI runs it."""
    pytest.importorskip("cutlass")
    import os

    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    import ikp_cute
    from examples.interop.twin_kernel import launch_twin

    blocks, threads, tiles = 2, 64, 2
    spec = ikp_cute.ProfileSpec(num_groups=threads // 32, num_blocks=blocks, warps_per_group=1,
                                records_per_lane=7 * tiles + 8, events=["tile", "load", "math", "tile_done"])
    compiled = cute.compile(launch_twin, fake(Float32, (blocks * tiles * threads,)), fake(Float32, (blocks * threads,)),
                            Int32(tiles), ikp_cute.fake_buffer(spec), spec, blocks, threads,
                            options=dump_options("--keep-ptx"))
    assert "globaltimer" in compiled.__ptx__


@pytest.mark.parametrize("path", [IKET_JSON, IKET_PFTRACE, PROTON], ids=["iket-json", "iket-pftrace", "proton"])
def test_every_command_takes_foreign_traces(path, tmp_path, capsys):
    from host_decode.cli import main
    from host_decode.reports.viewer import trace_to_serve

    assert main(["stats", str(path), "--format", "json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats  # the regions of the foreign trace, summarized
    assert main(["decode", str(path), "-o", str(tmp_path / "x.pftrace"), "--quiet"]) == 0
    assert (tmp_path / "x.pftrace").stat().st_size > 0
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0
    assert main(["diff", str(path), str(path), "--fail-above", "1"]) == 0
    served = trace_to_serve(path, tmp_path)
    if path == IKET_PFTRACE:
        assert served == path  # IKET's own Perfetto layout is served as it is
    else:
        assert served.suffix == ".pftrace" and served.parent == tmp_path


def test_names_do_not_apply_to_foreign_traces(tmp_path):
    from host_decode.cli import main

    names = tmp_path / "names.json"
    names.write_text(json.dumps({"events": {"0": "x"}}))
    assert main(["decode", str(IKET_JSON), "--names", str(names)]) == 2


# --- review of the importers (2026-11): bad input is a DecodeError naming the file and field, or a counted
# malformed record; never a traceback, an overflow, or a table sized by an index value ----------------------


def iket_doc(**launch) -> dict:
    """One launch of one warp with one range ('tile', 1000..2000 ns); `launch` overrides its fields. Two names,
    so that a bool name index (True == 1) would name one."""
    base = {"kernelName": "k", "gridDimX": 1, "gridDimY": 1, "gridDimZ": 1, "blockDimX": 32, "blockDimY": 1,
            "blockDimZ": 1, "ranges": [{"startTs": 1000, "endTs": 2000, "rangeNameIdx": 0, "rangeType": 2,
                                        "warpLocIdxs": [0, 0]}], "markers": [], "warpLifetimes": []}
    return {"stringTable": ["tile", "load"], "locationTable": [{"ctaId": [0, 0, 0], "warpId": 0, "smId": 3}],
            "launches": [{**base, **launch}]}


def proton_event(name="a", ts=0.0, dur=1.0, kernel="k", cta=0, warp=0, ph="X") -> dict:
    return {"ph": ph, "pid": f"{kernel} Core1 CTA{cta}", "tid": f"warp {warp} (line 0)", "name": name,
            "cat": kernel, "ts": ts, "dur": dur}


def write(tmp_path, name: str, doc) -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def assert_accounted(t) -> None:
    assert sum(t.loss.totals[b] for b in LOSS_BUCKETS) == t.loss.nonzero_slots
    assert t.loss.totals["malformed"] == sum(t.loss.malformed_reasons.values())


@pytest.mark.parametrize("change,needle", [
    ({"launches": [5]}, "launches[0] is not an object"),
    ({"graphLaunches": 5}, "graphLaunches is not an object"),
    ({"ranges": {"a": 1}}, "launches[0].ranges is not a list"),
    ({"markers": 3}, "launches[0].markers is not a list"),
    ({"warpLifetimes": "x"}, "launches[0].warpLifetimes is not a list"),
    ({"blockDimX": -32}, "'blockDimX'"),
    ({"blockDimX": True}, "'blockDimX'"),
    ({"blockDimX": 1 << 40}, "'blockDimX'"),
    ({"blockDimX": 1024, "blockDimY": 1024}, "1048576 threads"),
    ({"gridDimX": 10**30}, "'gridDimX'"),
    ({"gridDimX": 1 << 31, "gridDimY": 2}, "4294967296 blocks"),
    ({"smId": "x"}, "locationTable[0] has no valid 'smId'"),
])
def test_iket_json_bad_structure_is_a_decode_error(tmp_path, change, needle):
    """A launch, list or dimension of the wrong type or size: a DecodeError naming the file and the field
    (was: AttributeError / TypeError / OverflowError tracebacks, a negative block size accepted, and for
    smId "x" a bare 'invalid literal for int()')."""
    doc = iket_doc(**{k: v for k, v in change.items() if k not in ("launches", "graphLaunches", "smId")})
    doc.update({k: v for k, v in change.items() if k in ("launches", "graphLaunches")})
    if "smId" in change:
        doc["locationTable"][0]["smId"] = change["smId"]
    path = write(tmp_path, "bad.trace.json", doc)
    with pytest.raises(DecodeError) as e:
        read_foreign(path)
    assert "bad.trace.json" in str(e.value) and needle in str(e.value)


@pytest.mark.parametrize("change,reason,records", [
    ({"ranges": ["x"]}, "range that is not an object", 2),
    ({"ranges": [{"startTs": 1, "endTs": 2, "rangeNameIdx": 0, "warpLocIdxs": 7}]},
     "range on an unknown warp location", 2),
    ({"ranges": [{"startTs": True, "endTs": True, "rangeNameIdx": 0, "warpLocIdxs": [0, 0]}]},
     "range without times or name", 2),
    ({"ranges": [{"startTs": 1, "endTs": 2, "rangeNameIdx": True, "warpLocIdxs": [0, 0]}]},
     "range without times or name", 2),
    ({"ranges": [{"startTs": 1, "endTs": 1 << 63, "rangeNameIdx": 0, "warpLocIdxs": [0, 0]}]},
     "range without times or name", 2),
    ({"markers": [3]}, "marker that is not an object", 1),
    ({"markers": [{"timestamp": 10**20, "markerNameIdx": 0, "locIdx": 0}]}, "marker without time or name", 1),
    ({"warpLifetimes": ["x"]}, "warp lifetime on an unknown warp location", 2),
    ({"warpLifetimes": [{"locIdx": 0, "startTs": 0, "endTs": 1 << 64}]}, "warp lifetime without times", 2),
    ({"warpLifetimes": [{"locIdx": 0, "startTs": 5000, "endTs": 10}]}, "warp lifetime ends before it starts", 2),
])
def test_iket_json_bad_records_are_counted_not_fatal(tmp_path, change, reason, records):
    """A record that is not an object, has bool / huge times or a bool name index, or a lifetime that is
    unusable: counted under a named reason, the rest imports (was: tracebacks, OverflowError, bools taken
    as times and indexes, reversed lifetimes kept)."""
    doc = iket_doc()
    keep = doc["launches"][0]["ranges"][0]
    doc["launches"][0].update(change)
    if "ranges" in change:
        doc["launches"][0]["ranges"].append(keep)
    (t,) = read_foreign(write(tmp_path, "bad.trace.json", doc))
    assert t.loss.malformed_reasons == {reason: records}
    assert [t.names.event(e) for e in t.spans["event"]] == ["tile"] and int(t.spans["start_ns"][0]) == 1000
    assert t.lanes["first_ns"].tolist() == [1000] and t.lanes["last_ns"].tolist() == [2000]
    assert_accounted(t)


def test_iket_json_unusable_locations_and_payloads_are_not_fatal(tmp_path):
    """A location that is not an object makes its events 'on an unknown warp location'; smId null is an
    unknown SM; internalEvents that are not objects keep the range and count it as having unreadable
    payloads (each was a traceback)."""
    doc = iket_doc()
    doc["locationTable"] = [5, {"ctaId": [0, 0, 0], "warpId": 0, "smId": None}]
    doc["launches"][0]["ranges"][0].update(warpLocIdxs=[1, 1], internalEvents=[3, None])
    doc["launches"][0]["markers"] = [{"timestamp": 1500, "markerNameIdx": 0, "locIdx": 0}]
    (t,) = read_foreign(write(tmp_path, "locs.trace.json", doc))
    assert len(t.spans) == 1 and t.lanes["sm"].tolist() == [-1]
    assert t.loss.malformed_reasons == {"marker on an unknown warp location": 1}
    assert t.meta["source"]["ranges_with_unreadable_payloads"] == 1


@pytest.mark.parametrize("kind", ["iket", "proton"])
def test_deeply_nested_json_is_a_decode_error(tmp_path, kind):
    deep = "[" * 100_000 + "]" * 100_000
    if kind == "iket":
        text = '{"launches": ' + deep + "}"
    else:
        text = json.dumps({"traceEvents": [proton_event()]})[:-2] + ', {"args": ' + deep + "}]}"
    path = write(tmp_path, f"deep.{kind}", text)
    with pytest.raises(DecodeError, match="deep.*nested too deeply"):
        read_foreign(path)


@pytest.mark.parametrize("field,value", [("ts", 1e16), ("ts", 1e308), ("dur", 10**400), ("ts", -1e300)],
                         ids=["ts 1e16", "ts 1e308", "dur 10**400", "ts -1e300"])
def test_proton_huge_times_are_counted(tmp_path, field, value):
    """A ts / dur whose cycles do not fit int64 (or past 2**62): a counted malformed event (was OverflowError)."""
    bad = proton_event(name="bad")
    bad[field] = value
    path = write(tmp_path, "huge.chrome_trace", {"traceEvents": [proton_event(), bad]})
    (t,) = read_foreign(path)
    assert len(t.spans) == 1 and t.loss.malformed_reasons == {"event without valid ts/dur": 2}
    assert_accounted(t)


@pytest.mark.parametrize("cta,warp", [(0, 10**9), (0, 10**30), (10**12, 0)], ids=["warp 1e9", "warp 1e30", "cta 1e12"])
def test_proton_huge_indices_are_counted_without_allocating(tmp_path, cta, warp):
    """One event naming warp 10**9 or CTA 10**12 is counted, not imported: the trace keeps the shape of the
    others (was: a dict of a billion warp names, MemoryError, or OverflowError)."""
    from host_decode.interop.proton import OUT_OF_RANGE

    path = write(tmp_path, "big.chrome_trace",
                 {"traceEvents": [proton_event(warp=1), proton_event(cta=cta, warp=warp)]})
    (t,) = read_foreign(path)
    assert (t.num_blocks, t.num_groups, len(t.names.groups)) == (1, 2, 2)
    assert t.loss.malformed_reasons == {OUT_OF_RANGE: 2}
    assert_accounted(t)


def test_proton_non_complete_events_are_counted_per_kernel(tmp_path):
    """B/E pairs and instants with Proton's naming: counted in the loss report of their own kernel (was: one
    file-wide number in every kernel's meta, nothing in the loss report); 'M' metadata is no record."""
    from host_decode.interop.proton import NOT_COMPLETE

    events = [proton_event(kernel="a"), proton_event(kernel="b"),
              proton_event(kernel="a", ph="B", ts=1.0), proton_event(kernel="a", ph="E", ts=2.0),
              proton_event(kernel="a", ph="i", ts=3.0),
              {"ph": "M", "name": "process_name", "pid": "a Core1 CTA0", "args": {"name": "x"}}]
    a, b = read_foreign(write(tmp_path, "be.chrome_trace", {"traceEvents": events}))
    assert a.meta["kernel"] == "a" and a.loss.malformed_reasons == {NOT_COMPLETE: 3}
    assert b.meta["kernel"] == "b" and b.loss.malformed_reasons == {}
    assert a.meta["source"]["metadata_events_in_file"] == 1
    assert_accounted(a)


def test_proton_stray_event_is_counted_not_a_kernel(tmp_path):
    """An 'X' event without Proton's pid/tid in a real file: a counted malformed pair in the (first)
    kernel's report, not a pseudo-kernel '?' (which made the whole file unreadable)."""
    from host_decode.analysis.sessions import load_trace
    from host_decode.interop.proton import UNNAMED

    doc = json.loads(PROTON.read_text())
    doc["traceEvents"].append({"ph": "X", "name": "stray", "ts": 1.0, "dur": 1.0})
    path = write(tmp_path, "stray.chrome_trace", doc)
    (t,) = read_foreign(path)
    assert t.meta["kernel"] == "scaled_add" and t.loss.malformed_reasons == {UNNAMED: 2}
    assert load_trace([path]).spans.size == 48


def test_kernels_of_different_warp_counts_load_together(tmp_path):
    """Two kernels of one Proton file with 4 and 2 warps: one trace of 4 groups per block, each lane keeping
    its (block, warp) (was: 'parts differ in num_groups', the file unreadable)."""
    from host_decode.analysis.sessions import load_trace

    doc = json.loads(PROTON.read_text())
    doc["traceEvents"] += [proton_event(kernel="zz", cta=c, warp=w) for c in range(2) for w in range(2)]
    path = write(tmp_path, "two.chrome_trace", doc)
    real, narrow = read_foreign(path)
    assert (real.num_groups, narrow.num_groups) == (4, 2)
    t = load_trace([path])
    assert (t.num_blocks, t.num_groups) == (6, 4) and t.spans.size == 48 + 4
    tail = t.spans[t.spans["block"] >= 4]
    assert sorted(zip(tail["block"].tolist(), tail["group"].tolist(), tail["lane"].tolist())) == [
        (4, 0, 16), (4, 1, 17), (5, 0, 20), (5, 1, 21)]
    assert (t.lanes["lane"] == t.lanes["block"] * 4 + t.lanes["group"]).all()
    assert (np.diff(t.spans["lane"]) >= 0).all()
    assert [p["num_groups"] for p in t.meta["parts"]] == [4, 2]


@pytest.mark.parametrize("damage", ["truncated", "bad method"])
def test_gzip_problems_name_the_input(tmp_path, capsys, damage):
    """A truncated .gz (was: EOFError traceback) or one with a bad header (was: reported as a failed write of
    the OUTPUT file): one error line naming the input."""
    from host_decode.cli import main

    raw = gzip.compress(IKET_JSON.read_bytes())
    raw = raw[: len(raw) // 2] if damage == "truncated" else raw[:2] + b"\x07" + raw[3:]
    path = tmp_path / "in.trace.json.gz"
    path.write_bytes(raw)
    assert main(["decode", str(path), "-q", "-o", str(tmp_path / "out.pftrace")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: not a readable gzip file" in err and "out.pftrace" not in err and "Traceback" not in err


def test_detect_chrome_array_form_and_metadata_preamble(tmp_path):
    """Chrome's bare array of events with Proton's naming, and a Proton file whose first 64 KiB are 'M'
    metadata events, are Proton traces (both were 'cannot read as a .npy buffer')."""
    array = write(tmp_path, "array.chrome_trace", [proton_event()])
    meta = [{"ph": "M", "name": "process_name", "pid": f"k Core1 CTA{i}", "args": {"name": "x" * 50}}
            for i in range(1000)]
    preamble = write(tmp_path, "preamble.chrome_trace", {"traceEvents": meta + [proton_event()]})
    assert preamble.stat().st_size > 1 << 16
    for path in (array, preamble):
        assert detect(path) == "proton-chrome"
        (t,) = read_foreign(path)
        assert len(t.spans) == 1


@pytest.mark.parametrize("doc,needle", [
    ({"displayTimeUnit": "ns", "traceEvents": []}, "a Chrome trace with no events"),
    ({"traceEvents": [{"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 1}]}, "a Chrome trace without Proton"),
    ([{"ph": "X", "pid": 1, "tid": 2}], "a JSON array"),
])
def test_json_that_is_no_trace_of_ours_says_what_it_is(tmp_path, capsys, doc, needle):
    from host_decode.cli import main

    path = write(tmp_path, "x.chrome_trace", doc)
    assert detect(path) is None
    with pytest.raises(DecodeError, match=needle):
        read_foreign(path)
    assert main(["decode", str(path), "-q", "-o", str(tmp_path / "o.pftrace")]) == 2
    err = capsys.readouterr().err
    assert needle in err and ".npy buffer" not in err


def pftrace_bytes(events) -> bytes:
    """A Perfetto trace with IKET's tracks Grid1 > CTA(x, y, z) > WarpNN; events: (cta, warp, type, name, ts)."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = pb.Trace()
    uuids: dict = {}

    def track(name, parent=0):
        if (name, parent) not in uuids:
            uuids[(name, parent)] = len(uuids) + 1
            p = trace.packet.add()
            p.track_descriptor.uuid, p.track_descriptor.name = uuids[(name, parent)], name
            if parent:
                p.track_descriptor.parent_uuid = parent
        return uuids[(name, parent)]

    grid = track("Grid1")
    for cta, warp, kind, name, ts in events:
        p = trace.packet.add()
        p.timestamp = ts
        p.track_event.track_uuid = track(f"Warp{warp:02d}", track(f"CTA({cta[0]}, {cta[1]}, {cta[2]})", grid))
        p.track_event.type = getattr(p.track_event, f"TYPE_{kind}")
        if name:
            p.track_event.name = name
    return trace.SerializeToString()


def test_iket_pftrace_bad_events_are_counted(tmp_path):
    """A slice ending before it begins (was: a negative duration), counter / untyped events on a warp track
    (were: dropped uncounted), times past 2**62 (2**64-1 was an OverflowError) and a CTA index of 2**40 (was:
    an OverflowError / a grid of 2**40 blocks): each counted under a named reason, the rest imports."""
    from host_decode.interop.iket import OUT_OF_RANGE

    ok, huge_cta = (0, 0, 0), (1 << 40, 0, 0)
    events = [(ok, 0, "SLICE_BEGIN", "tile", 100), (ok, 0, "SLICE_END", "", 200),
              (ok, 0, "SLICE_BEGIN", "back", 500), (ok, 0, "SLICE_END", "", 400),
              (ok, 0, "COUNTER", "", 300), (ok, 0, "UNSPECIFIED", "x", 300),
              (ok, 0, "SLICE_BEGIN", "late", 600), (ok, 0, "SLICE_END", "", (1 << 64) - 1),
              (ok, 0, "INSTANT", "mark", 1 << 63),
              (huge_cta, 0, "SLICE_BEGIN", "far", 100), (huge_cta, 0, "SLICE_END", "", 200)]
    path = tmp_path / "bad.pftrace"
    path.write_bytes(pftrace_bytes(events))
    (t,) = read_foreign(path)
    assert spans_of(t) == [(0, "tile", 100, 200, 0)] and t.num_blocks == 1
    assert t.loss.malformed_reasons == {
        "slice ends before it begins": 2,
        "event neither slice nor instant on a warp track": 2,
        "slice with a time out of range": 2,
        "instant with a time out of range": 1,
        OUT_OF_RANGE: 2,
    }
    assert_accounted(t)
