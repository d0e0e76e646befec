"""The cursor record with one part taken out at a time, for benchmarks/record_ablation.py (issue 17:
where a record's time goes). Each is a recorder for ``Profiler.create(..., recorder_class=...)`` and
records every BEGIN and END on its own (no check shared within a region):

    PerRecordCheck   timer read, `room > 0` compare, 64-bit store: the cursor before 2026-11-27
    NoCheck          timer read and store, guarded by the lane's leader only (safe only in a lane sized
                     for the kernel: the benchmark's)
    NoTimer          PerRecordCheck storing the room instead of a timer
    TimerOnly        the timer read, folded into the room register; nothing stored
    SmemNoCheck      NoCheck into shared memory, 32 bits (the timer only), as IKET stages its records

and, for the lean A/B (benchmarks and FA4), the lean record with its leaf-region pairing turned off,
which is how every lean record worked before session 12 (on today's 8-byte state):

    SharedStateLean  every record loads its lane's state from shared memory, stores, and writes the
                     count back (its store waits for the load)

and, to find where FA4's cost of a lean region comes from (gpu/examples_suite.py --fa4-ablation):

    LeanBarrierOnly  each record is an empty inline-PTX block with side effects: no instruction, only the
                     compiler barrier every record brings (a timer read alone is removed by ptxas)

Only benchmarks use these; none is a mode, and NoCheck, TimerOnly and SmemNoCheck do not write a
decodable lane (SharedStateLean does: lean's state and finalize).
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import const_expr, cute

from ikp_cute import device, inline_ptx


class _EveryRecordAlone:
    def begin(self, event_id: int, index):
        self.record(device.event_bits(event_id, device.BEGIN))

    def end(self, event_id: int, token_value, adjacent: bool):
        self.record(device.event_bits(event_id, device.END))


@dataclasses.dataclass(frozen=True)
class PerRecordCheck(_EveryRecordAlone, device.CursorRecorder):
    pass


class _CursorPart(_EveryRecordAlone, device.CursorRecorder):
    """The cursor's record with its guard (`checks_room`) or its timer read (`reads_timer`) taken out."""

    checks_room = True
    reads_timer = True

    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        room = self.room[0]
        value = room
        if const_expr(self.reads_timer):
            value = device.timer_lo()
        guard = self.lane.leader
        if const_expr(self.checks_room):
            guard = room > 0
        words = self.words()
        if guard:
            k = self.spec.trailer_slot - room
            words[k, 0] = self.lane.tag | bits
            words[k, 1] = value
        self.room[0] = device.sub_nsw(room, 1)


@dataclasses.dataclass(frozen=True)
class NoCheck(_CursorPart):
    checks_room = False


@dataclasses.dataclass(frozen=True)
class NoTimer(_CursorPart):
    reads_timer = False


@dataclasses.dataclass(frozen=True)
class TimerOnly(_EveryRecordAlone, device.CursorRecorder):
    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        self.room[0] = self.room[0] ^ device.timer_lo()


@dataclasses.dataclass(frozen=True)
class SmemNoCheck(_EveryRecordAlone, device.SmemRecorder):
    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        room = self.room[0]
        timer = device.timer_lo()
        if self.lane.leader:
            self.words()[self.spec.trailer_slot - room, 1] = timer
        self.room[0] = device.sub_nsw(room, 1)


@dataclasses.dataclass(frozen=True)
class SharedStateLean(device.LeanRecorder):
    def end(self, event_id: int, token_value, adjacent: bool):
        self.record(device.event_bits(event_id, device.END), device.timer_lo())


@dataclasses.dataclass(frozen=True)
class LeanBarrierOnly(device.LeanRecorder):
    def begin(self, event_id: int, index):
        inline_ptx.asm(None, [], "", "")

    def end(self, event_id: int, token_value, adjacent: bool):
        inline_ptx.asm(None, [], "", "")

    def mark(self, event_id: int, index):
        inline_ptx.asm(None, [], "", "")


VARIANTS = {  # row name: (mode, recorder class)
    "per_record_check": ("cursor", PerRecordCheck),
    "no_check": ("cursor", NoCheck),
    "no_timer": ("cursor", NoTimer),
    "timer_only": ("cursor", TimerOnly),
    "smem_no_check": ("smem", SmemNoCheck),
    "lean_shared_state": ("lean", SharedStateLean),
}
