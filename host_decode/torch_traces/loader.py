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

The table and its builder are host_decode.torch_traces.columns, the chunked parse
host_decode.torch_traces.chunks; this module loads (with the cache) and reads whole documents.

Invariants a change could break (guarded by tests/unit/host_decode/torch_traces/test_kernels.py):
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

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.jsonable import dumps
from host_decode.torch_traces.chunks import open_trace, parse_trace
from host_decode.torch_traces.columns import COLUMNS, TorchTrace

CACHE_FORMAT = 3  # 2: label codes at LABEL_BASE, exact epoch timestamps; 3: untimeable rows skipped
CACHE_SUFFIX = ".ikpcache.npz"
CHUNK_BYTES = 8 << 20  # per chunk: ~8 MB text -> ~60 MB of orjson objects, freed before the next


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
    trace = parse_trace(path, chunk_bytes, workers, parser)
    trace.meta["cache"] = _write_cache(cache_path, trace, st) if cache else "disabled"
    return trace


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
    arrays["meta"] = np.frombuffer(dumps(trace.meta, indent=None).encode(), dtype=np.uint8)
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
    with open_trace(path) as f:  # a gzip error or bomb is a DecodeError naming the file (core.compressed)
        raw = f.read()
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
