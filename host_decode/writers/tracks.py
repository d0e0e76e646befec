"""The Perfetto track tree: one TrackDescriptor a track, parents before children, ``child_ordering =
EXPLICIT`` and ``sibling_order_rank`` by index::

    launch (kernel on device)          root; its description gives the time origin
      lanes in <region>                counter per region: lanes inside it over time (optional)
      <counter series>                 CounterSeries with block -1 (e.g. pipeline stages full)
      <part>                           a merged session / multi-rank trace: one per launch / rank
        SM 12                          only when the trace knows SMs
          block 37                     its per-lane constants (block, SM) are here once, not on slices
            <group name>               group track of one lane; overlapping regions of different ids go
            <group name>               to sibling tracks with the same sibling_merge_key (one row)

Track uuids are allocated in that order, so a lane's group track uuid is known from the counts of the
tracks before it (``TrackTree.lane_uuid``). Guarded by tests/test_perfetto.py (the replay checks the
tree is whole: parents exist, explicit ordering, ranks; test_mixed_known_and_unknown_sm, test_sessions_*).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.core.model import Trace
from host_decode.writers.order import LaneTable, index_of
from host_decode.writers.protobuf import f_bytes, f_varint, tag, varint

SEQUENCE_ID = 7  # any constant > 1 (1 is the tracing service's own sequence); one byte as a varint
CHILD_ORDERING_EXPLICIT = 3
SIBLING_MERGE_BY_KEY = 3
MAX_SM_RANK = 1 << 10  # "SM unknown" sorts after every real SM id (10-bit)


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
    lanes: np.ndarray  # lanes with a group track (sorted)
    first_uuid: np.ndarray  # per lane: its group track (sub-track k is first_uuid + k)
    counter_uuid: dict  # event id -> uuid of its lanes-inside counter track
    series_uuid: list  # per CounterSeries: its counter track
    counter_unit: list  # per track: unit name of a counter track (None otherwise)
    overlap_tracks: int
    root_name: str

    @property
    def num_tracks(self) -> int:
        return len(self.uuid)

    def lane_uuid(self, lane: np.ndarray) -> np.ndarray:
        """The group track uuid of each lane (every lane must have one)."""
        return self.first_uuid[index_of(self.lanes, lane.astype(np.int64, copy=False))]

    def descriptor_bytes(self, origin: int, absolute: bool) -> bytes:
        clock = "absolute %globaltimer" if absolute else "device timer (low 32 bits unwrapped)"
        desc = f"ikp_cute launch timeline; t = 0 is {origin} ns on the {clock}"
        seq_and_tag = f_varint(10, SEQUENCE_ID) + tag(60, 2)
        uuid_tag, parent_tag, rank_tag = tag(1, 0), tag(5, 0), tag(12, 0)
        tails: dict = {}  # the fields many tracks share (name, merge key, ...), encoded once
        out = []
        for i in range(len(self.uuid)):
            about = desc if i == 0 else self.description[i]
            shape = (self.name[i], about, self.counter_unit[i], self.explicit_children[i], self.merge_key[i])
            tail = tails.get(shape)
            if tail is None:
                tail = tails[shape] = self._shared_fields(*shape)
            td = [uuid_tag, varint(self.uuid[i])]
            if self.parent[i]:
                td += (parent_tag, varint(self.parent[i]))
            if self.rank[i] is not None:
                td += (rank_tag, varint(self.rank[i]))
            td.append(tail)
            body = b"".join(td)
            body = seq_and_tag + varint(len(body)) + body
            out += (b"\x0a", varint(len(body)), body)
        return b"".join(out)

    @staticmethod
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




def build_track_tree(trace: Trace, table: LaneTable, *, counters: bool = True, series: tuple = ()) -> TrackTree:
    """The track tree of the lanes in `table` (from order.lane_table); `counters`: a lanes-inside counter
    track per region id of the spans; `series`: CounterSeries, each a counter track under the root
    (block -1) or under its block's track."""
    names = trace.names
    uuid, parent, name, rank, merge_key, unit, explicit, description = [], [], [], [], [], [], [], []

    def add(p: int, nm: str, rk: int | None, *, key: str | None = None, counter_unit: str | None = None,
            parent_of_children=False, about: str | None = None) -> int:
        u = len(uuid) + 1
        uuid.append(u)
        parent.append(p)
        name.append(nm)
        rank.append(rk)
        merge_key.append(key)
        description.append(about)
        unit.append(counter_unit)
        explicit.append(parent_of_children)
        return u

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
    series_blocks = np.array([s.block for s in series if s.block >= 0], np.int64)
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
    for i, s in enumerate(series):  # block-level series: last, under their block (rank before its groups)
        if s.block >= 0:
            series_uuid[i] = add(int(block_uuid[np.searchsorted(blocks, s.block)]), s.name, -1 - i, counter_unit=s.unit)
    return TrackTree(
        uuid=uuid,
        parent=parent,
        name=name,
        rank=rank,
        merge_key=merge_key,
        description=description,
        counter=[u is not None for u in unit],
        explicit_children=explicit,
        lanes=lanes,
        first_uuid=np.array(first, np.int64),
        counter_uuid=counter_uuid,
        series_uuid=series_uuid,
        counter_unit=unit,
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


