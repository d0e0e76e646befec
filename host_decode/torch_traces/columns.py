"""The table of a PyTorch profiler trace (TorchTrace: one row per complete event, numpy columns) and the
Builder that turns parsed events into its columns, chunk by chunk (host_decode.torch_traces.chunks
feeds it; host_decode.torch_traces.loader is the entry point).

Invariants, and the tests that guard them (tests/unit/host_decode/torch_traces/test_kernels.py):
- every element of `traceEvents` is counted: complete events ("ph": "X") become rows, the others are
  counted per phase; X events that cannot be timed (no numeric ts/dur, a negative dur, ts or ts + dur beyond
  TIME_LIMIT_US) are counted under a reason (timing_faults), never dropped silently
  (::test_counts_every_event, ::test_untimed_events_are_counted_not_dropped,
  ::test_negative_and_out_of_range_times_are_skipped);
- timestamps are int64 ns, exact: whole microseconds are split off as integers before scaling
  (::test_epoch_timestamps_exact);
- pid/tid keep their integer values, negative ones included; a name is stored as LABEL_BASE - i
  (::test_negative_tids_parallel);
- the msgspec typed path and the orjson path give the same columns; an event the typed schema does not
  fit is read again as dicts (Retry).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from host_decode.core.errors import DecodeError

LABEL_BASE = -(1 << 62)  # a pid/tid given as a string is stored as LABEL_BASE - index into `labels`
# |ts|, |dur|, |ts + dur| below 4.6e18 ns (< 2**62; the year 2115 in epoch ns): differences of times fit int64
TIME_LIMIT_US = 4.6e15
SKIP_UNTIMED = "X event without numeric ts/dur"
SKIP_OUT_OF_RANGE = "X event with ts, dur or ts + dur beyond 4.6e15 us"
SKIP_NEGATIVE = "X event with negative dur"

# Categories, compared lower-case: current Kineto names first, older profiler names after.
KERNEL_CATS = {"kernel": "kernel"}
MEMORY_CATS = {"gpu_memcpy": "memcpy", "gpu_memset": "memset", "memcpy": "memcpy", "memset": "memset"}
DEVICE_CATS = {**KERNEL_CATS, **MEMORY_CATS}
RUNTIME_CATS = {"cuda_runtime": "runtime", "cuda_driver": "driver", "runtime": "runtime"}
STEP_CATS = ("user_annotation", "cpu_op", "operator")  # "Operator": profilers before Kineto's cpu_op
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

COLUMNS = {"cat": np.int32, "name": np.int32, "ts_ns": np.int64, "dur_ns": np.int64, "pid": np.int64,
           "tid": np.int64, "device": np.int64, "stream": np.int64, "correlation": np.int64}



@dataclass
class TorchTrace:
    """Complete events of one trace, one row each. String columns index `names` / `cats`; a pid or tid
    that is not an integer is stored as LABEL_BASE - i, i indexing `labels`. device/stream/correlation are the
    `args` fields (-1 where absent)."""

    source: str
    columns: dict
    names: list
    cats: list
    labels: list
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns["ts_ns"])

    def cat_mask(self, wanted) -> np.ndarray:
        """Rows whose category (lower-case) is in `wanted`."""
        ids = [i for i, c in enumerate(self.cats) if c.lower() in wanted]
        return np.isin(self.columns["cat"], np.asarray(ids, dtype=np.int32))

    def kind_of(self, cat_id: int) -> str:
        c = self.cats[cat_id].lower()
        return DEVICE_CATS.get(c) or RUNTIME_CATS.get(c) or c

    def lane_label(self, value: int) -> str:
        return self.labels[LABEL_BASE - value] if value <= LABEL_BASE else str(value)



class Retry(Exception):
    """The typed (msgspec) decoding did not fit a chunk: decode it again as dicts."""


NO_ARGS = [None]  # the msgspec Args default instance, set by struct_decoder


def struct_decoder(parser: str):
    """A msgspec decoder of just the fields we use (unknown fields are skipped without allocating), or
    None when parser is "orjson" or msgspec is not installed. Anything that does not fit the schema
    (a string stream id, a missing ts, ...) goes through the orjson path instead, with its checks."""
    if parser == "orjson":
        return None
    try:
        import msgspec
    except ImportError:
        if parser == "msgspec":
            raise
        return None
    from typing import Optional, Union

    # defstruct, not class syntax: this module's annotations are strings (from __future__ import annotations)
    args = msgspec.defstruct("Args", [("device", int, -1), ("stream", int, -1), ("correlation", int, -1)])
    event = msgspec.defstruct("Event", [
        ("ph", Optional[str], None), ("cat", str, ""), ("name", str, ""), ("ts", Optional[float], None),
        ("dur", Optional[float], None), ("pid", Union[int, str], -1), ("tid", Union[int, str], -1),
        ("args", Optional[args], None)])
    NO_ARGS[0] = args()
    return msgspec.json.Decoder(list[event])


class Interner(dict):
    """str -> dense id; ids follow first appearance."""

    def __missing__(self, key):
        value = self[key] = len(self)
        return value


@dataclass
class Builder:
    names: Interner = field(default_factory=Interner)
    cats: Interner = field(default_factory=Interner)
    labels: Interner = field(default_factory=Interner)
    parts: dict = field(default_factory=lambda: {k: [] for k in COLUMNS})
    phases: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    n_elements: int = 0
    decoder: object = None  # a msgspec decoder of the fields we use, or None (orjson only)
    worker_peak_rss: int = 0  # bytes, the largest among parser worker processes (0: none used)

    def label_code(self, value) -> int:
        if value.__class__ is int:
            if value <= LABEL_BASE:
                raise DecodeError(f"pid/tid {value} is below {LABEL_BASE}, the range kept for named pids/tids")
            return value
        return LABEL_BASE - self.labels[str(value)]

    def add_chunk(self, events: list, source: str, first_index: int, offsets) -> None:
        """Columns from one chunk of parsed events (`offsets`: byte offset of each, for errors)."""
        try:
            phases = [e.get("ph") for e in events]
        except AttributeError:
            bad = next(i for i, e in enumerate(events) if not isinstance(e, dict))
            raise DecodeError(f"event {first_index + bad} at byte {offsets[bad]}: not a JSON object "
                              f"({type(events[bad]).__name__})", source=source) from None
        counts = Counter(phases)
        for ph, n in counts.items():
            self.phases[str(ph)] = self.phases.get(str(ph), 0) + n
        complete = events if counts.get("X", 0) == len(events) else [
            e for e, ph in zip(events, phases) if ph == "X"]
        if not complete:
            return
        ts = float_column([e.get("ts") for e in complete])
        dur = float_column([e.get("dur") for e in complete])
        complete, ts, dur = self._keep_timed(complete, ts, dur)
        args = [e.get("args") or {} for e in complete]
        try:
            device = [a.get("device", -1) for a in args]
            stream = [a.get("stream", -1) for a in args]
            corr = [a.get("correlation", -1) for a in args]
        except AttributeError:
            bad = next(i for i, a in enumerate(args) if not isinstance(a, dict))
            raise DecodeError(f"complete event {bad} of the chunk starting at event {first_index}: "
                              f"'args' is not an object", source=source) from None
        names, cats, code = self.names, self.cats, self.label_code
        p = self.parts
        try:
            name_ids = np.array([names[e.get("name", "")] for e in complete], dtype=np.int32)
            cat_ids = np.array([cats[e.get("cat", "")] for e in complete], dtype=np.int32)
        except TypeError:  # an unhashable name/cat (a list or an object)
            raise DecodeError(f"an event's 'name' or 'cat' is not a string (chunk starting at event "
                              f"{first_index})", source=source) from None
        p["name"].append(name_ids)
        p["cat"].append(cat_ids)
        for key in ("pid", "tid"):
            values = [e.get(key, -1) for e in complete]
            p[key].append(_lane_column(values, code))
        p["ts_ns"].append(us_to_ns(ts))
        p["dur_ns"].append(us_to_ns(dur))
        for key, values in (("device", device), ("stream", stream), ("correlation", corr)):
            p[key].append(_int_column(values, key, source, first_index))

    def _keep_timed(self, complete: list, ts: np.ndarray, dur: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
        """The events that can be timed, and their ts / dur; the others counted in `skipped` per reason."""
        timed, skipped = timed_rows(ts, dur)
        for reason, n in skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n
        if timed.all():
            return complete, ts, dur
        return [e for e, keep in zip(complete, timed) if keep], ts[timed], dur[timed]

    def add_structs(self, events: list) -> bool:
        """Columns from msgspec-decoded events (see struct_decoder); False, with nothing added, when
        some complete event lacks ts/dur: the orjson path then counts it as skipped. Events with a negative
        dur or times out of range are counted as skipped here, as the orjson path counts them."""
        phases = [e.ph for e in events]
        counts = Counter(phases)
        complete = events if counts.get("X", 0) == len(events) else [e for e in events if e.ph == "X"]
        ts = np.array([e.ts for e in complete], dtype=np.float64)
        dur = np.array([e.dur for e in complete], dtype=np.float64)
        if not (np.isfinite(ts).all() and np.isfinite(dur).all()):
            return False
        for ph, n in counts.items():
            self.phases[str(ph)] = self.phases.get(str(ph), 0) + n
        complete, ts, dur = self._keep_timed(complete, ts, dur)
        if not complete:
            return True
        names, cats, code, p = self.names, self.cats, self.label_code, self.parts
        no_args = NO_ARGS[0]
        args = [e.args or no_args for e in complete]
        p["name"].append(np.array([names[e.name] for e in complete], dtype=np.int32))
        p["cat"].append(np.array([cats[e.cat] for e in complete], dtype=np.int32))
        p["pid"].append(_lane_column([e.pid for e in complete], code))
        p["tid"].append(_lane_column([e.tid for e in complete], code))
        p["ts_ns"].append(us_to_ns(ts))
        p["dur_ns"].append(us_to_ns(dur))
        p["device"].append(np.array([a.device for a in args], dtype=np.int64))
        p["stream"].append(np.array([a.stream for a in args], dtype=np.int64))
        p["correlation"].append(np.array([a.correlation for a in args], dtype=np.int64))
        return True

    def decode(self, orjson, body: bytes):
        """Events of `[...]` text: msgspec typed decoding when available and the events fit its schema
        (returns (events, True)), else orjson dicts (events, False); raises orjson.JSONDecodeError."""
        if self.decoder is not None:
            try:
                return self.decoder.decode(body), True
            except Exception:  # noqa: BLE001 - msgspec.DecodeError/ValidationError: let orjson judge
                pass
        return orjson.loads(body), False

    def add(self, events, typed: bool, source: str, first_index: int, offsets) -> None:
        if not (typed and self.add_structs(events)):
            if typed:  # re-read as dicts so that untimed events are counted the orjson way
                raise Retry
            self.add_chunk(events, source, first_index, offsets)

    def finish(self, source: str, meta: dict) -> TorchTrace:
        columns = {}
        for k, dtype in COLUMNS.items():  # one column at a time, freeing its parts: peak = parts + 1 column
            parts = self.parts[k]
            columns[k] = (np.concatenate(parts) if parts else np.zeros(0, dtype)).astype(dtype, copy=False)
            parts.clear()
        meta = dict(meta, phases=self.phases, skipped=self.skipped, n_elements=self.n_elements)
        strings = [[str(x) for x in table] for table in (self.names, self.cats, self.labels)]  # 5 -> "5"
        return TorchTrace(source, columns, *strings, meta)


def float_column(values: list) -> np.ndarray:
    """JSON numbers (or numeric strings, as numpy takes them) as float64; NaN where a value is missing,
    not a number (a bool is not one) or not finite: `timing_faults` then names the row untimed."""
    try:
        column = np.array(values, dtype=np.float64)
        if column.ndim == 1 and not any(v.__class__ is bool for v in values):
            return column
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([_number(v) for v in values], dtype=np.float64)  # None -> NaN


def timing_faults(ts_us: np.ndarray, dur_us: np.ndarray) -> dict:
    """Why rows of float microsecond ts/dur columns (float_column) cannot be timed: skip reason -> mask,
    the masks disjoint (a row gets the first reason that applies). The other rows convert exactly with
    us_to_ns, and any difference of their times (ts, ts + dur) fits int64."""
    untimed = ~(np.isfinite(ts_us) & np.isfinite(dur_us))
    with np.errstate(invalid="ignore", over="ignore"):
        in_range = ((np.abs(ts_us) < TIME_LIMIT_US) & (np.abs(dur_us) < TIME_LIMIT_US)
                    & (np.abs(ts_us + dur_us) < TIME_LIMIT_US))
    out_of_range = ~untimed & ~in_range
    return {SKIP_UNTIMED: untimed, SKIP_OUT_OF_RANGE: out_of_range,
            SKIP_NEGATIVE: ~untimed & ~out_of_range & (dur_us < 0)}


def timed_rows(ts_us: np.ndarray, dur_us: np.ndarray) -> tuple[np.ndarray, dict]:
    """(mask of the rows that can be timed, rows that cannot per skip reason) (timing_faults)."""
    timed = np.ones(len(ts_us), dtype=bool)
    skipped = {}
    for reason, faulty in timing_faults(ts_us, dur_us).items():
        n = int(np.count_nonzero(faulty))
        if n:
            skipped[reason] = n
            timed &= ~faulty
    return timed, skipped


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float microseconds (|us| < TIME_LIMIT_US, else ValueError) -> int64 ns without rounding the
    magnitude away: the whole microseconds are taken as integers (exact: a float64 at or above 2**52 is
    already an integer), only the fraction is scaled in float. `np.rint(us * 1000.0)` would round 1.7e18 ns
    to a multiple of 256 ns."""
    us = np.asarray(us, dtype=np.float64)
    if not (np.abs(us) < TIME_LIMIT_US).all():  # NaN fails too
        raise ValueError(f"microseconds beyond +-{TIME_LIMIT_US:g} (or not finite) have no int64 ns here")
    whole = np.floor(us)
    frac_ns = np.rint((us - whole) * 1000.0).astype(np.int64)  # us - whole is exact (Sterbenz)
    return whole.astype(np.int64) * 1000 + frac_ns


def _lane_column(values: list, code) -> np.ndarray:
    """pid/tid values: integers as they are (negative ones included), names as label codes."""
    try:
        col = np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([code(v) for v in values], dtype=np.int64)
    if col.size and col.min() <= LABEL_BASE:
        return np.array([code(v) for v in values], dtype=np.int64)  # raises, naming the value
    if any(v.__class__ is not int for v in values):  # floats or bools that numpy took as integers
        return np.array([code(v) if v.__class__ is not int else v for v in values], dtype=np.int64)
    return col


def _number(value):
    """A finite float from a JSON number (or numeric string, as numpy would take it); None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if np.isfinite(x) else None


def _int_column(values: list, key: str, source: str, first_index: int) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        bad = next(v for v in values if not isinstance(v, int))
        raise DecodeError(f"args.{key} = {bad!r} is not an integer (chunk starting at event {first_index})",
                          source=source) from None


# Bracket classes for the structural scan: +1 opens, -1 closes, 0 anything else.
