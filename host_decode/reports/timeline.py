"""The Timeline tab's data (html.py embeds it under "timeline"; assets/timeline.js draws it): a few
blocks span by span, and the launch's lanes-in-region curves.

Invariants, and the tests that guard them (tests/unit/host_decode/reports/test_report_timeline.py):
- a block's embedded spans are exactly the trace's spans of that block (times from the launch start),
  unless it has more than TIMELINE_MAX_SPANS (then the longest, and ``left_out`` says how many were not)
  (test_timeline_view_data);
- "fastest" / "median" / "slowest" are by first begin to last end of the block's spans; with at most
  TIMELINE_ALL_SPANS spans in the trace every block is embedded, so the page can show any of them
  (test_timeline_view_data, test_only_chosen_blocks_embedded_when_large);
- each curve point is the most lanes inside the region at any time of its bin, a lane inside nested
  regions of one id counted once (test_timeline_view_data, against a brute-force count).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import count_of, positions_in_sorted, runs_of_whole_lanes
from host_decode.core.model import Trace

TIMELINE_MAX_SPANS = 5000  # per embedded block (the longest are kept; the page says how many were left out)
TIMELINE_ALL_SPANS = 10_000  # up to this many spans in the trace, every block is embedded (pick any on the page)
CURVE_POINTS = 400  # lanes-in-region curves: at most this many points per region


def block_windows(trace: Trace) -> np.ndarray:
    """One row per block with spans: block, sm, start_ns, end_ns (first begin .. last end)."""
    sp = trace.spans
    out = np.zeros(0, [("block", np.int64), ("sm", np.int64), ("start_ns", np.int64), ("end_ns", np.int64)])
    if sp.size == 0:
        return out
    b = sp["block"]
    if (b[1:] >= b[:-1]).all():  # decoded traces come block by block
        start, end = sp["start_ns"], sp["end_ns"]
    else:
        order = np.argsort(b, kind="stable")
        b, start, end = b[order], sp["start_ns"][order], sp["end_ns"][order]
    first = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    out = np.zeros(first.size, out.dtype)
    out["block"] = b[first]
    out["start_ns"] = np.minimum.reduceat(start, first)
    out["end_ns"] = np.maximum.reduceat(end, first)
    lanes = trace.lanes
    sm = np.full(int(out["block"].max()) + 1, -1, np.int64)
    known = (lanes["sm"] >= 0) & (lanes["block"] <= out["block"].max())
    sm[lanes["block"][known]] = lanes["sm"][known]
    out["sm"] = sm[out["block"]]
    return out


def timeline_data(trace: Trace, blocks: list[int] | None = None) -> dict | None:
    """The blocks shown first (by default the fastest, median and slowest by first begin to last end;
    `blocks` picks others), every block when the trace is small (TIMELINE_ALL_SPANS), each with its
    spans relative to the launch start, and the launch's lanes-in-region curves."""
    sp = trace.spans
    if sp.size == 0:
        return None
    origin = int(trace.start_ns)
    win = block_windows(trace)
    length = win["end_ns"] - win["start_ns"]
    if blocks is None:
        order = np.argsort(length, kind="stable")
        chosen = [("fastest", order[0]), ("median", order[order.size // 2]), ("slowest", order[-1])]
    else:
        where = {int(b): i for i, b in enumerate(win["block"])}
        missing = [b for b in blocks if b not in where]
        if missing:
            raise ValueError(f"timeline blocks {missing}: no spans in these blocks (blocks with spans: "
                             f"{int(win['block'].min())}..{int(win['block'].max())})")
        chosen = [("picked", where[b]) for b in blocks]
    label_of: dict[int, str] = {}
    for label, i in chosen:
        label_of.setdefault(int(i), label)
    rows = list(label_of)
    if sp.size <= TIMELINE_ALL_SPANS:  # the rest too, by block index, for the page's block picker
        rows += [i for i in range(win.size) if i not in label_of]
    block = sp["block"]
    by_block = None  # decoded traces come block by block: a block's spans are one slice, no sort needed
    if not (block[1:] >= block[:-1]).all():
        by_block = np.argsort(block, kind="stable")
        block = block[by_block]
    bounds = positions_in_sorted(block, win["block"])  # no int64 copy of the block column
    ends = positions_in_sorted(block, win["block"].astype(np.int64) + 1)
    out_blocks = []
    for i in rows:
        if by_block is None:
            mine = np.arange(bounds[i], ends[i])
        else:
            mine = np.sort(by_block[bounds[i]:ends[i]])
        left_out = max(0, mine.size - TIMELINE_MAX_SPANS)
        if left_out:
            longest = np.argsort(-(sp["end_ns"][mine] - sp["start_ns"][mine]), kind="stable")[:TIMELINE_MAX_SPANS]
            mine = np.sort(mine[longest])
        s = sp[mine]
        out_blocks.append({
            "label": label_of.get(i, ""), "shown": i in label_of, "block": int(win["block"][i]),
            "sm": int(win["sm"][i]), "start_ns": int(win["start_ns"][i] - origin),
            "end_ns": int(win["end_ns"][i] - origin), "groups": sorted(int(g) for g in np.unique(s["group"])),
            "spans": {"group": s["group"].tolist(), "event": s["event"].tolist(), "depth": s["depth"].tolist(),
                      "start": (s["start_ns"] - origin).tolist(), "dur": (s["end_ns"] - s["start_ns"]).tolist()},
            "left_out": left_out,
        })
    return {
        "launch_ns": int(trace.end_ns - origin),
        "blocks": out_blocks,
        "num_blocks": int(win.size),
        "all_blocks": len(out_blocks) == win.size,
        "curves": lanes_inside_curves(trace),
    }


def _members_by_event(sp: np.ndarray):
    """Yield (event, number of its spans, runs), where each call of runs() iterates over its spans as
    index arrays of whole lanes each, in (lane, start) order. Decoded spans come lane by lane with starts
    in program order (core.model): then, with few regions, each region's spans are found run of whole
    lanes by run by a scan of the event column (no index of all of a region's spans is held), else by one
    stable radix sort of the 16-bit ids, held as int32; anything else falls back to a three-key lexsort."""
    lane, start, event = sp["lane"], sp["start_ns"], sp["event"]
    if _in_lane_start_order(lane, start):
        present = np.unique(event) if event.size else event
        if present.size <= FEW_REGIONS:
            parts = list(runs_of_whole_lanes(lane, MERGE_SPANS))  # the same runs for every region
            for e in present.tolist():
                yield e, count_of(event, e), lambda e=e: (np.flatnonzero(event[p] == e) + p.start for p in parts)
            return
        order = np.argsort(event, kind="stable")
    else:
        order = np.lexsort((start, lane, event))
    if order.size < 1 << 31:
        order = order.astype(np.int32)  # held through the loop: half the memory
    sorted_event = event[order]
    cuts = np.flatnonzero(np.r_[True, sorted_event[1:] != sorted_event[:-1], True])
    first_event = sorted_event[cuts[:-1]].astype(np.int64).tolist()
    del sorted_event
    for lo, hi, e in zip(cuts[:-1], cuts[1:], first_event):
        members = order[lo:hi]
        parts = list(runs_of_whole_lanes(sp["lane"][members], MERGE_SPANS))  # the members' lanes, not kept
        yield e, members.size, lambda members=members, parts=parts: (members[p] for p in parts)


FEW_REGIONS = 64  # up to this many region ids, each one's spans are found by a scan
SCAN_ROWS = 1 << 18  # rows of a column compared, counted or swept at a time


def _in_lane_start_order(lane: np.ndarray, start: np.ndarray, chunk: int = 1 << 20) -> bool:
    """Lanes nondecreasing and, within a lane, starts nondecreasing; checked a chunk at a time (the
    masked comparisons of whole columns cost two int64 copies of the table's starts)."""
    for i in range(0, max(lane.size - 1, 0), chunk):
        j = min(i + chunk, lane.size - 1)
        la, lb, sa, sb = lane[i:j], lane[i + 1 : j + 1], start[i:j], start[i + 1 : j + 1]
        if not ((lb > la) | ((lb == la) & (sb >= sa))).all():
            return False
    return True


def lanes_inside_curves(trace: Trace, points: int = CURVE_POINTS) -> dict:
    """Per region: how many lanes are inside it over the launch, as the maximum in each of `points`
    equal time bins (a lane inside nested regions of one id counts once: its intervals are merged
    first). Times are ns from the launch start. Per region (_members_by_event) its merged intervals'
    boundaries, built run of whole lanes by run (MERGE_SPANS spans), in 32 bits when the launch is
    shorter than 2**30 ns, are sorted and swept a window of bins at a time (_region_curve)."""
    sp = trace.spans
    origin = int(trace.start_ns)
    span = max(int(trace.end_ns) - origin, 1)
    edges = np.linspace(0, span, points + 1).round().astype(np.int64)
    out = {"t": edges[:-1].tolist(), "bin_ns": span / points, "series": []}
    boundary = np.int32 if 2 * span + 1 < 1 << 31 else np.int64
    for e, count, runs in _members_by_event(sp):
        peak = _region_curve(sp, runs, count, origin, span, boundary, edges)
        out["series"].append({"event": e, "name": trace.names.event(e), "lanes": peak.astype(int).tolist(),
                              "max": int(peak.max()) if peak.size else 0})
    return out


MERGE_SPANS = 1 << 16  # spans merged at a time (whole lanes): temporaries ~40 B a span
WINDOW_BOUNDARIES = 1 << 22  # boundaries of one region sorted and swept at a time (16 MB as int32)


def _region_curve(sp: np.ndarray, runs, count: int, origin: int, span: int, dtype, edges: np.ndarray) -> np.ndarray:
    """_peak_per_bin of one region's merged boundaries, in windows of whole bins holding about
    WINDOW_BOUNDARIES boundaries each when the region has more (2 per span at most): a first pass counts
    each window's boundaries and the level at its start, then each window's are made (the merge is
    redone), sorted and swept on their own. The region's boundaries are never all held at once."""
    windows = max(1, min(edges.size - 1, -(-2 * count // WINDOW_BOUNDARIES)))
    if windows == 1:
        t = _gathered(_merged_boundaries(sp, runs(), origin, span, dtype), 2 * count, dtype)
        t.sort()
        return _peak_per_bin(t, edges, 0)
    first_bin = np.linspace(0, edges.size - 1, windows + 1).round().astype(np.int64)
    limits = (2 * edges[first_bin[1:-1]]).astype(dtype)  # window w holds keys in [limits[w-1], limits[w])
    sizes = np.zeros(windows, np.int64)
    level_change = np.zeros(windows, np.int64)  # entries - exits of each window
    for keys in _merged_boundaries(sp, runs(), origin, span, dtype):
        window = np.searchsorted(limits, keys, side="right")
        sizes += np.bincount(window, minlength=windows)
        level_change += np.bincount(window, weights=(keys & 1) * 2 - 1, minlength=windows).astype(np.int64)
    level_at_start = np.cumsum(level_change) - level_change
    peaks = []
    for w in range(windows):
        in_window = (keys[np.searchsorted(limits, keys, side="right") == w]
                     for keys in _merged_boundaries(sp, runs(), origin, span, dtype))
        t = _gathered(in_window, sizes[w], dtype)
        t.sort()
        peaks.append(_peak_per_bin(t, edges[first_bin[w] : first_bin[w + 1] + 1], int(level_at_start[w])))
        del t  # the next window's boundaries are made without it
    return np.concatenate(peaks)


def _gathered(parts, size: int, dtype) -> np.ndarray:
    """The arrays `parts` (at most `size` values in all) one after the other in one array of `dtype`."""
    out = np.empty(size, dtype)
    filled = 0
    for part in parts:
        out[filled : filled + part.size] = part
        filled += part.size
    return out[:filled]


def _peak_per_bin(t: np.ndarray, edges: np.ndarray, level: int) -> np.ndarray:
    """Most lanes inside in each bin [edges[b], edges[b + 1]) from the sorted boundary keys t (2t + 1 an
    entry, 2t an exit; none before edges[0], `level` lanes inside there): the level at the bin's start,
    or the highest level reached inside the bin (the last bin: up to the last key). The level (running
    count) is swept SCAN_ROWS keys at a time; times are compared as keys (t <= x is key <= 2x + 1,
    t < x is key < 2x), so no shifted copy of t is made."""
    keys = (2 * edges).astype(t.dtype)
    last_at_or_before = np.searchsorted(t, keys[:-1] + 1, side="right") - 1  # per bin start
    lo = np.searchsorted(t, keys[:-1], side="left")  # first boundary in each bin
    hi = np.searchsorted(t, keys[1:], side="left")
    upto = np.r_[lo[1:], t.size]  # each bin's max runs to the next bin's first boundary (last: the end)
    at_start = np.full(lo.size, level, np.int32)
    inside = np.full(lo.size, np.iinfo(np.int32).min, np.int32)
    carry = level
    for i in range(0, t.size, SCAN_ROWS):
        j = min(i + SCAN_ROWS, t.size)
        level = (t[i:j] & 1).astype(np.int32)
        level *= 2
        level -= 1
        np.cumsum(level, out=level)
        level += carry
        carry = int(level[-1])
        here = (last_at_or_before >= i) & (last_at_or_before < j)
        at_start[here] = level[last_at_or_before[here] - i]
        a, b = np.maximum(lo, i) - i, np.minimum(upto, j) - i
        some = b > a
        if some.any():  # bins are disjoint and in order: reduceat over (start, end) pairs, keep the starts
            pairs = np.stack([a[some], b[some]], 1).ravel()
            padded = np.append(level, level[-1])  # an index may equal the chunk's length
            got = np.maximum.reduceat(padded, pairs)[::2]
            inside[some] = np.maximum(inside[some], got)
    return np.where(hi > lo, np.maximum(at_start, inside), at_start)


def _merged_boundaries(sp: np.ndarray, runs, origin: int, span: int, dtype):
    """Yield, per run of `runs` (index arrays of whole lanes of one region's spans, in lane then start
    order), the boundaries of its merged intervals as 2t + 1 for an entry and 2t for an exit (time order
    then puts a lane leaving before one entering at the same time; the step is the low bit, so one sorted
    array serves), unsorted."""
    for rows in runs:
        if rows.size == 0:
            continue
        lane = sp["lane"][rows]
        a = sp["start_ns"][rows]
        a -= origin
        key = lane.astype(np.int64)
        key *= span + 2  # per-lane offset: one running maximum serves every lane
        run = sp["end_ns"][rows]
        run -= origin
        run += key
        np.maximum.accumulate(run, out=run)
        run -= key
        del key
        new = np.ones(a.size, bool)
        new[1:] = (lane[1:] != lane[:-1]) | (a[1:] > run[:-1])
        closes = np.empty_like(new)  # the last span of each merged interval: the next one opens one
        closes[:-1] = new[1:]
        closes[-1:] = True
        m = int(np.count_nonzero(new))
        keys = np.empty(2 * m, dtype)
        keys[:m] = a[new]
        keys[:m] *= 2
        keys[:m] += 1
        keys[m:] = run[closes]
        keys[m:] *= 2
        yield keys
