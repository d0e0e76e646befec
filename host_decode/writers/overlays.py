"""Overlays: what an analysis adds on top of a trace's own slices when it is written (flow arrows,
counter tracks), drawn by the writer itself from the trace, by name.

An overlay provider is a function ``provider(trace) -> Overlay | None`` (None: the trace has nothing for
it, e.g. no pipeline metadata); OVERLAYS maps each name TraceOptions.overlays may list to its provider.
A new overlay (async-unit tracks, cross-rank flows, ...) is one more function and one more entry.

* ``pipelines``: every matched pipeline / named-barrier wait as a flow from the signal that released it to
  the end of the wait, and per block "<pipeline> stages full" counters (host_decode.analysis.pipelines;
  docs/pipeline_waits.md), for traces whose sidecar declares ``pipelines`` or ``barriers``.
* ``flags``: every wait of a flag or counter matched to the signal that released it, as a flow from the
  signal to the end of the wait, across blocks and ranks (host_decode.analysis.flag_paths; docs/flags.md),
  for traces whose sidecar (or a merged session's part) declares ``flags``.

Invariants, and the tests that guard them:
- drawing depends on the trace and the names only, so every entry point that writes a trace with the
  same options writes the same bytes (tests/test_flows_counters.py::test_three_paths_same_bytes);
- overlays drawn together keep each one's flow kinds: a later overlay's kind indices are shifted past the
  earlier ones' names (tests/test_flows_counters.py::test_overlays_combine);
- an overlay's data is checked before anything is written: counter series 1-D and of one length on a
  block of the trace, flows of FLOW_DTYPE with kinds that index the names and lanes of the trace
  (tests/test_flows_counters.py::test_bad_extras_are_errors).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from host_decode.core.model import FLOW_DTYPE, CounterSeries, Trace


@dataclasses.dataclass(frozen=True)
class Overlay:
    """Flows (FLOW_DTYPE rows; ``kind`` indexes flow_kinds) and counter series to draw over a trace, and
    a note per overlay of what it holds ("123 pipeline flows, 4 stages-full counters")."""

    flows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, FLOW_DTYPE))
    flow_kinds: tuple[str, ...] = ()
    counters: tuple[CounterSeries, ...] = ()
    notes: tuple[str, ...] = ()

    def check(self, trace: Trace) -> None:
        """ValueError / TypeError naming what does not fit `trace`."""
        for s in self.counters:
            if not isinstance(s, CounterSeries):
                raise TypeError(f"counters: expected CounterSeries, got {type(s).__name__}")
            if np.shape(s.times_ns) != np.shape(s.values) or np.ndim(s.times_ns) != 1:
                raise ValueError(f"counter series {s.name!r}: times_ns and values must be 1-D of one length")
            if s.block >= trace.num_blocks:
                raise ValueError(f"counter series {s.name!r}: block {s.block} is not a block of the trace")
        flows = self.flows
        if not isinstance(flows, np.ndarray) or flows.dtype != FLOW_DTYPE:
            raise ValueError(f"flows must be a FLOW_DTYPE array, got {getattr(flows, 'dtype', type(flows).__name__)}")
        if flows.size:
            kind = flows["kind"]
            if int(kind.min()) < 0 or int(kind.max()) >= len(self.flow_kinds):
                raise ValueError(f"flows: kind must index flow_kinds ({len(self.flow_kinds)} names given)")
            lanes = np.concatenate([flows["src_lane"], flows["dst_lane"]])
            if int(lanes.min()) < 0 or int(lanes.max()) >= trace.num_lanes:
                raise ValueError(f"flows: lanes must be within 0..{trace.num_lanes - 1}")


NO_OVERLAY = Overlay()


def combine(overlays: list[Overlay]) -> Overlay:
    """One overlay holding all of them: flow kinds concatenated (each one's kinds shifted past the
    names before it), counters and notes in order."""
    if not overlays:
        return NO_OVERLAY
    if len(overlays) == 1:
        return overlays[0]
    flows, kinds = [], []
    for o in overlays:
        shifted = o.flows.copy()
        shifted["kind"] += len(kinds)
        flows.append(shifted)
        kinds += list(o.flow_kinds)
    return Overlay(np.concatenate(flows), tuple(kinds), tuple(c for o in overlays for c in o.counters),
                   tuple(n for o in overlays for n in o.notes))


def draw_overlays(trace: Trace, names: tuple[str, ...]) -> Overlay:
    """The overlays `names` of `trace`, combined (NO_OVERLAY when none has anything to draw)."""
    drawn = [o for o in (provider_of(name)(trace) for name in names) if o is not None]
    return combine(drawn)


def provider_of(name: str) -> Callable[[Trace], Overlay | None]:
    try:
        return OVERLAYS[name]
    except KeyError:
        raise ValueError(f"unknown overlay {name!r} (known: {sorted(OVERLAYS)})") from None


def pipeline_overlay(trace: Trace) -> Overlay | None:
    """Pipeline flows and stages-full counters (host_decode.analysis.pipelines); None without pipeline
    metadata."""
    from host_decode.analysis.pipeline_meta import has_pipelines

    if not has_pipelines(trace):  # asked first: the analysis takes a few ms to import
        return None
    from host_decode.analysis.pipelines import analyze_pipelines

    pa = analyze_pipelines(trace)
    flows = pa.flows()
    return Overlay(flows, tuple(pa.flow_kinds), tuple(pa.counters),
                   (f"{flows.size} pipeline flows, {len(pa.counters)} stages-full counters",))


def flag_overlay(trace: Trace) -> Overlay | None:
    """A flow from each signal to the end of the wait it released, across blocks and ranks
    (host_decode.analysis.flag_paths: a signal placed after its wait by the clocks' residual error is drawn
    at the wait's end, under its own flow kind); None without flag call sites in the sidecar(s)."""
    from host_decode.analysis.flag_events import has_flags

    if not has_flags(trace):
        return None
    from host_decode.analysis.flag_paths import FLOW_KINDS, analyze_flags

    fa = analyze_flags(trace)
    flows = fa.flows()
    clamped = int((flows["kind"] == 1).sum())
    note = f"{flows.size} flag flows" + (f" ({clamped} drawn at their wait's end: clock residual within "
                                         f"{fa.error_bound_ns} ns)" if clamped else "")
    return Overlay(flows, FLOW_KINDS, (), (note,))


OVERLAYS: dict[str, Callable[[Trace], Overlay | None]] = {
    "pipelines": pipeline_overlay,
    "flags": flag_overlay,
}
