"""ikp_cute.Pool on the host (a CPU torch buffer stands for the device's): the control block it starts with,
selections, `last` regions, reset, and captures read back through host_decode."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.core import wire
from host_decode.load.pool import kernel_counters, read_layout
from ikp_cute.testing.pool_model import PoolModel

torch = pytest.importorskip("torch")

from ikp_cute.pool import DEFAULT_POOL_BYTES, Pool  # noqa: E402

SIZE = wire.pool_control_bytes(16) + 64 * wire.POOL_UNIT_BYTES


def cpu_pool(**kw) -> Pool:
    return Pool.create(SIZE, device="cpu", max_kernels=16, **kw)


def words(pool: Pool) -> np.ndarray:
    return pool.read().words


def test_a_fresh_pool_reads_empty():
    pool = cpu_pool()
    layout = read_layout(words(pool))
    assert (layout.units, layout.top, layout.next, layout.max_kernels) == (64, 64, 0, 16)
    assert pool.captures() == []
    summary = pool.summary()
    assert summary["records"] == summary["lost_records"] == 0 and not summary["exhausted"]
    assert summary["bytes_needed"] == layout.control_bytes
    counters = kernel_counters(words(pool), layout)
    assert (counters["start"] == 1).all() and (counters["stop"] == 2).all()  # the default selection: launch 1
    assert (counters["loss_min_0"] == 0xFFFFFFFF).all()
    assert DEFAULT_POOL_BYTES <= 0.01 * 5.67e9


def test_the_control_block_matches_the_model_of_the_device():
    """The pool the host creates is the one ikp_cute/testing/pool_model.py starts from (the reader's tests)."""
    pool = cpu_pool()
    assert (words(pool) == PoolModel(SIZE, max_kernels=16).words).all()


def test_selections_write_the_window_words():
    pool = cpu_pool()
    for k, text in enumerate(["0", "3:6", "every=100", "none", "all", "7:"]):
        pool.select(k, text)
    c = kernel_counters(words(pool), read_layout(words(pool)))
    got = [tuple(int(c[f][k]) for f in ("start", "stop", "every", "mode")) for k in range(6)]
    assert got == [wire.pool_selection(t) for t in ["0", "3:6", "every=100", "none", "all", "7:"]]
    with pytest.raises(ValueError, match="launch selection 'often'"):
        pool.select(0, "often")
    with pytest.raises(ValueError, match="kernel id 16"):
        pool.select(16, "1")


def test_last_takes_its_region_from_the_top():
    pool = cpu_pool(last_bytes=16 * wire.POOL_UNIT_BYTES)
    pool.select(3, "last")
    c = kernel_counters(words(pool), read_layout(words(pool)))
    assert read_layout(words(pool)).top == 64 - 16
    assert (int(c["last_first"][3]), int(c["last_half"][3]), int(c["mode"][3])) == (48, 8, wire.POOL_LAST)
    # the shared area has handed out units the next region would cover: that region gets 0 units
    pool.buffer[wire.POOL_NEXT // 8] = 40
    pool.select(4, "last")
    c = kernel_counters(words(pool), read_layout(words(pool)))
    assert (int(c["last_first"][4]), int(c["last_half"][4])) == (32, 0)
    with pytest.raises(RuntimeError, match="units left for a region"):
        for k in range(5, 16):
            pool.select(k, "last")


def test_host_changes_are_device_ops(monkeypatch):
    """select() and reset() never read the pool back nor copy host memory to it: on a CUDA buffer they are
    stream-ordered device ops (no sync, capturable in a CUDA graph)."""
    pool = cpu_pool()
    pool.kernel_id("k0")
    seen = []
    for name in ("cpu", "numpy", "item", "tolist", "__int__", "__bool__", "copy_"):
        real = getattr(torch.Tensor, name)

        def probe(self, *a, _real=real, _name=name, **k):
            if _name != "copy_" or (a and isinstance(a[0], torch.Tensor) and a[0].device != self.device):
                seen.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, probe)
    pool.select(0, "3:6")
    pool.select(1, "last")
    pool.reset()
    assert seen == []
    pool.read()
    assert seen  # the probe works: read() copies the pool to the host


def test_reset_restores_selections_and_empties_counts():
    model = PoolModel(SIZE, max_kernels=16)
    model.select(0, "all")
    model.launch(0, {0: 40, 1: 3}, wpb=2)
    pool = cpu_pool()
    pool.kernel_id("k0")
    pool.select(0, "all")
    pool.buffer.copy_(torch.from_numpy(model.words.view(np.int64)))
    pool.buffer.view(torch.int32)[wire.pool_window(0) // 4 : wire.pool_window(0) // 4 + 2] = 0  # emptied
    assert len(pool.captures()) == 1
    pool.reset()
    assert pool.captures() == [] and read_layout(words(pool)).next == 0
    assert (words(pool) == cpu_pool_with_all_on_0().read().words).all()


def cpu_pool_with_all_on_0() -> Pool:
    pool = cpu_pool()
    pool.select(0, "all")
    return pool


def test_captures_carry_the_kernels_names_and_trace_meta():
    model = PoolModel(SIZE, max_kernels=16)
    model.select(1, "0")
    model.launch(1, {0: 5, 3: 9}, wpb=4)
    pool = cpu_pool()
    pool.kernel_id("first", meta={"pipeline_level": "waits"})
    pool.kernel_id("second", meta=lambda: {"events": {0: "wait_k"}, "pipeline_level": "signals"})
    pool.buffer.copy_(torch.from_numpy(model.words.view(np.int64)))
    (buf, meta), = pool.captures()
    assert meta["kernel"] == "second" and meta["events"] == {0: "wait_k"} and meta["pipeline_level"] == "signals"
    assert meta["launch_index"] == 0 and meta["pool"]["kernel_id"] == 1
    assert pool.kernels == {0: "first", 1: "second"}
    assert [r["name"] for r in pool.summary()["kernels"]] == ["first", "second"]


def test_kernel_ids_run_out_with_a_clear_error():
    pool = Pool.fake(0x7000_0000_0000, SIZE, max_kernels=16)
    assert [pool.kernel_id(f"k{i}") for i in range(16)] == list(range(16))
    with pytest.raises(RuntimeError, match="holds 16 kernels"):
        pool.kernel_id("one too many")
    with pytest.raises(RuntimeError, match="fake pool"):
        pool.read()
    pool.select(2, "last")  # host bookkeeping only: no buffer to write


def test_a_kernel_of_known_code_takes_its_id():
    """same_kernel: the code's first kernel keeps its id; a later kernel of the same code takes it and gives its
    own back, free for the next kernel_id (wherever it lies: kernels of one module settle in any order)."""
    pool = Pool.fake(0x7000_0000_0000, SIZE, max_kernels=5)
    a, b = pool.kernel_id("a", meta={"n": 0}), pool.kernel_id("b")
    assert (pool.same_kernel(a, "code a"), pool.same_kernel(b, "code b")) == (0, 1)
    again, c = pool.kernel_id("a", meta={"n": 1}), pool.kernel_id("c")
    assert pool.same_kernel(again, "code a") == 0 and pool.same_kernel(c, "code c") == 3
    assert pool.kernels == {0: "a", 1: "b", 3: "c"} and sorted(pool.kernel_meta()) == [0, 1, 3]
    assert pool.kernel_meta()[0]["n"] == 0
    assert pool.kernel_id("d") == 2 and pool.same_kernel(2, "code d") == 2
    assert pool.kernel_id("b") == 4 and pool.same_kernel(4, "code b") == 1  # the last id given back too
    assert pool.kernels == {0: "a", 1: "b", 2: "d", 3: "c"} and pool.kernel_id("e") == 4
    assert pool.settled == [0, 1, 0, 3, 2, 1]  # what each trace ended with (the recorder's ids per compile)
    with pytest.raises(ValueError, match="kernel id 7 was not handed out"):
        pool.same_kernel(7, "code x")
