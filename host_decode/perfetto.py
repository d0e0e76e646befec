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

3. the events, per lane in one merged time order (``merged_stream``): ``TYPE_SLICE_BEGIN`` /
   ``TYPE_SLICE_END``, user instants as ``TYPE_INSTANT``. BEGIN and INSTANT packets use interned
   names, so they carry ``SEQ_NEEDS_INCREMENTAL_STATE``; END and counter packets use no incremental
   state and carry no flags (4 bytes a slice saved);
4. the counter samples (``TYPE_COUNTER``).

Invariants the importer needs, and the tests that guard them (tests/test_perfetto.py decodes the bytes
with the official protos and replays what trace processor does):
- slices on one track nest strictly: ``assign_subtracks`` puts regions of different ids that overlap
  without nesting on sibling tracks (test_overlap_goes_to_sibling_track, test_random_traces_nest);
- at equal timestamps a lane's ENDs (inner region first) are written before its instants and then its
  BEGINs (outer region first): trace processor sorts by timestamp and keeps file order for ties, and
  the other order silently nests back-to-back slices; a zero-length region is its BEGIN immediately
  followed by its END (test_equal_timestamps_end_before_begin);
- every interned id is defined in the first packet (test_interning_defined_before_use);
- no field is unknown to the official protos; padded varints are valid protobuf, and the fixed widths
  let whole columns be written at once (every test replays through ``unknown_fields``;
  test_validator_rejects_unknown_field, test_layout_widths_parse).

Times are rebased to the launch origin (``trace.start_ns`` = 0 ns in the trace): small timestamps make
small varints; the root track's description gives the origin.
"""

from __future__ import annotations

import dataclasses
import gzip as gzip_module
import sys
import time
from pathlib import Path
from typing import BinaryIO

import numpy as np

from host_decode.model import Trace

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

    spans, instants = trace.spans, trace.instants
    _check_input(spans, instants)
    origin = trace_origin(trace)
    stream = merged_stream(spans, instants, origin)
    phase("order")
    sub = assign_subtracks(spans, stream)
    phase("subtracks")
    tree = build_track_tree(trace, spans, instants, sub, counters=counters)
    phase("tracks")
    chunks: list = [_interning_packet(trace, spans, instants, args), tree.descriptor_bytes(origin, trace.absolute)]
    chunks.append(_encode_events(trace, spans, instants, stream, tree, origin, args))
    phase("events")
    samples = 0
    if counters and spans.size:
        counter_rows, samples = _encode_counters(spans, tree, origin)
        chunks.append(counter_rows)
        phase("counters")
    info = {
        "slices": int(spans.size),
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
        bad = np.flatnonzero(spans["end_ns"] < spans["start_ns"])
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{bad.size} span(s) end before they begin (first: span row {i}, lane {int(spans['lane'][i])}, "
                f"start {int(spans['start_ns'][i])} ns > end {int(spans['end_ns'][i])} ns)"
            )
        if int(spans["lane"].min()) < 0 or int(spans["event"].min()) < 0:
            raise ValueError("span table has negative lane or event ids")
    if instants.size and (int(instants["lane"].min()) < 0 or int(instants["event"].min()) < 0):
        raise ValueError("instant table has negative lane or event ids")


def _write_chunks(f: BinaryIO, chunks: list) -> None:
    for c in chunks:
        f.write(c if isinstance(c, bytes) else memoryview(np.ascontiguousarray(c)).cast("B"))


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


def _not_nested(pos_begin: np.ndarray, pos_end: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Spans that are not strictly nested within their (lane, sub-track) event sequence.

    Events of each (lane, sub) group in stream order form a parenthesis string; it nests strictly iff
    for every span the count of open spans just after its BEGIN equals the count just before its END
    (a crossing pair always breaks that equality for the earliest-begun left member)."""
    n = pos_begin.size
    key_shift = 42
    keys = np.concatenate([(sub << key_shift) | pos_begin, (sub << key_shift) | pos_end])
    order = np.argsort(keys, kind="stable")
    delta = np.where(order < n, 1, -1).astype(np.int32)
    depth = np.cumsum(delta)  # groups are balanced, so a global cumsum is each group's own depth
    rank = np.empty(2 * n, np.int64)
    rank[order] = np.arange(2 * n)
    after_begin = depth[rank[:n]]
    before_end = depth[rank[n:]] + 1
    return after_begin != before_end


def assign_subtracks(spans: np.ndarray, stream: Stream, max_rounds: int = 64) -> np.ndarray:
    """Sub-track per span (0 = the group track): within each (lane, sub-track) slices nest strictly.

    Vectorized: lanes whose regions all nest (the common case) keep everything on sub-track 0 after
    one check. In other lanes, each round moves one region id per offending (lane, sub-track) to the
    next sub-track (the largest id among the offending spans), so a region id keeps one row per lane.
    Same-id regions nest by construction of the decoder's stack pairing; if they do not (foreign
    input), the remaining lanes fall back to a first-fit packing per span."""
    n = spans.size
    sub = np.zeros(n, np.int64)
    if n == 0:
        return sub
    # first check on the stream itself: all spans of a lane on one track, no sort needed
    depth = np.cumsum(np.array([-1, 0, 1], np.int32)[stream.kind])  # KIND_END, KIND_INSTANT, KIND_BEGIN
    bad = depth[stream.pos_begin] != depth[stream.pos_end] + 1
    if not bad.any():
        return sub
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    active = np.flatnonzero(_in_set(lane, lane[bad]))
    for _ in range(max_rounds):
        a_bad = _not_nested(stream.pos_begin[active], stream.pos_end[active], sub[active])
        if not a_bad.any():
            return sub
        group = (lane[active] << 16) | sub[active]  # lane < 2**20, sub < 2**16, event id < 2**16
        bad_key = np.sort((group[a_bad] << 16) | event[active][a_bad])
        bg, be = bad_key >> 16, bad_key & 0xFFFF
        last = np.r_[bg[1:] != bg[:-1], True]
        move_group, move_event = bg[last], be[last]  # per offending group: its largest offending id
        at = np.searchsorted(move_group, group)
        at_c = np.minimum(at, move_group.size - 1)
        hit = (at < move_group.size) & (move_group[at_c] == group) & (move_event[at_c] == event[active])
        sub[active[hit]] += 1
        # lanes that are now clean drop out
        active = active[_in_set(lane[active], lane[active][a_bad])]
    still = _not_nested(stream.pos_begin[active], stream.pos_end[active], sub[active])
    _first_fit(active[_in_set(lane[active], lane[active][still])], lane, stream, sub)
    return sub


def _first_fit(rows: np.ndarray, lane: np.ndarray, stream: Stream, sub: np.ndarray) -> None:
    """Per-span fallback: each BEGIN goes to the lowest sub-track whose open slice contains it."""
    if rows.size == 0:
        return
    rows = rows[np.argsort(stream.pos_begin[rows], kind="stable")]
    pb, pe = stream.pos_begin, stream.pos_end
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
        out = bytearray()
        for i in range(len(self.uuid)):
            td = bytearray()
            td += _f_varint(1, self.uuid[i])
            if self.parent[i]:
                td += _f_varint(5, self.parent[i])
            td += _f_bytes(2, self.name[i].encode())
            if i == 0:
                td += _f_bytes(14, desc.encode())
            elif self.description[i]:
                td += _f_bytes(14, self.description[i].encode())
            if self.counter[i]:
                td += _f_bytes(8, _f_bytes(6, b"lanes"))
            if self.explicit_children[i]:
                td += _f_varint(11, CHILD_ORDERING_EXPLICIT)
            if self.rank[i] is not None:
                td += _f_varint(12, self.rank[i])
            if self.merge_key[i] is not None:
                td += _f_varint(15, SIBLING_MERGE_BY_KEY)
                td += _f_bytes(16, self.merge_key[i].encode())
            out += _packet(_f_varint(10, SEQUENCE_ID) + _f_bytes(60, bytes(td)))
        return bytes(out)


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
    trace: Trace, spans: np.ndarray, instants: np.ndarray, sub: np.ndarray, *, counters: bool = True
) -> TrackTree:
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
    event_ids = _present(spans["event"]).tolist()
    counter_uuid = {}
    if counters:
        for k, e in enumerate(event_ids):
            counter_uuid[int(e)] = add(root, f"lanes in {names.event(e)}", k, is_counter=True,
                                       about=hardware_summary(trace, int(e)))
    base_rank = len(counter_uuid)

    # lanes that have anything to show, with block, group, sub-track count and SM
    lane_all = np.concatenate([spans["lane"], instants["lane"]]).astype(np.int64)
    lanes = _present(lane_all)
    lut = np.full(int(lanes.max()) + 1 if lanes.size else 1, -1, np.int64)
    lut[lanes] = np.arange(lanes.size)
    lane_row = lut[lane_all]
    any_row = np.empty(lanes.size, np.int64)
    any_row[lane_row] = np.arange(lane_all.size)  # some row of each lane: all give its block and group
    block_all = np.concatenate([spans["block"], instants["block"]])
    group_all = np.concatenate([spans["group"], instants["group"]])
    lane_block, lane_group = block_all[any_row].astype(np.int64), group_all[any_row].astype(np.int64)
    nsub = np.ones(lanes.size, np.int64)
    moved = np.flatnonzero(sub)
    if moved.size:
        np.maximum.at(nsub, lane_row[moved], sub[moved] + 1)
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
    first_uuid = np.empty(lanes.size, np.int64)
    for i in range(lanes.size):
        g = int(lane_group[i])
        gname = names.group(g)
        key = f"group {g}"
        bu = int(block_uuid[lane_block_row[i]])
        first_uuid[i] = len(uuid) + 1
        for k in range(int(nsub[i])):
            add(bu, gname, g * max_sub + k, key=key)
    span_uuid = first_uuid[lane_row[: spans.size]] + sub
    instant_uuid = first_uuid[lane_row[spans.size :]]
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
    """One line of per-PC hardware data joined to this region (host_decode.join.attach_to_trace puts it
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


def _interning_packet(trace: Trace, spans: np.ndarray, instants: np.ndarray, args: bool) -> bytes:
    ids = _present(np.concatenate([spans["event"], instants["event"]]).astype(np.int64))
    interned = bytearray()
    for e in ids.tolist():
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
    """A fixed-width protobuf record: constant bytes, padded-varint columns and raw per-row bytes,
    filled a whole column at a time (constants by broadcasting one template row)."""

    def __init__(self) -> None:
        self.parts: list = []  # ("c", bytes) | ("v", values, width) | ("k", one byte per kind)

    @property
    def width(self) -> int:
        return sum(_part_width(p) for p in self.parts)

    def const(self, b: bytes) -> "_Layout":
        self.parts.append(("c", bytes(b)))
        return self

    def per_kind(self, lut: list[int]) -> "_Layout":
        """One byte that depends only on the row's kind (fill(kind=...)): lut[kind]."""
        self.parts.append(("k", bytes(lut)))
        return self

    def varint(self, field: int, values: np.ndarray | int, width: int) -> "_Layout":
        self.const(_tag(field, 0))
        if isinstance(values, (int, np.integer)):
            self.const(_varint(int(values), width))
        else:
            self.parts.append(("v", values, width))
        return self

    def message(self, field: int, inner: "_Layout") -> "_Layout":
        self.const(_tag(field, 2) + _varint(inner.width, _varint_width(inner.width)))
        self.parts.extend(inner.parts)
        return self

    def extend(self, other: "_Layout") -> "_Layout":
        self.parts.extend(other.parts)
        return self

    def fill(self, n: int, kind: np.ndarray | None = None) -> np.ndarray:
        """-> (n, width) uint8 rows. Built as 64-bit words: constant and per-kind bytes come from one
        template row per kind (gathered by `kind`), each per-row field is ORed in at its byte offset
        (a padded varint of <= 8 bytes is one uint64 with its 7-bit groups spread over its bytes)."""
        width = self.width
        nwords = (width + 7) // 8
        kinds = max([len(p[1]) for p in self.parts if p[0] == "k"] + [1])
        template = np.zeros((kinds, nwords * 8), np.uint8)
        col = 0
        for p in self.parts:
            if p[0] == "c":
                template[:, col : col + len(p[1])] = np.frombuffer(p[1], np.uint8)
            elif p[0] == "k":
                template[:, col] = np.frombuffer(p[1], np.uint8)
            col += _part_width(p)
        if any(p[0] == "v" and p[2] > 8 for p in self.parts):
            return self._fill_bytes(n, template, kind)
        twords = template.view(np.uint64)
        if kinds > 1:
            words = [twords[:, j][kind] for j in range(nwords)]
        else:
            words = [np.full(n, w, np.uint64) for w in twords[0].tolist()]
        col = 0
        for p in self.parts:
            if p[0] == "v":
                value = _spread_varint(p[1], p[2])
                j, shift = divmod(col, 8)
                if shift + _part_width(p) > 8:  # straddles two words: the high bytes go to the next
                    np.bitwise_or(words[j + 1], value >> np.uint64(64 - 8 * shift), out=words[j + 1])
                if shift:
                    np.left_shift(value, np.uint64(8 * shift), out=value)
                np.bitwise_or(words[j], value, out=words[j])
            col += _part_width(p)
        rows = np.stack(words, axis=1).view(np.uint8)
        return rows if width == nwords * 8 else np.ascontiguousarray(rows[:, :width])

    def _fill_bytes(self, n: int, template: np.ndarray, kind: np.ndarray | None) -> np.ndarray:
        out = np.ascontiguousarray(template[kind][:, : self.width]) if template.shape[0] > 1 else np.empty((n, self.width), np.uint8)
        if template.shape[0] == 1:
            out[:] = template[0, : self.width]
        col = 0
        for p in self.parts:
            if p[0] == "v":
                _put_varint(out, col, p[1], p[2])
            col += _part_width(p)
        return out


def _part_width(p) -> int:
    return len(p[1]) if p[0] == "c" else (1 if p[0] == "k" else p[2])


def _packet_layout(body: _Layout) -> _Layout:
    return _Layout().message(1, body)


_SPREAD_MASKS = [np.uint64(0x7F << (7 * k)) for k in range(8)]


def _spread_varint(values: np.ndarray, width: int) -> np.ndarray:
    """uint64 whose first `width` bytes are the padded varint of each value (width <= 8); in-place
    ufuncs, since fresh 16 MB temporaries per step cost more than the arithmetic."""
    v = values.astype(np.int64, copy=False).view(np.uint64)
    spread = np.bitwise_and(v, _SPREAD_MASKS[0])
    if width > 1:
        tmp = np.empty_like(spread)
        for k in range(1, width):
            np.bitwise_and(v, _SPREAD_MASKS[k], out=tmp)
            np.left_shift(tmp, np.uint64(k), out=tmp)
            np.bitwise_or(spread, tmp, out=spread)
        np.bitwise_or(spread, np.uint64(int.from_bytes(b"\x80" * (width - 1), "little")), out=spread)
    return spread


def _put_varint(out: np.ndarray, col: int, values: np.ndarray, width: int) -> None:
    """Padded varint of `width` bytes per row. Up to 8 bytes: spread the 7-bit groups into the bytes
    of one uint64 with the continuation bits set, then copy its first `width` bytes."""
    v = values.astype(np.int64, copy=False).view(np.uint64)
    if width <= 8:
        spread = v & _SPREAD_MASKS[0]
        for k in range(1, width):
            spread |= (v & _SPREAD_MASKS[k]) << np.uint64(k)
        spread |= np.uint64(int.from_bytes(b"\x80" * (width - 1), "little"))
        out[:, col : col + width] = spread.view(np.uint8).reshape(-1, 8)[:, :width]
        return
    for k in range(width):
        b = v >> np.uint64(7 * k) if k else v
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


def _encode_events(trace, spans, instants, stream: Stream, tree: TrackTree, origin: int, args: bool) -> np.ndarray:
    """All slice and instant packets in stream order, as one byte array.

    Every packet starts with the same "head" (timestamp, sequence id, and the track event's type and
    track uuid; lengths and type are per-row bytes), built for all rows at once in stream order.
    BEGIN/INSTANT packets continue with a "tail" (name_iid and args, closing the track event, then
    SEQ_NEEDS_INCREMENTAL_STATE) that is spliced in after their head. Head and tail widths are padded
    (wider varints) to whole 32-bit (or 16-bit) words, so the splice moves words, not bytes."""
    kind, index = stream.kind, stream.index
    if kind.size == 0:
        return np.zeros(0, np.uint8)
    is_end = kind == KIND_END
    is_inst = kind == KIND_INSTANT
    named_pos = np.flatnonzero(~is_end)
    span_row = np.where(is_inst, 0, index)
    inst_row = index[is_inst]
    if spans.size:
        ts = np.concatenate([spans["start_ns"], spans["end_ns"]])[span_row + is_end * spans.size]
        uuid = tree.span_uuid[span_row]
    else:
        ts = np.zeros(kind.size, np.int64)
        uuid = np.zeros(kind.size, np.int64)
    if instants.size:
        ts[is_inst] = instants["ts_ns"][inst_row]
        uuid[is_inst] = tree.instant_uuid[inst_row]
    ts -= origin

    # tail columns, per named row in stream order
    n_named = named_pos.size
    nk_inst = is_inst[named_pos]
    ni = index[named_pos]

    def named_col(span_col, inst_col):
        out = np.empty(n_named, np.int64)
        if spans.size:
            out[:] = span_col[np.where(nk_inst, 0, ni)]
        if instants.size:
            out[nk_inst] = inst_col[ni[nk_inst]]
        return out

    event_named = named_col(spans["event"], instants["event"])
    arg_cols = []
    if args and n_named:
        lane_named = named_col(spans["lane"], instants["lane"])
        cols = {
            "block": named_col(spans["block"], instants["block"]),
            "group": named_col(spans["group"], instants["group"]),
            "lane": lane_named,
            "event": event_named,
        }
        lanes = _present(lane_named)
        sm = _lane_sm(trace, lanes)
        if (sm >= 0).any():
            cols["sm"] = sm[np.searchsorted(lanes, lane_named)]
        arg_cols = [(i, cols[a]) for i, a in enumerate(ARG_NAMES) if a in cols]

    tw, uw, iw = _uwidth(ts), _uwidth(uuid), _uwidth(event_named + 1)

    def tail_te(pad: int) -> _Layout:
        te = _Layout().varint(10, event_named + 1, iw + pad)
        for i, col in arg_cols:
            te.message(4, _Layout().varint(1, i + 1, 1).varint(4, col, _uwidth(col)))
        return te

    te_head_w = 2 + 1 + uw  # type, track_uuid
    head_w0 = 1 + 1 + 1 + tw + 2 + 1 + 1 + te_head_w  # 0A len | 40 ts | 50 seq | 5A len | te head
    unit, pad_head, pad_tail = _choose_padding(head_w0, tail_te(0).width + 2, tw, iw)
    te_tail = tail_te(pad_tail)
    tail = _Layout().extend(te_tail).varint(13, SEQ_NEEDS_INCREMENTAL_STATE, 1)
    head_w = head_w0 + pad_head
    # per kind (KIND_END, KIND_INSTANT, KIND_BEGIN): packet length, track event length, type
    te_len = [te_head_w, te_head_w + te_tail.width, te_head_w + te_tail.width]
    pkt_len = [head_w - 2, head_w - 2 + tail.width, head_w - 2 + tail.width]
    if max(pkt_len) > 127:
        raise ValueError("a slice packet over 127 bytes: too many args for the one-byte length layout")
    type_byte = [TYPE_SLICE_END, TYPE_INSTANT, TYPE_SLICE_BEGIN]
    head = (
        _Layout()
        .const(_tag(1, 2)).per_kind(pkt_len)
        .varint(8, ts, tw + pad_head)
        .varint(10, SEQUENCE_ID, 1)
        .const(_tag(11, 2)).per_kind(te_len)
        .const(_tag(9, 0)).per_kind(type_byte)
        .varint(11, uuid, uw)
    )
    assert head.width == head_w and head_w % unit == 0 and tail.width % unit == 0
    head_rows = head.fill(kind.size, kind)
    if n_named == 0:
        return head_rows.reshape(-1)
    return _splice(head_rows, tail.fill(n_named), named_pos, unit)


def _choose_padding(head: int, tail: int, tw: int, iw: int) -> tuple[int, int, int]:
    """(word size, extra timestamp bytes in every head, extra name_iid bytes in every tail): the
    cheapest padding that makes head and tail whole words; 32-bit words if that costs <= 2 bytes a
    slice (a slice has two heads and one tail), else 16-bit, else bytes."""
    for unit in (4, 2):
        ph, pt = -head % unit, -tail % unit
        if tw + ph > 10 or iw + pt > 10:
            continue
        if unit == 2 or 2 * ph + pt <= 2:
            return unit, ph, pt
    return 1, 0, 0


def _splice(head: np.ndarray, tail: np.ndarray, after: np.ndarray, unit: int) -> np.ndarray:
    """Head rows with a tail row spliced in after the heads at positions `after` (sorted)."""
    word = {4: np.uint32, 2: np.uint16, 1: np.uint8}[unit]
    hw, tw = head.shape[1] // unit, tail.shape[1] // unit
    hwords = head.view(word).reshape(-1)
    twords = tail.view(word)
    total = hwords.size + twords.size
    # word index of tail word j of the r-th spliced row: after its own head, after r earlier tails
    start = (after + 1) * hw + np.arange(after.size) * tw
    ins = (start[:, None] + np.arange(tw)).reshape(-1)
    mask = np.ones(total, bool)
    mask[ins] = False
    out = np.empty(total, word)
    out[mask] = hwords
    out[ins] = twords.reshape(-1)
    return out.view(np.uint8)


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
    if width is None and 0 <= v < 128:
        return _SMALL[v]
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
