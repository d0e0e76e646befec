"""The cursor record with one part taken out at a time, for benchmarks/record_ablation.py (where a
record's time goes). Each is a recorder for ``Profiler.create(..., recorder_class=...)`` and records
every BEGIN and END on its own (no check shared within a region):

    PerRecordCheck   timer read, `room > 0` compare, 64-bit store: the cursor with no END sharing its
                     BEGIN's check
    NoCheck          timer read and store, guarded by the lane's leader only (safe only in a lane sized
                     for the kernel: the benchmark's)
    NoTimer          PerRecordCheck storing the room instead of a timer
    TimerOnly        the timer read, folded into the room register; nothing stored
    SmemNoCheck      NoCheck into shared memory, 32 bits (the timer only), as IKET stages its records

and, for the lean A/B (benchmarks and FA4), the lean record with its leaf-region pairing turned off:

    SharedStateLean  every record loads its lane's state from shared memory, stores, and writes the
                     count back (its store waits for the load)

and, to find where FA4's cost of a lean region comes from (gpu/examples_suite.py --fa4-ablation):

    LeanBarrierOnly  each record is an empty inline-PTX block with side effects: no instruction, only the
                     compiler barrier every record brings (a timer read alone is removed by ptxas)
    LeanGlobalCount  lean that touches no shared memory: the lane's count is a global atomic on the low
                     word of the lane's FINALIZE slot (finalize overwrites it), the lane found from
                     %ctaid and %tid; leaf regions pair as in lean (a diagnostic: its DROPPED count is
                     not written)

Each subclasses a mode's recorder (ikp_cute/recorders/) and overrides only its public hooks: the
protocol's begin/end/mark, CursorRecorder.record (with .words(), .room, .lane), LeanRecorder.record,
take_pair and store_pair; tests/unit/test_layout.py keeps private names from crossing modules, and
tests/unit/ikp_cute/test_recorders.py checks every variant against the Recorder protocol.

Only benchmarks use these; none is a mode, and NoCheck, TimerOnly and SmemNoCheck do not write a
decodable lane (SharedStateLean does: lean's state and finalize).
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, const_expr, cute

from host_decode.core import wire
from ikp_cute import inline_ptx
from ikp_cute.inline_ptx import numbered_ptx
from ikp_cute.recorders import CursorRecorder, LeanRecorder, SmemRecorder
from ikp_cute.recorders.lean import fresh_thread_x
from ikp_cute.recorders.records import BEGIN, END, event_bits, sub_nsw, timer_lo


class _EveryRecordAlone:
    def begin(self, event_id: int, index):
        self.record(event_bits(event_id, BEGIN))

    def end(self, event_id: int, token_value, adjacent: bool):
        self.record(event_bits(event_id, END))


@dataclasses.dataclass(frozen=True)
class PerRecordCheck(_EveryRecordAlone, CursorRecorder):
    pass


class _CursorPart(_EveryRecordAlone, CursorRecorder):
    """The cursor's record with its guard (`checks_room`) or its timer read (`reads_timer`) taken out."""

    checks_room = True
    reads_timer = True

    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        room = self.room[0]
        value = room
        if const_expr(self.reads_timer):
            value = timer_lo()
        guard = self.lane.leader
        if const_expr(self.checks_room):
            guard = room > 0
        words = self.words()
        if guard:
            k = self.spec.trailer_slot - room
            words[k, 0] = self.lane.tag | bits
            words[k, 1] = value
        self.room[0] = sub_nsw(room, 1)


@dataclasses.dataclass(frozen=True)
class NoCheck(_CursorPart):
    checks_room = False


@dataclasses.dataclass(frozen=True)
class NoTimer(_CursorPart):
    reads_timer = False


@dataclasses.dataclass(frozen=True)
class TimerOnly(_EveryRecordAlone, CursorRecorder):
    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        self.room[0] = self.room[0] ^ timer_lo()


@dataclasses.dataclass(frozen=True)
class SmemNoCheck(_EveryRecordAlone, SmemRecorder):
    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        room = self.room[0]
        timer = timer_lo()
        if self.lane.leader:
            self.words()[self.spec.trailer_slot - room, 1] = timer
        self.room[0] = sub_nsw(room, 1)


@dataclasses.dataclass(frozen=True)
class SharedStateLean(LeanRecorder):
    def end(self, event_id: int, token_value, adjacent: bool):
        self.record(event_bits(event_id, END), timer_lo())


@dataclasses.dataclass(frozen=True)
class LeanBarrierOnly(LeanRecorder):
    def begin(self, event_id: int, index):
        inline_ptx.asm(None, [], "", "")

    def end(self, event_id: int, token_value, adjacent: bool):
        inline_ptx.asm(None, [], "", "")

    def mark(self, event_id: int, index):
        inline_ptx.asm(None, [], "", "")


def _global_locate(spec) -> str:
    """PTX: p = this thread leads an existing lane; lane = its index; c = the address of its count."""
    threads = 32 * spec.warps_per_group
    count_offset = 8 * (1 + (spec.records_per_lane - 1) * spec.write_stride)
    return (
        f" and.b32 r, $tid, {threads - 1}; shr.u32 g, $tid, {threads.bit_length() - 1};"
        " mov.u32 cx, %ctaid.x; mov.u32 cy, %ctaid.y; mov.u32 cz, %ctaid.z; mov.u32 nx, %nctaid.x;"
        " mov.u32 ny, %nctaid.y; mad.lo.u32 b, cz, ny, cy; mad.lo.u32 b, b, nx, cx;"
        f" mad.lo.u32 lane, b, {spec.num_groups}, g;"
        f" setp.eq.u32 p, r, 0; setp.lt.and.u32 p, g, {spec.num_groups}, p;"
        f" setp.lt.and.u32 p, lane, {spec.write_stride}, p;"
        f" mad.wide.u32 c, lane, 8, $buffer; add.s64 c, c, {count_offset};"
    )


def _global_stores(spec, bits) -> str:
    first = 8 * (1 + wire.ANCHOR_RECORDS * spec.write_stride)  # the header and the anchors
    stores = "".join(
        f" or.b32 tag, lane_tag, {b}; @q st.global.v2.u32 [addr+{first + 8 * spec.write_stride * i}], {{tag, $t{i}}};"
        for i, b in enumerate(bits)
    )
    return (
        f" setp.lt.and.u32 q, taken, {spec.user_capacity}, p;"
        f" mad.lo.u32 k, taken, {spec.write_stride}, lane; mad.wide.u32 addr, k, 8, $buffer;"
        f" shl.b32 lane_tag, lane, {wire.LANE_SHIFT};" + stores
    )


_GLOBAL_REGS = (
    ".reg .pred p, q; .reg .u32 r, g, b, lane, taken, k, tag, lane_tag, cx, cy, cz, nx, ny; .reg .u64 c, addr;"
)


@dataclasses.dataclass(frozen=True)
class LeanGlobalCount(LeanRecorder):
    def _buffer(self):
        return Int64(self.buffer.iterator.toint())

    def record(self, bits: int, timer):
        text = (
            "{ " + _GLOBAL_REGS + _global_locate(self.spec)
            + " @p atom.global.add.u32 taken, [c], 1;" + _global_stores(self.spec, [bits]) + " }"
        )
        operands = [self._buffer(), fresh_thread_x(), Int32(timer)]
        return inline_ptx.asm(None, operands, numbered_ptx(text, ["buffer", "tid", "t0"]), "l,r,r")

    def take_pair(self) -> tuple:
        take = (
            "{ " + _GLOBAL_REGS + _global_locate(self.spec)
            + " @p atom.global.add.u32 taken, [c], 2; mov.u32 $taken, taken; mov.u32 $lane, lane;"
            " selp.u32 $leader, 1, 0, p; }"
        )
        take = numbered_ptx(take, ["taken", "lane", "leader", "buffer", "tid"])
        operands = [self._buffer(), fresh_thread_x()]
        return inline_ptx.asm_results((Int32, Int32, Int32), operands, take, "=r,=r,=r,l,r")

    def store_pair(self, took: tuple, bits: tuple, timers: tuple):
        store = (
            "{ " + _GLOBAL_REGS + " mov.u32 taken, $taken; mov.u32 lane, $lane; setp.ne.u32 p, $leader, 0;"
            + _global_stores(self.spec, bits) + " }"
        )
        operands = [*took, self._buffer(), *(Int32(t) for t in timers)]
        names = ["taken", "lane", "leader", "buffer", "t0", "t1"]
        inline_ptx.asm(None, operands, numbered_ptx(store, names), "r,r,r,l,r,r")


VARIANTS = {  # row name: (mode, recorder class)
    "per_record_check": ("cursor", PerRecordCheck),
    "no_check": ("cursor", NoCheck),
    "no_timer": ("cursor", NoTimer),
    "timer_only": ("cursor", TimerOnly),
    "smem_no_check": ("smem", SmemNoCheck),
    "lean_shared_state": ("lean", SharedStateLean),
}
