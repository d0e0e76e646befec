"""Alignment with a torch.profiler Chrome trace (host_decode.analysis.align) on synthetic profiler traces built
like Kineto's (baseTimeNanoseconds + ts in us; kernel slices with cat 'kernel')."""

import gzip
import json

import pytest

from host_decode.analysis import align
from host_decode.analysis.sessions import concat, parts_from_traces, trace_from_spans
from host_decode.cli import main
from host_decode.core.errors import DecodeError
from host_decode.core.model import Names
from host_decode.reports import merged as merged_traces

BASE = 1_790_857_026_000_000_000


def profiler_doc(kernels, base=BASE):
    """kernels: (name, start_ns since epoch, dur_ns). Adds a CPU op and a runtime call as Kineto does."""
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1.0, "dur": 2.0}]
    for i, (name, start, dur) in enumerate(kernels):
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                   "ts": round((start - base) / 1000.0, 3), "dur": round(dur / 1000.0, 3),
                   "args": {"correlation": i, "stream": 7, "device": 0}})
    return {"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": ev}


def device_trace(t0, absolute=True, meta=None):
    """Regions 1,000..9,000 ns after t0 on 2 blocks x 2 groups."""
    rows = [
        (0, 0, 1, t0, t0 + 4_000),
        (0, 1, 2, t0 + 1_000, t0 + 9_000),
        (1, 0, 1, t0 + 500, t0 + 3_000),
        (1, 1, 2, t0 + 600, t0 + 8_000),
    ]
    return trace_from_spans(
        rows,
        num_groups=2,
        names=Names({1: "load", 2: "mma"}, {0: "producer", 1: "consumer"}),
        absolute=absolute,
        meta=dict(meta or {}, kernel="my_kernel"),
    )


def test_offset_from_both_ends_hand_computed():
    # device clock 3 us behind; slice [ks, ke] = 12 us; regions span 9 us -> slack 3 us
    off, lo, hi, ok = align.solve_offset([(100_000, 109_000)], [(103_500, 115_500)])
    assert (lo, hi, ok) == (3_500, 6_500, True) and off == 5_000
    off, *_ = align.solve_offset([(100_000, 109_000)], [(103_500, 115_500)], placement="start", launch_latency_ns=700)
    assert off == 4_200
    off, *_ = align.solve_offset([(100_000, 109_000)], [(103_500, 115_500)], placement="start", launch_latency_ns=10**6)
    assert off == 6_500  # clamped to the feasible interval
    # several launches: intersection of the intervals
    off, lo, hi, ok = align.solve_offset([(0, 9_000), (50_000, 59_000)], [(3_500, 15_500), (55_000, 65_000)])
    assert (lo, hi, ok) == (5_000, 6_000, True) and off == 5_500
    # regions longer than the slice: inconsistent, centred
    off, lo, hi, ok = align.solve_offset([(0, 10_000)], [(1_000, 6_000)])
    assert not ok and off == -1_500


def test_merge_places_regions_inside_the_kernel_slice(tmp_path):
    t0 = BASE + 5_000_000_000  # absolute globaltimer ns
    skew = 2_345  # profiler clock ahead of globaltimer
    doc = profiler_doc([("other_kernel", t0 - 50_000, 3_000), ("my_kernel", t0 + skew - 800, 10_000),
                        ("my_kernel", t0 + 100_000, 10_000)])
    path = tmp_path / "torch.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "merged.json"
    res = merged_traces.merge_with_torch_trace(path, device_trace(t0), out)
    # slice [t0+skew-800, +10000], regions [t0, t0+9000]: feasible [skew-800, skew+200], mid skew-300
    assert res.occurrences == [0]  # matched by absolute time (closest slice)
    assert (res.feasible_lo_ns, res.feasible_hi_ns, res.offset_ns) == (skew - 800, skew + 200, skew - 300)
    assert res.accuracy_ns == 500 and res.slack_ns == 1_000 and res.consistent
    assert res.lead_ns == [500] and res.tail_ns == [500]
    assert res.raw_offset_ns == skew - 800
    merged = json.loads(out.read_text())
    assert len(merged["traceEvents"]) > len(doc["traceEvents"])
    assert merged["baseTimeNanoseconds"] == BASE and merged["ikp_alignment"]["offset_ns"] == skew - 300
    k = [e for e in merged["traceEvents"] if e.get("cat") == "kernel" and e["name"] == "my_kernel"][0]
    regions = [e for e in merged["traceEvents"] if e.get("cat") == "ikp"]
    assert len(regions) == 5  # 4 regions + 1 summary slice
    assert all(r["pid"] == k["pid"] for r in regions)
    for r in regions:
        assert k["ts"] <= r["ts"] and r["ts"] + r["dur"] <= k["ts"] + k["dur"] + 1e-9
    first = min(r["ts"] for r in regions)
    assert first == pytest.approx(k["ts"] + 0.5, abs=1e-6)


def test_session_matched_to_consecutive_slices_and_explicit_occurrence(tmp_path):
    launches = [device_trace(1_000_000 * i, absolute=False, meta={"launch_index": i}) for i in range(3)]
    session = concat(parts_from_traces(launches), mode="stacked")
    ks = [BASE + 10**9 + 50_000 * i for i in range(4)]
    doc = profiler_doc([("my_kernel", k, 10_000) for k in ks])
    with pytest.raises(DecodeError, match="pass occurrence"):
        align.align(session, doc)
    res, chosen = align.align(session, doc, occurrence=1)
    assert res.occurrences == [1, 2, 3] and len(chosen) == 3


def test_kernel_name_matching_and_errors():
    doc = profiler_doc(
        [
            ("void ns::my_kernel<128>(float*)", BASE + 10, 5),
            ("void ns::my_kernel_v2(float*)", BASE + 20, 5),
            ("cutlass_gemm", BASE + 30, 5),
        ]
    )
    assert align.find_kernel(doc, "my_kernel<128>")[0] == "void ns::my_kernel<128>(float*)"
    with pytest.raises(DecodeError, match="2 different kernels"):
        align.find_kernel(doc, "my_kernel")
    with pytest.raises(DecodeError, match="no kernel slice named like 'nope'"):
        align.find_kernel(doc, "nope")
    with pytest.raises(DecodeError, match="no kernel slices"):
        align.find_kernel({"traceEvents": []}, "x")


def test_legacy_trace_without_base_time():
    doc = profiler_doc([("my_kernel", 2_000_000, 12_000)], base=0)
    del doc["baseTimeNanoseconds"]
    res, _ = align.align(device_trace(0, absolute=False), doc)
    assert (res.feasible_lo_ns, res.feasible_hi_ns) == (2_000_000, 2_003_000)


def test_real_torch_fixture_clock_is_epoch_ns():
    """Kineto's ts + baseTimeNanoseconds is Unix-epoch ns (fixture recorded with torch on 2026-11-22)."""
    from pathlib import Path

    doc = align.load_chrome(Path(__file__).resolve().parents[3] / "fixtures" / "torch" / "cpu_steps.json.gz")
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t = align.profiler_ns(doc, x[0]["ts"])
    assert 1.7e18 < t < 2.0e18  # 2023..2033 in epoch ns; a monotonic/boot clock would be ~1e15


def test_cli_merge_with_torch(tmp_path):
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E, F

    t64 = BASE + 7_000_000_000
    bb = BufferBuilder(num_blocks=1, num_groups=1, records_per_lane=8)
    bb.anchor(0, t64)
    lo = t64 & 0xFFFF_FFFF
    bb.put(0, lo + 200, 1, B).put(0, lo + 2_200, 1, E).put(0, lo + 2_500, 0, F)
    cap = save_capture(tmp_path / "k.npy", bb.buf, {"events": {"1": "mma"}}, kernel="my_kernel")
    (tmp_path / "t.json").write_text(json.dumps(profiler_doc([("my_kernel", t64 - 1_000, 4_000)])))
    assert (
        main(
            ["merge", str(cap), "--torch", str(tmp_path / "t.json"), "-o", str(tmp_path / "o.json"), "--format", "json"]
        )
        == 0
    )
    merged = json.loads((tmp_path / "o.json").read_text())
    assert merged["ikp_alignment"]["slack_ns"] == 1_500 and merged["ikp_alignment"]["consistent"]
    assert (
        main(
            ["merge", str(cap), "--torch", str(tmp_path / "t.json"), "-o", str(tmp_path / "o.json"), "--kernel", "zzz"]
        )
        == 2
    )


def test_absolute_match_refuses_when_ambiguous():
    t0 = BASE + 10**9
    # clocks 40 us apart, launches 50 us apart: the nearest slice is not clearly the right one
    doc = profiler_doc([("my_kernel", t0 + 40_000 + 50_000 * i, 10_000) for i in range(3)])
    with pytest.raises(DecodeError, match="too close to tell"):
        align.align(device_trace(t0 + 50_000), doc)
    res, _ = align.align(device_trace(t0 + 50_000), doc, occurrence=1)
    assert res.consistent and res.occurrences == [1]


def test_unreadable_profiler_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [ {"ph": "X",')
    with pytest.raises(DecodeError, match="not a Chrome JSON trace"):
        align.load_chrome(bad)
    (tmp_path / "obj.json").write_text('{"events": []}')
    with pytest.raises(DecodeError, match="no traceEvents"):
        align.load_chrome(tmp_path / "obj.json")


def test_merge_torch_says_lanes_left_out(tmp_path, capsys):
    # --max-lanes cuts lanes out of the merged trace: the file records it and the terminal says it
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E, F

    t64 = BASE + 7_000_000_000
    bb = BufferBuilder(num_blocks=2, num_groups=1, records_per_lane=8)
    lo = t64 & 0xFFFF_FFFF
    for lane in range(2):
        bb.anchor(lane, t64)
        bb.put(lane, lo + 200, 1, B).put(lane, lo + 2_200, 1, E).put(lane, lo + 2_500, 0, F)
    cap = save_capture(tmp_path / "k.npy", bb.buf, {"events": {"1": "mma"}}, kernel="my_kernel")
    (tmp_path / "t.json").write_text(json.dumps(profiler_doc([("my_kernel", t64 - 1_000, 4_000)])))
    out = tmp_path / "o.json"
    assert main(["merge", str(cap), "--torch", str(tmp_path / "t.json"), "-o", str(out), "--max-lanes", "1"]) == 0
    said = capsys.readouterr().out
    assert "1 lane(s) over the limit of 1 left out of the merged trace (1 regions, 0 instants)" in said
    left = json.loads(out.read_text())["ikp_alignment"]
    assert (left["lanes_left_out"], left["spans_left_out"], left["instants_left_out"]) == (1, 1, 0)


def test_untimeable_kernel_slices_are_skipped_and_counted():
    # a negative dur, a dur or ts out of range: skipped and counted as the loader does, the rest aligned
    t0 = BASE + 10**9
    doc = profiler_doc([("my_kernel", t0 - 1_000, 12_000)])
    kernel = {"ph": "X", "cat": "kernel", "name": "my_kernel", "pid": 0, "tid": 7, "args": {}}
    doc["traceEvents"] += [dict(kernel, ts=2e6, dur=-5.0), dict(kernel, ts=3e6, dur=1e300),
                           dict(kernel, ts=1e30, dur=1.0), dict(kernel, ts=4e6)]
    res, chosen = align.align(device_trace(t0), doc)
    assert len(chosen) == 1 and res.consistent and (res.feasible_lo_ns, res.feasible_hi_ns) == (-1_000, 2_000)
    assert res.skipped_slices == {"X event with negative dur": 1, "X event without numeric ts/dur": 1,
                                  "X event with ts, dur or ts + dur beyond 4.6e15 us": 2}
    with pytest.raises(DecodeError, match=r"occurrence 1: .*\(kernel slices skipped: \{'X event"):
        align.align(device_trace(t0), doc, occurrence=1)


def test_offset_exact_beyond_int64():
    # epoch-ns slices against a device clock near 2**64 (unsigned): no int64 overflow, exact
    off, lo, hi, ok = align.solve_offset([(2**64 - 9_000, 2**64)], [(BASE, BASE + 12_000)])
    assert (lo, hi, ok) == (BASE - 2**64 + 9_000, BASE - 2**64 + 12_000, True) and off == (lo + hi) // 2


@pytest.mark.parametrize("change, match", [
    ({"name": None}, r"traceEvents\[2\] \(a kernel slice\): 'name' = None is not a string"),
    ({"name": 5}, r"traceEvents\[2\] \(a kernel slice\): 'name' = 5 is not a string"),
    ({"baseTimeNanoseconds": "abc"}, r"baseTimeNanoseconds = 'abc' is not an integer"),
    ({"baseTimeNanoseconds": 10**30}, r"baseTimeNanoseconds = .* is not an integer number of ns within"),
])
def test_malformed_kernel_slices_name_file_and_field(tmp_path, change, match):
    doc = profiler_doc([("my_kernel", BASE + 10**9, 12_000)])
    (doc if "baseTimeNanoseconds" in change else doc["traceEvents"][2]).update(change)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DecodeError, match=match) as err:
        merged_traces.merge_with_torch_trace(path, device_trace(BASE + 10**9 + 500), tmp_path / "o.json")
    assert str(path) in str(err.value)


def test_kernel_slice_without_name_is_named_empty_as_the_loader_reads_it():
    t0 = BASE + 10**9
    doc = profiler_doc([("my_kernel", t0 - 1_000, 12_000), ("", t0 + 50_000, 1_000)])
    del doc["traceEvents"][3]["name"]
    res, chosen = align.align(device_trace(t0), doc)
    assert res.kernel_name == "my_kernel" and chosen == [doc["traceEvents"][2]]
    with pytest.raises(DecodeError, match="2 distinct kernels.*''"):
        align.find_kernel(doc, None)
