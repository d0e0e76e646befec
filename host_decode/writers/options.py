"""TraceOptions: the one set of choices for writing a trace file, taken by every writer layer.

``write_trace(trace, path, options)`` hands it to the writer of the file's format, which hands down
what each layer needs of it; no layer re-declares the choices one by one. The fields:

* ``slice_args``: per-slice debug annotations (block, group, SM, lane, event; ``ikp decode --slice-args``).
  Off by default: those facts are on the track descriptors already.
* ``lane_counters``: the "lanes in <region>" counter tracks, ``"auto"`` | ``"on"`` | ``"off"``; auto writes
  them for traces of at most lane_counters.LANE_COUNTERS_AUTO regions (they add about two samples a region).
* ``gzip``: None gzips iff the file name ends in .gz.
* ``timings``: the writer's phase timings on stderr (``ikp decode -v``); off by default.
* ``overlays``: the names of the overlays the Perfetto writer draws from the trace
  (host_decode.writers.overlays: flows and counters an analysis computes, e.g. "pipelines"); an overlay
  whose data the trace lacks draws nothing. Chrome JSON draws none (it has no flows of ours).

Invariants, and the tests that guard them:
- options are validated when made: an unknown lane_counters spelling or overlay name is a ValueError
  naming it (tests/unit/host_decode/writers/test_flows_counters.py::test_trace_options_are_checked);
- the same trace and options give the same bytes whichever entry point writes them (``ikp decode -o``,
  ``ikp view``, ``host_decode.write_trace``;
  tests/unit/host_decode/writers/test_flows_counters.py::test_three_paths_same_bytes).
"""

from __future__ import annotations

import dataclasses

from host_decode.core.model import Trace
from host_decode.writers.lane_counters import LANE_COUNTERS_AUTO
from host_decode.writers.overlays import OVERLAYS

LANE_COUNTER_CHOICES = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class TraceOptions:
    slice_args: bool = False
    lane_counters: str = "auto"  # LANE_COUNTER_CHOICES
    gzip: bool | None = None
    timings: bool = False
    overlays: tuple[str, ...] = tuple(OVERLAYS)  # every registered overlay

    def __post_init__(self):
        if self.lane_counters not in LANE_COUNTER_CHOICES:
            raise ValueError(f"TraceOptions.lane_counters: {self.lane_counters!r} is not one of {LANE_COUNTER_CHOICES}")
        if isinstance(self.overlays, str):
            raise ValueError(f"TraceOptions.overlays: want a tuple of overlay names, got the string {self.overlays!r}")
        object.__setattr__(self, "overlays", tuple(self.overlays))
        unknown = [name for name in self.overlays if name not in OVERLAYS]
        if unknown:
            raise ValueError(f"TraceOptions.overlays: unknown overlay(s) {unknown} (known: {sorted(OVERLAYS)})")

    def with_lane_counters(self, trace: Trace) -> bool:
        """Whether the lanes-inside counters go into the file of `trace`."""
        if self.lane_counters == "auto":
            return trace.spans.size <= LANE_COUNTERS_AUTO
        return self.lane_counters == "on"

    def gzipped(self, path) -> bool:
        """Whether the file at `path` is gzipped: `gzip`, or (None) whether its name ends in .gz."""
        return str(path).lower().endswith(".gz") if self.gzip is None else bool(self.gzip)


DEFAULT_OPTIONS = TraceOptions()
