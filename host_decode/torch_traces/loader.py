"""PyTorch profiler Chrome traces, read: `load_torch_trace` (a columnar table of complete events, with
its `.ikpcache.npz` cache) and `read_chrome` (the whole document, for tools that rewrite it, such as
host_decode.analysis.align). The one place that opens torch traces. numpy + orjson (msgspec used when
installed).

Parsing (why it looks like this): `orjson.loads` on a whole 1 GB trace builds ~100 M Python objects
(several GB). We read the file in chunks and parse each chunk's whole events in one call (`[` + events
+ `]`), cutting at a guessed boundary (a `}` followed by `, {`): a wrong guess cannot parse (a cut inside
a string or a nested object leaves unbalanced text), and then a vectorized, string-aware bracket scan
(numpy) finds the exact boundaries; it also names the event index and byte offset of malformed input.
The fields we use go straight into numpy columns and each chunk's objects are freed before the next, so
memory is one chunk's objects plus the columns. With msgspec installed, a typed decoder reads just those
fields (the rest is skipped without allocating: ~2x less CPU); chunks it does not fit take the orjson
path. `workers > 1` parses chunks in that many processes.

Invariants a change could break (guarded by tests/test_kernels.py):
- every element of `traceEvents` is counted: complete events ("ph": "X") become rows, the others are
  counted per phase in `meta["phases"]`; X events that cannot be timed (no numeric ts/dur, a negative dur,
  ts or ts + dur beyond TIME_LIMIT_US) are counted in `meta["skipped"]` under a reason (`timing_faults`),
  never dropped silently (test_counts_every_event, test_untimed_events_are_counted_not_dropped,
  test_negative_and_out_of_range_times_are_skipped).
- times stay far inside int64: |ts|, |dur| and |ts + dur| < TIME_LIMIT_US, so any difference of two
  times fits int64 (the analyses subtract them freely).
- timestamps are int64 ns, exact: the whole microseconds are split off as integers before scaling
  (never `ts * 1000.0` in float, which at epoch magnitudes ~1.7e18 ns snaps to multiples of 256 ns);
  integer ts in the file are exact, fractional ones exact to the value the file's decimal parses to
  (test_epoch_timestamps_exact).
- pid/tid keep their integer values, negative ones included; a non-integer pid/tid (a name) is stored
  as LABEL_BASE - i, far below any real id (test_negative_tids_parallel).
- read_chrome: a document whose traceEvents are not all JSON objects is a DecodeError naming the event.
- the cache (`<trace>.ikpcache.npz`) is used only when its format version, source size and mtime match
  (test_cache_hit_and_invalidation); it is written without pickle and loaded with allow_pickle=False; a
  damaged one is parsed again (test_damaged_cache_is_parsed_again).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError

CACHE_FORMAT = 3  # 2: label codes at LABEL_BASE, exact epoch timestamps; 3: untimeable rows skipped
LABEL_BASE = -(1 << 62)  # a pid/tid given as a string is stored as LABEL_BASE - index into `labels`
CACHE_SUFFIX = ".ikpcache.npz"
CHUNK_BYTES = 8 << 20  # per chunk: ~8 MB text -> ~60 MB of orjson objects, freed before the next
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


# ---------------------------------------------------------------------------------------------- loading


def load_torch_trace(path, *, cache: bool = True, chunk_bytes: int = CHUNK_BYTES, workers: int = 1,
                     parser: str = "auto") -> TorchTrace:
    """Parse a torch.profiler Chrome trace, or load its `.ikpcache.npz` when it matches the file.

    workers > 1 parses chunks of large files in that many spawned processes (the `ikp kernels` default is
    2); as with any spawn-based pool, a calling script needs an `if __name__ == "__main__":` guard.
    parser: "auto" (msgspec typed decoding for the bulk when installed, else orjson), "orjson", "msgspec"."""
    path = Path(path)
    st = path.stat()
    cache_path = Path(str(path) + CACHE_SUFFIX)
    if cache:
        trace = _read_cache(cache_path, path, st)
        if trace is not None:
            return trace
    trace = _parse(path, chunk_bytes, workers, parser)
    trace.meta["cache"] = _write_cache(cache_path, trace, st) if cache else "disabled"
    return trace


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


class _Retry(Exception):
    """The typed (msgspec) decoding did not fit a chunk: decode it again as dicts."""


_NO_ARGS = [None]  # the msgspec Args default instance, set by _struct_decoder


def _struct_decoder(parser: str):
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
    _NO_ARGS[0] = args()
    return msgspec.json.Decoder(list[event])


class _Interner(dict):
    """str -> dense id; ids follow first appearance."""

    def __missing__(self, key):
        value = self[key] = len(self)
        return value


@dataclass
class _Builder:
    names: _Interner = field(default_factory=_Interner)
    cats: _Interner = field(default_factory=_Interner)
    labels: _Interner = field(default_factory=_Interner)
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
        """Columns from msgspec-decoded events (see _struct_decoder); False, with nothing added, when
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
        no_args = _NO_ARGS[0]
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
                raise _Retry
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
_BRACKETS = np.zeros(256, dtype=np.int8)
_BRACKETS[[ord("{"), ord("[")]] = 1
_BRACKETS[[ord("}"), ord("]")]] = -1
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\s*,\s*")
_WHITESPACE = re.compile(rb"\s*")


def _parse(path: Path, chunk_bytes: int, workers: int = 1, parser: str = "auto") -> TorchTrace:
    import orjson

    try:
        if workers > 1 and path.stat().st_size > 2 * chunk_bytes:
            try:
                return _parse_with(path, chunk_bytes, orjson, workers, parser)
            except _FallBack:
                pass  # a wrong boundary guess or malformed data: the serial parse finds and names the problem
        return _parse_with(path, chunk_bytes, orjson, 1, parser)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DecodeError(f"truncated or corrupt gzip stream: {err}", source=str(path)) from None


def _parse_with(path: Path, chunk_bytes: int, orjson, workers: int, parser: str) -> TorchTrace:
    source = str(path)
    builder = _Builder(decoder=_struct_decoder(parser))
    with _open(path) as f:
        buf, base, header = _find_array_start(f, source, chunk_bytes)
        first = True
        if workers > 1:
            buf, base, first = _parallel_body(f, buf, base, builder, chunk_bytes, workers, parser)
        trailer = _serial_body(orjson, f, buf, base, first, builder, source, chunk_bytes, "traceEvents" in header)
    meta = {k: v for k, v in {**header, **trailer}.items() if k != "traceEvents"}
    meta["parser"] = "msgspec+orjson" if builder.decoder is not None else "orjson"
    meta["workers"] = workers
    if builder.worker_peak_rss:
        meta["worker_peak_rss"] = builder.worker_peak_rss
    return builder.finish(source, meta)


def _serial_body(orjson, f, buf, base, first, builder, source, chunk_bytes, object_form) -> dict:
    """Parse the rest of the traceEvents array from `buf` + the file; returns the trailer's keys."""
    eof = False
    while True:
        cut = None if eof else _fast_chunk(orjson, buf, builder, source, base, first)
        if cut is None:  # exact scan: last chunk, or the fast path's guess failed
            starts, ends, close = _scan_elements(buf, source, base)
            if len(ends) == 0 and close is None:
                if eof:
                    raise _truncated(source, base + len(buf), builder.n_elements)
                more = f.read(chunk_bytes)
                eof = not more
                buf += more
                continue
            if len(ends):
                _check_separator(buf, 0, int(starts[0]), source, base, first)
                events = _loads_events(orjson, buf, starts, ends, source, base, builder.n_elements)
                builder.add_chunk(events, source, builder.n_elements, base + starts)
                builder.n_elements += len(ends)
                first = False
            if close is not None:
                tail_from = int(ends[-1]) + 1 if len(ends) else 0
                _check_separator(buf, tail_from, close, source, base, first, closing=True)
                return _parse_trailer(orjson, buf[close + 1:] + f.read(), source, base + close + 1, object_form)
            cut = int(ends[-1]) + 1
        else:
            first = False
        base += cut
        more = f.read(chunk_bytes)
        eof = not more
        buf = buf[cut:] + more


class _FallBack(Exception):
    """The parallel path met something it does not report precisely."""


def _parallel_body(f, buf, base, builder, chunk_bytes, workers, parser):
    """Cut the array at guessed boundaries and parse the pieces in worker processes, in order; stops at
    end of file and returns the unparsed rest (last events, ']' and trailer) for the serial path."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    pending = deque()
    first = True
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        while True:
            more = f.read(chunk_bytes)
            if not more:
                break
            buf += more
            guess = _guess_cut(buf, first)
            if guess is None:
                continue  # no boundary yet (an event larger than a chunk): read more
            begin, end = guess
            pending.append(pool.submit(_parse_body, b"[" + buf[begin:end + 1] + b"]", parser))
            first = False
            base += end + 1
            buf = buf[end + 1:]
            while len(pending) > 2 * workers:  # bounded: at most ~2 chunks in flight per worker
                _merge_part(builder, pending.popleft().result())
        while pending:
            _merge_part(builder, pending.popleft().result())
    return buf, base, first


def _parse_body(body: bytes, parser: str) -> dict:
    """Worker: columns of one piece `[events]`, with its own string tables."""
    import orjson

    builder = _Builder(decoder=_struct_decoder(parser))
    try:
        events, typed = builder.decode(orjson, body)
        try:
            builder.add(events, typed, "", 0, _OffsetsUnknown(0))
        except _Retry:
            events = orjson.loads(body)
            builder.add_chunk(events, "", 0, _OffsetsUnknown(0))
    except Exception as err:  # noqa: BLE001 - any failure sends the file to the exact serial path
        return {"error": repr(err)}
    builder.n_elements = len(events)
    t = builder.finish("", {})
    return {"columns": t.columns, "names": t.names, "cats": t.cats, "labels": t.labels,
            "phases": t.meta["phases"], "skipped": t.meta["skipped"], "n": len(events), "peak_rss": _peak_rss()}


def _peak_rss() -> int:
    """This process's peak resident set size in bytes (0 where unknown)."""
    try:
        import resource
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _merge_part(builder, part: dict) -> None:
    if "error" in part:
        raise _FallBack(part["error"])
    cols = part["columns"]
    remap_name = np.array([builder.names[s] for s in part["names"]] or [0], dtype=np.int32)
    remap_cat = np.array([builder.cats[s] for s in part["cats"]] or [0], dtype=np.int32)
    remap_label = np.array([builder.labels[s] for s in part["labels"]] or [0], dtype=np.int64)
    cols["name"] = remap_name[cols["name"]]
    cols["cat"] = remap_cat[cols["cat"]]
    for key in ("pid", "tid"):
        text = cols[key] <= LABEL_BASE
        if text.any():
            cols[key] = cols[key].copy()
            cols[key][text] = LABEL_BASE - remap_label[LABEL_BASE - cols[key][text]]
    for key, col in cols.items():
        builder.parts[key].append(col)
    for table, counts in ((builder.phases, part["phases"]), (builder.skipped, part["skipped"])):
        for k, v in counts.items():
            table[k] = table.get(k, 0) + v
    builder.n_elements += part["n"]
    builder.worker_peak_rss = max(builder.worker_peak_rss, part["peak_rss"])


_BOUNDARY = re.compile(rb"\s*,\s*\{")


def _guess_cut(buf: bytes, first: bool):
    """(begin, end): the first element's '{' and the '}' of the last element that seems complete (a '}'
    followed by ', {'), or None. Only a guess: orjson's parse of `[` + buf[begin:end+1] + `]` succeeds
    only if it is a real boundary (a cut inside a string or a nested object leaves the text unbalanced)."""
    lead = (_WHITESPACE if first else _SEPARATOR).match(buf)
    if lead is None or buf[lead.end(): lead.end() + 1] != b"{":
        return None
    begin = lead.end()
    end = len(buf)
    for _ in range(64):
        end = buf.rfind(b"}", begin, end)
        if end < 0:
            return None
        if _BOUNDARY.match(buf, end + 1):
            return begin, end
    return None


def _fast_chunk(orjson, buf: bytes, builder, source: str, base: int, first: bool):
    """Parse the whole events of `buf` at a guessed boundary without the bracket scan; a wrong guess
    costs one failed parse and returns None (the caller then scans exactly). Returns the cut."""
    guess = _guess_cut(buf, first)
    if guess is None:
        return None
    begin, end = guess
    body = b"[" + buf[begin: end + 1] + b"]"
    offsets = _OffsetsUnknown(base + begin)
    try:
        events, typed = builder.decode(orjson, body)
        try:
            builder.add(events, typed, source, builder.n_elements, offsets)
        except _Retry:
            events = orjson.loads(body)
            builder.add_chunk(events, source, builder.n_elements, offsets)
    except orjson.JSONDecodeError:
        return None
    builder.n_elements += len(events)
    return end + 1


class _OffsetsUnknown:
    """Byte offsets of fast-path events are not known individually: report the chunk's start."""

    def __init__(self, start: int):
        self.start = start

    def __getitem__(self, i):
        return f"(chunk starting at) {self.start}"


def _find_array_start(f, source: str, chunk_bytes: int):
    """Read until the `traceEvents` array opens; returns (bytes after '[', their offset, header dict)."""
    import orjson

    head = f.read(chunk_bytes)
    stripped = head.lstrip()
    if stripped[:1] == b"[":  # the Trace Event Format's plain-array form
        at = len(head) - len(stripped) + 1
        return head[at:], at, {}
    if stripped[:1] != b"{":
        raise DecodeError("not a Chrome trace: expected a JSON object with 'traceEvents' (or an array of events)",
                          source=source)
    pos = 0
    while True:
        m = _ARRAY_START.search(head, pos)
        if m is None:
            more = f.read(chunk_bytes)
            if not more or len(head) > (256 << 20):
                raise DecodeError("no 'traceEvents' array found", source=source)
            pos = max(0, len(head) - 64)
            head += more
            continue
        try:  # valid only where the match is the top-level key, not text inside a string
            header = orjson.loads(head[:m.end()] + b"]}")
        except orjson.JSONDecodeError:
            pos = m.start() + 1
            continue
        if isinstance(header, dict) and header.get("traceEvents") == []:
            return head[m.end():], m.end(), header
        pos = m.start() + 1


def _scan_elements(buf: bytes, source: str, base: int):
    """Element boundaries of a JSON array body that starts between elements: (starts, ends, close) with
    start/end byte indices of each complete top-level element and the index of the closing ']' (or None).
    String-aware: brackets inside strings (e.g. `{lambda(int)#1}` in kernel names) do not count."""
    a = np.frombuffer(buf, dtype=np.uint8)
    quotes = np.flatnonzero(a == 0x22)
    escaped = _escaped(a, quotes)
    if escaped is not None:
        quotes = quotes[~escaped]
    kind = _BRACKETS[a]
    brackets = np.flatnonzero(kind)
    outside = brackets[(np.searchsorted(quotes, brackets) & 1) == 0]
    step = kind[outside].astype(np.int64)
    depth = np.cumsum(step)
    closes = np.flatnonzero(depth < 0)
    close = None
    if closes.size:
        c = int(closes[0])
        close = int(outside[c])
        if a[close] != 0x5D:
            raise DecodeError(f"unbalanced '}}' at byte {base + close} (inside traceEvents)", source=source)
        outside, step, depth = outside[:c], step[:c], depth[:c]
    starts = outside[(depth == 1) & (step == 1)]
    ends = outside[(depth == 0) & (step == -1)]
    starts = starts[: len(ends)]
    return starts, ends, close


def _escaped(a: np.ndarray, quotes: np.ndarray):
    """Which quotes are escaped (preceded by an odd run of backslashes); None when none can be."""
    q = quotes[quotes > 0]
    after_backslash = a[q - 1] == 0x5C
    if not after_backslash.any():
        return None
    escaped = np.zeros(len(quotes), dtype=bool)
    offset = len(quotes) - len(q)
    for i in np.flatnonzero(after_backslash):  # rare: escaped quotes inside strings
        j = int(q[i]) - 1
        run = 0
        while j >= 0 and a[j] == 0x5C:
            run += 1
            j -= 1
        escaped[offset + i] = run % 2 == 1
    return escaped


def _check_separator(buf, begin, end, source, base, first, closing=False):
    """Between two elements: whitespace and exactly one comma; before the first element or the closing
    ']': whitespace only."""
    gap = buf[begin:end]
    pattern = _SEPARATOR if not (first or closing) else _WHITESPACE
    if pattern.fullmatch(gap) is None:
        what = "before ']'" if closing else ("before the first event" if first else "between events")
        raise DecodeError(f"unexpected {gap.strip()[:40]!r} {what} at byte {base + begin} (traceEvents "
                          f"elements must be JSON objects separated by single commas)", source=source)


def _loads_events(orjson, buf, starts, ends, source, base, first_index):
    body = buf[int(starts[0]): int(ends[-1]) + 1]
    try:
        events = orjson.loads(b"[" + body + b"]")
    except orjson.JSONDecodeError:
        _locate_bad_event(orjson, buf, starts, ends, source, base, first_index)
        raise
    if len(events) != len(ends):
        raise DecodeError(f"{len(events) - len(ends)} non-object elements in traceEvents near event "
                          f"{first_index} (byte {base + int(starts[0])})", source=source)
    return events


def _locate_bad_event(orjson, buf, starts, ends, source, base, first_index):
    for i, (s, e) in enumerate(zip(starts, ends)):
        try:
            orjson.loads(buf[int(s): int(e) + 1])
        except orjson.JSONDecodeError as err:
            raise DecodeError(f"event {first_index + i} at byte {base + int(s)}: invalid JSON ({err})",
                              source=source) from None
    for i in range(len(ends) - 1):
        _check_separator(buf, int(ends[i]) + 1, int(starts[i + 1]), source, base, False)
    raise DecodeError(f"invalid JSON between bytes {base + int(starts[0])} and {base + int(ends[-1])}",
                      source=source)


def _parse_trailer(orjson, rest: bytes, source: str, offset: int, object_form: bool) -> dict:
    """Keys after the traceEvents array (object form), which must close the object; nothing (array form)."""
    if not object_form:
        if rest.strip():
            raise DecodeError(f"unexpected data after the event array at byte {offset}", source=source)
        return {}
    try:
        trailer = orjson.loads(b'{"traceEvents":[]' + rest)
    except orjson.JSONDecodeError as err:
        raise DecodeError(f"invalid JSON after the traceEvents array (byte {offset}): {err}",
                          source=source) from None
    return trailer if isinstance(trailer, dict) else {}


def _truncated(source: str, size: int, n: int) -> DecodeError:
    return DecodeError(f"truncated: traceEvents array not closed at end of data (byte {size}); "
                       f"{n} complete events before it", source=source)


# ------------------------------------------------------------------------------------------------ cache


def _str_table(strings: list) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def _str_list(blob: np.ndarray, offsets: np.ndarray) -> list:
    raw = blob.tobytes()
    return [raw[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(offsets) - 1)]


def _cache_key(st) -> np.ndarray:
    return np.array([CACHE_FORMAT, st.st_size, st.st_mtime_ns], dtype=np.int64)


def _write_cache(cache_path: Path, trace: TorchTrace, st) -> str:
    arrays = {f"col_{k}": v for k, v in trace.columns.items()}
    for key in ("names", "cats", "labels"):
        arrays[f"{key}_blob"], arrays[f"{key}_off"] = _str_table(getattr(trace, key))
    arrays["meta"] = np.frombuffer(json.dumps(trace.meta, default=str).encode(), dtype=np.uint8)
    arrays["key"] = _cache_key(st)
    tmp = cache_path.with_name(cache_path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, cache_path)
    except OSError as err:
        try:
            tmp.unlink()
        except OSError:
            pass
        return f"not written ({err.strerror or err})"
    return f"written: {cache_path}"


def _read_cache(cache_path: Path, path: Path, st):
    try:
        with np.load(cache_path, allow_pickle=False) as z:
            if not np.array_equal(z["key"], _cache_key(st)):
                return None
            columns = {k: z[f"col_{k}"] for k in COLUMNS}
            strings = {k: _str_list(z[f"{k}_blob"], z[f"{k}_off"]) for k in ("names", "cats", "labels")}
            meta = json.loads(z["meta"].tobytes())
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        return None  # absent, stale format or damaged (a half-written zip): parse again
    meta["cache"] = f"hit: {cache_path}"
    return TorchTrace(str(path), columns, strings["names"], strings["cats"], strings["labels"], meta)



# --------------------------------------------------------------------------------------- whole document


def read_chrome(path) -> dict:
    """The whole Chrome JSON document (.json or .json.gz; an object with traceEvents, or a bare event
    array), for tools that write it back (host_decode.analysis.align). DecodeError naming the file and,
    for an element that is not an event object, its index."""
    path = Path(path)
    try:
        with _open(path) as f:
            raw = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DecodeError(f"cannot read the trace (truncated or corrupt gzip): {e}", source=str(path)) from None
    try:
        import orjson

        doc = orjson.loads(raw)
    except ImportError:
        doc = None
    except orjson.JSONDecodeError:
        doc = None  # orjson is stricter (e.g. integers past 64 bits): the standard parser decides
    if doc is None:
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DecodeError(f"not a Chrome JSON trace: {e}", source=str(path)) from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise DecodeError("no traceEvents array: not a Chrome JSON trace", source=str(path))
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise DecodeError(f"traceEvents[{i}] is {type(e).__name__}, not an event object: not a Chrome JSON trace",
                              source=str(path))
    return doc
