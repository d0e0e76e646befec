"""Duration histograms: the report's (bins aligned to the timer step, geometric for long tails) and
`ikp stats`' (min..max in equal or geometric bins, drawn as a sparkline).

Two shapes for two readers: the report labels each bin with the values in it, so its bins are whole
timer steps centred on the values %globaltimer can give (no empty bins between multiples of 32 ns);
`ikp stats` draws a sparkline of min..max, whose JSON output (``hist_edges_ns``) keeps its equal bins.

Invariants, and the tests that guard them:
- every duration is counted in exactly one bin
  (tests/unit/host_decode/analysis/test_analysis.py::test_histogram_counts_every_span;
  tests/unit/host_decode/reports/test_report_timeline.py::test_geometric_bins_for_long_tails);
- step-aligned bins grow geometrically when the longest duration is more than LOG_BINS_RATIO x the
  shortest, with at most HIST_BINS bins, and one value gives one bin (::test_geometric_bins_for_long_tails).
"""

from __future__ import annotations

import numpy as np

from host_decode.core import wire
from host_decode.core.arrays import CHUNK_ROWS
from host_decode.core.model import Trace

HIST_BINS = 24
LOG_BINS_RATIO = 8  # max / min duration above which the report's bins grow geometrically


def duration_histogram(d: np.ndarray, bins: int = HIST_BINS, step: int = wire.TIMER_STEP_NS) -> tuple[list, list, bool]:
    """Counts, edges (ns) and whether the bins grow geometrically. Durations read off %globaltimer are
    multiples of its step (32 ns): bins are then whole steps centred on the values, so no bin is empty
    only because no multiple of 32 fell in it (the comb a plain linspace gives). When the longest
    duration is more than LOG_BINS_RATIO x the shortest, bin widths grow geometrically (still whole
    steps), so a 2 µs tail beside 200 ns regions gets bins of its own instead of one flat bar. Edges are
    bin boundaries, half a step off the values (the page labels values, never a negative one)."""
    d = np.asarray(d, np.int64)
    if d.size == 0:
        return [], [], False
    lo, hi = int(d.min()), int(d.max())
    geometric = False
    if step > 1 and not any(np.any(d[i : i + CHUNK_ROWS] % step) for i in range(0, d.size, CHUNK_ROWS)):
        steps = (hi - lo) // step + 1  # values lo, lo + step, ..., hi
        if steps > bins and (hi + step) / max(lo, step) > LOG_BINS_RATIO:
            k = np.unique(np.rint(np.geomspace(1, steps + 1, bins + 1)).astype(np.int64)) - 1
            edges = lo - step / 2 + step * k.astype(np.float64)
            geometric = True
        else:
            width = step * max(1, -(-(hi - lo + step) // (bins * step)))
            n = (hi - lo) // width + 1
            edges = lo - step / 2 + width * np.arange(n + 1, dtype=np.float64)
    elif hi > lo:
        edges = np.linspace(lo, hi, bins + 1)
    else:
        edges = np.array([lo - 0.5, hi + 0.5])
    counts, edges = np.histogram(d, edges)
    return [int(c) for c in counts], [float(x) for x in edges], geometric



def region_histogram(trace: Trace, group: int, event: int, bins: int = 20, log: bool = False):
    """Counts and bin edges (ns) of the durations of one (group, event). `log`: geometric bins."""
    sp = trace.spans
    d = (sp["end_ns"] - sp["start_ns"])[(sp["group"] == group) & (sp["event"] == event)]
    if d.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    lo, hi = float(d.min()), float(d.max())
    if hi <= lo:
        edges = np.array([lo - 0.5, hi + 0.5])
    elif log and lo > 0:
        edges = np.geomspace(lo, hi, bins + 1)
    else:
        edges = np.linspace(lo, hi, bins + 1)
    counts, edges = np.histogram(d, edges)
    return counts, edges


