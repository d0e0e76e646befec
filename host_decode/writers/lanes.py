"""Runs of whole lanes: the span and instant tables cut into runs of about CHUNK_SPANS spans (whole
lanes each), each run ordered on its own (OrderedChunk: the one event order and the sub-tracks), and the
lane table the track tree needs (LaneTable: per lane its block, group and sub-track count).

The file's event stream is lane by lane, so each run's events are contiguous in the file and the writers
stream run by run in bounded memory. A one-pass writer uses lane_facts (every span on its lane's first
track) and checks each run as it orders it; a two-pass writer first finds the sub-track moves (lane_table).

Invariants, and the tests that guard them: runs of a few lanes give the same file as one run
(tests/unit/host_decode/writers/test_perfetto.py::test_lexsort_order_and_chunking_give_the_same_file); one pass and two
passes give the same bytes where one pass applies (::test_one_pass_falls_back_to_two); a table out of lane order is read
through a stable permutation (::test_unsorted_span_table).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.core.arrays import positions_in_sorted
from host_decode.writers.ids import changes, index_of, nondecreasing, present, present_sorted, some_row, union
from host_decode.writers.order import EventOrder, SpanColumns, event_order, span_columns
from host_decode.writers.subtracks import subtracks

CHUNK_SPANS = 1 << 16  # spans ordered and encoded at a time (whole lanes): temporaries stay ~20 MB
TRACK_BITS = 20  # LaneTable.tracks packs (lane, sub-track) as lane << TRACK_BITS | sub


@dataclasses.dataclass
class LaneChunks:
    """The span and instant tables cut into runs of whole lanes of about CHUNK_SPANS spans each, in lane
    order (a table not sorted by lane is read through a stable permutation, never copied whole)."""

    spans: np.ndarray
    instants: np.ndarray
    span_perm: np.ndarray | None  # stable lane order of the span table; None when it is already so
    inst_perm: np.ndarray | None
    span_cuts: np.ndarray  # chunk k holds lane-ordered span rows span_cuts[k]:span_cuts[k + 1]
    inst_cuts: np.ndarray

    def __len__(self) -> int:
        return self.span_cuts.size - 1

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(spans, instants) of chunk k, in lane order (stable)."""
        return (_rows(self.spans, self.span_perm, self.span_cuts[k], self.span_cuts[k + 1]),
                _rows(self.instants, self.inst_perm, self.inst_cuts[k], self.inst_cuts[k + 1]))


def _rows(table: np.ndarray, perm: np.ndarray | None, a: int, b: int) -> np.ndarray:
    return table[a:b] if perm is None else table[perm[a:b]]


def lane_chunks(spans: np.ndarray, instants: np.ndarray, chunk_spans: int | None = None) -> LaneChunks:
    chunk_spans = chunk_spans or CHUNK_SPANS
    span_lane, span_perm = _lane_order(spans)
    inst_lane, inst_perm = _lane_order(instants)
    # cut at the first lane of every chunk_spans-th span (a lane larger than that is a chunk of its own),
    # and lanes holding only instants go with the span lanes around them
    cut_lanes = [np.zeros(0, np.int64)]
    if span_lane.size:
        at = np.arange(chunk_spans, span_lane.size, chunk_spans)
        cut_lanes.append(np.asarray(span_lane[at], np.int64))
    if inst_lane.size and not span_lane.size:
        at = np.arange(chunk_spans, inst_lane.size, chunk_spans)
        cut_lanes.append(np.asarray(inst_lane[at], np.int64))
    cuts = np.unique(np.concatenate(cut_lanes))
    span_cuts = np.concatenate([[0], positions_in_sorted(span_lane, cuts), [span_lane.size]]).astype(np.int64)
    inst_cuts = np.concatenate([[0], positions_in_sorted(inst_lane, cuts), [inst_lane.size]]).astype(np.int64)
    return LaneChunks(spans, instants, span_perm, inst_perm, span_cuts, inst_cuts)


def _lane_order(table: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The table's lane column in lane order, and the stable permutation that sorts it (None if sorted)."""
    lane = table["lane"]
    if nondecreasing(lane):
        return lane, None
    perm = np.argsort(lane, kind="stable")
    return lane[perm], perm


@dataclasses.dataclass
class OrderedChunk:
    """One run of whole lanes, ordered: its span rows in (lane, begin) order, the event order and the
    sub-track of each span."""

    cols: SpanColumns
    instants: np.ndarray
    order: EventOrder
    sub: np.ndarray


def ordered_chunks(chunks: LaneChunks, origin: int, subs: dict | None = None):
    """Yield an OrderedChunk per chunk. subs: {chunk: sub-track per span} from an earlier pass (chunks
    missing from it have every span on sub-track 0), so that a second pass skips the sub-track work."""
    for k in range(len(chunks)):
        spans, instants = chunks[k]
        cols = span_columns(spans, instants, origin)
        order = event_order(cols, instants, origin)
        if subs is None:
            sub = subtracks(cols, order)
        else:
            sub = subs.get(k)
            if sub is None:
                sub = np.zeros(cols.lane.size, np.int64)
        yield OrderedChunk(cols, instants, order, sub)


@dataclasses.dataclass
class LaneTable:
    """Per lane that holds a span or an instant (sorted): its block, group and sub-track count, with the
    chunks' sub-track assignments kept only where a chunk moved a span (the usual trace moves none)."""

    lanes: np.ndarray
    block: np.ndarray
    group: np.ndarray
    nsub: np.ndarray
    subs: dict  # chunk -> sub per span of the chunk (rows in (lane, begin) order); only chunks with moves
    span_events: np.ndarray  # distinct event ids of the spans
    span_lanes: np.ndarray  # lanes that hold a span (sorted)
    tracks: np.ndarray  # distinct (lane << TRACK_BITS) | sub-track in use, by a span or (sub 0) an instant


def lane_facts(chunks: LaneChunks) -> LaneTable:
    """The lane table of a stream that keeps every span on its lane's first track: the per-lane facts of
    the track tree, nothing ordered. A one-pass writer streams with it and checks each run's sub-tracks
    as it goes (perfetto.write_perfetto); lane_table adds the moves a first pass finds."""
    parts = [_chunk_facts(*chunks[k]) for k in range(len(chunks))]
    cat = lambda i: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, np.int64)  # noqa: E731
    lanes, events = cat(0), cat(5)
    return LaneTable(lanes, cat(1), cat(2), np.ones(lanes.size, np.int64), {}, np.unique(events).astype(np.int64),
                     cat(3), lanes << TRACK_BITS)


def _chunk_facts(spans: np.ndarray, inst: np.ndarray) -> tuple:
    """(lanes, block, group, span lanes, instant lanes, span event ids) of one run of whole lanes (rows in
    lane order): a lane's block and group are those of its first span row, else of its first instant."""
    span_lane = spans["lane"]
    inst_lane = inst["lane"].astype(np.int64)
    first_rows = np.flatnonzero(changes(span_lane))
    sl, il = span_lane[first_rows].astype(np.int64), present_sorted(inst_lane)
    lanes = union(sl, il)
    if not il.size:  # no instants (the usual run): each lane's first span row is known already
        block, group = (spans[field][first_rows].astype(np.int64) for field in ("block", "group"))
        return lanes, block, group, sl, il, present(spans["event"])
    any_sp, any_in = some_row(span_lane, lanes), some_row(inst_lane, lanes)
    from_sp = any_sp >= 0
    b = np.empty(lanes.size, np.int64)
    g = np.empty(lanes.size, np.int64)
    b[from_sp] = spans["block"][any_sp[from_sp]]
    g[from_sp] = spans["group"][any_sp[from_sp]]
    b[~from_sp] = inst["block"][any_in[~from_sp]]
    g[~from_sp] = inst["group"][any_in[~from_sp]]
    return lanes, b, g, sl, il, present(spans["event"])


def lane_table(chunks: LaneChunks, origin: int) -> LaneTable:
    """The first pass of a two-pass writer: lane_facts plus the sub-track moves of every chunk (kept only
    for the chunks that move a span: the usual trace moves none)."""
    table = lane_facts(chunks)
    for k, oc in enumerate(ordered_chunks(chunks, origin)):
        if oc.sub.any():
            add_moves(table, k, oc)
    return table


def add_moves(table: LaneTable, k: int, oc: OrderedChunk) -> None:
    """Record chunk k's sub-track moves in the table: its subs, the sub-track counts of its lanes and the
    (lane, sub-track) tracks in use."""
    cols, inst = oc.cols, oc.instants
    table.subs[k] = oc.sub
    moved = np.flatnonzero(oc.sub)
    np.maximum.at(table.nsub, index_of(table.lanes, cols.lane[moved]), oc.sub[moved] + 1)
    il = present_sorted(inst["lane"].astype(np.int64))
    tracks = np.unique(np.concatenate([(cols.lane << TRACK_BITS) | oc.sub, il << TRACK_BITS]))
    lo, hi = np.searchsorted(table.tracks, [tracks[0] & ~((1 << TRACK_BITS) - 1), tracks[-1] + 1])
    table.tracks = np.concatenate([table.tracks[:lo], tracks, table.tracks[hi:]])
