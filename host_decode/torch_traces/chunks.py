"""Chunked parsing of a profiler trace's `traceEvents` array (host_decode.torch_traces.loader's docstring
says why it looks like this): the file is read in chunks, each chunk's whole events parsed in one call
after a guessed cut (a `}` followed by `, {`), checked by a vectorized, string-aware bracket scan where
the guess fails; `workers > 1` parses the guessed pieces in spawned processes. Where nothing completes
in a chunk (a huge event, a run of whitespace), the next read is as large as what is buffered, so every
byte is scanned a bounded number of times: linear time in the file's size.

Invariants, and the tests that guard them (tests/unit/host_decode/torch_traces/test_kernels.py): the exact scan takes
over wherever the guess is fooled, with the same results (::test_boundary_lookalikes_inside_strings); malformed input is
a DecodeError naming the event index and byte offset (::test_malformed_event_names_index_and_offset,
::test_malformed_traces); a truncated trace is a clear error (::test_truncated_trace_is_a_clear_error); the
parallel and the serial parse give the same table (::test_parallel_workers_match_serial).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from host_decode.core.compressed import open_input
from host_decode.core.errors import DecodeError
from host_decode.torch_traces.columns import LABEL_BASE, Builder, Retry, TorchTrace, struct_decoder


def open_trace(path: Path):
    """The trace's bytes, gunzipped through the one bounded reader (core.compressed) when gzip."""
    return open_input(path)



_BRACKETS = np.zeros(256, dtype=np.int8)
_BRACKETS[[ord("{"), ord("[")]] = 1
_BRACKETS[[ord("}"), ord("]")]] = -1
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\s*,\s*")
_WHITESPACE = re.compile(rb"\s*")


def parse_trace(path: Path, chunk_bytes: int, workers: int = 1, parser: str = "auto") -> TorchTrace:
    import orjson

    if workers > 1 and path.stat().st_size > 2 * chunk_bytes:
        try:
            return _parse_with(path, chunk_bytes, orjson, workers, parser)
        except _FallBack:
            pass  # a wrong boundary guess or malformed data: the serial parse finds and names the problem
    return _parse_with(path, chunk_bytes, orjson, 1, parser)


def _parse_with(path: Path, chunk_bytes: int, orjson, workers: int, parser: str) -> TorchTrace:
    source = str(path)
    builder = Builder(decoder=struct_decoder(parser))
    with open_trace(path) as f:
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
                base, buf = _drop_leading_space(buf, base)  # whitespace between elements is never kept
                more = f.read(max(chunk_bytes, len(buf)))  # doubles while nothing completes: linear time
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


def _drop_leading_space(buf: bytes, base: int) -> tuple[int, bytes]:
    """(base, buf) with the whitespace that starts `buf` dropped (its offset kept right in `base`)."""
    kept = buf.lstrip()
    return base + len(buf) - len(kept), kept


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
            more = f.read(max(chunk_bytes, len(buf)))  # doubles while no boundary shows: linear time overall
            if not more:
                break
            buf += more
            guess = _guess_cut(buf, first)
            if guess is None:  # no boundary yet (an event, or a run of whitespace, larger than a chunk): read more
                base, buf = _drop_leading_space(buf, base)
                continue
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

    builder = Builder(decoder=struct_decoder(parser))
    try:
        events, typed = builder.decode(orjson, body)
        try:
            builder.add(events, typed, "", 0, _OffsetsUnknown(0))
        except Retry:
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
        except Retry:
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
            more = f.read(max(chunk_bytes, len(head)))
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
