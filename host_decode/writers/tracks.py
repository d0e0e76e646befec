"""The Perfetto track tree: one TrackDescriptor a track, parents before children, ``child_ordering =
EXPLICIT`` and ``sibling_order_rank`` by index::

    launch (kernel on device)          root; its description gives the time origin
      lanes in <region>                counter per region: lanes inside it over time (optional)
      <counter series>                 CounterSeries with block -1 (e.g. pipeline stages full)
      <part>                           a merged session / multi-rank trace: one per launch / rank
        SM 12                          only when the trace knows SMs
          block 37                     its per-lane constants (block, SM) are here once, not on slices
            <slice set track>          an overlay's slices (e.g. "TMA in flight: ab"); tracks of one name
                                       share a sibling_merge_key (one row), first in the block
            <counter series>           CounterSeries of the block (e.g. "ab stages full")
            <group name>               group track of one lane; overlapping regions of different ids go
            <group name>               to sibling tracks with the same sibling_merge_key (one row)

Track uuids are allocated in that order, so a lane's group track uuid is known from the counts of the
tracks before it (``TrackTree.lane_uuid``). The tree is held as columns (parent, rank, shape of the shared
fields) and its descriptors encoded a column at a time, byte for byte what one message per track gave
(tests/golden/test_golden_outputs.py). Guarded by tests/unit/host_decode/writers/test_perfetto.py (the replay checks the
tree is whole: parents exist, explicit ordering, ranks; test_mixed_known_and_unknown_sm, test_sessions_*).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from host_decode.core.model import Trace
from host_decode.writers.ids import index_of
from host_decode.writers.lanes import LaneTable
from host_decode.writers.protobuf import f_bytes, f_varint, put_varints_at, tag, varint_widths

SEQUENCE_ID = 7  # any constant > 1 (1 is the tracing service's own sequence); one byte as a varint
CHILD_ORDERING_EXPLICIT = 3
SIBLING_MERGE_BY_KEY = 3
MAX_SM_RANK = 1 << 10  # "SM unknown" sorts after every real SM id (10-bit)


@dataclasses.dataclass
class TrackTree:
    """Columns of the tracks, uuid = index + 1, parents before children; the fields many tracks share
    (name, description, counter unit, explicit child ordering, merge key) are a `shape`, encoded once."""

    parent: np.ndarray  # per track: parent uuid, 0 = none
    rank: np.ndarray  # sibling_order_rank
    has_rank: np.ndarray  # bool (the root has none)
    shape: np.ndarray  # index into shapes
    shapes: list  # (name, description or None, counter unit or None, explicit children, merge key or None)
    lanes: np.ndarray  # lanes with a group track (sorted)
    first_uuid: np.ndarray  # per lane: its group track (sub-track k is first_uuid + k)
    counter_uuid: dict  # event id -> uuid of its lanes-inside counter track
    series_uuid: list  # per CounterSeries: its counter track
    overlap_tracks: int
    root_name: str
    slice_uuid: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))  # per slice track

    @property
    def num_tracks(self) -> int:
        return self.parent.size

    @property
    def uuid(self) -> np.ndarray:
        return np.arange(1, self.num_tracks + 1)

    @property
    def name(self) -> list:
        return [self.shapes[k][0] for k in self.shape.tolist()]

    def lane_uuid(self, lane: np.ndarray) -> np.ndarray:
        """The group track uuid of each lane (every lane must have one)."""
        if self._uuid_by_lane is not None:
            return self._uuid_by_lane[lane]
        return self.first_uuid[index_of(self.lanes, lane.astype(np.int64, copy=False))]

    @functools.cached_property
    def _uuid_by_lane(self) -> np.ndarray | None:
        """first_uuid by lane id, built once for the writer's many look-ups (None: lane ids too sparse)."""
        if not self.lanes.size or int(self.lanes[-1]) > 8 * self.lanes.size + (1 << 16):
            return None
        lut = np.zeros(int(self.lanes[-1]) + 1, np.int64)
        lut[self.lanes] = self.first_uuid
        return lut

    def descriptor_bytes(self, origin: int, absolute: bool) -> bytes:
        """One TracePacket a track: (sequence id, TrackDescriptor(uuid, parent, rank, shared fields)),
        minimal varints, built a column at a time."""
        clock = "absolute %globaltimer" if absolute else "device timer (low 32 bits unwrapped)"
        desc = f"ikp_cute launch timeline; t = 0 is {origin} ns on the {clock}"
        name, _, unit, explicit, key = self.shapes[self.shape[0]]
        tails = [_shared_fields(*shape) for shape in self.shapes] + [_shared_fields(name, desc, unit, explicit, key)]
        shape = self.shape.copy()
        shape[0] = len(tails) - 1  # the root, with the origin in its description
        tail_len = np.array([len(t) for t in tails], np.int64)
        seq_and_tag = f_varint(10, SEQUENCE_ID) + tag(60, 2)
        uuid = self.uuid
        has_parent = self.parent != 0
        wt = tail_len[shape]
        wu, wp, wr = varint_widths(uuid), varint_widths(self.parent), varint_widths(self.rank)
        body = 1 + wu + has_parent * (1 + wp) + self.has_rank * (1 + wr) + wt  # TrackDescriptor
        w_body = varint_widths(body)
        packet_body = len(seq_and_tag) + w_body + body
        w_packet = varint_widths(packet_body)
        size = 1 + w_packet + packet_body
        out = np.zeros(int(size.sum()), np.uint8)
        at = np.cumsum(size) - size
        out[at] = 0x0A  # Trace.packet
        at += 1
        at = put_varints_at(out, at, packet_body, w_packet)
        for b in seq_and_tag:
            out[at] = b
            at += 1
        at = put_varints_at(out, at, body, w_body)
        out[at] = tag(1, 0)[0]
        at = put_varints_at(out, at + 1, uuid, wu)
        for flag, field, values, widths in ((has_parent, 5, self.parent, wp), (self.has_rank, 12, self.rank, wr)):
            rows = np.flatnonzero(flag)
            out[at[rows]] = tag(field, 0)[0]
            at[rows] = put_varints_at(out, at[rows] + 1, values[rows], widths[rows])
        blob = np.frombuffer(b"".join(tails), np.uint8)
        first = np.cumsum(tail_len) - tail_len
        total = int(wt.sum())
        within = np.arange(total) - np.repeat(np.cumsum(wt) - wt, wt)
        out[np.repeat(at, wt) + within] = blob[np.repeat(first[shape], wt) + within]
        return out.tobytes()


def _shared_fields(name: str, about: str | None, unit: str | None, explicit: bool, merge_key: str | None) -> bytes:
    td = f_bytes(2, name.encode())
    if about:
        td += f_bytes(14, about.encode())
    if unit is not None:
        td += f_bytes(8, f_bytes(6, unit.encode()))
    if explicit:
        td += f_varint(11, CHILD_ORDERING_EXPLICIT)
    if merge_key is not None:
        td += f_varint(15, SIBLING_MERGE_BY_KEY) + f_bytes(16, merge_key.encode())
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




SLICE_TRACK_RANK = -(1 << 24)  # slice set tracks come first in their block, before its counters and lanes


def build_track_tree(trace: Trace, table: LaneTable, *, counters: bool = True, series: tuple = (),
                     slice_tracks: tuple = ()) -> TrackTree:
    """The track tree of the lanes in `table` (from lanes.lane_table); `counters`: a lanes-inside counter
    track per region id of the spans; `series`: CounterSeries, each a counter track under the root
    (block -1) or under its block's track; `slice_tracks`: (block, name) of each track of the overlays' slice
    sets, in order, under its block's track."""
    names = trace.names
    parent, rank, shape = [], [], []
    shape_index: dict = {}

    def shape_of(nm: str, about: str | None = None, counter_unit: str | None = None, parent_of_children=False,
                 key: str | None = None) -> int:
        return shape_index.setdefault((nm, about, counter_unit, parent_of_children, key), len(shape_index))

    def add(p: int, nm: str, rk: int | None, *, key: str | None = None, counter_unit: str | None = None,
            parent_of_children=False, about: str | None = None) -> int:
        parent.append(p)
        rank.append(rk)
        shape.append(shape_of(nm, about, counter_unit, parent_of_children, key))
        return len(parent)

    rname = root_name(trace)
    root = add(0, rname, None, parent_of_children=True)
    counter_uuid = {}
    if counters:
        for k, e in enumerate(table.span_events.tolist()):
            counter_uuid[int(e)] = add(root, f"lanes in {names.event(e)}", k, counter_unit="lanes",
                                       about=hardware_summary(trace, int(e)))
    base_rank = len(counter_uuid)
    series_uuid: list = [None] * len(series)
    for i, s in enumerate(series):  # launch-level series: next to the lanes-inside counters
        if s.block < 0:
            series_uuid[i] = add(root, s.name, base_rank + i, counter_unit=s.unit)
    base_rank += sum(1 for s in series if s.block < 0)

    lanes, lane_block, lane_group, nsub = table.lanes, table.block, table.group, table.nsub
    lane_sm = trace.sm_of_lane(lanes)
    series_blocks = np.array([s.block for s in series if s.block >= 0] + [b for b, _ in slice_tracks], np.int64)
    blocks, block_first = np.unique(np.concatenate([lane_block, series_blocks]), return_index=True)
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
    # the ranks of a distributed kernel: each rank's blocks keep their own ids under it ("rank 1 / block 37", as
    # `ikp waits` names them); the launches of a session keep the merged trace's block ids
    by_rank = len({pt.get("rank") for pt in parts}) > 1
    local = blocks - (offsets[block_part] if by_rank else 0)
    for i, (b, p) in enumerate(zip(blocks.tolist(), block_parent.tolist())):
        sm = int(block_sm[i])
        label = f"block {int(local[i])}" + (f" (SM {sm})" if sm >= 0 else "")
        block_uuid[i] = add(p, label, base_rank + b if p in part_uuid else b, parent_of_children=True)

    # group tracks and their overlap siblings (nsub per lane, in lane order); rank keeps siblings of
    # one group adjacent
    max_sub = int(nsub.max()) if nsub.size else 1
    first = len(parent) + 1 + np.cumsum(nsub) - nsub
    lane_of_track = np.repeat(np.arange(lanes.size), nsub)
    sub_of_track = np.arange(lane_of_track.size) - np.repeat(first - first[:1], nsub) if lanes.size else lane_of_track
    groups, group_row = np.unique(lane_group, return_inverse=True)
    group_shape = np.array([shape_of(names.group(g), key=f"group {g}") for g in groups.tolist()], np.int64)
    parent.extend(block_uuid[np.searchsorted(blocks, lane_block)][lane_of_track].tolist())
    rank.extend((lane_group[lane_of_track] * max_sub + sub_of_track).tolist())
    shape.extend(group_shape[group_row.reshape(-1)][lane_of_track].tolist())
    for i, s in enumerate(series):  # block-level series: last, under their block (rank before its groups)
        if s.block >= 0:
            series_uuid[i] = add(int(block_uuid[np.searchsorted(blocks, s.block)]), s.name, -1 - i, counter_unit=s.unit)
    slice_uuid = np.array([add(int(block_uuid[np.searchsorted(blocks, b)]), name, SLICE_TRACK_RANK + i,
                               key=f"slices {name}") for i, (b, name) in enumerate(slice_tracks)], np.int64)
    return TrackTree(
        parent=np.array(parent, np.int64),
        rank=np.array([0 if r is None else r for r in rank], np.int64),
        has_rank=np.array([r is not None for r in rank], bool),
        shape=np.array(shape, np.int64),
        shapes=list(shape_index),
        lanes=lanes,
        first_uuid=first.astype(np.int64),
        counter_uuid=counter_uuid,
        series_uuid=series_uuid,
        overlap_tracks=int((nsub - 1).sum()),
        root_name=rname,
        slice_uuid=slice_uuid,
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


