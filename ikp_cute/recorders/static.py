"""mode="static": region `index` owns slots 2+2*index (begin) and 3+2*index (end); a mark at `index` uses
the begin slot. An index past capacity (or negative, at run time) is dropped and counted.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* A constant index is checked at trace time, the region's END slot included; a run-time one by one
  unsigned compare (negative included), so no store lands on the anchors, the header or past the
  capacity (test_misuse_is_a_trace_time_error: static_index_negative,
  test_static_region_whose_end_would_be_past_capacity_is_refused, test_static_mode_requires_an_index).
* end() needs begin()'s token (its slot) at its begin's control-flow level.
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Uint32, cute

from host_decode.core import wire

from ..checks import source_site
from ..spec import ProfileSpec, ProfileUsageError
from .lane import Lane, end_window, finish, writer_of
from .records import BEGIN, END, INSTANT, event_bits, store_if, timer_lo


@dataclasses.dataclass(frozen=True)
class StaticRecorder:
    """mode="static": region `index` owns slots 2+2*index (begin) and 3+2*index (end); a mark at `index`
    uses the begin slot. An index past capacity (or negative, at run time) is dropped and counted."""

    needs_token = True
    lane: Lane
    drops: cute.Tensor  # records this thread could not store (for a stray thread: all of them)
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        lane = Lane.create(spec, buffer, group, leader, buffer_ok)
        drops = cute.make_rmem_tensor(cute.make_layout(1), Int32)
        drops[0] = Int32(0)
        return cls(lane, drops, spec)

    def _slot(self, index, what: str, records: int):
        """`records`: 2 for a region (its END takes the slot after the BEGIN's), 1 for a mark."""
        if index is None:
            raise ProfileUsageError(f"mode='static': {what} needs index= (the region's slot pair) at {source_site()}")
        if isinstance(index, int) and not (0 <= index and 2 * index + records <= self.spec.user_capacity):
            raise ProfileUsageError(
                f"mode='static': {what} index={index} is outside 0..{(self.spec.user_capacity - records) // 2} "
                f"(records_per_lane={self.spec.records_per_lane}) at {source_site()}"
            )
        return wire.ANCHOR_RECORDS + 2 * Int32(index)

    def _record(self, k, bits: int):
        _static_record(self.lane, self.drops, k, timer_lo(), bits, self.spec)

    def begin(self, event_id: int, index):
        k = self._slot(index, "begin()", 2)
        self._record(k, event_bits(event_id, BEGIN))
        return k

    def end(self, event_id: int, token_value, adjacent: bool):
        self._record(token_value + 1, event_bits(event_id, END))

    def mark(self, event_id: int, index):
        self._record(self._slot(index, "mark()", 1), event_bits(event_id, INSTANT))

    def finalize(self, leader):
        writer = writer_of(self.lane, leader)
        drops = self.drops[0]
        finish(self.lane, drops, drops, writer, self.spec)
        end_window(self.spec, self.lane, leader)


@cute.jit
def _static_record(lane: Lane, drops, k, timer, bits: cutlass.Constexpr, spec: cutlass.Constexpr):
    # unsigned: a negative runtime index lands past the limit instead of on the anchors or the header
    fits = Uint32(k - wire.ANCHOR_RECORDS) < Uint32(spec.user_capacity)
    store_if(lane.leader & fits, lane.words, k, lane.tag | bits, timer)
    if (lane.leader & (~fits)) | lane.stray:
        drops[0] = drops[0] + 1
