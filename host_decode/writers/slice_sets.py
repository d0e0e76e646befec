"""Slice sets: slices an overlay draws on tracks of their own under a block's track (e.g. "TMA in flight: ab"),
apart from the lanes' regions: the type an overlay hands the writer, the stacking of overlapping slices onto
sibling tracks, and their Perfetto packets.

* A SliceSet names its tracks (block, name); tracks of one block and name are siblings with one merge key, so
  Perfetto shows them as one row where overlapping slices stack in depth (how many are in flight at once).
* Its slices (SLICE_DTYPE: track, name, start_ns, end_ns) last > 0 ns and are disjoint on each track (they
  may touch);
  `stack` assigns overlapping intervals to levels (one track each) so that they are.
* Each slice is a BEGIN (interned name, debug annotations: one non-negative integer per arg name) and an END
  packet, in time order with an END before a BEGIN at one time, so that touching slices do not nest.

Invariants, and the tests that guard them (tests/unit/host_decode/writers/test_slice_sets.py): a set whose
slices overlap on a track, or name a track, name or block that is not there, is refused before anything is
written (::test_bad_slice_sets_are_refused); `stack` gives levels on which no two intervals of a group overlap
(::test_stack_levels_never_overlap); the packets replay as the slices given
(::test_slice_set_replays, tests/unit/host_decode/writers/test_async_overlay.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.writers.protobuf import Layout, packet_layout, scatter_rows, uwidth

SLICE_DTYPE = np.dtype([("track", np.int32), ("name", np.int32), ("start_ns", np.int64), ("end_ns", np.int64)])
TYPE_SLICE_BEGIN, TYPE_SLICE_END = 1, 2  # TrackEvent.Type
SEQ_NEEDS_INCREMENTAL_STATE = 2


@dataclasses.dataclass(frozen=True)
class SliceSet:
    """Slices on tracks of their own: `tracks` (block, name) per track; `slices` SLICE_DTYPE rows (track and
    name index `tracks` and `names`); `args` (slices x arg_names) non-negative integers shown with each slice."""

    tracks: tuple
    names: tuple
    slices: np.ndarray
    arg_names: tuple = ()
    args: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), np.int64))

    def check(self, num_blocks: int) -> None:
        """ValueError naming what does not fit: indices, blocks, overlapping slices on a track, arguments."""
        s = self.slices
        if not isinstance(s, np.ndarray) or s.dtype != SLICE_DTYPE:
            raise ValueError(f"slice set: slices must be a SLICE_DTYPE array, got {getattr(s, 'dtype', type(s))}")
        for block, name in self.tracks:
            if not 0 <= int(block) < num_blocks:
                raise ValueError(f"slice set: track {name!r} is under block {block}, not a block of the trace")
        if s.size:
            for field, n in (("track", len(self.tracks)), ("name", len(self.names))):
                if int(s[field].min()) < 0 or int(s[field].max()) >= n:
                    raise ValueError(f"slice set: {field} must index the {n} {field}s given")
            if (s["end_ns"] <= s["start_ns"]).any():  # a zero-length slice's END would sort before its BEGIN
                raise ValueError("slice set: a slice ends before it starts, or where it starts")
            o = np.lexsort((s["start_ns"], s["track"]))
            track, start, end = s["track"][o], s["start_ns"][o], s["end_ns"][o]
            same = track[1:] == track[:-1]
            if (same & (start[1:] < end[:-1])).any():
                i = int(np.flatnonzero(same & (start[1:] < end[:-1]))[0])
                raise ValueError(f"slice set: slices overlap on track {self.tracks[int(track[i])]} (stack them)")
        if np.shape(self.args) != (s.size, len(self.arg_names)) or (np.size(self.args) and self.args.min() < 0):
            raise ValueError(f"slice set: args must be {s.size} x {len(self.arg_names)} non-negative integers")


def stack(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A level per interval such that intervals of one group and level never overlap (they may touch): each
    pass keeps, per group, every interval that starts after all earlier ones of the pass (by start) ended; the
    rest go to the next level. A pass per level, whole arrays each."""
    level = np.full(group.size, -1, np.int64)
    todo = np.lexsort((end, start, group))
    k = 0
    while todo.size:
        g, s, e = group[todo], start[todo], end[todo]
        dense = np.cumsum(np.r_[True, g[1:] != g[:-1]]) - 1
        lo = int(min(s.min(), e.min()))
        big = int(max(s.max(), e.max())) - lo + 1
        # the latest end of the earlier intervals of the group: a running max of (group, end), one row behind;
        # a value from an earlier group is below this group's offset
        key = dense * big + (e - lo)
        seen = np.r_[-1, np.maximum.accumulate(key)[:-1]] - dense * big
        keep = (seen < 0) | (s - lo >= seen)
        level[todo[keep]] = k
        todo, k = todo[~keep], k + 1
    return level


def encode_slice_set(ss: SliceSet, track_uuid: np.ndarray, name_iid: np.ndarray, arg_iid: np.ndarray,
                     origin: int, sequence_id: int) -> np.ndarray:
    """The set's BEGIN and END packets, in time order (an END before a BEGIN at one time)."""
    s = ss.slices
    uuid = track_uuid[s["track"]]
    start, end = s["start_ns"] - origin, s["end_ns"] - origin
    iid = name_iid[s["name"]]
    tw = uwidth(np.array([0, int(end.max()) if end.size else 0]))
    uw = uwidth(uuid)
    te = Layout().varint(9, TYPE_SLICE_BEGIN, 1).varint(11, uuid, uw).varint(10, iid, uwidth(iid))
    for j in range(len(ss.arg_names)):
        col = np.ascontiguousarray(ss.args[:, j], np.int64)
        te.message(4, Layout().varint(1, int(arg_iid[j]), uwidth(arg_iid[j:j + 1])).varint(4, col, uwidth(col)))
    begin = packet_layout(Layout().varint(8, start, tw).varint(10, sequence_id, 1).message(11, te)
                          .varint(13, SEQ_NEEDS_INCREMENTAL_STATE, 1))
    end_te = Layout().varint(9, TYPE_SLICE_END, 1).varint(11, uuid, uw)
    finish = packet_layout(Layout().varint(8, end, tw).varint(10, sequence_id, 1).message(11, end_te))
    n = s.size
    ts = np.r_[end, start]
    is_begin = np.r_[np.zeros(n, np.int8), np.ones(n, np.int8)]
    order = np.lexsort((is_begin, ts))
    width = np.where(is_begin[order] == 1, begin.width, finish.width)
    offsets = np.empty(2 * n, np.int64)
    offsets[order] = np.cumsum(width) - width
    out = np.empty(n * (begin.width + finish.width), np.uint8)
    scatter_rows(out, offsets[:n], finish.fill(n), finish.width)
    scatter_rows(out, offsets[n:], begin.fill(n), begin.width)
    return out
