"""Overlays: what an analysis adds on top of a trace's own slices when it is written (flow arrows,
counter tracks), drawn by the writer itself from the trace, by name.

An overlay provider is a function ``provider(trace) -> Overlay | None`` (None: the trace has nothing for
it, e.g. no pipeline metadata); OVERLAYS maps each name TraceOptions.overlays may list to its provider.
A new overlay (cross-rank flows, ...) is one more function and one more entry.

* ``pipelines``: every matched pipeline / named-barrier wait as a flow from the signal that released it to
  the end of the wait, and per block "<pipeline> stages full" counters (host_decode.analysis.pipelines;
  docs/pipeline_waits.md), for traces whose sidecar declares ``pipelines`` or ``barriers``.
* ``async_units``: per block and pipeline, a row "TMA in flight: <P>" / "UMMA in flight: <P>" of the
  async-unit intervals (host_decode.analysis.async_units): a slice "<P>[s]" from issue to data ready where
  both are measured (a measured issue drawn at its signal's time, its doubt of the record's own path in the
  argument issue_doubt_ns; a measured ready at the waiter's wake-up); where only bounded, the doubt is a
  slice of its own, named for it: "<P>[s] (ready bounded)" from the last time the load was surely in flight
  to the latest it can have landed, "(issue bounded)" from the earliest it can have been issued, "(bounded)"
  for neither end measured. Slices carry the latency's bounds as arguments. A row is a merged set of sibling
  tracks, one per stage (more where a stage's bounds overlap), so loads in flight at once stack in depth and
  the row's depth reads as the loads in flight. Intervals with an open bound are not drawn.
* ``flags``: every wait of a flag or counter matched to the signal that released it, as a flow from the
  signal to the end of the wait, across blocks and ranks (host_decode.analysis.flag_paths; docs/flags.md),
  for traces whose sidecar (or a merged session's part) declares ``flags``.

The overlays drawn together share one pipeline analysis of the trace (pipeline_analysis).

Invariants, and the tests that guard them:
- drawing depends on the trace and the names only, so every entry point that writes a trace with the
  same options writes the same bytes
  (tests/unit/host_decode/writers/test_flows_counters.py::test_three_paths_same_bytes);
- overlays drawn together keep each one's flow kinds: a later overlay's kind indices are shifted past the
  earlier ones' names (tests/unit/host_decode/writers/test_flows_counters.py::test_overlays_combine);
- an overlay's data is checked before anything is written: counter series 1-D and of one length on a
  block of the trace, flows of FLOW_DTYPE with kinds that index the names and lanes of the trace
  (tests/unit/host_decode/writers/test_flows_counters.py::test_bad_flows_and_series_are_refused), slice sets
  that fit (writers/slice_sets.py);
- the async-unit rows hold exactly the analysis' closed intervals, each drawn over its bounds, the doubt
  apart (tests/unit/host_decode/writers/test_async_overlay.py::test_rows_draw_the_intervals).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Callable

import numpy as np

from host_decode.core.model import FLOW_DTYPE, CounterSeries, Trace
from host_decode.writers.slice_sets import SLICE_DTYPE, SliceSet, stack


@dataclasses.dataclass(frozen=True)
class Overlay:
    """Flows (FLOW_DTYPE rows; ``kind`` indexes flow_kinds), counter series and slice sets (slices on tracks of
    their own) to draw over a trace, and a note per overlay of what it holds ("123 pipeline flows, 4
    stages-full counters")."""

    flows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, FLOW_DTYPE))
    flow_kinds: tuple[str, ...] = ()
    counters: tuple[CounterSeries, ...] = ()
    notes: tuple[str, ...] = ()
    slice_sets: tuple[SliceSet, ...] = ()

    def check(self, trace: Trace) -> None:
        """ValueError / TypeError naming what does not fit `trace`."""
        for ss in self.slice_sets:
            ss.check(trace.num_blocks)
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
                   tuple(n for o in overlays for n in o.notes), tuple(s for o in overlays for s in o.slice_sets))


def draw_overlays(trace: Trace, names: tuple[str, ...]) -> Overlay:
    """The overlays `names` of `trace`, combined (NO_OVERLAY when none has anything to draw)."""
    drawn = [o for o in (provider_of(name)(trace) for name in names) if o is not None]
    return combine(drawn)


def provider_of(name: str) -> Callable[[Trace], Overlay | None]:
    try:
        return OVERLAYS[name]
    except KeyError:
        raise ValueError(f"unknown overlay {name!r} (known: {sorted(OVERLAYS)})") from None


_LAST_ANALYSIS: list = [None, None]  # (weak reference to a trace, its pipeline analysis)


def pipeline_analysis(trace: Trace):
    """The trace's PipelineAnalysis, or None without pipeline metadata; the overlays drawn for one trace share
    it (the last trace's analysis is kept while that trace lives)."""
    from host_decode.analysis.pipeline_meta import has_pipelines

    if not has_pipelines(trace):  # asked first: the analysis takes a few ms to import
        return None
    ref, pa = _LAST_ANALYSIS
    if ref is not None and ref() is trace:
        return pa
    from host_decode.analysis.pipelines import analyze_pipelines

    pa = analyze_pipelines(trace)
    _LAST_ANALYSIS[:] = [weakref.ref(trace), pa]
    return pa


def pipeline_overlay(trace: Trace) -> Overlay | None:
    """Pipeline flows and stages-full counters (host_decode.analysis.pipelines); None without pipeline
    metadata."""
    pa = pipeline_analysis(trace)
    if pa is None:
        return None
    flows = pa.flows()
    return Overlay(flows, tuple(pa.flow_kinds), tuple(pa.counters),
                   (f"{flows.size} pipeline flows, {len(pa.counters)} stages-full counters",))


ASYNC_ARGS = ("stage", "latency_min_ns", "latency_max_ns", "issue_doubt_ns", "ready_doubt_ns")


def async_unit_overlay(trace: Trace) -> Overlay | None:
    """The async-unit rows (module docstring); None without pipeline metadata or async units."""
    pa = pipeline_analysis(trace)
    if pa is None:
        return None
    from host_decode.analysis.async_units import CLASSES, SIDES, UNITS, analyze_async_units

    units = analyze_async_units(trace, pa)
    iv = units.intervals
    iv = iv[(iv["issue_lo"] >= 0) & (iv["ready_hi"] >= 0)]
    if not iv.size:
        return None
    # one row per block, pipeline and side; a track of the row per stage (a stage's uses follow each other),
    # and more where bounds of one stage overlap (sibling tracks, merged into the row)
    row_key = (iv["block"] * len(units.channels) + iv["channel"]) * len(SIDES) + iv["side"]
    stage_key = row_key * int(iv["stage"].max() + 1) + iv["stage"]
    level = stack(stage_key, iv["issue_lo"], iv["ready_hi"])
    track_key = stage_key * (int(level.max()) + 1) + level
    _, first, track = np.unique(track_key, return_index=True, return_inverse=True)
    tracks = tuple((b, f"{UNITS[u]} in flight: {units.channels[c].name}" + (" (frees stages)" if SIDES[s] == "empty"
                                                                              else ""))
                   for b, u, c, s in zip(iv["block"][first].tolist(), iv["unit"][first].tolist(),
                                         iv["channel"][first].tolist(), iv["side"][first].tolist()))
    # each interval's parts: the doubt about its issue, the time it surely was in flight, the doubt about ready;
    # a measured end (its doubt within the record's own path or a timer step) is drawn at its measured time
    ready_exact = np.isin(iv["cls"], [CLASSES.index("exact"), CLASSES.index("issue_bounded")])
    issue_exact = np.isin(iv["cls"], [CLASSES.index("exact"), CLASSES.index("ready_bounded")])
    issue_end = np.where(issue_exact, iv["issue_lo"], iv["issue_hi"])
    apart = issue_end <= iv["ready_lo"]
    core_end = np.where(ready_exact, iv["ready_hi"], iv["ready_lo"])
    parts = [  # (start, end, suffix, drawn)
        (iv["issue_lo"], issue_end, 1, apart),
        (issue_end, core_end, 0, apart),
        (iv["ready_lo"], iv["ready_hi"], 2, apart & ~ready_exact),
        (iv["issue_lo"], iv["ready_hi"], np.where(ready_exact, 1, 3), ~apart),
    ]
    suffixes = ("", " (issue bounded)", " (ready bounded)", " (bounded)")
    lat_min = np.maximum(iv["ready_lo"] - iv["issue_hi"], 0)
    args = np.stack([iv["stage"], lat_min, iv["ready_hi"] - iv["issue_lo"], iv["issue_hi"] - iv["issue_lo"],
                     iv["ready_hi"] - iv["ready_lo"]], axis=1).astype(np.int64)
    pieces = []
    for start, end, suffix, drawn in parts:
        keep = np.flatnonzero(drawn & (end > start))
        piece = np.zeros(keep.size, [("row", np.int64), ("label", np.int64)] + [(f, SLICE_DTYPE[f]) for f in
                                                                                 ("track", "start_ns", "end_ns")])
        piece["row"], piece["track"], piece["start_ns"], piece["end_ns"] = keep, track[keep], start[keep], end[keep]
        # a name per pipeline, stage and part: one label code, named once below
        piece["label"] = (iv["channel"][keep] * (int(iv["stage"].max()) + 1) + iv["stage"][keep]) * len(suffixes) \
            + np.broadcast_to(suffix, iv.shape)[keep]
        pieces.append(piece)
    piece = np.concatenate(pieces)
    labels, name = np.unique(piece["label"], return_inverse=True)
    per_channel = (int(iv["stage"].max()) + 1) * len(suffixes)
    names = tuple(f"{units.channels[int(x // per_channel)].name}[{int(x % per_channel // len(suffixes))}]"
                  f"{suffixes[int(x % len(suffixes))]}" for x in labels)
    slices = np.zeros(piece.size, SLICE_DTYPE)
    slices["track"], slices["name"] = piece["track"], name
    slices["start_ns"], slices["end_ns"] = piece["start_ns"], piece["end_ns"]
    exact = int((iv["cls"] == CLASSES.index("exact")).sum())
    note = f"{iv.size} async-unit intervals ({exact} exact) on {len(set(tracks))} rows"
    return Overlay(notes=(note,), slice_sets=(SliceSet(tracks, names, slices, ASYNC_ARGS, args[piece["row"]]),))


def flag_overlay(trace: Trace) -> Overlay | None:
    """A flow from each signal to the end of the wait it released, across blocks and ranks
    (host_decode.analysis.flag_paths: a signal placed after its wait by the clocks' residual error is drawn
    at the wait's end, under its own flow kind); None without flag call sites in the sidecar(s)."""
    from host_decode.load.sidecar import has_flags

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
    "async_units": async_unit_overlay,
    "flags": flag_overlay,
}
