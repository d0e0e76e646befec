"""Native Perfetto traces (TrackEvent protobuf), encoded with numpy a whole column at a time.

What the file holds (one packet sequence, ``SEQUENCE_ID``):
1. an interning packet (``SEQ_INCREMENTAL_STATE_CLEARED``): event names (iid = event id + 1) and
   debug-annotation names;
2. the track tree, one TrackDescriptor a packet, parents before children, ``child_ordering = EXPLICIT``
   and ``sibling_order_rank`` by index::

       launch (kernel on device)          root; its description gives the time origin
         lanes in <region>                counter per region: lanes inside it over time
         SM 12                            only when the trace knows SMs
           block 37
             <group name>                 group track; overlapping regions of different ids go to
             <group name>                 sibling tracks with the same sibling_merge_key (one row)

3. the events, per lane in one merged time order (``merged_stream``'s order, computed by
   ``_event_order`` without sorting the BEGINs): ``TYPE_SLICE_BEGIN`` / ``TYPE_SLICE_END``, user
   instants as ``TYPE_INSTANT``. BEGIN and INSTANT packets use interned names, so they carry
   ``SEQ_NEEDS_INCREMENTAL_STATE``; END and counter packets use no incremental state and carry no
   flags (4 bytes a slice saved). Every packet of one kind has the same width (padded varints sized
   for the largest value), so each kind is built as one record table a column at a time, and each
   record is placed at its byte offset, which counts of the events before it give (34 bytes a slice
   with 3-byte timestamps, 2-byte track uuids and no args);
4. the counter samples (``TYPE_COUNTER``).

Invariants the importer needs, and the tests that guard them (tests/test_perfetto.py decodes the bytes
with the official protos and replays what trace processor does):
- slices on one track nest strictly: ``assign_subtracks`` puts regions of different ids that overlap
  without nesting on sibling tracks (test_overlap_goes_to_sibling_track, test_random_traces_nest);
- at equal timestamps a lane's ENDs (inner region first) are written before its instants and then its
  BEGINs (outer region first): trace processor sorts by timestamp and keeps file order for ties, and
  the other order silently nests back-to-back slices; a zero-length region is its BEGIN immediately
  followed by its END (test_equal_timestamps_end_before_begin; test_file_order_is_merged_stream_order
  checks the file's event order against merged_stream, test_unsorted_span_table a table not in
  (lane, begin) order, test_lexsort_order_and_chunking_give_the_same_file the slow paths);
- every interned id is defined in the first packet (test_interning_defined_before_use);
- no field is unknown to the official protos; padded varints are valid protobuf (every test replays
  through ``unknown_fields``; test_validator_rejects_unknown_field, test_layout_widths_parse,
  test_padded_varints_parse, test_scatter_rows_places_records).

Times are rebased to the launch origin (``trace.start_ns`` = 0 ns in the trace): small timestamps make
small varints; the root track's description gives the origin.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip as gzip_module
import sys
import time
from pathlib import Path
from typing import BinaryIO

import numpy as np

from host_decode.core.model import Trace

SEQUENCE_ID = 7  # any constant > 1 (1 is the tracing service's own sequence); one byte as a varint

# TrackEvent.Type / TracePacket.SequenceFlags / TrackDescriptor enums (perfetto_trace.proto)
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
CHILD_ORDERING_EXPLICIT = 3
SIBLING_MERGE_BY_KEY = 3

ARG_NAMES = ("block", "group", "sm", "lane", "event")  # debug-annotation names, iid = index + 1

_TS_BITS = 41  # rebased ns that fit the merge key (36 minutes); longer traces take the lexsort path
_LANE_BITS = 20


@dataclasses.dataclass
class WriteStats:
    path: str
    bytes: int
    slices: int
    instants: int
    counter_samples: int
    tracks: int
    overlap_tracks: int  # sibling tracks added for regions that overlap without nesting
    seconds: float
    phases: dict

    @property
    def bytes_per_slice(self) -> float:
        return self.bytes / max(self.slices, 1)


# --- public API ------------------------------------------------------------------------------------


def write_perfetto(
    trace: Trace,
    path: str | Path,
    *,
    gzip: bool | None = None,
    args: bool = True,
    counters: bool = True,
    progress: bool = False,
) -> WriteStats:
    """Write `trace` as a Perfetto protobuf trace. gzip=None: gzip iff the path ends in .gz."""
    t0 = time.perf_counter()
    path = Path(path)
    use_gzip = path.suffix == ".gz" if gzip is None else bool(gzip)
    chunks, info = encode_perfetto(trace, args=args, counters=counters, progress=progress)
    t_write = time.perf_counter()
    opener = (lambda p: gzip_module.open(p, "wb", compresslevel=6)) if use_gzip else (lambda p: open(p, "wb"))
    with opener(path) as f:
        _write_chunks(f, chunks)
    info["phases"]["write"] = time.perf_counter() - t_write
    if progress:
        print(f"perfetto: write {info['phases']['write'] * 1e3:.0f} ms -> {path}", file=sys.stderr)
    return WriteStats(
        path=str(path),
        bytes=path.stat().st_size,
        slices=info["slices"],
        instants=info["instants"],
        counter_samples=info["counter_samples"],
        tracks=info["tracks"],
        overlap_tracks=info["overlap_tracks"],
        seconds=time.perf_counter() - t0,
        phases=info["phases"],
    )


def encode_perfetto(
    trace: Trace, *, args: bool = True, counters: bool = True, progress: bool = False
) -> tuple[list, dict]:
    """-> (chunks, info): the trace file is the concatenation of the chunks (bytes or uint8 arrays)."""
    phases: dict[str, float] = {}
    clock = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases[name] = now - clock[0]
        clock[0] = now
        if progress:
            print(f"perfetto: {name} {phases[name] * 1e3:.0f} ms", file=sys.stderr)

    instants = trace.instants
    origin = trace_origin(trace)
    cols = _span_columns(trace.spans, instants, origin)
    order = _event_order(cols, instants, origin)
    phase("order")
    sub = _writer_subtracks(cols, order)
    phase("subtracks")
    span_events = _present(cols.event)
    tree = build_track_tree(trace, cols.table, instants, sub, counters=counters, span_lane=cols.lane,
                            span_event_ids=span_events)
    phase("tracks")
    event_ids = _union(span_events, _present(instants["event"].astype(np.int64)))
    chunks: list = [_interning_packet(trace, event_ids, args), tree.descriptor_bytes(origin, trace.absolute)]
    chunks.append(_encode_events(trace, cols, instants, order, tree, origin, args))
    phase("events")
    samples = 0
    if counters and cols.table.size:
        # the trace's own table: for one not in (lane, begin) order, lanes_inside sorts it its own way
        counter_rows, samples = _encode_counters(trace.spans, tree, origin)
        chunks.append(counter_rows)
        phase("counters")
    info = {
        "slices": int(cols.table.size),
        "instants": int(instants.size),
        "counter_samples": samples,
        "tracks": tree.num_tracks,
        "overlap_tracks": int(tree.overlap_tracks),
        "phases": phases,
    }
    return chunks, info


def perfetto_bytes(trace: Trace, *, args: bool = True, counters: bool = True) -> bytes:
    chunks, _ = encode_perfetto(trace, args=args, counters=counters)
    return b"".join(c if isinstance(c, bytes) else c.tobytes() for c in chunks)


def trace_origin(trace: Trace) -> int:
    """The ns that becomes t=0: the launch's first record, or earlier if an event is earlier."""
    origin = trace.start_ns if trace.lanes.size else None
    lows = [int(trace.spans["start_ns"].min())] if trace.spans.size else []
    if trace.instants.size:
        lows.append(int(trace.instants["ts_ns"].min()))
    if lows and (origin is None or min(lows) < origin):
        origin = min(lows)
    return int(origin or 0)


def _check_input(spans: np.ndarray, instants: np.ndarray) -> None:
    if spans.size:
        _check_spans(spans, spans["lane"], spans["event"], spans["start_ns"], spans["end_ns"])
    _check_instants(instants)


def _check_spans(spans: np.ndarray, lane: np.ndarray, event: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """lane/event/start/end: the span table's columns (any common time offset)."""
    bad = np.flatnonzero(end < start)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{bad.size} span(s) end before they begin (first: span row {i}, lane {int(spans['lane'][i])}, "
            f"start {int(spans['start_ns'][i])} ns > end {int(spans['end_ns'][i])} ns)"
        )
    _check_span_ids(lane, event)


def _check_span_ids(lane: np.ndarray, event: np.ndarray) -> None:
    if int(lane.min()) < 0 or int(event.min()) < 0:
        raise ValueError("span table has negative lane or event ids")


def _check_instants(instants: np.ndarray) -> None:
    if instants.size and (int(instants["lane"].min()) < 0 or int(instants["event"].min()) < 0):
        raise ValueError("instant table has negative lane or event ids")


def _write_chunks(f: BinaryIO, chunks: list) -> None:
    for c in chunks:
        f.write(c if isinstance(c, bytes) else memoryview(np.ascontiguousarray(c)).cast("B"))


# --- the writer's event order ----------------------------------------------------------------------
#
# The file order of merged_stream, computed without sorting the BEGINs: on the span table sorted by
# (lane, begin) -- the decoder's tables already are (model.Trace.spans), others are sorted first, stably
# -- the BEGINs are in file order by row. Only ENDs and instants are sorted, then one merge of the three
# sorted runs gives every event's position. Each event's byte offset and open-slice depth then follow
# from counts of the events of each kind before it (_Order), without a pass over the merged stream.

_KEY_BITS = 63  # packed sort keys (lane, time, kind, row) up to this width; wider traces take a lexsort


@dataclasses.dataclass
class _SpanColumns:
    table: np.ndarray  # the span rows in (lane, begin) order (the trace's own array when already so)
    lane: np.ndarray  # int64 columns of `table`, each field read once
    event: np.ndarray
    tb: np.ndarray  # begin, ns after the origin
    te: np.ndarray  # end, ns after the origin
    dur: np.ndarray  # te - tb
    tbits: int  # bits of the largest time (spans and instants)
    key_bits: int  # bits of (lane << tbits) | time over spans and instants
    lk: np.ndarray | None  # (lane << tbits) | tb, the sort key, when key_bits <= 63


def _span_columns(spans: np.ndarray, instants: np.ndarray, origin: int) -> _SpanColumns:
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    tb = spans["start_ns"] - origin
    te = spans["end_ns"] - origin
    dur = te - tb
    if spans.size:
        if int(dur.min()) < 0:
            _check_spans(spans, lane, event, tb, te)  # raises, naming the first such span
        _check_span_ids(lane, event)
    _check_instants(instants)
    times, lanes = [0], [0]
    if spans.size:
        times.append(int(te.max()))
        lanes.append(int(lane.max()))
    if instants.size:
        times.append(int(instants["ts_ns"].max()) - origin)
        lanes.append(int(instants["lane"].max()))
    tbits = max(times).bit_length()
    lk = None
    key_bits = max(lanes).bit_length() + tbits
    if key_bits <= 63:
        lk = lane << tbits
        lk |= tb
        in_order = _nondecreasing(lk)
    else:
        in_order = lane.size < 2 or bool(((lane[1:] > lane[:-1]) | ((lane[1:] == lane[:-1]) & (tb[1:] >= tb[:-1]))).all())
    if not in_order:
        perm = np.argsort(lk, kind="stable") if lk is not None else np.lexsort((tb, lane))
        # stable: spans that begin together keep their (program) order
        spans, lane, event, tb, te, dur = spans[perm], lane[perm], event[perm], tb[perm], te[perm], dur[perm]
        lk = lk[perm] if lk is not None else None
    return _SpanColumns(spans, lane, event, tb, te, dur, tbits, key_bits, lk)


@dataclasses.dataclass
class _Order:
    """Where each event sits in the file's event stream, and how many events of each kind come before
    it. A zero-length span is one stream event (its END packet directly follows its BEGIN packet)."""

    pb: np.ndarray  # stream position of each span's BEGIN, by row (increasing: rows are in file order)
    end_rows: np.ndarray  # spans with an END event of their own (not zero-length), in stream order
    pe: np.ndarray  # ... that END's stream position (increasing)
    inst_rows: np.ndarray  # instant rows in stream order
    pi: np.ndarray  # ... their stream positions
    zero: np.ndarray  # bool per span: zero-length
    zc: np.ndarray | None  # zero-length spans among rows [0, k) for k = 0..n; None when there are none
    ib: np.ndarray | int  # instants before each BEGIN (0: no instants)
    ie: np.ndarray | int  # instants before each END
    bi: np.ndarray  # BEGINs before each instant

    @functools.cached_property
    def be(self) -> np.ndarray:
        """BEGINs before each END: every event before it is an END, an instant or a BEGIN."""
        be = self.pe - np.arange(self.pe.size)
        if self.pi.size:
            be -= self.ie
        return be


def _event_order(cols: _SpanColumns, instants: np.ndarray, origin: int) -> _Order:
    """The order of merged_stream: per lane by time; at equal time ENDs (inner first), instants, then
    BEGINs (outer first, i.e. by row)."""
    n, m = cols.lane.size, instants.size
    ilane = instants["lane"].astype(np.int64)
    ti = instants["ts_ns"] - origin
    zero = cols.dur == 0
    has_zero = bool(zero.any())
    ends = np.flatnonzero(~zero) if has_zero else None  # spans with an END event of their own
    rbits = max(n, m).bit_length()
    if cols.lk is not None and cols.key_bits + 2 + rbits <= _KEY_BITS:
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, rbits)
    elif cols.lk is not None and cols.key_bits + 2 <= _KEY_BITS:  # no room for rows: argsorts
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, 0)
    else:
        pb, end_rows, pe, inst_rows, pi = _order_lexsort(cols.lane, cols.tb, cols.te, ends, ilane, ti)
    zc = np.concatenate([[0], np.cumsum(zero)]) if has_zero else None
    ib = np.searchsorted(pi, pb) if m else 0
    ie = np.searchsorted(pi, pe) if m else 0
    bi = np.searchsorted(pb, pi)
    return _Order(pb, end_rows, pe, inst_rows, pi, zero, zc, ib, ie, bi)


def _order_packed(cols: _SpanColumns, ends: np.ndarray | None, ilane: np.ndarray, ti: np.ndarray, rbits: int):
    """Sort keys ((lane, time), kind, row field) packed into one int64: distinct values, so plain value
    sorts, and the row comes back from the key's low bits. The row field of an END counts down, so
    at equal (lane, time) the later-begun (inner) span closes first. BEGIN keys are sorted already.
    rbits = 0: no row field; ENDs and instants take stable argsorts (ENDs in reverse row order)."""
    shift, rmask = rbits + 2, (1 << rbits) - 1
    n, m = cols.lane.size, ilane.size
    ne = n if ends is None else ends.size
    merged = np.empty(ne + m + n, np.int64)
    ke, ki, kb = merged[:ne], merged[ne : ne + m], merged[ne + m :]
    rows_e = np.arange(n) if ends is None else ends
    if ends is None:
        np.add(cols.lk, cols.dur, out=ke)
    else:
        np.add(cols.lk[ends], cols.dur[ends], out=ke)
    ke <<= shift  # (lane << tbits) | end, then kind END = 0
    if rbits:
        ke |= rmask - rows_e
        ke.sort(kind="stable")  # nearly sorted already: timsort runs
        end_rows = rmask - (ke & rmask)
    else:
        o = np.argsort(ke[::-1], kind="stable")
        end_rows = rows_e[::-1][o]
        ke[:] = ke[::-1][o]
    if m:
        ki[:] = ((ilane << cols.tbits) | ti) << shift
        ki |= KIND_INSTANT << rbits
        if rbits:
            ki |= np.arange(m)
            ki.sort(kind="stable")
            inst_rows = ki & rmask
        else:
            inst_rows = np.argsort(ki, kind="stable")
            ki[:] = ki[inst_rows]
    else:
        inst_rows = np.zeros(0, np.int64)
    np.left_shift(cols.lk, shift, out=kb)
    kb |= (np.arange(n) if rbits else 0) | (KIND_BEGIN << rbits)
    merged.sort(kind="stable")  # a merge of three sorted runs
    if m:
        kind = (merged >> rbits) & 3
        return (np.flatnonzero(kind == KIND_BEGIN), end_rows, np.flatnonzero(kind == KIND_END), inst_rows,
                np.flatnonzero(kind == KIND_INSTANT))
    if sys.byteorder == "little":  # the BEGIN bit, read from the one byte of each key that holds it
        bit = rbits + 1
        is_begin = ((merged.view(np.uint8)[bit // 8 :: 8] >> (bit % 8)) & 1).view(bool)
    else:
        is_begin = (merged & (KIND_BEGIN << rbits)).astype(bool)
    return np.flatnonzero(is_begin), end_rows, np.flatnonzero(~is_begin), inst_rows, np.zeros(0, np.int64)


def _order_lexsort(lane, tb, te, ends, ilane, ti):
    """The same order for keys too wide to pack (very long traces): one lexsort of all events."""
    n, m = lane.size, ilane.size
    ends = np.arange(n) if ends is None else ends
    kind = np.concatenate([np.full(ends.size, KIND_END, np.int8), np.full(m, KIND_INSTANT, np.int8),
                           np.full(n, KIND_BEGIN, np.int8)])
    tie = np.concatenate([-ends, np.arange(m), np.arange(n)])  # ENDs: later rows first
    o = np.lexsort((tie, kind, np.concatenate([te[ends], ti, tb]), np.concatenate([lane[ends], ilane, lane])))
    kind, tie = kind[o], tie[o]
    pe, pi = np.flatnonzero(kind == KIND_END), np.flatnonzero(kind == KIND_INSTANT)
    return np.flatnonzero(kind == KIND_BEGIN), -tie[pe], pe, tie[pi], pi


def _crossing_ends(order: _Order) -> np.ndarray:
    """Per END (stream order): its span does not nest strictly among all spans of its lane, i.e. the
    spans open just after its BEGIN and just before its END differ in number (the stream is lane by
    lane and each lane balanced, so counts over the whole stream are per-lane counts)."""
    n, ne = order.pb.size, order.pe.size
    after_begin = np.arange(1, 2 * n + 1, 2) - order.pb  # BEGINs so far minus ENDs so far
    if order.pi.size:
        after_begin += order.ib
    if order.zc is None and not order.pi.size:
        before_end = order.pe - np.arange(0, 2 * ne, 2)  # BEGINs before it (pe - j) minus ENDs before it (j)
    else:
        before_end = order.be - np.arange(ne)
    if order.zc is not None:  # zero-length spans have no END event: they never count as open
        after_begin -= order.zc[1:]
        before_end -= order.zc[order.be]
    return after_begin[order.end_rows] != before_end


def _writer_subtracks(cols: _SpanColumns, order: _Order) -> np.ndarray:
    n = cols.lane.size
    sub = np.zeros(n, np.int64)
    crossing = _crossing_ends(order)
    if not crossing.any():
        return sub
    # only lanes with a crossing take part: runs of rows in the sorted table, and runs of ENDs in the
    # stream (a lane's ENDs are its spans that are not zero-length)
    lanes = _present(cols.lane[order.end_rows[crossing]])
    lo, hi = np.searchsorted(cols.lane, lanes, "left"), np.searchsorted(cols.lane, lanes, "right")
    rows = _runs(lo, hi)
    elo, ehi = (lo, hi) if order.zc is None else (lo - order.zc[lo], hi - order.zc[hi])
    ends = _runs(elo, ehi)
    first = np.cumsum(hi - lo) - (hi - lo)  # where each lane's rows start among `rows`
    local = order.end_rows[ends] - np.repeat(lo - first, ehi - elo)  # index in `rows` of each END's span
    # stream positions doubled, so that a zero-length span's END sits between its BEGIN and the next event
    pos_begin = 2 * order.pb[rows]
    pos_end = pos_begin + 1  # zero-length spans
    pos_end[local] = 2 * order.pe[ends]
    bad = np.zeros(rows.size, bool)
    bad[local] = crossing[ends]
    alane = np.repeat(np.arange(lanes.size), hi - lo)
    sub[rows] = _move_crossing(alane, cols.event[rows], pos_begin, pos_end, bad)
    return sub


def _runs(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers of the ranges [lo[k], hi[k]), one range after the other."""
    size = hi - lo
    return np.arange(int(size.sum())) + np.repeat(lo - (np.cumsum(size) - size), size)


def _packet_offsets(order: _Order, wb: int, we: int, wi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte offsets in the event section of each BEGIN and END packet (by span row) and of each
    instant packet (stream order), for packets wb, we and wi bytes wide: the widths of the packets
    before it, by kind (a zero-length span's END packet is counted with its BEGIN)."""
    n, ne, zc = order.pb.size, order.pe.size, order.zc
    ob = order.pb * we
    ob += np.arange(0, n * (wb - we), wb - we)[:n]  # wb per BEGIN before it, we per END (pb - row of them)
    if order.pi.size:
        ob += order.ib * (wi - we)
    if zc is not None:
        ob += we * zc[:-1]
    if zc is None and not order.pi.size:
        oe = order.pe * wb  # wb per BEGIN before it (pe - j of them), we per END (j)
        oe -= np.arange(0, ne * (wb - we), wb - we)[:ne]
    else:
        oe = order.be * wb
        oe += np.arange(ne) * we
        if zc is not None:
            oe += we * zc[order.be]
        if order.pi.size:
            oe += wi * order.ie
    oe_row = np.empty(n, np.int64)
    oe_row[order.end_rows] = oe
    oe_row[order.zero] = ob[order.zero] + wb
    k = np.arange(order.pi.size)
    zb = zc[order.bi] if zc is not None else 0
    oi = order.bi * wb + we * (order.pi - k - order.bi + zb) + wi * k
    return ob, oe_row, oi


# --- event order -----------------------------------------------------------------------------------

KIND_END, KIND_INSTANT, KIND_BEGIN = 0, 1, 2  # order of events of one lane at one timestamp


@dataclasses.dataclass
class Stream:
    """The file order of all events: per lane by time; at equal time ENDs (inner first), then
    instants, then BEGINs (outer first). A zero-length span is its BEGIN then its END, adjacent."""

    kind: np.ndarray  # int8 KIND_* per stream position
    index: np.ndarray  # row in spans (BEGIN/END) or instants (INSTANT)
    pos_begin: np.ndarray  # stream position of each span's BEGIN
    pos_end: np.ndarray  # ... and END


def merged_stream(spans: np.ndarray, instants: np.ndarray, origin: int) -> Stream:
    """The file order as a Stream (for the Chrome JSON writer, multi-launch views and as the reference
    the Perfetto writer's _event_order is tested against)."""
    n, m = spans.size, instants.size
    lane_b = spans["lane"].astype(np.int64)
    lane_i = instants["lane"].astype(np.int64)
    tb = spans["start_ns"] - origin
    te_all = spans["end_ns"] - origin
    ti = instants["ts_ns"] - origin
    zero = te_all == tb
    end_rows = np.flatnonzero(~zero)  # spans whose END is its own stream event
    te = te_all[end_rows]
    lane_e = lane_b[end_rows]
    tmax = max([int(a.max()) for a in (tb, te_all, ti) if a.size] + [0])
    lmax = max([int(a.max()) for a in (lane_b, lane_i) if a.size] + [0])
    if tmax < (1 << _TS_BITS) and lmax < (1 << _LANE_BITS):
        def key(lane, t, kind):
            return ((lane << _TS_BITS) | t) << 2 | kind

        # each kind sorted on its own (rows are nearly in order, so these sorts are cheap), then one
        # merge of three sorted runs; stable sorts keep row order for ties
        kb, ke, ki = key(lane_b, tb, KIND_BEGIN), key(lane_e, te, KIND_END), key(lane_i, ti, KIND_INSTANT)
        ob = np.arange(n) if _nondecreasing(kb) else np.argsort(kb, kind="stable")
        oe = np.argsort(ke, kind="stable")
        oe = oe[_reverse_ties(ke[oe])]  # equal END keys: the later-begun (inner) region closes first
        oi = np.argsort(ki, kind="stable")
        keys = np.concatenate([ke[oe], ki[oi], kb[ob]])
        order = np.argsort(keys, kind="stable")
    else:  # very long or very wide traces: the same order from a lexsort
        oe, oi, ob = np.arange(end_rows.size)[::-1], np.arange(m), np.arange(n)
        lanes = np.concatenate([lane_e[oe], lane_i, lane_b])
        ts = np.concatenate([te[oe], ti, tb])
        kinds = np.concatenate([np.full(end_rows.size, KIND_END), np.full(m, KIND_INSTANT), np.full(n, KIND_BEGIN)])
        order = np.lexsort((kinds, ts, lanes))
    src_index = np.concatenate([end_rows[oe], oi, ob])
    src_kind = np.concatenate(
        [np.full(end_rows.size, KIND_END, np.int8), np.full(m, KIND_INSTANT, np.int8), np.full(n, KIND_BEGIN, np.int8)]
    )
    kind = src_kind[order]
    index = src_index[order]
    at = np.empty(order.size, np.int64)  # stream position of each source event
    at[order] = np.arange(order.size)
    pos_begin = np.empty(n, np.int64)
    pos_end = np.empty(n, np.int64)
    n_end = end_rows.size
    pos_begin[ob] = at[n_end + m :]
    pos_end[end_rows[oe]] = at[:n_end]
    if n and zero.any():  # a zero-length span is its BEGIN immediately followed by its END
        is_zero_begin = kind == KIND_BEGIN
        is_zero_begin[is_zero_begin] = zero[index[is_zero_begin]]
        width = 1 + is_zero_begin
        start = np.cumsum(width) - width
        kind2 = np.empty(int(start[-1] + width[-1]), np.int8)
        index2 = np.empty(kind2.size, np.int64)
        kind2[start] = kind
        index2[start] = index
        second = start[is_zero_begin] + 1
        kind2[second] = KIND_END
        index2[second] = index[is_zero_begin]
        kind, index = kind2, index2
        pos_begin = start[pos_begin]
        pos_end[end_rows] = start[pos_end[end_rows]]
        pos_end[zero] = pos_begin[zero] + 1
    return Stream(kind=kind, index=index, pos_begin=pos_begin, pos_end=pos_end)


def _present(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct non-negative ids (np.unique without the sort, for ids of modest range)."""
    if ids.size == 0:
        return np.zeros(0, np.int64)
    if int(ids.max()) > 4 * ids.size + (1 << 16):
        return np.unique(ids).astype(np.int64)
    return np.flatnonzero(np.bincount(ids))


def _in_set(ids: np.ndarray, members: np.ndarray) -> np.ndarray:
    """ids in members (both non-negative), via a dense lookup table."""
    if ids.size == 0 or members.size == 0:
        return np.zeros(ids.size, bool)
    table = np.zeros(max(int(ids.max()), int(members.max())) + 1, bool)
    table[members] = True
    return table[ids]


def _index_of(distinct: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of each id in `distinct` (sorted, and holding every id): a lookup table for ids of
    modest range, else a binary search."""
    if ids.size == 0:
        return np.zeros(0, np.int64)
    top = int(distinct[-1])
    if top > 4 * ids.size + (1 << 16):
        return np.searchsorted(distinct, ids)
    lut = np.zeros(top + 1, np.int64)
    lut[distinct] = np.arange(distinct.size)
    return lut[ids]


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a and b (each sorted distinct); usually b is empty (no instants)."""
    return a if b.size == 0 else np.unique(np.concatenate([a, b]))


def _per_lane(lanes: np.ndarray, values: np.ndarray, lane_col: np.ndarray) -> np.ndarray:
    """values[i] belongs to lanes[i] (sorted, holding every lane of lane_col): the value of each row."""
    if lane_col.size and int(lanes[-1]) <= 4 * lane_col.size + (1 << 16):
        lut = np.zeros(int(lanes[-1]) + 1, values.dtype)
        lut[lanes] = values
        return lut[lane_col]
    return values[np.searchsorted(lanes, lane_col)]


def _some_row(lane_col: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Per lane of `lanes` (sorted), one row of lane_col that holds it (-1 for none); a sorted column
    (the span table's) by binary search, else by scatter."""
    out = np.full(lanes.size, -1, np.int64)
    if lane_col.size == 0:
        return out
    if _nondecreasing(lane_col):
        first = np.searchsorted(lane_col, lanes)
        hit = first < lane_col.size
        hit[hit] = lane_col[first[hit]] == lanes[hit]
        out[hit] = first[hit]
    else:
        out[_index_of(lanes, lane_col)] = np.arange(lane_col.size)
    return out


def _nondecreasing(a: np.ndarray) -> bool:
    return bool(a.size < 2 or (a[1:] >= a[:-1]).all())


def _reverse_ties(sorted_keys: np.ndarray) -> np.ndarray:
    """Permutation of a sorted array that reverses the order inside each run of equal keys."""
    perm = np.arange(sorted_keys.size)
    if sorted_keys.size < 2:
        return perm
    tie = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1]) + 1  # equal to the one before
    if tie.size == 0:
        return perm
    in_run = np.zeros(sorted_keys.size, bool)
    in_run[tie] = True
    in_run[tie - 1] = True
    r = np.flatnonzero(in_run)  # members of runs of equal keys, runs contiguous
    new = np.r_[True, sorted_keys[r[1:]] != sorted_keys[r[:-1]]] | np.r_[True, r[1:] != r[:-1] + 1]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], r.size] - 1
    run = np.cumsum(new) - 1
    perm[r] = r[starts[run] + ends[run] - np.arange(r.size)]
    return perm


# --- sub-tracks for overlapping regions ----------------------------------------------------------


def assign_subtracks(spans: np.ndarray, stream: Stream, max_rounds: int = 64) -> np.ndarray:
    """Sub-track per span (0 = the group track): within each (lane, sub-track) slices nest strictly.
    First check on the stream itself (all spans of a lane on one track, no sort needed); lanes whose
    regions all nest (the common case) keep everything on sub-track 0 (see _resolve_crossings)."""
    n = spans.size
    if n == 0:
        return np.zeros(0, np.int64)
    depth = np.cumsum(np.array([-1, 0, 1], np.int32)[stream.kind])  # KIND_END, KIND_INSTANT, KIND_BEGIN
    bad = depth[stream.pos_begin] != depth[stream.pos_end] + 1
    return _resolve_crossings(spans["lane"].astype(np.int64), spans["event"].astype(np.int64), stream.pos_begin,
                              stream.pos_end, bad, max_rounds)


def _resolve_crossings(lane: np.ndarray, event: np.ndarray, pos_begin: np.ndarray, pos_end: np.ndarray,
                       bad: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """Sub-track per span, given each span's BEGIN and END stream positions (distinct, lane by lane)
    and the spans that do not nest on their lane's one track (`bad`).

    Only lanes with a bad span take part. Each round moves one region id per offending (lane,
    sub-track) to the next sub-track (the largest id among the offending spans), so a region id keeps
    one row per lane. Same-id regions nest by construction of the decoder's stack pairing; if they do
    not (foreign input), the lanes left after max_rounds fall back to a first-fit packing per span."""
    sub = np.zeros(lane.size, np.int64)
    if not bad.any():
        return sub
    active = np.flatnonzero(_in_set(lane, lane[bad]))
    alane = lane[active]
    alane = _index_of(_present(alane), alane)  # dense lane index
    sub[active] = _move_crossing(alane, event[active], pos_begin[active], pos_end[active], bad[active], max_rounds)
    return sub


def _move_crossing(alane: np.ndarray, aevent: np.ndarray, pos_begin: np.ndarray, pos_end: np.ndarray,
                   a_bad: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """_resolve_crossings on the spans of the lanes that take part (alane: dense lane index)."""
    nest = _NestCheck(pos_begin, pos_end)
    asub = np.zeros(alane.size, np.int64)
    for _ in range(max_rounds):
        if not a_bad.any():
            return asub
        subs = int(asub.max()) + 1
        group = alane * subs + asub  # dense (lane, sub-track) index
        move_event = np.full(int(alane.max() + 1) * subs, -1, np.int64)
        np.maximum.at(move_event, group[a_bad], aevent[a_bad])  # per offending group: its largest offending id
        asub[move_event[group] == aevent] += 1
        a_bad = nest.crossing(asub)
    still = _in_set(alane, alane[a_bad])
    _first_fit(np.flatnonzero(still), alane, pos_begin, pos_end, asub)
    return asub


class _NestCheck:
    """Which spans do not nest strictly within their (lane, sub-track), for changing sub-tracks: the
    spans' events are put in stream order once; a span nests iff the count of open spans of its
    sub-track is the same just after its BEGIN and just before its END (each (lane, sub-track) is
    balanced and lanes follow each other in the stream, so counts over all lanes suffice)."""

    def __init__(self, pos_begin: np.ndarray, pos_end: np.ndarray) -> None:
        a = pos_begin.size
        ibits = a.bit_length()
        top = max(int(pos_begin.max()), int(pos_end.max())) if a else 0
        if top.bit_length() + ibits + 1 <= 63:  # packed (position, span, is END): a value sort
            keys = np.empty(2 * a, np.int64)
            np.left_shift(pos_begin, ibits + 1, out=keys[:a])
            keys[:a] |= np.arange(a) << 1
            np.left_shift(pos_end, ibits + 1, out=keys[a:])
            keys[a:] |= (np.arange(a) << 1) | 1
            keys.sort(kind="stable")  # BEGINs are nearly in order, ENDs too: timsort runs
            is_end = (keys & 1).astype(bool)
            self.span = (keys >> 1) & ((1 << ibits) - 1)  # span of each event, in stream order
        else:
            order = np.argsort(np.concatenate([pos_begin, pos_end]))  # positions are distinct
            is_end = order >= a
            self.span = np.where(is_end, order - a, order)
        self.delta = 1 - 2 * is_end.astype(np.int32)
        self.max_depth = int(np.cumsum(self.delta).max()) if a else 0  # no sub-track is deeper
        self.rank_begin = np.empty(a, np.int64)
        self.rank_end = np.empty(a, np.int64)
        ends = np.flatnonzero(is_end)
        begins = np.flatnonzero(~is_end)
        self.rank_begin[self.span[begins]] = begins
        self.rank_end[self.span[ends]] = ends

    def crossing(self, sub: np.ndarray) -> np.ndarray:
        sub_ev = sub[self.span]
        subs = int(sub.max()) + 1
        if subs > 8:  # many sub-tracks: one stable (radix) sort by sub-track, one running count
            o = np.argsort(sub_ev.astype(np.int16) if subs < (1 << 15) else sub_ev, kind="stable")
            depth = np.empty(o.size, np.int32)
            depth[o] = np.cumsum(self.delta[o])
            return depth[self.rank_begin] != depth[self.rank_end] + 1
        if subs <= 4 and self.max_depth < (1 << 16):  # or one running count of 16-bit fields, one per sub-track
            field = (16 * sub_ev).astype(np.uint64)
            depth = np.cumsum(np.left_shift(self.delta.astype(np.int64).view(np.uint64), field))  # mod 2**64
            field = (16 * sub).astype(np.uint64)
            after_begin = np.right_shift(depth[self.rank_begin], field) & np.uint64(0xFFFF)
            before_end = np.right_shift(depth[self.rank_end], field) & np.uint64(0xFFFF)
            return after_begin != before_end + np.uint64(1)
        bad = np.zeros(sub.size, bool)
        for k in range(subs):  # a running count per sub-track
            depth = np.cumsum(np.where(sub_ev == k, self.delta, 0))
            rows = np.flatnonzero(sub == k)
            bad[rows] = depth[self.rank_begin[rows]] != depth[self.rank_end[rows]] + 1
        return bad


def _first_fit(rows: np.ndarray, lane: np.ndarray, pos_begin: np.ndarray, pos_end: np.ndarray, sub: np.ndarray) -> None:
    """Per-span fallback: each BEGIN goes to the lowest sub-track whose open slice contains it."""
    if rows.size == 0:
        return
    pb, pe = pos_begin, pos_end
    stacks: dict[int, list[list[int]]] = {}
    events = sorted([(int(pb[r]), 1, int(r)) for r in rows] + [(int(pe[r]), 0, int(r)) for r in rows])
    where: dict[int, int] = {}
    for _, is_begin, r in events:
        tracks = stacks.setdefault(int(lane[r]), [])
        if is_begin:
            k = 0
            while k < len(tracks) and tracks[k] and pe[tracks[k][-1]] < pe[r]:
                k += 1
            if k == len(tracks):
                tracks.append([])
            tracks[k].append(r)
            where[r] = k
        else:
            tracks[where[r]].remove(r)  # the top, since everything above r ended inside it
    for r, k in where.items():
        sub[r] = k


# --- track tree ------------------------------------------------------------------------------------


@dataclasses.dataclass
class TrackTree:
    uuid: list  # per track, parents before children
    parent: list  # 0 = none
    name: list
    rank: list  # sibling_order_rank (None for the root)
    merge_key: list  # sibling_merge_key or None
    description: list  # str or None (the root's is set at write time)
    counter: list  # bool
    explicit_children: list  # bool
    span_uuid: np.ndarray  # per span
    instant_uuid: np.ndarray  # per instant
    counter_uuid: dict  # event id -> uuid
    overlap_tracks: int
    root_name: str

    @property
    def num_tracks(self) -> int:
        return len(self.uuid)

    def descriptor_bytes(self, origin: int, absolute: bool) -> bytes:
        clock = "absolute %globaltimer" if absolute else "device timer (low 32 bits unwrapped)"
        desc = f"ikp_cute launch timeline; t = 0 is {origin} ns on the {clock}"
        seq_and_tag = _f_varint(10, SEQUENCE_ID) + _tag(60, 2)
        uuid_tag, parent_tag, rank_tag = _tag(1, 0), _tag(5, 0), _tag(12, 0)
        tails: dict = {}  # the fields many tracks share (name, merge key, ...), encoded once
        out = []
        for i in range(len(self.uuid)):
            about = desc if i == 0 else self.description[i]
            shape = (self.name[i], about, self.counter[i], self.explicit_children[i], self.merge_key[i])
            tail = tails.get(shape)
            if tail is None:
                tail = tails[shape] = self._shared_fields(*shape)
            td = [uuid_tag, _varint(self.uuid[i])]
            if self.parent[i]:
                td += (parent_tag, _varint(self.parent[i]))
            if self.rank[i] is not None:
                td += (rank_tag, _varint(self.rank[i]))
            td.append(tail)
            body = b"".join(td)
            body = seq_and_tag + _varint(len(body)) + body
            out += (b"\x0a", _varint(len(body)), body)
        return b"".join(out)

    @staticmethod
    def _shared_fields(name: str, about: str | None, counter: bool, explicit: bool, merge_key: str | None) -> bytes:
        td = _f_bytes(2, name.encode())
        if about:
            td += _f_bytes(14, about.encode())
        if counter:
            td += _f_bytes(8, _f_bytes(6, b"lanes"))
        if explicit:
            td += _f_varint(11, CHILD_ORDERING_EXPLICIT)
        if merge_key is not None:
            td += _f_varint(15, SIBLING_MERGE_BY_KEY) + _f_bytes(16, merge_key.encode())
        return td

def root_name(trace: Trace) -> str:
    meta = trace.meta or {}
    kernel, device = meta.get("kernel"), meta.get("device")
    name = str(kernel) if kernel else "GPU launch"
    if device:
        name += f" on {device}"
    if meta.get("launch_index") is not None:
        name += f" (launch {meta['launch_index']})"
    return name


MAX_SM_RANK = 1 << 10  # "SM unknown" sorts after every real SM id (10-bit)


def build_track_tree(
    trace: Trace, spans: np.ndarray, instants: np.ndarray, sub: np.ndarray, *, counters: bool = True,
    span_lane: np.ndarray | None = None, span_event_ids: np.ndarray | None = None,
) -> TrackTree:
    """The track tree; span_lane (spans' lane column as int64) and span_event_ids (the distinct span
    event ids) may be given when the caller has them."""
    names = trace.names
    uuid, parent, name, rank, merge_key, counter, explicit, description = [], [], [], [], [], [], [], []

    def add(p: int, nm: str, rk: int | None, *, key: str | None = None, is_counter=False, parent_of_children=False,
            about: str | None = None) -> int:
        u = len(uuid) + 1
        uuid.append(u)
        parent.append(p)
        name.append(nm)
        rank.append(rk)
        merge_key.append(key)
        description.append(about)
        counter.append(is_counter)
        explicit.append(parent_of_children)
        return u

    rname = root_name(trace)
    root = add(0, rname, None, parent_of_children=True)
    event_ids = (_present(spans["event"]) if span_event_ids is None else span_event_ids).tolist()
    counter_uuid = {}
    if counters:
        for k, e in enumerate(event_ids):
            counter_uuid[int(e)] = add(root, f"lanes in {names.event(e)}", k, is_counter=True,
                                       about=hardware_summary(trace, int(e)))
    base_rank = len(counter_uuid)

    # lanes that have anything to show, with block, group, sub-track count and SM
    lane_sp = spans["lane"].astype(np.int64) if span_lane is None else span_lane
    lane_in = instants["lane"].astype(np.int64)
    lanes = _union(_present(lane_sp), _present(lane_in))
    # some row of each lane gives its block and group (all rows of a lane agree)
    any_sp, any_in = _some_row(lane_sp, lanes), _some_row(lane_in, lanes)
    from_sp = any_sp >= 0
    lane_block = np.empty(lanes.size, np.int64)
    lane_group = np.empty(lanes.size, np.int64)
    lane_block[from_sp] = spans["block"][any_sp[from_sp]]
    lane_group[from_sp] = spans["group"][any_sp[from_sp]]
    lane_block[~from_sp] = instants["block"][any_in[~from_sp]]
    lane_group[~from_sp] = instants["group"][any_in[~from_sp]]
    nsub = np.ones(lanes.size, np.int64)
    if sub.any():
        moved = np.flatnonzero(sub)
        np.maximum.at(nsub, _index_of(lanes, lane_sp[moved]), sub[moved] + 1)
    lane_sm = _lane_sm(trace, lanes)

    blocks, block_first = np.unique(lane_block, return_index=True)
    block_sm = np.full(blocks.size, -1, np.int64)
    np.maximum.at(block_sm, np.searchsorted(blocks, lane_block), lane_sm)

    # a merged session or multi-rank trace (meta["parts"]) gets one track group per launch / rank
    parts = (trace.meta or {}).get("parts") or []
    block_part = np.zeros(blocks.size, np.int64)
    part_uuid = [root]
    if parts:
        offsets = np.array([int(pt["block_offset"]) for pt in parts], np.int64)
        block_part = np.maximum(np.searchsorted(offsets, blocks, side="right") - 1, 0)
        part_uuid = [add(root, str(pt.get("label") or f"part {i}"), base_rank + i, parent_of_children=True)
                     for i, pt in enumerate(parts)]
        base_rank = 0
    block_parent = np.array([part_uuid[i] for i in block_part.tolist()], np.int64)
    if (block_sm >= 0).any():
        sm_uuid = {}
        for i in range(blocks.size):
            key = (int(block_part[i]), int(block_sm[i]))
            if key not in sm_uuid:
                sm = key[1]
                sm_uuid[key] = add(part_uuid[key[0]], f"SM {sm}" if sm >= 0 else "SM unknown",
                                   base_rank + (sm if sm >= 0 else MAX_SM_RANK), parent_of_children=True)
            block_parent[i] = sm_uuid[key]
    block_uuid = np.empty(blocks.size, np.int64)
    for i, (b, p) in enumerate(zip(blocks.tolist(), block_parent.tolist())):
        sm = int(block_sm[i])
        label = f"block {b}" + (f" (SM {sm})" if sm >= 0 else "")
        block_uuid[i] = add(p, label, base_rank + b if p in part_uuid else b, parent_of_children=True)

    # group tracks and their overlap siblings; rank keeps siblings of one group adjacent
    max_sub = int(nsub.max()) if nsub.size else 1
    lane_block_row = np.searchsorted(blocks, lane_block)
    first = []
    group_label: dict[int, tuple[str, str]] = {}  # group id -> (name, merge key)
    for g, bu, count in zip(lane_group.tolist(), block_uuid[lane_block_row].tolist(), nsub.tolist()):
        if g not in group_label:
            group_label[g] = (names.group(g), f"group {g}")
        gname, key = group_label[g]
        first.append(len(uuid) + 1)
        for k in range(count):
            add(bu, gname, g * max_sub + k, key=key)
    first_uuid = np.array(first, np.int64)
    span_uuid = _per_lane(lanes, first_uuid, lane_sp)
    if sub.any():
        span_uuid += sub
    instant_uuid = _per_lane(lanes, first_uuid, lane_in)
    return TrackTree(
        uuid=uuid,
        parent=parent,
        name=name,
        rank=rank,
        merge_key=merge_key,
        description=description,
        counter=counter,
        explicit_children=explicit,
        span_uuid=span_uuid,
        instant_uuid=instant_uuid,
        counter_uuid=counter_uuid,
        overlap_tracks=int((nsub - 1).sum()),
        root_name=rname,
    )


def hardware_summary(trace: Trace, event: int) -> str | None:
    """One line of per-PC hardware data joined to this region (host_decode.hardware.join.attach_to_trace puts it
    in trace.meta["regions_hw"]), shown as the region's counter-track description; None without it."""
    hw = ((trace.meta or {}).get("regions_hw") or {}).get("by_event", {}).get(str(event))
    if not hw:
        return None
    parts = [f"{trace.names.event(event)}: {100.0 * (hw.get('samples_share') or 0.0):.1f}% of stall samples"]
    stalls = {k: v for k, v in (hw.get("stalls") or {}).items() if v}
    if stalls:
        top = max(stalls, key=stalls.get)
        parts.append(f"{top} dominant ({100.0 * stalls[top] / max(sum(stalls.values()), 1e-300):.0f}%)")
    if hw.get("inst_executed"):
        parts.append(f"{hw['inst_executed'] / 1e6:.2f} M instructions executed")
    return ", ".join(parts)


def _lane_sm(trace: Trace, lanes: np.ndarray) -> np.ndarray:
    sm = np.full(lanes.size, -1, np.int64)
    if trace.lanes.size and lanes.size:
        known = trace.lanes["lane"].astype(np.int64)
        o = np.argsort(known)
        at = np.searchsorted(known[o], lanes)
        at_c = np.minimum(at, known.size - 1)
        hit = (at < known.size) & (known[o][at_c] == lanes)
        sm[hit] = trace.lanes["sm"][o][at_c[hit]]
    return sm


# --- interning -------------------------------------------------------------------------------------


def _interning_packet(trace: Trace, event_ids: np.ndarray, args: bool) -> bytes:
    interned = bytearray()
    for e in event_ids.tolist():
        interned += _f_bytes(2, _f_varint(1, e + 1) + _f_bytes(2, trace.names.event(e).encode()))
    if args:
        for i, a in enumerate(ARG_NAMES):
            interned += _f_bytes(3, _f_varint(1, i + 1) + _f_bytes(2, a.encode()))
    body = (
        _f_varint(10, SEQUENCE_ID)
        + _f_varint(13, SEQ_INCREMENTAL_STATE_CLEARED)
        + _f_varint(87, 1)  # first_packet_on_sequence
        + _f_bytes(12, bytes(interned))
    )
    return _packet(body)


# --- bulk event encoding ---------------------------------------------------------------------------


class _Layout:
    """A fixed-width protobuf record: constant bytes and padded-varint columns, filled a whole column
    at a time (constants from one template row)."""

    def __init__(self) -> None:
        self.parts: list = []  # ("c", bytes) | ("v", values, width)

    @property
    def width(self) -> int:
        return sum(_part_width(p) for p in self.parts)

    def const(self, b: bytes) -> "_Layout":
        self.parts.append(("c", bytes(b)))
        return self

    def varint(self, field: int, values: np.ndarray | int, width: int) -> "_Layout":
        self.const(_tag(field, 0))
        if isinstance(values, (int, np.integer)):
            self.const(_varint(int(values), width))
        else:
            self.parts.append(("v", values, width))
        return self

    def message(self, field: int, inner: "_Layout") -> "_Layout":
        self.const(_tag(field, 2) + _varint(inner.width))
        self.parts.extend(inner.parts)
        return self

    def extend(self, other: "_Layout") -> "_Layout":
        self.parts.extend(other.parts)
        return self

    def fill(self, n: int) -> np.ndarray:
        """-> (n, width) uint8, contiguous."""
        rows = self.rows(n)
        return rows if rows.shape[1] == self.width else np.ascontiguousarray(rows[:, : self.width])

    def rows(self, n: int, shared: dict | None = None) -> np.ndarray:
        """-> (n, >= width) uint8: row i starts with record i. Built as 64-bit words: the constant bytes
        (continuation bits of the padded varints included) come from one template row, each per-row
        field is ORed in at its byte offset (a padded varint of <= 8 bytes is one uint64 with its
        7-bit groups spread over its bytes). `shared` keeps spread columns for other layouts that
        hold the same column at the same byte offset in a word (BEGIN and END share the track uuid)."""
        width = self.width
        nwords = (width + 7) // 8
        template = np.zeros(nwords * 8, np.uint8)
        col = 0
        for p in self.parts:
            if p[0] == "c":
                template[col : col + len(p[1])] = np.frombuffer(p[1], np.uint8)
            else:
                template[col : col + p[2] - 1] = 0x80
            col += _part_width(p)
        if any(p[0] == "v" and p[2] > 8 for p in self.parts):
            return self._fill_bytes(n, template)
        shared = {} if shared is None else shared
        words: list = [None] * nwords  # per word: the ORed per-row fields, or None
        owned = [False] * nwords  # whether words[j] may be changed in place

        def put(j: int, value: np.ndarray) -> None:
            if words[j] is None:
                words[j] = value
            elif owned[j]:
                np.bitwise_or(words[j], value, out=words[j])
            else:
                words[j], owned[j] = words[j] | value, True

        col = 0
        for p in self.parts:
            if p[0] == "v":
                j, shift = divmod(col, 8)
                key = (id(p[1]), p[2], shift)
                if key not in shared:
                    value = _spread_bits(p[1], p[2])
                    high = value >> np.uint64(64 - 8 * shift) if shift + p[2] > 8 else None  # into the next word
                    if shift:
                        np.left_shift(value, np.uint64(8 * shift), out=value)
                    shared[key] = (value, high)
                value, high = shared[key]
                put(j, value)
                if high is not None:
                    put(j + 1, high)
            col += _part_width(p)
        out = np.empty((n, nwords), np.uint64)
        for j, (w, const) in enumerate(zip(words, template.view(np.uint64).tolist())):
            if w is None:
                out[:, j] = const
            else:
                np.bitwise_or(w, np.uint64(const), out=out[:, j])
        return out.view(np.uint8)

    def _fill_bytes(self, n: int, template: np.ndarray) -> np.ndarray:
        out = np.empty((n, self.width), np.uint8)
        out[:] = template[: self.width]
        col = 0
        for p in self.parts:
            if p[0] == "v":
                _put_varint(out, col, p[1], p[2])
            col += _part_width(p)
        return out


def _part_width(p) -> int:
    return len(p[1]) if p[0] == "c" else p[2]


def _packet_layout(body: _Layout) -> _Layout:
    return _Layout().message(1, body)


def _scatter_rows(out: np.ndarray, offsets: np.ndarray, rows: np.ndarray, width: int) -> None:
    """out[offsets[i] : offsets[i] + width] = rows[i, :width] for every i, as one fancy assignment of
    `width`-byte items (out seen as overlapping items, one starting at every byte)."""
    if offsets.size == 0:
        return
    item = np.dtype(f"V{width}")
    dst = np.ndarray((out.size - width + 1,), item, buffer=out, strides=(1,))
    src = np.ndarray((rows.shape[0],), item, buffer=rows, strides=(rows.strides[0],))
    dst[offsets] = src


def _spread_bits(values: np.ndarray, width: int) -> np.ndarray:
    """uint64 whose first `width` bytes hold the 7-bit groups of each value (width <= 8, values below
    2**(7 * width)), continuation bits left 0. Adding x & ~(2**b - 1) to x inserts a 0 bit at bit b."""
    x = values.astype(np.int64, copy=False).view(np.uint64)
    if width == 1:
        return x.copy()
    spread = None
    tmp = np.empty_like(x)
    for k in range(1, width):
        np.bitwise_and(x if spread is None else spread, np.uint64(((1 << 64) - 1) ^ ((1 << (8 * k - 1)) - 1)), out=tmp)
        if spread is None:
            spread = x + tmp
        else:
            spread += tmp
    return spread


def _put_varint(out: np.ndarray, col: int, values: np.ndarray, width: int) -> None:
    """Padded varint of `width` bytes per row. Up to 8 bytes: spread the 7-bit groups into the bytes
    of one uint64 with the continuation bits set, then copy its first `width` bytes."""
    v = values.astype(np.int64, copy=False)
    if width <= 8:
        spread = _spread_bits(v, width)
        spread |= np.uint64(int.from_bytes(b"\x80" * (width - 1), "little"))
        out[:, col : col + width] = spread.view(np.uint8).reshape(-1, 8)[:, :width]
        return
    for k in range(width):
        b = v.view(np.uint64) >> np.uint64(7 * k) if k else v.view(np.uint64)
        b = (b & np.uint64(0x7F)).astype(np.uint8)
        if k < width - 1:
            b |= 0x80
        out[:, col + k] = b


def _uwidth(values: np.ndarray) -> int:
    """Padded-varint width that holds every value (negative int64 take 10 bytes)."""
    if values.size == 0:
        return 1
    if int(values.min()) < 0:
        return 10
    return _varint_width(int(values.max()))


_CHUNK_ROWS = 1 << 15  # records built and placed this many at a time: their temporaries stay in cache


def _encode_events(trace: Trace, cols: _SpanColumns, instants: np.ndarray, order: _Order, tree: TrackTree,
                   origin: int, args: bool) -> np.ndarray:
    """All slice and instant packets in file order, as one byte array.

    Each kind of packet is a fixed-width record (BEGIN: timestamp, sequence id, track event with type,
    track, name and args, then SEQ_NEEDS_INCREMENTAL_STATE; END: the same without name, args and flags;
    INSTANT like BEGIN), built for a chunk of span rows at once. Every record then goes to its byte
    offset in the file (_packet_offsets), one fancy assignment per kind and chunk."""
    n = cols.lane.size
    inst = instants[order.inst_rows]
    ti = inst["ts_ns"] - origin
    inst_uuid = tree.instant_uuid[order.inst_rows]
    tw = max(_uwidth(cols.te), _uwidth(ti))  # te >= tb
    uw = max(_uwidth(tree.span_uuid), _uwidth(inst_uuid))
    span_args, inst_args = _arg_columns(trace, cols, inst) if args else ([], [])
    iid = cols.event + 1
    iw = _uwidth(iid)
    arg_widths = [(i, _uwidth(col)) for i, col in span_args]

    def span_layouts(rows: slice) -> tuple[_Layout, _Layout]:
        uuid = tree.span_uuid[rows]  # one object for both: its spread is shared
        named = _named(iid[rows], [(i, col[rows]) for i, col in span_args], iw, arg_widths)
        return (_event_layout(TYPE_SLICE_BEGIN, cols.tb[rows], uuid, tw, uw, named),
                _event_layout(TYPE_SLICE_END, cols.te[rows], uuid, tw, uw))

    inst_named = _named(inst["event"].astype(np.int64) + 1, inst_args)
    inst_layout = _event_layout(TYPE_INSTANT, ti, inst_uuid, tw, uw, inst_named)
    begin, end = span_layouts(slice(0, 0))
    ob, oe, oi = _packet_offsets(order, begin.width, end.width, inst_layout.width)
    out = np.empty(n * (begin.width + end.width) + inst.size * inst_layout.width, np.uint8)
    for r0 in range(0, n, _CHUNK_ROWS):
        rows = slice(r0, min(r0 + _CHUNK_ROWS, n))
        begin, end = span_layouts(rows)
        shared: dict = {}
        _scatter_rows(out, ob[rows], begin.rows(rows.stop - r0, shared), begin.width)
        _scatter_rows(out, oe[rows], end.rows(rows.stop - r0, shared), end.width)
    if inst.size:
        _scatter_rows(out, oi, inst_layout.rows(inst.size), inst_layout.width)
    return out


def _event_layout(type_: int, ts: np.ndarray, uuid: np.ndarray, tw: int, uw: int, named: _Layout | None = None) -> _Layout:
    te = _Layout().varint(9, type_, 1).varint(11, uuid, uw)
    body = _Layout().varint(8, ts, tw).varint(10, SEQUENCE_ID, 1)
    if named is None:
        return _packet_layout(body.message(11, te))
    return _packet_layout(body.message(11, te.extend(named)).varint(13, SEQ_NEEDS_INCREMENTAL_STATE, 1))


def _named(iid: np.ndarray, arg_cols: list, iw: int | None = None, arg_widths: list | None = None) -> _Layout:
    """The interned name and the debug annotations of BEGIN / INSTANT track events (widths from the
    columns unless given: every chunk of one kind needs the same)."""
    te = _Layout().varint(10, iid, _uwidth(iid) if iw is None else iw)
    for k, (i, col) in enumerate(arg_cols):
        w = _uwidth(col) if arg_widths is None else arg_widths[k][1]
        te.message(4, _Layout().varint(1, i + 1, 1).varint(4, col, w))
    return te


def _arg_columns(trace: Trace, cols: _SpanColumns, inst: np.ndarray) -> tuple[list, list]:
    """(arg iid index, column) pairs for spans (row order) and instants; `sm` only when some SM is
    known (unknown is -1)."""
    lane_in = inst["lane"].astype(np.int64)
    span = {"block": cols.table["block"], "group": cols.table["group"], "lane": cols.lane, "event": cols.event}
    ins = {"block": inst["block"], "group": inst["group"], "lane": lane_in, "event": inst["event"]}
    lanes = _union(_present(cols.lane), _present(lane_in))
    sm = _lane_sm(trace, lanes)
    if (sm >= 0).any():
        span["sm"] = _per_lane(lanes, sm, cols.lane)
        ins["sm"] = _per_lane(lanes, sm, lane_in)
    return ([(i, span[a]) for i, a in enumerate(ARG_NAMES) if a in span],
            [(i, ins[a]) for i, a in enumerate(ARG_NAMES) if a in ins])


# --- counters --------------------------------------------------------------------------------------


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
    seg = np.cumsum(new) - 1
    # running max of end inside each group; groups are offset so a max never leaks into the next one
    stride = int(end.max()) + 1
    if (int(seg[-1]) + 1) * stride >= 1 << 62:
        raise ValueError("trace too long/wide for the lanes-inside counter (time range x groups overflows int64)")
    runmax = np.maximum.accumulate(end[o] + seg * stride)
    prev = np.r_[-1, runmax[:-1]]
    is_outer = new | (start[o] + seg * stride >= prev)
    return np.sort(o[is_outer])


def _encode_counters(spans: np.ndarray, tree: TrackTree, origin: int) -> tuple[np.ndarray, int]:
    ev, t, value = lanes_inside(spans)
    # each counter starts at 0 at the origin, so its track reads from the launch start
    first = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
    need = first[t[first] > origin]
    ev = np.insert(ev, need, ev[need])
    t = np.insert(t, need, origin)
    value = np.insert(value, need, 0)
    lut_ids = np.array(sorted(tree.counter_uuid), np.int64)
    lut_uuid = np.array([tree.counter_uuid[i] for i in lut_ids.tolist()], np.int64)
    uuid = lut_uuid[np.searchsorted(lut_ids, ev)]
    ts = t - origin
    te = _Layout().varint(9, TYPE_COUNTER, 1).varint(11, uuid, _uwidth(uuid)).varint(30, value, _uwidth(value))
    body = _Layout().varint(8, ts, _uwidth(ts)).varint(10, SEQUENCE_ID, 1).message(11, te)
    return _packet_layout(body).fill(ts.size).reshape(-1), int(ts.size)


# --- tiny protobuf helpers (preamble only; the bulk path is _Layout) -------------------------------


def _varint_width(v: int) -> int:
    return max(1, (int(v).bit_length() + 6) // 7)


def _varint(v: int, width: int | None = None) -> bytes:
    if width is None and 0 <= v < 16384:
        return _SMALL[v] if v < 128 else bytes((v & 0x7F | 0x80, v >> 7))
    v &= (1 << 64) - 1
    width = width or _varint_width(v)
    out = bytearray()
    for k in range(width):
        b = (v >> (7 * k)) & 0x7F
        out.append(b | 0x80 if k < width - 1 else b)
    if v >> (7 * width):
        raise ValueError(f"value {v} does not fit a {width}-byte varint")
    return bytes(out)


_SMALL = [bytes([i]) for i in range(128)]


def _tag(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _f_varint(field: int, v: int) -> bytes:
    return _tag(field, 0) + _varint(v)


def _f_bytes(field: int, b: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(b)) + b


def _packet(body: bytes) -> bytes:
    return _f_bytes(1, body)
