"""Where a recorded flag address lies, and the clocks (ikp_cute/flags.py, ikp_cute/clock.py, PipelineTrace.save):
registered buffers and symmetric-memory copies become the sidecar's `flag_buffers`, the clock's offset estimate
keeps the narrowest bracket, and a flag trace's save writes keys the sidecar schema accepts."""

from __future__ import annotations

import json
import os
import types

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
torch = pytest.importorskip("torch")

import ikp_cute.flags as flags  # noqa: E402
from host_decode.core import wire  # noqa: E402


@pytest.fixture(autouse=True)
def empty_registry():
    flags.clear()
    yield
    flags.clear()


def test_register_buffer_names_a_local_buffer():
    ready = torch.zeros(16, dtype=torch.int32)
    entry = flags.register_buffer("ready", ready)
    assert entry == {"name": "ready", "owner_rank": 0, "base": ready.data_ptr(), "bytes": 64, "elem_bytes": 4}
    again = flags.register_buffer("ready", ready[4:], owner_rank=3)
    assert flags.registered() == [entry, again] and again["base"] == ready.data_ptr() + 16
    flags.register_buffer("ready", ready)  # the same (name, owner): replaced, not doubled
    assert flags.registered() == [again, entry]
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        flags.register_buffer("", ready)


def test_register_symmetric_names_every_ranks_copy():
    """The handle's buffer_ptrs are the ranks' allocations in this process; the tensor sits at the same offset
    in each; rank 1's view of a 2-rank buffer."""
    backing = torch.zeros(64, dtype=torch.int32)
    tensor = backing[8:24]
    handle = types.SimpleNamespace(buffer_ptrs=[0x7000_0000, backing.data_ptr()], rank=1)
    entries = flags.register_symmetric("flags", tensor, handle)
    assert [(e["owner_rank"], e["base"]) for e in entries] == [(0, 0x7000_0000 + 32), (1, tensor.data_ptr())]
    assert all(e["bytes"] == 64 and e["elem_bytes"] == 4 and e["name"] == "flags" for e in entries)


def test_watching_symmetric_memory_registers_rendezvoused_buffers(monkeypatch):
    symm = pytest.importorskip("torch.distributed._symmetric_memory")
    tensors = [torch.zeros(8, dtype=torch.int32), torch.zeros(4, dtype=torch.int64)]
    handles = {id(t): types.SimpleNamespace(buffer_ptrs=[t.data_ptr(), 0x9000_0000 + 0x1000 * k], rank=0)
               for k, t in enumerate(tensors)}
    monkeypatch.setattr(symm, "rendezvous", lambda t, group=None: handles[id(t)])
    monkeypatch.setitem(flags._WATCH, "installed", False)
    assert flags.watch_symmetric_memory() and flags.watch_symmetric_memory()  # idempotent
    for t in tensors:
        assert symm.rendezvous(t, "g") is handles[id(t)]
    names = [(e["name"], e["owner_rank"], e["elem_bytes"]) for e in flags.registered()]
    assert names == [("symm0", 0, 4), ("symm0", 1, 4), ("symm1", 0, 8), ("symm1", 1, 8)]
    flags.register_symmetric("a_full", tensors[1], handles[id(tensors[1])])  # a user's name replaces symm1
    assert [e["name"] for e in flags.registered()] == ["symm0", "symm0", "a_full", "a_full"]


def test_best_bracket_keeps_the_narrowest():
    from ikp_cute.clock import best_bracket

    samples = [(1_000, 5_000_700, 3_000), (10_000, 5_010_400, 10_600), (20_000, 5_020_000, 29_000)]
    offset, error = best_bracket(samples)
    assert (offset, error) == (10_300 - 5_010_400, 300)  # midpoint of the 600 ns bracket minus its reading
    with pytest.raises(ValueError, match="ends before it begins"):
        best_bracket([(5, 1, 4)])
    with pytest.raises(ValueError, match="no samples"):
        best_bracket([])


def test_the_clock_probe_reads_the_timer_once():
    from cutlass import Int64, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.clock import launch_read
    from ikp_cute.testing.sass import keep_options

    ptx = cute.compile(launch_read, make_fake_compact_tensor(Int64, (1,)), options=keep_options()).__ptx__
    assert ptx.count("%globaltimer") == 1 and ptx.count("st.global.b64") == 1


def test_a_flag_trace_saves_the_flag_keys(tmp_path):
    """PipelineTrace.save of a trace with flag sites: `flags`, `flag_buffers`, the clock keys (given here: they
    are measured on a GPU), all accepted by the sidecar schema and read back."""
    import host_decode as hd
    from ikp_cute.pipelines import session_for, trace_pipelines

    session = session_for(2, 2, 16, kernel="toy", device="cpu")
    trace = trace_pipelines(session, address=0x10000)
    trace.catalog.flags.register("signal", "k.py:3", op="red_add1", order="release", scope="gpu", update="add",
                                 value=1)
    trace.catalog.flags.register("wait", "k.py:9", op="ikp_cute.flags.wait", order="acquire", scope="sys", cmp="ge",
                                 expected="recorded")
    flags.register_buffer("ready", torch.zeros(4, dtype=torch.int32))
    session.buffer[0] = int(wire.pack_header(2, 2))
    session.buffer[1] = int(wire.pack_record(100, wire.make_tag(0, 0, int(wire.EventType.INSTANT))))
    clock = {"clock_offset_ns": 17, "clock_error_ns": 3, "clock_reference": "host CLOCK_REALTIME of test"}
    path = trace.save(session, tmp_path / "f.npy", clock=False, **clock)
    side = json.loads(path.with_suffix(".json").read_text())
    assert [f["kind"] for f in side["flags"]] == ["signal", "wait"] and side["flag_buffers"][0]["name"] == "ready"
    assert {k: side[k] for k in clock} == clock
    assert hd.load_capture(path).meta["flags"] == side["flags"]
