"""Builds a :class:`Trace` from the columns a foreign reader collects: one row per span / instant with
its (block, warp), times in int64, event ids, and per-lane facts. The loss report counts every foreign
record: a span is two records (begin + end), an instant one; unusable records go to ``malformed`` with
a reason.

Limits every reader applies (tests/unit/host_decode/interop/test_interop.py guards each): a time is an int (not a bool)
with |t| < TIME_LIMIT, so that the difference of two times fits int64; a warp index is below MAX_GROUPS and a
block index below MAX_BLOCKS, so that no table sized by an index can be absurd. An event past a limit is
counted in ``malformed``; a launch whose stated shape (grid, block size) is past one is a DecodeError."""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from host_decode.core.model import (
    INSTANT_DTYPE,
    LANE_DTYPE,
    LOSS_BUCKETS,
    SPAN_DTYPE,
    LossReport,
    Names,
    Trace,
    is_json_int,
)

TIME_LIMIT = 1 << 62  # ns or cycles (146 years of ns): a time at or past it is a corrupted field
MAX_GROUPS = 1024  # warps per block (CUDA has at most 32; room for other hardware, never billions)
MAX_BLOCKS = 1 << 31  # blocks per launch (CUDA's gridDim.x limit)


def usable_time(value) -> bool:
    return is_json_int(value) and -TIME_LIMIT < value < TIME_LIMIT


def count(malformed: dict[str, int], reason: str, records: int = 1) -> None:
    """Adds `records` unusable foreign records to `malformed` under `reason`."""
    malformed[reason] = malformed.get(reason, 0) + records


def warp_names(num_groups: int) -> dict[int, str]:
    """Group names of a foreign trace: every group is a warp (num_groups is at most MAX_GROUPS)."""
    return {w: f"warp {w}" for w in range(num_groups)}


@dataclasses.dataclass
class ForeignTables:
    """Columns gathered by a reader; all int64 numpy arrays of equal length per table."""

    num_blocks: int
    num_groups: int
    span_block: np.ndarray
    span_group: np.ndarray
    span_event: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_order: np.ndarray  # program order within a lane where the format gives one (else start order)
    instant_block: np.ndarray
    instant_group: np.ndarray
    instant_event: np.ndarray
    instant_ts: np.ndarray
    lane_sm: dict[int, int]  # lane -> SM id, where known
    lane_window: dict[int, tuple[int, int]]  # lane -> (first_ns, last_ns) the format states (warp lifetime)
    malformed: dict[str, int]  # reason -> foreign records that could not be used


def _depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Regions of the same lane open when each span began (rows sorted by lane, then begin order). A
    region ending exactly where another begins is closed unless it contains it (equal-time ties at the
    timer's step are common)."""
    depth = np.zeros(lane.size, np.int16)
    bounds = np.flatnonzero(np.diff(lane)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, lane.size]):
        ends: list[int] = []
        for i in range(lo, hi):
            s, e = int(start[i]), int(end[i])
            open_after = len(ends) - bisect.bisect_right(ends, s)
            ties = bisect.bisect_right(ends, s) - bisect.bisect_left(ends, s) if e == s else 0
            depth[i] = min(open_after + ties, np.iinfo(np.int16).max)
            bisect.insort(ends, e)
    return depth


def build_trace(t: ForeignTables, names: Names, absolute: bool, meta: dict) -> Trace:
    g = t.num_groups
    span_lane = t.span_block * g + t.span_group
    order = np.lexsort((t.span_order, -t.span_end, t.span_start, span_lane))  # containing region first on ties
    spans = np.zeros(order.size, SPAN_DTYPE)
    spans["lane"], spans["block"], spans["group"] = span_lane[order], t.span_block[order], t.span_group[order]
    spans["event"], spans["start_ns"], spans["end_ns"] = t.span_event[order], t.span_start[order], t.span_end[order]
    spans["depth"] = _depths(spans["lane"], spans["start_ns"], spans["end_ns"])

    inst_lane = t.instant_block * g + t.instant_group
    iorder = np.lexsort((t.instant_ts, inst_lane))
    instants = np.zeros(iorder.size, INSTANT_DTYPE)
    instants["lane"], instants["block"], instants["group"] = (
        inst_lane[iorder],
        t.instant_block[iorder],
        t.instant_group[iorder],
    )
    instants["event"], instants["ts_ns"] = t.instant_event[iorder], t.instant_ts[iorder]

    lane_ids = np.unique(
        np.concatenate(
            [spans["lane"], instants["lane"], np.fromiter(t.lane_window, np.int64, len(t.lane_window))]
        ).astype(np.int64)
    )
    lanes = np.zeros(lane_ids.size, LANE_DTYPE)
    lanes["lane"], lanes["block"], lanes["group"] = lane_ids, lane_ids // g, lane_ids % g
    lanes["sm"] = [t.lane_sm.get(int(x), -1) for x in lane_ids]
    lanes["finalize_ns"] = -1
    span_idx = np.searchsorted(lane_ids, spans["lane"])
    inst_idx = np.searchsorted(lane_ids, instants["lane"])
    first = np.full(lane_ids.size, np.iinfo(np.int64).max)
    last = np.full(lane_ids.size, np.iinfo(np.int64).min)
    np.minimum.at(first, span_idx, spans["start_ns"])
    np.maximum.at(last, span_idx, spans["end_ns"])
    np.minimum.at(first, inst_idx, instants["ts_ns"])
    np.maximum.at(last, inst_idx, instants["ts_ns"])
    for i, lane in enumerate(lane_ids.tolist()):
        if lane in t.lane_window:
            lo, hi = t.lane_window[lane]
            first[i], last[i] = min(first[i], lo), max(last[i], hi)
    lanes["first_ns"], lanes["last_ns"] = first, last
    records = np.bincount(span_idx, minlength=lane_ids.size) * 2 + np.bincount(inst_idx, minlength=lane_ids.size)
    lanes["records"] = records

    bad = int(sum(t.malformed.values()))
    totals = dict.fromkeys(LOSS_BUCKETS, 0)
    totals["paired_begin"] = totals["paired_end"] = int(spans.size)
    totals["instant"] = int(instants.size)
    totals["malformed"] = bad
    per_lane = np.zeros(lane_ids.size, [("lane", np.int64)] + [(b, np.int64) for b in LOSS_BUCKETS])
    per_lane["lane"] = lane_ids
    per_lane["paired_begin"] = per_lane["paired_end"] = np.bincount(span_idx, minlength=lane_ids.size)
    per_lane["instant"] = np.bincount(inst_idx, minlength=lane_ids.size)
    loss = LossReport(
        nonzero_slots=2 * int(spans.size) + int(instants.size) + bad,
        totals=totals,
        per_lane=per_lane,
        malformed_reasons=dict(t.malformed),
        dropped_on_device=0,
    )
    return Trace(
        num_blocks=t.num_blocks,
        num_groups=g,
        write_stride=t.num_blocks * g,
        spans=spans,
        instants=instants,
        lanes=lanes,
        loss=loss,
        names=names,
        absolute=absolute,
        meta=meta,
    )
