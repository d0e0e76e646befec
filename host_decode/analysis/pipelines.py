"""Pipelines: who waited on whom. Matches every traced pipeline wait to the signal that released it.

Input: a decoded Trace whose sidecar (``trace.meta``) carries the pipeline keys written by the device
side's tracing (docs/pipeline_waits.md shows them): ``pipelines`` (name, num_stages, ``ids`` = first event id of
each traced op: acquire / wait regions, commit / release instants) and optionally ``barriers``
(``base_sync`` regions ``bar_sync[i]``, ``base_arrive`` instants ``bar_arrive[i]``, ``names``). Only
this metadata is used to find pipelines, ops and stages; event names are never parsed.

Matching (a *channel* is one pipeline or one named barrier id; a *unit* is the set of blocks that share
the channel's barriers):
* consumer wait, k-th on (unit, pipeline, stage) by its lane  <-  the k-th commit of that stage: with
  several committing lanes in the unit, the latest of their k-th commits (the arrival that completed
  the phase). Kind "commit->wait".
* producer acquire, k-th on (unit, pipeline, stage)  <-  the latest (k-1)-th release of that stage over
  the consumer lanes of the unit. The first acquire of each stage passes through (status first_use:
  empty barriers start free). Kind "release->acquire".
* named barrier sync on (block, barrier id)  <-  the latest arrival on that id at or before the sync's
  end (a bar_arrive instant, or a bar_sync begin); when that is the waiting lane's own begin, status
  "self" (it arrived last: it waited on nobody). Kinds "bar_arrive->bar_sync" / "bar_sync->bar_sync".
  By time because lanes need not take part once per phase (_match_barrier says why;
  ::test_warp_scheduler_barrier_matched_by_time).
* Which k: a lane's own count of its waits of a stage is exact only if every wait left a record, but a
  wait that a successful try_wait skipped never runs and records nothing; the phases of the stage
  completed by the wait's end are exact only if signals are recorded no later than they act (the device
  records an arrive before it). Each is a lower bound of the true k under the other's failure (phase
  k+1 cannot complete before the wait of phase k ended: its producer first needed every consumer's
  release of phase k), so the larger one is used, and disagreements are counted (WAIT_DTYPE.check:
  test_waits.py::test_skipped_wait_records_matched_by_time, ::test_late_signal_is_counted).
  Inferred matches (next item) use the time alone; named barriers the count alone.
* Roles (statistics): a role is a group of the capture, or, when the lanes are warps (sidecar
  ``pipeline_lanes: "warp"``), a warp group of 4 warps ``wg<i>`` (::test_warp_lanes_grouped_into_warp_groups).
* Level "waits" (no commit / release instants traced: the op's id is absent from ``ids``): the match is
  *inferred* from program order, status "inferred": the producer's k-th acquire of the stage ended
  before its k-th commit, so it bounds the release of the consumer's k-th wait from below
  ("acquire->wait (inferred)"); each consumer's (k-1)-th wait ended before its (k-1)-th release
  ("wait->acquire (inferred)"). The flow starts at that bound, the waited-on role is exact.
* Units, multi-CTA clusters: a pipeline whose metadata says ``"cluster": n`` or ``[x, y, z]`` with more
  than one CTA (and no ``"scope": "cta"``) is cluster-scoped: its signalling lanes are those of every
  block of the cluster (TMA multicast fills, and consumer releases free, the stage in every CTA).
  Blocks map to clusters through the sidecar's ``grid`` ([gx, gy, gz], block = x + y*gx + z*gx*gy)
  when given, else as consecutive runs of n blocks. Every other pipeline and every named barrier is
  block-local. Guarded by test_waits.py::test_two_cta_cluster.
* Times are the decoder's (32-bit wraps already unwrapped: test_waits.py::test_wrap).

Nothing is dropped silently: each wait that ended (a region with both ends; a wait cut by overflow is the
decoder's unmatched_begin) gets one status: matched, inferred, self, first_use, tma_store (an acquire of
a pipeline whose sidecar says `"released_by": "tma_store"`: a TMA-store pipeline, whose stages the TMA
unit frees once its bulk store has read them, so no lane signals it; test_waits.py::
test_tma_store_acquires_waited_on_the_tma_unit), or one reason why it could not be matched:
producer_dropped / consumer_dropped / participant_dropped (a signalling lane of the unit overflowed: its
records are a program-order prefix, so the k-th signal may be among those lost), lane_missing (a
signalling lane of the unit wrote nothing at all), occurrence_beyond_signal (all signalling lanes are
complete and present, yet fewer signals than waits), signal_in_other_cta (no lane of the unit signals the
channel at all, other units' lanes do: a cluster-scoped pipeline whose metadata lacks "cluster"; `ikp
waits --cluster N` / analyze_pipelines(cluster=N) supplies it), bound_not_recorded (inferred matching
found no producer acquire / consumer wait to bound the wait with: a successful try_acquire or try_wait
skipped it, so it left no record), no_signal_recorded (nothing signals this channel anywhere: e.g. level
"waits" with neither acquire nor wait traced on the other side). Guarded by
test_waits.py::test_consumer_overflow_and_missing_lane.

Counters ("<P> stages full", per block): +1 when a stage's k-th commit phase completed, -1 when its k-th
release phase completed (both must be recorded: level "signals"); the value is the number of stages
handed to the consumers and not yet given back, 0..num_stages. Per block, because a stage count is a
fact of one CTA's barriers (a launch-level sum over 132 CTAs reads as nothing in particular); a
cluster-scoped pipeline's phases are the cluster's, repeated on each of its blocks.

Statistics over the matched waits (per role, critical path): host_decode.analysis.waits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.model import FLOW_DTYPE, CounterSeries, Trace, is_json_int

PIPELINE_OPS = ("acquire", "wait", "commit", "release")
IGNORED_OPS = ("poll",)  # level "all": every try_wait as an instant; not a wait, not a signal
WAIT_OPS = ("acquire", "wait", "bar_sync")  # regions: the op column of the waits table indexes this
FLOW_KINDS = (
    "commit->wait",
    "release->acquire",
    "acquire->wait (inferred)",
    "wait->acquire (inferred)",
    "bar_arrive->bar_sync",
    "bar_sync->bar_sync",
)
MATCHED_STATUSES = ("matched", "inferred", "self", "first_use", "tma_store")
UNMATCHED_REASONS = (
    "producer_dropped",
    "consumer_dropped",
    "participant_dropped",
    "lane_missing",
    "occurrence_beyond_signal",
    "signal_in_other_cta",
    "bound_not_recorded",
    "no_signal_recorded",
)
STATUSES = MATCHED_STATUSES + UNMATCHED_REASONS
RELEASED_BY = ("", "tma_store")  # sidecar `released_by` of a pipeline: what frees a stage untraced
NUM_NAMED_BARRIERS = 16  # hardware named barriers per CTA (bar.sync ids 0..15)

WAIT_DTYPE = np.dtype(
    [
        ("lane", np.int64),
        ("block", np.int64),
        ("group", np.int64),
        ("channel", np.int32),  # index into PipelineAnalysis.channels
        ("op", np.int8),  # index into WAIT_OPS
        ("stage", np.int32),  # barrier id for bar_sync
        ("occurrence", np.int64),  # k: this lane's k-th wait of (channel, op, stage), from 0
        ("start_ns", np.int64),
        ("end_ns", np.int64),
        ("status", np.int8),  # index into STATUSES
        ("src_lane", np.int64),  # the releasing signal's lane, -1 when none
        ("src_ns", np.int64),  # its time, -1 when none
        ("kind", np.int8),  # index into FLOW_KINDS, -1 when none
        ("phase", np.int64),  # the signal phase matched (k of the releasing signals), -1 when none
        ("check", np.int8),  # 0, or where the lane's count and the signal times disagree (CHECKS)
    ]
)
CHECKS = ("agree", "time_ahead_of_count", "count_ahead_of_time")
_CHECK_TIME_AHEAD, _CHECK_COUNT_AHEAD = 1, 2

_ACQ, _WAIT, _SYNC = range(3)
_S = {name: i for i, name in enumerate(STATUSES)}
_K = {name: i for i, name in enumerate(FLOW_KINDS)}


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
        out.append(Channel(p["name"], "pipeline", n, dict(ids), shape, str(p.get("class", "")), str(p.get("site", "")),
                           released_by=released_by, first_wait_passes=tuple(passes)))
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


@dataclasses.dataclass
class PipelineAnalysis:
    channels: list[Channel]
    waits: np.ndarray  # WAIT_DTYPE, one row per wait region that ended
    counters: list[CounterSeries]
    timer_step_ns: int
    timer_step_source: str  # "data" | "default"
    flow_kinds: tuple = FLOW_KINDS
    pass_through_ns: int | None = None  # median duration of first-use acquires (cannot block), if >= 4
    # per (channel, op, group): the signals that close each use of a stage by that group (consumer:
    # releases, for op wait; producer: commits, for op acquire), when traced: a use whose wait found the
    # stage ready at once (a successful try_wait) leaves no wait record but still these
    uses: dict = dataclasses.field(default_factory=dict)

    @property
    def blocked_above_ns(self) -> int:
        """A wait blocked when it lasted longer than this: the timer step, or what a wait that cannot
        block (a stage's first acquire) takes to record, if longer."""
        return max(self.timer_step_ns, self.pass_through_ns or 0)

    def blocked(self) -> np.ndarray:
        return (self.waits["end_ns"] - self.waits["start_ns"]) > self.blocked_above_ns

    def flows(self, blocked_only: bool = False) -> np.ndarray:
        """FLOW_DTYPE rows: releasing signal -> end of the wait it released (other lanes only)."""
        w = self.waits
        keep = (w["src_lane"] >= 0) & (w["src_lane"] != w["lane"])
        if blocked_only:
            keep &= (w["end_ns"] - w["start_ns"]) > self.blocked_above_ns
        w = w[keep]
        out = np.zeros(w.size, FLOW_DTYPE)
        out["src_lane"], out["src_ns"], out["dst_lane"], out["dst_ns"] = (
            w["src_lane"],
            w["src_ns"],
            w["lane"],
            w["end_ns"],
        )
        out["kind"] = w["kind"]
        return out

    def status_counts(self) -> dict[str, int]:
        counts = np.bincount(self.waits["status"], minlength=len(STATUSES))
        return {name: int(c) for name, c in zip(STATUSES, counts)}

    def unmatched(self) -> dict[str, int]:
        return {k: v for k, v in self.status_counts().items() if k in UNMATCHED_REASONS and v}


# ================================================================================================
# matching
# ================================================================================================


def analyze_pipelines(trace: Trace, cluster: Any = None) -> PipelineAnalysis:
    """Match every traced wait; ValueError if the sidecar declares no pipeline or barrier. `cluster`: see
    channels_of (`ikp waits --cluster N`)."""
    channels = channels_of(trace.meta or {}, cluster)
    if not channels:
        raise ValueError(
            "the capture's sidecar declares no 'pipelines' or 'barriers' (trace with ikp_cute.trace_pipelines)"
        )
    lut = _event_lookup(channels)
    spans, inst = trace.spans, trace.instants
    s_ch, s_op, s_st = (a[spans["event"]] for a in lut)
    i_ch, i_op, i_st = (a[inst["event"]] for a in lut)
    span_at = _OpSlices(s_ch, s_op, len(channels))
    inst_at = _OpSlices(i_ch, i_op, len(channels))
    lane_present = np.zeros(trace.num_lanes, bool)
    lane_present[trace.lanes["lane"]] = True
    lane_dropped = np.zeros(trace.num_lanes, bool)
    lane_dropped[trace.lanes["lane"]] = trace.lanes["dropped"] > 0
    ctx = _Ctx(trace, lane_present, lane_dropped)

    parts, order, counters, uses = [], [], [], {}
    for c, ch in enumerate(channels):
        unit = _units(ch, trace)
        if ch.kind == "barrier":
            sync, arrive = span_at(c, "bar_sync"), inst_at(c, "bar_arrive")
            if sync.size:
                parts.append(_match_barrier(ctx, c, ch.barrier_id, unit, spans[sync], inst[arrive]))
                order.append(sync)
            continue

        def spans_of(op, time_field="end_ns"):
            idx = span_at(c, op)
            return _Records.of_spans(spans[idx], s_st[idx], unit, ch.num_stages, time_field, idx)

        def instants_of(op):
            idx = inst_at(c, op)
            return _Records.of_instants(inst[idx], i_st[idx], unit, ch.num_stages)

        acq, wai, com, rel = spans_of("acquire"), spans_of("wait"), instants_of("commit"), instants_of("release")
        # consumer waits <- commits, else (not traced) <- producer acquire ends (inferred); producer
        # acquires <- releases, else <- consumer wait ends (inferred)
        for waits, op, signal_op, signals, bound, kinds, dropped in (
            (wai, _WAIT, "commit", com, "acquire", ("commit->wait", "acquire->wait (inferred)"), "producer_dropped"),
            (acq, _ACQ, "release", rel, "wait", ("release->acquire", "wait->acquire (inferred)"), "consumer_dropped"),
        ):
            recorded = signal_op in ch.ids
            sig = signals if recorded else ({"acquire": acq, "wait": wai}[bound] if bound in ch.ids else None)
            status, kind, by = ("matched", kinds[0], "count+time") if recorded else ("inferred", kinds[1], "time")
            # a lane's first acquire per stage passes (empty barriers start a phase ahead), and so does its
            # first wait on a stage whose wait phase starts ahead
            shift = 1 if op == _ACQ else np.isin(waits.stage, ch.first_wait_passes).astype(np.int64)
            part = ctx.match(waits, c, op, sig, shift, unit, kind, status, dropped, by=by)
            if op == _ACQ and ch.released_by == "tma_store":  # no lane released it: the TMA unit did
                part["status"] = _S["tma_store"]
                for field in ("src_lane", "src_ns", "kind", "phase"):
                    part[field] = -1
            parts.append(part)
        order += [wai.index, acq.index]
        for op, r in ((_WAIT, rel), (_ACQ, com)):
            if ("release" if op == _WAIT else "commit") in ch.ids:
                groups, n = np.unique(r.lane % trace.num_groups, return_counts=True)
                uses.update({(c, op, int(g)): int(k) for g, k in zip(groups.tolist(), n.tolist())})
        if "commit" in ch.ids and "release" in ch.ids:
            counters.extend(_stage_counters(ch, com, rel, unit, trace.num_blocks))
    waits = np.concatenate(parts) if parts else np.zeros(0, WAIT_DTYPE)
    if parts:  # the span table's order: by lane, then program order
        waits = waits[np.argsort(np.concatenate(order), kind="stable")]
    step, source = timer_step(trace)
    first = waits[(waits["status"] == _S["first_use"]) & (waits["op"] == _ACQ)]
    passing = int(np.median(first["end_ns"] - first["start_ns"])) if first.size >= 4 else None
    return PipelineAnalysis(channels, waits, counters, step, source, pass_through_ns=passing, uses=uses)


_OP = {op: i for i, op in enumerate(PIPELINE_OPS + ("bar_sync", "bar_arrive") + IGNORED_OPS)}
_OP_NAME = {i: op for op, i in _OP.items()}


class _OpSlices:
    """Indices of the rows of each (channel, op), grouped by one stable sort (rows keep their order)."""

    def __init__(self, channel: np.ndarray, op: np.ndarray, num_channels: int):
        idx = np.flatnonzero(channel >= 0)
        code = channel[idx] * len(_OP) + op[idx]
        sort = np.argsort(code, kind="stable")
        self.idx = idx[sort]
        self.bounds = np.searchsorted(code[sort], np.arange(num_channels * len(_OP) + 1))

    def __call__(self, channel: int, op: str) -> np.ndarray:
        k = channel * len(_OP) + _OP[op]
        return self.idx[self.bounds[k] : self.bounds[k + 1]]


def _event_lookup(channels: list[Channel]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """event id -> (channel, op, stage) arrays over all 1024 ids (-1: not a pipeline event)."""
    ch_of, op_of, st_of = (np.full(wire.MAX_EVENT_ID + 1, -1, np.int64) for _ in range(3))
    for c, ch in enumerate(channels):
        for op, base in ch.ids.items():
            for s in range(ch.num_stages):
                e = base + s
                if ch_of[e] >= 0 and ch.kind == "pipeline":
                    other = channels[ch_of[e]]
                    raise ValueError(
                        f"sidecar: event id {e} is both {other.name}.{_OP_NAME[op_of[e]]} and {ch.name}.{op}[{s}]"
                    )
                if ch_of[e] < 0:  # a pipeline's id wins over a barrier id that happens to coincide
                    ch_of[e], op_of[e], st_of[e] = c, _OP[op], s
    return ch_of, op_of, st_of


def _units(ch: Channel, trace: Trace) -> np.ndarray:
    """Unit id of every block for this channel: the block itself, or its cluster."""
    blocks = np.arange(trace.num_blocks, dtype=np.int64)
    if ch.cluster_size == 1:
        return blocks
    cx, cy, cz = ch.cluster_shape
    grid = (trace.meta or {}).get("grid")
    if isinstance(grid, (list, tuple)) and len(grid) == 3 and math.prod(grid) == trace.num_blocks:
        gx, gy, _ = (int(g) for g in grid)
        x, y, z = blocks % gx, (blocks // gx) % gy, blocks // (gx * gy)
        return (x // cx) + (y // cy) * -(-gx // cx) + (z // cz) * (-(-gx // cx)) * (-(-gy // cy))
    return blocks // ch.cluster_size


@dataclasses.dataclass
class _Records:
    """One op's records of one channel: lane, unit, stage, time, k (this lane's k-th on that stage)."""

    lane: np.ndarray
    unit: np.ndarray
    stage: np.ndarray
    t: np.ndarray  # signal time (instant ts, or the span end/start named at construction)
    k: np.ndarray
    rows: np.ndarray | None = None  # the spans, for waits
    num_stages: int = 1
    index: np.ndarray | None = None  # the rows' indices in the trace's span table

    @classmethod
    def of_spans(cls, spans, stage, unit_of_block, num_stages, time_field, index=None):
        lane = spans["lane"].astype(np.int64)
        return cls(
            lane,
            unit_of_block[spans["block"]],
            stage,
            spans[time_field].astype(np.int64),
            _occurrence(lane, stage, spans["start_ns"], num_stages),
            spans,
            num_stages,
            index,
        )

    @classmethod
    def of_instants(cls, inst, stage, unit_of_block, num_stages):
        lane = inst["lane"].astype(np.int64)
        return cls(
            lane,
            unit_of_block[inst["block"]],
            stage,
            inst["ts_ns"].astype(np.int64),
            _occurrence(lane, stage, inst["ts_ns"], num_stages),
            None,
            num_stages,
        )


def _occurrence(lane: np.ndarray, key: np.ndarray, t: np.ndarray, num_keys: int) -> np.ndarray:
    """k of each record among its lane's records with the same key (0 <= key < num_keys), in time
    (= program) order. Rows already by lane and time (the decoder's order) need one stable sort."""
    if lane.size == 0:
        return np.zeros(0, np.int64)
    dl = np.diff(lane)
    if bool(np.all((dl > 0) | ((dl == 0) & (np.diff(t) >= 0)))):
        order = np.argsort(lane * num_keys + key, kind="stable")
    else:
        order = np.lexsort((t, key, lane))
    lo, ko = lane[order], key[order]
    first = np.r_[True, (lo[1:] != lo[:-1]) | (ko[1:] != ko[:-1])]
    start = np.maximum.accumulate(np.where(first, np.arange(lane.size), 0))
    k = np.empty(lane.size, np.int64)
    k[order] = np.arange(lane.size) - start
    return k


class _Ctx:
    def __init__(self, trace: Trace, lane_present: np.ndarray, lane_dropped: np.ndarray):
        self.trace, self.present, self.dropped = trace, lane_present, lane_dropped
        self.last_ns = np.full(trace.num_lanes, -1, np.int64)
        self.last_ns[trace.lanes["lane"]] = trace.lanes["last_ns"]

    def unit_health(self, signal_groups: np.ndarray, unit_of_block: np.ndarray):
        """Per unit, over the lanes of the signalling groups: (how many are present, whether one is
        missing, the earliest last record of one that overflowed: its signals after that time are lost;
        int64 max when none overflowed)."""
        ng, nu = self.trace.num_groups, int(unit_of_block.max()) + 1
        lanes = (np.arange(self.trace.num_blocks)[:, None] * ng + signal_groups[None, :]).ravel()
        units = np.repeat(unit_of_block, signal_groups.size)
        present = np.bincount(units, self.present[lanes], nu).astype(np.int64)
        missing = np.bincount(units, ~self.present[lanes], nu) > 0
        cut = np.full(nu, np.iinfo(np.int64).max)
        np.minimum.at(cut, units, np.where(self.dropped[lanes], self.last_ns[lanes], np.iinfo(np.int64).max))
        return present, missing, cut

    def match(
        self,
        waits: _Records,
        channel: int,
        op: int,
        sig: _Records | None,
        shift,
        unit_of_block,
        kind: str,
        status: str,
        dropped_reason: str,
        by: str = "count+time",
    ) -> np.ndarray:
        """Rows for `waits`: each pairs with a phase of `sig` (phase k = the latest of the signalling lanes'
        k-th signals of that unit and stage). Which phase (shift 1, per wait or for all: a lane's first wait per
        stage passes):
        by "count": the lane's k - shift; "time": the latest phase completed by the wait's end (`waits.t`);
        "count+time": the larger of the two (see the module docstring: each is a lower bound of the truth,
        under skipped wait records and late signal records respectively)."""
        out = _rows(waits, channel, op)
        by_count = waits.k - shift
        if sig is None or sig.lane.size == 0:
            first = by_count < 0
            out["status"] = np.where(first, _S["first_use"], _S["no_signal_recorded"])
            return out
        signal_groups = np.unique(sig.lane % self.trace.num_groups)
        n_present, missing, cut = self.unit_health(signal_groups, unit_of_block)
        # phase table: per (unit, stage, k): the latest signal and how many lanes gave one
        kmax = int(max(sig.k.max(), by_count.max(initial=0))) + 1
        us = sig.unit * sig.num_stages + sig.stage
        code = us * kmax + sig.k
        order = np.lexsort((sig.t, code))
        code_s = code[order]
        last = np.r_[code_s[1:] != code_s[:-1], True]
        phase_code = code_s[last]
        phase_rec = order[last]
        phase_lane, phase_t = sig.lane[phase_rec], sig.t[phase_rec]
        firsts = np.flatnonzero(np.r_[True, code_s[1:] != code_s[:-1]])
        phase_lanes = np.diff(np.r_[firsts, code_s.size])
        w_us = waits.unit * waits.num_stages + waits.stage
        by_time = _phases_before(phase_code // kmax, phase_t, w_us, waits.t) - 1
        target = {"count": by_count, "time": by_time, "count+time": np.maximum(by_count, by_time)}[by]
        todo = target >= 0
        # no phase to point at: in inferred matching the bound (a producer acquire, a consumer wait) may
        # itself have left no record (a successful try_acquire / try_wait), so say that, not "beyond"
        beyond = _S["bound_not_recorded"] if status == "inferred" else _S["occurrence_beyond_signal"]
        out["status"][~todo] = np.where(by_count[~todo] < 0, _S["first_use"], beyond)
        if by == "count+time":
            out["check"] = np.where(
                by_time > by_count, _CHECK_TIME_AHEAD, np.where(by_count > by_time, _CHECK_COUNT_AHEAD, 0)
            )
        wcode = w_us * kmax + target
        pos = np.clip(np.searchsorted(phase_code, wcode), 0, max(phase_code.size - 1, 0))
        found = todo & (phase_code[pos] == wcode)
        full = found & (phase_lanes[pos] >= n_present[waits.unit])
        u = waits.unit
        # a signalling lane that overflowed before the wait ended may have lost the releasing signal
        reason = np.where(waits.t > cut[u], _S[dropped_reason], np.where(missing[u], _S["lane_missing"], -1))
        # no signal at all in this unit while other units have them: the signals went to this CTA from
        # another one (a cluster-scoped pipeline whose metadata does not say so)
        silent = np.bincount(sig.unit, minlength=int(unit_of_block.max()) + 1)[u] == 0
        reason = np.where((reason < 0) & silent, _S["signal_in_other_cta"], reason)
        # a phase with every present signalling lane is matched unless a lane of the unit is missing; a
        # phase with fewer lanes only when no lane of the unit is missing or overflowed before the wait ended
        ok = np.where(full, ~missing[u], found & (reason < 0))
        if status == "inferred":
            # An inferred bound is a wait's end, and waits are recorded only when they blocked: the phase
            # table may then join different iterations of different lanes. A bound that ends after the
            # wait it would have released cannot be its bound: say the bound left no record instead.
            impossible = ok & (phase_t[pos] > waits.t)
            ok &= ~impossible
            reason = np.where(impossible, _S["bound_not_recorded"], reason)
        out["status"][todo] = np.where(
            ok[todo], _S[status], np.where(reason[todo] >= 0, reason[todo], beyond)
        )
        out["phase"] = np.where(todo, target, -1)
        out["src_lane"] = np.where(ok, phase_lane[pos], -1)
        out["src_ns"] = np.where(ok, phase_t[pos], -1)
        out["kind"] = np.where(ok, _K[kind], -1)
        return out


def _phases_before(phase_key: np.ndarray, phase_t: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each (key, t): how many phases of the same key completed at or before t (one merged sort)."""
    n = phase_key.size
    keys = np.r_[phase_key, key]
    times = np.r_[phase_t, t]
    kind = np.r_[np.zeros(n, np.int8), np.ones(key.size, np.int8)]  # at equal times the phase counts
    order = np.lexsort((kind, times, keys))
    is_phase = kind[order] == 0
    seen = np.cumsum(is_phase)
    ks = keys[order]
    group_start = np.r_[True, ks[1:] != ks[:-1]]
    before_group = np.maximum.accumulate(np.where(group_start, seen - is_phase, 0))
    out = np.empty(key.size, np.int64)
    out[order[~is_phase] - n] = (seen - before_group)[~is_phase]
    return out


def _rows(waits: _Records, channel: int, op: int) -> np.ndarray:
    sp = waits.rows
    out = np.zeros(sp.size, WAIT_DTYPE)
    for f in ("lane", "block", "group", "start_ns", "end_ns"):
        out[f] = sp[f]
    out["channel"], out["op"], out["stage"], out["occurrence"] = channel, op, waits.stage, waits.k
    out["src_lane"], out["src_ns"], out["kind"], out["phase"] = -1, -1, -1, -1
    return out


def _match_barrier(
    ctx: _Ctx, c: int, barrier_id: int, unit_of_block, sync: np.ndarray, arrive: np.ndarray
) -> np.ndarray:
    """bar_sync regions <- the latest arrival on this barrier of the block at or before the sync's end (an
    arrive instant or a sync's begin, the sync's own begin included: then status self).

    By time, not by count: a barrier's phase completes when its thread count has arrived, which the
    records do not carry, and lanes need not take part once per phase (FA4's warp scheduler: warp
    group 1 pre-arrives on its own barrier, then syncs on it while warp group 2 arrives). The arrival
    that completed the phase is the latest one before the sync ended; a later phase's arrivals come
    after the release (an arrive is recorded before it executes, a sync's begin before it waits)."""
    out = np.zeros(sync.size, WAIT_DTYPE)
    for f in ("lane", "block", "group", "start_ns", "end_ns"):
        out[f] = sync[f]
    out["channel"], out["op"], out["stage"] = c, _SYNC, barrier_id
    out["occurrence"] = _occurrence(sync["lane"].astype(np.int64), np.zeros(sync.size, np.int64), sync["start_ns"], 1)
    out["src_lane"], out["src_ns"], out["kind"], out["phase"] = -1, -1, -1, -1
    lane = np.r_[sync["lane"], arrive["lane"]].astype(np.int64)
    t = np.r_[sync["start_ns"], arrive["ts_ns"]].astype(np.int64)
    is_sync = np.r_[np.ones(sync.size, bool), np.zeros(arrive.size, bool)]
    unit = unit_of_block[np.r_[sync["block"], arrive["block"]]]
    # arrivals by (unit, time); at one time another lane's arrival sorts after the waiting lane's own
    order = np.lexsort((t, unit))
    u_s, t_s = unit[order], t[order]
    w_unit, w_end = unit[: sync.size], sync["end_ns"].astype(np.int64)
    pos = _phases_before(u_s, t_s, w_unit, w_end) - 1 + np.searchsorted(u_s, w_unit)  # latest arrival <= end
    pos = np.clip(pos, 0, max(order.size - 1, 0))
    rec = order[pos]
    same_t = (pos + 1 < order.size) & (u_s[np.minimum(pos + 1, order.size - 1)] == w_unit)
    # ties at the end time: prefer an arrival by another lane (the lane's own begin is rarely that late)
    other = np.where(
        same_t & (t_s[np.minimum(pos + 1, order.size - 1)] == t_s[pos]) & (lane[rec] == out["lane"]),
        order[np.minimum(pos + 1, order.size - 1)],
        rec,
    )
    rec = other
    participants = np.unique(lane % ctx.trace.num_groups)
    _, missing, cut = ctx.unit_health(participants, unit_of_block)
    # a participant that overflowed before the sync ended may have made the releasing arrival unrecorded
    reason = np.where(
        w_end > cut[w_unit], _S["participant_dropped"], np.where(missing[w_unit], _S["lane_missing"], -1)
    )
    ok = reason < 0
    out["status"] = np.where(ok, np.where(lane[rec] == out["lane"], _S["self"], _S["matched"]), reason)
    out["src_lane"] = np.where(ok, lane[rec], -1)
    out["src_ns"] = np.where(ok, t[rec], -1)
    out["kind"] = np.where(ok, np.where(is_sync[rec], _K["bar_sync->bar_sync"], _K["bar_arrive->bar_sync"]), -1)
    return out


def _stage_counters(ch: Channel, com: _Records, rel: _Records, unit_of_block, num_blocks: int) -> list[CounterSeries]:
    """Per block: stages whose k-th commit phase completed and whose k-th release phase did not yet."""

    def phases(r: _Records):
        if r.lane.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        kmax = int(r.k.max()) + 1
        code = (r.unit * ch.num_stages + r.stage) * kmax + r.k
        order = np.lexsort((r.t, code))
        cs = code[order]
        last = np.r_[cs[1:] != cs[:-1], True]
        return (r.unit[order][last] * ch.num_stages + r.stage[order][last]) * (1 << 32) + r.k[order][last], r.t[order][
            last
        ]

    fill_key, fill_t = phases(com)
    free_key, free_t = phases(rel)
    both, fi, ri = np.intersect1d(fill_key, free_key, assume_unique=True, return_indices=True)
    unit = both >> 32
    unit //= ch.num_stages
    t = np.r_[fill_t[fi], free_t[ri]]
    delta = np.r_[np.ones(both.size), -np.ones(both.size)]
    u = np.r_[unit, unit]
    order = np.lexsort((delta, t, u))  # by unit, then time; at one time, frees before fills
    u, t, v = u[order], t[order], delta[order]
    out = []
    for b in range(num_blocks):
        lo, hi = np.searchsorted(u, unit_of_block[b]), np.searchsorted(u, unit_of_block[b], side="right")
        if hi == lo:
            continue
        tb, vb = t[lo:hi], np.cumsum(v[lo:hi])
        keep = np.r_[tb[1:] != tb[:-1], True]  # the value after everything at that time
        out.append(CounterSeries(f"{ch.name} stages full", "stages", tb[keep].astype(np.int64), vb[keep], b))
    return out


def timer_step(trace: Trace) -> tuple[int, str]:
    """(step ns, "data" | "default"): the gcd of recorded times relative to the first, if 2..4096 ns."""
    ts = np.r_[trace.spans["start_ns"][:100_000], trace.spans["end_ns"][:100_000], trace.instants["ts_ns"][:100_000]]
    if ts.size > 1:
        d = ts - ts.min()
        d = d[d > 0]
        if d.size >= 8:
            g = int(np.gcd.reduce(d))
            if 2 <= g <= 4096:
                return g, "data"
    return wire.TIMER_STEP_NS, "default"
