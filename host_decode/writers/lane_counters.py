"""The "lanes in <region>" counters: per region id, how many lanes are inside it over time.

A lane inside nested regions of the same id counts once; at equal time the decrements apply first, so
back-to-back regions of one lane never count twice. They add about two samples a region, so by default
(TraceOptions(lane_counters="auto")) they are written only for traces of at most LANE_COUNTERS_AUTO regions.

Invariants, and the tests that guard them: a lane counts once however deep its regions of one id nest
(tests/unit/host_decode/writers/test_perfetto.py::test_lanes_inside_counts_lanes_once); the counters of random traces
equal a count from the spans (tests/unit/host_decode/writers/test_chrome_json.py::test_random_traces).
"""

from __future__ import annotations

import numpy as np

from host_decode.core.arrays import segmented_cummax

LANE_COUNTERS_AUTO = 1 << 16  # writers' default: lanes-inside counters (~2 samples a region) up to this many regions


def lanes_inside(spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per region id, the number of lanes inside it over time: (event, ts_ns, value) change points,
    sorted by (event, ts). A lane inside nested regions of the same id counts once. At equal time the
    decrements apply first, so back-to-back regions of one lane never count twice."""
    z = np.zeros(0, np.int64)
    if spans.size == 0:
        return z, z, z
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    start, end = spans["start_ns"], spans["end_ns"]
    t0 = int(start.min())
    outer = _outermost_same_id(lane, event, start - t0, end - t0)
    ev = event[outer]
    t = np.concatenate([end[outer], start[outer]]) - t0
    up = np.concatenate([np.zeros(ev.size, np.int64), np.ones(ev.size, np.int64)])
    e2 = np.concatenate([ev, ev])
    if int(t.max()) < (1 << 42) and int(e2.max()) < (1 << 15):
        key = np.sort(((e2 << 42 | t) << 1) | up)  # ids, then time, decrements (0) first
        up, t, e2 = key & 1, (key >> 1) & ((1 << 42) - 1), key >> 43
    else:
        o = np.lexsort((up, t, e2))
        up, t, e2 = up[o], t[o], e2[o]
    value = np.cumsum(2 * up - 1)  # each id's run returns to 0, so the running sum is per id
    last = np.r_[(e2[1:] != e2[:-1]) | (t[1:] != t[:-1]), True]
    return e2[last], t[last] + t0, value[last]


def _outermost_same_id(lane, event, start, end) -> np.ndarray:
    """Rows of spans not nested inside another span of the same (lane, event id)."""
    same_lane = lane[1:] == lane[:-1]
    if np.all(lane[1:] >= lane[:-1]) and np.all(start[1:][same_lane] >= start[:-1][same_lane]):
        o = np.argsort((lane << 16) | event, kind="stable")  # rows are in begin order within a lane
    else:
        o = np.lexsort((-end, start, event, lane))
    grp = (lane[o] << 16) | event[o]
    new = np.r_[True, grp[1:] != grp[:-1]]
    # the running max of end inside each group: a span starting at or after it is outermost (the first
    # of a group always is, whatever the previous group's max)
    runmax = segmented_cummax(end[o], np.cumsum(new) - 1)
    prev = np.r_[-1, runmax[:-1]]
    is_outer = new | (start[o] >= prev)
    return np.sort(o[is_outer])
