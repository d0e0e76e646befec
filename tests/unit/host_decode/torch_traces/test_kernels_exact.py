"""`ikp kernels` exactness on synthetic traces with the shapes of real public ones: negative integer
tids with parallel parsing, epoch-microsecond timestamps kept as exact integer ns, ProfilerSteps of the
older `Operator` category, memory operations apart from kernels. Each failed before the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from host_decode.cli import main
from host_decode.torch_traces import trace as tt

EPOCH_US = 1_731_000_000_000_000  # ~2024 in microseconds since the epoch: 1.7e18 ns


def kernel(name, ts, dur, stream=7, corr=-1, pid=0, tid=7, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": corr},
    }


def write(path, events, **head):
    path.write_text(json.dumps({"schemaVersion": 1, **head, "traceEvents": events}))
    return path


def test_negative_tids_parallel(tmp_path):
    """Real traces carry negative integer tids (and pids); -j 2 used to crash in _merge_part and
    tids <= -2 were taken as string codes."""
    events = []
    for i in range(3000):
        tid = [-5, -2, -1, 3, "stream 7 7"][i % 5]
        pid = [-3, 0, "Spans"][i % 3]
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i % 7}",
                "pid": pid,
                "tid": tid,
                "ts": 1000 + 10 * i,
                "dur": 5,
                "args": {"note": "x" * 40},
            }
        )
    path = write(tmp_path / "neg.json", events)
    serial = tt.load_torch_trace(path, cache=False, workers=1)
    parallel = tt.load_torch_trace(path, cache=False, workers=2, chunk_bytes=20_000)
    assert parallel.meta["workers"] == 2
    for t in (serial, parallel):
        assert [t.lane_label(v) for v in t.columns["tid"]] == [str(e["tid"]) for e in events]
        assert [t.lane_label(v) for v in t.columns["pid"]] == [str(e["pid"]) for e in events]
    assert sorted(set(serial.columns["tid"][serial.columns["tid"] > tt.LABEL_BASE].tolist())) == [-5, -2, -1, 3]
    assert main(["kernels", str(path), "-j", "2", "--category", "cpu_op", "--no-cache", "--format", "json"]) == 0


def test_epoch_timestamps_exact(tmp_path, capsys):
    """Back-to-back kernels 3 us apart at epoch magnitudes: exactly 3.000 us gaps and no overlaps
    (np.rint(ts * 1000.0) snapped to multiples of 256 ns: phantom overlaps, 3.144 us gaps)."""
    events, t = [], EPOCH_US
    for i in range(200):
        events.append(kernel(f"k{i % 3}", t, 7 if i % 2 else 10.5))
        t += (7 if i % 2 else 10.5) + 3
        events.append(kernel("back_to_back", t, 1))  # starts exactly where the previous one ends
        t += 1
    path = write(tmp_path / "epoch.json", events)
    trace = tt.load_torch_trace(path, cache=False)
    want = [int(round(e["ts"] * 2)) * 500 for e in events]  # ts is a multiple of 0.5 us: exact by hand
    assert trace.columns["ts_ns"].tolist() == want
    gaps = tt.gap_analysis(trace, tt.select(trace), bins=4, top=None)
    assert int(gaps["streams"]["overlaps"][0]) == 0
    pairs = {
        (p, n): (lo, hi)
        for p, n, lo, hi in zip(
            gaps["pairs"]["prev"], gaps["pairs"]["next"], gaps["pairs"]["min_us"], gaps["pairs"]["max_us"]
        )
    }
    assert {pairs[(f"k{i}", "back_to_back")] for i in range(3)} == {(3.0, 3.0)}
    assert pairs[("back_to_back", "k0")][0] == 0.0
    assert tt.us_to_ns(np.array([EPOCH_US + 0.25, 1.5e-3, 0.0])).tolist() == [EPOCH_US * 1000 + 250, 2, 0]


def test_alignment_profiler_time_exact_at_epoch_microseconds():
    from host_decode.analysis.align import profiler_ns

    assert profiler_ns({}, EPOCH_US + 13.5) == EPOCH_US * 1000 + 13_500  # float rounding gave ...13_568
    assert profiler_ns({"baseTimeNanoseconds": 1_000}, 2.25) == 3_250


def old_format_events():
    """Profiler traces before Kineto's cpu_op naming: categories Operator, Runtime, Kernel, Memcpy."""
    ev = []
    for step in (3, 4):
        t0 = 1000 + 1000 * (step - 3)
        ev.append(
            {
                "ph": "X",
                "cat": "Operator",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 900,
                "args": {},
            }
        )
        for j in range(2):
            corr = step * 10 + j
            ev.append(
                {
                    "ph": "X",
                    "cat": "Runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t0 + 10 + j,
                    "dur": 1,
                    "args": {"correlation": corr},
                }
            )
            # runs after the step's CPU span ended: belongs to the step by its launch
            ev.append(kernel(f"gemm{j}", t0 + 950 + 20 * j, 10, corr=corr, cat="Kernel"))
        ev.append(kernel("Memcpy HtoD", t0 + 995, 2, cat="Memcpy"))
    return ev


def test_step_on_older_operator_format(tmp_path, capsys):
    path = write(tmp_path / "old.json", old_format_events())
    trace = tt.load_torch_trace(path, cache=False)
    assert tt.profiler_steps(trace)["number"].tolist() == [3, 4]
    sel = tt.select(trace, step=4, categories=["kernel"])
    assert sorted(trace.names[i] for i in trace.columns["name"][sel.rows]) == ["gemm0", "gemm1"]
    assert sel.note["step_assignment"]["by_launch"] == 2
    assert main(["kernels", str(path), "--step", "3", "--no-cache", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["full_name"] for r in report["kernels"]] == ["gemm0", "gemm1"]


def test_memory_operations_apart_from_kernels(tmp_path, capsys):
    path = write(tmp_path / "old.json", old_format_events())
    assert main(["kernels", str(path), "--no-cache", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["kind"] for r in report["kernels"]} == {"kernel"}
    assert sum(r["time_share"] for r in report["kernels"]) == pytest.approx(1.0)
    assert [(r["name"], r["kind"], r["count"]) for r in report["memory"]] == [("Memcpy HtoD", "memcpy", 2)]
    assert report["devices"]["0"]["events"] == 6  # device time counts kernels and memory operations
    assert main(["kernels", str(path), "--no-cache", "--format", "csv", "--table", "memory"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("Memcpy HtoD,memcpy,2")
