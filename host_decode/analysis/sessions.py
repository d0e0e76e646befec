"""Sessions over many launches and captures from several GPUs / ranks.

A *part* is one decoded launch (a :class:`Trace`) with a label, a launch index, a rank and optional host
timestamps. Parts combine two ways:

* :func:`concat` -> one :class:`Trace` that holds every part's spans, with blocks renumbered
  (``block + block_offset`` of the part, so every (part, block) is its own block) and
  ``meta["parts"]`` listing each part's label, launch index, rank, block range and time shift, and
  ``meta["ring"]`` the ring block of launches saved by ``session.ring.save`` (their sidecars'). Statistics
  over all launches (``ikp stats``, ``ikp diff``) run on it unchanged.
* :func:`load_trace` / :func:`load_parts` -> the launches of some inputs (loaded by
  host_decode.load.inputs: captures, folders of launches, ring folders, other tracers' traces) as one
  Trace / as parts. What the ring of a session says beyond its launches (``meta["ring"]``, the ring blocks
  of its parts added up) is read by host_decode.load.ring.ring_counts.
* :func:`shifts` -> where each part goes on one timeline, for one Chrome JSON trace with one process
  (track group) per part (written by host_decode.reports.merged.write_session), on either

  - ``"timeline"``: a shared timeline. Absolute ``%globaltimer`` times are used as they are when every
    part is absolute (one GPU: one clock; several GPUs: each GPU's globaltimer, which agree to within what
    gpu/insight_capture.py measures, see README, "Insight"); otherwise parts are placed by their host
    timestamp (``host_ns`` in the sidecar: host clock just before the launch), else one after another.
    ``clock_offsets_ns={rank: ns}`` adds a per-rank correction (e.g. measured with
    gpu/insight_capture.py) before merging.
  - ``"stacked"``: every part rebased to its own start, so launches lie on top of each other for
    comparison.

Times in that Chrome file are microseconds (3 decimals) relative to the earliest part start (``origin_ns``
in the file's metadata), so absolute values keep ns precision.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from host_decode.core.model import INSTANT_DTYPE, LANE_DTYPE, LOSS_BUCKETS, SPAN_DTYPE, LossReport, Names, Trace
from host_decode.load.inputs import load_launches
from host_decode.load.ring import sidecar_name
from host_decode.load.sidecar import RING_COUNTS, meta_int, ring_block

# --- building traces from tables (also used by tests and by concat) -------------------------------------


def empty_loss(per_lane_lanes: np.ndarray | None = None) -> LossReport:
    lanes = np.zeros(0, np.int64) if per_lane_lanes is None else per_lane_lanes
    per_lane = np.zeros(lanes.size, _loss_lane_dtype())
    per_lane["lane"] = lanes
    return LossReport(0, {b: 0 for b in LOSS_BUCKETS}, per_lane, {}, 0)


def _loss_lane_dtype() -> np.dtype:
    return np.dtype([("lane", np.int64)] + [(b, np.int64) for b in LOSS_BUCKETS])


def trace_from_spans(
    spans,
    *,
    num_groups: int,
    num_blocks: int | None = None,
    lanes: np.ndarray | None = None,
    sm_of_block: dict | np.ndarray | None = None,
    names: Names | None = None,
    absolute: bool = False,
    meta: dict | None = None,
) -> Trace:
    """A Trace from span rows (tuples ``(block, group, event, start_ns, end_ns[, depth])`` or a
    SPAN_DTYPE array). The lane table is derived (first/last = earliest start / latest end of the lane's
    spans) unless `lanes` (LANE_DTYPE) is given. The loss report counts each span's two records as
    paired. For synthetic traces in tests and for re-assembled ones."""
    if isinstance(spans, np.ndarray) and spans.dtype == SPAN_DTYPE:
        sp = spans.copy()
    else:
        rows = [tuple(r) + (0,) * (6 - len(r)) for r in spans]
        sp = np.zeros(len(rows), SPAN_DTYPE)
        if rows:
            arr = np.array(rows, np.int64)
            sp["block"], sp["group"], sp["event"] = arr[:, 0], arr[:, 1], arr[:, 2]
            sp["start_ns"], sp["end_ns"], sp["depth"] = arr[:, 3], arr[:, 4], arr[:, 5]
            sp["lane"] = sp["block"] * num_groups + sp["group"]
    bad = sp["end_ns"] < sp["start_ns"]
    if bad.any():
        raise ValueError(f"span {int(np.flatnonzero(bad)[0])} ends before it begins")
    sp = sp[np.lexsort((sp["start_ns"], sp["lane"]))]  # program order = start order for synthetic rows
    if lanes is None:
        lanes = _lanes_from_spans(sp, num_groups)
    if sm_of_block is not None:
        sm_map = np.asarray(sm_of_block) if not isinstance(sm_of_block, dict) else None
        if sm_map is None:
            lanes["sm"] = [sm_of_block.get(int(b), -1) for b in lanes["block"]]
        else:
            lanes["sm"] = sm_map[lanes["block"]]
    if num_blocks is None:
        num_blocks = int(max(lanes["block"].max(initial=-1), sp["block"].max(initial=-1))) + 1 or 1
    loss = empty_loss(lanes["lane"])
    n = int(sp.size)
    loss.totals["paired_begin"] = loss.totals["paired_end"] = n
    loss.nonzero_slots = 2 * n
    return Trace(
        num_blocks=num_blocks,
        num_groups=num_groups,
        write_stride=num_blocks * num_groups,
        spans=sp,
        instants=np.zeros(0, INSTANT_DTYPE),
        lanes=lanes,
        loss=loss,
        names=names or Names(),
        absolute=absolute,
        meta=dict(meta or {}),
    )


def _lanes_from_spans(sp: np.ndarray, num_groups: int) -> np.ndarray:
    ids, inv = np.unique(sp["lane"], return_inverse=True)
    lanes = np.zeros(ids.size, LANE_DTYPE)
    lanes["lane"] = ids
    lanes["block"], lanes["group"] = ids // num_groups, ids % num_groups
    lanes["sm"] = -1
    lanes["first_ns"] = np.iinfo(np.int64).max
    np.minimum.at(lanes["first_ns"], inv, sp["start_ns"])
    lanes["last_ns"] = np.iinfo(np.int64).min
    np.maximum.at(lanes["last_ns"], inv, sp["end_ns"])
    lanes["finalize_ns"] = -1
    lanes["records"] = 2 * np.bincount(inv, minlength=ids.size)
    return lanes


# --- parts and sessions ------------------------------------------------------------------------------


@dataclasses.dataclass
class Part:
    trace: Trace
    label: str
    launch_index: int = 0
    rank: int = 0
    host_ns: int | None = None  # host clock (ns since epoch) just before the launch, when recorded


def parts_from_traces(traces: Sequence[Trace], labels: Sequence[str] | None = None, by: str = "launch") -> list[Part]:
    """Parts with launch index / rank / host_ns taken from each trace's sidecar meta when present.
    `by`: "launch" (label 'launch N'; a trace without launch_index is launch i, its position) or "rank" (label
    'rank N'; without launch_index, launch 0: each rank's capture of one step)."""
    parts = []
    for i, t in enumerate(traces):
        meta, where = t.meta or {}, sidecar_name(t.meta or {}, f"trace {i}")
        launch = meta_int(meta, "launch_index", i if by == "launch" else 0, where)
        rank = meta_int(meta, "rank", i if by == "rank" else 0, where)
        label = labels[i] if labels else (f"rank {rank}" if by == "rank" else f"launch {launch}")
        parts.append(Part(t, label, launch, rank, meta_int(meta, "host_ns", None, where)))
    if by == "rank" and not labels and len({(p.rank, p.launch_index) for p in parts}) > len({p.rank for p in parts}):
        for p in parts:  # several launches of a rank: each is named by both
            p.label = f"rank {p.rank} launch {p.launch_index}"
    labels_seen = [p.label for p in parts]
    for p in parts:  # two captures claiming the same launch / rank: tell them apart by file
        source = p.trace.meta.get("source")
        if isinstance(source, dict):  # a foreign trace's: its file is one of its facts
            source = source.get("file")
        if labels_seen.count(p.label) > 1 and source:
            p.label += f" ({Path(source).stem})"
    if by == "launch":
        parts.sort(key=lambda p: (p.launch_index, p.rank))
    else:
        parts.sort(key=lambda p: (p.rank, p.launch_index))
    return parts


# --- one session ----------------------------------------------------------------------------------


def _merged_ring(parts: Sequence[Part]) -> dict | None:
    """The ring block of a session's parts: one ring's (every launch of one save carries the same), or,
    for captures of several rings (directories of several sessions), their counts added up."""
    blocks: dict = {}
    for i, p in enumerate(parts):
        block = ring_block(p.trace.meta or {}, sidecar_name(p.trace.meta or {}, f"trace {i}"))
        if block is not None:
            blocks.setdefault(repr(sorted(block.items())), block)
    if len(blocks) <= 1:
        return next(iter(blocks.values()), None)
    merged = {key: sum(b[key] for b in blocks.values()) for key in RING_COUNTS}
    merged["launches_without_records"] = [v for b in blocks.values() for v in b["launches_without_records"]]
    merged["rings"] = len(blocks)
    return merged


def shifts(parts: Sequence[Part], mode: str = "timeline", clock_offsets_ns: dict | None = None) -> np.ndarray:
    """ns added to each part's times to put it on the merged timeline (see the module docstring)."""
    if mode not in ("timeline", "stacked"):
        raise ValueError(f"mode must be 'timeline' or 'stacked', not {mode!r}")
    starts = np.array([p.trace.start_ns for p in parts], np.int64)
    if mode == "stacked":
        return -starts
    offsets = np.array([clock_offset_of(p, clock_offsets_ns) for p in parts], np.int64)
    if all(p.trace.absolute for p in parts):
        return offsets
    if all(p.host_ns is not None for p in parts):
        host = np.array([p.host_ns for p in parts], np.int64)
        return host - starts + offsets
    # no common clock: one after another, in order, 1 us apart
    lengths = np.array([p.trace.end_ns - p.trace.start_ns for p in parts], np.int64)
    placed = np.concatenate([[0], np.cumsum(lengths + 1000)[:-1]])
    return placed - starts


def clock_offset_of(part: Part, clock_offsets_ns: dict | None = None) -> int:
    """ns added to a part's times to reach the common clock: `clock_offsets_ns[rank]` when given, else its
    sidecar's ``clock_offset_ns`` (measured by the recording side, docs/flags.md), else 0."""
    if clock_offsets_ns and part.rank in clock_offsets_ns:
        return int(clock_offsets_ns[part.rank])
    meta = part.trace.meta or {}
    return int(meta_int(meta, "clock_offset_ns", 0, sidecar_name(meta, part.label)))


# sidecar keys a merged trace keeps per part (meta["parts"]): what the flags analysis reads of each capture
PART_KEYS = ("flags", "flag_buffers", "clock_offset_ns", "clock_error_ns", "clock_reference")


def _part_facts(p: Part, ids: np.ndarray | None) -> dict:
    """The PART_KEYS of a part's sidecar, flag site ids moved as its events were (`ids`)."""
    meta = p.trace.meta or {}
    out = {k: meta[k] for k in PART_KEYS if meta.get(k) is not None}
    if ids is not None and isinstance(out.get("flags"), list):
        out["flags"] = [dict(f, id=int(ids[f["id"]])) if isinstance(f, dict) and isinstance(f.get("id"), int)
                        and 0 <= f["id"] < ids.size else f for f in out["flags"]]
    return out


def _relane(lane: np.ndarray, part_groups: int, block_offset: int, groups: int) -> np.ndarray:
    """A part's lane ids (block * part_groups + group) in the merged trace (groups per block, blocks shifted);
    with part_groups == groups this is lane + block_offset * groups."""
    return (lane // part_groups + block_offset) * groups + lane % part_groups


def _merged_events(parts: Sequence[Part]) -> tuple[dict[int, str], list[np.ndarray | None]]:
    """One event table for the merged trace, and per part the id map its events need (None: unchanged).
    Parts number their events on their own (the kernels of one foreign trace each from 0; captures of
    different kernels): a name keeps one id everywhere, the first part's ids stay, and an id that another
    part gave another name (or left unnamed while this part names it) moves to a free one."""
    names: dict[int, str] = {}
    by_name: dict[str, int] = {}
    taken: set[int] = set()
    maps: list[np.ndarray | None] = []
    for p in parts:
        t = p.trace
        own = np.union1d(np.union1d(t.spans["event"], t.instants["event"]), list(t.names.events)).astype(np.int64)
        ids: dict[int, int] = {}
        for i in own.tolist():
            name = t.names.events.get(i)
            if name is not None and name in by_name:
                ids[i] = by_name[name]
            elif i not in taken or (name is None and i not in names):
                ids[i] = i
            else:
                ids[i] = max(taken) + 1
            taken.add(ids[i])
            if name is not None:
                names.setdefault(ids[i], name)
                by_name.setdefault(name, ids[i])
        if all(k == v for k, v in ids.items()):
            maps.append(None)
        else:
            lut = np.arange(max(ids) + 1, dtype=np.int64)
            lut[list(ids)] = list(ids.values())
            maps.append(lut)
    return names, maps


def _merged_groups(parts: Sequence[Part]) -> dict[int, str]:
    """Group names of the merged trace. A group is an index within a block, so parts that name one index
    differently (two kernels' roles, `producer` and `warp 0`) share it: its name then lists theirs in part
    order (`producer / warp 0`) rather than showing one part's name on another part's lanes."""
    seen: dict[int, list[str]] = {}
    for p in parts:
        for k, v in p.trace.names.groups.items():
            if v not in seen.setdefault(k, []):
                seen[k].append(v)
    return {k: " / ".join(v) for k, v in seen.items()}


def concat(parts: Sequence[Part], mode: str = "timeline", clock_offsets_ns: dict | None = None) -> Trace:
    """One Trace holding every part; block ids renumbered per part; meta['parts'] describes the parts. Parts
    may differ in num_groups (kernels of one foreign trace, launches of different block sizes): the merged
    trace has the largest, and a narrower part's lanes keep their (block, group), its other groups empty."""
    if not parts:
        raise ValueError("concat needs at least one part")
    g = max(p.trace.num_groups for p in parts)
    event_names, event_ids = _merged_events(parts)
    shift = shifts(parts, mode, clock_offsets_ns)
    block_off = np.concatenate([[0], np.cumsum([p.trace.num_blocks for p in parts])[:-1]]).astype(np.int64)
    spans, lanes, instants, payloads, per_lane = [], [], [], [], []
    for p, dt, boff, ids in zip(parts, shift, block_off, event_ids):  # per part (few), never per span
        t = p.trace
        relane = functools.partial(_relane, part_groups=t.num_groups, block_offset=int(boff), groups=g)
        s = t.spans.copy()
        s["lane"] = relane(s["lane"])
        if ids is not None:
            s["event"] = ids[s["event"]]
        s["block"] += boff
        s["start_ns"] += dt
        s["end_ns"] += dt
        spans.append(s)
        ln = t.lanes.copy()
        ln["lane"] = relane(ln["lane"])
        ln["block"] += boff
        for f in ("first_ns", "last_ns", "finalize_ns"):
            ln[f] = np.where(ln[f] >= 0, ln[f] + dt, ln[f])
        lanes.append(ln)
        it = t.instants.copy()
        it["lane"] = relane(it["lane"])
        if ids is not None:
            it["event"] = ids[it["event"]]
        it["block"] += boff
        it["ts_ns"] += dt
        instants.append(it)
        pay = t.payloads.copy()  # flag payloads move with the record they belong to
        pay["lane"] = relane(pay["lane"])
        if ids is not None:
            pay["event"] = ids[pay["event"]]
        pay["block"] += boff
        pay["ts_ns"] += dt
        pay["begin_ns"] += dt
        payloads.append(pay)
        pl = t.loss.per_lane.copy()
        if pl.size:
            pl["lane"] = relane(pl["lane"])
        per_lane.append(pl.astype(_loss_lane_dtype()) if pl.size else np.zeros(0, _loss_lane_dtype()))
    totals = {b: sum(p.trace.loss.totals.get(b, 0) for p in parts) for b in LOSS_BUCKETS}
    reasons: dict[str, int] = {}
    for p in parts:
        for k, v in p.trace.loss.malformed_reasons.items():
            reasons[k] = reasons.get(k, 0) + v
    loss = LossReport(
        nonzero_slots=sum(p.trace.loss.nonzero_slots for p in parts),
        totals=totals,
        per_lane=np.concatenate(per_lane),
        malformed_reasons=reasons,
        dropped_on_device=sum(p.trace.loss.dropped_on_device for p in parts),
    )
    meta = {
        "kernel": parts[0].trace.meta.get("kernel"),
        "merge_mode": mode,
        "parts": [
            {
                "label": p.label,
                "launch_index": p.launch_index,
                "rank": p.rank,
                "host_ns": p.host_ns,
                "block_offset": int(boff),
                "num_blocks": p.trace.num_blocks,
                "num_groups": p.trace.num_groups,
                "shift_ns": int(dt),
                "absolute": bool(p.trace.absolute),
                **_part_facts(p, ids),
            }
            for p, dt, boff, ids in zip(parts, shift, block_off, event_ids)
        ],
    }
    ring = _merged_ring(parts)
    if ring is not None:
        meta["ring"] = ring
    return Trace(
        num_blocks=int(block_off[-1] + parts[-1].trace.num_blocks),
        num_groups=g,
        write_stride=int(block_off[-1] + parts[-1].trace.num_blocks) * g,
        spans=np.concatenate(spans),  # lanes offset per part in part order: still sorted by lane
        instants=np.concatenate(instants),
        lanes=np.concatenate(lanes),
        loss=loss,
        names=Names(event_names, _merged_groups(parts)),
        absolute=mode == "timeline" and all(p.trace.absolute for p in parts),
        meta=meta,
        payloads=np.concatenate(payloads),
    )


def load_parts(paths: Iterable[str | os.PathLike], by: str = "launch", progress: bool | None = None,
               names: Names | None = None, write_stride: int | None = None) -> list[Part]:
    """The launches of `paths` (host_decode.load.inputs.load_launches) as parts, sorted by launch index /
    rank. `names` and `write_stride` (`--names`, `--write-stride`) apply to every ikp capture."""
    launches = load_launches(paths, progress=progress, names=names, write_stride=write_stride)
    return parts_from_traces(launches.traces, by=by)


def load_trace(paths: Sequence[str | os.PathLike], mode: str = "timeline", progress: bool | None = None,
               names: Names | None = None, write_stride: int | None = None) -> Trace:
    """The launches of `paths` (host_decode.load.inputs.load_launches: captures, folders, ring folders,
    other tracers' traces) as one Trace: one file holding one launch is that launch's Trace; anything else
    is the concat of all launches (meta['parts']). `names` and `write_stride` (`--names`,
    `--write-stride`) apply to every ikp capture, over its sidecar's; a foreign trace is refused with
    either (tests/unit/host_decode/cli/test_cli_errors.py::test_names_on_a_foreign_trace_is_refused)."""
    launches = load_launches(paths, progress=progress, names=names, write_stride=write_stride)
    if launches.single:
        return launches.traces[0]
    return concat(parts_from_traces(launches.traces, by=grouping(launches.traces)), mode=mode)


def grouping(traces: Sequence[Trace]) -> str:
    """How a session's launches are grouped: "rank" when they come from more than one rank (each rank a
    track group of the merged trace), else "launch"."""
    ranks = {(t.meta or {}).get("rank") for t in traces}
    return "rank" if len(ranks - {None}) > 1 else "launch"
