"""Flag records on a GPU (skipped without CUDA; `python -m pytest -q tests/gpu/test_flags_gpu.py` on the GPU
machine): ikp_cute/testing/kernels/flags_kernel.py traced (block 0 signals, block 1 waits), decoded with nothing
lost; the payloads name the flag's address and the wait's expected value, and host_decode's flag reading matches
the wait to the signal; a wait that does not fit in its lane stores nothing and is counted whole; the same kernel
traced into a recording pool records the same; the clock's offset is measured."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def run(torch, tmp_path, style="helper", level="all", records_per_lane=32):
    """One launch of the flags kernel traced at `level`: (flags tensor, decoded capture)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from host_decode.load.capture import load_capture
    from ikp_cute.pipelines import session_for, trace_pipelines
    from ikp_cute.testing.kernels import flags_kernel as fk

    flags = torch.zeros(4, dtype=torch.int32, device="cuda")
    view = from_dlpack(flags, assumed_align=16)
    session = session_for(2, fk.THREADS // 32, records_per_lane, kernel="flags", device="cuda")
    trace = trace_pipelines(session, level)
    with trace:
        compiled = cute.compile(fk.launch, view, Int32(1), Int32(5), style)
    with session.zeroed_then_synced():
        compiled(view, Int32(1), Int32(5))
    path = trace.save(session, tmp_path / "flags.npy")
    return flags, load_capture(path)


@pytest.mark.parametrize("style", ["helper", "library"])
def test_signal_and_wait_records(torch, tmp_path, style):
    from host_decode.core import wire

    flags, trace = run(torch, tmp_path, style)
    assert flags.tolist()[:2] == [1, 1]  # signalled once; block 1 went past its wait
    assert trace.loss.lost == 0 and trace.loss.totals["payload_orphan"] == 0
    sites = {f["id"]: f for f in trace.meta["flags"]}
    p = trace.payloads
    addr = (flags.data_ptr() >> wire.FLAG_ADDR_SHIFT) & 0xFFFF_FFFF
    assert set(p["value"][p["payload"] == wire.FLAG_ADDR_EVENT_ID].tolist()) == {addr}
    signal = p[(p["kind"] == 2) & (p["payload"] == wire.FLAG_ADDR_EVENT_ID)]
    wait = p[(p["kind"] == 1) & (p["payload"] == wire.FLAG_ADDR_EVENT_ID)]
    assert signal.size == 1 and wait.size == 1 and signal["block"][0] == 0 and wait["block"][0] == 1
    assert sites[int(signal["event"][0])]["kind"] == "signal" and sites[int(wait["event"][0])]["kind"] == "wait"
    assert not ((p["kind"] == 2) & (p["payload"] == wire.FLAG_VALUE_EVENT_ID)).any()  # one lane: no amount
    expected = p[(p["kind"] == 1) & (p["payload"] == wire.FLAG_VALUE_EVENT_ID)]
    assert expected["value"].tolist() == [1]  # the expected value, a runtime Int32
    assert wait["ts_ns"][0] + wire.TIMER_STEP_NS >= signal["ts_ns"][0]  # the wait ended after the signal
    assert wait["begin_ns"][0] <= wait["ts_ns"][0]
    assert isinstance(trace.meta["clock_offset_ns"], int) and 0 < trace.meta["clock_error_ns"] < 10_000_000
    check_flag_reading(trace)


def check_flag_reading(trace) -> None:
    """host_decode's reading of the records: one signal, one wait, nothing malformed, the wait matched."""
    from host_decode.analysis.flag_paths import analyze_flags

    fa = analyze_flags(trace)
    assert not any(fa.events.problems.values()), fa.events.problems
    t = fa.events.table
    assert (t.kind == 0).sum() == 1 and (t.kind == 1).sum() == 1
    assert fa.match.counts()["matched"] == 1


def test_signal_and_wait_traced_into_a_pool(torch):
    """The flags kernel traced into a Pool (level "all"), launched twice: launch 1 (the default selection) is read
    back as one capture whose signal and wait carry their payloads, matched by the host."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from host_decode.core import wire
    from host_decode.core.decoder import decode
    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.pool import Pool
    from ikp_cute.testing.kernels import flags_kernel as fk

    flags = torch.zeros(4, dtype=torch.int32, device="cuda")
    view = from_dlpack(flags, assumed_align=16)
    pool = Pool.create(1 << 20)
    trace = trace_pipelines(pool, "all")
    with trace:
        compiled = cute.compile(fk.launch, view, Int32(1), Int32(5), "helper")
    for _ in range(2):
        flags.zero_()
        compiled(view, Int32(1), Int32(5))
    torch.cuda.synchronize()
    captures = pool.captures()
    assert [meta["launch_index"] for _, meta in captures] == [1]
    buf, meta = captures[0]
    got = decode(buf, names=meta, meta=meta)
    assert got.loss.lost == 0 and got.loss.totals["payload_orphan"] == 0
    p = got.payloads
    addr = (flags.data_ptr() >> wire.FLAG_ADDR_SHIFT) & 0xFFFF_FFFF
    assert set(p["value"][p["payload"] == wire.FLAG_ADDR_EVENT_ID].tolist()) == {addr}
    assert "clock_offset_ns" in meta and len(meta["flags"]) == 2
    check_flag_reading(got)


def test_a_wait_that_does_not_fit_is_dropped_whole(torch, tmp_path):
    """Three free slots per lane: block 1's wait (BEGIN, END, FLAG_ADDR, FLAG_VALUE) needs four: none is stored,
    all four are counted in the lane's DROPPED record; block 0's signal (two slots) fits."""
    _, trace = run(torch, tmp_path, records_per_lane=7)
    lanes = {int(r["block"]): int(r["dropped"]) for r in trace.lanes if r["group"] == 0}
    assert lanes == {0: 0, 1: 4}
    assert trace.spans.size == 0 and trace.loss.totals["payload_orphan"] == 0
    assert (trace.payloads["kind"] == 2).sum() == 1  # the signal's FLAG_ADDR only


def test_measure_offset(torch):
    import time

    from ikp_cute.clock import measure_offset

    offset, error = measure_offset(torch.cuda.current_device(), samples=50)
    again, error2 = measure_offset(torch.cuda.current_device(), samples=50)
    assert 0 < error < 1_000_000 and 0 < error2 < 1_000_000
    assert abs(offset - again) <= error + error2 + 1_000_000  # drift over a few ms stays far below 1 ms
    assert abs(offset) < time.time_ns()  # a host time minus a GPU reading, not a sum
