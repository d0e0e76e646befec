"""Device side of pipeline tracing: per-warp lanes, state in shared memory, one PTX block per record.

Who records: one lane of each warp that executes a traced call (`elect.sync` on `activemask`). Pipeline
calls are made by arbitrary subsets of threads (a consumer wait by all 128 threads of a warp group, a TMA
arrive inside `elect_one`, a producer acquire by one warp), so a fixed leader would miss calls its warp does
not make; every warp that makes a call records it once. Lanes are therefore (block, warp): lane =
block_linear * warps_per_block + warp (sidecar `warps_per_group: 1`).

Where state lives: 16 bytes per warp, {room, lane, address of the lane's slot 0}, in 512 bytes of
static shared memory (32 warps, the most a block has), written by every warp's elected lane in a
prologue that is inserted at the *entry block* of the kernel the first time a hook fires in it (so it
dominates every record and runs before any of them whatever branch the first pipeline call sits in).
Nothing of ours is held in registers between records: each record re-reads its warp's state (the
kernel's own loops and register allocation see only the record's short-lived temporaries; %tid.x comes
from the DSL's thread_idx, which the kernel itself holds or re-reads).

The buffer address is a constant of the prologue only: records take the lane's address from the state,
so no 64-bit constant is materialized (and kept live by ptxas) across the kernel's loops.

An instant (one inline-PTX block, ~22 SASS instructions, no branch): read %globaltimer, load the state,
store one v1 word at slot ``1 + lane + (trailer - room) * write_stride`` when room > 0, else overwrite the
lane's DROPPED slot with the running drop count (1 - room), then store room - 1. A region reserves its two
slots before the blocking call (reserve_region: begin time, state, room - 2, address) and after it only
reads the end time and stores BEGIN + END (finish_region: no load, no shared-memory access). Records of a
lane are a prefix in program order; the DROPPED instant says how many were lost (no finalize call is needed,
and none is written: the kernel's end is not a place a hook can reach).

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* no profiler state crosses the kernel's code (the record block holds no register across calls);
* lanes outside the session's geometry (warp >= warps_per_block, lane >= write_stride, a 2-D or 3-D
  block) get lane = 0xFFFFFFFF and never store;
* the buffer address is an immediate of the prologue only (the kernel's signature is unchanged;
  test_buffer_address_is_baked_and_state_is_in_shared_memory);
* after a blocking call only the end time and the two stores remain
  (test_after_a_blocking_call_only_the_end_time_and_the_stores_remain);
* record_with_payload stores a record and its payloads all or none, counting what did not fit
  (tests/unit/ikp_cute/test_flags_compile.py).
"""

from __future__ import annotations

import dataclasses

from cutlass import Int32, Int64, cute

from host_decode.core import wire
from ikp_cute import inline_ptx

MAX_WARPS = 32
STATE_BYTES = 16  # per warp: room (u32), lane (u32), address of the lane's slot 0 (u64)
INVALID_LANE = 0xFFFFFFFF
BEGIN = int(wire.EventType.BEGIN)
END = int(wire.EventType.END)
INSTANT = int(wire.EventType.INSTANT)
DROPPED_BITS = (wire.DROPPED_EVENT_ID << wire.EVENT_ID_SHIFT) | INSTANT


# The recording thread: one active lane of the warp, chosen by `elect.sync` (sm_90+; one instruction,
# where %lanemask_lt is a variable-latency special-register read). Its warp's state: STATE_BYTES * warp,
# from %tid.x passed in by the DSL (`thread_idx`, which LLVM shares with the kernel's own reads).
_LEADER = " activemask.b32 m; elect.sync _|lead, m;"
_STATE_ADDRESS = " shr.u32 w, {tid}, 5; mad.lo.u32 a, w, 16, {base};"


def _thread_x():
    return Int32(cute.arch.thread_idx()[0])


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Compile-time layout of the session buffer the records go to."""

    address: int  # device address of the v1 buffer (baked into the kernel's prologue only)
    warps_per_block: int  # = the session's num_groups
    write_stride: int
    records_per_lane: int

    @property
    def trailer_slot(self) -> int:
        return self.records_per_lane - wire.TRAILER_RECORDS

    @property
    def capacity(self) -> int:
        return wire.user_capacity(self.records_per_lane)

    @property
    def stride_bytes(self) -> int:
        return 8 * self.write_stride

    @classmethod
    def of_spec(cls, spec, address: int) -> Geometry:
        if spec.num_groups > MAX_WARPS:
            raise ValueError(f"trace_pipelines: {spec.num_groups} groups; pipeline lanes are warps "
                             f"(at most {MAX_WARPS} per block)")
        return cls(int(address), spec.num_groups, spec.write_stride, spec.records_per_lane)


@dataclasses.dataclass(frozen=True)
class KernelState:
    """Per kernel: the shared-memory address (Int32) of its 32 warp states."""

    state_base: object
    geometry: Geometry

    @staticmethod
    def create(geometry: Geometry) -> KernelState:
        """Emit the prologue at the current insertion point (the caller puts it at the kernel's entry):
        every warp's elected lane writes its warp's state and the lane's two anchor records."""
        base = Int32(cute.arch.alloc_smem(Int64, 2 * MAX_WARPS, alignment=16).toint())
        g = geometry
        anchor_lo = wire.make_tag(0, wire.ANCHOR_LO_EVENT_ID, INSTANT)
        anchor_hi = wire.make_tag(0, wire.ANCHOR_HI_EVENT_ID, INSTANT)
        asm = (
            "{ .reg .pred lead, ok; .reg .u32 m, w, a, bx, by, bz, gx, gy, n, blk, lane, room, tag, tlo, thi;"
            " .reg .u64 t, addr, rec;"
            + _LEADER
            + _STATE_ADDRESS.format(base="$0", tid="$1")
            + " mov.u32 bx, %ctaid.x; mov.u32 by, %ctaid.y; mov.u32 bz, %ctaid.z;"
            " mov.u32 gx, %nctaid.x; mov.u32 gy, %nctaid.y;"
            " mad.lo.u32 blk, bz, gy, by; mad.lo.u32 blk, blk, gx, bx;"
            f" mad.lo.u32 lane, blk, {g.warps_per_block}, w;"
            " mov.u32 n, %ntid.y; mov.u32 m, %ntid.z; mul.lo.u32 n, n, m;"
            f" setp.lt.u32 ok, w, {g.warps_per_block}; setp.lt.and.u32 ok, lane, {g.write_stride}, ok;"
            " setp.eq.and.u32 ok, n, 1, ok;"
            f" selp.u32 room, {g.capacity}, 0, ok; selp.u32 lane, lane, {INVALID_LANE}, ok;"
            f" mul.wide.u32 addr, lane, 8; add.u64 addr, addr, {g.address + 8};"
            " @lead st.volatile.shared.v2.u32 [a], {room, lane}; @lead st.volatile.shared.u64 [a+8], addr;"
            " mov.u64 t, %globaltimer; mov.b64 {tlo, thi}, t;"
            f" shl.b32 tag, lane, {wire.LANE_SHIFT}; or.b32 tag, tag, {anchor_lo};"
            " mov.b64 rec, {tag, tlo}; and.pred ok, ok, lead;"
            " @ok st.global.b64 [addr], rec;"
            f" xor.b32 tag, tag, {anchor_lo ^ anchor_hi}; mov.b64 rec, {{tag, thi}};"
            f" @ok st.global.b64 [addr+{g.stride_bytes}], rec; }}"
        )
        inline_ptx.asm(None, [base, _thread_x()], asm, "r,r")
        return KernelState(base, geometry)

    def record(self, bits, label: str = "", time=None) -> None:
        """One instant record (bits = (event_id << 2) | type, an Int32 or int) by each executing warp's
        elected lane, at `time` (a timer() value read earlier) or now. `label` goes into a PTX comment
        (``/* ikp <label> */``): how tests count the records of each call site in the PTX."""
        g = self.geometry
        asm = (
            "{ .reg .pred lead, ok, live, full; .reg .u32 m, w, a, room, lane, k, tag, tlo, thi;"
            " .reg .u64 t, s, b, addr, rec;"
            + (" mov.u64 t, %globaltimer; mov.b64 {tlo, thi}, t;" if time is None else " mov.u32 tlo, $3;")
            + _LEADER
            + _STATE_ADDRESS.format(base="$0", tid="$2")
            + " ld.volatile.shared.v2.u64 {s, b}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.u32 ok, lane, {g.write_stride}; and.pred ok, ok, lead;"
            " setp.gt.and.s32 live, room, 0, ok; setp.le.and.s32 full, room, 0, ok;"
            f" sub.s32 k, {g.trailer_slot}, room; mad.wide.u32 addr, k, {g.stride_bytes}, b;"
            f" shl.b32 tag, lane, {wire.LANE_SHIFT}; or.b32 m, tag, $1;"
            " mov.b64 rec, {m, tlo}; @live st.global.b64 [addr], rec;"
            f" sub.s32 k, 1, room; or.b32 m, tag, {DROPPED_BITS}; mov.b64 rec, {{m, k}};"
            f" add.u64 addr, b, {g.trailer_slot * g.stride_bytes}; @full st.global.b64 [addr], rec;"
            " sub.s32 room, room, 1;"
            f" @lead st.volatile.shared.u32 [a], room; }} /* ikp {label} */"
        )
        operands = [self.state_base, Int32(bits), _thread_x()] + ([] if time is None else [Int32(time)])
        inline_ptx.asm(None, operands, asm, ",".join("r" * len(operands)))

    def timer(self, label: str = ""):
        """%globaltimer (low 32 bits) as an SSA value, read as 64 bits and truncated outside the PTX block
        (as the recorders do). ptxas still picks the instruction by where the value goes: a value only
        used in uniform arithmetic (FA4's waits) is read with S2UR + NOP, one that goes into a record's
        register pair with CS2R.32."""
        asm = f"mov.u64 $0, %globaltimer; /* ikp {label} */"
        return Int32(Int64(inline_ptx.asm(Int64.mlir_type, [], asm, "=l")))

    def reserve_region(self, bits, begin=None, label: str = ""):
        """Before a blocking call: read the begin time (or take `begin`), the warp's state, and reserve the
        lane's next two slots (room -= 2 in shared memory, the DROPPED count rewritten when they do not
        fit). Returns the token for finish_region: (the BEGIN slot's address, the BEGIN record {tag, begin},
        the room before: BEGIN is stored when > 0, END when > 1, nothing by threads that do not record).
        Every load and all the bookkeeping happen here, where a wait hides their latency; after the call
        only the timer read, two compares and the two stores remain (no shared-memory access there: it
        would have to precede the kernel's next wgmma fence)."""
        g = self.geometry
        if begin is None:
            begin = self.timer()
        asm = (
            "{ .reg .pred lead, ok, full; .reg .u32 m, w, a, room, lane, k, tag;"
            " .reg .u64 s, b, addr, rec;"
            + _LEADER
            + _STATE_ADDRESS.format(base="$3", tid="$6")
            + " ld.volatile.shared.v2.u64 {s, b}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.and.u32 ok, lane, {g.write_stride}, lead; selp.u32 $2, room, 0, ok;"
            f" sub.s32 k, {g.trailer_slot}, room; mad.wide.u32 $0, k, {g.stride_bytes}, b;"
            f" shl.b32 tag, lane, {wire.LANE_SHIFT}; or.b32 m, tag, $5; mov.b64 $1, {{m, $4}};"
            # Past capacity: the lane's DROPPED slot holds the running count of lost records (-room).
            " sub.s32 room, room, 2; setp.lt.and.s32 full, room, 0, ok; neg.s32 k, room;"
            f" or.b32 m, tag, {DROPPED_BITS}; mov.b64 rec, {{m, k}};"
            f" add.u64 addr, b, {g.trailer_slot * g.stride_bytes}; @full st.global.b64 [addr], rec;"
            f" @ok st.volatile.shared.u32 [a], room; }} /* ikp {label} */"
        )
        operands = [self.state_base, Int32(begin), Int32(bits), _thread_x()]
        return inline_ptx.asm_results((Int64, Int64, Int32), operands, asm, "=l,=l,=r,r,r,r,r")

    def record_with_payload(self, bits, time, address, values=(), optional=None, region: bool = False,
                            label: str = ""):
        """A record and its payload instants, slots reserved at once (docs/flags.md, "Records"): an INSTANT of
        `bits` at `time` (or, with `region`, a region whose BEGIN is `bits` at `time` and whose END
        finish_region stores later), then FLAG_ADDR (`address` >> 2, low 32 bits; `address` an Int64), then
        FLAG_VALUE for each Int32 of `values`, then, when `optional` = (present, value) has present != 0, one
        more FLAG_VALUE. All slots fit or none is stored: a reservation that does not fit stores nothing and
        counts all its records in the lane's DROPPED slot (the slots it would have used stay empty, so the
        count says exactly what was lost). Payloads are stored here; for a region the BEGIN and END are not:
        returns finish_region's token (BEGIN and END both stored, or neither), else None."""
        g = self.geometry
        head = 2 if region else 1
        need = head + 1 + len(values)
        n_in = 5 + len(values) + (2 if optional is not None else 0)
        first_in = 3 if region else 0  # operands: the region's three results come first
        ops = [f"${first_in + i}" for i in range(n_in)]
        base, tid, bits_op, time_op, address_op = ops[:5]
        value_ops = ops[5:5 + len(values)]
        flag_addr = (wire.FLAG_ADDR_EVENT_ID << wire.EVENT_ID_SHIFT) | INSTANT
        flag_value = (wire.FLAG_VALUE_EVENT_ID << wire.EVENT_ID_SHIFT) | INSTANT
        stride = g.stride_bytes
        text = (
            "{ .reg .pred lead, ok, fit, full, opt; .reg .u32 m, w, a, room, lane, k, tag, need, left, lo;"
            " .reg .u64 s, b, addr, rec, x;"
            + _LEADER
            + _STATE_ADDRESS.format(base=base, tid=tid)
            + " ld.volatile.shared.v2.u64 {s, b}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.and.u32 ok, lane, {g.write_stride}, lead;"
        )
        if optional is not None:
            text += f" setp.ne.u32 opt, {ops[-2]}, 0; selp.u32 need, {need + 1}, {need}, opt;"
        else:
            text += f" mov.u32 need, {need};"
        text += (
            " setp.ge.and.s32 fit, room, need, ok;"
            f" sub.s32 k, {g.trailer_slot}, room; mad.wide.u32 addr, k, {stride}, b;"
            f" shl.b32 tag, lane, {wire.LANE_SHIFT};"
        )
        if not region:
            text += f" or.b32 m, tag, {bits_op}; mov.b64 rec, {{m, {time_op}}}; @fit st.global.b64 [addr], rec;"
        slot = head
        text += (f" shr.u64 x, {address_op}, {wire.FLAG_ADDR_SHIFT}; cvt.u32.u64 lo, x; or.b32 m, tag, {flag_addr};"
                 f" mov.b64 rec, {{m, lo}}; @fit st.global.b64 [addr+{slot * stride}], rec;")
        text += f" or.b32 m, tag, {flag_value};"
        for value in value_ops:
            slot += 1
            text += f" mov.b64 rec, {{m, {value}}}; @fit st.global.b64 [addr+{slot * stride}], rec;"
        if optional is not None:
            text += (f" and.pred opt, opt, fit; mov.b64 rec, {{m, {ops[-1]}}};"
                     f" @opt st.global.b64 [addr+{(slot + 1) * stride}], rec;")
        text += (
            # past capacity: nothing stored, every record counted (-room in the lane's DROPPED slot)
            " min.s32 left, room, 0; selp.s32 left, room, left, fit; sub.s32 room, left, need;"
            " setp.lt.and.s32 full, room, 0, ok; neg.s32 k, room;"
            f" or.b32 m, tag, {DROPPED_BITS}; mov.b64 rec, {{m, k}};"
            f" add.u64 x, b, {g.trailer_slot * stride}; @full st.global.b64 [x], rec;"
            " @ok st.volatile.shared.u32 [a], room;"
        )
        if region:
            text += (f" mov.u64 $0, addr; or.b32 m, tag, {bits_op}; mov.b64 $1, {{m, {time_op}}};"
                     " selp.u32 $2, 2, 0, fit;")
        text += f" }} /* ikp {label} */"
        operands = [self.state_base, _thread_x(), Int32(bits), Int32(time), Int64(address)]
        operands += [Int32(v) for v in values]
        if optional is not None:
            operands += [Int32(optional[0]), Int32(optional[1])]
        constraints = "r,r,r,r,l" + ",r" * (len(values) + (2 if optional is not None else 0))
        if not region:
            inline_ptx.asm(None, operands, text, constraints)
            return None
        return inline_ptx.asm_results((Int64, Int64, Int32), operands, text, "=l,=l,=r," + constraints)

    def finish_region(self, token, end=None, label: str = "") -> None:
        """After the blocking call: the END time (or `end`) and the reserved BEGIN / END stores."""
        address, begin_record, room = token
        if end is None:
            end = self.timer()
        asm = (
            "{ .reg .pred b_live, e_live; .reg .u32 m, hi; .reg .u64 rec;"
            " setp.gt.s32 b_live, $2, 0; setp.gt.s32 e_live, $2, 1;"
            " @b_live st.global.b64 [$0], $1;"
            " mov.b64 {m, hi}, $1; add.u32 m, m, 1; mov.b64 rec, {m, $3};"
            f" @e_live st.global.b64 [$0+{self.geometry.stride_bytes}], rec; }} /* ikp {label} */"
        )
        operands = [Int64(address), Int64(begin_record), Int32(room), Int32(end)]
        inline_ptx.asm(None, operands, asm, "l,l,r,r")


def event_bits(base: int, stage, event_type: int):
    """(base + stage) << 2 | type: a Python int for a static stage, else an Int32 computed at run time."""
    if isinstance(stage, int):
        return ((base + stage) << wire.EVENT_ID_SHIFT) | event_type
    return ((Int32(stage) + base) << wire.EVENT_ID_SHIFT) | event_type
