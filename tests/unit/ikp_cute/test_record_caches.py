"""A traced build and an untraced build of one kernel are never mixed up (ikp_cute/record/caches.py): the DSL's
module hash (its JIT caches' key) tells them apart, and FA4's and quack's own caches are set aside while
recording and given back after, so a compile inside returns a traced build and a compile after returns the
untraced one (never the traced one). CPU only: FA4 and quack compile on fake tensors for sm_90a."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
pytest.importorskip("cutlass")

from host_decode.load.recording import RecordConfig  # noqa: E402
from tests.support import pool_device  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def recorder(tmp_path, monkeypatch):
    """A recording into a pool whose buffer is host memory (the real pool; the programs' launches do not run
    here: FA4 launches nothing on fake tensors, quack's launch fails for want of a driver)."""
    from ikp_cute.record.runtime import Recorder

    pool_device.pools_on_the_cpu(monkeypatch)
    return Recorder(RecordConfig(out=str(tmp_path)), tag="p").start()


def test_traced_modules_hash_apart():
    """The DSL's in-memory and on-disk JIT caches are keyed on get_module_hash of the module after the
    trace-finalize hooks (where the tracer's IR pass runs): a module traced into the pool hashes apart from the
    untraced one, and the untraced one hashes the same before and after a recording."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.cutlass_dsl import CuTeDSL

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    dsl = CuTeDSL._get_dsl()
    hashes = []

    def last_hook(owner, module, name):  # registered after the tracer's IR pass: sees what the DSL hashes
        hashes.append(dsl.get_module_hash(module, name))

    out = make_fake_compact_tensor(Int32, (4,))
    with dsl.trace_finalize_hooks(last_hook):
        cute.compile(pk.launch, out, Int32(5), 4)
    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.pool import Pool

    pool = Pool.fake(0x7F0012340000, 1 << 20)
    with trace_pipelines(pool), dsl.trace_finalize_hooks(last_hook):
        cute.compile(pk.launch, out, Int32(5), 4)
    with dsl.trace_finalize_hooks(last_hook):
        cute.compile(pk.launch, out, Int32(5), 4)
    untraced, traced, after = hashes
    assert traced != untraced and after == untraced


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def test_fa4_compile_cache(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm90")
    import torch
    from flash_attn.cute import cache_utils, interface

    from ikp_cute.record.runtime import BUILDS

    def call():
        with fake_mode():
            q = torch.empty(1, 512, 4, 128, dtype=torch.bfloat16, device="cuda")
            interface.flash_attn_func(q, torch.empty_like(q), torch.empty_like(q))

    owner = interface._flash_attn_fwd
    monkeypatch.setattr(owner, "compile_cache", cache_utils.JITCache())  # this test's own, empty
    cache = owner.compile_cache
    call()
    before = dict(cache.cache)
    (untraced,) = before.values()
    rec = recorder(tmp_path, monkeypatch)
    try:
        call()
        assert owner.compile_cache is not cache  # set aside: FA4 sees a fresh cache while recording
        (traced,) = owner.compile_cache.cache.values()
        assert traced is not untraced and BUILDS.find(traced).traced
    finally:
        rec.stop()
    assert owner.compile_cache is cache and cache.cache == before  # given back: the traced build is gone
    call()  # after the recording: FA4's cache answers with the untraced build, nothing compiles
    assert cache.cache == before and BUILDS.find(untraced) is None


def test_quack_caches_and_its_disk_cache(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("quack.gemm_interface")
    sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
    import compile_cpu as cc
    import quack.cache
    import torch
    from quack import gemm_interface

    from ikp_cute.record.runtime import BUILDS

    monkeypatch.setattr(quack.cache, "CACHE_DIR", str(tmp_path / "quack_cache"))
    monkeypatch.setattr(quack.cache, "CACHE_ENABLED", True)  # quack's default: .o files on disk
    compiled = []
    import quack.gemm_tvm_ffi_utils as qt

    def call():
        with cc.fake_quack_device(), cc.capturing_compiles(qt) as seen, fake_mode():
            a = torch.empty(1024, 512, dtype=torch.bfloat16, device="cuda")
            b = torch.empty(512, 1024, dtype=torch.bfloat16, device="cuda")
            try:
                gemm_interface.gemm(a, b, tuned=False)
            except RuntimeError as e:  # the launch, on a machine without a driver
                assert "driver" in str(e).lower() or "cuda" in str(e).lower(), e
        compiled.append(list(seen))

    call()
    dicts = cc.quack_private_cache_dicts()
    before = [dict(d) for d in dicts]
    disk_before = sorted(p.name for p in (tmp_path / "quack_cache").rglob("*.o"))
    assert disk_before  # quack exported the untraced build (the path a traced one must never take)
    rec = recorder(tmp_path / "rec", monkeypatch)
    try:
        call()
        assert quack.cache.CACHE_ENABLED is False
        (traced,) = compiled[-1]  # compiled again, traced: no cache handed the untraced build back
        assert BUILDS.find(traced).traced
    finally:
        rec.stop()
    assert quack.cache.CACHE_ENABLED is True
    assert sorted(p.name for p in (tmp_path / "quack_cache").rglob("*.o")) == disk_before  # nothing traced on disk
    assert [dict(d) for d in dicts] == before
    call()
    assert compiled[-1] == []  # after: the untraced build from quack's cache, no compile
