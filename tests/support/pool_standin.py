"""A stand-in for ikp_cute.pool (the recording pool), for CPU tests of `ikp record` while the real pool is
built elsewhere: the same interface, a pure-Python model of the device side.

    Pool.create(size_bytes, device) / Pool.fake(address, size_bytes), .address, .size_bytes
    kernel_id(name), select(kernel_id, selection), read(), captures(contents), summary(contents)
    trace_pipelines(pool, level=..., kernels=regex)     (here: the tracer on a ProfileSpec at pool.address;
                                                          `kernels` is not applied: the real pool's job)

The device side is modelled by `launch(kernel_id)`: a kernel launch counted per kernel, recorded when the
kernel's selection selects it (host_decode.load.launches, the reference) and the pool has room for one
more capture (`capture_bytes` each), otherwise counted lost. A recorded launch's buffer is a template
capture (a committed one: `template=`), its sidecar the template's plus kernel, launch_index, kernel_id.

`install()` makes this module importable as ikp_cute.pool when the real one is absent (sys.modules), for
tests and for child processes (tests/support/standin_site/sitecustomize.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from host_decode.load.launches import parse_selection

DEFAULT_POOL_BYTES = 256 << 20
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "pipelines" / "fa4_sm90_signals.npy"


@dataclasses.dataclass
class PoolContents:
    seen: dict  # kernel id -> launches seen
    recorded: list  # (kernel id, launch index)
    lost: dict  # kernel id -> selected launches that found no room


class Pool:
    def __init__(self, address: int, size_bytes: int, device: str):
        self.address, self.size_bytes, self.device = int(address), int(size_bytes), device
        self.names: dict[str, int] = {}
        self.selections: dict[int, str] = {}
        self.seen: dict[int, int] = {}
        self.recorded: list[tuple[int, int]] = []
        self.lost: dict[int, int] = {}
        self.capture_bytes = TEMPLATE.stat().st_size
        self.template = TEMPLATE
        self.reads = 0

    @classmethod
    def create(cls, size_bytes: int = DEFAULT_POOL_BYTES, device: str = "cuda") -> Pool:
        return cls(0x7F0000000000, size_bytes, device)

    @classmethod
    def fake(cls, address: int, size_bytes: int) -> Pool:
        return cls(address, size_bytes, "fake")

    def kernel_id(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names))

    def select(self, kernel_id: int, selection: str) -> None:
        if kernel_id not in self.names.values():
            raise ValueError(f"unknown kernel id {kernel_id}")
        parse_selection(selection)  # the pool refuses what the grammar does not allow
        self.selections[kernel_id] = selection

    # the device side, modelled
    def launch(self, kernel_id: int) -> bool:
        """One launch of the kernel; True when it was recorded."""
        index = self.seen.get(kernel_id, 0)
        self.seen[kernel_id] = index + 1
        selection = parse_selection(self.selections.get(kernel_id, "none"))
        if selection.kind == "last":
            self.recorded = [r for r in self.recorded if r[0] != kernel_id]
            self.recorded.append((kernel_id, index))
            return True
        if not selection.selects(index, index + 1 + (1 << 30)):
            return False
        if (len(self.recorded) + 1) * self.capture_bytes > self.size_bytes:
            self.lost[kernel_id] = self.lost.get(kernel_id, 0) + 1
            return False
        self.recorded.append((kernel_id, index))
        return True

    def read(self) -> PoolContents:
        self.reads += 1
        return PoolContents(dict(self.seen), list(self.recorded), dict(self.lost))

    def captures(self, contents: PoolContents | None = None) -> list:
        contents = contents or self.read()
        buffer = np.load(self.template, allow_pickle=False)
        meta = json.loads(self.template.with_suffix(".json").read_text())
        meta.pop("format", None)
        by_id = {v: k for k, v in self.names.items()}
        return [(buffer.copy(), dict(meta, kernel=by_id[kid], launch_index=index, kernel_id=kid))
                for kid, index in contents.recorded]

    def summary(self, contents: PoolContents | None = None) -> dict:
        contents = contents or self.read()
        by_id = {v: k for k, v in self.names.items()}
        used = len(contents.recorded) * self.capture_bytes
        lost = sum(contents.lost.values())
        kernels = {by_id[kid]: {"kernel_id": kid, "selection": self.selections.get(kid, "none"),
                                "launches_seen": contents.seen.get(kid, 0),
                                "launches_recorded": sum(1 for k, _ in contents.recorded if k == kid),
                                "launches_lost": contents.lost.get(kid, 0)} for kid in by_id}
        return {"bytes": self.size_bytes, "used": used, "lost": lost,
                "needed": used + lost * self.capture_bytes, "kernels": kernels}


def trace_pipelines(pool: Pool, level: str = "waits", kernels=None, **options):
    """The tracer on a ProfileSpec whose buffer is at the pool's address (12 warps, 132 blocks)."""
    from ikp_cute import ProfileSpec
    from ikp_cute.pipelines import trace_pipelines as trace

    spec = ProfileSpec(num_groups=12, num_blocks=132, records_per_lane=256, warps_per_group=1)
    return trace(spec, level=level, address=pool.address, **options)


def install() -> object:
    """This module as ikp_cute.pool when the real one cannot be imported; returns the module in use."""
    try:
        import ikp_cute.pool as real

        return real
    except ImportError:
        module = sys.modules[__name__]
        sys.modules["ikp_cute.pool"] = module
        import ikp_cute

        ikp_cute.pool = module
        return module
