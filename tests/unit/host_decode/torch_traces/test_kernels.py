"""`ikp kernels` / host_decode.torch_traces.trace on real CPU torch.profiler traces (tests/fixtures/torch, made by
make_cpu_traces.py) and on synthetic GPU-shaped traces built here. Every number is checked against an
independent computation: json.load and a plain Python loop."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from host_decode.cli import main as cli_main
from host_decode.core.errors import DecodeError
from host_decode.torch_traces import chunks, loader
from host_decode.torch_traces import trace as tt

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "torch"
CPU_STEPS = FIXTURES / "cpu_steps.json.gz"
CPU_SHAPES = FIXTURES / "cpu_shapes.json.gz"
GPU_REAL = FIXTURES / "torch_gpu_2streams.json.gz"  # captured on the GPU machine (gpu/torch_profile_capture.py)
EPOCH_US = 1_700_000_000_000_000.0  # Kineto's ts: us since the Unix epoch


# ------------------------------------------------------------------------------ independent reference


def load_events(path) -> list:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def ns(us) -> int:
    """Exact ns of the number as the file writes it (its shortest decimal), not round(us * 1000)."""
    from decimal import ROUND_HALF_EVEN, Decimal

    return int((Decimal(repr(us)) * 1000).to_integral_value(ROUND_HALF_EVEN))


def reference_table(events, cats, keep=lambda e: True) -> dict:
    """name -> (count, total_ns, mean_ns, std_ns, min_ns, max_ns) by a plain loop."""
    durs = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat", "").lower() in cats and keep(e):
            durs[e["name"]].append(ns(e["dur"]))
    out = {}
    for name, d in durs.items():
        mean = sum(d) / len(d)
        std = math.sqrt(sum((x - mean) ** 2 for x in d) / len(d))
        out[name] = (len(d), sum(d), mean, std, min(d), max(d))
    return out


def reference_gaps(events, cats, lane_of):
    """Per lane: sorted by (start, end); gap = start - latest earlier end; negative -> overlap, gap 0.
    Returns (per-lane idle_ns, per-lane overlaps, list of (prev_name, next_name, gap_ns))."""
    lanes = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat", "").lower() in cats:
            lanes[lane_of(e)].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]))
    idle, overlaps, pairs = {}, {}, []
    for lane, rows in lanes.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        reach, total, n_over = rows[0][1], 0, 0
        for prev, cur in zip(rows, rows[1:]):
            gap = cur[0] - reach
            if gap < 0:
                n_over += 1
                gap = 0
            total += gap
            pairs.append((prev[2], cur[2], gap))
            reach = max(reach, cur[1])
        idle[lane], overlaps[lane] = total, n_over
    return idle, overlaps, pairs


def table_by_name(table) -> dict:
    return {n: i for i, n in enumerate(table["full_name"])}


def assert_table_matches(table, ref):
    assert sorted(table["full_name"]) == sorted(ref)
    idx = table_by_name(table)
    for name, (count, total, mean, std, vmin, vmax) in ref.items():
        i = idx[name]
        assert table["count"][i] == count, name
        assert table["total_us"][i] == pytest.approx(total / 1e3, abs=1e-9)
        assert table["mean_us"][i] == pytest.approx(mean / 1e3, rel=1e-12, abs=1e-12)
        assert table["std_us"][i] == pytest.approx(std / 1e3, rel=1e-9, abs=1e-9)
        assert table["min_us"][i] == pytest.approx(vmin / 1e3, abs=1e-12)
        assert table["max_us"][i] == pytest.approx(vmax / 1e3, abs=1e-12)
    n = sum(r[0] for r in ref.values())
    busy = sum(r[1] for r in ref.values())
    for name, i in idx.items():
        assert table["launch_share"][i] == pytest.approx(ref[name][0] / n)
        assert table["time_share"][i] == pytest.approx(ref[name][1] / busy)


# ------------------------------------------------------------------------------ synthetic GPU traces


KERNEL_NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)",
    "void at::native::(anonymous namespace)::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast"
    "<at::native::MulFunctor<float> >(at::TensorIteratorBase&)::{lambda(int)#1}>(int, at::native::MulFunctor<float>)",
    'gemm_kernel "quoted} {name" [x]',
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalEEEvNT_6ParamsE",
]


def synthetic_gpu_events(seed=0, steps=3, launches=12):
    """Kineto-shaped events: ProfilerStep#N on the CPU, cudaLaunchKernel rows, kernels on 2 devices x 2 streams
    with correlation ids, memcpy/memset rows, overlaps, and kernels that run after their step's CPU span."""
    rng = np.random.default_rng(seed)
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}]
    corr, cpu_t = 100, 1_000.0
    gpu_t = defaultdict(lambda: 1_000.0)
    for step in range(steps):
        step_start = cpu_t
        for i in range(launches):
            corr += 1
            dev, stream = int(rng.integers(0, 2)), int(rng.choice([7, 13]))
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 42, "tid": 42,
                       "ts": round(cpu_t, 3), "dur": 3.25, "args": {"correlation": corr, "cbid": 211}})
            start = max(gpu_t[dev, stream], cpu_t + 2.0) + float(rng.choice([0.0, 0.5, 3.0, 12.5]))
            if i == 5:
                start -= 1.5  # programmatic-dependent-launch-like overlap with the previous kernel
            dur = round(float(rng.uniform(1.0, 40.0)), 3)
            kind = "kernel" if i % 6 else ("gpu_memcpy" if i % 12 == 0 else "gpu_memset")
            name = KERNEL_NAMES[int(rng.integers(0, len(KERNEL_NAMES)))] if kind == "kernel" else (
                "Memcpy HtoD (Pinned -> Device)" if kind == "gpu_memcpy" else "Memset (Device)")
            ev.append({"ph": "X", "cat": kind, "name": name, "pid": dev, "tid": stream, "ts": round(start, 3),
                       "dur": dur, "args": {"device": dev, "stream": stream, "correlation": corr,
                                            "grid": [1, 2, 3], "block": [128, 1, 1]}})
            ev.append({"ph": "f", "id": corr, "pid": dev, "tid": stream, "ts": round(start, 3), "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})
            gpu_t[dev, stream] = start + dur
            cpu_t += 5.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 10}", "pid": 42, "tid": 42,
                   "ts": round(step_start - 0.5, 3), "dur": round(cpu_t - step_start, 3), "args": {}})
        cpu_t += 20.0
    ev.append({"ph": "X", "cat": "kernel", "name": "late_kernel_without_launch", "pid": 1, "tid": 7,
               "ts": round(max(gpu_t.values()) + 1.0, 3), "dur": 2.0, "args": {"device": 1, "stream": 7}})
    ev.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": cpu_t})
    return ev


def write_trace(path: Path, events, indent=True, gz=False, header=None):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "fake"}], **(header or {}),
           "traceEvents": events, "traceName": str(path), "displayTimeUnit": "ms"}
    text = json.dumps(doc, indent=2 if indent else None)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def gpu_trace(tmp_path):
    events = synthetic_gpu_events()
    return write_trace(tmp_path / "gpu.json", events), events


def gpu_lane(e):
    return (e["args"]["device"], e["args"]["stream"])


DEVICE = set(tt.DEVICE_CATS)


# ---------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("path", [CPU_STEPS, CPU_SHAPES], ids=["steps", "shapes"])
def test_counts_every_event(path):
    events = load_events(path)
    trace = tt.load_torch_trace(path, cache=False)
    phases = defaultdict(int)
    for e in events:
        phases[str(e.get("ph"))] += 1
    assert trace.meta["phases"] == dict(phases)
    assert trace.meta["n_elements"] == len(events)
    complete = [e for e in events if e.get("ph") == "X"]
    assert len(trace) == len(complete)
    assert [trace.names[i] for i in trace.columns["name"]] == [e["name"] for e in complete]
    assert trace.columns["ts_ns"].tolist() == [ns(e["ts"]) for e in complete]
    assert trace.columns["dur_ns"].tolist() == [ns(e["dur"]) for e in complete]
    # string pids ("Spans") are kept as labels, not lost
    pids = [trace.lane_label(int(p)) for p in trace.columns["pid"]]
    assert pids == [str(e.get("pid")) for e in complete]
    assert trace.meta["baseTimeNanoseconds"] > 0 and trace.meta["traceName"]


def test_cpu_op_table_exact():
    events = load_events(CPU_STEPS)
    trace = tt.load_torch_trace(CPU_STEPS, cache=False)
    sel = tt.select(trace, categories=["cpu_op"])
    table = tt.name_table(trace, sel, sort="count")
    assert_table_matches(table, reference_table(events, {"cpu_op"}))
    assert list(table["count"]) == sorted(table["count"], reverse=True)


def test_profiler_steps_cpu():
    events = load_events(CPU_STEPS)
    trace = tt.load_torch_trace(CPU_STEPS, cache=False)
    steps = [e for e in events if e.get("ph") == "X" and re.match(r"ProfilerStep#\d+$", e["name"])]
    assert len(steps) == 4
    got = tt.profiler_steps(trace)
    assert got["number"].tolist() == [int(e["name"].split("#")[1]) for e in steps]
    # step 3 by start time (CPU rows have no launch): [start of 3, start of 4)
    s3 = next(e for e in steps if e["name"] == "ProfilerStep#3")
    s4 = next(e for e in steps if e["name"] == "ProfilerStep#4")
    keep = lambda e: ns(s3["ts"]) <= ns(e["ts"]) < ns(s4["ts"])  # noqa: E731
    sel = tt.select(trace, categories=["cpu_op"], step=3)
    assert sel.note["step_assignment"]["by_time"] > 0 and sel.note["step_assignment"]["by_launch"] == 0
    assert_table_matches(tt.name_table(trace, sel), reference_table(events, {"cpu_op"}, keep))
    with pytest.raises(ValueError, match="no ProfilerStep#99"):
        tt.select(trace, step=99)


def test_gpu_tables_exact(gpu_trace):
    path, events = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    sel = tt.select(trace)
    assert_table_matches(tt.name_table(trace, sel), reference_table(events, DEVICE))
    rt = tt.select(trace, categories=list(tt.RUNTIME_CATS))
    assert_table_matches(tt.name_table(trace, rt), reference_table(events, {"cuda_runtime"}))
    # one device / one stream
    for dev in (0, 1):
        sel = tt.select(trace, device=dev, stream=13)
        ref = reference_table(events, DEVICE, lambda e: gpu_lane(e) == (dev, 13))
        assert_table_matches(tt.name_table(trace, sel), ref)


def test_gpu_busy_union(gpu_trace):
    path, events = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    busy = tt.busy_summary(trace, tt.select(trace))
    for dev in (0, 1):
        iv = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                    if e.get("ph") == "X" and e["cat"] in DEVICE and e["args"]["device"] == dev)
        union, cur_s, cur_e = 0, *iv[0]
        for s, e in iv[1:]:
            if s > cur_e:
                union += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        union += cur_e - cur_s
        assert busy[dev]["union_us"] == pytest.approx(union / 1e3)
        assert busy[dev]["events"] == len(iv)


def test_gap_analysis_exact(gpu_trace):
    path, events = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    gaps = tt.gap_analysis(trace, tt.select(trace), top=None)
    idle, overlaps, pairs = reference_gaps(events, DEVICE, gpu_lane)
    streams = gaps["streams"]
    got = {(int(d), int(s)): (i, o) for d, s, i, o in zip(streams["device"], streams["stream"],
                                                          streams["idle_us"], streams["overlaps"])}
    assert set(got) == set(idle)
    for lane in idle:
        assert got[lane][0] == pytest.approx(idle[lane] / 1e3)
        assert got[lane][1] == overlaps[lane]
    assert sum(overlaps.values()) > 0  # the synthetic trace has overlaps on purpose
    assert gaps["n_gaps"] == len(pairs)
    ref = defaultdict(list)
    for a, b, g in pairs:
        ref[a, b].append(g)
    p = gaps["pairs"]
    assert len(p["count"]) == len(ref)
    for a, b, c, mean, vmax, std in zip(p["prev_full"], p["next_full"], p["count"], p["mean_us"], p["max_us"],
                                        p["std_us"]):
        g = ref[a, b]
        m = sum(g) / len(g)
        assert c == len(g) and mean == pytest.approx(m / 1e3) and vmax == pytest.approx(max(g) / 1e3)
        assert std == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in g) / len(g)) / 1e3, abs=1e-9)
    assert list(p["count"]) == sorted(p["count"], reverse=True)


def test_gap_range_histogram_and_pair_order(gpu_trace):
    path, events = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    _, _, pairs = reference_gaps(events, DEVICE, gpu_lane)
    lo, hi = 1.0, 20.0
    in_range = [g for _, _, g in pairs if lo * 1e3 <= g <= hi * 1e3]
    gaps = tt.gap_analysis(trace, tt.select(trace), gap_min_us=lo, gap_max_us=hi, bins=5, pair_sort="max", top=None)
    assert gaps["n_in_range"] == len(in_range) > 0
    assert sum(gaps["histogram"]["counts"]) + gaps["histogram"]["zero"] == len(in_range)
    assert gaps["histogram"]["edges_us"][0] >= lo and gaps["histogram"]["edges_us"][-1] <= hi
    assert sum(gaps["pairs"]["count"]) == len(in_range)
    assert list(gaps["pairs"]["max_us"]) == sorted(gaps["pairs"]["max_us"], reverse=True)
    lin = tt.gap_analysis(trace, tt.select(trace), gap_min_us=lo, gap_max_us=hi, bins=4, log_bins=False)
    assert np.allclose(np.diff(lin["histogram"]["edges_us"]), np.diff(lin["histogram"]["edges_us"])[0])


def test_step_filter_uses_launch_correlation(gpu_trace):
    path, events = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("cat") == "cuda_runtime"}
    steps = {int(e["name"].split("#")[1]): (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
             if e.get("name", "").startswith("ProfilerStep#")}
    for number, (s, t) in steps.items():
        def keep(e, s=s, t=t):
            c = e["args"].get("correlation")
            return c in launch and s <= launch[c] <= t
        sel = tt.select(trace, step=number)
        ref = reference_table(events, DEVICE, keep)
        assert_table_matches(tt.name_table(trace, sel), ref)
        assert sel.note["step_assignment"]["by_launch"] == sum(r[0] for r in ref.values())
    # some kernels of a step run after that step's CPU span ended: time alone would misplace them
    late = [e for e in events if e.get("cat") in DEVICE and "correlation" in e["args"]
            and any(s <= launch[e["args"]["correlation"]] <= t < ns(e["ts"]) for s, t in steps.values())]
    assert late
    # the kernel without a launch row falls back to its start time: after the last step -> in no step
    last = max(steps)
    assert tt.select(trace, step=last).note["step_assignment"]["in_no_step"] == 1


def test_chunking_does_not_change_results(gpu_trace, tmp_path):
    path, events = gpu_trace
    whole = tt.load_torch_trace(path, cache=False)
    compact = write_trace(tmp_path / "compact.json.gz", events, indent=False, gz=True)
    for p, chunk in ((path, 64), (path, 1000), (compact, 97), (compact, 1 << 20)):
        t = tt.load_torch_trace(p, cache=False, chunk_bytes=chunk)
        assert t.meta["n_elements"] == len(events)
        for k in tt.COLUMNS:
            if k in ("name", "cat"):
                assert [t.names[i] if k == "name" else t.cats[i] for i in t.columns[k]] == \
                       [whole.names[i] if k == "name" else whole.cats[i] for i in whole.columns[k]]
            else:
                assert np.array_equal(t.columns[k], whole.columns[k]), (p, chunk, k)


def test_plain_array_form(tmp_path):
    events = synthetic_gpu_events(steps=1, launches=4)
    path = tmp_path / "array.json"
    path.write_text(json.dumps(events))
    trace = tt.load_torch_trace(path, cache=False)
    assert len(trace) == sum(e.get("ph") == "X" for e in events)


# ---------------------------------------------------------------------------------------------- errors


def test_truncated_trace_is_a_clear_error(gpu_trace, tmp_path):
    path, events = gpu_trace
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) - 40):
        bad = tmp_path / f"cut{cut}.json"
        bad.write_bytes(data[:cut])
        with pytest.raises(DecodeError, match="truncated") as err:
            tt.load_torch_trace(bad, cache=False, chunk_bytes=256)
        assert str(bad) in str(err.value)
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(data)[:-200])
    with pytest.raises(DecodeError, match="truncated or corrupt gzip"):
        tt.load_torch_trace(gz, cache=False)
    closing = tmp_path / "no_brace.json"
    closing.write_bytes(data.rstrip()[:-1])  # only the object's final '}' missing
    with pytest.raises(DecodeError, match="after the traceEvents array"):
        tt.load_torch_trace(closing, cache=False)


def test_malformed_event_names_index_and_offset(tmp_path):
    events = synthetic_gpu_events(steps=1, launches=4)
    text = json.dumps({"traceEvents": events}, indent=1)
    target = json.dumps(events[5], indent=1).replace("\n", "\n  ")
    assert text.count('"cbid": 211') >= 2
    broken = text.replace('"cbid": 211', '"cbid": 2x11', 2)
    path = tmp_path / "bad.json"
    path.write_text(broken)
    for chunk in (128, 1 << 20):
        with pytest.raises(DecodeError, match=r"event \d+ at byte \d+: invalid JSON") as err:
            tt.load_torch_trace(path, cache=False, chunk_bytes=chunk)
        index = int(re.search(r"event (\d+)", str(err.value)).group(1))
        first_bad = next(i for i, e in enumerate(events) if e.get("args", {}).get("cbid") == 211)
        assert index == first_bad
        offset = int(re.search(r"at byte (\d+)", str(err.value)).group(1))
        assert broken[offset] == "{" and "2x11" in broken[offset: offset + len(target) + 200]


@pytest.mark.parametrize("text, match", [
    ("hello", "not a Chrome trace"),
    ('{"other": 1}', "no 'traceEvents'"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, 5]}', "must be JSON objects"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},]}', "unexpected|invalid"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}} ]}', "unbalanced"),
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "x": }', "after the traceEvents"),
    ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"stream": "s"}}]}', "args.stream"),
    ('[{"ph": "X", "ts": 1, "dur": 1}] x', "after the event array"),
    ('{"traceEvents": [{"ph": "X", "name": ["k"], "ts": 1, "dur": 1}]}', "not a string"),
])
def test_malformed_traces(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DecodeError, match=match):
        tt.load_torch_trace(path, cache=False)


def test_untimed_events_are_counted_not_dropped(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 1.0, "dur": 2.0, "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 4.0},
        {"ph": "B", "name": "c", "ts": 5.0}]}))
    trace = tt.load_torch_trace(path, cache=False)
    assert len(trace) == 1
    assert trace.meta["skipped"] == {"X event without numeric ts/dur": 1}
    assert trace.meta["phases"] == {"X": 2, "B": 1}


@pytest.mark.parametrize("parser", ["orjson", "msgspec"])
def test_negative_and_out_of_range_times_are_skipped(tmp_path, parser):
    pytest.importorskip(parser)
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7}}
    path = write_trace(tmp_path / "t.json", [
        dict(kernel, name="a", ts=EPOCH_US, dur=10.0), dict(kernel, name="b", ts=EPOCH_US + 5, dur=10.0),
        dict(kernel, name="neg", ts=EPOCH_US + 40, dur=-4.0),
        dict(kernel, name="long", ts=EPOCH_US + 50, dur=1e300), dict(kernel, name="late", ts=1e30, dur=1.0),
        dict(kernel, name="yes", ts=True, dur=1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy cast warning: nothing out of range reaches the int64 columns
        trace = tt.load_torch_trace(path, cache=False, parser=parser)
    assert trace.meta["skipped"] == {tt.SKIP_NEGATIVE: 1, tt.SKIP_OUT_OF_RANGE: 2, tt.SKIP_UNTIMED: 1}
    assert [trace.names[i] for i in trace.columns["name"]] == ["a", "b"]
    sel = tt.select(trace)
    table = tt.name_table(trace, sel)
    row = table_by_name(table)["a"]
    assert table["total_us"][row] == 10.0 and table["time_share"][row] == 0.5
    assert tt.busy_summary(trace, sel)[0] == {"events": 2, "sum_us": 20.0, "union_us": 15.0, "span_us": 15.0}


def test_gaps_exact_across_epoch_and_zero(tmp_path):
    # one kernel at ts 0 on its own stream beside 10 streams at epoch times: the lane-lifted running max
    # needs range x lanes ~ 1.9e19 > int64, so it is taken over ranks
    events = [{"ph": "X", "cat": "kernel", "name": "early", "pid": 0, "tid": 1, "ts": 0.0, "dur": 1.0,
               "args": {"device": 0, "stream": 1}}]
    for stream in range(2, 12):
        events += [{"ph": "X", "cat": "kernel", "name": f"k{stream}", "pid": 0, "tid": stream,
                    "ts": EPOCH_US + 10 * i, "dur": 2.0 + i, "args": {"device": 0, "stream": stream}}
                   for i in range(3)]
    trace = tt.load_torch_trace(write_trace(tmp_path / "t.json", events), cache=False)
    gaps = tt.gap_analysis(trace, tt.select(trace))
    idle, overlaps, _ = reference_gaps(events, DEVICE, gpu_lane)
    streams = gaps["streams"]
    for i, stream in enumerate(streams["stream"].tolist()):
        assert streams["idle_us"][i] * 1e3 == pytest.approx(idle[0, stream], abs=1e-6)
        assert streams["overlaps"][i] == overlaps[0, stream] == 0
    assert streams["idle_us"].tolist() == [0.0] + [15.0] * 10


# ------------------------------------------------------------------------------------------------ cache


def test_cache_hit_and_invalidation(gpu_trace, monkeypatch):
    path, _ = gpu_trace
    cache = Path(str(path) + tt.CACHE_SUFFIX)
    first = tt.load_torch_trace(path)
    assert first.meta["cache"].startswith("written") and cache.exists()
    second = tt.load_torch_trace(path)
    assert second.meta["cache"].startswith("hit")
    for k in tt.COLUMNS:
        assert np.array_equal(first.columns[k], second.columns[k])
    assert second.names == first.names and second.cats == first.cats and second.labels == first.labels
    assert second.meta["phases"] == first.meta["phases"]
    # a changed trace (size and mtime) is parsed again
    events = synthetic_gpu_events(seed=3)
    write_trace(path, events)
    os.utime(path, ns=(1, 1))
    third = tt.load_torch_trace(path)
    assert not third.meta["cache"].startswith("hit")
    assert len(third) == sum(e.get("ph") == "X" for e in events)
    # a damaged cache is ignored and rewritten
    cache.write_bytes(b"garbage")
    assert tt.load_torch_trace(path).meta["cache"].startswith("written")
    # an unwritable directory: no cache, same result
    cache.unlink()

    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(loader.os, "replace", deny)
    fourth = tt.load_torch_trace(path)
    assert fourth.meta["cache"].startswith("not written") and not cache.exists()
    assert not list(path.parent.glob("*.tmp*"))
    assert np.array_equal(fourth.columns["ts_ns"], third.columns["ts_ns"])


def test_damaged_cache_is_parsed_again(gpu_trace):
    # a half-written cache (killed, disk full) is a zip cut short: parsed again, not a BadZipFile crash
    path, events = gpu_trace
    cache = Path(str(path) + tt.CACHE_SUFFIX)
    whole = tt.load_torch_trace(path)
    cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])
    again = tt.load_torch_trace(path)
    assert again.meta["cache"].startswith("written")
    assert np.array_equal(again.columns["ts_ns"], whole.columns["ts_ns"])


# -------------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("full, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
     "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::elementwise_kernel<128, 2, X::{lambda(int)#1}>(int, F)",
     "elementwise_kernel"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
    ('gemm_kernel "quoted} {name" [x]', 'gemm_kernel "quoted} {name" [x]'),
    ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
    ("aten::mm", "mm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", "Kernel2"),
])
def test_shorten(full, short):
    assert tt.shorten(full) == short


def test_short_names_disambiguate_and_demangle():
    names = tt.short_names(KERNEL_NAMES[:2] + [KERNEL_NAMES[4], "Memcpy HtoD (Pinned -> Device)"],
                           ["kernel", "kernel", "kernel", "memcpy"])
    assert names[0] != names[1] and "FillFunctor" in names[0] and "AddFunctor" in names[1]
    assert names[3] == "Memcpy HtoD (Pinned -> Device)"
    # repeated full names (as in the pair table) keep one short name each, no "#k" suffixes
    again = tt.short_names([KERNEL_NAMES[0], KERNEL_NAMES[1], KERNEL_NAMES[0], "Memset (Device)"])
    assert again[0] == again[2] == names[0] and again[1] == names[1] and again[3] == "Memset (Device)"
    if shutil.which("c++filt"):
        assert names[2] == "device_kernel"


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_json_csv_and_report(gpu_trace, tmp_path, capsys):
    path, events = gpu_trace
    out = tmp_path / "r.json"
    assert cli_main(["kernels", str(path), "--format", "json", "-o", str(out), "--top", "0"]) == 0
    report = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert report["gaps"]["range_us"] == [0.0, None]
    # kernels and memory operations in tables of their own, each with its own share denominator
    ref = reference_table(events, {"kernel"})
    assert {r["full_name"]: r["count"] for r in report["kernels"]} == {k: v[0] for k, v in ref.items()}
    assert sum(r["time_share"] for r in report["kernels"]) == pytest.approx(1.0)
    mem = reference_table(events, DEVICE - {"kernel"})
    assert mem and {r["full_name"]: r["count"] for r in report["memory"]} == {k: v[0] for k, v in mem.items()}
    assert {r["name"] for r in report["runtime"]} == {"cudaLaunchKernel"}
    assert report["streams"] and report["pairs"] and report["histogram"]
    assert cli_main(["kernels", str(path), "--format", "csv", "--table", "streams"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("device,stream,count") and len(lines) == 1 + 4
    txt = tmp_path / "r.txt"
    assert cli_main(["kernels", str(path), "-o", str(txt), "--sort", "count", "-v", "--step", "11"]) == 0
    text = txt.read_text()
    assert "ProfilerStep#11" in text and "idle gaps per stream" in text and "cudaLaunchKernel" in text
    assert "\x1b[" not in text  # plain text in files
    assert cli_main(["kernels", str(path), "--step", "99"]) == 2
    assert "no ProfilerStep#99" in capsys.readouterr().err


def test_cli_truncated_exit_code(gpu_trace, tmp_path, capsys):
    path, _ = gpu_trace
    bad = tmp_path / "t.json"
    bad.write_bytes(path.read_bytes()[:5000])
    assert cli_main(["kernels", str(bad)]) == 2
    assert "truncated" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- real GPU trace


@pytest.mark.skipif(not GPU_REAL.exists(), reason="GPU fixture not captured yet (gpu/torch_profile_capture.py)")
def test_real_gpu_trace_exact():
    events = load_events(GPU_REAL)
    trace = tt.load_torch_trace(GPU_REAL, cache=False)
    sel = tt.select(trace)
    assert_table_matches(tt.name_table(trace, sel), reference_table(events, DEVICE))
    lanes = {gpu_lane(e) for e in events if e.get("ph") == "X" and e.get("cat", "").lower() in DEVICE}
    assert len(lanes) >= 2
    idle, overlaps, pairs = reference_gaps(events, DEVICE, gpu_lane)
    gaps = tt.gap_analysis(trace, sel, top=None)
    got = dict(zip(zip(gaps["streams"]["device"].tolist(), gaps["streams"]["stream"].tolist()),
                   gaps["streams"]["idle_us"]))
    assert {k: pytest.approx(v / 1e3) for k, v in idle.items()} == got
    steps = tt.profiler_steps(trace)["number"].tolist()
    assert len(steps) >= 2
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    step_ev = next(e for e in events
                   if e.get("name") == f"ProfilerStep#{steps[1]}" and e.get("cat") != "gpu_user_annotation")
    s, t = ns(step_ev["ts"]), ns(step_ev["ts"]) + ns(step_ev["dur"])
    keep = lambda e: s <= launch.get(e["args"].get("correlation"), -1) <= t  # noqa: E731
    assert_table_matches(tt.name_table(trace, tt.select(trace, step=steps[1])), reference_table(events, DEVICE, keep))


# ------------------------------------------------------------------------------- parsers and workers


def _same_trace(a, b):
    for k in tt.COLUMNS:
        if k in ("name", "cat"):
            table_a, table_b = (a.names, b.names) if k == "name" else (a.cats, b.cats)
            assert [table_a[i] for i in a.columns[k]] == [table_b[i] for i in b.columns[k]], k
        elif k in ("pid", "tid"):
            assert [a.lane_label(int(v)) for v in a.columns[k]] == [b.lane_label(int(v)) for v in b.columns[k]]
        else:
            assert np.array_equal(a.columns[k], b.columns[k]), k
    assert a.meta["phases"] == b.meta["phases"] and a.meta["skipped"] == b.meta["skipped"]
    assert a.meta["n_elements"] == b.meta["n_elements"]


def test_msgspec_and_orjson_paths_agree(gpu_trace, tmp_path):
    pytest.importorskip("msgspec")
    path, events = gpu_trace
    # odd events: a string tid, an untimed X event and a float stream id send chunks to the orjson path
    odd = events + [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 5.0, "dur": 1.0,
                     "args": {"device": 0, "stream": 7.0}},
                    {"ph": "X", "cat": "kernel", "name": "k", "ts": 6.0, "args": {}}]
    odd_path = write_trace(tmp_path / "odd.json", odd)
    for p in (path, CPU_STEPS, CPU_SHAPES, odd_path):
        for chunk in (300, tt.CHUNK_BYTES):
            fast = tt.load_torch_trace(p, cache=False, chunk_bytes=chunk, parser="msgspec")
            assert fast.meta["parser"] == "msgspec+orjson"
            _same_trace(fast, tt.load_torch_trace(p, cache=False, chunk_bytes=chunk, parser="orjson"))


def test_parallel_workers_match_serial(tmp_path):
    events = synthetic_gpu_events(steps=8, launches=40)
    path = write_trace(tmp_path / "big.json", events)
    serial = tt.load_torch_trace(path, cache=False, parser="orjson")
    parallel = tt.load_torch_trace(path, cache=False, chunk_bytes=4096, workers=2)
    _same_trace(parallel, serial)
    # malformed data in the middle: the parallel path falls back and reports like the serial one
    text = path.read_text()
    at = text.index('"cbid": 211', len(text) // 2)
    bad = tmp_path / "bad.json"
    bad.write_text(text[:at] + '"cbid": 2x11' + text[at + len('"cbid": 211'):])
    with pytest.raises(DecodeError) as serial_err:
        tt.load_torch_trace(bad, cache=False, chunk_bytes=4096)
    with pytest.raises(DecodeError) as parallel_err:
        tt.load_torch_trace(bad, cache=False, chunk_bytes=4096, workers=2)
    assert str(parallel_err.value) == str(serial_err.value) and "invalid JSON" in str(serial_err.value)


# ------------------------------------------------------------------------------ link to ikp captures


def _capture(tmp_path, kernel):
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E

    b = BufferBuilder(1, 2, 8)
    b.put(0, 100, 1, B).put(0, 400, 1, E).put(0, 410, 2, B).put(0, 500, 2, E)
    b.put(1, 120, 1, B).put(1, 300, 1, E)
    return save_capture(tmp_path / "cap.npy", b.buf, {"events": {"1": "mainloop", "2": "epilogue"}}, kernel=kernel)


def test_cli_capture_regions_under_matching_kernel(gpu_trace, tmp_path):
    path, _ = gpu_trace
    cap = _capture(tmp_path, "vectorized_elementwise_kernel")
    out = tmp_path / "r.json"
    argv = ["kernels", str(path), "--capture", str(cap), "--format", "json", "-o", str(out), "--top", "0"]
    assert cli_main(argv) == 0
    capture = json.loads(out.read_text())["capture"]
    assert capture["matched_rows"] and all("vectorized_elementwise_kernel" in n for n in capture["matched_rows"])
    regions = {(r["group_name"], r["region"]): r for r in capture["regions"]}  # per (group, region)
    assert set(regions) == {("group_0", "mainloop"), ("group_0", "epilogue"), ("group_1", "mainloop")}
    assert regions["group_0", "mainloop"]["total_ns"] == 400 - 100
    assert regions["group_1", "mainloop"]["total_ns"] == 300 - 120
    assert regions["group_0", "epilogue"]["count"] == 1
    txt = tmp_path / "r.txt"
    assert cli_main(["kernels", str(path), "--capture", str(cap), "-o", str(txt)]) == 0
    assert "mainloop" in txt.read_text()


def test_cli_merge_needs_output(gpu_trace, tmp_path, capsys):
    path, _ = gpu_trace
    cap = _capture(tmp_path, "vectorized_elementwise_kernel")
    assert cli_main(["kernels", str(path), "--merge", str(cap)]) == 2
    assert "needs -o" in capsys.readouterr().err


def test_cli_merge_writes_the_merged_trace(gpu_trace, tmp_path):
    path, events = gpu_trace
    cap = _capture(tmp_path, "late_kernel_without_launch")  # a kernel that occurs once in the trace
    out = tmp_path / "merged.json"
    assert cli_main(["kernels", str(path), "--merge", str(cap), "-o", str(out), "--occurrence", "0"]) == 0
    doc = json.loads(out.read_text())
    assert doc["ikp_alignment"]["kernel_name"] == "late_kernel_without_launch"
    assert len(doc["traceEvents"]) > len(events)  # every profiler event plus the capture's regions


def test_text_report_keeps_brackets_in_names(gpu_trace, tmp_path):
    path, _ = gpu_trace
    out = tmp_path / "r.txt"
    assert cli_main(["kernels", str(path), "-o", str(out), "--top", "0"]) == 0
    assert 'gemm_kernel "quoted} {name" [x]' in out.read_text()  # not eaten as rich markup


def test_pair_and_kernel_tables_name_kernels_alike(gpu_trace):
    path, _ = gpu_trace
    trace = tt.load_torch_trace(path, cache=False)
    sel = tt.select(trace)
    kernels = tt.name_table(trace, sel, top=None)
    short_of = dict(zip(kernels["full_name"], kernels["name"]))
    pairs = tt.gap_analysis(trace, sel, top=None)["pairs"]
    for full, short in zip(pairs["prev_full"] + pairs["next_full"], pairs["prev"] + pairs["next"]):
        assert short_of[full] == short


def test_boundary_lookalikes_inside_strings(tmp_path, monkeypatch):
    """Names holding '}, {' fool the boundary guess; the exact scan must take over, same results."""
    events = [{"ph": "X", "cat": "kernel", "name": 'k}, {"ph": "X"}, {' + str(i % 3), "ts": float(i), "dur": 0.5,
               "args": {"device": 0, "stream": 7, "note": "a}, {b" * (i % 5)}} for i in range(300)]
    path = write_trace(tmp_path / "lookalike.json", events, indent=False)
    scans = []
    real_scan = chunks._scan_elements
    monkeypatch.setattr(chunks, "_scan_elements", lambda *a: scans.append(1) or real_scan(*a))
    for chunk in (50, 333, 4096):
        scans.clear()
        trace = tt.load_torch_trace(path, cache=False, chunk_bytes=chunk, parser="orjson")
        assert [trace.names[i] for i in trace.columns["name"]] == [e["name"] for e in events]
        assert trace.columns["ts_ns"].tolist() == [ns(e["ts"]) for e in events]
        assert len(scans) > 1  # the guess failed at least once and the exact scan took over
