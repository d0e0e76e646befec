"""Device side: the profiler handle built inside ``@cute.kernel`` and ``profile_region``.

Record k of lane ``lane`` lives at ``buf[1 + lane + k * write_stride]`` (host_decode/core/wire.py). Per lane:
k=0 ANCHOR_LO, k=1 ANCHOR_HI (one 64-bit %globaltimer read), user records from k=2, and the last two
slots for [DROPPED] + FINALIZE (event id = SM id). Only the leader thread of a lane writes.

How the cheap path stays cheap (cursor mode, checked by tests/test_device_compile.py):
* the lane's base address, its tag bits and a store limit (``records_per_lane-2`` for the leader,
  0 for everyone else) are computed once when the handle is built;
* the write cursor is a one-element register tensor updated in place, which the DSL carries through
  ``cutlass.range`` loops and ``if`` branches (a Python int attribute would be refused, a rebound-only
  DynamicExpression silently not carried: tests prove every iteration's records are present);
* write_stride is a compile-time constant, so consecutive records are immediate offsets from one
  address and the per-record guard is one compare of the cursor against the limit;
* a record is written as two 32-bit words (tag, timer) that the compiler merges into one 64-bit
  store: the loop-invariant tag register stays put and the timer is read straight into its partner
  register (one CS2R.32), instead of packing a 64-bit value with two MOVs per record.
  Result: 3.5-4 SASS instructions per event (CS2R, ISETP, STG; tests count them from the cubin).
Lean mode (``ProfileSpec.lean``) trades that for zero live registers: the lane's room and index sit in
8 bytes of shared memory per group and each record is one predicated PTX block that re-reads %tid.x
and the state (~12 SASS instructions, no branch): for register-tight kernels with sparse records, where
state held across a hot loop would change its schedule (FA4's per-tile view: +1.6% instead of +4.9%).
Records past capacity are not written; the cursor keeps counting, so finalize knows exactly how many
were dropped and writes that number in a DROPPED instant.
"""

from __future__ import annotations

import dataclasses

import cutlass
from cutlass import Int32, Int64, Uint32, Uint64, cute

from host_decode.core import wire

from .spec import ProfileSpec

BEGIN = int(wire.EventType.BEGIN)
END = int(wire.EventType.END)
INSTANT = int(wire.EventType.INSTANT)
FINALIZE = int(wire.EventType.FINALIZE)


def _pack(timer32, tag32):
    """(timer32 << 32) | tag32 as Int64, both halves zero-extended."""
    return Int64((Uint64(Uint32(timer32)) << 32) | Uint64(Uint32(tag32)))


def _sub_nsw(value, amount: int):
    """value - amount marked no-signed-wrap, so LLVM may fold `room - j > 0` into `room > j` after
    unrolling (one compare per record instead of a subtract and a compare)."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import arith

    flags = ir.Attribute.parse("#arith.overflow<nsw>")
    return Int32(arith.subi(Int32(value).ir_value(), Int32(amount).ir_value(), overflow_flags=flags))


def _leader_atomic_add(counter, leader, amount: int):
    """One `atom.shared.add.u32` on the lane's counter in shared memory, by the leader only; 0 for others.

    Shared, not global: a global atomic's round trip (~hundreds of ns) sat on the critical path of
    every region (measured +110 ns/event/warp vs +27 for cursor mode on an H200, with global counters).
    Inline PTX with a lane-dependent (but, for the leader, exact) address on purpose: written as
    `if leader: atomic_add(...)` with a warp-uniform address, ptxas builds a warp-aggregated atomic
    (vote, popc, shuffle, divergence barrier: ~12 extra instructions per region)."""
    from cutlass._mlir.dialects import llvm

    address = Int32(counter.toint())
    asm = (
        "{ .reg .pred p; .reg .u32 l;"
        " setp.ne.b32 p, $2, 0; mov.u32 $0, 0;"
        " mov.u32 l, %laneid; selp.u32 l, 0, l, p; mad.lo.u32 l, l, 4, $1;"
        f" @p atom.shared.add.u32 $0, [l], {int(amount)}; }}"
    )
    result = llvm.inline_asm(
        Int32.mlir_type,
        [address.ir_value(), Int32(leader).ir_value()],
        asm,
        "=r,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return Int32(result)


def _timer_lo():
    """Low 32 bits of a 64-bit `%globaltimer` read, in inline PTX on purpose: ptxas reads the 64-bit
    register with one CS2R into a register pair, whereas `%globaltimer_lo` costs S2UR + NOP + MOV.
    (Written as `Int32(cute.arch.globaltimer())`, newer LLVM narrows it to `%globaltimer_lo`.)"""
    from cutlass._mlir.dialects import llvm

    value = llvm.inline_asm(
        Int64.mlir_type,
        [],
        "mov.u64 $0, %globaltimer;",
        "=l",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return Int32(Int64(value))


def _asm(result_type, operands, text: str, constraints: str):
    """Inline PTX with side effects: LLVM keeps every instance where it is written (no CSE, no hoisting)."""
    from cutlass._mlir.dialects import llvm

    return llvm.inline_asm(
        result_type,
        [operand.ir_value() for operand in operands],
        text,
        constraints,
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


def _fresh_thread_x():
    """%tid.x read afresh where it is used (lean mode): an ordinary read would be CSE'd with the kernel's
    own and kept live across its loops, which is what lean mode exists to avoid."""
    return Int32(_asm(Int32.mlir_type, [], "mov.u32 $0, %tid.x;", "=r"))


def _load_lean_state(address):
    """(lane << 32) | room of a lean lane, from shared memory; volatile so it is re-read at every record."""
    return Int64(_asm(Int64.mlir_type, [address], "ld.volatile.shared.u64 $0, [$1];", "=l,r"))


def _store_lean_state(address, state):
    _asm(None, [address, Int64(state)], "st.volatile.shared.u64 [$0], $1;", "r,l")


def _event_bits(event_id: int, event_type: int) -> int:
    return (event_id << wire.EVENT_ID_SHIFT) | event_type


def _buffer_tensor(spec: ProfileSpec, buf):
    if buf is not None:
        return buf
    if spec.baked_address is None:
        raise ValueError(
            "ikp_cute.Profiler: no buffer. Pass the session's kernel argument (session.kernel_arg()) "
            "or build the session with bake_address=True"
        )
    ptr = cute.make_ptr(Int64, spec.baked_address, cute.AddressSpace.gmem, assumed_align=8)
    return cute.make_tensor(ptr, cute.make_layout(spec.total_slots))


@dataclasses.dataclass(frozen=True, init=False, eq=False)
class Profiler:
    """Per-lane recording handle. Build it inside ``@cute.kernel``:

        prof = Profiler(spec, prof_buf, group=warp_idx // 4)      # spec: cutlass.Constexpr
        with profile_region(prof, "mma"):
            ...
        prof.finalize()

    group:  the lane's group id in this block (Python int or runtime Int32), 0 <= group < num_groups.
    leader: runtime predicate choosing the writing thread; default lane 0 of warp
            ``group * spec.warps_per_group``. Exactly one thread per (block, group) should be leader
            (atomic mode allows several: each region reserves its own two slots).
    """

    # Frozen dataclass on purpose: the DSL carries a mutable object used inside a runtime `if`/loop as a
    # loop/branch value (and refuses it); a frozen one is passed through read-only. All mutable state
    # (the cursor) lives in a register tensor updated in place, which the DSL carries itself.
    spec: ProfileSpec
    enabled: bool

    def __init__(self, spec: ProfileSpec, buf=None, group=0, leader=None):
        if not isinstance(spec, ProfileSpec):
            raise TypeError(f"Profiler needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "enabled", spec.enabled)
        if not cutlass.const_expr(spec.enabled):
            return
        if spec.lean and leader is not None:
            raise ValueError("ikp_cute.Profiler: lean=True fixes the leader (lane 0 of warp group*warps_per_group); leader= is not accepted")
        state = _setup(spec, _buffer_tensor(spec, buf), group, leader)
        for name, value in state.items():
            object.__setattr__(self, name, value)

    # --- records -----------------------------------------------------------------------------------

    @cute.jit
    def _store(self, k, bits: cutlass.Constexpr):
        """Read the timer and write one record at index k if k is under this thread's limit."""
        timer = _timer_lo()
        words, tag = self._words, self._tag
        if k < self._limit:
            words[k, 0] = tag | bits
            words[k, 1] = timer

    @cute.jit
    def _store_timed(self, k, timer, bits: cutlass.Constexpr):
        words, tag = self._words, self._tag
        if k < self._limit:
            words[k, 0] = tag | bits
            words[k, 1] = timer

    def _record(self, bits: int):
        if cutlass.const_expr(self.spec.lean):
            self._lean_record(bits)
        else:
            self._cursor_record(bits)

    @cute.jit
    def _cursor_record(self, bits: cutlass.Constexpr):
        # The cursor counts the room left (limit - k): the guard is `room > 0`, one compare against an
        # immediate once the loop is unrolled, and k = trailer_slot - room for the leader.
        room = self._cursor[0]
        timer = _timer_lo()
        words, tag = self._words, self._tag
        if room > 0:
            k = self.spec.trailer_slot - room
            words[k, 0] = tag | bits
            words[k, 1] = timer
        self._cursor[0] = _sub_nsw(room, 1)

    # --- lean mode: every record re-derives the lane from %tid.x and shared memory ----------------------

    def _lean_record(self, bits: int):
        _lean_record(self._buffer, self._state_base, _timer_lo(), _fresh_thread_x(), self.spec, bits)

    def _lean_finalize(self):
        _lean_finalize(self._buffer, self._state_base, cute.arch.globaltimer_lo(), _fresh_thread_x(), self.spec)

    @cute.jit
    def _cursor_open(self):
        """Take the next slot and read the begin time; the record is written by _cursor_write later."""
        room = self._cursor[0]
        timer = _timer_lo()
        self._cursor[0] = _sub_nsw(room, 1)
        return room, timer

    @cute.jit
    def _cursor_write(self, room, timer, bits: cutlass.Constexpr):
        words, tag = self._words, self._tag
        if room > 0:
            k = self.spec.trailer_slot - room
            words[k, 0] = tag | bits
            words[k, 1] = timer

    @cute.jit
    def _static_record(self, k, bits: cutlass.Constexpr):
        self._store(k, bits)
        drops = self._cursor
        if self._leader & (k >= self._limit):
            drops[0] = drops[0] + 1  # static mode: the cursor counts drops

    def _reserve(self, count: int):
        """Atomic mode: the leader reserves `count` consecutive records; others get an index never stored
        (their limit is 0)."""
        return _leader_atomic_add(self._counter, self._leader, count) + wire.ANCHOR_RECORDS

    def _fence(self):
        if cutlass.const_expr(self.spec.fence == "cta"):
            cute.arch.fence_acq_rel_cta()

    def begin(self, name: str, index=None):
        """Open region `name`; returns the token end() needs. Prefer ``with profile_region(...)``."""
        if not cutlass.const_expr(self.enabled):
            return None
        bits = _event_bits(self.spec.event_id(name), BEGIN)
        mode = self.spec.mode
        if cutlass.const_expr(mode == "cursor" and self.spec.defer_begin):
            # Slot taken and time read now; the store waits for the region's end, so the timer read's
            # latency overlaps the region body instead of stalling the warp here.
            token = self._cursor_open()
        elif cutlass.const_expr(mode == "cursor"):
            self._record(bits)
            token = None
        elif cutlass.const_expr(mode == "atomic"):
            # The reservation is issued before the begin timer read, and the begin record is stored at
            # the region's end: the atomic's latency overlaps the region body instead of stalling here.
            slot = self._reserve(2)
            token = (slot, _timer_lo())
        else:
            if index is None:
                raise ValueError(f"static mode: profile_region(prof, {name!r}, index=...) needs a slot index")
            token = wire.ANCHOR_RECORDS + 2 * index
            self._static_record(token, bits)
        self._fence()
        return token

    def end(self, name: str, token=None):
        if not cutlass.const_expr(self.enabled):
            return
        self._fence()
        bits = _event_bits(self.spec.event_id(name), END)
        mode = self.spec.mode
        if cutlass.const_expr(mode == "cursor"):
            self._record(bits)
            if cutlass.const_expr(self.spec.defer_begin):
                begin_room, begin_timer = token
                self._cursor_write(
                    begin_room,
                    begin_timer,
                    _event_bits(self.spec.event_id(name), BEGIN),
                )
        elif cutlass.const_expr(mode == "atomic"):
            slot, begin_timer = token
            self._store(slot + 1, bits)
            self._store_timed(slot, begin_timer, _event_bits(self.spec.event_id(name), BEGIN))
        else:
            self._static_record(token + 1, bits)

    def mark(self, name: str, index=None):
        """An instant record. Static mode: `index` is a region index (uses its begin slot)."""
        if not cutlass.const_expr(self.enabled):
            return
        bits = _event_bits(self.spec.event_id(name), INSTANT)
        mode = self.spec.mode
        if cutlass.const_expr(mode == "cursor"):
            self._record(bits)
        elif cutlass.const_expr(mode == "atomic"):
            self._store(self._reserve(1), bits)
        else:
            if index is None:
                raise ValueError(f"static mode: prof.mark({name!r}, index=...) needs a slot index")
            self._static_record(wire.ANCHOR_RECORDS + 2 * index, bits)

    def finalize(self, leader=None):
        """Write [DROPPED] + FINALIZE (SM id) in the lane's last two slots. Call once per lane, at the end.
        Atomic mode with several writers per lane: call it after a barrier that orders all their records,
        with `leader=` naming one of them (default: every writer, which is wrong only in that case)."""
        if not cutlass.const_expr(self.enabled):
            return
        if cutlass.const_expr(self.spec.lean):
            if leader is not None:
                raise ValueError("lean=True: finalize() takes no leader= (the lane leader is fixed)")
            self._lean_finalize()
            return
        self._finalize(self._leader if leader is None else (self._leader & leader))

    @cute.jit
    def _flush(self, writer):
        """smem stage: every thread knows the record count (its cursor moved like the leader's), so the
        32 lanes of the default leader's warp copy in parallel; a custom leader copies alone."""
        # room = limit - 2 - n for every thread (limit 0 for non-leaders), so limit - room = 2 + n.
        count = cutlass.min(Int32(self.spec.trailer_slot), self._limit - self._cursor[0])
        cute.arch.sync_warp()  # the leader's shared-memory stores are visible to its warp
        self._flush_default(writer, count)

    def _flush_default(self, writer, count):
        spec = self.spec
        if cutlass.const_expr(self._default_leader):
            lane_in_warp = cute.arch.lane_idx()
            in_leader_warp = cute.arch.warp_idx() == self._group * spec.warps_per_group
            _flush_lane(
                self._lane,
                self._staged,
                count,
                lane_in_warp,
                32,
                in_leader_warp & self._in_range,
            )
        else:
            _flush_lane(self._lane, self._staged, count, Int32(0), 1, writer)

    @cute.jit
    def _finalize(self, writer):
        spec = self.spec
        if cutlass.const_expr(spec.mode == "cursor"):
            dropped = -self._cursor[0]
        elif cutlass.const_expr(spec.mode == "atomic"):
            dropped = _leader_atomic_add(self._counter, writer, 0) + wire.ANCHOR_RECORDS - spec.trailer_slot
        else:
            dropped = self._cursor[0]
        if cutlass.const_expr(spec.stage == "smem"):
            self._flush(writer)
        timer = cute.arch.globaltimer_lo()
        records, tag = self._lane, self._tag
        if writer:
            _write_trailer(records, tag, dropped, timer, spec)


@cute.jit
def _setup(spec: cutlass.Constexpr, tensor, group, leader):
    """Per-lane state, computed once: write it as attributes of the frozen Profiler."""
    bx, by, bz = cute.arch.block_idx()
    gx, gy, gz = cute.arch.grid_dim()
    block = Int32(bx + by * gx + bz * gx * gy)
    state_base, lean_leader, lean_state = None, None, None
    if cutlass.const_expr(spec.lean):
        # The lane's (lane << 32) | room, written by the thread that the records' own %tid.x test calls
        # the leader of its slot, so every record reads a state its own thread wrote; the lane's group
        # is therefore the warp's (warp_idx // warps_per_group).
        state_base = Int32(cute.arch.alloc_smem(Int64, spec.num_groups, alignment=8).toint())
        tid, _, _ = cute.arch.thread_idx()
        lean_leader, lean_state = _lean_slot(state_base, Int32(tid), spec)
        group = Int32(tid) >> ((32 * spec.warps_per_group).bit_length() - 1)
        leader = lean_leader
    lane = block * spec.num_groups + group
    default_leader = leader is None
    if cutlass.const_expr(default_leader):
        leader = (cute.arch.warp_idx() == group * spec.warps_per_group) & (cute.arch.lane_idx() == 0)
    # Lanes past write_stride (grid larger than the session was sized for) write nothing.
    leader = leader & (lane < spec.write_stride)
    limit = cutlass.select_(leader, Int32(spec.trailer_slot), Int32(0))
    tag = Int32(lane) << wire.LANE_SHIFT
    records = _lane_records(tensor, lane, spec)
    words = cute.make_tensor(
        cute.recast_ptr(tensor.iterator + 1 + lane, dtype=Int32),
        cute.make_layout((spec.records_per_lane, 2), stride=(2 * spec.write_stride, 1)),
    )
    staged = None
    if cutlass.const_expr(spec.stage == "smem"):
        # Cursor records go to this lane's slice of a static shared-memory array; finalize copies them
        # to the buffer. Same (tag, timer) word pairs, 8 bytes per record.
        stage = cute.arch.alloc_smem(Int64, spec.num_groups * spec.records_per_lane, alignment=16)
        staged = cute.make_tensor(
            stage + group * spec.records_per_lane,
            cute.make_layout(spec.records_per_lane),
        )
        words = cute.make_tensor(
            cute.recast_ptr(stage + group * spec.records_per_lane, dtype=Int32),
            cute.make_layout((spec.records_per_lane, 2), stride=(2, 1)),
        )
    counter = None
    if cutlass.const_expr(spec.mode == "atomic"):
        # Per-lane reservation counters in static shared memory (4 bytes per group), zeroed by thread 0
        # before a block barrier: atomic mode needs every thread of the block to build the Profiler.
        counters = cute.arch.alloc_smem(Int32, spec.num_groups, alignment=4)
        tx, ty, tz = cute.arch.thread_idx()
        if (tx + ty + tz) == 0:
            for g in cutlass.range_constexpr(spec.num_groups):
                counters[g] = Int32(0)
        cute.arch.sync_threads()
        counter = counters + group
    if cutlass.const_expr(spec.lean):
        # Out-of-range lanes get room -2 (limit 0): their records and trailer are never written.
        if lean_leader:
            _store_lean_state(lean_state, (Int64(lane) << 32) | Int64(Uint32(limit - wire.ANCHOR_RECORDS)))
    # Register cursor (cursor mode) / drop counter (static mode): carried in place through loops.
    cursor = cute.make_rmem_tensor(cute.make_layout(1), Int32)
    if cutlass.const_expr(spec.mode == "cursor"):
        cursor[0] = limit - wire.ANCHOR_RECORDS  # room left; <= 0 for non-leaders
    else:
        cursor[0] = Int32(0)  # static mode: records dropped
    if leader & (lane == 0):
        tensor[0] = Int64((Int64(spec.num_groups) << 32) | Int64(gx * gy * gz))
    now = cute.arch.globaltimer()
    if leader:
        records[0] = _pack(Int32(now), tag | _event_bits(wire.ANCHOR_LO_EVENT_ID, INSTANT))
        records[1] = _pack(Int32(now >> 32), tag | _event_bits(wire.ANCHOR_HI_EVENT_ID, INSTANT))
    return {
        "_leader": leader,
        "_limit": limit,
        "_tag": tag,
        "_lane": records,
        "_words": words,
        "_staged": staged,
        "_counter": counter,
        "_cursor": cursor,
        "_group": group,
        "_in_range": lane < spec.write_stride,
        "_default_leader": default_leader,
        "_buffer": tensor,
        "_state_base": state_base,
    }


def _lean_slot(state_base, tid, spec: ProfileSpec):
    """(is this thread a lane leader, shared-memory address of its lane's 8-byte state)."""
    threads = 32 * spec.warps_per_group  # a power of two (ProfileSpec checks it)
    slot = tid >> (threads.bit_length() - 1)
    return ((tid & (threads - 1)) == 0) & (slot < spec.num_groups), state_base + slot * 8


def _lane_records(buffer, lane, spec: ProfileSpec):
    return cute.make_tensor(buffer.iterator + 1 + lane, cute.make_layout(spec.records_per_lane, stride=spec.write_stride))


def _lean_record(buffer, state_base, timer, tid, spec: ProfileSpec, bits: int):
    """One lean record as a single predicated PTX block: no branch, so the leader's warp does not
    diverge, and the only latency it waits on is the shared-memory load of the lane state (the records
    of a warp-group role sit on that group's critical path: its other warps wait at the next MMA)."""
    threads = 32 * spec.warps_per_group  # a power of two (ProfileSpec checks it)
    asm = (
        "{ .reg .pred p, q; .reg .u32 r, s, a, room, lane, k, tag; .reg .u64 off, addr, rec;"
        f" and.b32 r, $3, {threads - 1}; shr.u32 s, $3, {threads.bit_length() - 1};"
        f" setp.eq.u32 p, r, 0; setp.lt.and.u32 p, s, {spec.num_groups}, p;"
        " mad.lo.u32 a, s, 8, $0;"
        " @p ld.volatile.shared.v2.u32 {room, lane}, [a];"
        " setp.gt.and.s32 q, room, 0, p;"
        f" sub.s32 k, {spec.trailer_slot}, room; mad.lo.s32 k, k, {spec.write_stride}, lane;"
        " mul.wide.s32 off, k, 8; add.s64 addr, $1, off;"
        f" shl.b32 tag, lane, {wire.LANE_SHIFT}; or.b32 tag, tag, {bits};"
        " mov.b64 rec, {tag, $2};"
        " @q st.global.b64 [addr+8], rec;"
        " sub.s32 room, room, 1;"
        " @p st.volatile.shared.u32 [a], room; }"
    )
    base = Int64(buffer.iterator.toint())
    _asm(None, [Int32(state_base), base, Int32(timer), Int32(tid)], asm, "r,l,r,r")


@cute.jit
def _lean_finalize(buffer, state_base, timer, tid, spec: cutlass.Constexpr):
    leader, address = _lean_slot(state_base, tid, spec)
    if leader:
        state = _load_lean_state(address)
        room = Int32(state)
        lane = Int32(state >> 32)
        if lane < spec.write_stride:
            _write_trailer(_lane_records(buffer, lane, spec), lane << wire.LANE_SHIFT, -room, timer, spec)


@cute.jit
def _write_trailer(records, tag, dropped, timer, spec: cutlass.Constexpr):
    """[DROPPED (count)] + FINALIZE (SM id) in the lane's last two slots."""
    if dropped > 0:
        records[spec.trailer_slot] = _pack(dropped, tag | _event_bits(wire.DROPPED_EVENT_ID, INSTANT))
    sm_bits = (cute.arch.smid() & wire.MAX_EVENT_ID) << wire.EVENT_ID_SHIFT
    records[spec.records_per_lane - 1] = _pack(timer, tag | sm_bits | FINALIZE)


@cute.jit
def _flush_lane(records, staged, count, first, step, active):
    """Copy staged records 2 .. count-1 (smem) to the lane's slots (global), `step` threads at a time."""
    if active:
        for k in cutlass.range(first + wire.ANCHOR_RECORDS, count, step):
            records[k] = staged[k]


class profile_region:
    """``with profile_region(prof, "name"):`` records begin/end of the enclosed code on prof's lane.

    Works in any branch or ``cutlass.range`` loop, nested to any depth. Static mode needs ``index=``
    (the region's slot pair: records 2+2*index and 3+2*index). The name is mapped to an event id when
    the kernel is traced (prof.spec.events), so ids are fixed at compile time.
    """

    def __init__(self, prof: Profiler, name: str, index=None):
        self.prof = prof
        self.name = name
        self.index = index
        self._token = None

    def __enter__(self):
        self._token = self.prof.begin(self.name, self.index)
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.prof.end(self.name, self._token)
        return False
