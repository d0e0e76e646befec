"""mode="deferred": a region's begin slot and time are taken at its begin, both records stored at its end
(the timer read's latency overlaps the region body).

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* The cursor is carried as the cursor recorder's (test_deferred_begin_variant_compiles_and_is_carried).
* end() needs begin()'s token and sits at its begin's control-flow level, so a begin that runs is always
  stored (test_misuse_is_a_trace_time_error: end_without_token, end_in_other_block).
* An adjacent END shares its BEGIN's `room > 0` (test_end_shares_its_begins_check_only_when_adjacent).
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import const_expr, cute

from .cursor import CursorRecorder
from .records import BEGIN, END, event_bits, store_if, sub_nsw, timer_lo


@dataclasses.dataclass(frozen=True)
class DeferredRecorder(CursorRecorder):
    """mode="deferred": a region's begin slot and time are taken at the begin, both records stored at
    its end (the timer read's latency overlaps the region body)."""

    needs_token = True

    @cute.jit
    def begin(self, event_id: int, index):
        room = self.room[0]
        timer = timer_lo()
        self.room[0] = sub_nsw(room, 1)
        return room, timer

    def end(self, event_id: int, token_value, adjacent: bool):
        # adjacent: the END's slot is the one after the BEGIN's, so one `room > 0` guards both stores
        # (CursorRecorder.end says why that slot is always inside the lane).
        room, timer = token_value
        fits = (room > 0) if adjacent else None
        self.store(event_bits(event_id, END), fits)
        self._write_begin(room, timer, event_bits(event_id, BEGIN), fits)

    @cute.jit
    def _write_begin(self, room, timer, bits: cutlass.Constexpr, fits):
        if const_expr(fits is None):
            fits = room > 0
        store_if(fits, self.words(), self.spec.trailer_slot - room, self.lane.tag | bits, timer)
