"""Async units: from traced pipelines alone, per block and pipeline stage use, the interval from an
asynchronous unit's issue (a TMA load, a UMMA) to its completion, as bounds that hold, never a guess.

Which side of which pipeline is an async unit (async_sides; the sidecar's ``op_type`` is the producer agent
of the full barriers, and cutlass names its classes Pipeline<producer><consumer>):
* full side, a stage's data (commit -> wait): the producer's arrive is the TMA unit's (op_type TmaLoad, else a
  class PipelineTma*) or UMMA's tcgen05.commit (op_type TCGen05Mma, else PipelineUmma*). issue = the commit
  (arrive.expect_tx, just before the TMA copy; the MMA warp's commit), ready = the full barrier's phase
  completing (data landed, accumulator ready);
* empty side, a stage freed (release -> acquire): the consumer's release is a tcgen05.commit (class *Umma:
  PipelineTmaUmma, PipelineAsyncUmma). issue = the MMA warp's release, ready = the MMAs reading the stage
  done (its empty barrier's phase completing).

The chain every use k of a stage follows on one CTA's barriers (the device records a signal just before its
arrive, a region's times around its blocking call), with the ops of each side:
    anchor(k) end <= signal(k) <= issue(k) <= ready(k) <= waiting(k) end <= follow-up(k) <= anchor(k+1) end
    full:  anchor = producer acquire, signal = commit,  waiting = consumer wait,  follow-up = release;
    empty: anchor = consumer wait,    signal = release, waiting = producer acquire (its next use), follow-up = commit;
and a waiting region that blocked began before ready(k).

Intervals (INTERVAL_DTYPE): issue in [issue_lo, issue_hi], ready in [ready_lo, ready_hi], ns, -1 = no bound.
* Signal traced (level signals): one interval per complete signal phase k (the latest of the unit's
  signalling lanes' k-th signals) and block of its unit. issue = that signal, measured: from its time to at most
  SIGNAL_RECORD_LEAD_NS later (the record block and the arrive come between the timer read and the unit's
  start), before its lane's next record, not after ready_hi. Evidence of the block is
  given its phase by time: k = (complete phases of its unit and stage whose signal is earlier) - 1. ready_hi =
  the earliest wait end or follow-up of phase >= k (the "next observed" one: later phases complete later), or
  for a block-local pipeline the next phase's signal (it follows every release of phase k). ready is exact when
  a waiting region of phase k blocked: ready in [max(end - step, begin), end] with end its earliest end (the
  waiter wakes within one timer step of the phase completing, the same reading that makes a blocked wait's
  end its release time); else bounded, ready_lo = issue. A region blocked only when it lasted longer than a
  recorded pass can (PASSING_WAIT_NS, or the capture's pass-through cost if longer).
* Signal not traced (level waits): ready is exact only where a waiting region blocked. Blocked regions of one
  block and stage that began before the first of them ended waited for one phase (the same wake-up reading):
  one interval each group, ready exact, issue in [the latest anchor end of the block before it, ready_hi]
  (that anchor's use is not later). Every anchor that is no group's latest one is a use of its own: issue and
  ready in [its end, the first waiting end after it, or its lane's next anchor end for a block-local pipeline].
* Only evidence that provably belongs to a phase tightens it: a region ending at the very tick of the next
  phase's signal, or after a signalling lane overflowed, only bounds from above. Phases a signalling lane
  dropped or never wrote give no interval; they are counted (``not_used``), as is evidence that fits no phase.
Classes (CLASSES): exact (issue and ready measured), issue_bounded (ready measured), ready_bounded (issue
measured), unbounded (neither); an interval without an upper ready bound or a lower issue bound is ``open``.

Invariants, and the tests that guard them (tests/unit/host_decode/analysis/test_async_units.py): intervals and
bounds of hand-built captures whose issue and ready times are known, exact / issue-bounded / ready-bounded /
unbounded, several stages, phases past the parity wrap and a timer wrap (::test_signals_level_by_hand,
::test_waits_level_by_hand, ::test_timer_wrap_gives_the_same_intervals); the issue within the record's lead or
before the lane's next record (::test_the_issue_lies_within_the_record_path_or_before_the_lanes_next_record); a
wait as short as a pass measures nothing (::test_a_wait_as_short_as_a_pass_does_not_measure_ready); the true
times lie inside every interval's bounds on randomized pipelines
(::test_bounds_contain_the_truth_on_random_pipelines); on the real probe captures, within one timer step of the
observer's ground truth
(tests/unit/host_decode/analysis/test_persistent_gemm_captures.py::test_tma_probe_intervals_contain_the_ground_truth).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.pipeline_coverage import untraced_reason
from host_decode.analysis.pipeline_match import MatchContext, OpSlices, Records, event_lookup
from host_decode.analysis.pipeline_meta import Channel, units_of
from host_decode.analysis.pipelines import PipelineAnalysis, analyze_pipelines
from host_decode.core.model import Trace

SIDES = ("full", "empty")
UNITS = ("TMA", "UMMA")
CLASSES = ("exact", "issue_bounded", "ready_bounded", "unbounded")
SIDE_OPS = {  # the chain of each side (module docstring)
    "full": {"signal": "commit", "anchor": "acquire", "waiting": "wait", "followup": "release"},
    "empty": {"signal": "release", "anchor": "wait", "waiting": "acquire", "followup": "commit"},
}
FULL_UNIT_OF_OP_TYPE = {"TmaLoad": "TMA", "TCGen05Mma": "UMMA"}
COMPLETES = {("full", "TMA"): "data landed", ("full", "UMMA"): "accumulator ready",
             ("empty", "UMMA"): "stage's operands read"}
NONE = -1
_INF = np.iinfo(np.int64).max
# How long after a signal instant's time the signal's own unit starts, at most: the instant reads %globaltimer
# first, then writes its record (state load, store, state update: ~22 SASS) and only then arrives; a TMA
# producer's copy follows its arrive.expect_tx. Measured on an H200 (2026-11-29, the TMA probe,
# examples/persistent_gemm/captures/tma_probe_*.npy, 256 loads at level signals): from the commit instant to the
# probe's own %globaltimer read just before its copy, 32 ns (88 loads) or 64 ns (168), never more; two reads of
# a 32 ns timer 64 ns apart lie less than 96 ns apart. The committing lane's next record bounds it too.
SIGNAL_RECORD_LEAD_NS = 96
# How long a recorded wait that passed can last (its phase had completed before it began; level all or
# passing_waits=True record it): the record's own reads and stores around a try_wait that succeeds at once.
# Measured on an H200: 64 or 96 ns for the 116 consumer waits of the TMA probe (2026-11-29) that the probe's
# observer saw complete before the wait began, 32 to 96 ns for quack's 128 scheduler waits (2026-11-27,
# examples/pipelines/quack_gemm_sm90_signals.npy) that began after another warp's wait of the same phase ended.
# A wait no longer than this proves nothing about when its phase completed.
PASSING_WAIT_NS = 96

INTERVAL_DTYPE = np.dtype(
    [
        ("block", np.int64),
        ("channel", np.int32),  # index into AsyncUnits.channels
        ("side", np.int8),  # index into SIDES
        ("unit", np.int8),  # index into UNITS
        ("stage", np.int32),
        ("phase", np.int64),  # k: the stage's k-th use, -1 when not known (signal not traced)
        ("issue_lo", np.int64),
        ("issue_hi", np.int64),
        ("ready_lo", np.int64),
        ("ready_hi", np.int64),
        ("cls", np.int8),  # index into CLASSES
    ]
)


def async_sides(ch: Channel) -> list[tuple[str, str]]:
    """(side, unit) of each async unit of a pipeline channel (module docstring)."""
    if ch.kind != "pipeline" or ch.released_by or ch.cls.startswith("PipelineTmaStore"):
        return []
    out = []
    full = FULL_UNIT_OF_OP_TYPE.get(ch.op_type)
    if full is None and ch.op_type in ("", "Composite"):
        full = "TMA" if ch.cls.startswith("PipelineTma") else "UMMA" if ch.cls.startswith("PipelineUmma") else None
    if full is not None:
        out.append(("full", full))
    if ch.cls.endswith("Umma"):
        out.append(("empty", "UMMA"))
    return out


@dataclasses.dataclass
class AsyncUnits:
    channels: list[Channel]
    intervals: np.ndarray  # INTERVAL_DTYPE, by channel, side, block, stage, issue
    sources: list[dict]  # per (channel, side): what bounds issue and ready, and what was not used (not_used)
    timer_step_ns: int

    def of(self, channel: int, side: str) -> np.ndarray:
        iv = self.intervals
        return iv[(iv["channel"] == channel) & (iv["side"] == SIDES.index(side))]


@dataclasses.dataclass
class _Rows:
    """One op's records of one channel: lane, block, stage, start, end (instants: start = end)."""

    lane: np.ndarray
    block: np.ndarray
    stage: np.ndarray
    start: np.ndarray
    end: np.ndarray


def analyze_async_units(trace: Trace, analysis: PipelineAnalysis | None = None) -> AsyncUnits:
    """Every async-unit interval of the capture's traced pipelines (module docstring)."""
    pa = analysis or analyze_pipelines(trace)
    lut = event_lookup(pa.channels)
    spans, inst = trace.spans, trace.instants
    s_ch, s_op, s_st = (a[spans["event"]] for a in lut)
    i_ch, i_op, i_st = (a[inst["event"]] for a in lut)
    span_at, inst_at = OpSlices(s_ch, s_op, len(pa.channels)), OpSlices(i_ch, i_op, len(pa.channels))
    ctx = MatchContext.of(trace)
    blocks = np.unique(trace.lanes["block"][trace.lanes["first_ns"] >= 0]).astype(np.int64)
    step, blocked_above = pa.timer_step_ns, max(pa.blocked_above_ns, PASSING_WAIT_NS)
    next_record = _NextRecord(trace)
    parts, sources = [], []
    for c, ch in enumerate(pa.channels):
        for side, unit in async_sides(ch):
            ops = SIDE_OPS[side]

            def rows(op: str) -> _Rows | None:
                if op not in ch.ids:
                    return None
                if op in ("acquire", "wait"):
                    i = span_at(c, op)
                    return _Rows(spans["lane"][i].astype(np.int64), spans["block"][i].astype(np.int64),
                                 s_st[i], spans["start_ns"][i].astype(np.int64), spans["end_ns"][i].astype(np.int64))
                i = inst_at(c, op)
                t = inst["ts_ns"][i].astype(np.int64)
                return _Rows(inst["lane"][i].astype(np.int64), inst["block"][i].astype(np.int64), i_st[i], t, t)

            unit_of_block = units_of(ch, trace)
            sig, anchor, waiting, follow = (rows(ops[k]) for k in ("signal", "anchor", "waiting", "followup"))
            not_used: dict[str, int] = {}
            meta = trace.meta or {}
            if sig is not None and sig.lane.size:
                records = Records.of_instants(inst[inst_at(c, ops["signal"])], sig.stage, unit_of_block, ch.num_stages)
                iv = _by_phase(ctx, ch, side, records, unit_of_block, blocks, waiting, follow, step, blocked_above,
                               not_used, next_record)
                issue = f"{ops['signal']} (measured: within {SIGNAL_RECORD_LEAD_NS} ns after it)"
            else:
                iv = _by_waits(ch, side, anchor, waiting, step, blocked_above, not_used)
                why = (untraced_reason(meta, ch.name, ops["signal"]) if sig is None
                       else f"no {ops['signal']} recorded")
                issue = (f"after the {ops['anchor']} ends (bounded; {ops['signal']}: {why})" if anchor is not None
                         else f"not bounded ({ops['signal']}: {why}; {ops['anchor']}: "
                              f"{untraced_reason(meta, ch.name, ops['anchor'])})")
            iv["channel"], iv["side"], iv["unit"] = c, SIDES.index(side), UNITS.index(unit)
            parts.append(iv)
            ready = (f"{ops['waiting']} end (exact when it blocked)" if waiting is not None
                     else f"bounded by later records ({ops['waiting']}: "
                          f"{untraced_reason(meta, ch.name, ops['waiting'])})")
            sources.append({"channel": c, "name": ch.name, "side": side, "unit": unit,
                            "completes": COMPLETES[(side, unit)], "issue": issue, "ready": ready,
                            "by": "phase" if sig is not None and sig.lane.size else "waits",
                            "not_used": {k: v for k, v in not_used.items() if v}})
    intervals = np.concatenate(parts) if parts else np.zeros(0, INTERVAL_DTYPE)
    order = np.lexsort((intervals["issue_lo"], intervals["stage"], intervals["block"], intervals["side"],
                        intervals["channel"]))
    return AsyncUnits(pa.channels, intervals[order], sources, step)


def _classify(iv: np.ndarray, issue_exact: np.ndarray, ready_exact: np.ndarray) -> None:
    iv["cls"] = np.where(issue_exact, np.where(ready_exact, 0, 2), np.where(ready_exact, 1, 3))


def _count(not_used: dict, reason: str, n) -> None:
    not_used[reason] = not_used.get(reason, 0) + int(np.sum(n))


class _NextRecord:
    """The time of a lane's first record after a given time (any record: a later one comes later in program
    order), from one sort of the capture's record times by lane."""

    def __init__(self, trace: Trace):
        sp, inst = trace.spans, trace.instants
        lane = np.concatenate([sp["lane"], sp["lane"], inst["lane"]]).astype(np.int64)
        t = np.concatenate([sp["start_ns"], sp["end_ns"], inst["ts_ns"]]).astype(np.int64)
        self.times, rank = np.unique(t, return_inverse=True)
        self.n = self.times.size + 1
        self.key = np.sort(lane * self.n + rank)  # (lane, time rank): whole numbers far below 2**63

    def after(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per (lane, t): the lane's first record time later than t, int64 max when there is none."""
        if not self.key.size:
            return np.full(np.shape(t), _INF)
        want = lane * self.n + np.searchsorted(self.times, t, side="right")
        pos = np.searchsorted(self.key, want)
        hit = np.minimum(pos, self.key.size - 1)
        same = (pos < self.key.size) & (self.key[hit] // self.n == lane)
        return np.where(same, self.times[np.minimum(self.key[hit] % self.n, self.times.size - 1)], _INF)


def _by_phase(ctx: MatchContext, ch: Channel, side: str, sig: Records, unit_of_block: np.ndarray, blocks: np.ndarray,
              waiting: _Rows | None, follow: _Rows | None, step: int, blocked_above: int, not_used: dict,
              next_record: _NextRecord) -> np.ndarray:
    """Signal traced: one interval per complete signal phase and block of its unit (module docstring)."""
    S = ch.num_stages
    present, missing, cut = ctx.unit_health(np.unique(sig.lane % ctx.trace.num_groups), unit_of_block)
    kmax = int(sig.k.max()) + 1
    code = (sig.unit * S + sig.stage) * kmax + sig.k
    order = np.lexsort((sig.t, code))
    cs = code[order]
    last = np.r_[cs[1:] != cs[:-1], True]
    p_code, p_t, p_lane = cs[last], sig.t[order][last], sig.lane[order][last]
    p_lanes = np.diff(np.r_[np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]]), cs.size])
    p_key, p_k = p_code // kmax, p_code % kmax
    p_unit = p_key // S
    # a phase is whole when every present signalling lane of the unit gave it, or when none overflowed (then
    # every signal made was recorded); a lane that never wrote leaves every phase of its unit in doubt
    complete = ~missing[p_unit] & ((p_lanes >= present[p_unit]) | (cut[p_unit] == _INF))
    _count(not_used, "phases a signalling lane dropped or never wrote", ~complete)
    c_key, c_t = p_key[complete], p_t[complete]
    next_t = np.where(np.r_[p_key[1:] == p_key[:-1], False], np.r_[p_t[1:], NONE], NONE)
    if ch.cluster_size > 1:
        next_t[:] = NONE  # another CTA's signal need not follow this CTA's releases

    # occurrences: complete phases x the unit's blocks that recorded anything
    b_unit = unit_of_block[blocks]
    by_unit = np.argsort(b_unit, kind="stable")
    b_sorted, u_sorted = blocks[by_unit], b_unit[by_unit]
    phase = np.flatnonzero(complete)
    lo = np.searchsorted(u_sorted, p_unit[phase])
    n = np.searchsorted(u_sorted, p_unit[phase], side="right") - lo
    first = np.cumsum(n) - n
    ph = np.repeat(phase, n)
    occ_block = b_sorted[np.repeat(lo, n) + np.arange(int(n.sum())) - np.repeat(first, n)]
    occ_stage, occ_k = p_key[ph] % S, p_k[ph]
    km = kmax + 1
    occ_code = (occ_block * S + occ_stage) * km + occ_k
    o = np.argsort(occ_code, kind="stable")
    occ_code, occ_block, occ_stage, occ_k, ph = occ_code[o], occ_block[o], occ_stage[o], occ_k[o], ph[o]

    times = np.concatenate([c_t, sig.t] + [r.end for r in (waiting, follow) if r is not None])
    t0, span = int(times.min()), int(times.max() - times.min()) + 2
    if (int(c_key.max(initial=0)) + 1) * span >= 1 << 62:
        raise ValueError(f"pipeline {ch.name}: the capture spans too long a time to order its records")
    phase_at = np.sort(c_key * span + (c_t - t0))  # complete phases by (unit and stage, time)

    def identify(r: _Rows, t: np.ndarray):
        """(phase k of each record, whether it provably belongs to exactly that phase)."""
        u = unit_of_block[r.block]
        key = u * S + r.stage
        first = np.searchsorted(phase_at, key * span)
        before = np.searchsorted(phase_at, key * span + (t - t0)) - first  # signalled strictly before t
        at_or_before = np.searchsorted(phase_at, key * span + (t - t0), side="right") - first
        return before - 1, (at_or_before == before) & (t <= cut[u]) & ~missing[u]

    hi_code, hi_val = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    eb = np.full(occ_code.size, _INF)
    lb = np.full(occ_code.size, NONE)
    for r, is_wait in ((waiting, True), (follow, False)):
        if r is None or not r.lane.size:
            continue
        j, sure = identify(r, r.end)
        if is_wait and side == "full":
            _count(not_used, "waits ended before any whole phase", j < 0)
        use = j >= 0
        hi_code.append(((r.block * S + r.stage) * km + j)[use])
        hi_val.append(r.end[use])
        if is_wait:
            blocked = use & sure & ((r.end - r.start) > blocked_above)
            bc = (r.block * S + r.stage) * km + j
            pos = np.clip(np.searchsorted(occ_code, bc), 0, max(occ_code.size - 1, 0))
            hit = blocked & (occ_code.size > 0) & (occ_code[pos] == bc)
            np.minimum.at(eb, pos[hit], r.end[hit])
            np.maximum.at(lb, pos[hit], r.start[hit])
    hc, hv = np.concatenate(hi_code), np.concatenate(hi_val)
    order = np.lexsort((hv, hc))
    hc, hv = hc[order], hv[order]
    pos = np.searchsorted(hc, occ_code)  # the first evidence of phase >= k of the block and stage
    ok = (pos < hc.size) & (hc[np.minimum(pos, max(hc.size - 1, 0))] // km == occ_code // km) if hc.size else \
        np.zeros(occ_code.size, bool)
    ready_hi = np.where(ok, hv[np.minimum(pos, max(hc.size - 1, 0))] if hc.size else 0, _INF)
    nxt = next_t[ph]
    ready_hi = np.where(nxt >= 0, np.minimum(ready_hi, nxt), ready_hi)
    issue = p_t[ph]
    exact = (eb < _INF) & (ready_hi >= eb - step)
    ready_lo = np.maximum(issue, lb)
    ready_lo = np.where(exact, np.maximum(ready_lo, eb - step), ready_lo)
    contradiction = (ready_hi < _INF) & (ready_lo > ready_hi)
    _count(not_used, "uses whose evidence contradicts itself", contradiction)
    keep = ~contradiction
    iv = np.zeros(int(keep.sum()), INTERVAL_DTYPE)
    iv["block"], iv["stage"], iv["phase"] = occ_block[keep], occ_stage[keep], occ_k[keep]
    iv["issue_lo"] = issue[keep]
    # the unit starts after the signal's record block: within SIGNAL_RECORD_LEAD_NS, before the signalling lane's
    # next record, and not after ready
    iv["issue_hi"] = np.minimum(np.minimum(issue[keep] + SIGNAL_RECORD_LEAD_NS, ready_hi[keep]),
                                next_record.after(p_lane[ph][keep], issue[keep]))
    iv["ready_lo"] = ready_lo[keep]
    iv["ready_hi"] = np.where(ready_hi[keep] < _INF, ready_hi[keep], NONE)
    _classify(iv, np.ones(iv.size, bool), exact[keep])
    return iv


def _by_waits(ch: Channel, side: str, anchor: _Rows | None, waiting: _Rows | None, step: int, blocked_above: int,
              not_used: dict) -> np.ndarray:
    """Signal not traced: intervals from blocked waiting regions and from anchors (module docstring)."""
    S = ch.num_stages
    empty = _Rows(*(np.zeros(0, np.int64) for _ in range(5)))
    anchor, waiting = anchor or empty, waiting or empty
    times = np.r_[anchor.start, anchor.end, waiting.start, waiting.end]
    if not times.size:
        return np.zeros(0, INTERVAL_DTYPE)
    t0 = int(times.min())
    big = int(times.max()) - t0 + 1
    segs = np.r_[anchor.block * S + anchor.stage, waiting.block * S + waiting.stage]
    if (int(segs.max()) + 1) * big >= 1 << 62:
        raise ValueError(f"pipeline {ch.name}: the capture spans too long a time to order its records")

    def at(seg, t):  # one sortable number: block and stage first, then the time
        return seg * big + (t - t0)

    w_seg = waiting.block * S + waiting.stage
    blocked = (waiting.end - waiting.start) > blocked_above
    ws, wb, we = w_seg[blocked], waiting.start[blocked], waiting.end[blocked]
    o = np.lexsort((we, ws))
    ws, wb, we = ws[o], wb[o], we[o]
    # groups: a region that began after a group's first end waited for a later phase
    begin_key = np.maximum.accumulate(at(ws, wb)) if ws.size else ws
    starts = _chain_from_first(np.searchsorted(begin_key, at(ws, we), side="left"))
    first = np.flatnonzero(starts)
    g_seg, g_end = ws[first], we[first]
    g_begin = np.maximum.reduceat(wb, first) if first.size else first
    # the anchors of one lane per block and stage: the lane with the most of them
    a_seg = anchor.block * S + anchor.stage
    a_lane_key = a_seg * (int(anchor.lane.max(initial=0)) + 1) + anchor.lane
    keys, counts = np.unique(a_lane_key, return_counts=True)
    k_seg = keys // (int(anchor.lane.max(initial=0)) + 1)
    best = np.lexsort((-counts, k_seg))
    chosen = keys[best][np.r_[True, k_seg[best][1:] != k_seg[best][:-1]]] if keys.size else keys
    mine = np.isin(a_lane_key, chosen)
    _count(not_used, f"{SIDE_OPS[side]['anchor']}s of a second lane of the block", ~mine)
    as_, ae = a_seg[mine], anchor.end[mine]
    o = np.lexsort((ae, as_))
    as_, ae = as_[o], ae[o]
    a_key = at(as_, ae)
    prev = np.searchsorted(a_key, at(g_seg, g_end), side="left") - 1
    has_prev = (prev >= 0) & (as_[np.maximum(prev, 0)] == g_seg) if as_.size else np.zeros(g_seg.size, bool)
    groups = np.zeros(first.size, INTERVAL_DTYPE)
    groups["block"], groups["stage"], groups["phase"] = g_seg // S, g_seg % S, NONE
    groups["issue_lo"] = np.where(has_prev, ae[np.maximum(prev, 0)] if as_.size else 0, NONE)
    groups["issue_hi"] = groups["ready_hi"] = g_end
    groups["ready_lo"] = np.maximum(g_end - step, g_begin)
    _classify(groups, np.zeros(first.size, bool), np.ones(first.size, bool))
    _count(not_used, "ready measured, no earlier anchor to bound the issue", ~has_prev)
    # anchors no group's latest one: uses of their own, bounded by the next waiting end or the next anchor
    covered = np.zeros(as_.size, bool)
    covered[prev[has_prev]] = True
    ua_seg, ua_end = as_[~covered], ae[~covered]
    all_w = np.lexsort((waiting.end, w_seg))
    wk = at(w_seg[all_w], waiting.end[all_w])
    pos = np.searchsorted(wk, at(ua_seg, ua_end), side="right")
    ok = (pos < wk.size) & (w_seg[all_w][np.minimum(pos, max(wk.size - 1, 0))] == ua_seg) if wk.size else \
        np.zeros(ua_seg.size, bool)
    hi = np.where(ok, waiting.end[all_w][np.minimum(pos, max(wk.size - 1, 0))] if wk.size else 0, _INF)
    if ch.cluster_size == 1:
        idx = np.flatnonzero(~covered)
        nxt_same = (idx + 1 < as_.size) & (as_[np.minimum(idx + 1, max(as_.size - 1, 0))] == ua_seg)
        hi = np.where(nxt_same, np.minimum(hi, ae[np.minimum(idx + 1, max(as_.size - 1, 0))]), hi)
    own = np.zeros(ua_seg.size, INTERVAL_DTYPE)
    own["block"], own["stage"], own["phase"] = ua_seg // S, ua_seg % S, NONE
    own["issue_lo"] = own["ready_lo"] = ua_end
    own["issue_hi"] = own["ready_hi"] = np.where(hi < _INF, hi, NONE)
    _classify(own, np.zeros(own.size, bool), np.zeros(own.size, bool))
    return np.concatenate([groups, own])


def _chain_from_first(nxt: np.ndarray) -> np.ndarray:
    """Which rows the chain 0 -> nxt[0] -> ... visits (nxt[i] > i; n ends it), by pointer doubling: a
    whole-array pass per power of two instead of a step per row."""
    n = nxt.size
    on = np.zeros(n + 1, bool)
    if not n:
        return on[:0]
    jump = [np.r_[nxt, n]]
    while (1 << (len(jump) - 1)) < n:
        jump.append(jump[-1][jump[-1]])
    on[0] = True
    for f in reversed(jump):
        on[f[on]] = True
    return on[:n]


def _percentiles(x: np.ndarray) -> dict:
    if not x.size:
        return {"count": 0, "p50": None, "p99": None, "min": None, "max": None}
    return {"count": int(x.size), "p50": float(np.percentile(x, 50)), "p99": float(np.percentile(x, 99)),
            "min": int(x.min()), "max": int(x.max())}


def _bytes_per_s(trace: Trace, iv: np.ndarray, tx_bytes: int) -> dict:
    """Bytes landed per second on each SM (per CTA when the capture does not know SMs): the stages filled
    times their bytes, over the first-to-last record span of the SM's (CTA's) lanes."""
    ln = trace.lanes[trace.lanes["first_ns"] >= 0]
    sm = trace.sm_of_lane(ln["lane"].astype(np.int64))
    per_sm = bool(sm.size) and bool((sm >= 0).all())
    unit_of_lane = sm if per_sm else ln["block"].astype(np.int64)
    units = np.unique(unit_of_lane)
    first = np.full(units.size, np.iinfo(np.int64).max)
    last = np.full(units.size, np.iinfo(np.int64).min)
    at = np.searchsorted(units, unit_of_lane)
    np.minimum.at(first, at, ln["first_ns"])
    np.maximum.at(last, at, ln["last_ns"])
    block_unit = np.full(trace.num_blocks, -1, np.int64)
    block_unit[ln["block"]] = at
    loads = np.bincount(block_unit[iv["block"]], minlength=units.size)
    span = (last - first).astype(np.float64)
    rate = np.where(span > 0, loads * tx_bytes / np.maximum(span, 1) * 1e9, np.nan)
    rate = rate[(loads > 0) & np.isfinite(rate)]
    return {"per": "sm" if per_sm else "cta", "count": int(rate.size),
            "p50": float(np.median(rate)) if rate.size else None, "max": float(rate.max()) if rate.size else None}


def async_unit_stats(trace: Trace, units: AsyncUnits) -> list[dict]:
    """Per pipeline side with an async unit: uses by class, issue -> ready latency of the exact ones (p50 / p99,
    ns), what the bounded ones allow (at least / at most, p50), bytes per stage (the sidecar's tx_bytes, TMA)
    and the bytes per second each SM (CTA) received (only when every commit is recorded: each is one stage)."""
    out = []
    for src in units.sources:
        ch = units.channels[src["channel"]]
        iv = units.of(src["channel"], src["side"])
        cls = np.bincount(iv["cls"], minlength=len(CLASSES))
        closed = (iv["issue_lo"] >= 0) & (iv["ready_hi"] >= 0)
        exact = iv[(iv["cls"] == 0) & closed]
        bounded = iv[(iv["cls"] != 0) & closed]
        tx = ch.tx_bytes if src["unit"] == "TMA" and ch.tx_bytes else None
        out.append({
            "pipeline": ch.name, "class": ch.cls, "side": src["side"], "unit": src["unit"],
            "completes": src["completes"], "issue": src["issue"], "ready": src["ready"], "by": src["by"],
            "uses": int(iv.size), "classes": {name: int(n) for name, n in zip(CLASSES, cls)},
            "open": int((~closed).sum()),
            "latency_ns": {
                # exact: the commit to the earliest end of a blocked wait (ready known to one timer step; the issue
                # within SIGNAL_RECORD_LEAD_NS after the commit)
                "exact": _percentiles(exact["ready_hi"] - exact["issue_lo"]),
                "bounded": {"count": int(bounded.size),
                            "at_least_p50": float(np.median(np.maximum(bounded["ready_lo"] - bounded["issue_hi"], 0)))
                            if bounded.size else None,
                            "at_most_p50": float(np.median(bounded["ready_hi"] - bounded["issue_lo"]))
                            if bounded.size else None},
            },
            "timer_step_ns": units.timer_step_ns,
            "bytes_per_stage": tx,
            "bytes_per_s": _bytes_per_s(trace, iv, tx) if tx and src["by"] == "phase" and iv.size else None,
            "not_used": src["not_used"],
        })
    return out
