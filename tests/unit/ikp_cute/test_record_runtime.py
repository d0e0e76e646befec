"""The recorder in one process (ikp_cute.record.runtime, hooks, builds) on the CPU, with the real recording pool
(ikp_cute.pool: ``Pool.fake`` in a dry run, a pool whose buffer is host memory otherwise, its launches made by
the host model of the device, tests/support/pool_device.py) and the small pipelined kernel of
ikp_cute.testing: every launch is counted once, as a launch of a traced build or untraced with its reason; a
build compiled before recording began is reported; each compile gets the pool kernel id its kernel ended the
trace with, one entry and one selection (issued to the pool's window) per id; compiles of one name to
different code are kernels apart, compiles to the same code one kernel, their launches counted together; the
recording
is written once, manifest last; stopping undoes every hook."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")
pytest.importorskip("torch")

from host_decode.load.recording import RecordConfig  # noqa: E402
from tests.support import pool_device  # noqa: E402

KERNEL = "kernel_cutlass_kernel_tensorptri32gmemo41__0"
SHORT = "tensorptri32gmemo41__0"  # ikp_cute.record.builds.short_name (the kernel's own name is `kernel`)


def compile_small(num_blocks: int = 4):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    out = make_fake_compact_tensor(Int32, (4,))
    return cute.compile(pk.launch, out, Int32(5), num_blocks), out


def recorder(tmp_path, **config):
    from ikp_cute.record.runtime import Recorder

    return Recorder(RecordConfig(out=str(tmp_path), **config), tag="p").start()


@pytest.fixture()
def cpu_pool(monkeypatch):
    pool_device.pools_on_the_cpu(monkeypatch)


def manifest(tmp_path) -> dict:
    return json.loads((tmp_path / "p" / "record.json").read_text())


def test_every_launch_counted_once_and_a_build_from_before_reported(tmp_path):
    from cutlass import Int32

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    before, out = compile_small()
    rec = recorder(tmp_path, dry_run="sm_90a")
    try:
        traced, _ = compile_small()
        for _ in range(3):
            assert traced(out, Int32(5)) is None  # the dry run skips the launch
        before(out, Int32(5))
        import numpy as np
        from cutlass.cute.runtime import from_dlpack

        host = from_dlpack(np.zeros(4, np.int32))  # never touched: the dry run skips the launch
        pk.launch(host, Int32(5), 4)  # a direct @cute.jit call: compiled, then run_compiled_program
        pk.launch(host, Int32(5), 4)  # traced again: the DSL's in-memory cache, or a compile of its own
    finally:
        rec.stop()
    m = manifest(tmp_path)
    compiled = [k for k in m["kernels"] if k["name"] == KERNEL]
    direct = [k for k in m["kernels"] if k["name"] == "kernel_cutlass_kernel_tensorptri32generico41__0"]
    assert all(k["traced"] and k["kernel_id"] is not None for k in m["kernels"])
    (compiled,) = compiled
    assert compiled["host_launches"] == 3 and compiled["selection"] == "1"
    assert compiled["trace"]["pipelines"] == ["ring", "side_named"]
    # the second direct call traces the same code, which the pool settles on the first trace's id: its module
    # hashes like the first one's and the DSL's cache answers it: one kernel, launched twice, traced again once
    assert [(k["compile"], k["host_launches"], k["retraced"], k["builds"]) for k in direct] == [(1, 2, 1, 1)]
    assert len({k["kernel_id"] for k in m["kernels"]}) == len(m["kernels"]) and m["retraced_ids"] == []
    (untraced,) = m["untraced"]
    assert untraced["launches"] == 1 and untraced["reason"].startswith("compiled before recording started")
    assert m["dry_run"]["launches_skipped"] == 6
    assert rec.guards.traced_hashes  # the @cute.jit entries of the DSL's cache, deleted at the end
    from cutlass.cutlass_dsl import CuTeDSL

    assert all(h not in CuTeDSL._get_dsl().jit_cache for h in rec.guards.traced_hashes)


def test_each_kernel_code_gets_one_id_and_selection(tmp_path, cpu_pool):
    """Two compiles of one kernel name a compile-time argument apart (as FA4's causal and not): two kernel ids,
    each with the selection --launches gives the name, written into the pool's window words. A third compile
    with the first one's arguments is the first one's code: the pool settles it on that id, and it is that
    kernel (one entry, two builds). On stopping, every window is closed."""
    rec = recorder(tmp_path, launches="tensorptr=every=3,default=none")
    try:
        first, _ = compile_small(4)
        compile_small(8)
        third, _ = compile_small(4)  # cute.compile compiles again: the same code
        pool = rec.pool
        entries = rec.kernels
        assert [(e["name"], e["compile"], e["kernel_id"], e["builds"]) for e in entries] == [
            (KERNEL, 1, 0, 2), (KERNEL, 2, 1, 1)]
        assert pool.kernels == {0: KERNEL, 1: KERNEL} and pool.settled == [0, 1, 0]
        assert pool_device.selections(pool) == {0: "every=3", 1: "every=3"}
        assert all(e["rule"] == "tensorptr" for e in entries)
        assert [e["arguments"] for e in entries] == [{"arg2": 4}, {"arg2": 8}]
        assert rec.builds.find(third).entries == [entries[0]] and rec.builds.find(first).entries == [entries[0]]
    finally:
        rec.stop()
    assert pool_device.selections(pool) == {0: "none", 1: "none"}
    labels = [k["label"] for k in manifest(tmp_path)["kernels"]]
    assert labels == [f"{SHORT} #1 (arg2=4)", f"{SHORT} #2 (arg2=8)"]


def test_compiles_alike_count_their_launches_on_one_entry(tmp_path, cpu_pool, monkeypatch):
    """Two builds of the same code (cute.compile called twice with the same arguments) run one kernel id: the
    device counts their launches together, the host counts them on the one entry, so the two agree; the
    selection is issued once (issued again, a `last` selection would empty the region its launches recorded
    into), and the summary says the compiles are alike and share the id."""
    import ikp_cute
    from ikp_cute.pool import Pool
    from ikp_cute.record.runtime import Recorder

    issued = []
    select = Pool.select
    monkeypatch.setattr(Pool, "select", lambda pool, k, sel: (issued.append((k, sel)), select(pool, k, sel))[1])
    with ikp_cute.record(out=tmp_path / "rec", launches="0:4", progress=False) as r:
        first, _ = compile_small()
        rec = Recorder.active
        second, _ = compile_small()
        (entry,) = rec.kernels
        for build, launches in ((first, 3), (second, 2), (first, 1)):
            for _ in range(launches):
                rec.on_launch(build)
                pool_device.launch(rec.pool, entry["kernel_id"])
    assert issued == [(0, "0:4"), (0, "none")]  # once, then closed at the end
    (kernel,) = r.summary["kernels"]
    assert (kernel["builds"], kernel["host_launches"], kernel["device_seen"]) == (2, 6, 6)
    assert kernel["recorded"] == 4 and not kernel["problems"] and kernel["launch_note"] is None
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert "compiled 2 times alike (the same code): the compiles share kernel id 0" in text
    assert not r.summary["untraced"]


def test_a_recording_with_the_device_modelled(tmp_path, cpu_pool):
    """Launches made by the device model on the pool's buffer: the device counts each compile's launches
    apart and records the ones its own selection picks; the manifest lists the captures the pool holds (one
    folder per compiled kernel), the pool's summary, and the host's launch counts, which agree with the
    device's. A traced build still held keeps the pool alive."""
    from ikp_cute.record.runtime import KEEPALIVE

    rec = recorder(tmp_path, launches="0:2")
    try:
        first, _ = compile_small(4)
        second, _ = compile_small(8)
        a, b = (e["kernel_id"] for e in rec.kernels)
        for _ in range(5):
            rec.on_launch(first)  # what the launch hook does before the launch runs
            pool_device.launch(rec.pool, a)
        for _ in range(3):
            rec.on_launch(second)
            pool_device.launch(rec.pool, b)
        assert pool_device.launches_counted(rec.pool, a) == 5 and pool_device.launches_counted(rec.pool, b) == 3
    finally:
        rec.stop()
    m = manifest(tmp_path)
    assert [(c["kernel_id"], c["launch_index"]) for c in m["captures"]] == [(a, 0), (a, 1), (b, 0), (b, 1)]
    assert [c["path"] for c in m["captures"]][::2] == [f"captures/{SHORT}-1/launch_000000.npy",
                                                       f"captures/{SHORT}-2/launch_000000.npy"]
    path = tmp_path / "p" / m["captures"][0]["path"]
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert path.exists() and sidecar["kernel"] == KERNEL and sidecar["pool"]["kernel_id"] == a
    rows = {r["id"]: r for r in m["pool"]["kernels"]}
    assert rows[a]["launches_seen"] == 5 and rows[b]["launches_seen"] == 3 and m["pool"]["lost_records"] == 0
    assert [k["host_launches"] for k in m["kernels"]] == [5, 3] and m["status"] == "complete"
    assert KEEPALIVE.get(id(first)) is rec.pool


def test_occurrences_number_launches_among_their_name(tmp_path, cpu_pool, monkeypatch):
    """Two compiles of one kernel name launched interleaved with a build of that name compiled before the
    recording (untraced, yet a slice of the name in a profiler trace): each launch of a traced kernel is noted
    with its occurrence among every host launch of the name, in host order; the process's launches per name
    are totalled, those made inside a CUDA graph capture counted apart."""
    from host_decode.load.recording import occurrence_of

    before, _ = compile_small(2)
    rec = recorder(tmp_path, launches="all")
    try:
        first, _ = compile_small(4)
        second, _ = compile_small(8)
        ids = {id(first): rec.kernels[0]["kernel_id"], id(second): rec.kernels[1]["kernel_id"]}
        for build in (first, second, before, first, second, first, second):
            rec.on_launch(build)
            if id(build) in ids:
                pool_device.launch(rec.pool, ids[id(build)])
        monkeypatch.setattr(rec, "capturing", lambda: True)
        rec.on_launch(first)  # inside a graph capture: its replays are slices Python does not see
        pool_device.launch(rec.pool, ids[id(first)])
    finally:
        rec.stop()
    m = manifest(tmp_path)
    one, two = m["kernels"]
    assert [occurrence_of(one["name_occurrences"], i) for i in range(4)] == [0, 3, 5, 7]
    assert [occurrence_of(two["name_occurrences"], i) for i in range(3)] == [1, 4, 6]
    assert occurrence_of(two["name_occurrences"], 3) is None and len(two["name_occurrences"]) <= 2
    assert m["name_launches"] == {KERNEL: 8} and m["name_graph_launches"] == {KERNEL: 1}
    assert [k["host_launches"] for k in m["kernels"]] == [4, 3] and m["untraced"][0]["launches"] == 1


def test_written_once_manifest_last_and_idle_processes_write_nothing(tmp_path, cpu_pool, monkeypatch):
    rec = recorder(tmp_path / "idle")
    rec.stop()
    assert not (tmp_path / "idle").exists()  # a helper process of the program: nothing to say
    rec = recorder(tmp_path)
    compile_small()
    monkeypatch.setattr(rec.pool, "captures", lambda contents=None: 1 / 0)
    first = rec.stop()
    assert first is not None and rec.write() is None and rec.stop() is None  # once
    m = manifest(tmp_path)
    assert m["status"] == "failed" and "ZeroDivisionError" in m["errors"][0]
    assert not [p for p in (tmp_path / "p").iterdir() if p.name.startswith(".")]  # no temporary left


def test_stopping_undoes_every_hook(tmp_path):
    from cutlass.base_dsl.jit_executor import JitCompiledFunction
    from cutlass.cutlass_dsl import CuTeDSL
    from cutlass.cutlass_dsl.cuda_jit_executor import CudaDialectJitCompiledFunction

    from ikp_cute.record.hooks import subclasses

    def methods():
        return {(c, n): c.__dict__.get(n) for c in subclasses(JitCompiledFunction) for n in ("__call__", "to")}

    plain = methods()
    dsl = CuTeDSL._get_dsl()
    rec = recorder(tmp_path, dry_run="sm_90a")
    compile_small()
    assert "generate_original_ir" in vars(dsl) and CudaDialectJitCompiledFunction.__dict__["__call__"] is not \
        plain[(CudaDialectJitCompiledFunction, "__call__")]
    rec.stop()
    assert methods() == plain and "generate_original_ir" not in vars(dsl) and "compile_and_cache" not in vars(dsl)
    import torch

    assert not torch.cuda.is_available()  # the dry run's stand-ins are gone too
    from ikp_cute.record.runtime import Recorder

    assert Recorder.active is None


def test_recordings_do_not_nest(tmp_path):
    rec = recorder(tmp_path / "a")
    try:
        with pytest.raises(RuntimeError, match="do not nest"):
            recorder(tmp_path / "b")
    finally:
        rec.stop()


def test_kernels_not_matched_and_binaries_loaded_are_reported(tmp_path):
    from ikp_cute.record.hooks import UntracedBinary

    rec = recorder(tmp_path, kernels="no_such_kernel", dry_run="sm_90a")
    try:
        compiled, out = compile_small()
        from cutlass import Int32

        compiled(out, Int32(5))
        loaded = rec.on_load(lambda *args: "ran", "/cache/abc.o:func")
        assert isinstance(loaded, UntracedBinary)
        assert loaded(1, 2) is None  # a dry run skips it too
        assert rec.pool.kernels == {}  # the tracer took no kernel id: the kernel compiled untouched
    finally:
        rec.stop()
    reasons = {u["reason"].split(" (")[0]: u["launches"] for u in manifest(tmp_path)["untraced"]}
    assert reasons == {"not matched by --kernels": 1,
                       "loaded from a compiled binary": 1}
    (kernel,) = manifest(tmp_path)["kernels"]
    assert not kernel["traced"] and kernel["kernel_id"] is None


def test_a_trace_the_dsl_cache_answers_is_counted_on_the_kernel_it_ended_on(tmp_path):
    """A trace no compile follows (the DSL's in-memory cache held its module hash): its kernels ended on the ids
    of the build the cache returns (the same code), whose entry counts it as traced again; a trace that ended on
    an id no entry holds (that id never runs) counts on the build the cache returned for its hash."""
    rec = recorder(tmp_path, dry_run="sm_90a")
    try:
        compiled, _ = compile_small()
        (entry,) = rec.kernels
        from ikp_cute.record.runtime import Trace

        rec.hooks.cached = lambda module_hash: compiled if module_hash == "the-hash" else None
        rec.traces.append(Trace(object(), "another-hash", [entry["kernel_id"]]))
        rec.settle_traces()
        assert entry["retraced"] == 1
        fresh = rec.pool.kernel_id(KERNEL)  # an id a trace ended on that no compile took
        rec.traces.append(Trace(object(), "the-hash", [fresh]))
        rec.settle_traces()
    finally:
        rec.stop()
    m = manifest(tmp_path)
    assert m["retraced_ids"] == [fresh] and m["kernels"][0]["retraced"] == 2 and len(m["kernels"]) == 1


def test_compiles_of_one_name_are_named_apart():
    from ikp_cute.record.builds import name_compiles, short_name

    taken: dict = {}
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_0", taken) == "row_sums_kernel"
    assert short_name("kernel_cutlass_kernel_flash_fwd_sm90Fwd_object_at__tensor0", taken) == "flash_fwd_sm90Fwd"
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_1", taken) == "row_sums_kernel_2"
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_0", taken) == "row_sums_kernel"
    assert short_name("../../etc/passwd", {}) == "etc_passwd"
    fwd = "kernel_cutlass_kernel_flash_fwd_sm90Fwd_object_at__tensor0"
    entries = [{"name": fwd, "compile": 1, "arguments": {"is_causal": False, "tile_m": 128, "arg3": 1.0}},
               {"name": "kernel_cutlass_gemm_kernel_tensor0_0", "compile": 1, "arguments": {"tile_m": 64}},
               {"name": fwd, "compile": 2, "arguments": {"is_causal": True, "tile_m": 128, "arg3": 1.0}}]
    name_compiles(entries)
    assert [(e["short"], e["label"]) for e in entries] == [
        ("flash_fwd_sm90Fwd-1", "flash_fwd_sm90Fwd #1 (is_causal=False)"),
        ("gemm_kernel", "gemm_kernel"),
        ("flash_fwd_sm90Fwd-2", "flash_fwd_sm90Fwd #2 (is_causal=True)")]


def test_a_selection_is_not_issued_into_a_cuda_graph_capture(tmp_path, cpu_pool, monkeypatch):
    """Pool.select is a stream-ordered device operation: issued while a graph is being captured it would be
    replayed with the graph. A kernel compiled during a capture gets its selection at the next launch outside
    one (until then its window is the pool's default, the --launches default)."""
    rec = recorder(tmp_path, launches="tensorptr=2,default=none")
    capturing = [True]
    monkeypatch.setattr(rec, "capturing", lambda: capturing[0])
    try:
        compiled, _ = compile_small()
        (entry,) = rec.kernels
        rec.on_launch(compiled)  # a launch inside the capture
        assert pool_device.selections(rec.pool)[entry["kernel_id"]] == "none"
        capturing[0] = False
        rec.on_launch(compiled)  # outside: issued now, before this launch runs
        assert pool_device.selections(rec.pool)[entry["kernel_id"]] == "2"
    finally:
        rec.stop()


def test_the_python_api_writes_the_same_folder(tmp_path, cpu_pool):
    import ikp_cute
    from ikp_cute.record.runtime import Recorder

    with ikp_cute.record(out=tmp_path / "rec", launches="0:3", progress=False) as r:
        compiled, _ = compile_small()
        rec = Recorder.active
        (entry,) = rec.kernels
        for _ in range(4):
            rec.on_launch(compiled)
            pool_device.launch(rec.pool, entry["kernel_id"])
    out = tmp_path / "rec"
    assert {"summary.txt", "index.html", "trace.pftrace", "record.json"} <= {p.name for p in out.iterdir()}
    (kernel,) = r.summary["kernels"]
    assert kernel["recorded"] == 3 and kernel["expected"] == 3 and kernel["device_seen"] == 4
    assert not kernel["problems"] and kernel["launch_note"] is None and Recorder.active is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]  # the staging folder became rec
    with pytest.raises(FileExistsError, match="force=True"):
        ikp_cute.record(out=out)
    import ikp_cute.record as imported  # the package or the facade's name, by import order: both record
    from ikp_cute.record import record as record_class

    assert isinstance(imported(out=tmp_path / "other"), record_class)
