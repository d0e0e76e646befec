"""Hand-built v1 buffers for tests: write records lane by lane exactly as a device would."""

from __future__ import annotations

import numpy as np

from host_decode.core import wire

B, E, INST, F = (int(t) for t in wire.EventType)


class BufferBuilder:
    def __init__(self, num_blocks: int, num_groups: int, records_per_lane: int, write_stride: int | None = None):
        self.num_blocks, self.num_groups = num_blocks, num_groups
        self.num_lanes = num_blocks * num_groups
        self.write_stride = write_stride or self.num_lanes
        self.records_per_lane = records_per_lane
        self.buf = np.zeros(wire.buffer_slots(self.write_stride, records_per_lane), np.uint64)
        self.buf[0] = wire.pack_header(num_blocks, num_groups)
        self.cursor = np.zeros(self.num_lanes, np.int64)

    def put(self, lane: int, timer: int, event: int, etype: int, k: int | None = None, tag_lane: int | None = None):
        """Write the next record of `lane` (or record k); tag_lane forges the tag's lane field."""
        if k is None:
            k = int(self.cursor[lane])
            self.cursor[lane] += 1
        tag = wire.make_tag(lane if tag_lane is None else tag_lane, event, etype)
        self.buf[wire.slot_index(lane, k, self.write_stride)] = wire.pack_record(timer & 0xFFFF_FFFF, tag)
        return self

    def anchor(self, lane: int, t64: int):
        self.put(lane, t64 & 0xFFFF_FFFF, wire.ANCHOR_LO_EVENT_ID, INST)
        self.put(lane, t64 >> 32, wire.ANCHOR_HI_EVENT_ID, INST)
        return self
