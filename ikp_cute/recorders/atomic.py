"""mode="atomic": each region reserves two consecutive slots with one shared-memory atomic (issued
before the begin timer read, both records stored at the end under one check), so several threads may
write one lane.

Per-lane counters: 4 bytes of static shared memory per group, zeroed by thread 0 before a block barrier
(every thread of the block must build the Profiler), and 32 dummy words that the other threads' atomics
go to (no branch around the atomic).

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py unless
named otherwise):
* A region's two slots are checked by one compare that its BEGIN fits; the END's slot is then at most the
  DROPPED slot, which finalize overwrites, so the count of drops is exact even when a pair starts on the
  last slot (test_overflow_is_dropped_on_device_and_counted_exactly, tests/gpu/test_device_gpu.py).
* Several writers per lane compile (test_atomic_mode_compiles_with_several_writers_per_lane); the
  counters are zeroed before a barrier (test_modes_compile_in_branches_loops_and_nesting: bar.sync).
* end() needs begin()'s token at its begin's control-flow level (test_misuse_is_a_trace_time_error).
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, cute

from host_decode.core import wire

from .. import inline_ptx
from ..spec import ProfileSpec
from .lane import Lane, end_window, finish, writer_of
from .records import BEGIN, END, INSTANT, event_bits, store_if, timer_lo


@dataclasses.dataclass(frozen=True)
class AtomicRecorder:
    """mode="atomic": each region reserves two consecutive slots with one shared-memory atomic (module
    docstring), so several threads may write one lane."""

    needs_token = True
    lane: Lane
    counter: object  # smem pointer of the lane's counter (its leader), else of a dummy word
    attempted: cute.Tensor  # records this thread tried (what a stray thread adds to the stray word)
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        lane = Lane.create(spec, buffer, group, leader, buffer_ok)
        counter, attempted = _atomic_setup(spec, lane)
        return cls(lane, counter, attempted, spec)

    def _reserve(self, count: int):
        """The lane's records reserved before these `count` (their first slot less the anchors)."""
        self.attempted[0] = self.attempted[0] + count
        return _counter_add(self.counter, count)

    def begin(self, event_id: int, index):
        return self._reserve(2), timer_lo()

    def end(self, event_id: int, token_value, adjacent: bool):
        before, begin_timer = token_value
        begin_bits, end_bits = event_bits(event_id, BEGIN), event_bits(event_id, END)
        _atomic_store_pair(self.lane, before, begin_timer, timer_lo(), begin_bits, end_bits, self.spec)

    def mark(self, event_id: int, index):
        before = self._reserve(1)
        fits = self.lane.leader & (before < self.spec.user_capacity)
        slot = Int64(before) + wire.ANCHOR_RECORDS
        store_if(fits, self.lane.words, slot, self.lane.tag | event_bits(event_id, INSTANT), timer_lo())

    def finalize(self, leader):
        writer = writer_of(self.lane, leader)
        _atomic_finalize(self.lane, self.counter, writer, self.attempted[0], self.spec)
        end_window(self.spec, self.lane, leader)


def _counter_add(counter, amount: int):
    """`atom.shared.add.u32` by every thread, unpredicated: `counter` is the lane's counter for its leader
    and a private dummy word for every other thread (_atomic_setup), so no branch guards the atomic (a
    predicated one compiles to a branch around it, and the compare of its result then waits for it
    ahead of the region). Returns the old count: the lane's for its leader, meaningless for others
    (whose stores are all predicated on the leader). Inline PTX with a lane-dependent address: with a
    warp-uniform one ptxas builds a warp-aggregated atomic (vote, popc, shuffle)."""
    asm = f"atom.shared.add.u32 $0, [$1], {int(amount)};"
    return Int32(inline_ptx.asm(Int32.mlir_type, [Int32(counter.toint())], asm, "=r,r"))


@cute.jit
def _atomic_setup(spec: cutlass.Constexpr, lane: Lane):
    """(the lane's counter for its leader, else a dummy word; this thread's attempted-records register)."""
    # the lanes' counters, then one dummy word per lane of a warp (every non-leader's atomic: _counter_add)
    counters = cute.arch.alloc_smem(Int32, spec.num_groups + 32, alignment=4)
    tx, ty, tz = cute.arch.thread_idx()
    if (tx + ty + tz) == 0:
        for g in cutlass.range_constexpr(spec.num_groups):
            counters[g] = Int32(0)
    cute.arch.sync_threads()
    dummy = Int32(spec.num_groups) + cute.arch.lane_idx()
    counter = counters + cutlass.select_(lane.leader, lane.group, dummy)
    attempted = cute.make_rmem_tensor(cute.make_layout(1), Int32)
    attempted[0] = Int32(0)
    return counter, attempted


@cute.jit
def _atomic_store_pair(
    lane: Lane, before, begin_timer, end_timer,
    begin_bits: cutlass.Constexpr, end_bits: cutlass.Constexpr, spec: cutlass.Constexpr,
):
    """A region's two records at slots `before + anchors` and the next, under one check that the BEGIN
    fits. The END's slot is then at most the lane's DROPPED slot: an END that lands there is past the
    capacity, counted (drops = reserved - capacity), and replaced by the DROPPED record at finalize (after
    the barrier that orders every writer's records). So every slot up to the capacity is used, and the
    count is exact even when a pair starts on the last slot (after an odd number of marks)."""
    if lane.leader & (before < spec.user_capacity):
        # 64-bit slot: the address is one wide multiply-add, the anchors an immediate offset of the stores
        k = Int64(before) + wire.ANCHOR_RECORDS
        lane.words[k, 0] = lane.tag | begin_bits
        lane.words[k, 1] = begin_timer
        lane.words[k + 1, 0] = lane.tag | end_bits
        lane.words[k + 1, 1] = end_timer


@cute.jit
def _atomic_finalize(lane: Lane, counter, writer, attempted, spec: cutlass.Constexpr):
    taken = _counter_add(counter, 0) + wire.ANCHOR_RECORDS
    finish(lane, taken - spec.trailer_slot, attempted, writer, spec)
