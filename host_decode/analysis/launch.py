"""The launch as a whole: blocks, SMs, waves, tail and imbalance; the critical lane of each block.

Definitions (all times in ns on the trace's timeline):
* **block interval** = [min first_ns, max last_ns] over the block's lanes; its SM is the SM of its lanes
  (the finalize record carries it; -1 unknown).
* **SM busy time** = |union of the intervals of the blocks that ran on it|.
* **imbalance** = max / mean, over SMs with a known id, of SM busy time; and max / mean over blocks of
  (block end - launch start).
* **tail** = last block end - median (p50) block end; ``tail_sm_utilization`` = mean over SMs of the
  fraction of the tail window [p50 end, last end] during which the SM had a block resident.
* **waves of an SM** = ceil(blocks on the SM / most blocks resident on it at one time).
* **critical lane of a block** = the lane with the latest last_ns; ``slack_ns`` = its last_ns minus the
  second latest lane end in the block (0 for single-lane blocks); ``last_event`` = the region of that
  lane that ended last (-1 when the lane has no region).

Invariants, and the tests that guard them (tests/unit/host_decode/analysis/test_analysis.py): hand-computed tail,
imbalance and waves (::test_sm_table_tail_imbalance_hand_computed, ::test_concurrent_blocks_on_one_sm) and critical
lanes (::test_critical_lanes_hand_computed); a session's launch numbers are medians over its launches,
each computed alone (::test_session_launch_numbers_are_per_launch_medians).
"""

from __future__ import annotations

import numpy as np

from host_decode.analysis.intervals import block_runs, clip, timed_lanes, union_intervals
from host_decode.core.model import Trace
from host_decode.core.wire import MAX_EVENT_ID

BLOCK_DTYPE = np.dtype(
    [("block", np.int64), ("sm", np.int64), ("start_ns", np.int64), ("end_ns", np.int64), ("lanes", np.int64)]
)

SM_DTYPE = np.dtype(
    [
        ("sm", np.int64),
        ("blocks", np.int64),
        ("busy_ns", np.int64),
        ("first_ns", np.int64),
        ("last_ns", np.int64),
        ("max_resident", np.int64),
        ("waves", np.int64),
        ("tail_busy_ns", np.int64),
    ]
)


def block_intervals(trace: Trace) -> np.ndarray:
    """Per block (BLOCK_DTYPE): [min lane first_ns, max lane last_ns], SM (max over its lanes: -1 only
    when no lane knows it), lanes that wrote anything."""
    lanes = timed_lanes(trace)
    blocks, inv = np.unique(lanes["block"], return_inverse=True)
    out = np.zeros(blocks.size, BLOCK_DTYPE)
    out["block"] = blocks
    out["start_ns"] = np.iinfo(np.int64).max
    np.minimum.at(out["start_ns"], inv, lanes["first_ns"])
    out["end_ns"] = np.iinfo(np.int64).min
    np.maximum.at(out["end_ns"], inv, lanes["last_ns"])
    out["sm"] = -1
    np.maximum.at(out["sm"], inv, lanes["sm"])
    out["lanes"] = np.bincount(inv, minlength=blocks.size)
    return out


def sm_table(trace: Trace, blocks: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """Per SM (SM_DTYPE, SMs with a known id) and launch-level scalars: imbalance, tail, waves."""
    blocks = block_intervals(trace) if blocks is None else blocks
    launch_start = trace.start_ns
    ends = blocks["end_ns"]
    summary: dict = {
        "blocks": int(blocks.size),
        "launch_ns": int(ends.max() - launch_start) if blocks.size else 0,
    }
    if blocks.size:
        p50_end = float(np.percentile(ends, 50))
        rel_end = (ends - launch_start).astype(np.float64)
        summary.update(
            block_end_p50_ns=p50_end - launch_start,
            block_end_max_ns=int(ends.max() - launch_start),
            tail_ns=float(ends.max() - p50_end),
            tail_frac=float((ends.max() - p50_end) / max(ends.max() - launch_start, 1)),
            imbalance_block_end=float(rel_end.max() / rel_end.mean()) if rel_end.mean() > 0 else float("nan"),
        )
    known = blocks[blocks["sm"] >= 0]
    sms, inv = np.unique(known["sm"], return_inverse=True)
    table = np.zeros(sms.size, SM_DTYPE)
    table["sm"] = sms
    if sms.size:
        table["blocks"] = np.bincount(inv, minlength=sms.size)
        k, lo, hi, _ = union_intervals(known["sm"], known["start_ns"], known["end_ns"])
        rows = np.searchsorted(sms, k)
        np.add.at(table["busy_ns"], rows, hi - lo)
        table["first_ns"] = np.iinfo(np.int64).max
        np.minimum.at(table["first_ns"], inv, known["start_ns"])
        table["last_ns"] = np.iinfo(np.int64).min
        np.maximum.at(table["last_ns"], inv, known["end_ns"])
        table["max_resident"] = _max_concurrency(known["sm"], known["start_ns"], known["end_ns"], sms)
        table["waves"] = -(-table["blocks"] // np.maximum(table["max_resident"], 1))
        t50 = np.percentile(blocks["end_ns"], 50)
        a, b = clip(lo, hi, np.float64(t50), np.float64(blocks["end_ns"].max()))
        np.add.at(table["tail_busy_ns"], rows, (b - a).astype(np.int64))
        busy = table["busy_ns"].astype(np.float64)
        summary.update(
            sms=int(sms.size),
            imbalance_sm_busy=float(busy.max() / busy.mean()) if busy.mean() > 0 else float("nan"),
            sm_busy_min_ns=int(busy.min()),
            sm_busy_max_ns=int(busy.max()),
            waves_max=int(table["waves"].max()),
            max_resident=int(table["max_resident"].max()),
        )
        if summary.get("tail_ns", 0) > 0:
            summary["tail_sm_utilization"] = float(table["tail_busy_ns"].sum() / (sms.size * summary["tail_ns"]))
    return table, summary


def _max_concurrency(key, start, end, keys) -> np.ndarray:
    """Most intervals open at one time, per key. At equal times ends come first (touching = not concurrent)."""
    k = np.concatenate([key, key])
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones_like(start), -np.ones_like(end)])
    order = np.lexsort((d, t, k))
    k, level = k[order], np.cumsum(d[order])  # returns to 0 at the end of each key
    out = np.zeros(keys.size, np.int64)
    np.maximum.at(out, np.searchsorted(keys, k), level)
    return out



def launch_summary(trace: Trace) -> dict:
    """sm_table's scalars. For a session (meta['parts']: several launches in one trace) tail, waves and
    imbalance only mean something per launch: each is computed per launch, and the summary holds the
    median over launches of every number plus the per-launch list under 'per_launch'."""
    parts = (trace.meta or {}).get("parts")
    if not parts or len(parts) < 2:
        return sm_table(trace)[1]
    import dataclasses

    per = []
    for p in parts:  # per launch: few
        lo, hi = p["block_offset"], p["block_offset"] + p["num_blocks"]
        lm = (trace.lanes["block"] >= lo) & (trace.lanes["block"] < hi)
        sub = dataclasses.replace(trace, lanes=trace.lanes[lm], spans=trace.spans[:0])
        if (sub.lanes["first_ns"] >= 0).any():
            per.append(dict(sm_table(sub)[1], label=p.get("label")))
    keys = sorted({k for d in per for k, v in d.items() if isinstance(v, (int, float))})
    out: dict = {k: float(np.median([d[k] for d in per if k in d])) for k in keys}
    out["launches"] = len(per)
    out["per_launch"] = per
    return out



CRITICAL_DTYPE = np.dtype(
    [
        ("block", np.int64),
        ("lane", np.int64),
        ("group", np.int64),
        ("sm", np.int64),
        ("end_ns", np.int64),  # last_ns of the critical lane = block end
        ("slack_ns", np.int64),  # block end - latest end of any other lane of the block
        ("last_event", np.int64),  # region of that lane that ended last; -1 none
        ("last_event_end_ns", np.int64),
    ]
)


def critical_lanes(trace: Trace) -> np.ndarray:
    """Per block, the lane that finished last and what it did last (CRITICAL_DTYPE)."""
    lanes = timed_lanes(trace)
    if lanes.size == 0:
        return np.zeros(0, CRITICAL_DTYPE)
    order = np.lexsort((lanes["last_ns"], lanes["block"]))  # within a block, latest end last
    sl = lanes[order]
    last = np.r_[sl["block"][1:] != sl["block"][:-1], True]
    crit = sl[last]
    out = np.zeros(crit.size, CRITICAL_DTYPE)
    for f in ("block", "lane", "group", "sm"):
        out[f] = crit[f]
    out["end_ns"] = crit["last_ns"]
    idx_last = np.flatnonzero(last)
    runner = idx_last - 1
    same_block = (runner >= 0) & (sl["block"][np.maximum(runner, 0)] == crit["block"])
    out["slack_ns"] = np.where(same_block, crit["last_ns"] - sl["last_ns"][np.maximum(runner, 0)], 0)
    # last region of each critical lane, run of whole blocks by run (a lane is in one run)
    out["last_event"] = -1
    out["last_event_end_ns"] = -1
    critical = _lane_mask(trace, crit["lane"])
    by_lane = np.argsort(out["lane"])
    for spans, _ in block_runs(trace):
        cs = spans[critical[spans["lane"]]]  # the critical lanes' spans (one lane a block)
        if not cs.size:
            continue
        if not (np.diff(cs["lane"]) >= 0).all():
            cs = cs[np.argsort(cs["lane"], kind="stable")]
        first = np.flatnonzero(np.r_[True, cs["lane"][1:] != cs["lane"][:-1]])
        end = cs["end_ns"].astype(np.int64)
        seg = np.cumsum(np.r_[True, cs["lane"][1:] != cs["lane"][:-1]]) - 1
        seg_max = np.maximum.reduceat(end, first)
        idx = np.arange(cs.size)
        last = np.maximum.reduceat(np.where(end == seg_max[seg], idx, -1), first)  # last span ending last
        rows = by_lane[np.searchsorted(out["lane"], cs["lane"][first], sorter=by_lane)]
        out["last_event"][rows] = cs["event"][last]
        out["last_event_end_ns"][rows] = end[last]
    return out


def _lane_mask(trace: Trace, lanes: np.ndarray) -> np.ndarray:
    """Boolean table over lane ids (index with a lane column instead of np.isin)."""
    size = max(trace.num_lanes, int(trace.lanes["lane"].max(initial=-1)) + 1,
               int(trace.spans["lane"].max(initial=-1)) + 1)
    mask = np.zeros(size, bool)
    mask[lanes] = True
    return mask


CRITICAL_REGION_DTYPE = np.dtype(
    [("group", np.int64), ("event", np.int64), ("spans", np.int64), ("total_ns", np.int64), ("share", np.float64)]
)


def critical_regions(trace: Trace, crit: np.ndarray | None = None) -> np.ndarray:
    """What the critical lanes spent their time in: per (group, event), spans and inclusive time summed
    over all blocks' critical lanes; share = total / sum of the critical lanes' windows. Nested regions
    count in full for each level, so shares may add up to more than 1."""
    crit = critical_lanes(trace) if crit is None else crit
    mask = _lane_mask(trace, crit["lane"])
    lanes = trace.lanes[mask[trace.lanes["lane"]]]
    window = int((lanes["last_ns"] - lanes["first_ns"]).sum())
    # per run of whole blocks, the counts and times of its (group, event) codes; summed over runs below
    # (float sums of integer ns are exact below 2**53)
    run_keys, run_spans, run_totals = [], [], []
    for spans, _ in block_runs(trace):
        cs = spans[mask[spans["lane"]]]
        code = cs["group"].astype(np.int64) * (MAX_EVENT_ID + 1) + cs["event"]
        keys, inv = np.unique(code, return_inverse=True)
        run_keys.append(keys)
        run_spans.append(np.bincount(inv, minlength=keys.size))
        run_totals.append(np.bincount(inv, weights=cs["end_ns"] - cs["start_ns"], minlength=keys.size))
    keys, inv = np.unique(np.concatenate(run_keys or [np.zeros(0, np.int64)]), return_inverse=True)
    spans_of = np.bincount(inv, weights=np.concatenate(run_spans or [np.zeros(0)]), minlength=keys.size)
    total_of = np.bincount(inv, weights=np.concatenate(run_totals or [np.zeros(0)]), minlength=keys.size)
    out = np.zeros(len(keys), CRITICAL_REGION_DTYPE)
    if len(keys):
        out["group"], out["event"] = np.divmod(keys, MAX_EVENT_ID + 1)
        out["spans"] = spans_of
        out["total_ns"] = total_of.astype(np.int64)  # float sums are exact below 2**53 ns
        out["share"] = out["total_ns"] / window if window else 0.0
    return out[np.argsort(-out["total_ns"], kind="stable")]


