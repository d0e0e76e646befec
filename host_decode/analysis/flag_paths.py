"""What bounded each step of a trace with flag records: waits matched to the signals that released them across
the blocks of a launch and the captures of several ranks, on one clock, and the critical path walked back
through them (host_decode.analysis.flags), explained with the regions the blocks on it ran.

Clocks: each rank's times move to the reference clock by its sidecar's ``clock_offset_ns`` (a merged
session has them applied already, host_decode.analysis.sessions.shifts). Two ranks' offsets err by at most
the sum of their ``clock_error_ns``, so a signal may be recorded up to the two largest errors plus the
timer's step after the end of the wait it released (`error_bound_ns`, stated in the output; a rank that
states no error makes the bound unknown and the largest stated one is used). A matched signal placed after its
wait's end by that residual error is counted (``clock_residual``) and drawn at the wait's end: a signal
never appears after the wait it released.

The summary (`flags_summary`) says per step (launch): the path's links in time order, the chain from the
block that ended last back to where the path starts (which rank, which block, which wait, released by whom,
and what that block waited for in turn), and the path's head: the block where it starts, how late it
started against the median block of the step, and per work link the regions of that block inside it with
their excess over their region's median duration (what made the block late).

Invariants a change could break, with the test guarding each
(tests/unit/host_decode/analysis/test_flag_paths.py):
* with known per-rank offsets and a delay injected on one rank's block, the path's head is that rank and
  block and its late start is the delay within 1 us (::test_all_gather_delay_is_found);
* a megakernel's delayed task is the region with the largest excess on the path
  (::test_megakernel_delayed_task_is_found);
* no flow starts after the wait it ends (::test_clock_residual_is_clamped_and_counted).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.flag_events import FlagEvents, flag_events
from host_decode.analysis.flags import (
    LINK_KINDS,
    REASONS,
    RELEASED,
    SIGNAL,
    UNMATCHED,
    WAIT,
    WORK,
    BlockSpans,
    FlagMatch,
    critical_path,
    match_waits,
)
from host_decode.core import wire
from host_decode.core.model import FLOW_DTYPE, Trace

FLOW_KINDS = ("flag release", "flag release (clock residual)")
MAX_REGIONS = 3  # regions listed per work link


@dataclasses.dataclass
class FlagAnalysis:
    trace: Trace
    events: FlagEvents
    match: FlagMatch
    error_bound_ns: int
    error_stated: bool  # every rank stated its clock error

    @property
    def residual(self) -> np.ndarray:
        """Per wait (match.wait_rows order): matched to a signal placed after the wait's end."""
        return (self.match.signal >= 0) & (self.match.lag_ns < 0)

    def flows(self) -> np.ndarray:
        """One flow per matched wait, from its signal (at the wait's end at the latest) to the wait's end, in
        the trace's lanes and times (the offsets the trace does not include yet taken back out)."""
        m, ev = self.match, self.events
        ok = np.flatnonzero(m.signal >= 0)
        w, s = m.wait_rows[ok], m.signal[ok]
        back = np.array([ev.pending_offsets()[int(r)] for r in ev.table.rank.tolist()], np.int64) if w.size else w
        sig_common = np.minimum(m.end_ns[s], m.end_ns[w])
        out = np.zeros(ok.size, FLOW_DTYPE)
        out["src_lane"], out["dst_lane"] = ev.lane[s], ev.lane[w]
        out["src_ns"] = sig_common - (back[s] if w.size else 0)
        out["dst_ns"] = m.end_ns[w] - (back[w] if w.size else 0)
        out["kind"] = self.residual[ok].astype(np.int64)
        return out


def analyze_flags(trace: Trace, events: FlagEvents | None = None, initial: int = 0) -> FlagAnalysis:
    """The flag events of `trace` matched on one clock (module docstring). `initial`: every flag's value at the
    start of the launches (match_waits: flags a kernel never resets count on from launch to launch)."""
    ev = events or flag_events(trace)
    errors = [p.clock_error_ns for p in ev.parts]
    stated = sorted((e for e in errors if e is not None), reverse=True)
    cross = len({p.rank for p in ev.parts}) > 1
    bound = wire.TIMER_STEP_NS + (sum(stated[:2]) if cross else 0)
    m = match_waits(ev.table, clock_offset_ns=ev.pending_offsets() or None, clock_error_ns=bound, initial=initial)
    return FlagAnalysis(trace, ev, m, bound, all(e is not None for e in errors) or not cross)


def block_spans(fa: FlagAnalysis) -> BlockSpans:
    """Each block's first and last record (any lane) per rank and launch, on the rank's clock."""
    t, ev = fa.trace, fa.events
    ln = t.lanes[t.lanes["first_ns"] >= 0]
    offsets = np.array([p.block_offset for p in ev.parts], np.int64)
    part = np.maximum(np.searchsorted(offsets, ln["block"], side="right") - 1, 0)
    key = part.astype(np.int64) << 32 | (ln["block"] - offsets[part])
    keys, inv = np.unique(key, return_inverse=True)
    start = np.full(keys.size, np.iinfo(np.int64).max)
    end = np.full(keys.size, np.iinfo(np.int64).min)
    np.minimum.at(start, inv, ln["first_ns"])
    np.maximum.at(end, inv, ln["last_ns"])
    kp = keys >> 32
    ranks = np.array([p.rank for p in ev.parts], np.int64)
    launches = np.array([p.launch for p in ev.parts], np.int64)
    return BlockSpans(rank=ranks[kp], launch=launches[kp], block=keys & 0xFFFF_FFFF, start_ns=start, end_ns=end)


def _where(fa: FlagAnalysis, rank: int, block: int) -> tuple[int, int]:
    """(part index, trace block) of a rank's block."""
    for i, p in enumerate(fa.events.parts):
        if p.rank == rank and block < p.num_blocks:
            return i, p.block_offset + block
    return -1, -1


def _regions(fa: FlagAnalysis, rank: int, block: int, a: int, z: int, medians: dict) -> list[dict]:
    """The regions of a block overlapping [a, z] on the common clock (flag waits excepted), longest excess
    over their region's median first."""
    i, tb = _where(fa, rank, block)
    if i < 0 or z <= a:
        return []
    p = fa.events.parts[i]
    shift = 0 if p.offset_applied else p.clock_offset_ns
    sp = fa.trace.spans
    lo, hi = np.searchsorted(sp["lane"], [tb * fa.trace.num_groups, (tb + 1) * fa.trace.num_groups])
    s = sp[lo:hi]
    waits = {int(x["id"]) for x in p.sites if x["kind"] == "wait"}
    s = s[~np.isin(s["event"], list(waits)) & (s["end_ns"] + shift > a) & (s["start_ns"] + shift < z)]
    if not s.size:
        return []
    dur = s["end_ns"] - s["start_ns"]
    med = np.array([medians.get(int(e), 0) for e in s["event"].tolist()], np.int64)
    excess = dur - med
    top = np.lexsort((-dur, -excess))[:MAX_REGIONS]
    names = fa.trace.names
    return [{"region": names.event(int(s["event"][k])), "warp": int(s["group"][k]),
             "start_ns": int(s["start_ns"][k] + shift), "duration_ns": int(dur[k]), "median_ns": int(med[k]),
             "excess_ns": int(excess[k])} for k in top.tolist()]


def _medians(trace: Trace) -> dict:
    sp = trace.spans
    if not sp.size:
        return {}
    dur = sp["end_ns"] - sp["start_ns"]
    o = np.lexsort((dur, sp["event"]))
    ev, d = sp["event"][o], dur[o]
    starts = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
    stops = np.r_[starts[1:], ev.size]
    return {int(ev[a]): int(d[(a + b - 1) // 2]) for a, b in zip(starts.tolist(), stops.tolist())}


def step_summary(fa: FlagAnalysis, launch: int, spans: BlockSpans, rank: int | None = None) -> dict:
    """The critical path of one step (launch) over all ranks (or one), explained (module docstring)."""
    t, m = fa.events.table, fa.match
    off = fa.events.pending_offsets()
    links = critical_path(t, m, launch=launch, rank=rank, spans=spans, clock_offset_ns=off)
    medians = _medians(fa.trace)
    sel = spans.launch == launch
    starts = spans.start_ns[sel] + np.array([off.get(int(r), 0) for r in spans.rank[sel]], np.int64)
    median_start = int(np.sort(starts)[(starts.size - 1) // 2]) if starts.size else 0  # exact: ns need all 64 bits
    out_links = []
    for x in links:
        link = {"kind": LINK_KINDS[x["kind"]], "rank": int(x["rank"]), "block": int(x["block"]),
                "start_ns": int(x["start_ns"]), "end_ns": int(x["end_ns"]), "duration_ns": int(x["duration_ns"])}
        if x["kind"] in (RELEASED, UNMATCHED):
            w = int(x["wait_row"])
            link.update(flag=t.flag_name(w), warp=int(t.warp[w]), value=int(t.value[w]),
                        wait_begin_ns=int(m.begin_ns[w]), wait_ns=int(m.end_ns[w] - m.begin_ns[w]))
        if x["kind"] == RELEASED:
            s = int(x["signal_row"])
            link.update(released_by={"rank": int(x["from_rank"]), "block": int(x["from_block"]),
                                     "warp": int(t.warp[s]), "signal_ns": int(m.end_ns[s])})
            link["clock_residual"] = bool(m.end_ns[s] > m.end_ns[int(x["wait_row"])])
        if x["kind"] == WORK:
            link["regions"] = _regions(fa, link["rank"], link["block"], link["start_ns"], link["end_ns"], medians)
        out_links.append(link)
    chain = []
    for link in reversed(out_links):  # from the end back: who waited for whom
        if link["kind"] == "work":
            if not chain or chain[-1].get("block_key") != (link["rank"], link["block"]):
                chain.append({"rank": link["rank"], "block": link["block"], "work_ns": 0, "block_key":
                              (link["rank"], link["block"])})
            chain[-1]["work_ns"] += link["duration_ns"]
        else:
            if not chain or chain[-1]["block_key"] != (link["rank"], link["block"]):
                chain.append({"rank": link["rank"], "block": link["block"], "work_ns": 0,
                              "block_key": (link["rank"], link["block"])})
            entry = chain[-1]
            entry.setdefault("waits", []).append({"flag": link["flag"], "warp": link["warp"],
                                                  "wait_ns": link["wait_ns"], "after_signal_ns": link["duration_ns"]
                                                  if link["kind"] == "released" else None,
                                                  "released_by": link.get("released_by")})
    for c in chain:
        c.pop("block_key")
    head = None
    if out_links:
        first = out_links[0]
        i, tb = _where(fa, first["rank"], first["block"])
        hs = spans.start_ns[sel & (spans.rank == first["rank"]) & (spans.block == first["block"])]
        start = int(hs.min()) + off.get(first["rank"], 0) if hs.size else first["start_ns"]
        head = {"rank": first["rank"], "block": first["block"], "start_ns": start,
                "late_start_ns": start - median_start,
                "regions": first.get("regions", []) if first["kind"] == "work" else []}
    end = out_links[-1]["end_ns"] if out_links else 0
    return {"launch": int(launch), "rank": rank, "end_ns": int(end), "median_block_start_ns": median_start,
            "path_ns": int(sum(x["duration_ns"] for x in out_links)), "head": head, "chain": chain,
            "links": out_links}


def flags_summary(trace: Trace, fa: FlagAnalysis | None = None, rank: int | None = None) -> dict:
    """Everything `ikp waits` prints of flags, JSON-ready."""
    fa = fa or analyze_flags(trace)
    ev, t, m = fa.events, fa.events.table, fa.match
    counts = m.counts()
    counts["clock_residual"] = int(fa.residual.sum())
    spans = block_spans(fa)
    launches = sorted(set(np.unique(t.launch).tolist()) | set(np.unique(spans.launch).tolist()))
    w = m.wait_rows
    dur = m.end_ns[w] - m.begin_ns[w]
    per_rank = []
    for r in sorted({p.rank for p in ev.parts}):
        mine = t.rank[w] == r
        per_rank.append({"rank": r, "waits": int(mine.sum()), "wait_ns": int(dur[mine].sum()),
                         "signals": int(((t.kind == SIGNAL) & (t.rank == r)).sum()),
                         "unmatched": int((mine & (m.signal < 0)).sum())})
    return {
        "ranks": [{"label": p.label, "rank": p.rank, "launch": p.launch, "clock_offset_ns": p.clock_offset_ns,
                   "clock_error_ns": p.clock_error_ns, "clock_reference": p.clock_reference,
                   "absolute": p.absolute} for p in ev.parts],
        "clock": {"error_bound_ns": fa.error_bound_ns, "error_stated": fa.error_stated,
                  "timer_step_ns": wire.TIMER_STEP_NS, "clock_residual": counts["clock_residual"]},
        "events": {"signals": int((t.kind == SIGNAL).sum()), "waits": int((t.kind == WAIT).sum()),
                   "buffers": list(t.buffers), "unknown_addresses": ev.unknown_addresses},
        "problems": dict(ev.problems),
        "match": {name: counts[name] for name in REASONS} | {k: v for k, v in counts.items() if k not in REASONS},
        "per_rank": per_rank,
        "steps": [step_summary(fa, launch, spans, rank) for launch in launches],
    }
