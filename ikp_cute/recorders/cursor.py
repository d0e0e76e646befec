"""mode="cursor" (the default): each record stored at once through a register cursor holding the room
left in the lane.

How the record stays cheap: the lane's base address, tag bits and room are computed once at create;
write_stride is a compile-time constant, so records are immediate offsets from one address and the guard
is one compare of the room against an immediate once loops are unrolled; a record is two 32-bit words
(tag, timer) merged into one 64-bit store; and a region's END that follows its BEGIN with nothing
recorded in between (same control-flow level) shares the BEGIN's compare: its slot is the next one, at
most the lane's DROPPED slot, so it stays inside the lane whatever the room. SASS per region: two timer
reads (CS2R), one compare (ISETP), two stores (STG), plus a MOV per record with the CUDA 12 ptxas. In an
issue-bound kernel the compare was ~40% of a record's time (docs/device.md "Where a record's time goes").
Sharing one check among longer straight-line groups was built and lost records on an H100
(docs/device.md); not shipped.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py unless
named otherwise):
* No store passes the lane's capacity: every record is guarded by `room > 0`, an END right after its
  BEGIN by the BEGIN's (its slot being at most the DROPPED slot):
  test_overflow_is_dropped_on_device_and_counted_exactly (tests/gpu/test_device_gpu.py), memcheck in
  gpu/device_suite.py.
* The cursor is carried through ``cutlass.range`` loops and ``if`` branches: it is a one-element register
  tensor updated in place (test_cursor_is_carried_through_dynamic_loop, and its negative control
  test_carry_check_catches_a_stale_cursor).
* The END shares its BEGIN's check only when adjacent (test_end_shares_its_begins_check_only_when_adjacent),
  and a record costs what test_sass_per_event_budget and test_cursor_record_ablation allow.
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, const_expr, cute

from ..spec import ProfileSpec
from .lane import Lane, end_window, finish, writer_of
from .records import BEGIN, END, INSTANT, event_bits, store_if, sub_nsw, timer_lo


@dataclasses.dataclass(frozen=True)
class CursorRecorder:
    """mode="cursor": records stored at once through a register cursor holding the room left
    (room = capacity - records taken; <= 0 for non-leaders, so their checks always fail)."""

    needs_token = False
    lane: Lane
    room: cute.Tensor  # one Int32 in registers, carried in place through loops and branches
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        lane = Lane.create(spec, buffer, group, leader, buffer_ok)
        return cls(lane, room_register(spec, lane), spec)

    def words(self):
        """The lane's slots as (tag, timer) int32 pairs: where this recorder's records go."""
        return self.lane.words

    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        """One record guarded by its own `room > 0`; returns that guard."""
        return self.store(bits, None)

    @cute.jit
    def store(self, bits: cutlass.Constexpr, fits):
        """One record at the cursor's slot, guarded by `fits` (None: by its own `room > 0`); the cursor
        moves on either way. Returns the guard."""
        # The room is read, then the timer, then the store is guarded and the room written back: the
        # order validated on the H100 (the compare placed before the timer read lost records there;
        # docs/device.md "The amortized check that was withdrawn").
        room = self.room[0]
        timer = timer_lo()
        if const_expr(fits is None):
            fits = room > 0
        store_if(fits, self.words(), self.spec.trailer_slot - room, self.lane.tag | bits, timer)
        self.room[0] = sub_nsw(room, 1)
        return fits

    def begin(self, event_id: int, index):
        return self.record(event_bits(event_id, BEGIN))

    def end(self, event_id: int, token_value, adjacent: bool):
        """`token_value`: the begin's guard (None without a token). `adjacent` (Profiler.end): nothing was
        recorded between the begin and this end, at the same control-flow level. Then this END takes the
        slot right after its BEGIN and the BEGIN's `room > 0` covers it, with no compare of its own: that
        slot is at most the lane's DROPPED slot, inside the lane, and an END that lands there is past the
        capacity, counted by the room, and overwritten by the DROPPED record at finalize."""
        self.store(event_bits(event_id, END), token_value if adjacent else None)

    def mark(self, event_id: int, index):
        self.record(event_bits(event_id, INSTANT))

    def finalize(self, leader):
        writer = writer_of(self.lane, leader)
        room = self.room[0]
        finish(self.lane, -room, -room, writer, self.spec)
        end_window(self.spec, self.lane, leader)


def room_register(spec: ProfileSpec, lane: Lane):
    """The cursor: one Int32 register tensor holding the room left in the lane."""
    room = cute.make_rmem_tensor(cute.make_layout(1), Int32)
    # leaders: the user capacity; strays: 0 (nothing fits, -room counts their records); others: -1
    room[0] = cutlass.select_(lane.leader, Int32(spec.user_capacity), cutlass.select_(lane.stray, Int32(0), Int32(-1)))
    return room
