"""The recording pool's device side played on the host, for CPU tests of `ikp record`: the real ikp_cute Pool
with its buffer in host memory (``Pool.create(device="cpu")``: every host op, select and reset included, runs
as on a GPU), and launches of its kernels made by the host model of the device
(ikp_cute/testing/pool_model.py) on that buffer's words: the launch count, the window decision, units and
records exactly as the device writes them."""

from __future__ import annotations

import numpy as np

from host_decode.load.pool import kernel_counters, read_layout, selection_text
from ikp_cute.testing.pool_model import PoolModel


def pools_on_the_cpu(monkeypatch) -> None:
    """Pool.create makes its buffer on the CPU (what `ikp record`'s recorder creates, here)."""
    from ikp_cute.pool import Pool

    create = Pool.create.__func__
    monkeypatch.setattr(Pool, "create", classmethod(lambda cls, *a, **kw: create(cls, *a, device="cpu", **kw)))


def words(pool) -> np.ndarray:
    return pool.buffer.numpy().view(np.uint64)


def launch(pool, kernel_id: int, lanes: int = 8, records: int = 3, warps_per_block: int = 8):
    """One launch of kernel `kernel_id` as the device runs it: counted, decided by its window, and when it
    records, `records` instants on each of `lanes` lanes. Returns what it recorded (None: a closed launch)."""
    model = PoolModel.over(words(pool), pool.max_kernels)
    return model.launch(kernel_id, {lane: records for lane in range(lanes)}, warps_per_block)


def selections(pool) -> dict[int, str]:
    """{kernel id: the selection its window words say now} for the kernels the pool handed out."""
    w = words(pool)
    counters = kernel_counters(w, read_layout(w))
    return {k: selection_text(*(int(counters[f][k]) for f in ("start", "stop", "every", "mode")))
            for k in pool.kernels}


def launches_counted(pool, kernel_id: int) -> int:
    w = words(pool)
    return int(kernel_counters(w, read_layout(w))["launches"][kernel_id])

