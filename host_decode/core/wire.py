"""The v1 wire format: the one module that defines it (device code, CUDA C++ header and decoder all follow it).

Layout (shared with TVM TIRx, flashinfer's first profiler and warpscope; docs/wire_format.md):

    buf[0]      header = (num_groups << 32) | num_blocks
    record      = (timer_lo32 << 32) | tag32
    tag32       = (lane << 12) | (event_id << 2) | event_type      lane = block_linear * num_groups + group
    slot of the k-th record of lane `lane` = 1 + lane + k * write_stride   (write_stride >= num_lanes)
    empty slot  = 0

Extensions of ours (all of them valid v1 records, so peers' v1 decoders still read the buffer):

* FINALIZE records carry the SM id in their event id (peers ignore a finalize's event id).
* Each lane opens with two INSTANT records read from one 64-bit ``%globaltimer`` value:
  ``ANCHOR_LO`` is an ordinary instant (its timer field is the low half, as for every record) and
  ``ANCHOR_HI`` carries the high 32 bits in its timer field. Together they make the lane's timeline
  absolute (64-bit ns), which host and CUPTI clocks can be aligned to.
* A lane whose capacity ran out writes, just before its finalize, one ``DROPPED`` instant whose timer
  field is the number of records the device dropped for that lane. The last two slots of every lane
  are kept for that record and the finalize, so neither is ever dropped.
* *Payload* instants carry 32 bits of data in their timer field and belong to the record of their lane
  just before them (in slot order): ``FLAG_ADDR`` (a flag's address >> 2, low 32 bits) and
  ``FLAG_VALUE`` (a value), written after a flag signal's INSTANT or a flag wait's END
  (docs/flags.md, "Records"). They carry no time.

These five event ids are reserved for INSTANT records only; BEGIN/END records may use any id 0..1023
(buffers of peers decode unchanged), but ids handed out by ikp_cute stop at ``MAX_USER_EVENT_ID``.

Invariants guarded by tests/test_wire.py (packing round trips, limits, slot arithmetic).
"""

from __future__ import annotations

import enum
import sys

import numpy as np

EVENT_TYPE_BITS = 2
EVENT_ID_BITS = 10
LANE_BITS = 20
EVENT_ID_SHIFT = EVENT_TYPE_BITS
LANE_SHIFT = EVENT_TYPE_BITS + EVENT_ID_BITS  # 12

MAX_EVENT_ID = (1 << EVENT_ID_BITS) - 1  # 1023
MAX_LANES = 1 << LANE_BITS  # lanes 0 .. 1_048_575

ANCHOR_HI_EVENT_ID = MAX_EVENT_ID  # 1023: instant whose timer field is %globaltimer >> 32
ANCHOR_LO_EVENT_ID = MAX_EVENT_ID - 1  # 1022: instant at the same read, low half
DROPPED_EVENT_ID = MAX_EVENT_ID - 2  # 1021: instant whose timer field counts dropped records
FLAG_ADDR_EVENT_ID = MAX_EVENT_ID - 3  # 1020: payload, a flag's address >> 2 (low 32 bits)
FLAG_VALUE_EVENT_ID = MAX_EVENT_ID - 4  # 1019: payload, a value of the flag event before it
MAX_USER_EVENT_ID = MAX_EVENT_ID - 5  # 1018
PAYLOAD_IDS = (FLAG_VALUE_EVENT_ID, FLAG_ADDR_EVENT_ID)  # instants of data that belong to the record before them
RESERVED_INSTANT_IDS = (FLAG_VALUE_EVENT_ID, FLAG_ADDR_EVENT_ID, DROPPED_EVENT_ID, ANCHOR_LO_EVENT_ID,
                        ANCHOR_HI_EVENT_ID)
FLAG_ADDR_SHIFT = 2  # FLAG_ADDR holds (address >> 2) & 0xFFFFFFFF: 4-byte flags in a 16 GiB window

ANCHOR_RECORDS = 2  # slots 0 and 1 of every lane written by ikp_cute / ikp.cuh
TRAILER_RECORDS = 2  # DROPPED (only if needed) + FINALIZE, always room for both

TIMER_STEP_NS = 32  # %globaltimer resolution measured on H100/H200 (docs/gpu.md)

# How the device reserves a lane's slots (a capture sidecar's `mode`, ikp_cute.spec.ProfileSpec.mode). The
# cursor modes write a lane's records in time order; atomic and static reserve slots ahead of time, so a
# lane's slots are not in time order and the decoder takes signed steps between them (core/columns.py).
RECORDING_MODES = ("cursor", "deferred", "smem", "lean", "atomic", "static")
OUT_OF_ORDER_MODES = ("atomic", "static")


class EventType(enum.IntEnum):
    BEGIN = 0
    END = 1
    INSTANT = 2
    FINALIZE = 3


# --- header ---------------------------------------------------------------------------------------


def pack_header(num_blocks: int, num_groups: int) -> int:
    check_geometry(num_blocks, num_groups)
    return (num_groups << 32) | num_blocks


def unpack_header(header: int) -> tuple[int, int]:
    """-> (num_blocks, num_groups)."""
    header = int(header) & 0xFFFF_FFFF_FFFF_FFFF
    return header & 0xFFFF_FFFF, header >> 32


def check_geometry(num_blocks: int, num_groups: int) -> None:
    if num_blocks < 1 or num_groups < 1:
        raise ValueError(f"num_blocks={num_blocks} and num_groups={num_groups} must both be >= 1")
    if num_blocks * num_groups > MAX_LANES:
        raise ValueError(
            f"num_blocks*num_groups = {num_blocks * num_groups} lanes exceeds the v1 limit of {MAX_LANES} "
            f"({LANE_BITS}-bit lane field)"
        )


# --- tags and records (scalar and vectorized: numpy ufuncs work on both) ---------------------------


def make_tag(lane, event_id, event_type):
    """tag32 = (lane << 12) | (event_id << 2) | event_type; works on ints and numpy arrays."""
    return (lane << LANE_SHIFT) | (event_id << EVENT_ID_SHIFT) | event_type


def pack_record(timer_lo32, tag32):
    return (timer_lo32 << 32) | tag32


def pack_records(timer_lo32: np.ndarray, lane: np.ndarray, event_id: np.ndarray, event_type: np.ndarray) -> np.ndarray:
    """Vectorized record packing -> uint64 array."""
    u = np.uint64
    tag = make_tag(lane.astype(u), event_id.astype(u), event_type.astype(u))
    return pack_record(timer_lo32.astype(u) & u(0xFFFF_FFFF), tag)


def unpack_records(records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """uint64 records -> (timer_lo32 uint32, lane int64, event_id int64, event_type int64)."""
    records = records.astype(np.uint64, copy=False)
    timer = (records >> np.uint64(32)).astype(np.uint32)
    tag = (records & np.uint64(0xFFFF_FFFF)).astype(np.int64)
    lane = tag >> LANE_SHIFT
    event_id = (tag >> EVENT_ID_SHIFT) & MAX_EVENT_ID
    event_type = tag & ((1 << EVENT_TYPE_BITS) - 1)
    return timer, lane, event_id, event_type


def split_records(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 records -> (timer_lo32, tag32) as uint32 arrays, without 64-bit arithmetic where possible."""
    records = np.ascontiguousarray(records, dtype=np.uint64)
    if sys.byteorder == "little":
        halves = records.view(np.uint32).reshape(-1, 2)  # [tag, timer] per record
        return np.ascontiguousarray(halves[:, 1]), np.ascontiguousarray(halves[:, 0])
    return (records >> np.uint64(32)).astype(np.uint32), (records & np.uint64(0xFFFF_FFFF)).astype(np.uint32)


def tag_fields(tag32: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint32 tags -> (lane uint32, event_id uint16, event_type uint8)."""
    lane = tag32 >> np.uint32(LANE_SHIFT)
    event = tag32.astype(np.uint16)  # the low half holds event id and type: shift and mask in 16 bits
    event >>= np.uint16(EVENT_ID_SHIFT)
    event &= np.uint16(MAX_EVENT_ID)
    etype = tag32.astype(np.uint8)
    etype &= np.uint8((1 << EVENT_TYPE_BITS) - 1)
    return lane, event, etype


# --- lane layout -----------------------------------------------------------------------------------


def slot_index(lane, k, write_stride):
    """Slot of the k-th record of `lane` (works on ints and numpy arrays)."""
    return 1 + lane + k * write_stride


def buffer_slots(write_stride: int, records_per_lane: int) -> int:
    """Total uint64 slots of a buffer (header included)."""
    return 1 + write_stride * records_per_lane


def user_capacity(records_per_lane: int) -> int:
    """Records per lane left for regions and instants once anchors and the trailer are reserved."""
    return records_per_lane - ANCHOR_RECORDS - TRAILER_RECORDS


def block_linear(bx, by, bz, grid_x, grid_y):
    """3-D grids flatten as TIRx does: x + y*gx + z*gx*gy."""
    return bx + by * grid_x + bz * grid_x * grid_y
