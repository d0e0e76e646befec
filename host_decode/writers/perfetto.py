"""Native Perfetto traces (TrackEvent protobuf), encoded with numpy a whole column at a time, streamed.

What the file holds (one packet sequence, ``SEQUENCE_ID``):
1. an interning packet (``SEQ_INCREMENTAL_STATE_CLEARED``): event names (iid = event id + 1), flow kind
   names (iid = FLOW_IID_BASE + kind) and, with slice args, debug-annotation names;
2. the track tree (host_decode.writers.tracks): launch, counters, SM, block, group tracks;
3. the events in the one event order (host_decode.writers.order): ``TYPE_SLICE_BEGIN`` /
   ``TYPE_SLICE_END``, user instants as ``TYPE_INSTANT``. BEGIN and INSTANT packets use interned names,
   so they carry ``SEQ_NEEDS_INCREMENTAL_STATE``; END and counter packets use no incremental state and
   carry no flags. Every packet of one kind has the same width (padded varints sized for the largest
   value in the whole trace), so each kind is built as one record table a column at a time, and each
   record is placed at its byte offset, which counts of the events before it give;
4. counter samples (``TYPE_COUNTER``): the lanes-inside counters, then each CounterSeries of the overlay;
5. the overlay's flows: per dependency a ``TYPE_INSTANT`` on the source lane's group track carrying ``flow_ids`` and
   one on the destination lane's carrying ``terminating_flow_ids`` (name: the flow kind);
6. the overlay's slice sets (host_decode.writers.slice_sets): BEGIN / END on tracks of their own, names interned
   from SLICE_IID_BASE, argument names from SLICE_ARG_IID_BASE.

Streaming: the events are encoded and written one run of whole lanes at a time (lanes.lane_chunks), so
memory beyond the span table stays bounded by a chunk. write_perfetto orders a run and lays out its
packets on the calling thread while its file-write thread builds the previous run's records, places them
and writes them (UnplacedEvents: long numpy calls, which release the GIL, so the two share two cores).
The track tree needs every lane's sub-track count first. write_perfetto streams in one pass, every
span on its lane's first track (a lane whose regions nest: the usual trace), checking each run's
sub-tracks as it orders it; at the first run that needs sibling tracks it starts the file over with two
passes (the first only orders and assigns sub-tracks, keeping nothing but the rare moves). Both give the
same bytes where one pass applies (tests/unit/host_decode/writers/test_perfetto.py::test_one_pass_falls_back_to_two).

What goes in is one TraceOptions (host_decode.writers.options) and one Overlay: the flows and counter
series the options' overlays draw from the trace (host_decode.writers.overlays), unless the caller gives
its own.

Size: per-lane constants (block, group, SM, lane) are on the track descriptors once; per-slice debug
annotations only with ``TraceOptions(slice_args=True)`` (``ikp decode --slice-args``). The lanes-inside
counters add about two samples per region, so by default (``lane_counters="auto"``) they are written only
for traces of at most lane_counters.LANE_COUNTERS_AUTO regions (a 1 M-record capture: 34-40 B per region without
them).

Invariants the importer needs, and the tests that guard them (tests/unit/host_decode/writers/test_perfetto.py decodes
the bytes with the official protos and replays what trace processor does):
- slices on one track nest strictly (test_overlap_goes_to_sibling_track, test_random_traces_nest);
- the file's event order is the one order (test_file_order_is_merged_stream_order against the slow
  reference tests/support/stream_oracle.py; test_equal_timestamps_end_before_begin, test_unsorted_span_table,
  test_lexsort_order_and_chunking_give_the_same_file);
- every interned id is defined in the first packet (test_interning_defined_before_use);
- no field is unknown to the official protos; padded varints are valid protobuf (every test replays
  through ``unknown_fields``; test_validator_rejects_unknown_field, test_padded_varints_parse);
- flows and counter series (test_flows_and_counter_series_parse).

Times are rebased to the launch origin (t = 0 ns in the trace): small timestamps make small varints;
the root track's description gives the origin.
"""

from __future__ import annotations

import dataclasses
import gzip as gzip_module
import queue
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from host_decode.core.model import CounterSeries, Trace
from host_decode.writers import ids
from host_decode.writers import lane_counters as lc
from host_decode.writers import lanes as ln
from host_decode.writers import order as od
from host_decode.writers.options import DEFAULT_OPTIONS, TraceOptions
from host_decode.writers.overlays import Overlay, draw_overlays
from host_decode.writers.protobuf import Layout, f_bytes, f_varint, packet, packet_layout, scatter_rows, uwidth
from host_decode.writers.slice_sets import encode_slice_set
from host_decode.writers.tracks import SEQUENCE_ID, TrackTree, build_track_tree

# TrackEvent.Type / TracePacket.SequenceFlags (perfetto_trace.proto)
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
FIELD_FLOW_IDS, FIELD_TERMINATING_FLOW_IDS, FIELD_DOUBLE_COUNTER_VALUE = 47, 48, 44

ARG_NAMES = ("block", "group", "sm", "lane", "event")  # debug-annotation names, iid = index + 1
FLOW_IID_BASE = 1 << 11  # interned names of flow kinds: above every event iid (event id + 1 <= 1024)
SLICE_IID_BASE = 1 << 12  # interned names of the overlay's slices: above the flow kinds (fewer than 2048)
SLICE_ARG_IID_BASE = 64  # interned argument names of the overlay's slices: above ARG_NAMES' iids

_CHUNK_ROWS = 1 << 15  # records built and placed this many at a time: their temporaries stay in cache


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
    flows: int = 0
    notes: tuple = ()  # per overlay drawn, what it holds (overlays.Overlay.notes)

    @property
    def bytes_per_slice(self) -> float:
        return self.bytes / max(self.slices, 1)


# --- public API ------------------------------------------------------------------------------------


def write_perfetto(trace: Trace, path: str | Path, options: TraceOptions | None = None,
                   overlay: Overlay | None = None, spans_seen=None) -> WriteStats:
    """Write `trace` as a Perfetto protobuf trace with `options` (TraceOptions: slice args, lane
    counters, gzip, timings, overlays). overlay: what to draw over the slices; None draws
    options.overlays from the trace (host_decode.writers.overlays). spans_seen: as encode_perfetto."""
    t0 = time.perf_counter()
    options = options or DEFAULT_OPTIONS
    path = Path(path)
    overlay = draw_overlays(trace, options.overlays) if overlay is None else overlay
    drawn = time.perf_counter() - t0
    opener = ((lambda p: gzip_module.open(p, "wb", compresslevel=6)) if options.gzipped(path)
              else (lambda p: open(p, "wb")))

    def encode(one_pass: bool):
        return encode_perfetto(trace, options, overlay, one_pass=one_pass, deferred=True, spans_seen=spans_seen)

    def write(chunks, info: dict) -> dict:
        with opener(path) as f:  # "wb": the two-pass stream starts the file over
            info["phases"]["write"] = _write_chunks(f, chunks)
        return info

    info = _one_pass_else_two(encode, write)
    info["phases"]["overlays"] = drawn
    if options.timings:
        busy = info["phases"]["write"] * 1e3
        print(f"perfetto: overlays {drawn * 1e3:.0f} ms; write thread (records built, placed, written) {busy:.0f} ms"
              f" -> {path}", file=sys.stderr)
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
        flows=info["flows"],
        notes=overlay.notes,
    )


def encode_perfetto(trace: Trace, options: TraceOptions | None = None, overlay: Overlay | None = None, *,
                    one_pass: bool = False, deferred: bool = False, spans_seen=None) -> tuple[Iterator, dict]:
    """-> (chunks, info): the trace file is the concatenation of the chunks (bytes or uint8 arrays),
    produced lazily; `info` (counts, phase timings) is complete once the chunks are consumed. options and
    overlay as write_perfetto (gzip is the file's business: never applied here).

    one_pass: stream the events in one pass over the runs of lanes, every span on its lane's first track;
    the chunks raise SubTracksNeeded at the first run whose regions overlap without nesting (what was
    produced must then be discarded and a two-pass stream, one_pass=False, made instead).

    deferred: the events' chunks may be UnplacedEvents, whose place() returns the bytes (write_perfetto
    places them on its file-write thread).

    spans_seen: an object given every span of the file once, run by run as the chunks are made:
    restart() when the stream starts, then add(group, event, duration) per run (int64 columns but group);
    e.g. host_decode.analysis.stats.RunSummary, the region summary without a pass of its own."""
    options = options or DEFAULT_OPTIONS
    overlay = draw_overlays(trace, options.overlays) if overlay is None else overlay
    overlay.check(trace)
    if len(overlay.flow_kinds) > SLICE_IID_BASE - FLOW_IID_BASE:
        raise ValueError(f"overlay: {len(overlay.flow_kinds)} flow kinds, at most {SLICE_IID_BASE - FLOW_IID_BASE}")
    info = {"slices": int(trace.spans.size), "instants": int(trace.instants.size), "counter_samples": 0,
            "flows": int(overlay.flows.size), "overlay_slices": sum(ss.slices.size for ss in overlay.slice_sets),
            "phases": {}}
    return _encode(trace, info, options, overlay, one_pass, deferred, spans_seen), info


class SubTracksNeeded(Exception):
    """A one-pass stream met regions that overlap without nesting: its track tree had no sibling
    tracks for them, so the stream is void
    (tests/unit/host_decode/writers/test_perfetto.py::test_one_pass_falls_back_to_two)."""


def _one_pass_else_two(encode, consume):
    """consume(*encode(True)): the one-pass stream; when it meets a run that needs sibling tracks,
    consume(*encode(False)) instead (a two-pass stream never raises SubTracksNeeded)."""
    try:
        return consume(*encode(True))
    except SubTracksNeeded:
        return consume(*encode(False))


def perfetto_bytes(trace: Trace, options: TraceOptions | None = None, overlay: Overlay | None = None) -> bytes:
    """The bytes write_perfetto writes (before any gzip), in memory."""
    options = options or DEFAULT_OPTIONS
    overlay = draw_overlays(trace, options.overlays) if overlay is None else overlay
    return _one_pass_else_two(lambda one_pass: encode_perfetto(trace, options, overlay, one_pass=one_pass),
                              lambda chunks, _: b"".join(c if isinstance(c, bytes) else c.tobytes() for c in chunks))


trace_origin = od.trace_origin  # the ns written as t = 0 (the launch's first record, or an earlier event)


def _write_chunks(f: BinaryIO, chunks) -> float:
    """Write every chunk, the file writes on a thread of their own so that they overlap the encoding of
    the next chunk (a write releases the GIL); UnplacedEvents are built and placed there too. Returns the
    seconds that thread spent. At most one chunk waits (an UnplacedEvents holds its run's columns), so
    memory stays bounded; an error of the writes is raised here."""
    pending: queue.Queue = queue.Queue(maxsize=1)
    spent, failed = [0.0], []

    def drain() -> None:
        while (c := pending.get()) is not None:
            if failed:
                continue  # keep taking chunks so that the producer never blocks
            t = time.perf_counter()
            try:
                if isinstance(c, UnplacedEvents):
                    c = c.place()
                f.write(c if isinstance(c, bytes) else memoryview(np.ascontiguousarray(c)).cast("B"))
            except BaseException as e:  # noqa: BLE001 -- re-raised in the caller's thread
                failed.append(e)
            spent[0] += time.perf_counter() - t

    writer = threading.Thread(target=drain, name="perfetto-writes", daemon=True)
    writer.start()
    try:
        for c in chunks:
            if failed:
                break
            pending.put(c)
    finally:
        pending.put(None)
        writer.join()
    if failed:
        raise failed[0]
    return spent[0]


# --- the stream ------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Widths:
    """Padded-varint widths of every per-event column, fixed for the whole file (from whole-trace
    maxima), so that every chunk's records of one kind are equally wide."""

    ts: int
    uuid: int
    span_name: int
    inst_name: int
    span_args: list  # (arg iid index, width)
    inst_args: list


def _encode(trace: Trace, info: dict, options: TraceOptions, overlay: Overlay, one_pass: bool, deferred: bool,
            spans_seen=None):
    phases = info["phases"]
    clock = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases[name] = phases.get(name, 0.0) + now - clock[0]
        clock[0] = now
        if options.timings:
            print(f"perfetto: {name} {phases[name] * 1e3:.0f} ms", file=sys.stderr)

    spans, instants = trace.spans, trace.instants
    args, series, flows = options.slice_args, overlay.counters, overlay.flows
    lane_counters = options.with_lane_counters(trace)
    slice_sets = overlay.slice_sets
    origin = _origin(trace, series, flows, slice_sets)
    chunks = ln.lane_chunks(spans, instants)
    table = _with_lanes(trace, ln.lane_facts(chunks) if one_pass else ln.lane_table(chunks, origin), flows)
    phase("order")
    tree = build_track_tree(trace, table, counters=lane_counters and spans.size > 0, series=series,
                            slice_tracks=tuple(t for ss in slice_sets for t in ss.tracks))
    info["tracks"], info["overlap_tracks"] = tree.num_tracks, int(tree.overlap_tracks)
    widths = _widths(trace, table, tree, origin, args)
    phase("tracks")
    event_ids = ids.union(table.span_events, ids.present(instants["event"].astype(np.int64)))
    slice_names = tuple(n for ss in slice_sets for n in ss.names)
    arg_names = tuple(dict.fromkeys(a for ss in slice_sets for a in ss.arg_names))
    yield _interning_packet(trace, event_ids, args, overlay.flow_kinds, slice_names, arg_names)
    yield tree.descriptor_bytes(origin, trace.absolute)
    if spans_seen is not None:
        spans_seen.restart()
    for oc in ln.ordered_chunks(chunks, origin, None if one_pass else table.subs):
        if one_pass and oc.sub.any():
            raise SubTracksNeeded
        if spans_seen is not None:
            spans_seen.add(oc.cols.table["group"], oc.cols.event, oc.cols.dur)
        out = _encode_events(trace, oc, tree, widths, origin, args, deferred)
        phase("events")
        yield out
        clock[0] = time.perf_counter()
    if lane_counters and spans.size:
        counter_rows, samples = _encode_lane_counters(spans, tree, origin)
        info["counter_samples"] += samples
        phase("counters")
        yield counter_rows
    for s, uuid in zip(series, tree.series_uuid):
        if len(s.times_ns):
            info["counter_samples"] += len(s.times_ns)
            yield _encode_series(s, uuid, origin)
    if flows.size:
        yield _encode_flows(flows, tree, origin)
        phase("flows")
    first_track, first_name = 0, 0
    for ss in slice_sets:
        uuid = tree.slice_uuid[first_track:first_track + len(ss.tracks)]
        name_iid = SLICE_IID_BASE + first_name + np.arange(len(ss.names), dtype=np.int64)
        arg_iid = SLICE_ARG_IID_BASE + np.array([arg_names.index(a) for a in ss.arg_names], np.int64)
        if ss.slices.size:
            yield encode_slice_set(ss, uuid, name_iid, arg_iid, origin, SEQUENCE_ID)
        first_track, first_name = first_track + len(ss.tracks), first_name + len(ss.names)
    if slice_sets:
        phase("slice sets")


def _origin(trace: Trace, series: tuple, flows: np.ndarray, slice_sets: tuple = ()) -> int:
    """The launch origin, moved earlier if a counter sample, flow end or overlay slice is earlier (timestamps
    are unsigned)."""
    origin = od.trace_origin(trace)
    lows = [int(np.min(s.times_ns)) for s in series if len(s.times_ns)]
    if flows.size:
        lows += [int(flows["src_ns"].min()), int(flows["dst_ns"].min())]
    lows += [int(ss.slices["start_ns"].min()) for ss in slice_sets if ss.slices.size]
    return min([origin] + lows)


def _with_lanes(trace: Trace, table: ln.LaneTable, flows: np.ndarray) -> ln.LaneTable:
    """The lane table plus a group track for every lane a flow starts or ends on."""
    if not flows.size:
        return table
    extra = np.setdiff1d(np.concatenate([flows["src_lane"], flows["dst_lane"]]), table.lanes)
    if not extra.size:
        return table
    lanes = np.concatenate([table.lanes, extra])
    o = np.argsort(lanes, kind="stable")
    g = trace.num_groups
    return dataclasses.replace(
        table, lanes=lanes[o], block=np.concatenate([table.block, extra // g])[o],
        group=np.concatenate([table.group, extra % g])[o],
        nsub=np.concatenate([table.nsub, np.ones(extra.size, np.int64)])[o])


def _widths(trace: Trace, table: ln.LaneTable, tree: TrackTree, origin: int, args: bool) -> _Widths:
    spans, inst = trace.spans, trace.instants
    one = lambda values: uwidth(np.array([values], np.int64))  # noqa: E731
    top = [0]
    if spans.size:
        top.append(int(spans["end_ns"].max()) - origin)  # end >= start (checked per chunk)
    if inst.size:
        top.append(int(inst["ts_ns"].max()) - origin)
    lane_top = tree.first_uuid + table.nsub - 1 if tree.lanes.size else np.ones(1, np.int64)
    w = _Widths(ts=one(max(top)), uuid=uwidth(lane_top),
                span_name=one(int(table.span_events[-1]) + 1) if spans.size else 1,
                inst_name=one(int(inst["event"].max()) + 1) if inst.size else 1, span_args=[], inst_args=[])
    if args:
        sm_span = trace.sm_of_lane(table.span_lanes)
        inst_lanes = ids.present(inst["lane"].astype(np.int64))
        sm_inst = trace.sm_of_lane(inst_lanes)
        with_sm = bool((np.concatenate([sm_span, sm_inst]) >= 0).any())
        for table_, sm, out in ((spans, sm_span, w.span_args), (inst, sm_inst, w.inst_args)):
            for i, a in enumerate(ARG_NAMES):
                if a == "sm":
                    if with_sm:
                        out.append((i, uwidth(sm)))
                elif table_.size:
                    col = table_[a]
                    out.append((i, uwidth(np.array([int(col.min()), int(col.max())]))))
                else:
                    out.append((i, 1))
    return w


def _interning_packet(trace: Trace, event_ids: np.ndarray, args: bool, flow_kinds: tuple, slice_names: tuple = (),
                      slice_arg_names: tuple = ()) -> bytes:
    interned = bytearray()
    for e in event_ids.tolist():
        interned += f_bytes(2, f_varint(1, e + 1) + f_bytes(2, trace.names.event(e).encode()))
    for k, name in enumerate(flow_kinds):
        interned += f_bytes(2, f_varint(1, FLOW_IID_BASE + k) + f_bytes(2, str(name).encode()))
    for k, name in enumerate(slice_names):
        interned += f_bytes(2, f_varint(1, SLICE_IID_BASE + k) + f_bytes(2, str(name).encode()))
    if args:
        for i, a in enumerate(ARG_NAMES):
            interned += f_bytes(3, f_varint(1, i + 1) + f_bytes(2, a.encode()))
    for i, a in enumerate(slice_arg_names):
        interned += f_bytes(3, f_varint(1, SLICE_ARG_IID_BASE + i) + f_bytes(2, a.encode()))
    body = (
        f_varint(10, SEQUENCE_ID)
        + f_varint(13, SEQ_INCREMENTAL_STATE_CLEARED)
        + f_varint(87, 1)  # first_packet_on_sequence
        + f_bytes(12, bytes(interned))
    )
    return packet(body)


# --- events of one chunk ---------------------------------------------------------------------------


def _packet_offsets(order: od.EventOrder, wb: int, we: int, wi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte offsets in the chunk's event section of each BEGIN and END packet (by span row) and of each
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


@dataclasses.dataclass
class UnplacedEvents:
    """A run's event packets, laid out but not yet built: place() builds each block's records and puts
    them at their byte offsets (write_perfetto calls it on its file-write thread, so that it overlaps the
    ordering of the next run on this one)."""

    size: int  # bytes of the run's event section
    blocks: list  # per block of rows: [(byte offsets, Layout, rows)]; one block's layouts share columns

    def place(self, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.size, np.uint8) if out is None else out
        for block in self.blocks:
            shared: dict = {}
            for offsets, layout, n in block:
                scatter_rows(out, offsets, layout.rows(n, shared), layout.width)
        self.blocks = []
        return out


def _encode_events(trace: Trace, oc: ln.OrderedChunk, tree: TrackTree, w: _Widths, origin: int,
                   args: bool, deferred: bool = False) -> np.ndarray | UnplacedEvents:
    """The chunk's slice and instant packets in file order, as one byte array (deferred: as UnplacedEvents,
    whose place() makes that array).

    Each kind of packet is a fixed-width record (BEGIN: timestamp, sequence id, track event with type,
    track, name and args, then SEQ_NEEDS_INCREMENTAL_STATE; END: the same without name, args and flags;
    INSTANT like BEGIN), built for a block of span rows at once. Every record then goes to its byte
    offset (_packet_offsets), one fancy assignment per kind and block."""
    cols, order = oc.cols, oc.order
    n = cols.lane.size
    inst = oc.instants[order.inst_rows]
    ti = inst["ts_ns"] - origin
    inst_uuid = tree.lane_uuid(inst["lane"])
    span_uuid = tree.lane_uuid(cols.lane)
    if oc.sub.any():
        span_uuid += oc.sub
    span_args, inst_args = _arg_columns(trace, cols, inst) if args else ([], [])
    iid = cols.event + 1

    def span_layouts(rows: slice) -> tuple[Layout, Layout]:
        uuid = span_uuid[rows]  # one object for both: its spread is shared
        named = _named(iid[rows], [(i, col[rows]) for i, col in span_args], w.span_name, w.span_args)
        return (_event_layout(TYPE_SLICE_BEGIN, cols.tb[rows], uuid, w.ts, w.uuid, named),
                _event_layout(TYPE_SLICE_END, cols.te[rows], uuid, w.ts, w.uuid))

    inst_named = _named(inst["event"].astype(np.int64) + 1, inst_args, w.inst_name, w.inst_args)
    inst_layout = _event_layout(TYPE_INSTANT, ti, inst_uuid, w.ts, w.uuid, inst_named)
    begin, end = span_layouts(slice(0, 0))
    ob, oe, oi = _packet_offsets(order, begin.width, end.width, inst_layout.width)
    events = UnplacedEvents(n * (begin.width + end.width) + inst.size * inst_layout.width, [])
    out = None if deferred else np.empty(events.size, np.uint8)
    for r0 in range(0, n, _CHUNK_ROWS):
        rows = slice(r0, min(r0 + _CHUNK_ROWS, n))
        begin, end = span_layouts(rows)
        events.blocks.append([(ob[rows], begin, rows.stop - r0), (oe[rows], end, rows.stop - r0)])
        if out is not None:  # placed block by block: one block's records at a time in memory
            events.place(out)
    if inst.size:
        events.blocks.append([(oi, inst_layout, inst.size)])
    return events if out is None else events.place(out)


def _event_layout(type_: int, ts: np.ndarray, uuid: np.ndarray, tw: int, uw: int,
                  named: Layout | None = None) -> Layout:
    te = Layout().varint(9, type_, 1).varint(11, uuid, uw)
    body = Layout().varint(8, ts, tw).varint(10, SEQUENCE_ID, 1)
    if named is None:
        return packet_layout(body.message(11, te))
    return packet_layout(body.message(11, te.extend(named)).varint(13, SEQ_NEEDS_INCREMENTAL_STATE, 1))


def _named(iid: np.ndarray, arg_cols: list, iw: int, arg_widths: list) -> Layout:
    """The interned name and the debug annotations of BEGIN / INSTANT track events (widths fixed for the
    whole file: every chunk of one kind needs the same)."""
    te = Layout().varint(10, iid, iw)
    width = dict(arg_widths)  # the args written: `sm` only when the trace knows some SM
    for i, col in arg_cols:
        if i in width:
            te.message(4, Layout().varint(1, i + 1, 1).varint(4, col, width[i]))
    return te


def _arg_columns(trace: Trace, cols: od.SpanColumns, inst: np.ndarray) -> tuple[list, list]:
    """(arg iid index, column) pairs for spans (row order) and instants; `sm` only when some SM is
    known (unknown is -1)."""
    lane_in = inst["lane"].astype(np.int64)
    span = {"block": cols.table["block"], "group": cols.table["group"], "lane": cols.lane, "event": cols.event,
            "sm": trace.sm_of_lane(cols.lane)}
    ins = {"block": inst["block"], "group": inst["group"], "lane": lane_in, "event": inst["event"],
           "sm": trace.sm_of_lane(lane_in)}
    return ([(i, span[a]) for i, a in enumerate(ARG_NAMES)], [(i, ins[a]) for i, a in enumerate(ARG_NAMES)])


# --- counters and flows ----------------------------------------------------------------------------


def _encode_lane_counters(spans: np.ndarray, tree: TrackTree, origin: int) -> tuple[np.ndarray, int]:
    ev, t, value = lc.lanes_inside(spans)
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
    te = Layout().varint(9, TYPE_COUNTER, 1).varint(11, uuid, uwidth(uuid)).varint(30, value, uwidth(value))
    body = Layout().varint(8, ts, uwidth(ts)).varint(10, SEQUENCE_ID, 1).message(11, te)
    return packet_layout(body).fill(ts.size).reshape(-1), int(ts.size)


def _encode_series(s: CounterSeries, uuid: int, origin: int) -> np.ndarray:
    ts = np.asarray(s.times_ns, np.int64) - origin
    values = np.ascontiguousarray(s.values, np.float64)
    te = Layout().varint(9, TYPE_COUNTER, 1).varint(11, uuid, uwidth(np.array([uuid])))
    te.fixed64(FIELD_DOUBLE_COUNTER_VALUE, values)
    body = Layout().varint(8, ts, uwidth(ts)).varint(10, SEQUENCE_ID, 1).message(11, te)
    return packet_layout(body).fill(ts.size).reshape(-1)


def _encode_flows(flows: np.ndarray, tree: TrackTree, origin: int) -> np.ndarray:
    """Per flow (id = row + 1): an instant on the source lane's group track with flow_ids=[id], and
    one on the destination's with terminating_flow_ids=[id], both named by the flow kind."""
    ids = np.arange(1, flows.size + 1, dtype=np.uint64)
    iid = FLOW_IID_BASE + flows["kind"].astype(np.int64)
    ends = []
    for lane, ts, field in ((flows["src_lane"], flows["src_ns"], FIELD_FLOW_IDS),
                            (flows["dst_lane"], flows["dst_ns"], FIELD_TERMINATING_FLOW_IDS)):
        t = ts.astype(np.int64) - origin
        uuid = tree.lane_uuid(lane)
        te = Layout().varint(9, TYPE_INSTANT, 1).varint(11, uuid, uwidth(uuid)).varint(10, iid, uwidth(iid))
        te.fixed64(field, ids)
        body = Layout().varint(8, t, uwidth(t)).varint(10, SEQUENCE_ID, 1).message(11, te)
        ends.append(packet_layout(body.varint(13, SEQ_NEEDS_INCREMENTAL_STATE, 1)).fill(flows.size).reshape(-1))
    return np.concatenate(ends)
