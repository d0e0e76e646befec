"""Where a lane's records go, computed once per Profiler: the lane of this thread, its leader, the anchors
at its start and the trailer at its end.

Record k of lane ``lane`` lives at ``buf[1 + lane + k * write_stride]`` (host_decode/core/wire.py). Per
lane: k=0 ANCHOR_LO, k=1 ANCHOR_HI (one 64-bit %globaltimer read), user records from k=2, and the last
two slots for [DROPPED] + FINALIZE (event id = SM id). Only the lane's leader thread writes it.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py unless
named otherwise; GPU ones in tests/gpu/test_device_gpu.py):
* A constant group out of range is a trace-time error in every mode; a dynamic one costs one unsigned
  compare at setup (test_misuse_is_a_trace_time_error, test_dynamic_group_is_range_checked_once).
* Every record not stored is counted: in the lane's DROPPED instant, or, for a thread whose lane does
  not exist (dynamic group out of range, grid past write_stride), in the stray word after the v1 buffer
  (or the ring's STRAY word with a capture window): test_dynamic_bad_group_is_dropped_and_counted,
  test_grid_larger_than_session_*.
* The lane's base address, tag bits and leader are computed once, in ``Lane.create``; write_stride is a
  compile-time constant, so a lane's records are immediate offsets from one address
  (test_cursor_record_ablation: no address arithmetic per record).
* With a capture window, the lane is counted in the launch count at create and its held tick added at
  finalize (``end_window``), whether or not the launch records (tests/unit/ikp_cute/test_ring.py, test_ring_gpu.py).
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Boolean, Int32, Int64, Uint32, const_expr, cute

from host_decode.core import wire

from .. import inline_ptx, ring, window
from ..checks import source_site
from ..spec import ProfileSpec, ProfileUsageError
from .records import FINALIZE, INSTANT, event_bits, pack


@dataclasses.dataclass(frozen=True)
class Lane:
    """One (block, group) lane as seen by this thread, computed once in ``Lane.create``.

    leader:   this thread writes the lane (exactly one thread per lane with the default leader).
    stray:    this thread claims a lane that does not exist (dynamic group out of range, block past
              write_stride); it never writes, and finalize() counts its records in the stray word.
    counted:  with a capture window, this thread counted the lane in the launch count at create and
              adds its held tick at finalize (ikp_cute/window.py), whether or not the launch records.
    """

    leader: Boolean
    stray: Boolean
    tag: Int32
    records: cute.Tensor  # int64 slots k = 0 .. records_per_lane-1 of the lane
    words: cute.Tensor  # the same slots as (tag, timer) int32 pairs
    buffer: cute.Tensor
    group: Int32
    block: Int32
    spec: cutlass.Constexpr[ProfileSpec]
    window_buffer: cute.Tensor = None  # the whole ring buffer (control block first) with capture windows
    counted: Boolean = None

    @staticmethod
    def create(spec: ProfileSpec, buffer, group, leader, buffer_ok=None) -> Lane:
        """The lane of `group` in this block; `leader` None: the default leader (lane 0 of warp
        group * warps_per_group); `buffer_ok` False (a run-time Boolean): the buffer is too short."""
        check_constant_group(spec, group)
        return _lane(spec, buffer, group, leader, buffer_ok)


def check_constant_group(spec: ProfileSpec, group) -> None:
    """A constant group out of range is a trace-time error in every mode (a dynamic one is dropped and
    counted on the device)."""
    if isinstance(group, int) and not 0 <= group < spec.num_groups:
        raise ProfileUsageError(
            f"Profiler.create: group={group} is outside 0..{spec.num_groups - 1} (the spec has "
            f"{spec.num_groups} groups) at {source_site()}"
        )


@cute.jit
def _lane_of(spec: cutlass.Constexpr, group, leader):
    """(block, group, lane, exists, leader) of this thread for `group`; `leader` None: the default one."""
    bx, by, bz = cute.arch.block_idx()
    gx, gy, gz = cute.arch.grid_dim()
    block = Int32(bx + by * gx + bz * gx * gy)
    group = Int32(group)
    lane = block * spec.num_groups + group
    # One unsigned compare covers a negative group and one past num_groups.
    group_ok = Uint32(group) < Uint32(spec.num_groups)
    exists = group_ok & (Uint32(lane) < Uint32(spec.write_stride))  # unsigned: a wrapped block*groups
    if const_expr(leader is None):
        # Default leader: lane 0 of warp group * warps_per_group. A thread with a bad group claims (to be
        # counted as stray) if it would lead its own warp group, so every bad group's records are counted.
        warp = cute.arch.warp_idx()
        leading_warp = cutlass.select_(group_ok, group * spec.warps_per_group, warp - warp % spec.warps_per_group)
        leader = (warp == leading_warp) & (cute.arch.lane_idx() == 0)
    return block, group, lane, exists, Boolean(leader)


@cute.jit
def _lane(spec: cutlass.Constexpr, buffer, group, leader, buffer_ok):
    block, group, lane, exists, claims = _lane_of(spec, group, leader)
    gx, gy, gz = cute.arch.grid_dim()
    if const_expr(buffer_ok is not None):
        claims = claims & buffer_ok
    owner = claims & exists  # writes the lane if this launch records; counts it in the launch either way
    window_buffer, counted = None, None
    stray = claims & (~exists)
    if const_expr(spec.window_slots > 0):  # capture windows: this launch's ring slot, if it records
        window_buffer = buffer
        buffer, recording = window.open_slot(spec, buffer, claims, owner, lane)
        # A thread of a lane that does not exist has no lane of its own to hold the launch count back, so
        # its decision may be the next launch's: it never records, and its records count in the ring's
        # STRAY word whatever the decision.
        claims, counted = claims & recording & exists, owner
    leader = claims & exists
    tag = Int32(lane) << wire.LANE_SHIFT
    records = cute.make_tensor(
        buffer.iterator + 1 + lane, cute.make_layout(spec.records_per_lane, stride=spec.write_stride)
    )
    words = cute.make_tensor(
        cute.recast_ptr(buffer.iterator + 1 + lane, dtype=Int32),
        cute.make_layout((spec.records_per_lane, 2), stride=(2 * spec.write_stride, 1)),
    )
    if leader & (lane == 0):
        buffer[0] = Int64((Int64(spec.num_groups) << 32) | Int64(gx * gy * gz))
    now = cute.arch.globaltimer()
    if leader:
        records[0] = pack(Int32(now), tag | event_bits(wire.ANCHOR_LO_EVENT_ID, INSTANT))
        records[1] = pack(Int32(now >> 32), tag | event_bits(wire.ANCHOR_HI_EVENT_ID, INSTANT))
    return Lane(leader, stray, tag, records, words, buffer, group, block, spec, window_buffer, counted)


@cute.jit
def write_trailer(records, tag, dropped, timer, writer, spec: cutlass.Constexpr):
    """[DROPPED (count)] + FINALIZE (SM id) in the lane's last two slots, by `writer`."""
    if writer:
        if dropped > 0:
            records[spec.trailer_slot] = pack(dropped, tag | event_bits(wire.DROPPED_EVENT_ID, INSTANT))
        sm_bits = (cute.arch.smid() & wire.MAX_EVENT_ID) << wire.EVENT_ID_SHIFT
        records[spec.records_per_lane - 1] = pack(timer, tag | sm_bits | FINALIZE)


@cute.jit
def finish(lane: Lane, dropped, attempted, writer, spec: cutlass.Constexpr):
    """The trailer of a lane (its writer), or the stray count (a thread without a lane)."""
    write_trailer(lane.records, lane.tag, dropped, cute.arch.globaltimer_lo(), writer, spec)
    if lane.stray & (attempted > 0):
        _count_stray(lane, spec, attempted)


def _count_stray(lane, spec: ProfileSpec, count):
    """Add `count` to the stray-record word after the lane's v1 buffer, or with a capture window to the
    ring's STRAY word (a stray thread's launch is not known: ikp_cute/ring.py); one global reduction,
    error path only."""
    if const_expr(spec.window_slots > 0):
        address = Int64(lane.window_buffer.iterator.toint()) + 4 * ring.STRAY
    else:
        address = Int64(lane.buffer.iterator.toint()) + spec.stray_slot * 8
    inline_ptx.asm(None, [address, Int64(count)], "red.global.add.u64 [$0], $1;", "l,l")


def writer_of(lane: Lane, leader):
    """The thread that writes the lane's trailer: its leader, and with `leader=` (finalize's) that one."""
    return lane.leader if leader is None else (lane.leader & leader)


def end_window(spec: ProfileSpec, lane: Lane, leader):
    """With a capture window, the lane's end after its trailer (ikp_cute/window.py end_lane): the held
    tick, and the last lane's step in a launch that records. Nothing without a window."""
    if const_expr(spec.window_slots > 0):
        window.end_lane(spec, lane.window_buffer, lane.counted, writer_of(lane, leader))
