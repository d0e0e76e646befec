"""Device side: ``Profiler`` (built inside ``@cute.kernel`` with ``Profiler.create``), one recorder per
mode, and ``profile_region`` / ``Profiler.region``.

Record k of lane ``lane`` lives at ``buf[1 + lane + k * write_stride]`` (host_decode/core/wire.py). Per
lane: k=0 ANCHOR_LO, k=1 ANCHOR_HI (one 64-bit %globaltimer read), user records from k=2, and the last
two slots for [DROPPED] + FINALIZE (event id = SM id). Only the lane's leader thread writes it.

Invariants a change could break, and the test that guards each (tests/test_device_compile.py unless
named otherwise; GPU ones in tests/test_device_gpu.py):
* No store passes a lane's capacity, in any mode: every cursor record is guarded by `room > 0` (an END
  right after its BEGIN by the BEGIN's, its slot being at most the DROPPED slot), an atomic region's two
  slots and a lean leaf region's two slots by one check, a static index by an unsigned range check
  (test_overflow_is_dropped_on_device_and_counted_exactly, memcheck in gpu/device_suite.py).
* Every record not stored is counted: in the lane's DROPPED instant, or, for a thread whose lane does
  not exist (dynamic group out of range, grid past write_stride), in the stray word after the v1 buffer
  (test_dynamic_bad_group_is_dropped_and_counted, test_grid_larger_than_session_*).
* A disabled spec compiles to exactly the uninstrumented kernel (test_disabled_ptx_identical_*).
* The cursor is carried through ``cutlass.range`` loops and ``if`` branches: it is a one-element
  register tensor updated in place (test_cursor_is_carried_through_dynamic_loop, and its negative control
  test_carry_check_catches_a_stale_cursor).
* Misuse that is visible while tracing is a trace-time error naming the call: a constant group or index
  out of range, end() without the token a mode needs, begin/end names or blocks that disagree, a region
  left open at finalize(), a record after finalize(), a buffer smaller than the spec (test_misuse_*).

How the default (cursor) record stays cheap: the lane's base address, tag bits and room are computed once
in ``Profiler.create``; write_stride is a compile-time constant, so records are immediate offsets from
one address and the guard is one compare of the room against an immediate once loops are unrolled; a
record is two 32-bit words (tag, timer) merged into one 64-bit store; and a region's END that follows its
BEGIN with nothing recorded in between (same control-flow level) shares the BEGIN's compare: its slot is
the next one, at most the lane's DROPPED slot, so it stays inside the lane whatever the room. SASS per
region: two timer reads (CS2R), one compare (ISETP), two stores (STG), plus a MOV per record with the
CUDA 12 ptxas (test_sass_per_event_budget, test_cursor_record_ablation,
test_end_shares_its_begins_check_only_when_adjacent). In an issue-bound kernel the compare was ~40% of a
record's time (docs/device.md "Where a record's time goes"). Sharing one check among longer straight-line
groups was built and lost records on an H100 (docs/device.md); not shipped.
"""

from __future__ import annotations

import dataclasses
import re

import cutlass
from cutlass import Boolean, Int32, Int64, Uint32, Uint64, const_expr, cute
from cutlass.cutlass_dsl import if_generate

from host_decode.core import wire

from . import inline_ptx, ring, window
from .spec import ProfileSpec, ProfileUsageError

BEGIN = int(wire.EventType.BEGIN)
END = int(wire.EventType.END)
INSTANT = int(wire.EventType.INSTANT)
FINALIZE = int(wire.EventType.FINALIZE)

# --- small PTX / MLIR helpers ---------------------------------------------------------------------------


def event_bits(event_id: int, event_type: int) -> int:
    """A record's low tag bits for `event_id` and `event_type` (the lane's bits are OR-ed in by the recorder)."""
    return (event_id << wire.EVENT_ID_SHIFT) | event_type


def _pack(timer32, tag32):
    """(timer32 << 32) | tag32 as Int64, both halves zero-extended."""
    return Int64((Uint64(Uint32(timer32)) << 32) | Uint64(Uint32(tag32)))


def timer_lo():
    """Low 32 bits of a 64-bit `%globaltimer` read: ptxas reads it with one CS2R, whereas
    `%globaltimer_lo` costs S2UR + NOP + MOV."""
    return _timer_read()[0]


def _timer_read():
    """(timer_lo(), the inline-PTX op reading it): a lean BEGIN places ops before its timer read."""
    read = inline_ptx.asm(Int64.mlir_type, [], "mov.u64 $0, %globaltimer;", "=l")
    return Int32(Int64(read)), read.owner


def sub_nsw(value, amount):
    """value - amount marked no-signed-wrap, so LLVM folds `room - j > 0` into `room > j` after
    unrolling (one compare per record against an immediate instead of a subtract and a compare)."""
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import arith

    flags = ir.Attribute.parse("#arith.overflow<nsw>")
    return Int32(arith.subi(Int32(value).ir_value(), Int32(amount).ir_value(), overflow_flags=flags))


def _current_block():
    from cutlass._mlir import ir

    return ir.InsertionPoint.current.block


def _source_site() -> str:
    """file:line of the kernel code that made the profiling call (for trace-time errors)."""
    import inspect

    here = __file__
    for frame in inspect.stack()[2:]:
        module = frame.frame.f_globals.get("__name__", "")
        if frame.filename != here and module.split(".")[0] not in _DSL_PACKAGES:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


_DSL_PACKAGES = ("cutlass", "nvidia_cutlass_dsl")  # the DSL's own frames (a user path may say "cutlass")


def _counter_add(counter, amount: int):
    """`atom.shared.add.u32` by every thread, unpredicated: `counter` is the lane's counter for its leader
    and a private dummy word for every other thread (_atomic_setup), so no branch guards the atomic (a
    predicated one compiles to a branch around it, and the compare of its result then waits for it
    ahead of the region). Returns the old count: the lane's for its leader, meaningless for others
    (whose stores are all predicated on the leader). Inline PTX with a lane-dependent address: with a
    warp-uniform one ptxas builds a warp-aggregated atomic (vote, popc, shuffle)."""
    asm = f"atom.shared.add.u32 $0, [$1], {int(amount)};"
    return Int32(inline_ptx.asm(Int32.mlir_type, [Int32(counter.toint())], asm, "=r,r"))


def _count_stray(lane, spec: ProfileSpec, count):
    """Add `count` to the stray-record word after the lane's v1 buffer, or with a capture window to the
    ring's STRAY word (a stray thread's launch is not known: ikp_cute/ring.py); one global reduction,
    error path only."""
    if const_expr(spec.window_slots > 0):
        address = Int64(lane.window_buffer.iterator.toint()) + 4 * ring.STRAY
    else:
        address = Int64(lane.buffer.iterator.toint()) + spec.stray_slot * 8
    inline_ptx.asm(None, [address, Int64(count)], "red.global.add.u64 [$0], $1;", "l,l")


def _buffer_tensor(spec: ProfileSpec, buf):
    if buf is None:
        if spec.baked_address is None:
            raise ProfileUsageError(
                f"Profiler.create at {_source_site()}: no buffer. Pass the session's kernel argument "
                "(session.kernel_arg()) or build the Session with bake_address=True"
            )
        ptr = cute.make_ptr(Int64, spec.baked_address, cute.AddressSpace.gmem, assumed_align=8)
        return cute.make_tensor(ptr, cute.make_layout(spec.buffer_slots)), None
    size = cute.size(buf.shape)
    if isinstance(size, int):
        if size < spec.buffer_slots:
            raise ProfileUsageError(
                f"Profiler.create at {_source_site()}: the buffer has {size} int64 slots but the spec needs "
                f"{spec.buffer_slots} "
                f"({spec.num_blocks} blocks x {spec.num_groups} groups, write_stride {spec.write_stride}, "
                f"{spec.records_per_lane} records per lane): pass the kernel_arg() of the Session whose spec "
                "this is"
            )
        return buf, None
    return buf, Int32(size) >= spec.buffer_slots  # dynamic size: a short buffer disables recording


# --- where a lane's records go, computed once ---------------------------------------------------------


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
        _check_constant_group(spec, group)
        return _lane(spec, buffer, group, leader, buffer_ok)


def _check_constant_group(spec: ProfileSpec, group) -> None:
    """A constant group out of range is a trace-time error in every mode (a dynamic one is dropped and
    counted on the device)."""
    if isinstance(group, int) and not 0 <= group < spec.num_groups:
        raise ProfileUsageError(
            f"Profiler.create: group={group} is outside 0..{spec.num_groups - 1} (the spec has "
            f"{spec.num_groups} groups) at {_source_site()}"
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
        records[0] = _pack(Int32(now), tag | event_bits(wire.ANCHOR_LO_EVENT_ID, INSTANT))
        records[1] = _pack(Int32(now >> 32), tag | event_bits(wire.ANCHOR_HI_EVENT_ID, INSTANT))
    return Lane(leader, stray, tag, records, words, buffer, group, block, spec, window_buffer, counted)


@cute.jit
def _write_trailer(records, tag, dropped, timer, writer, spec: cutlass.Constexpr):
    """[DROPPED (count)] + FINALIZE (SM id) in the lane's last two slots, by `writer`."""
    if writer:
        if dropped > 0:
            records[spec.trailer_slot] = _pack(dropped, tag | event_bits(wire.DROPPED_EVENT_ID, INSTANT))
        sm_bits = (cute.arch.smid() & wire.MAX_EVENT_ID) << wire.EVENT_ID_SHIFT
        records[spec.records_per_lane - 1] = _pack(timer, tag | sm_bits | FINALIZE)


@cute.jit
def _finish(lane: Lane, dropped, attempted, writer, spec: cutlass.Constexpr):
    """The trailer of a lane (its writer), or the stray count (a thread without a lane)."""
    _write_trailer(lane.records, lane.tag, dropped, cute.arch.globaltimer_lo(), writer, spec)
    if lane.stray & (attempted > 0):
        _count_stray(lane, spec, attempted)


@cute.jit
def _store_if(pred, words, k, tag_bits, timer):
    if pred:
        words[k, 0] = tag_bits
        words[k, 1] = timer


# --- recorders: one per mode, chosen once by Profiler.create ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class CursorRecorder:
    """mode="cursor": records stored at once through a register cursor holding the room left
    (room = capacity - records taken; <= 0 for non-leaders, so their checks always fail)."""

    needs_token = False
    lane: Lane
    room: cute.Tensor  # one Int32 in registers, carried in place through loops and branches
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, lane: Lane):
        return cls(lane, _room_register(spec, lane), spec)

    def words(self):
        """The lane's slots as (tag, timer) int32 pairs: where this recorder's records go."""
        return self.lane.words

    @cute.jit
    def record(self, bits: cutlass.Constexpr):
        """One record guarded by its own `room > 0`; returns that guard."""
        return self._store(bits, None)

    @cute.jit
    def _store(self, bits: cutlass.Constexpr, fits):
        # The room is read, then the timer, then the store is guarded and the room written back: the
        # order validated on the H100 (the compare placed before the timer read lost records there;
        # docs/device.md "The amortized check that was withdrawn").
        room = self.room[0]
        timer = timer_lo()
        if const_expr(fits is None):
            fits = room > 0
        _store_if(fits, self.words(), self.spec.trailer_slot - room, self.lane.tag | bits, timer)
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
        self._store(event_bits(event_id, END), token_value if adjacent else None)

    def mark(self, event_id: int, index):
        self.record(event_bits(event_id, INSTANT))

    def finalize(self, leader):
        writer = self.lane.leader if leader is None else (self.lane.leader & leader)
        room = self.room[0]
        _finish(self.lane, -room, -room, writer, self.spec)


def _room_register(spec: ProfileSpec, lane: Lane):
    room = cute.make_rmem_tensor(cute.make_layout(1), Int32)
    # leaders: the user capacity; strays: 0 (nothing fits, -room counts their records); others: -1
    room[0] = cutlass.select_(lane.leader, Int32(spec.user_capacity), cutlass.select_(lane.stray, Int32(0), Int32(-1)))
    return room


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
        self._store(event_bits(event_id, END), fits)
        self._write_begin(room, timer, event_bits(event_id, BEGIN), fits)

    @cute.jit
    def _write_begin(self, room, timer, bits: cutlass.Constexpr, fits):
        if const_expr(fits is None):
            fits = room > 0
        _store_if(fits, self.words(), self.spec.trailer_slot - room, self.lane.tag | bits, timer)


@dataclasses.dataclass(frozen=True)
class SmemRecorder(CursorRecorder):
    """mode="smem": cursor records go to this lane's slice of static shared memory; finalize() copies
    them to the buffer with the leader's whole warp."""

    staged: cute.Tensor = None

    @classmethod
    def create(cls, spec: ProfileSpec, lane: Lane):
        stage = _smem_stage(spec)
        # Every thread of the leader's warp copies the lane out at finalize, so each thread stages in its
        # group's slice; a group out of range (a stray thread: compares, never stores) gets slice 0.
        group_ok = Uint32(lane.group) < Uint32(spec.num_groups)
        first = cutlass.select_(group_ok, lane.group, Int32(0)) * spec.records_per_lane
        staged = cute.make_tensor(stage + first, cute.make_layout(spec.records_per_lane))
        return cls(lane, _room_register(spec, lane), spec, staged)

    def words(self):
        return cute.make_tensor(
            cute.recast_ptr(self.staged.iterator, dtype=Int32),
            cute.make_layout((self.spec.records_per_lane, 2), stride=(2, 1)),
        )

    def finalize(self, leader):
        if leader is not None:
            raise ProfileUsageError(
                f"prof.finalize(leader=...) at {_source_site()}: mode='smem' takes no leader= (the default "
                "leader's warp copies the lane out)"
            )
        _smem_finalize(self.lane, self.staged, self.room[0], self.spec)


_SMEM_STAGES: list = []  # (kernel op, spec, pointer): one stage per kernel and spec


def _smem_stage(spec: ProfileSpec):
    """The block's staging area for `spec` (num_groups x records_per_lane int64), allocated once per
    kernel at its entry: every Profiler of the spec (one per role, as kernels build them) shares it, so
    the kernel holds the one stage ProfileSpec sized and checked, not one per Profiler.create."""
    kernel = inline_ptx.kernel_op()
    for known_kernel, known_spec, stage in _SMEM_STAGES:
        if known_spec == spec and kernel is not None and inline_ptx.same_op(known_kernel, kernel):
            return stage
    with inline_ptx.at_kernel_entry():
        stage = cute.arch.alloc_smem(Int64, spec.num_groups * spec.records_per_lane, alignment=16)
    _SMEM_STAGES.append((kernel, spec, stage))
    del _SMEM_STAGES[:-8]  # kernels traced earlier are done with theirs
    return stage


@cute.jit
def _smem_finalize(lane: Lane, staged, room, spec: cutlass.Constexpr):
    count = cutlass.min(Int32(spec.trailer_slot), spec.trailer_slot - room)  # anchors + records kept
    cute.arch.sync_warp()  # the leader's shared-memory stores are visible to its warp
    leader_warp = cute.arch.warp_idx() == lane.group * spec.warps_per_group
    copying = cute.arch.vote_any_sync(lane.leader) & leader_warp
    count = cute.arch.shuffle_sync(count, 0)
    if copying:
        for k in cutlass.range(cute.arch.lane_idx() + wire.ANCHOR_RECORDS, count, 32):
            lane.records[k] = staged[k]
    _finish(lane, -room, -room, lane.leader, spec)


@dataclasses.dataclass(frozen=True)
class LeanRecorder:
    """mode="lean": no state in registers between regions. Each lane's state is 8 bytes of shared memory
    (records taken, the lane's tag bits), re-found from a fresh %tid.x at every record site.

    A record on its own (a mark, a BEGIN, an END) loads the state, stores, and writes the count back,
    all predicated on the lane's leader (no branch, so the leader's warp does not diverge); its store
    waits for the load. A leaf region (its END in the BEGIN's block, nothing recorded between them, no
    loop inside) instead takes both of its slots at its BEGIN with one shared-memory atomic (every other
    thread's atomic goes to a dummy word) and stores both records at its END: nothing inside the region
    waits on shared memory. Slots are taken in program order either way, so a lane stays in time order
    as the cursor's does."""

    needs_token = False
    buffer: cute.Tensor
    state_base: Int32
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        if leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {_source_site()}: mode='lean' fixes the leader (lane 0 of warp "
                "group*warps_per_group); leader= is not accepted"
            )
        _check_constant_group(spec, group)  # lean takes the group from the warp, but a bad one is still a bug
        return cls(buffer, _lean_setup(spec, buffer, buffer_ok), spec)

    def begin(self, event_id: int, index):
        timer, timer_read = _timer_read()
        record = self.record(event_bits(event_id, BEGIN), timer)
        return _LeanBegin(timer, timer_read, record, _current_block(), [False])

    def end(self, event_id: int, token_value, adjacent: bool):
        # with fence="cta" every record stays where it is traced: a BEGIN's record precedes its fence
        if token_value is not None and adjacent and self.spec.fence == "none" and token_value.can_pair():
            self._pair(token_value, event_id)
        else:
            self.record(event_bits(event_id, END), timer_lo())

    def mark(self, event_id: int, index):
        self.record(event_bits(event_id, INSTANT), timer_lo())

    def record(self, bits: int, timer):
        """One record on its own; returns its inline-PTX op."""
        operands = [Int32(self.state_base), Int64(self.buffer.iterator.toint()), Int32(timer), fresh_thread_x()]
        return inline_ptx.asm(None, operands, _lean_alone_ptx(bits, self.spec), "r,l,r,r")

    def take_pair(self) -> tuple:
        """Take a leaf region's two slots (emitted at its BEGIN); returns what store_pair needs."""
        operands = [Int32(self.state_base), fresh_thread_x()]
        return inline_ptx.asm_results((Int32, Int32, Int32), operands, _lean_take_ptx(2, self.spec), "=r,=r,=r,r,r")

    def store_pair(self, took: tuple, bits: tuple[int, int], timers: tuple):
        """Store a leaf region's two records (emitted at its END) at the slots take_pair took."""
        operands = [*took, Int64(self.buffer.iterator.toint()), *(Int32(t) for t in timers)]
        inline_ptx.asm(None, operands, _lean_pair_ptx(bits, self.spec), "r,r,r,l,r,r")

    def _pair(self, begin: _LeanBegin, event_id: int):
        """The BEGIN's record op becomes take_pair (before the BEGIN's timer read), and both records are
        stored here."""
        from cutlass._mlir import ir

        begin.paired[0] = True
        with ir.InsertionPoint(begin.timer_read):  # the slots are taken before the BEGIN's time is read
            took = self.take_pair()
        _erase_with_its_thread_x(begin.record)
        bits = (event_bits(event_id, BEGIN), event_bits(event_id, END))
        self.store_pair(took, bits, (begin.timer, timer_lo()))

    def finalize(self, leader):
        if leader is not None:
            raise ProfileUsageError(
                f"prof.finalize(leader=...) at {_source_site()}: mode='lean' takes no leader= "
                "(the lane leader is fixed)"
            )
        _lean_finalize(self.buffer, self.state_base, cute.arch.globaltimer_lo(), fresh_thread_x(), self.spec)


_THREAD_X = "mov.u32 $0, %tid.x;"


def fresh_thread_x():
    """%tid.x read afresh where it is used: an ordinary read would be CSE'd and kept live across loops."""
    return Int32(inline_ptx.asm(Int32.mlir_type, [], _THREAD_X, "=r"))


def _erase_with_its_thread_x(op):
    """Erase `op`, and the fresh %tid.x reads it alone used (inline PTX with side effects: LLVM keeps them)."""
    from cutlass._mlir import ir

    owners = [value.owner for value in op.operation.operands if not isinstance(value.owner, ir.Block)]
    op.operation.erase()
    for owner in owners:
        reads_thread_x = owner.name == "llvm.inline_asm" and (
            ir.StringAttr(owner.attributes["asm_string"]).value == _THREAD_X
        )
        if reads_thread_x and not list(owner.results[0].uses):
            owner.erase()


_LEAN_NO_TAG = 0xFFFFFFFF  # tag of a lane that does not exist (a real one has its 12 low bits clear)
_LEAN_NO_LANE = 1 << 30  # records taken by a lane that does not exist: never below the capacity


def _lean_slot(state_base, tid, spec: ProfileSpec):
    """(is this thread a lane leader, shared-memory address of its lane's 8-byte state)."""
    threads = 32 * spec.warps_per_group  # a power of two (ProfileSpec checks it)
    slot = tid >> (threads.bit_length() - 1)
    return ((tid & (threads - 1)) == 0) & (slot < spec.num_groups), state_base + slot * 8


@cute.jit
def _lean_setup(spec: cutlass.Constexpr, buffer, buffer_ok):
    # the lanes' states, then one dummy word per lane of a warp (the other threads' atomics: _lean_take_ptx)
    state_base = Int32(cute.arch.alloc_smem(Int32, 2 * spec.num_groups + 32, alignment=8).toint())
    tid, _, _ = cute.arch.thread_idx()
    lean_leader, address = _lean_slot(state_base, Int32(tid), spec)
    group = Int32(tid) >> ((32 * spec.warps_per_group).bit_length() - 1)
    lane = Lane.create(spec, buffer, group, lean_leader, buffer_ok)
    if lean_leader:
        # A lane that does not exist, or a buffer too short for the spec (dynamic size): records taken start
        # at 2**30, so that none fits, and the tag marks it, so that finalize writes no trailer either.
        taken = cutlass.select_(lane.leader, Int32(0), Int32(_LEAN_NO_LANE))
        tag = cutlass.select_(lane.leader, lane.tag, Int32(Uint32(_LEAN_NO_TAG)))
        state = (Int64(Uint32(tag)) << 32) | Int64(Uint32(taken))
        inline_ptx.asm(None, [address, state], "st.volatile.shared.u64 [$0], $1;", "r,l")
    return state_base


def _lean_locate(spec: ProfileSpec) -> str:
    """PTX: p = this thread (%tid.x in $tid) leads its lane; a = the address of its lane's state."""
    threads = 32 * spec.warps_per_group
    return (
        f" and.b32 r, $tid, {threads - 1}; shr.u32 s, $tid, {threads.bit_length() - 1};"
        f" setp.eq.u32 p, r, 0; setp.lt.and.u32 p, s, {spec.num_groups}, p; mad.lo.u32 a, s, 8, $state;"
    )


def _lean_address(spec: ProfileSpec) -> str:
    """PTX: addr = the byte address of slot `taken` of the lane whose tag is `tag`, less the anchors and the
    header (the stores' immediate offset: _lean_first_offset)."""
    return (
        f" shr.u32 lane, tag, {wire.LANE_SHIFT}; mad.lo.u32 k, taken, {spec.write_stride}, lane;"
        " mad.wide.u32 addr, k, 8, $buffer;"
    )


def _lean_first_offset(spec: ProfileSpec) -> int:
    return 8 * (1 + wire.ANCHOR_RECORDS * spec.write_stride)


def numbered_ptx(text: str, names: list[str]) -> str:
    """Inline PTX written with named operands (`$state`, `$tid`, ...): each `$name` becomes `$i`, its
    position in `names` (no name may be a prefix of another)."""
    for i, name in enumerate(names):
        text = text.replace(f"${name}", f"${i}")
    return text


def _lean_alone_ptx(bits: int, spec: ProfileSpec) -> str:
    """One record: load the lane's state, store if it fits (a record past the capacity is counted by the
    state's count at finalize), write the count back. Operands: state base, buffer, timer, %tid.x."""
    text = (
        "{ .reg .pred p, q; .reg .u32 r, s, a, taken, tag, lane, k; .reg .u64 addr;"
        + _lean_locate(spec)
        + " @p ld.volatile.shared.v2.u32 {taken, tag}, [a];"
        f" setp.lt.and.u32 q, taken, {spec.user_capacity}, p;"
        + _lean_address(spec)
        + f" or.b32 tag, tag, {bits}; @q st.global.v2.u32 [addr+{_lean_first_offset(spec)}], {{tag, $timer}};"
        " add.u32 taken, taken, 1; @p st.volatile.shared.u32 [a], taken; }"
    )
    return numbered_ptx(text, ["state", "buffer", "timer", "tid"])


def _lean_take_ptx(count: int, spec: ProfileSpec) -> str:
    """Take `count` slots with one atomic add on the lane's count, and load its tag: neither result is
    waited for here. Every other thread adds to a dummy word of its own, one bank per lane of the warp (a
    predicated atomic compiles to a branch around it), and loads nothing. Results: taken, tag (the
    leader's), leader (1 or 0); operands: state base, %tid.x."""
    text = (
        "{ .reg .pred p; .reg .u32 r, s, a, d;"
        + _lean_locate(spec)
        + f" and.b32 d, $tid, 31; mad.lo.u32 d, d, 4, $state; add.u32 d, d, {8 * spec.num_groups};"
        " selp.u32 a, a, d, p; selp.u32 $leader, 1, 0, p;"
        f" atom.shared.add.u32 $taken, [a], {count}; @p ld.shared.u32 $tag, [a+4]; }}"
    )
    return numbered_ptx(text, ["taken", "tag", "leader", "state", "tid"])


def _lean_pair_ptx(bits: tuple[int, int], spec: ProfileSpec) -> str:
    """A leaf region's two records at the slots its BEGIN took, under one check that the BEGIN fits: the
    END's slot is then at most the lane's DROPPED slot (inside the lane), past the capacity and counted,
    and finalize's DROPPED record replaces it (as a cursor END sharing its BEGIN's check). Operands:
    taken, tag, leader, buffer, BEGIN timer, END timer."""
    first = _lean_first_offset(spec)
    text = (
        "{ .reg .pred q; .reg .u32 taken, tag, lane, k, b, e; .reg .u64 addr;"
        " mov.u32 taken, $taken; mov.u32 tag, $tag;"
        f" setp.lt.u32 q, taken, {spec.user_capacity}; setp.ne.and.u32 q, $leader, 0, q;"
        + _lean_address(spec)
        + f" or.b32 b, tag, {bits[0]}; @q st.global.v2.u32 [addr+{first}], {{b, $t0}};"
        f" or.b32 e, tag, {bits[1]}; @q st.global.v2.u32 [addr+{first + 8 * spec.write_stride}], {{e, $t1}}; }}"
    )
    return numbered_ptx(text, ["taken", "tag", "leader", "buffer", "t0", "t1"])


@dataclasses.dataclass(frozen=True)
class _LeanBegin:
    """A lean BEGIN as traced: its time, the ops reading it and storing its record, and where it was opened
    (a leaf region's END replaces the record op with the atomic taking both slots, placed before the
    timer read)."""

    timer: Int32
    timer_read: object
    record: object
    block: object
    paired: list

    def can_pair(self) -> bool:
        """No END took this BEGIN yet, the END is in the BEGIN's block, and no loop lies between them (the
        BEGIN's values would be live across it, as the cursor's state is)."""
        return not self.paired[0] and _current_block() == self.block and not _loop_after(self.record)


def _loop_after(op) -> bool:
    """Whether a loop that stays a loop follows `op` in its block (at any depth inside the ops after it):
    anything but a `for` of constant bounds that LLVM unrolls fully (_unrolled)."""

    def loop(o) -> bool:
        name = o.operation.name
        if name in ("scf.while", "scf.parallel") or (name == "scf.for" and not _unrolled(o)):
            return True
        return any(loop(inner) for region in o.operation.regions for block in region.blocks
                   for inner in block.operations)

    after = False
    for sibling in op.operation.block.operations:
        if after and loop(sibling):
            return True
        after = after or sibling.operation == op.operation
    return False


_UNROLLED_TRIPS = 16  # a constant `for` of at most this many trips and no unroll hint: LLVM unrolls it


def _unrolled(for_op) -> bool:
    """An scf.for of constant bounds that becomes straight-line code: marked to unroll fully, or unrolled
    by a count of at least its trip count, or (no hint) short (cutlass.range(n, unroll=1) stays a loop,
    and so does a long one: LLVM unrolls cutlass.range(1000) by 8)."""
    from cutlass._mlir import ir

    bounds = []
    for value in list(for_op.operation.operands)[:3]:
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.name != "arith.constant":
            return False
        bounds.append(ir.IntegerAttr(owner.attributes["value"]).value)
    lower, upper, step = bounds
    trips = max(0, -(-(upper - lower) // step)) if step > 0 else 0
    attributes = for_op.operation.attributes
    hint = str(attributes["loop_annotation"]) if "loop_annotation" in attributes else ""
    if "full = true" in hint:
        return True
    if "disable = true" in hint:
        return False
    count = re.search(r"count = (\d+)", hint)
    return trips <= (int(count.group(1)) if count else _UNROLLED_TRIPS)


@cute.jit
def _lean_finalize(buffer, state_base, timer, tid, spec: cutlass.Constexpr):
    leader, address = _lean_slot(state_base, tid, spec)
    if leader:
        load = "ld.volatile.shared.u64 $0, [$1];"
        state = Int64(inline_ptx.asm(Int64.mlir_type, [address], load, "=l,r"))
        taken = Int32(state)
        tag = Uint32(state >> 32)
        if tag != _LEAN_NO_TAG:  # the lane exists
            lane = Int32(tag >> wire.LANE_SHIFT)
            records = cute.make_tensor(
                buffer.iterator + 1 + lane, cute.make_layout(spec.records_per_lane, stride=spec.write_stride)
            )
            _write_trailer(records, Int32(tag), taken - spec.user_capacity, timer, True, spec)


@dataclasses.dataclass(frozen=True)
class AtomicRecorder:
    """mode="atomic": each region reserves two consecutive slots with one shared-memory atomic (issued
    before the begin timer read, both records stored at the end under one check), so several threads may
    write one lane. Per-lane counters: 4 bytes of static shared memory per group, zeroed by thread 0
    before a block barrier (every thread of the block must build the Profiler), and 32 dummy words that
    the other threads' atomics go to (no branch around the atomic)."""

    needs_token = True
    lane: Lane
    counter: object  # smem pointer of the lane's counter (its leader), else of a dummy word
    attempted: cute.Tensor  # records this thread tried (what a stray thread adds to the stray word)
    spec: cutlass.Constexpr[ProfileSpec]

    @staticmethod
    def create(spec: ProfileSpec, lane: Lane):
        return _atomic_setup(spec, lane)

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
        _store_if(fits, self.lane.words, slot, self.lane.tag | event_bits(event_id, INSTANT), timer_lo())

    def finalize(self, leader):
        writer = self.lane.leader if leader is None else (self.lane.leader & leader)
        _atomic_finalize(self.lane, self.counter, writer, self.attempted[0], self.spec)


@cute.jit
def _atomic_setup(spec: cutlass.Constexpr, lane: Lane):
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
    return AtomicRecorder(lane, counter, attempted, spec)


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
    _finish(lane, taken - spec.trailer_slot, attempted, writer, spec)


@dataclasses.dataclass(frozen=True)
class StaticRecorder:
    """mode="static": region `index` owns slots 2+2*index (begin) and 3+2*index (end); a mark at `index`
    uses the begin slot. An index past capacity (or negative, at run time) is dropped and counted."""

    needs_token = True
    lane: Lane
    drops: cute.Tensor  # records this thread could not store (for a stray thread: all of them)
    spec: cutlass.Constexpr[ProfileSpec]

    @staticmethod
    def create(spec: ProfileSpec, lane: Lane):
        drops = cute.make_rmem_tensor(cute.make_layout(1), Int32)
        drops[0] = Int32(0)
        return StaticRecorder(lane, drops, spec)

    def _slot(self, index, what: str, records: int):
        """`records`: 2 for a region (its END takes the slot after the BEGIN's), 1 for a mark."""
        if index is None:
            raise ProfileUsageError(f"mode='static': {what} needs index= (the region's slot pair) at {_source_site()}")
        if isinstance(index, int) and not (0 <= index and 2 * index + records <= self.spec.user_capacity):
            raise ProfileUsageError(
                f"mode='static': {what} index={index} is outside 0..{(self.spec.user_capacity - records) // 2} "
                f"(records_per_lane={self.spec.records_per_lane}) at {_source_site()}"
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
        writer = self.lane.leader if leader is None else (self.lane.leader & leader)
        drops = self.drops[0]
        _finish(self.lane, drops, drops, writer, self.spec)


@cute.jit
def _static_record(lane: Lane, drops, k, timer, bits: cutlass.Constexpr, spec: cutlass.Constexpr):
    # unsigned: a negative runtime index lands past the limit instead of on the anchors or the header
    fits = Uint32(k - wire.ANCHOR_RECORDS) < Uint32(spec.user_capacity)
    _store_if(lane.leader & fits, lane.words, k, lane.tag | bits, timer)
    if (lane.leader & (~fits)) | lane.stray:
        drops[0] = drops[0] + 1


_RECORDERS = {
    "cursor": CursorRecorder,
    "deferred": DeferredRecorder,
    "smem": SmemRecorder,
    "atomic": AtomicRecorder,
    "static": StaticRecorder,
}


# --- the handle users hold ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RegionToken:
    """What begin() returns and end() takes: the region's name, where it was opened (MLIR block), and
    the mode's value (atomic: reserved slot + begin time; static: slot; deferred: slot + time)."""

    name: str
    value: object
    block: object
    site: str
    records_before: int  # the Profiler's records traced up to and including this begin
    owner: object  # the Profiler's trace-time checks: a token is only good for the Profiler that made it


class _TraceChecks:
    """Trace-time bookkeeping of one Profiler (plain Python, never reaches the kernel)."""

    def __init__(self):
        self.open: dict[int, RegionToken] = {}
        # modes without tokens: region name -> site of a begin traced after the name's last end (an end
        # without a token may close a begin of another block, so only a name never ended again is sure)
        self.unended: dict[str, str] = {}
        self.finalized_at: str | None = None
        self.records = 0  # begin / end / mark calls traced so far

    def check_not_finalized(self, call: str):
        if self.finalized_at is not None:
            raise ProfileUsageError(
                f"{call} at {_source_site()} comes after prof.finalize() at {self.finalized_at}: a record after "
                "FINALIZE would not be counted; record before finalize()"
            )


@dataclasses.dataclass(frozen=True)
class Profiler:
    """Per-lane recording handle. Build it inside ``@cute.kernel``::

        prof = Profiler.create(spec, prof_buf, group=warp_idx // 4)   # spec: cutlass.Constexpr
        with prof.region("mma"):            # or: with profile_region(prof, "mma"):
            ...
        prof.mark("tile_done")
        prof.finalize()                     # [DROPPED] + FINALIZE; no record may follow it

    group:  the lane's group in this block, 0 <= group < spec.num_groups. A constant out of range is a
            trace-time error; a runtime one is dropped and counted in the stray word, never written.
    leader: runtime predicate choosing the writing thread; default lane 0 of warp
            ``group * spec.warps_per_group``. One thread per lane (atomic mode allows several).
    """

    spec: cutlass.Constexpr[ProfileSpec]
    recorder: object  # the mode's recorder; None when the spec is disabled
    checks: _TraceChecks

    @staticmethod
    def create(spec: ProfileSpec, buf=None, group=0, leader=None, recorder_class=None) -> Profiler:
        """`recorder_class`: a recorder to build instead of the mode's, with the mode's `create` signature
        (a subclass of that mode's recorder; benchmarks/record_ablation.py takes records apart this way)."""
        if not isinstance(spec, ProfileSpec):
            raise TypeError(f"Profiler.create needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
        if not const_expr(spec.enabled):
            return Profiler(spec, None, _TraceChecks())
        buffer, buffer_ok = _buffer_tensor(spec, buf)
        if spec.mode == "smem" and leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {_source_site()}: mode='smem' copies a lane out with its default "
                "leader's warp at finalize, so the lane's writer is that leader; leader= needs another mode"
            )
        if spec.window_slots and leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {_source_site()}: a spec with a capture window counts each lane "
                "once, from its default leader; several writers per lane (leader=) need a spec without window_slots"
            )
        if const_expr(spec.mode == "lean"):
            recorder = (recorder_class or LeanRecorder).create(spec, buffer, group, leader, buffer_ok)
        else:
            lane = Lane.create(spec, buffer, group, leader, buffer_ok)
            recorder = (recorder_class or _RECORDERS[spec.mode]).create(spec, lane)
        return Profiler(spec, recorder, _TraceChecks())

    def _fence(self):
        if const_expr(self.spec.fence == "cta"):
            cute.arch.fence_acq_rel_cta()

    def begin(self, name: str, index=None) -> RegionToken | None:
        """Open region `name`; returns the token end() takes. Prefer ``with prof.region(name):``."""
        if not const_expr(self.spec.enabled):
            return None
        self.checks.check_not_finalized(f"prof.begin({name!r})")
        value = self.recorder.begin(self.spec.event_id(name), index)
        self.checks.records += 1
        self._fence()
        token = RegionToken(name, value, _current_block(), _source_site(), self.checks.records, self.checks)
        if self.recorder.needs_token:
            self.checks.open[id(token)] = token
        else:
            self.checks.unended.setdefault(name, token.site)
        return token

    def end(self, name: str, token: RegionToken | None = None):
        """Close region `name`. Modes "atomic", "static" and "deferred" need begin()'s token, and the
        end must sit in the same block (control-flow level) as its begin, so that a begin that runs is
        always closed: ``with prof.region(name):`` does both."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_not_finalized(f"prof.end({name!r})")
        if token is None and self.recorder.needs_token:
            raise ProfileUsageError(
                f"prof.end({name!r}) at {_source_site()}: mode {self.spec.mode!r} needs the token begin() returned "
                f"(t = prof.begin({name!r}) ... prof.end({name!r}, t)); or use `with prof.region({name!r}):`"
            )
        value, adjacent = None, False
        if token is not None:
            self._check_token(name, token)
            value = token.value
            # The END right after its BEGIN in program order: same control-flow level, nothing recorded
            # in between (a cursor's END then shares the BEGIN's capacity check).
            adjacent = token.block == _current_block() and token.records_before == self.checks.records
        self.checks.records += 1
        self.checks.unended.pop(name, None)
        self._fence()
        self.recorder.end(self.spec.event_id(name), value, adjacent)

    def _check_token(self, name: str, token):
        if not isinstance(token, RegionToken):
            raise ProfileUsageError(
                f"prof.end({name!r}, token) at {_source_site()}: token must be what prof.begin() returned "
                f"(got {type(token).__name__})"
            )
        if token.name != name:
            raise ProfileUsageError(
                f"prof.end({name!r}) at {_source_site()} closes the region begun as {token.name!r} at {token.site}"
            )
        if token.owner is not self.checks:
            raise ProfileUsageError(
                f"prof.end({name!r}) at {_source_site()} closes a region begun at {token.site} by another Profiler: "
                "end a region with the Profiler that began it"
            )
        if self.recorder.needs_token:
            if id(token) not in self.checks.open:
                raise ProfileUsageError(
                    f"prof.end({name!r}) at {_source_site()}: the region begun at {token.site} is already closed"
                )
            if token.block != _current_block():
                raise ProfileUsageError(
                    f"prof.end({name!r}) at {_source_site()} is not at the control-flow level of its begin at "
                    f"{token.site}: in mode {self.spec.mode!r} a begin whose end does not run would vanish; "
                    "close the region in the same block (or use `with prof.region(...)`)"
                )
            del self.checks.open[id(token)]

    def mark(self, name: str, index=None):
        """An instant record. Static mode: `index` is a region index (the mark uses its begin slot)."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_not_finalized(f"prof.mark({name!r})")
        self.checks.records += 1
        self.recorder.mark(self.spec.event_id(name), index)

    def region(self, name: str, index=None) -> profile_region:
        """``with prof.region("mma"):`` = ``with profile_region(prof, "mma"):``."""
        return profile_region(self, name, index)

    def finalize(self, leader=None):
        """Write [DROPPED] + FINALIZE (SM id) in the lane's last two slots; once per lane, after its last
        record. Atomic mode with several writers per lane: call it after a barrier that orders all their
        records, with `leader=` naming one of them."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_not_finalized("prof.finalize()")
        if self.checks.open:
            token = next(iter(self.checks.open.values()))
            raise ProfileUsageError(
                f"prof.finalize() at {_source_site()}: region {token.name!r} begun at {token.site} was never ended"
            )
        if self.checks.unended:
            name, site = next(iter(self.checks.unended.items()))
            raise ProfileUsageError(
                f"prof.finalize() at {_source_site()}: region {name!r} begun at {site} was never ended"
            )
        self.checks.finalized_at = _source_site()
        self.recorder.finalize(leader)
        if const_expr(self.spec.window_slots > 0):
            lane = self.recorder.lane
            writer = lane.leader if leader is None else (lane.leader & leader)  # its lane's writer, recording
            window.end_lane(self.spec, lane.window_buffer, lane.counted, writer)


def launch_records(spec: ProfileSpec, buf=None):
    """Whether this launch records, the same in every thread of the launch: for a spec with a capture
    window (window_slots > 0) a run-time Boolean (ikp_cute/window.py launch_decision: one 16-byte load
    per thread); True for a spec without one and False for a disabled spec (Python bools: a `const_expr`
    branch on them folds at trace time). For a role whose two copies both create their Profilers (they
    count the lanes); a copy with no Profiler at all takes ``window_branch``, and then every group of the
    kernel does (its closed copies count per block or per warp, which does not add up with lanes that
    count themselves).

    Read it before the role's first collective operation: every lane holds one tick of the launch count
    back until its Profiler's finalize, so the value cannot change before the reader's own lane ends."""
    if not isinstance(spec, ProfileSpec):
        raise TypeError(f"launch_records needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
    if not const_expr(spec.enabled):
        return False
    if const_expr(spec.window_slots == 0):
        return True
    buffer, _ = _buffer_tensor(spec, buf)
    return window.launch_decision(spec, buffer) >= 0


_COUNT_AT = ("start", "end")


def window_branch(spec: ProfileSpec, group, recorded, plain, buf=None, count_at: str = "start"):
    """Run ``recorded()`` in a launch that records and ``plain()`` in one that does not, deciding once per
    role (every thread takes the same branch: see launch_records). `recorded` creates and finalizes the
    Profiler of lane `group` (its default leader) as usual; `plain` is the kernel's own code with no
    Profiler for that group, where the copy counts itself in the launch count (ikp_cute/window.py
    count_copy: with the window empty one fire-and-forget add per block, by thread 0; otherwise one per
    warp), so nothing of the profiler is live across the copy: a closed window costs one load, a branch
    and one add per block (per warp while a window is set that the launch is not in;
    examples/fa4_sm90/fa4_instrumented.py). Every group of the kernel runs window_branch in each of its
    exactly ``spec.warps_per_group`` warps (a part of the count is missing otherwise, or counted twice,
    and ``ring.launches()`` refuses the ring); read the decision before the role's first collective
    operation (a warp deciding after its lane's end may read the next launch).

    `count_at`: where the plain copy's warps count themselves, "start" (before ``plain()``) or "end"
    (after it): either is exact; pick the end for a role whose start is on the block's critical path (a
    TMA producer whose first loads every other role waits for), the start for one that waits first (an
    MMA consumer, whose end is its block's end). FA4 closed, H200: producer at the end, consumers at the
    start +0.3%, all at the start +0.5% (docs/capture.md).

    A spec without a window runs ``recorded()`` only, a disabled spec ``plain()`` only (both folded at
    trace time). `group` must not also be counted elsewhere in the launch: a second Profiler for it, in
    either copy, is a lane counted twice (``ring.launches()`` refuses to read such a ring)."""
    if not isinstance(spec, ProfileSpec):
        raise TypeError(f"window_branch needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
    if count_at not in _COUNT_AT:
        raise ProfileUsageError(f"window_branch: count_at={count_at!r} must be one of {_COUNT_AT} at {_source_site()}")
    if not const_expr(spec.enabled):
        plain()
        return
    if const_expr(spec.window_slots == 0):
        recorded()
        return
    if isinstance(group, int) and not 0 <= group < spec.num_groups:
        raise ProfileUsageError(f"window_branch: group={group} is outside 0..{spec.num_groups - 1} at {_source_site()}")
    buffer, _ = _buffer_tensor(spec, buf)
    decision = window.launch_decision(spec, buffer)
    # A launch with a block past the session's lanes, or a group out of range, runs the recorded copy in
    # every block: a thread of no lane has no lane of its own holding the count back, so its decision could
    # be the next launch's, and there the Profilers count the lanes and the strays. Neither test reads
    # %ctaid: the branch waits on the decision alone (FA4 closed, H200: a lane test before the branch cost
    # ~0.28%, docs/capture.md).
    takes_plain = window.grid_fits(spec) & (decision < 0)
    if const_expr(not isinstance(group, int)):
        takes_plain = takes_plain & (Uint32(Int32(group)) < Uint32(spec.num_groups))

    def counted_plain():
        if const_expr(count_at == "start"):
            window.count_copy(spec, buffer, decision)
        else:
            window.count_copy(spec, buffer, decision, ticks=False)  # LOST only, and only when NOT_RECORDED
        plain()
        if const_expr(count_at == "end"):
            window.count_copy(spec, buffer)

    # The plain copy as the `then` block: laid out first, on the fall-through path (FA4 closed: +1.15%
    # against +1.34% the other way round, H200, docs/capture.md).
    if_generate(takes_plain, counted_plain, recorded)


class profile_region:
    """``with profile_region(prof, "name"):`` records begin/end of the enclosed code on prof's lane.

    Works in any branch or ``cutlass.range`` loop, nested to any depth. Static mode needs ``index=``
    (the region's slot pair: records 2+2*index and 3+2*index). The name is mapped to an event id when
    the kernel is traced (prof.spec.events), so ids are fixed at compile time.
    """

    def __init__(self, prof: Profiler, name: str, index=None):
        if not isinstance(prof, Profiler):
            raise TypeError(
                f"profile_region(prof, {name!r}): prof must be an ikp_cute Profiler built with Profiler.create "
                f"(got {type(prof).__name__})"
            )
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
