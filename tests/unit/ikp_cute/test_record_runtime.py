"""The recorder in one process (ikp_cute.record.runtime, hooks, builds) on the CPU, with the stand-in pool
(tests/support/pool_standin.py) and the small pipelined kernel of ikp_cute.testing: every launch is counted
once, as a launch of a traced build or untraced with its reason; a build compiled before recording began is
reported; the kernel's selection reaches the pool; the recording is written once, manifest last; stopping
undoes every hook."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")

from host_decode.load.recording import RecordConfig  # noqa: E402
from tests.support import pool_standin  # noqa: E402


def compile_small():
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    out = make_fake_compact_tensor(Int32, (4,))
    return cute.compile(pk.launch, out, Int32(5), 4), out


def recorder(tmp_path, **config):
    from ikp_cute.record.runtime import Recorder

    return Recorder(RecordConfig(out=str(tmp_path), **config), tag="p", pool_api=pool_standin).start()


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
        pk.launch(host, Int32(5), 4)  # the DSL's in-memory JIT cache: the same traced build
    finally:
        rec.stop()
    m = manifest(tmp_path)
    by_name = {k["name"]: k for k in m["kernels"]}
    assert all(k["traced"] for k in by_name.values())
    compiled, direct = by_name["kernel_cutlass_kernel_tensorptri32gmemo41__0"], by_name[
        "kernel_cutlass_kernel_tensorptri32generico41__0"]  # a host tensor: a generic pointer
    assert compiled["host_launches"] == 3 and direct["host_launches"] == 2
    # each traced trace of a kernel hashes apart (the IR pass numbers its barrier sites across compiles), so
    # the second direct call compiled again: test_record_caches.py::test_traced_modules_hash_apart
    assert direct["compiles"] == 2
    assert compiled["selection"] == "1" and compiled["trace"]["pipelines"] == ["ring", "side_named"]
    (untraced,) = m["untraced"]
    assert untraced["launches"] == 1 and untraced["reason"].startswith("compiled before recording started")
    assert m["dry_run"]["launches_skipped"] == 6
    assert rec.guards.traced_hashes  # the @cute.jit entry of the DSL's cache, deleted at the end
    from cutlass.cutlass_dsl import CuTeDSL

    assert all(h not in CuTeDSL._get_dsl().jit_cache for h in rec.guards.traced_hashes)


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


def test_selection_reaches_the_pool_and_windows_close_at_the_end(tmp_path):
    rec = recorder(tmp_path, launches="tensorptr=every=3,default=none")
    try:
        compile_small()
        (entry,) = rec.kernels.values()
        pool = rec.pool
        assert pool.selections[entry["kernel_id"]] == "every=3" and entry["rule"] == "tensorptr"
    finally:
        rec.stop()
    assert pool.selections[entry["kernel_id"]] == "none"


def test_a_recording_with_the_device_modelled(tmp_path):
    """On a GPU the pool counts launches on the device; here the stand-in models it (pool.launch): the
    manifest lists the captures the pool holds, the pool's accounting, and each capture is saved with its
    sidecar. A traced build still held keeps the pool alive."""
    from ikp_cute.record.runtime import KEEPALIVE

    rec = recorder(tmp_path, launches="0:2")
    try:
        compiled, _ = compile_small()
        (entry,) = rec.kernels.values()
        for _ in range(5):
            rec.on_launch(compiled)  # what the launch hook does before the launch runs
            rec.pool.launch(entry["kernel_id"])
    finally:
        rec.stop()
    m = manifest(tmp_path)
    assert [c["launch_index"] for c in m["captures"]] == [0, 1]
    path = tmp_path / "p" / m["captures"][0]["path"]
    assert path.exists() and json.loads(path.with_suffix(".json").read_text())["kernel"] == entry["name"]
    assert m["pool"]["kernels"][entry["name"]]["launches_seen"] == 5
    assert m["kernels"][0]["host_launches"] == 5 and m["status"] == "complete"
    assert KEEPALIVE.get(id(compiled)) is rec.pool


def test_written_once_manifest_last_and_idle_processes_write_nothing(tmp_path, monkeypatch):
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
    finally:
        rec.stop()
    reasons = {u["reason"].split(" (")[0]: u["launches"] for u in manifest(tmp_path)["untraced"]}
    assert reasons == {"not matched by --kernels": 1,
                       "loaded from a compiled binary": 1}
    assert not manifest(tmp_path)["kernels"][0]["traced"]


def test_short_names():
    from ikp_cute.record.runtime import short_name

    taken: dict = {}
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_0", taken) == "row_sums_kernel"
    assert short_name("kernel_cutlass_kernel_flash_fwd_sm90Fwd_object_at__tensor0", taken) == "flash_fwd_sm90Fwd"
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_1", taken) == "row_sums_kernel_2"
    assert short_name("kernel_cutlass_row_sums_kernel_tensorptrf32gmem_0", taken) == "row_sums_kernel"
    assert short_name("../../etc/passwd", {}) == "etc_passwd"


def test_a_selection_is_not_issued_into_a_cuda_graph_capture(tmp_path, monkeypatch):
    """Pool.select is a stream-ordered device operation: issued while a graph is being captured it would be
    replayed with the graph. A kernel compiled during a capture gets its selection at the next launch outside
    one."""
    rec = recorder(tmp_path, launches="2")
    capturing = [True]
    monkeypatch.setattr(rec, "capturing", lambda: capturing[0])
    try:
        compiled, _ = compile_small()
        (entry,) = rec.kernels.values()
        rec.on_launch(compiled)  # a launch inside the capture
        assert entry["kernel_id"] not in rec.pool.selections
        capturing[0] = False
        rec.on_launch(compiled)  # outside: issued now, before this launch runs
        assert rec.pool.selections[entry["kernel_id"]] == "2"
    finally:
        rec.stop()


def test_the_python_api_writes_the_same_folder(tmp_path):
    import ikp_cute
    from ikp_cute.record.runtime import Recorder

    with ikp_cute.record(out=tmp_path / "rec", launches="0:3", pool_api=pool_standin, progress=False) as r:
        compiled, _ = compile_small()
        rec = Recorder.active
        (entry,) = rec.kernels.values()
        for _ in range(4):
            rec.on_launch(compiled)
            rec.pool.launch(entry["kernel_id"])
    out = tmp_path / "rec"
    assert {"summary.txt", "index.html", "trace.pftrace", "record.json"} <= {p.name for p in out.iterdir()}
    assert r.summary["kernels"][0]["recorded"] == 3 and Recorder.active is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]  # the staging folder became rec
    with pytest.raises(FileExistsError, match="force=True"):
        ikp_cute.record(out=out)
    import ikp_cute.record as imported  # the package or the facade's name, by import order: both record
    from ikp_cute.record import record as record_class

    assert isinstance(imported(out=tmp_path / "other"), record_class)
