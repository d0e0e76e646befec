"""Foreign traces (issue 22): IKET's JSON and .pftrace and Proton's Chrome trace, read from real files
written on an H100 (examples/interop/), into ikp's trace model."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from host_decode.core.decoder import load_capture
from host_decode.core.errors import DecodeError
from host_decode.core.model import LOSS_BUCKETS
from host_decode.interop import detect, read_foreign

HERE = Path(__file__).resolve().parents[1] / "examples" / "interop"
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

    from host_decode.reports.text import make_console, print_summary

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
                            Int32(tiles), ikp_cute.fake_buffer(spec), spec, blocks, threads, options="--keep-ptx")
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
