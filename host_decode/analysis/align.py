"""Put an intra-kernel trace on the clock of a torch.profiler Chrome trace of the same run (the merged
Chrome JSON trace, in which the kernel's slice contains its regions, is written by
host_decode.reports.merged.merge_with_torch_trace).

Clocks (checked on a real trace, tests/fixtures/torch/cpu_steps.json.gz, torch 2.x / Kineto): an event's
time is ``baseTimeNanoseconds + 1000 * ts`` ns since the Unix epoch (``ts`` in microseconds with 3
decimals; Kineto converts CUPTI's timestamps to Unix-epoch ns). Older traces have no
``baseTimeNanoseconds``; then ``ts`` itself is the time in us. ``%globaltimer`` on recent drivers counts
ns since about the Unix epoch too, but it is set from the host clock when the driver loads and may drift
from it, so its offset to the profiler's clock is *solved*, not assumed:

    the kernel's regions [t0, t1] (earliest and latest record of the capture, anchors and finalize
    included) must lie inside the kernel's slice [ks, ke] of the profiler trace, so the offset o
    (profiler time = globaltimer + o) lies in the feasible interval [ks - t0, ke - t1], of width
    slack = (ke - ks) - (t1 - t0) (launch latency before the first record + drain after the last).

``placement="mid"`` (default) takes the middle of that interval: the error is at most ``slack / 2``
(reported as ``accuracy_ns``). ``placement="start"`` takes ``ks - t0 + launch_latency_ns`` (clamped into
the interval), for users who measured their launch latency. With several launches (a session; pass
``occurrence`` as a list), the clocks' offset is common to all of them (drift over a run is far below
the slack), so the feasible intervals are intersected: the bound tightens to the narrowest launch's.
A negative slack (regions longer than the slice: wrong slice, or clocks at different rates) is
reported as ``consistent = False`` and the offset centres the regions on the slice.

Malformed input: a kernel slice that cannot be timed (no numeric ts/dur, a negative dur, times out of
range) is skipped and counted per reason as the loader counts it (``Alignment.skipped_slices``); a kernel
slice whose ``name`` is not a string, or a ``baseTimeNanoseconds`` that is not an integer within +-2**62, is
a DecodeError naming the file and the field. Offsets are solved on Python integers (no overflow).

Guarded by tests/unit/host_decode/analysis/test_align.py.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Sequence

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.model import Trace
from host_decode.torch_traces.columns import float_column, timed_rows, us_to_ns
from host_decode.torch_traces.loader import read_chrome as load_chrome  # noqa: F401 -- the one torch trace reader

KERNEL_CATS = ("kernel",)
BASE_TIME_LIMIT_NS = 1 << 62  # |baseTimeNanoseconds|: base + a loader-checked ts still fits int64
AMBIGUITY_RATIO = 10  # auto-match by absolute time only if distance * this <= spacing of the slices


@dataclasses.dataclass
class Alignment:
    offset_ns: int  # profiler ns since epoch = trace ns + offset_ns
    feasible_lo_ns: int
    feasible_hi_ns: int
    slack_ns: int  # kernel slice length - region extent (narrowest launch when several)
    accuracy_ns: float  # bound on |offset error| (max distance to the feasible interval's ends)
    consistent: bool  # every launch's regions fit inside its slice
    placement: str
    kernel_name: str
    occurrences: list  # index of each matched slice among the slices with that name
    lead_ns: list  # per launch: kernel slice start -> first record, after alignment
    tail_ns: list  # per launch: last record -> kernel slice end, after alignment
    raw_offset_ns: int  # ks - t0 of the first launch: how far the two clocks are apart before solving
    absolute: bool
    skipped_slices: dict = dataclasses.field(default_factory=dict)  # kernel slices not timed: reason -> count

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# --- reading the profiler trace ------------------------------------------------------------------------


def base_time_ns(doc: dict, source: str = "") -> int:
    """The document's baseTimeNanoseconds (0 when absent); DecodeError naming the file and the field when
    it is not an integer within +-BASE_TIME_LIMIT_NS."""
    value = doc.get("baseTimeNanoseconds", 0)
    try:
        base = None if isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):
        base = None
    if base is None or abs(base) >= BASE_TIME_LIMIT_NS:
        raise DecodeError(f"baseTimeNanoseconds = {str(value)[:40]!r} is not an integer number of ns within "
                          "+-2**62", source=source)
    return base


def profiler_ns(doc: dict, ts_us: float, source: str = "") -> int:
    """Profiler time of a Chrome `ts` as ns since the epoch (see the module docstring)."""
    return base_time_ns(doc, source) + int(us_to_ns(np.array([float(ts_us)]))[0])  # exact at epoch us


def kernel_slices(doc: dict, source: str = "") -> tuple[list[dict], dict]:
    """Complete ('X') events of category kernel, in time order, and the count of those skipped per reason
    (the loader's: timed_rows). DecodeError for a slice whose name is not a string (absent: "", as the
    loader reads it)."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() in KERNEL_CATS]
    for e in ev:
        if not isinstance(e.get("name", ""), str):
            index = next(i for i, x in enumerate(doc["traceEvents"]) if x is e)
            raise DecodeError(f"traceEvents[{index}] (a kernel slice): 'name' = {e['name']!r} is not a string",
                              source=source)
    ts = float_column([e.get("ts") for e in ev])
    timed, skipped = timed_rows(ts, float_column([e.get("dur") for e in ev]))
    order = np.flatnonzero(timed)[np.argsort(ts[timed], kind="stable")]
    return [ev[i] for i in order], skipped


def find_kernel(doc: dict, kernel_name: str | None, source: str = "") -> tuple[str, list[dict], dict]:
    """The slices of one kernel: exact name match first, else the name as a substring (one distinct
    kernel must match), and the kernel slices skipped (kernel_slices). Raises DecodeError naming the
    candidates when nothing or too much matches."""
    slices, skipped = kernel_slices(doc, source)
    if not slices:
        raise DecodeError("the profiler trace has no kernel slices (was ProfilerActivity.CUDA enabled?)"
                          + (f"; skipped {skipped}" if skipped else ""), source=source)
    names = [e.get("name", "") for e in slices]
    if kernel_name is None:
        distinct = sorted(set(names))
        if len(distinct) != 1:
            raise DecodeError(f"{len(distinct)} distinct kernels in the profiler trace; pass kernel_name "
                              f"(e.g. {', '.join(repr(n[:60]) for n in distinct[:5])})", source=source)
        kernel_name = distinct[0]
    exact = [e for e, n in zip(slices, names) if n == kernel_name]
    if exact:
        return kernel_name, exact, skipped
    partial = [e for e, n in zip(slices, names) if kernel_name in n]
    distinct = sorted({e.get("name", "") for e in partial})
    if len(distinct) == 1:
        return distinct[0], partial, skipped
    if not distinct:
        common = sorted(set(names), key=names.count, reverse=True)[:5]
        raise DecodeError(f"no kernel slice named like {kernel_name!r}; kernels in the trace: "
                          + ", ".join(repr(n[:60]) for n in common), source=source)
    raise DecodeError(f"{kernel_name!r} matches {len(distinct)} different kernels: "
                      + ", ".join(repr(n[:60]) for n in distinct[:5]) + "; give the full name", source=source)


# --- solving the offset -------------------------------------------------------------------------------


def solve_offset(
    extents: Sequence[tuple[int, int]],
    slices: Sequence[tuple[int, int]],
    placement: str = "mid",
    launch_latency_ns: int | None = None,
) -> tuple[int, int, int, bool]:
    """extents: per launch (t0, t1) on the device clock; slices: (ks, ke) on the profiler clock.
    -> (offset, feasible lo, feasible hi, consistent). See the module docstring."""
    if placement not in ("mid", "start"):
        raise ValueError(f"placement must be 'mid' or 'start', not {placement!r}")
    # Python integers: epoch-ns slices minus device times near 0 (or 2**64) stay exact
    t = [(int(t0), int(t1)) for t0, t1 in extents]
    k = [(int(ks), int(ke)) for ks, ke in slices]
    lo = max(ks - t0 for (t0, _), (ks, _) in zip(t, k))
    hi = min(ke - t1 for (_, t1), (_, ke) in zip(t, k))
    if hi < lo:  # inconsistent: centre each launch's regions on its slice, on average
        centre = round(Fraction(sum(ks + ke - t0 - t1 for (t0, t1), (ks, ke) in zip(t, k)), 2 * len(k)))
        return centre, lo, hi, False
    if placement == "start" and launch_latency_ns is not None:
        return int(min(max(lo + int(launch_latency_ns), lo), hi)), lo, hi, True
    return (lo + hi) // 2, lo, hi, True


def align(
    trace: Trace,
    doc: dict,
    kernel_name: str | None = None,
    occurrence: int | Sequence[int] | None = None,
    placement: str = "mid",
    launch_latency_ns: int | None = None,
    source: str = "",
) -> tuple[Alignment, list[dict]]:
    """Match the capture to its kernel slice(s) and solve the offset. A session trace (meta['parts'])
    is matched launch by launch to consecutive slices starting at `occurrence`."""
    name, matches, skipped = find_kernel(doc, kernel_name or (trace.meta or {}).get("kernel"), source)
    extents = launch_extents(trace)
    n = len(extents)
    if occurrence is None:
        occ = _pick_occurrences(doc, matches, extents, trace.absolute, source, name)
    elif isinstance(occurrence, int):
        first = occurrence + len(matches) if occurrence < 0 else occurrence
        occ = list(range(first, first + n))
    else:
        occ = [int(o) + len(matches) if int(o) < 0 else int(o) for o in occurrence]
    if len(occ) != n or min(occ) < 0 or max(occ) >= len(matches):
        raise DecodeError(f"occurrence {occurrence!r}: need {n} slice(s) of {name[:60]!r} and the trace has "
                          f"{len(matches)}" + (f" (kernel slices skipped: {skipped})" if skipped else ""),
                          source=source)
    chosen = [matches[i] for i in occ]
    ks = [(profiler_ns(doc, e["ts"], source), profiler_ns(doc, e["ts"], source) + _dur_ns(e["dur"])) for e in chosen]
    offset, lo, hi, ok = solve_offset(extents, ks, placement, launch_latency_ns)
    slack = min((ke - kb) - (t1 - t0) for (t0, t1), (kb, ke) in zip(extents, ks))
    result = Alignment(
        offset_ns=offset,
        feasible_lo_ns=lo,
        feasible_hi_ns=hi,
        slack_ns=int(slack),
        accuracy_ns=float(max(offset - lo, hi - offset)) if ok else float(abs(hi - lo)),
        consistent=ok,
        placement=placement,
        kernel_name=name,
        occurrences=occ,
        lead_ns=[int(t0 + offset - kb) for (t0, _), (kb, _) in zip(extents, ks)],
        tail_ns=[int(ke - (t1 + offset)) for (_, t1), (_, ke) in zip(extents, ks)],
        raw_offset_ns=int(ks[0][0] - extents[0][0]),
        absolute=bool(trace.absolute),
        skipped_slices=skipped,
    )
    return result, chosen


def _dur_ns(dur_us) -> int:
    return int(us_to_ns(np.array([float(dur_us)]))[0])


def launch_extents(trace: Trace) -> list[tuple[int, int]]:
    """(earliest, latest) record per launch: one for a single capture, one per part of a session."""
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    if lanes.size == 0:
        raise ValueError("the capture has no timed records: nothing to align")
    parts = (trace.meta or {}).get("parts")
    if not parts:
        return [(int(lanes["first_ns"].min()), int(lanes["last_ns"].max()))]
    edges = np.array([p["block_offset"] for p in parts] + [trace.num_blocks])
    part = np.searchsorted(edges, lanes["block"], side="right") - 1
    out = []
    for i in range(len(parts)):  # per launch: few
        m = part == i
        if m.any():
            out.append((int(lanes["first_ns"][m].min()), int(lanes["last_ns"][m].max())))
    return out


def _pick_occurrences(doc, matches, extents, absolute, source, name) -> list[int]:
    n = len(extents)
    if len(matches) == n:
        return list(range(n))
    if not absolute:
        raise DecodeError(f"{len(matches)} slices of {name[:60]!r} and the capture holds {n} launch(es) without "
                          "absolute time: pass occurrence (index of the slice of its first launch)", source=source)
    # absolute %globaltimer is near the profiler's epoch clock: take the slice closest in time, but only
    # when the distance is small against the spacing of the slices (the clocks may be further apart than
    # launches are, and then the nearest slice is the wrong one)
    starts = [profiler_ns(doc, e["ts"], source) for e in matches]  # Python integers: exact at any distance
    dist = [abs(s - extents[0][0]) for s in starts]
    best = dist.index(min(dist))
    spacing = min((abs(s - starts[best]) for i, s in enumerate(starts) if i != best), default=float("inf"))
    if AMBIGUITY_RATIO * dist[best] > spacing:
        raise DecodeError(f"{len(matches)} slices of {name[:60]!r}: the capture's absolute time is "
                          f"{int(dist[best])} ns from the nearest and the slices are {int(spacing)} ns apart, "
                          "too close to tell; pass occurrence", source=source)
    first = min(best, len(matches) - n)
    return list(range(first, first + n))
