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
  By time because lanes need not take part once per phase (pipeline_match.match_barrier says why;
  ::test_warp_scheduler_barrier_matched_by_time).
* Which k: a lane's own count of its waits of a stage is exact only if every wait left a record, but a
  wait that a successful try_wait skipped never runs and records nothing; the phases of the stage
  completed by the wait's end are exact only if signals are recorded no later than they act (the device
  records an arrive before it). Each is a lower bound of the true k under the other's failure (phase
  k+1 cannot complete before the wait of phase k ended: its producer first needed every consumer's
  release of phase k), so the larger one is used, and disagreements are counted (WAIT_DTYPE.check:
  test_waits.py::test_skipped_wait_records_matched_by_time, ::test_late_signal_is_counted).
  Inferred matches (next item) use time and the stage rotation; named barriers the count alone.
* Roles (statistics): a role is a group of the capture, or, when the lanes are warps (sidecar
  ``pipeline_lanes: "warp"``), a warp group of 4 warps ``wg<i>`` (::test_warp_lanes_grouped_into_warp_groups).
* Level "waits" (no commit / release instants traced: the op's id is absent from ``ids``): the match is
  *inferred* from program order, status "inferred": the bound is a record of the other side that provably
  precedes the signal (only blocked calls leave records, so counts per lane say nothing): for a consumer wait,
  the latest producer acquire of its stage that ended before it ("acquire->wait (inferred)"; a stage's first
  fill: the producer lane's anchor); for a producer acquire, the latest consumer wait that the stage rotation
  proves a whole rotation older ("wait->acquire (inferred)"). pipeline_match.match_inferred states the rules;
  test_waits_inferred.py guards them. The flow starts at that bound, the waited-on role is exact.
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
found no record that provably precedes the signal: the calls that would bound it did not block or a
successful try_acquire / try_wait skipped them, so they left no record), no_signal_recorded (nothing
signals this channel anywhere: e.g. level "waits" with neither acquire nor wait traced on the other side). Guarded by
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
from typing import Any

import numpy as np

from host_decode.analysis.pipeline_match import (
    ACQ,
    FLOW_KINDS,
    STATUS,
    STATUSES,
    UNMATCHED_REASONS,
    WAIT,
    WAIT_DTYPE,
    MatchContext,
    OpSlices,
    Records,
    event_lookup,
    match_barrier,
    match_inferred,
    stage_counters,
)
from host_decode.analysis.pipeline_meta import Channel, channels_of, units_of
from host_decode.core import wire
from host_decode.core.model import FLOW_DTYPE, CounterSeries, Trace


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



def analyze_pipelines(trace: Trace, cluster: Any = None) -> PipelineAnalysis:
    """Match every traced wait; ValueError if the sidecar declares no pipeline or barrier (a sidecar whose
    pipelines were all seen with no traced op, `pipelines_untraced`, gives an analysis with no channel).
    `cluster`: see channels_of (`ikp waits --cluster N`)."""
    channels = channels_of(trace.meta or {}, cluster)
    if not channels and not (trace.meta or {}).get("pipelines_untraced"):
        raise ValueError(
            "the capture's sidecar declares no 'pipelines' or 'barriers' (trace with ikp_cute.trace_pipelines)"
        )
    lut = event_lookup(channels)
    spans, inst = trace.spans, trace.instants
    s_ch, s_op, s_st = (a[spans["event"]] for a in lut)
    i_ch, i_op, i_st = (a[inst["event"]] for a in lut)
    span_at = OpSlices(s_ch, s_op, len(channels))
    inst_at = OpSlices(i_ch, i_op, len(channels))
    ctx = MatchContext.of(trace)

    parts, order, counters, uses = [], [], [], {}
    for c, ch in enumerate(channels):
        unit = units_of(ch, trace)
        if ch.kind == "barrier":
            sync, arrive = span_at(c, "bar_sync"), inst_at(c, "bar_arrive")
            if sync.size:
                parts.append(match_barrier(ctx, c, ch.barrier_id, unit, spans[sync], inst[arrive]))
                order.append(sync)
            continue

        def spans_of(op, time_field="end_ns"):
            idx = span_at(c, op)
            return Records.of_spans(spans[idx], s_st[idx], unit, ch.num_stages, time_field, idx)

        def instants_of(op):
            idx = inst_at(c, op)
            return Records.of_instants(inst[idx], i_st[idx], unit, ch.num_stages)

        acq, wai, com, rel = spans_of("acquire"), spans_of("wait"), instants_of("commit"), instants_of("release")
        # consumer waits <- commits, else (not traced) <- producer acquire ends (inferred); producer
        # acquires <- releases, else <- consumer wait ends (inferred)
        for waits, op, signal_op, signals, bound, kinds, dropped in (
            (wai, WAIT, "commit", com, "acquire", ("commit->wait", "acquire->wait (inferred)"), "producer_dropped"),
            (acq, ACQ, "release", rel, "wait", ("release->acquire", "wait->acquire (inferred)"), "consumer_dropped"),
        ):
            # a lane's first acquire per stage passes (empty barriers start a phase ahead), and so does its
            # first wait on a stage whose wait phase starts ahead
            shift = 1 if op == ACQ else np.isin(waits.stage, ch.first_wait_passes).astype(np.int64)
            if signal_op in ch.ids:
                part = ctx.match(waits, c, op, signals, shift, unit, kinds[0], "matched", dropped)
            else:
                bounds = {"acquire": acq, "wait": wai}[bound] if bound in ch.ids else None
                part = match_inferred(ctx, waits, c, op, bounds, shift, unit, kinds[1], dropped)
            if op == ACQ and ch.released_by == "tma_store":  # no lane released it: the TMA unit did
                part["status"] = STATUS["tma_store"]
                for field in ("src_lane", "src_ns", "kind", "phase"):
                    part[field] = -1
            parts.append(part)
        order += [wai.index, acq.index]
        for op, r in ((WAIT, rel), (ACQ, com)):
            if ("release" if op == WAIT else "commit") in ch.ids:
                groups, n = np.unique(r.lane % trace.num_groups, return_counts=True)
                uses.update({(c, op, int(g)): int(k) for g, k in zip(groups.tolist(), n.tolist())})
        if "commit" in ch.ids and "release" in ch.ids:
            counters.extend(stage_counters(ch, com, rel, unit, trace.num_blocks))
    waits = np.concatenate(parts) if parts else np.zeros(0, WAIT_DTYPE)
    if parts:  # the span table's order: by lane, then program order
        waits = waits[np.argsort(np.concatenate(order), kind="stable")]
    step, source = timer_step(trace)
    first = waits[(waits["status"] == STATUS["first_use"]) & (waits["op"] == ACQ)]
    passing = int(np.median(first["end_ns"] - first["start_ns"])) if first.size >= 4 else None
    return PipelineAnalysis(channels, waits, counters, step, source, pass_through_ns=passing, uses=uses)



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
