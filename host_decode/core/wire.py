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

The recording pool (the second half of this module) is a container of v1 records, not a new record
format: one device buffer per process whose lanes take their slots in units on demand (ikp_cute/pool.py
records into it, host_decode/load/pool.py reassembles one v1 buffer per kernel launch from it). Its
layout is defined here, after the v1 definitions, and nothing of the v1 layout above depends on it.

Invariants guarded by tests/unit/host_decode/core/test_wire.py (packing round trips, limits, slot arithmetic) and
tests/unit/host_decode/core/test_wire_pool.py (the pool's layout: offsets disjoint and inside the control
block, the unit header's fields round trip, the selection rule).
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


# --- the recording pool (ikp_cute/pool.py writes it, host_decode/load/pool.py reads it) ----------------
#
#   control block (POOL_CONTROL_BYTES(max_kernels) bytes, 64-bit words unless said)
#     [0, 128)      header line, written by the host at create (the device reads TOP):
#                   u64 POOL_MAGIC | u32 version | u32 unit_words | u32 units | u32 max_kernels
#                   | u32 control_bytes | u32 TOP (units the shared area may hand out: units minus the
#                   regions `last` selections took from its top)
#     [128, 256)    u64 NEXT: units requested from the shared area, failed requests included (device
#                   atomics; its own line: every request of every kernel lands here)
#     [512, +16 K)  per kernel k, 16 bytes at POOL_WINDOWS + 16 k: u32 START, STOP, EVERY, MODE (the launch
#                   selection; host-written; the device empties a window it has passed: START = STOP = 0)
#     [.., +256 K)  per kernel k, 256 bytes at POOL_COUNTERS(max_kernels) + 256 k, >= 512 bytes past every
#                   window word (ikp_cute/ring.py: why counters that atomics land on stay away from the
#                   words every launch loads):
#                   +0   u64 TICKS: launches of kernel k x 2**24 (every warp adds its part at its decision)
#                   +8   u32 LAST_FIRST, u32 LAST_HALF: the `last` region (first unit, units per half)
#                   +16  3 counter sets of 48 bytes: set 0 for the shared area (cumulative), sets 1 and 2 for
#                        the halves of the `last` region (reset by the launch before the one that fills it):
#                        u64 NEXT (halves only), u64 NOCHUNK_RECORDS, u64 STRAY_RECORDS, u64 NOCHUNK_LANES,
#                        u32 LOSS_MIN, u32 LOSS_MAX (the launch indices of lanes that lost records)
#   units          from byte control_bytes, `units` units of POOL_UNIT_WORDS words:
#     word 0       POOL_UNIT_MAGIC << 48 | kernel id << 32 | launch index (low 32 bits)
#     word 1       %globaltimer (64 bits) read when the lane took the unit, before its first record there
#     word 2       lane (20 bits) | (warps per block - 1) << 20 (5 bits) | SM id << 32 (16 bits) | seq << 48
#                  (16 bits: the unit's number in its lane, from 0, modulo 2**16)
#     word 3       records the lane lost once the pool ran out (written at the lane's end into its last
#                  unit; 0 otherwise)
#     words 4..    POOL_UNIT_RECORDS v1 records of the lane, in program order; unused slots are 0
#
# A lane is one warp: lane = block_linear * warps_per_block + warp, as in a pipeline capture's v1 buffer
# (its records carry that lane in their tags). A lane takes its first unit when its launch starts and the
# next one when fewer than two slots are left (a region's two records never straddle units; the slot left
# over stays 0). Units are requested in runs of 1, 2, 4, ... up to POOL_MAX_RUN contiguous units, one
# atomic add on NEXT per run; a lane's units therefore have increasing unit indices in seq order. A request
# the pool cannot meet is still added to NEXT, so NEXT x unit bytes is the unit area that would have held
# everything.

POOL_MAGIC = 0x314C4F4F50504B49  # b"IKPPOOL1", little-endian
POOL_VERSION = 1
POOL_UNIT_WORDS = 32  # 256 bytes: 4 header words + 28 records
POOL_UNIT_HEADER_WORDS = 4
POOL_UNIT_RECORDS = POOL_UNIT_WORDS - POOL_UNIT_HEADER_WORDS
POOL_UNIT_BYTES = 8 * POOL_UNIT_WORDS
POOL_UNIT_MAGIC = 0x1CB0  # top 16 bits of a written unit's word 0
POOL_MAX_RUN = 16  # units of the largest run a lane requests at once
POOL_MAX_KERNELS = 4096  # the kernel id field has 16 bits; the control block grows 272 bytes per kernel
POOL_DEFAULT_KERNELS = 512
POOL_MAX_WARPS = 32  # warps per block (the header's 5-bit field)

POOL_HEADER_WORDS32 = {"version": 2, "unit_words": 3, "units": 4, "max_kernels": 5, "control_bytes": 6, "top": 7}
POOL_NEXT = 128  # byte offset of the shared area's NEXT
POOL_WINDOWS = 512  # byte offset of kernel 0's window words
POOL_WINDOW_BYTES = 16
POOL_COUNTER_BYTES = 256
POOL_COUNTER_GAP = 512  # bytes between the last window word and the first counter
POOL_TICKS, POOL_LAST_FIRST, POOL_LAST_HALF, POOL_SETS = 0, 8, 12, 16  # offsets in a kernel's counters
POOL_SET_BYTES = 48  # a multiple of 16: the device resets a set with 16-byte stores
POOL_SET_NEXT, POOL_SET_NOCHUNK_RECORDS, POOL_SET_STRAY, POOL_SET_NOCHUNK_LANES = 0, 8, 16, 24
POOL_SET_LOSS_MIN, POOL_SET_LOSS_MAX = 32, 36
POOL_SHARED_SET, POOL_LAST_SETS = 0, (1, 2)

# The launch selection (window words): START, STOP, EVERY, MODE
POOL_WINDOW, POOL_LAST = 0, 1  # MODE: a window of launch indices, or every launch into the `last` region
POOL_OPEN_ENDED = 0xFFFFFFFF  # STOP of a window with no end
POOL_TICK_BITS = 24  # a launch adds 2**24 to its kernel's TICKS; the launch index is TICKS >> 24
POOL_MAX_WARPS_PER_LAUNCH = 1 << POOL_TICK_BITS  # every warp's part of a launch is >= 1 tick


def pool_windows_end(max_kernels: int) -> int:
    return POOL_WINDOWS + POOL_WINDOW_BYTES * max_kernels


def pool_counters(max_kernels: int) -> int:
    """Byte offset of kernel 0's counters: a 128-byte line, POOL_COUNTER_GAP bytes past the last window."""
    return -(-(pool_windows_end(max_kernels) + POOL_COUNTER_GAP) // 128) * 128


def pool_control_bytes(max_kernels: int) -> int:
    """Bytes of the control block (a multiple of the unit size, so units stay aligned)."""
    end = pool_counters(max_kernels) + POOL_COUNTER_BYTES * max_kernels
    return -(-end // POOL_UNIT_BYTES) * POOL_UNIT_BYTES


def pool_window(kernel: int) -> int:
    return POOL_WINDOWS + POOL_WINDOW_BYTES * kernel


def pool_counter(max_kernels: int, kernel: int, field: int = POOL_TICKS) -> int:
    return pool_counters(max_kernels) + POOL_COUNTER_BYTES * kernel + field


def pool_set(max_kernels: int, kernel: int, which: int, field: int = 0) -> int:
    """Byte offset of `field` in counter set `which` (POOL_SHARED_SET, or a half of the `last` region)."""
    return pool_counter(max_kernels, kernel, POOL_SETS + POOL_SET_BYTES * which + field)


def pool_units(size_bytes: int, max_kernels: int) -> int:
    """Units a pool of `size_bytes` holds after its control block."""
    return max(0, (int(size_bytes) - pool_control_bytes(max_kernels)) // POOL_UNIT_BYTES)


def check_pool_geometry(size_bytes: int, max_kernels: int) -> None:
    if not isinstance(max_kernels, int) or not 1 <= max_kernels <= POOL_MAX_KERNELS:
        raise ValueError(f"pool max_kernels={max_kernels!r}: expected an int in 1..{POOL_MAX_KERNELS}")
    if not isinstance(size_bytes, int) or size_bytes % 8:
        raise ValueError(f"pool size_bytes={size_bytes!r}: expected an int multiple of 8")
    if pool_units(size_bytes, max_kernels) < 1 or pool_units(size_bytes, max_kernels) >= 1 << 32:
        raise ValueError(
            f"pool size_bytes={size_bytes}: a pool holds its control block ({pool_control_bytes(max_kernels)} "
            f"bytes for {max_kernels} kernels) and 1 to 2**32 - 1 units of {POOL_UNIT_BYTES} bytes")


def pool_header_words(size_bytes: int, max_kernels: int) -> np.ndarray:
    """The header line's first 32 bytes as uint32 words (what create writes, what the reader checks)."""
    check_pool_geometry(size_bytes, max_kernels)
    words = np.zeros(8, np.uint32)
    words[:2] = np.array([POOL_MAGIC], np.uint64).view(np.uint32)
    units = pool_units(size_bytes, max_kernels)
    for name, value in (("version", POOL_VERSION), ("unit_words", POOL_UNIT_WORDS), ("units", units),
                        ("max_kernels", max_kernels), ("control_bytes", pool_control_bytes(max_kernels)),
                        ("top", units)):
        words[POOL_HEADER_WORDS32[name]] = value
    return words


def pack_unit_header(kernel, launch, time64, lane, warps_per_block, seq, sm, lost=0) -> np.ndarray:
    """The four header words of a unit (works on scalars and numpy arrays): uint64 (..., 4)."""
    u = np.uint64
    w0 = (u(POOL_UNIT_MAGIC) << u(48)) | (np.asarray(kernel, u) << u(32)) | (np.asarray(launch, u) & u(0xFFFFFFFF))
    w1 = np.asarray(time64, u)
    w2 = (np.asarray(lane, u) | ((np.asarray(warps_per_block, u) - u(1)) << u(20)) | (np.asarray(sm, u) << u(32))
          | (np.asarray(seq, u) << u(48)))
    w3 = np.asarray(lost, u)
    return np.stack(np.broadcast_arrays(w0, w1, w2, w3), axis=-1)


def unpack_unit_headers(headers: np.ndarray) -> dict[str, np.ndarray]:
    """uint64 (n, 4) unit headers -> columns: written (magic present), kernel, launch, time64, lane,
    warps_per_block, seq, sm, lost (int64 arrays)."""
    h = np.asarray(headers, np.uint64).reshape(-1, POOL_UNIT_HEADER_WORDS)
    w0, w2 = h[:, 0], h[:, 2]
    i = lambda x: x.astype(np.int64)  # noqa: E731
    return {
        "written": (w0 >> np.uint64(48)) == np.uint64(POOL_UNIT_MAGIC),
        "kernel": i((w0 >> np.uint64(32)) & np.uint64(0xFFFF)),
        "launch": i(w0 & np.uint64(0xFFFFFFFF)),
        "time64": h[:, 1].astype(np.uint64),
        "lane": i(w2 & np.uint64(MAX_LANES - 1)),
        "warps_per_block": i((w2 >> np.uint64(20)) & np.uint64(POOL_MAX_WARPS - 1)) + 1,
        "reserved": i((w2 >> np.uint64(25)) & np.uint64(0x7F)),
        "sm": i((w2 >> np.uint64(32)) & np.uint64(0xFFFF)),
        "seq": i(w2 >> np.uint64(48)),
        "lost": i(h[:, 3]),
    }


def pool_selection(selection: str) -> tuple[int, int, int, int]:
    """A selection string -> the window words (START, STOP, EVERY, MODE). Selections: "N" (launch N,
    0-based), "A:B" (launches A <= i < B), "A:" (from A on), "every=K" (0, K, 2K, ...), "last" (every launch
    records into a region of two halves; the host keeps the newest complete launch), "none", "all"."""
    text = str(selection).strip().replace(" ", "")
    try:
        if text == "none":
            return 0, 0, 1, POOL_WINDOW
        if text == "all":
            return 0, POOL_OPEN_ENDED, 1, POOL_WINDOW
        if text == "last":
            return 0, POOL_OPEN_ENDED, 1, POOL_LAST
        if text.startswith("every="):
            every = int(text[len("every="):])
            if not 1 <= every < 1 << 31:
                raise ValueError
            return 0, POOL_OPEN_ENDED, every, POOL_WINDOW
        if ":" in text:
            first, _, stop = text.partition(":")
            start = int(first) if first else 0
            end = int(stop) if stop else POOL_OPEN_ENDED
            if not 0 <= start < POOL_OPEN_ENDED or not start <= end <= POOL_OPEN_ENDED:
                raise ValueError
            return start, end, 1, POOL_WINDOW
        launch = int(text)
        if not 0 <= launch < POOL_OPEN_ENDED - 1:
            raise ValueError
        return launch, launch + 1, 1, POOL_WINDOW
    except ValueError:
        raise ValueError(
            f"launch selection {selection!r}: expected 'N' (the N-th launch, 0-based), 'A:B' (A <= launch < B), "
            "'A:', 'every=K', 'last', 'none' or 'all'") from None


def pool_decide(start: int, stop: int, every: int, mode: int, launch: int) -> tuple[bool, bool]:
    """(recording, emptied) of launch `launch` of a kernel under window words (START, STOP, EVERY, MODE):
    the reference of the device rule (ikp_cute/pipelines/record_pool.py). `emptied`: the launch is past a
    window, whose words it then sets to START = STOP = 0 (later launches decide without TICKS)."""
    if mode == POOL_LAST:
        return True, False
    if start >= stop:
        return False, False
    every = max(int(every), 1)
    recording = start <= launch < stop and (launch - start) % every == 0
    return recording, launch >= stop


def pool_warp_part(warp: int, warps: int) -> int:
    """Ticks warp `warp` (linear in the launch) of a launch of `warps` warps adds to TICKS: 2**24 >> s with
    2**s >= warps, and warp 0 adds the remainder too, so a launch adds exactly 2**24 (and every part is >= 1
    for warps <= 2**24). The reference of the device's count."""
    shift = max(int(warps) - 1, 0).bit_length()
    part = (1 << POOL_TICK_BITS) >> shift
    return part + ((1 << POOL_TICK_BITS) - part * warps if warp == 0 else 0)
