"""mode="lean": no profiler state in registers between regions. Each lane's state is 8 bytes of shared
memory (records taken, the lane's tag bits), re-found from a fresh %tid.x at every record site.

A record on its own (a mark, a BEGIN, an END) loads the state, stores, and writes the count back, all
predicated on the lane's leader (no branch, so the leader's warp does not diverge); its store waits for
the load. A leaf region (its END in the BEGIN's block, nothing recorded between them, no loop inside)
instead takes both of its slots at its BEGIN with one shared-memory atomic (every other thread's atomic
goes to a dummy word) and stores both records at its END: nothing inside the region waits on shared
memory. Slots are taken in program order either way, so a lane stays in time order as the cursor's does.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* Nothing is kept live between record sites: every site re-reads %tid.x, and a BEGIN erased by its
  pairing takes its unused %tid.x read with it (test_lean_finds_its_state_afresh_at_every_record_site).
* Only leaf regions pair, and never across a loop that stays a loop nor with fence="cta"
  (test_lean_pairs_only_leaf_regions_ended_in_their_block, test_lean_with_a_cta_fence_pairs_no_region).
* No store passes the capacity: a record on its own checks its slot, a pair checks its BEGIN's (the END's
  slot is then at most the DROPPED slot, which finalize overwrites); a lane that does not exist, or a
  buffer too short for the spec, takes no slot (test_lean_checks_a_dynamic_buffer_size_like_every_mode).
* The leader is fixed and the group a warp's: leader= is refused, a constant group out of range too
  (test_lean_state_is_validated, test_misuse_is_a_trace_time_error). The cost per record is held by
  test_sass_per_event_budget.
"""

from __future__ import annotations

import dataclasses
import re

import cutlass
from cutlass import Int32, Int64, Uint32, cute

from host_decode.core import wire

from .. import inline_ptx
from ..checks import source_site
from ..inline_ptx import numbered_ptx
from ..spec import ProfileSpec, ProfileUsageError
from .lane import Lane, check_constant_group, write_trailer
from .records import BEGIN, END, INSTANT, event_bits, timer_lo, timer_read


@dataclasses.dataclass(frozen=True)
class LeanRecorder:
    """mode="lean": the lane's state lives in shared memory (module docstring). Hooks a variant may
    override (ikp_cute/testing/record_variants.py): `record` (one record on its own), `take_pair` and
    `store_pair` (a leaf region's two slots and records)."""

    needs_token = False
    buffer: cute.Tensor
    state_base: Int32
    spec: cutlass.Constexpr[ProfileSpec]

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None):
        if leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {source_site()}: mode='lean' fixes the leader (lane 0 of warp "
                "group*warps_per_group); leader= is not accepted"
            )
        check_constant_group(spec, group)  # lean takes the group from the warp, but a bad one is still a bug
        return cls(buffer, _lean_setup(spec, buffer, buffer_ok), spec)

    def begin(self, event_id: int, index):
        timer, timer_op = timer_read()
        record = self.record(event_bits(event_id, BEGIN), timer)
        return _LeanBegin(timer, timer_op, record, inline_ptx.current_block(), [False])

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
                f"prof.finalize(leader=...) at {source_site()}: mode='lean' takes no leader= "
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
        return not self.paired[0] and inline_ptx.current_block() == self.block and not _loop_after(self.record)


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
            write_trailer(records, Int32(tag), taken - spec.user_capacity, timer, True, spec)
