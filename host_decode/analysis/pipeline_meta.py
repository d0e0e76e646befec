"""Pipeline metadata: what a capture's sidecar declares about its pipelines and named barriers (keys
``pipelines`` / ``barriers``, written by the device side's tracing; docs/pipeline_waits.md shows them), read
into Channels. Only this metadata is used to find pipelines, ops and stages; event names are never parsed.
has_pipelines asks whether there is any, cheaply, before the analysis (host_decode.analysis.pipelines)
is imported.

* a *channel* is one pipeline or one named barrier id; its ops' event ids are the first id of each traced
  op (acquire / wait regions, commit / release instants; bar_sync regions, bar_arrive instants), stage s
  being id + s;
* a *unit* is the set of blocks that share the channel's barriers: the block itself, or for a pipeline
  whose metadata says ``"cluster": n`` or ``[x, y, z]`` with more than one CTA (and no ``"scope": "cta"``)
  its cluster. Blocks map to clusters through the sidecar's ``grid`` ([gx, gy, gz], block = x + y*gx +
  z*gx*gy) when given, else as consecutive runs of n blocks (units_of).

Invariants, and the tests that guard them: a malformed entry is a ValueError naming the entry and the key
(tests/unit/host_decode/analysis/test_waits.py::test_bad_metadata_names_the_entry,
::test_malformed_pipeline_metadata_is_refused_by_name, ::test_malformed_barrier_metadata_is_refused_by_name); the
metadata survives a capture's save and load (::test_sidecar_round_trip); cluster units follow the grid
(::test_two_cta_cluster).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.model import Trace, is_json_int

PIPELINE_OPS = ("acquire", "wait", "commit", "release")
IGNORED_OPS = ("poll",)  # level "all": every try_wait as an instant; not a wait, not a signal
RELEASED_BY = ("", "tma_store")  # sidecar `released_by` of a pipeline: what frees a stage untraced
NUM_NAMED_BARRIERS = 16  # hardware named barriers per CTA (bar.sync ids 0..15)


def has_pipelines(trace: Trace) -> bool:
    """Whether the sidecar declares any pipeline (traced, or seen with no traced op) or named barrier."""
    meta = trace.meta or {}
    return bool(meta.get("pipelines") or meta.get("barriers") or meta.get("pipelines_untraced"))


@dataclasses.dataclass(frozen=True)
class Channel:
    """One traced pipeline or one named barrier id, with the event ids of its ops."""

    name: str
    kind: str  # "pipeline" | "barrier"
    num_stages: int  # 1 for a barrier
    ids: dict  # op -> first event id (stage s is id + s); barrier: "bar_sync" / "bar_arrive" -> id
    cluster_shape: tuple = (1, 1, 1)  # CTAs sharing the barriers; (1, 1, 1): block-local
    cls: str = ""
    site: str = ""
    barrier_id: int = -1  # named barrier id (bar.sync id) of a barrier channel
    released_by: str = ""  # "tma_store": the TMA unit frees its stages (no traced release)
    first_wait_passes: tuple = ()  # stages whose first wait passes (PipelineOrder's group 0)
    op_type: str = ""  # the producer agent of its full barriers (cutlass PipelineOp name: TmaLoad, TCGen05Mma, ...)
    tx_bytes: int | None = None  # bytes a producer's arrive-expect-tx announces per stage (TMA pipelines)

    @property
    def cluster_size(self) -> int:
        return math.prod(self.cluster_shape)


def channels_of(meta: dict, cluster: Any = None) -> list[Channel]:
    """The pipelines and named barriers a sidecar declares; ValueError naming the entry if malformed.
    `cluster` (n or [x, y, z]): the cluster of every pipeline whose entry says neither cluster nor scope
    (a capture whose device side did not know the launch's cluster shape)."""
    out: list[Channel] = []
    pipelines = meta.get("pipelines") or []
    if not isinstance(pipelines, list):
        raise ValueError(f"sidecar 'pipelines' must be a list, got {type(pipelines).__name__}")
    names: set[str] = set()
    for i, p in enumerate(pipelines):
        where = f"sidecar pipelines[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise ValueError(f"{where}: want an object with a 'name' string, got {p!r:.120}")
        if p["name"] in names:
            raise ValueError(f"{where}: a second pipeline named {p['name']!r} (names must be distinct)")
        names.add(p["name"])
        n, ids = p.get("num_stages"), p.get("ids")
        if not is_json_int(n) or n < 1:
            raise ValueError(f"{where} ({p['name']}): num_stages must be an integer >= 1, got {n!r}")
        if not isinstance(ids, dict) or not ids or set(ids) - set(PIPELINE_OPS + IGNORED_OPS):
            raise ValueError(
                f"{where} ({p['name']}): ids must map some of {PIPELINE_OPS + IGNORED_OPS} to event ids, got {ids!r}"
            )
        for op, base in ids.items():
            if not is_json_int(base):
                raise ValueError(f"{where} ({p['name']}): ids.{op} must be an integer event id, got {base!r}")
            if base < 0 or base + n - 1 > wire.MAX_USER_EVENT_ID:
                raise ValueError(
                    f"{where} ({p['name']}): ids.{op}={base!r} does not leave {n} stage ids "
                    f"in 0..{wire.MAX_USER_EVENT_ID}"
                )
        if p.get("scope", "cluster") not in ("cluster", "cta"):
            raise ValueError(f"{where} ({p['name']}): scope must be 'cluster' or 'cta', got {p.get('scope')!r}")
        given = p.get("cluster", cluster if "scope" not in p else None)
        shape = _cluster_shape(given, where) if p.get("scope", "cluster") != "cta" else (1, 1, 1)
        released_by = p.get("released_by") or ""
        if released_by not in RELEASED_BY:
            raise ValueError(
                f"{where} ({p['name']}): released_by must be one of {RELEASED_BY[1:]}, got {released_by!r}"
            )
        passes = p.get("first_wait_passes") or []
        if not isinstance(passes, list) or not all(isinstance(s, int) and 0 <= s < n for s in passes):
            raise ValueError(
                f"{where} ({p['name']}): first_wait_passes must list stages in 0..{n - 1}, got {passes!r:.120}"
            )
        tx = p.get("tx_bytes")
        if tx is not None and not (is_json_int(tx) and tx >= 0):
            raise ValueError(f"{where} ({p['name']}): tx_bytes must be an integer >= 0 or null, got {tx!r}")
        out.append(Channel(p["name"], "pipeline", n, dict(ids), shape, str(p.get("class", "")), str(p.get("site", "")),
                           released_by=released_by, first_wait_passes=tuple(passes),
                           op_type=str(p.get("op_type") or ""), tx_bytes=tx))
    bars = meta.get("barriers")
    if bars:
        bases = {op: bars.get(f"base_{op[4:]}") for op in ("bar_sync", "bar_arrive")} if isinstance(bars, dict) else {}
        if not any(isinstance(v, int) for v in bases.values()) or any(
            v is not None and not isinstance(v, int) for v in bases.values()
        ):
            raise ValueError(
                f"sidecar 'barriers' must be an object with an integer base_sync and/or base_arrive, got {bars!r:.120}"
            )
        for op, base in bases.items():
            if isinstance(base, int) and not 0 <= base <= wire.MAX_USER_EVENT_ID - (NUM_NAMED_BARRIERS - 1):
                raise ValueError(f"sidecar barriers.base_{op[4:]}={base} does not leave {NUM_NAMED_BARRIERS} "
                                 f"barrier ids in 0..{wire.MAX_USER_EVENT_ID}")
        names = _barrier_names(bars.get("names"))
        for b in range(NUM_NAMED_BARRIERS):
            ids = {op: base + b for op, base in bases.items() if isinstance(base, int)}
            label = f"bar_sync[{b}]" + (f" {names[b]}" if b in names else "")
            out.append(Channel(label, "barrier", 1, ids, (1, 1, 1), barrier_id=b))
    return out


def _barrier_names(names: Any) -> dict[int, str]:
    """The sidecar's barriers.names: {barrier id (0..15, as a string or an integer): name}."""
    if not names:
        return {}
    if not isinstance(names, dict):
        raise ValueError(f"sidecar barriers.names must be an object {{barrier id: name}}, got {names!r:.120}")
    out = {}
    for k, v in names.items():
        try:
            b = int(k)
        except (TypeError, ValueError):
            b = -1
        if not 0 <= b < NUM_NAMED_BARRIERS or isinstance(k, bool):
            raise ValueError(f"sidecar barriers.names: key {k!r} is not a barrier id 0..{NUM_NAMED_BARRIERS - 1}")
        out[b] = str(v)
    return out


def _cluster_shape(value: Any, where: str) -> tuple:
    if value is None:
        return (1, 1, 1)
    if is_json_int(value) and value >= 1:
        return (value, 1, 1)
    if isinstance(value, (list, tuple)) and 1 <= len(value) <= 3 and all(is_json_int(v) and v >= 1 for v in value):
        return tuple(value) + (1,) * (3 - len(value))
    raise ValueError(f"{where}: cluster must be a positive integer or [x, y, z], got {value!r}")


def units_of(ch: Channel, trace: Trace) -> np.ndarray:
    """Unit id of every block for this channel: the block itself, or its cluster."""
    blocks = np.arange(trace.num_blocks, dtype=np.int64)
    if ch.cluster_size == 1:
        return blocks
    if ch.cluster_size > trace.num_blocks:
        raise ValueError(f"pipeline {ch.name}: a cluster of {ch.cluster_size} CTAs is larger than the capture's "
                         f"{trace.num_blocks} blocks (check --cluster or the sidecar's cluster)")
    cx, cy, cz = ch.cluster_shape
    grid = (trace.meta or {}).get("grid")
    if isinstance(grid, (list, tuple)) and len(grid) == 3 and math.prod(grid) == trace.num_blocks:
        gx, gy, _ = (int(g) for g in grid)
        x, y, z = blocks % gx, (blocks // gx) % gy, blocks // (gx * gy)
        return (x // cx) + (y // cy) * -(-gx // cx) + (z // cz) * (-(-gx // cx)) * (-(-gy // cy))
    return blocks // ch.cluster_size
