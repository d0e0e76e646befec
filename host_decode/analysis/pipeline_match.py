"""The matching behind host_decode.analysis.pipelines (its docstring states the rules): the vocabulary of
the waits table (ops, statuses, flow kinds, WAIT_DTYPE) and the machinery that pairs each wait with the
signal phase that released it.

* Records: one op's records of one channel, with each record's k (its lane's k-th on that stage);
* MatchContext.match: waits <- the phase table of their signals (the latest of the signalling lanes'
  k-th signals per unit and stage), by count, by time or by the larger of the two;
* match_inferred: waits whose signal op is not traced <- the latest record of the other side that provably
  precedes the signal (time and the ring's stage rotation; a first fill: the producer lane's anchor);
* match_barrier: named-barrier syncs <- the latest arrival by time;
* stage_counters: the "stages full" counter series per block.

Invariants, and the tests that guard them (tests/unit/host_decode/analysis/test_waits.py): every wait that ended gets
exactly one status (::test_consumer_overflow_and_missing_lane); count and time disagreements are counted
(::test_skipped_wait_records_matched_by_time, ::test_late_signal_is_counted); barriers match by time
(::test_warp_scheduler_barrier_matched_by_time); hand-computed matches (::test_waits_numbers_by_hand); an
inferred bound precedes the signal it stands for (test_waits_inferred.py: by hand, and against the protocol's
true times on random rings; ::test_an_inferred_bound_never_ends_after_the_wait_it_released).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.pipeline_meta import IGNORED_OPS, PIPELINE_OPS, Channel
from host_decode.core import wire
from host_decode.core.model import CounterSeries, Trace

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
CHECK_TIME_AHEAD, CHECK_COUNT_AHEAD = 1, 2

ACQ, WAIT, SYNC = range(3)
STATUS = {name: i for i, name in enumerate(STATUSES)}
KIND = {name: i for i, name in enumerate(FLOW_KINDS)}



OP = {op: i for i, op in enumerate(PIPELINE_OPS + ("bar_sync", "bar_arrive") + IGNORED_OPS)}
OP_NAME = {i: op for op, i in OP.items()}


class OpSlices:
    """Indices of the rows of each (channel, op), grouped by one stable sort (rows keep their order)."""

    def __init__(self, channel: np.ndarray, op: np.ndarray, num_channels: int):
        idx = np.flatnonzero(channel >= 0)
        code = channel[idx] * len(OP) + op[idx]
        sort = np.argsort(code, kind="stable")
        self.idx = idx[sort]
        self.bounds = np.searchsorted(code[sort], np.arange(num_channels * len(OP) + 1))

    def __call__(self, channel: int, op: str) -> np.ndarray:
        k = channel * len(OP) + OP[op]
        return self.idx[self.bounds[k] : self.bounds[k + 1]]


def event_lookup(channels: list[Channel]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """event id -> (channel, op, stage) arrays over all 1024 ids (-1: not a pipeline event)."""
    ch_of, op_of, st_of = (np.full(wire.MAX_EVENT_ID + 1, -1, np.int64) for _ in range(3))
    for c, ch in enumerate(channels):
        for op, base in ch.ids.items():
            for s in range(ch.num_stages):
                e = base + s
                if ch_of[e] >= 0 and ch.kind == "pipeline":
                    other = channels[ch_of[e]]
                    raise ValueError(
                        f"sidecar: event id {e} is both {other.name}.{OP_NAME[op_of[e]]} and {ch.name}.{op}[{s}]"
                    )
                if ch_of[e] < 0:  # a pipeline's id wins over a barrier id that happens to coincide
                    ch_of[e], op_of[e], st_of[e] = c, OP[op], s
    return ch_of, op_of, st_of



@dataclasses.dataclass
class Records:
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
            occurrence(lane, stage, spans["start_ns"], num_stages),
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
            occurrence(lane, stage, inst["ts_ns"], num_stages),
            None,
            num_stages,
        )


def occurrence(lane: np.ndarray, key: np.ndarray, t: np.ndarray, num_keys: int) -> np.ndarray:
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


class MatchContext:
    def __init__(self, trace: Trace, lane_present: np.ndarray, lane_dropped: np.ndarray):
        self.trace, self.present, self.dropped = trace, lane_present, lane_dropped
        self.last_ns = np.full(trace.num_lanes, -1, np.int64)
        self.last_ns[trace.lanes["lane"]] = trace.lanes["last_ns"]

    @classmethod
    def of(cls, trace: Trace) -> "MatchContext":
        """The lanes of `trace` that wrote anything, and those that overflowed."""
        present = np.zeros(trace.num_lanes, bool)
        present[trace.lanes["lane"]] = True
        dropped = np.zeros(trace.num_lanes, bool)
        dropped[trace.lanes["lane"]] = trace.lanes["dropped"] > 0
        return cls(trace, present, dropped)

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
        waits: Records,
        channel: int,
        op: int,
        sig: Records | None,
        shift,
        unit_of_block,
        kind: str,
        status: str,
        dropped_reason: str,
        by: str = "count+time",
    ) -> np.ndarray:
        """Rows for `waits`: each pairs with a phase of the signal records `sig` (phase k = the latest of the
        signalling lanes' k-th signals of that unit and stage). Which phase (shift 1, per wait or for all: a
        lane's first wait per stage passes):
        by "count": the lane's k - shift; "time": the latest phase completed by the wait's end (`waits.t`);
        "count+time": the larger of the two (see the module docstring: each is a lower bound of the truth,
        under skipped wait records and late signal records respectively). Bounds of untraced signals:
        match_inferred."""
        out = wait_rows(waits, channel, op)
        by_count = waits.k - shift
        if sig is None or sig.lane.size == 0:
            first = by_count < 0
            out["status"] = np.where(first, STATUS["first_use"], STATUS["no_signal_recorded"])
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
        by_time = phases_before(phase_code // kmax, phase_t, w_us, waits.t) - 1
        target = {"count": by_count, "time": by_time, "count+time": np.maximum(by_count, by_time)}[by]
        todo = target >= 0
        beyond = STATUS["occurrence_beyond_signal"]
        out["status"][~todo] = np.where(by_count[~todo] < 0, STATUS["first_use"], beyond)
        if by == "count+time":
            out["check"] = np.where(
                by_time > by_count, CHECK_TIME_AHEAD, np.where(by_count > by_time, CHECK_COUNT_AHEAD, 0)
            )
        wcode = w_us * kmax + target
        pos = np.clip(np.searchsorted(phase_code, wcode), 0, max(phase_code.size - 1, 0))
        found = todo & (phase_code[pos] == wcode)
        full = found & (phase_lanes[pos] >= n_present[waits.unit])
        u = waits.unit
        # a signalling lane that overflowed before the wait ended may have lost the releasing signal
        reason = np.where(waits.t > cut[u], STATUS[dropped_reason], np.where(missing[u], STATUS["lane_missing"], -1))
        # no signal at all in this unit while other units have them: the signals went to this CTA from
        # another one (a cluster-scoped pipeline whose metadata does not say so)
        silent = np.bincount(sig.unit, minlength=int(unit_of_block.max()) + 1)[u] == 0
        reason = np.where((reason < 0) & silent, STATUS["signal_in_other_cta"], reason)
        # a phase with every present signalling lane is matched unless a lane of the unit is missing; a
        # phase with fewer lanes only when no lane of the unit is missing or overflowed before the wait ended
        ok = np.where(full, ~missing[u], found & (reason < 0))
        out["status"][todo] = np.where(
            ok[todo], STATUS[status], np.where(reason[todo] >= 0, reason[todo], beyond)
        )
        out["phase"] = np.where(todo, target, -1)
        out["src_lane"] = np.where(ok, phase_lane[pos], -1)
        out["src_ns"] = np.where(ok, phase_t[pos], -1)
        out["kind"] = np.where(ok, KIND[kind], -1)
        return out


def phases_before(phase_key: np.ndarray, phase_t: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
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


def match_inferred(ctx: MatchContext, waits: Records, channel: int, op: int, bounds: Records | None, shift,
                   unit_of_block: np.ndarray, kind: str, dropped_reason: str) -> np.ndarray:
    """Rows for `waits` when their signal op is not traced (level "waits", where only blocked calls leave a
    record): each gets the latest record of the signalling side that provably precedes its signal in program
    order, a lower bound of the signal (status inferred). `bounds`: the other side's regions (producer acquires
    for consumer waits, consumer waits for producer acquires); the ring's protocol orders them:
    * consumer wait of stage s ending at e (use n) <- the latest producer acquire of stage s in the unit that
      ended before e: its use is at most n (the acquire of use n + S needs this consumer's release of use n,
      which follows e), so it precedes the commit of use n. A stage's first fill has none (its acquire cannot
      block, so it is never recorded): its bound is then the latest anchor of the unit's producer lanes (the
      lane's start, written at the kernel's entry before any call; anchored captures only);
    * producer acquire of stage s ending at a (use n) <- the latest consumer wait of the unit that ended before
      the producer's own latest acquire of its stage s' ended, among those at or before a: that acquire has use
      at most n and, ending after the wait, a use at least a rotation past the wait's, so the wait's use is at
      most n - S and precedes its lane's release of use n - S, which this acquire waited for (s' = s: the
      acquire itself). A stage's first use has no such wait (status first_use).
    Ties in time order nothing (strictly before). No bound: first_use (a lane's first acquire of a stage,
    `shift`, unless the sidecar says only blocked calls were recorded), else the reason (a signalling lane
    dropped records before the wait ended, none in the unit, missing, or bound_not_recorded)."""
    out = wait_rows(waits, channel, op)
    by_count = waits.k - shift
    if bounds is None or bounds.lane.size == 0:
        out["status"] = np.where(by_count < 0, STATUS["first_use"], STATUS["no_signal_recorded"])
        return out
    S, n = waits.num_stages, waits.lane.size
    times, rank = np.unique(np.r_[bounds.t, waits.t], return_inverse=True)
    nr = times.size + 1
    b_rank, w_rank = rank[: bounds.t.size], rank[bounds.t.size :]
    # bounds by (unit, stage, time): the latest strictly before a time is one searchsorted away
    b_key = (bounds.unit * S + bounds.stage) * nr + b_rank
    b_order = np.argsort(b_key, kind="stable")
    b_key = b_key[b_order]

    def latest_before(unit, stage, r):
        """Index into `bounds` of the latest of (unit, stage) with time rank < r, -1 when none."""
        want = (unit * S + stage) * nr + r
        pos = np.searchsorted(b_key, want) - 1
        ok = (pos >= 0) & (b_key[np.maximum(pos, 0)] // nr == unit * S + stage) & (r >= 0)
        return np.where(ok, b_order[np.maximum(pos, 0)], -1)

    if op == WAIT:
        best = latest_before(waits.unit, waits.stage, w_rank)
    else:
        # per stage s': the rank of the acquiring lane's latest acquire of s' ending at or before this one's end
        a_key = (waits.lane * S + waits.stage) * nr + w_rank
        a_sorted = np.sort(a_key)
        best = np.full(n, -1)
        for s2 in range(S):
            lane_stage = waits.lane * S + s2
            pos = np.searchsorted(a_sorted, lane_stage * nr + w_rank, side="right") - 1
            hit = (pos >= 0) & (a_sorted[np.maximum(pos, 0)] // nr == lane_stage)
            lim = np.where(hit, a_sorted[np.maximum(pos, 0)] % nr, -1)
            cand = latest_before(waits.unit, np.full(n, s2), lim)
            later = (cand >= 0) & ((best < 0) | (bounds.t[np.maximum(cand, 0)] > bounds.t[np.maximum(best, 0)]))
            best = np.where(later, cand, best)
    found = best >= 0
    src_lane = np.where(found, bounds.lane[np.maximum(best, 0)], -1)
    src_ns = np.where(found, bounds.t[np.maximum(best, 0)], -1)
    # a lane's first call of a stage that cannot block (a stage's first acquire): only where the sidecar does not
    # say that calls that did not block were left out (pipeline_options.passing_waits false: every record blocked)
    options = (ctx.trace.meta or {}).get("pipeline_options") or {}
    first = ~found & (by_count < 0) & (options.get("passing_waits", True) is not False)
    signal_groups = np.unique(bounds.lane % ctx.trace.num_groups)
    if op == WAIT:  # a first fill: the latest anchor of the unit's producer lanes
        a_lane, a_ns = anchors_of(ctx, signal_groups, unit_of_block)
        anchor = ~found & ~first & (a_ns[waits.unit] >= 0)
        src_lane = np.where(anchor, a_lane[waits.unit], src_lane)
        src_ns = np.where(anchor, a_ns[waits.unit], src_ns)
        found |= anchor
    _, missing, cut = ctx.unit_health(signal_groups, unit_of_block)
    u = waits.unit
    silent = np.bincount(bounds.unit, minlength=int(unit_of_block.max()) + 1)[u] == 0
    reason = np.where(waits.t > cut[u], STATUS[dropped_reason],
                      np.where(silent, STATUS["signal_in_other_cta"],
                               np.where(missing[u], STATUS["lane_missing"], STATUS["bound_not_recorded"])))
    out["status"] = np.where(found, STATUS["inferred"], np.where(first, STATUS["first_use"], reason))
    out["src_lane"], out["src_ns"] = src_lane, src_ns
    out["kind"] = np.where(found, KIND[kind], -1)
    return out


def anchors_of(ctx: MatchContext, groups: np.ndarray, unit_of_block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, over the anchored lanes of `groups` in its blocks: (the lane whose anchor is latest, its time);
    (-1, -1) for a unit without one. An anchor is written at the kernel's entry, before any call of its lane."""
    ln = ctx.trace.lanes
    keep = ln["anchored"] & np.isin(ln["group"], groups) & (ln["first_ns"] >= 0)
    lane, t = ln["lane"][keep].astype(np.int64), ln["first_ns"][keep].astype(np.int64)
    unit = unit_of_block[ln["block"][keep]]
    nu = int(unit_of_block.max()) + 1
    order = np.lexsort((t, unit))
    last = np.r_[unit[order][1:] != unit[order][:-1], True] if order.size else np.zeros(0, bool)
    a_lane, a_ns = np.full(nu, -1, np.int64), np.full(nu, -1, np.int64)
    a_lane[unit[order][last]], a_ns[unit[order][last]] = lane[order][last], t[order][last]
    return a_lane, a_ns


def wait_rows(waits: Records, channel: int, op: int) -> np.ndarray:
    sp = waits.rows
    out = np.zeros(sp.size, WAIT_DTYPE)
    for f in ("lane", "block", "group", "start_ns", "end_ns"):
        out[f] = sp[f]
    out["channel"], out["op"], out["stage"], out["occurrence"] = channel, op, waits.stage, waits.k
    out["src_lane"], out["src_ns"], out["kind"], out["phase"] = -1, -1, -1, -1
    return out


def match_barrier(
    ctx: MatchContext, c: int, barrier_id: int, unit_of_block, sync: np.ndarray, arrive: np.ndarray
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
    out["channel"], out["op"], out["stage"] = c, SYNC, barrier_id
    out["occurrence"] = occurrence(sync["lane"].astype(np.int64), np.zeros(sync.size, np.int64), sync["start_ns"], 1)
    out["src_lane"], out["src_ns"], out["kind"], out["phase"] = -1, -1, -1, -1
    lane = np.r_[sync["lane"], arrive["lane"]].astype(np.int64)
    t = np.r_[sync["start_ns"], arrive["ts_ns"]].astype(np.int64)
    is_sync = np.r_[np.ones(sync.size, bool), np.zeros(arrive.size, bool)]
    unit = unit_of_block[np.r_[sync["block"], arrive["block"]]]
    # arrivals by (unit, time); at one time another lane's arrival sorts after the waiting lane's own
    order = np.lexsort((t, unit))
    u_s, t_s = unit[order], t[order]
    w_unit, w_end = unit[: sync.size], sync["end_ns"].astype(np.int64)
    pos = phases_before(u_s, t_s, w_unit, w_end) - 1 + np.searchsorted(u_s, w_unit)  # latest arrival <= end
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
        w_end > cut[w_unit], STATUS["participant_dropped"], np.where(missing[w_unit], STATUS["lane_missing"], -1)
    )
    ok = reason < 0
    out["status"] = np.where(ok, np.where(lane[rec] == out["lane"], STATUS["self"], STATUS["matched"]), reason)
    out["src_lane"] = np.where(ok, lane[rec], -1)
    out["src_ns"] = np.where(ok, t[rec], -1)
    out["kind"] = np.where(ok, np.where(is_sync[rec], KIND["bar_sync->bar_sync"], KIND["bar_arrive->bar_sync"]), -1)
    return out


def stage_counters(ch: Channel, com: Records, rel: Records, unit_of_block, num_blocks: int) -> list[CounterSeries]:
    """Per block: stages whose k-th commit phase completed and whose k-th release phase did not yet."""

    def phases(r: Records):
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
