"""Device side of pipeline tracing: per-warp lanes, state in shared memory, one PTX block per record.

Who records: the lowest active lane of each warp that executes a traced call (`%lanemask_lt` against
`activemask`). Pipeline calls are made by arbitrary subsets of threads (a consumer wait by all 128
threads of a warp group, a TMA arrive inside `elect_one`, a producer acquire by one warp), so a fixed
leader would miss calls its warp does not make; every warp that makes a call records it once. Lanes
are therefore (block, warp): lane = block_linear * warps_per_block + warp (sidecar `warps_per_group: 1`).

Where state lives: 16 bytes per warp, {room, lane, address of the lane's slot 0}, in 512 bytes of
static shared memory (32 warps, the most a block has), written by every warp's lowest active lane in a
prologue that is inserted at the *entry block* of the kernel the first time a hook fires in it (so it
dominates every record and runs before any of them whatever branch the first pipeline call sits in).
Nothing is held in registers between records: each record re-reads %tid.x and its warp's state (the
kernel's own loops and register allocation see only the record's short-lived temporaries).

The buffer address is a constant of the prologue only: records take the lane's address from the state,
so no 64-bit constant is materialized (and kept live by ptxas) across the kernel's loops.

An instant (one inline-PTX block, ~22 SASS instructions, no branch): read %globaltimer, load the state,
store one v1 word at slot ``1 + lane + (trailer - room) * write_stride`` when room > 0, else overwrite
the lane's DROPPED slot with the running drop count (1 - room), then store room - 1. A region reads the
time and the state before the blocking call and stores BEGIN + END after it (open_region /
close_region). Records of a lane are a prefix in program order; the DROPPED instant says how many were
lost (no finalize call is needed, and none is written: the kernel's end is not a place a hook can reach).

Invariants a change could break (tests/test_pipelines_compile.py guards them):
* no profiler state crosses the kernel's code (the record block holds no register across calls);
* lanes outside the session's geometry (warp >= warps_per_block, lane >= write_stride, a 2-D or 3-D
  block) get lane = 0xFFFFFFFF and never store;
* the buffer address is an immediate of the prologue only (the kernel's signature is unchanged;
  test_buffer_address_is_baked_and_state_is_in_shared_memory).
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


# The recording thread: the lowest active lane of the warp. Its warp's state: STATE_BYTES * warp.
_LEADER = " activemask.b32 m; mov.u32 lt, %lanemask_lt; and.b32 lt, lt, m; setp.eq.u32 lead, lt, 0;"
_STATE_ADDRESS = " mov.u32 w, %tid.x; shr.u32 w, w, 5; mad.lo.u32 a, w, 16, {base};"


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


def _store_pair(g: Geometry) -> str:
    """PTX that stores a region's BEGIN ($begin time) and END (t1) records from {room, lane} and the lane
    address `b`, handles drops and leaves the new room in `room` (predicate `ok`: this thread records)."""
    return (
        " setp.gt.and.s32 b_live, room, 0, ok; setp.gt.and.s32 e_live, room, 1, ok;"
        f" sub.s32 k, {g.trailer_slot}, room; mad.wide.u32 addr, k, {g.stride_bytes}, b;"
        f" shl.b32 tag, lane, {wire.LANE_SHIFT}; or.b32 m, tag, $bits;"
        " mov.b64 rec, {m, $begin}; @b_live st.global.b64 [addr], rec;"
        f" add.u32 m, m, 1; mov.b64 rec, {{m, t1}}; @e_live st.global.b64 [addr+{g.stride_bytes}], rec;"
        # Past capacity: the lane's DROPPED slot holds the running count of lost records (-room).
        " sub.s32 room, room, 2; setp.lt.and.s32 full, room, 0, ok; neg.s32 k, room;"
        f" or.b32 m, tag, {DROPPED_BITS}; mov.b64 rec, {{m, k}};"
        f" add.u64 addr, b, {g.trailer_slot * g.stride_bytes}; @full st.global.b64 [addr], rec;"
    )


@dataclasses.dataclass(frozen=True)
class KernelState:
    """Per kernel: the shared-memory address (Int32) of its 32 warp states."""

    state_base: object
    geometry: Geometry

    @staticmethod
    def create(geometry: Geometry) -> KernelState:
        """Emit the prologue at the current insertion point (the caller puts it at the kernel's entry):
        every warp's lowest active lane writes its warp's state and the lane's two anchor records."""
        base = Int32(cute.arch.alloc_smem(Int64, 2 * MAX_WARPS, alignment=16).toint())
        g = geometry
        anchor_lo = wire.make_tag(0, wire.ANCHOR_LO_EVENT_ID, INSTANT)
        anchor_hi = wire.make_tag(0, wire.ANCHOR_HI_EVENT_ID, INSTANT)
        asm = (
            "{ .reg .pred lead, ok; .reg .u32 m, lt, w, a, bx, by, bz, gx, gy, n, blk, lane, room, tag, tlo, thi;"
            " .reg .u64 t, addr, rec;"
            + _LEADER
            + _STATE_ADDRESS.format(base="$0")
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
        inline_ptx.asm(None, [base], asm, "r")
        return KernelState(base, geometry)

    def record(self, bits, label: str = "") -> None:
        """One instant record (bits = (event_id << 2) | type, an Int32 or int) by each executing warp's
        lowest active lane. `label` goes into a PTX comment (``/* ikp <label> */``): how tests count the
        records of each call site in the PTX."""
        g = self.geometry
        asm = (
            "{ .reg .pred lead, ok, live, full; .reg .u32 m, lt, w, a, room, lane, k, tag, tlo, thi;"
            " .reg .u64 t, s, b, addr, rec;"
            " mov.u64 t, %globaltimer; mov.b64 {tlo, thi}, t;"
            + _LEADER
            + _STATE_ADDRESS.format(base="$0")
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
        inline_ptx.asm(None, [self.state_base, Int32(bits)], asm, "r,r")

    def timer(self, label: str = ""):
        """%globaltimer (low 32 bits) as an SSA value: a region's begin, kept in a register."""
        asm = f"{{ .reg .u64 t; mov.u64 t, %globaltimer; cvt.u32.u64 $0, t; }} /* ikp {label} */"
        return Int32(inline_ptx.asm(Int32.mlir_type, [], asm, "=r"))

    def load_state(self):
        """This warp's ({room, lane}, lane address) (two Int64). Issued before a blocking call and used
        only after it, its latency hides behind the wait instead of delaying the code that follows."""
        asm = "{ .reg .u32 w, a;" + _STATE_ADDRESS.format(base="$2") + " ld.volatile.shared.v2.u64 {$0, $1}, [a]; }"
        return inline_ptx.asm_pair([self.state_base], asm, "=l,=l,r")

    def open_region(self, label: str = ""):
        """Begin of a region, nothing stored: (begin time, warp state) for close_region."""
        return self.timer(label), self.load_state()

    def close_region(self, token, bits, label: str = "") -> None:
        """End of a region: store its BEGIN (bits) and END (bits + 1) records in two consecutive slots of
        the lane, from the state read by open_region, and advance the lane by two."""
        begin, (state, lane_address) = token
        asm = (
            "{ .reg .pred lead, ok, b_live, e_live, full; .reg .u32 w, a, room, lane, k, tag, m, lt, t1;"
            " .reg .u64 t, b, addr, rec;"
            " mov.u64 t, %globaltimer; cvt.u32.u64 t1, t;"
            " mov.b64 {room, lane}, $2; mov.b64 b, $3;"
            + _LEADER
            + f" setp.lt.and.u32 ok, lane, {self.geometry.write_stride}, lead;"
            + _store_pair(self.geometry).replace("$bits", "$4").replace("$begin", "$1")
            + _STATE_ADDRESS.format(base="$0")
            + f" @ok st.volatile.shared.u32 [a], room; }} /* ikp {label} */"
        )
        operands = [self.state_base, Int32(begin), Int64(state), Int64(lane_address), Int32(bits)]
        inline_ptx.asm(None, operands, asm, "r,r,l,l,r")


def event_bits(base: int, stage, event_type: int):
    """(base + stage) << 2 | type: a Python int for a static stage, else an Int32 computed at run time."""
    if isinstance(stage, int):
        return ((base + stage) << wire.EVENT_ID_SHIFT) | event_type
    return ((Int32(stage) + base) << wire.EVENT_ID_SHIFT) | event_type
