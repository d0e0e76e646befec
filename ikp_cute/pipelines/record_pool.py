"""Device side of a pool trace: which launch records (decided per launch, on the device), and records that take
their slots from the pool in units on demand. The pool's layout: host_decode/core/wire.py ("the recording
pool"); its host side: ikp_cute/pool.py; its reader: host_decode/load/pool.py.

A traced kernel is split in two copies (copies.py): at its entry every thread takes the DECISION, then
``if (closed) { the kernel's own code } else { SETUP; the traced code; EPILOGUE }``. A launch that does
not record runs the untouched code: the decision is all it pays.

DECISION (all threads, one inline-PTX block): load kernel k's window words (START, STOP, EVERY, MODE: one
16-byte line no lane writes in a launch that does not record) and its TICKS (512+ bytes away); a window that
is empty (START >= STOP, MODE window) is decided closed at once, by a branch past every use of TICKS, so a
closed launch never waits on the counter every warp adds to. Otherwise the launch index e = TICKS >> 24 and
the rule (wire.pool_decide) say whether it records; a launch past its window empties it (START = STOP = 0,
by each warp that sees it: every later launch decides from the line alone). Every warp then adds its part of
the launch's 2**24 ticks (wire.pool_warp_part: 2**24 >> bitlen(W - 1) for W warps, warp 0 of block 0 the
remainder; no division) with one fire-and-forget `red`, after its own read: no thread of the launch reads a
count its own warp completed, so every thread reads the launch's e (ikp_cute/ring.py: the same argument).

SETUP (each warp's elected lane, at the start of the traced copy): the warp's state (64 bytes of shared
memory per warp, below), with the area it takes units from (the shared area, or for a `last` launch half e &
1 of its kernel's region: its limit, NEXT and first unit), the block's counter set and launch index (16
bytes, for the epilogue), and the warp's first unit. A `last` launch resets the other half's counters (warp
0 of block 0) for the launch after it.

A RECORD (the hot path; instants `record`, regions `reserve_region` + `finish_region`) reads the warp's
state {room, lane, end}, stores at ``end - 8 * room`` and writes room back: the v1 record of
pipelines/record.py with the lane's slot taken from its unit instead of a fixed stride. A lane always has at
least two slots when a record starts (a region's two records never straddle units): when a record leaves
fewer, the REFILL that follows it (one uniform branch, inside the same PTX block, after the record's own
registers are dead; for a region, after its two stores) enters the next unit of the lane's run, or asks for
a new run of 1, 2, 4, 8, 16 units with ONE `atom.add` on NEXT by the elected lane (its answer shuffled to
the warp), and writes the new unit's header from the warp's templates (kernel id, launch, lane, warps per
block, SM id and seq, set up once; the 64-bit time read there). The setup takes the lane's first unit the
same way, before the kernel's own code. A request the pool cannot meet makes the lane virtual: its records
are counted, not stored, and it keeps asking (every run still lands in NEXT: NEXT x 256 bytes is what would
have held everything).

EPILOGUE (the end of the traced copy, each warp's elected lane): a lane that lost records writes the count
into its last unit's word 3, or, if it never had a unit, adds it (and itself) to the kernel's counters; a lane
that cannot record (2-D / 3-D blocks, lane >= 2**20) adds the records it made to STRAY.

The state (64 bytes per warp at state_base + 64 * warp; the block's {counter set, launch} after the 32 warps):
  +0  s32 room    records left in the current unit (an invalid lane: 2**30, counting down)
  +4  u32 lane    the v1 lane (bits 0-19) | VIRTUAL (bit 30) | INVALID (bit 31): stores only below 2**20
  +8  u64 end     the address past the current unit (virtual: past the last real unit; 0: none yet)
  +16 u64 word 0 of the lane's unit headers; +24 u64 word 2 (its seq advanced at each unit)
  +32 u32 cold    runs asked (bits 0-2) | had a unit (bit 3) | units left in the run (bits 8-15)
  +36 u32 lost    records lost in virtual units so far (the unused rest is given back on leaving one)
  +40 u32 limit   units the launch's area hands out; +44 u32 the launch index
  +48 u64 the address of the area's NEXT; +56 u64 the address of the area's first unit
(the refill reads only the warp's own state and the block's descriptor, found from the block's state-base operand:
no register holds the state base across the kernel's code).

%tid.x: every block of ours takes %tid.x as the DSL's operand (`thread_idx`, the value LLVM shares with the
kernel's own reads); none reads the special register itself where every block runs it. ptxas proves a kernel's
warp index (%tid.x >> 5, with `.reqntid` a multiple of 32) warp-uniform and keeps the code that depends on it on
the uniform datapath: TMA issues, tensor-core descriptors, ELECT. A %tid.x read of our own in the decision (every
block, before the split) or in a refill was enough to lose that proof for the copy it dominates: FA4's closed
copy then ran R2UR moves before its wgmma instructions, VOTEU for every ELECT and a loop around each TMA issue
(SASS, sm_90a: 59 R2UR / 38 VOTEU.ANY / 10 BRA.U.ANY in FA4 non-causal's closed copy, against 1 / 0 / 0 in the
untouched kernel; docs/pool.md, "Cost"). So the decision reads %tid only in block 0, behind a branch on %ctaid,
to pick the warp that adds the launch count's remainder, and the refill finds the block's descriptor from the
state base.

A FLAG RECORD (`record_with_payload`: a flag signal's INSTANT or a blocked wait's region, then its payload
instants FLAG_ADDR and FLAG_VALUE, docs/flags.md) needs up to five slots at once; all of them lie in one unit:
when the unit has fewer left, the lane takes its next unit before the stores (the slots it leaves stay 0, which
the reader skips). A record and its payloads are stored together or, in a virtual unit, counted together.

Invariants a change could break (tests/unit/ikp_cute/test_pool_compile.py guards them):
* a closed launch runs the kernel's own code: the closed copy holds no record block and no timer read of
  ours (test_the_closed_copy_is_the_untouched_kernel), and ptxas compiles it as the untouched kernel, its
  warp-uniform code kept (test_the_closed_copy_keeps_the_kernels_warp_uniform_code,
  test_fa4_noncausal_traced_copy_keeps_its_warp_uniform_code);
* no block of ours reads %tid.x itself where every block runs it (above; the decision in block 0 only:
  test_no_block_of_ours_reads_tid_x_where_every_block_runs_it);
* the decision reads TICKS only past the empty-window branch, and no atomic lands on the window line
  (test_the_decision_waits_for_ticks_only_when_a_window_is_set);
* a record block has one branch, to its refill, and the refill one atomic
  (test_every_record_block_has_one_atomic_behind_one_branch); no register spills in FA4's or quack's traced
  copy (test_fa4_and_quack_traced_into_a_pool);
* the protocol equals the host's reference (ikp_cute/testing/pool_model.py) on the GPU: gpu/pool_suite.py;
* a flag record and its payloads lie in one unit, stored or counted together, the record blocks run one lane's
  PTX as written (tests/unit/ikp_cute/test_pool_flags.py, a PTX interpreter of one warp's elected lane).
"""

from __future__ import annotations

import dataclasses
import re

from cutlass import Int32, Int64, cute

from host_decode.core import wire
from ikp_cute import inline_ptx

MAX_WARPS = wire.POOL_MAX_WARPS
STATE_BYTES = 32  # per warp (the module docstring's table)
S_END, S_COLD, S_LANE_WORD = 8, 16, 24  # byte offsets in a warp's state
D_NEXT, D_FIRST, D_SET, D_LIMIT, D_LAUNCH = 0, 8, 16, 24, 28  # in the block's descriptor, after the warps
DESCRIPTOR_BYTES = 32
VIRTUAL, INVALID = 1 << 30, 1 << 31
INVALID_ROOM = 1 << 30  # an invalid lane counts down from here, never refilling
LANE_LIMIT = wire.MAX_LANES
R = wire.POOL_UNIT_RECORDS
UNIT = wire.POOL_UNIT_BYTES
HAD_UNIT = 1 << 19  # cold: seq (bits 0-15) | runs asked (16-18) | had a unit (19) | units left in the run (24-31)
LOST_WORD = 8 * 3  # byte offset of a unit's lost count
REFILL_FLAG = 1 << 31  # reserve_region's flags: the sign bit asks finish_region to take the next unit
TICKS_PER_LAUNCH = 1 << wire.POOL_TICK_BITS

# The recording thread (pipelines/record.py: why elect.sync) and its warp's state at base + 32 * warp.
_LEADER = " activemask.b32 m; elect.sync _|lead, m;"
_STATE = " and.b32 a, {tid}, 0xFFFFFFE0; add.u32 a, a, {base};"


def smem_words(warps: int) -> int:
    """int64 words of shared memory a kernel of `warps` warps per block keeps its pool state in."""
    return (STATE_BYTES * warps + DESCRIPTOR_BYTES) // 8


@dataclasses.dataclass(frozen=True)
class PoolGeometry:
    """Compile-time facts of the pool a trace records into (baked into the prologue only)."""

    address: int
    max_kernels: int
    units: int

    @classmethod
    def of_pool(cls, pool) -> PoolGeometry:
        return cls(int(pool.address), int(pool.max_kernels), int(pool.units))

    def at(self, offset: int) -> int:
        return self.address + offset

    @property
    def units_base(self) -> int:
        return self.address + wire.pool_control_bytes(self.max_kernels)

    def counter(self, kernel: int, field: int = wire.POOL_TICKS) -> int:
        return self.at(wire.pool_counter(self.max_kernels, kernel, field))

    def counter_set(self, kernel: int, which: int) -> int:
        return self.at(wire.pool_set(self.max_kernels, kernel, which))


def kernel_constants(g: PoolGeometry, kernel: int) -> tuple[int, ...]:
    """Every number in the PTX blocks of kernel `kernel` that depends on its id (the decision's window and
    TICKS, the setup's `last` words and counter sets, the unit header's magic | kernel): what `renumber` maps."""
    return (g.at(wire.pool_window(kernel)), g.counter(kernel), g.counter(kernel, wire.POOL_LAST_FIRST),
            g.counter_set(kernel, wire.POOL_SHARED_SET), g.counter_set(kernel, wire.POOL_LAST_SETS[0]),
            (wire.POOL_UNIT_MAGIC << 16) | kernel)


def renumber(text: str, g: PoolGeometry, old: int, new: int) -> str:
    """A PTX block of kernel `old` as kernel `new`'s (each of kernel_constants replaced as a whole number)."""
    table = dict(zip(map(str, kernel_constants(g, old)), map(str, kernel_constants(g, new))))
    return re.sub(r"\b\d+\b", lambda m: table.get(m.group(0), m.group(0)), text)


def _thread_x():
    return Int32(cute.arch.thread_idx()[0])


def decision_ptx(g: PoolGeometry, kernel: int) -> str:
    """$0 = 1 when this launch records (| 2 when it records into the `last` region), $1 = its launch index (0
    when the window is empty); module docstring."""
    window, ticks = g.at(wire.pool_window(kernel)), g.counter(kernel)
    return (
        "{ .reg .pred lead, x, w, one, past, last, zero; .reg .u32 m, s, t, ev, mode, lo, hi, e, d, n, q, r;"
        " .reg .u64 sh, pw, pt;"
        + _LEADER
        + f" mov.u64 pw, {window}; mov.u64 pt, {ticks};"
        " ld.global.v4.u32 {s, t, ev, mode}, [pw]; ld.global.v2.u32 {lo, hi}, [pt];"
        f" setp.eq.u32 last, mode, {wire.POOL_LAST}; setp.lt.u32 x, s, t; or.pred x, x, last;"
        " setp.ne.u32 w, m, m; mov.u32 e, 0;"
        # an empty window is decided without TICKS: the branch skips every use of it (no wait on its load)
        " @!x bra.uni DECIDED;"
        f" shr.u32 e, lo, {wire.POOL_TICK_BITS}; shl.b32 d, hi, {32 - wire.POOL_TICK_BITS}; or.b32 e, e, d;"
        # every == 1 skips the remainder (a software sequence of ~20 instructions)
        " sub.u32 d, e, s; max.u32 ev, ev, 1; setp.eq.u32 one, ev, 1; @one mov.u32 d, 0; @one bra.uni EVERY_ONE;"
        " rem.u32 d, d, ev; EVERY_ONE:"
        " setp.ge.u32 w, e, s; setp.lt.and.u32 w, e, t, w; setp.eq.and.u32 w, d, 0, w; or.pred w, w, last;"
        # past the window: empty it, so that later launches decide from the window line alone
        " setp.ge.and.u32 past, e, t, lead; and.pred past, past, !last; mov.u32 d, 0;"
        " @past st.relaxed.gpu.global.v2.u32 [pw], {d, d};"
        " DECIDED:"
        # this warp's part of the launch count (wire.pool_warp_part): W = blocks x warps per block
        " mov.u32 n, %nctaid.x; mov.u32 d, %nctaid.y; mul.lo.u32 n, n, d; mov.u32 d, %nctaid.z; mul.lo.u32 n, n, d;"
        " mov.u32 q, %ntid.x; mov.u32 d, %ntid.y; mul.lo.u32 q, q, d; mov.u32 d, %ntid.z; mul.lo.u32 q, q, d;"
        " add.u32 q, q, 31; shr.u32 q, q, 5; mul.lo.u32 n, n, q;"
        f" sub.u32 d, n, 1; clz.b32 d, d; sub.u32 d, 32, d; mov.u32 q, {TICKS_PER_LAUNCH}; shr.u32 q, q, d;"
        f" mul.lo.u32 r, q, n; sub.u32 r, {TICKS_PER_LAUNCH}, r;"
        # warp 0 of block 0 adds the remainder (the thread's linear index in its block, for any block shape). Only
        # block 0 reads %tid: a %tid.x read that every block makes here is one ptxas shares with the kernel's own
        # (the module docstring, "%tid.x"), and the kernel's warp index then stops being warp-uniform to it
        " mov.u32 d, %ctaid.x; mov.u32 n, %ctaid.y; or.b32 d, d, n; mov.u32 n, %ctaid.z; or.b32 d, d, n;"
        " setp.ne.u32 zero, d, 0; @zero bra.uni COUNTED;"
        " mov.u32 d, %tid.z; mov.u32 n, %ntid.y; mov.u32 s, %tid.y; mad.lo.u32 d, d, n, s;"
        " mov.u32 n, %ntid.x; mov.u32 s, %tid.x; mad.lo.u32 d, d, n, s; shr.u32 d, d, 5;"
        " setp.eq.u32 zero, d, 0; @zero add.u32 q, q, r; COUNTED:"
        " cvt.u64.u32 sh, q; @lead red.relaxed.gpu.global.add.u64 [pt], sh;"
        " selp.u32 d, 1, 0, w; selp.u32 n, 2, 0, last; or.b32 $0, d, n; mov.u32 $1, e; } /* ikp decision */"
    )


def setup_ptx(g: PoolGeometry, kernel: int, warps: int) -> str:
    """$0 state base, $1 %tid.x, $2 launch index, $3 1 for a `last` launch: the block's descriptor, the warp's
    state and its first unit (module docstring); `warps`: the warp slots of the state."""
    top = g.at(4 * wire.POOL_HEADER_WORDS32["top"])
    last_words = g.counter(kernel, wire.POOL_LAST_FIRST)
    shared_set = g.counter_set(kernel, wire.POOL_SHARED_SET)
    half0 = g.counter_set(kernel, wire.POOL_LAST_SETS[0])
    step = wire.POOL_SET_BYTES
    desc = STATE_BYTES * warps
    return (
        "{ .reg .pred lead, ok, last, first_warp; .reg .u32 m, a, w, d, n, lim, first, half, h, blk;"
        " .reg .u64 nxt, fst, set, z;" + _REFILL_REGS
        + _LEADER
        + _STATE.format(tid="$1", base="$0")
        + f" shr.u32 w, $1, 5; add.u32 blk, $0, {desc};"
        # the block's descriptor: the shared area, or half e & 1 of the kernel's `last` region
        f" setp.ne.u32 last, $3, 0; mov.u64 z, {top}; ld.global.u32 lim, [z]; mov.u32 first, 0;"
        f" mov.u64 nxt, {g.at(wire.POOL_NEXT)}; mov.u64 set, {shared_set};"
        f" mov.u64 z, {last_words}; @last ld.global.v2.u32 {{first, half}}, [z];"
        " and.b32 h, $2, 1; @last mad.lo.u32 first, h, half, first; @last mov.u32 lim, half;"
        f" mul.wide.u32 z, h, {step}; add.u64 z, z, {half0}; @last mov.u64 set, z; @last mov.u64 nxt, z;"
        f" mul.wide.u32 fst, first, {UNIT}; add.u64 fst, fst, {g.units_base};"
        f" @lead st.volatile.shared.v2.u64 [blk+{D_NEXT}], {{nxt, fst}};"
        f" @lead st.volatile.shared.u64 [blk+{D_SET}], set;"
        f" @lead st.volatile.shared.v2.u32 [blk+{D_LIMIT}], {{lim, $2}};"
        # a `last` launch resets the other half's counters for the launch after it (warp 0 of block 0)
        f" xor.b32 h, h, 1; mul.wide.u32 z, h, {step}; add.u64 z, z, {half0};"
        " mov.u32 d, %ctaid.x; mov.u32 n, %ctaid.y; or.b32 d, d, n; mov.u32 n, %ctaid.z; or.b32 d, d, n;"
        " or.b32 d, d, w; setp.eq.and.u32 first_warp, d, 0, lead; and.pred first_warp, first_warp, last;"
        " mov.u64 nxt, 0; mov.u32 n, -1; mov.u32 d, 0;"
        f" @first_warp st.relaxed.gpu.global.v2.u64 [z+{wire.POOL_SET_NEXT}], {{nxt, nxt}};"
        f" @first_warp st.relaxed.gpu.global.v2.u64 [z+{wire.POOL_SET_STRAY}], {{nxt, nxt}};"
        f" @first_warp st.relaxed.gpu.global.v2.u32 [z+{wire.POOL_SET_LOSS_MIN}], {{n, d}};"
        # lane = block_linear * warps_per_block + warp (1-D blocks; 2-D / 3-D blocks cannot record)
        " mov.u32 d, %ctaid.z; mov.u32 n, %nctaid.y; mul.lo.u32 d, d, n; mov.u32 n, %ctaid.y; add.u32 d, d, n;"
        " mov.u32 n, %nctaid.x; mul.lo.u32 d, d, n; mov.u32 n, %ctaid.x; add.u32 d, d, n;"
        " mov.u32 n, %ntid.x; add.u32 n, n, 31; shr.u32 n, n, 5; mad.lo.u32 lane, d, n, w;"
        f" setp.lt.u32 ok, lane, {LANE_LIMIT}; mov.u32 d, %ntid.y; setp.eq.and.u32 ok, d, 1, ok;"
        f" mov.u32 d, %ntid.z; setp.eq.and.u32 ok, d, 1, ok; setp.lt.and.u32 ok, w, {warps}, ok;"
        # the unit header's word 2, low half (lane | warps per block - 1), and the SM id
        " sub.u32 n, n, 1; shl.b32 n, n, 20; or.b32 n, n, lane; mov.u32 d, %smid;"
        f" @lead st.volatile.shared.v2.u32 [a+{S_LANE_WORD}], {{n, d}};"
        f" selp.u32 room, 0, {INVALID_ROOM}, ok; selp.u32 lane, lane, {INVALID}, ok; mov.u32 d, 0;"
        f" mov.u64 end, 0; @lead st.volatile.shared.v2.u32 [a], {{room, lane}};"
        f" @lead st.volatile.shared.u64 [a+{S_END}], end; @lead st.volatile.shared.v2.u32 [a+{S_COLD}], {{d, d}};"
        " @!ok bra.uni DONE;"  # an invalid lane takes no unit
        + _refill(kernel, warps, "$0")
        + " } /* ikp setup */"
    )


_REFILL_REGS = (" .reg .pred virt, ask, fits, refill, same; .reg .u32 c, lost, run, g, k, el, room, lane, dsc;"
                " .reg .u64 end, idx, unit, t, hw;")


def _refill(kernel: int, warps: int, base: str) -> str:
    """PTX from REFILL to DONE: the lane's next unit, after a record left fewer than two slots (module
    docstring). In: a (the warp's state address), `base` (the operand holding the state base), m (the active
    mask), lead. Everything else is read from the warp's state and its block's descriptor when needed, and
    written back at once, so that few values are live at a time (FA4's producer warp runs with 24 registers,
    quack's consumers with ~10 to spare)."""
    return (
        " REFILL:"
        # the block's descriptor: after the warps' states (from the block's own base operand, never a %tid.x
        # read of its own: the module docstring, "%tid.x")
        f" add.u32 dsc, {base}, {STATE_BYTES * warps};"
        f" ld.volatile.shared.v2.u32 {{c, lost}}, [a+{S_COLD}]; ld.volatile.shared.v2.u32 {{room, lane}}, [a];"
        f" and.b32 k, lane, {VIRTUAL}; setp.ne.u32 virt, k, 0; @virt sub.u32 lost, lost, room;"
        " bfe.u32 run, c, 24, 8; setp.eq.or.u32 ask, run, 0, virt;"
        # the next unit of the run (END is where it starts; its header still to write)
        " @!ask sub.u32 run, run, 1; @!ask bfi.b32 c, run, c, 24, 8;"
        f" @!ask st.volatile.shared.v2.u32 [a+{S_COLD}], {{c, lost}}; @!ask bra.uni ENTER;"
        # a new run of 1, 2, 4, 8, 16 units: one atomic on NEXT, its answer shuffled to the whole warp
        " bfe.u32 g, c, 16, 3; shl.b32 k, 1, g; min.u32 k, k, 16;"
        " add.u32 g, g, 1; min.u32 g, g, 4; bfi.b32 c, g, c, 16, 3;"
        f" @lead st.volatile.shared.v2.u32 [a+{S_COLD}], {{c, lost}};"
        f" cvt.u64.u32 idx, k; ld.volatile.shared.u64 unit, [dsc+{D_NEXT}];"
        " elect.sync el|same, m; @lead atom.relaxed.gpu.global.add.u64 idx, [unit], idx;"
        " mov.b64 {g, run}, idx; shfl.sync.idx.b32 g, g, el, 31, m; shfl.sync.idx.b32 run, run, el, 31, m;"
        f" ld.volatile.shared.u32 el, [dsc+{D_LIMIT}];"
        " setp.lt.u32 fits, g, el; setp.eq.and.u32 fits, run, 0, fits; @fits bra.uni GRANTED;"  # idx < limit
        # no room: a virtual run, whose records are counted, not stored
        f" mul.lo.u32 room, k, {R}; ld.volatile.shared.v2.u32 {{c, lost}}, [a+{S_COLD}]; add.u32 lost, lost, room;"
        f" @lead st.volatile.shared.v2.u32 [a+{S_COLD}], {{c, lost}};"
        f" ld.volatile.shared.u32 lane, [a+4]; or.b32 lane, lane, {VIRTUAL};"
        " @lead st.volatile.shared.v2.u32 [a], {room, lane}; bra.uni DONE;"
        " GRANTED:"
        f" sub.u32 el, el, g; min.u32 run, el, k; sub.u32 run, run, 1; ld.volatile.shared.u32 c, [a+{S_COLD}];"
        f" bfi.b32 c, run, c, 24, 8; or.b32 c, c, {HAD_UNIT}; @lead st.volatile.shared.u32 [a+{S_COLD}], c;"
        f" ld.volatile.shared.u64 unit, [dsc+{D_FIRST}]; mad.wide.u32 unit, g, {UNIT}, unit;"
        f" @lead st.volatile.shared.u64 [a+{S_END}], unit;"
        " ENTER:"
        # the unit's header: magic | kernel | launch; now; lane | warps per block - 1, SM id | seq; lost 0
        f" ld.volatile.shared.u64 unit, [a+{S_END}]; ld.volatile.shared.u32 g, [dsc+{D_LAUNCH}];"
        f" mov.u64 t, %globaltimer; mov.b64 hw, {{g, {(wire.POOL_UNIT_MAGIC << 16) | kernel}}};"
        " @lead st.global.v2.u64 [unit], {hw, t};"
        f" ld.volatile.shared.v2.u32 {{g, k}}, [a+{S_LANE_WORD}]; ld.volatile.shared.u32 c, [a+{S_COLD}];"
        " bfi.b32 k, c, k, 16, 16; mov.b64 hw, {g, k}; mov.u64 t, 0; @lead st.global.v2.u64 [unit+16], {hw, t};"
        f" add.u32 g, c, 1; bfi.b32 c, g, c, 0, 16; @lead st.volatile.shared.u32 [a+{S_COLD}], c;"
        f" add.u64 unit, unit, {UNIT}; @lead st.volatile.shared.u64 [a+{S_END}], unit;"
        f" ld.volatile.shared.u32 lane, [a+4]; and.b32 lane, lane, {~VIRTUAL & 0xFFFFFFFF}; mov.u32 room, {R};"
        " @lead st.volatile.shared.v2.u32 [a], {room, lane};"
        " DONE:"
    )


@dataclasses.dataclass(frozen=True)
class PoolKernelState:
    """Per kernel: the shared-memory address (Int32) of its warp states, the decision ("closed", an MLIR i1
    value) the kernel is split on, and the op after which the traced copy begins (copies.py)."""

    state_base: object
    geometry: PoolGeometry
    kernel_id: int
    warps: int  # warp slots of the state: the block's warps when its shape is static, else 32
    closed: object  # Boolean: this launch does not record
    split_after: object  # the last op of the decision (an MLIR operation)

    @staticmethod
    def create(geometry: PoolGeometry, kernel_id: int, warps: int | None = None) -> PoolKernelState:
        """Emit the decision and the setup at the current insertion point (the kernel's entry); the kernel
        is split after the decision (copies.py), so the setup runs in the traced copy only. `warps`: the
        block's warps, when the launch gives its shape as constants (the state is sized for them)."""
        from cutlass import Boolean

        warps = MAX_WARPS if warps is None else max(1, min(int(warps), MAX_WARPS))
        base = Int32(cute.arch.alloc_smem(Int64, smem_words(warps), alignment=16).toint())
        decided, launch = inline_ptx.asm_results((Int32, Int32), [], decision_ptx(geometry, kernel_id), "=r,=r")
        last = decided >> 1
        closed = Boolean((decided & 1) == 0)
        owner = closed.ir_value().owner
        state = PoolKernelState(base, geometry, kernel_id, warps, closed, getattr(owner, "operation", owner))
        text = setup_ptx(geometry, kernel_id, warps)
        inline_ptx.asm(None, [base, _thread_x(), launch, last], text, "r,r,r,r")
        return state

    def record(self, bits, label: str = "", time=None) -> None:
        """One instant (bits = (event_id << 2) | type) by each executing warp's elected lane, at `time` (a
        timer() value read earlier) or now; `label` goes
        into a PTX comment (``/* ikp <label> */``), how tests count the records of each call site. The slot is
        the lane's next one (room >= 2 always holds on entry); the refill after it runs when fewer than two are
        left (the last slot of a unit an instant leaves stays 0: a region's two records never straddle units)."""
        asm = (
            "{ .reg .pred lead, ok; .reg .u32 m, a, tag, tlo, thi; .reg .u64 addr, rec, s;" + _REFILL_REGS
            + (" mov.u64 t, %globaltimer; mov.b64 {tlo, thi}, t;" if time is None else " mov.u32 tlo, $3;")
            + _LEADER
            + _STATE.format(tid="$2", base="$0")
            + " ld.volatile.shared.v2.u64 {s, end}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.u32 ok, lane, {LANE_LIMIT}; and.pred ok, ok, lead;"
            " mad.wide.s32 addr, room, -8, end;"
            " shl.b32 tag, lane, 12; or.b32 tag, tag, $1; mov.b64 rec, {tag, tlo}; @ok st.global.b64 [addr], rec;"
            " sub.s32 room, room, 1; @lead st.volatile.shared.u32 [a], room;"
            " setp.lt.s32 refill, room, 2; @!refill bra.uni DONE;"
            + _refill(self.kernel_id, self.warps, "$0")
            + f" }} /* ikp {label} */"
        )
        operands = [self.state_base, Int32(bits), _thread_x()] + ([] if time is None else [Int32(time)])
        inline_ptx.asm(None, operands, asm, ",".join("r" * len(operands)))

    def timer(self, label: str = ""):
        """%globaltimer (low 32 bits) as an SSA value (pipelines/record.py: how ptxas reads it)."""
        asm = f"mov.u64 $0, %globaltimer; /* ikp {label} */"
        return Int32(Int64(inline_ptx.asm(Int64.mlir_type, [], asm, "=l")))

    def reserve_region(self, bits, begin=None, label: str = ""):
        """Before (or, blocked-only, after) a blocking call: the begin time (or `begin`) and the lane's next two
        slots (room >= 2 on entry). Returns finish_region's token: (the BEGIN slot's address, the BEGIN record,
        flags: 2 when both records are stored, | REFILL_FLAG when fewer than two slots are left, so that
        finish_region takes the lane's next unit after its two stores)."""
        if begin is None:
            begin = self.timer()
        asm = (
            "{ .reg .pred lead, ok, refill; .reg .u32 m, a, room, lane, tag, f; .reg .u64 s, end;"
            + _LEADER
            + _STATE.format(tid="$6", base="$3")
            + " ld.volatile.shared.v2.u64 {s, end}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.u32 ok, lane, {LANE_LIMIT}; and.pred ok, ok, lead; selp.u32 f, 2, 0, ok;"
            " mad.wide.s32 $0, room, -8, end;"
            " shl.b32 tag, lane, 12; or.b32 tag, tag, $5; mov.b64 $1, {tag, $4};"
            " sub.s32 room, room, 2; @lead st.volatile.shared.u32 [a], room;"
            f" setp.lt.s32 refill, room, 2; @refill or.b32 f, f, {REFILL_FLAG:#x}; mov.b32 $2, f;"
            f" }} /* ikp {label} */"
        )
        operands = [self.state_base, Int32(begin), Int32(bits), _thread_x()]
        return inline_ptx.asm_results((Int64, Int64, Int32), operands, asm, "=l,=l,=r,r,r,r,r")

    def finish_region(self, token, end=None, label: str = "") -> None:
        """After the blocking call: the END time (or `end`), the reserved BEGIN / END stores, and the lane's next
        unit when reserve_region said so (a branch around it: nothing else reads the state here)."""
        address, begin_record, flags = token
        if end is None:
            end = self.timer()
        asm = (
            "{ .reg .pred live, lead; .reg .u32 m, a, hi, x; .reg .u64 rec;" + _REFILL_REGS
            + " and.b32 x, $2, 2; setp.ne.u32 live, x, 0;"
            " @live st.global.b64 [$0], $1;"
            " mov.b64 {m, hi}, $1; add.u32 m, m, 1; mov.b64 rec, {m, $3};"
            " @live st.global.b64 [$0+8], rec;"
            " setp.lt.s32 refill, $2, 0; @!refill bra.uni DONE;"
            + _LEADER
            + _STATE.format(tid="$5", base="$4")
            + _refill(self.kernel_id, self.warps, "$4")
            + f" }} /* ikp {label} */"
        )
        operands = [Int64(address), Int64(begin_record), Int32(flags), Int32(end), self.state_base, _thread_x()]
        inline_ptx.asm(None, operands, asm, "l,l,r,r,r,r")

    def record_with_payload(self, bits, time, address, values=(), optional=None, region: bool = False,
                            label: str = ""):
        """A record and its payload instants (pipelines/record.py's KernelState.record_with_payload: the same
        arguments, records and token), in one unit: when the lane's unit has fewer slots left than they need, the
        lane takes its next unit first (the REFILL, then the stores; the slots it leaves stay 0, which the reader
        skips), so a record and its payloads never straddle two units. A lane the pool cannot serve counts them
        all (virtual units: none stored). An instant refills after its stores like `record`; a region's
        reservation leaves that to finish_region (REFILL_FLAG in the token)."""
        head = 2 if region else 1
        need = head + 1 + len(values)
        if need + (optional is not None) > R:
            raise ValueError(f"record_with_payload: {need + (optional is not None)} records do not fit a unit of {R}")
        n_in = 5 + len(values) + (2 if optional is not None else 0)
        first_in = 3 if region else 0  # operands: the region's three results come first
        ops = [f"${first_in + i}" for i in range(n_in)]
        base, tid, bits_op, time_op, address_op = ops[:5]
        flag_addr = (wire.FLAG_ADDR_EVENT_ID << wire.EVENT_ID_SHIFT) | int(wire.EventType.INSTANT)
        flag_value = (wire.FLAG_VALUE_EVENT_ID << wire.EVENT_ID_SHIFT) | int(wire.EventType.INSTANT)
        text = (
            "{ .reg .pred lead, ok, opt, put, pre, again; .reg .u32 m, a, w, tag, need, lo, phase, f;"
            " .reg .u64 addr, rec, s, x;" + _REFILL_REGS
            + _LEADER
            + _STATE.format(tid=tid, base=base)
        )
        if optional is not None:
            text += f" setp.ne.u32 opt, {ops[-2]}, 0; selp.u32 need, {need + 1}, {need}, opt;"
        else:
            text += f" mov.u32 need, {need};"
        text += (
            # too few slots left in the unit: the next unit first (an invalid lane's room never runs short)
            " mov.u32 phase, 0; ld.volatile.shared.u32 room, [a]; setp.lt.s32 pre, room, need; @pre bra.uni REFILL;"
            " STORE: mov.u32 phase, 1;"
            " ld.volatile.shared.v2.u64 {s, end}, [a]; mov.b64 {room, lane}, s;"
            f" setp.lt.u32 ok, lane, {LANE_LIMIT}; and.pred ok, ok, lead;"
            " mad.wide.s32 addr, room, -8, end; shl.b32 tag, lane, 12;"
        )
        if not region:
            text += f" or.b32 w, tag, {bits_op}; mov.b64 rec, {{w, {time_op}}}; @ok st.global.b64 [addr], rec;"
        slot = head
        text += (f" shr.u64 x, {address_op}, {wire.FLAG_ADDR_SHIFT}; cvt.u32.u64 lo, x; or.b32 w, tag, {flag_addr};"
                 f" mov.b64 rec, {{w, lo}}; @ok st.global.b64 [addr+{8 * slot}], rec; or.b32 w, tag, {flag_value};")
        for value in ops[5:5 + len(values)]:
            slot += 1
            text += f" mov.b64 rec, {{w, {value}}}; @ok st.global.b64 [addr+{8 * slot}], rec;"
        if optional is not None:
            text += (f" and.pred put, opt, ok; mov.b64 rec, {{w, {ops[-1]}}};"
                     f" @put st.global.b64 [addr+{8 * (slot + 1)}], rec;")
        text += " sub.s32 room, room, need; @lead st.volatile.shared.u32 [a], room; setp.lt.s32 refill, room, 2;"
        if region:  # finish_region stores BEGIN / END and takes the next unit when REFILL_FLAG says so
            text += (f" mov.u64 $0, addr; or.b32 w, tag, {bits_op}; mov.b64 $1, {{w, {time_op}}};"
                     f" selp.u32 f, 2, 0, ok; @refill or.b32 f, f, {REFILL_FLAG:#x}; mov.b32 $2, f; bra.uni DONE;")
        else:
            text += " @!refill bra.uni DONE;"
        text += (_refill(self.kernel_id, self.warps, base)
                 + " setp.eq.u32 again, phase, 0; @again bra.uni STORE;"
                 + f" }} /* ikp {label} */")
        operands = [self.state_base, _thread_x(), Int32(bits), Int32(time), Int64(address)]
        operands += [Int32(v) for v in values]
        if optional is not None:
            operands += [Int32(optional[0]), Int32(optional[1])]
        constraints = "r,r,r,r,l" + ",r" * (len(values) + (2 if optional is not None else 0))
        if not region:
            inline_ptx.asm(None, operands, text, constraints)
            return None
        return inline_ptx.asm_results((Int64, Int64, Int32), operands, text, "=l,=l,=r," + constraints)

    def epilogue(self) -> None:
        """At the end of the traced copy: each lane's losses and strays into the pool (module docstring)."""
        asm = (
            "{ .reg .pred lead, inv, virt, lost_p, had, p; .reg .u32 m, a, d, room, lane, c, lost, e;"
            " .reg .u64 end, set, x;"
            + _LEADER
            + _STATE.format(tid="$1", base="$0")
            + f" ld.volatile.shared.v2.u32 {{room, lane}}, [a]; ld.volatile.shared.u64 end, [a+{S_END}];"
            f" ld.volatile.shared.v2.u32 {{c, lost}}, [a+{S_COLD}];"
            f" ld.volatile.shared.u32 e, [$0+{STATE_BYTES * self.warps + D_LAUNCH}];"
            f" ld.volatile.shared.u64 set, [$0+{STATE_BYTES * self.warps + D_SET}];"
            f" and.b32 d, lane, {INVALID}; setp.ne.and.u32 inv, d, 0, lead;"
            f" sub.u32 d, {INVALID_ROOM}, room; setp.ne.and.u32 p, d, 0, inv; cvt.u64.u32 x, d;"
            f" @p red.relaxed.gpu.global.add.u64 [set+{wire.POOL_SET_STRAY}], x;"
            f" and.b32 d, lane, {VIRTUAL}; setp.ne.u32 virt, d, 0; @virt sub.u32 lost, lost, room;"
            " setp.ne.and.u32 lost_p, lost, 0, lead; and.pred lost_p, lost_p, !inv;"
            f" and.b32 d, c, {HAD_UNIT}; setp.ne.and.u32 had, d, 0, lost_p; cvt.u64.u32 x, lost;"
            f" @had st.global.u64 [end+{LOST_WORD - UNIT}], x;"
            " and.pred p, lost_p, !had;"
            f" @p red.relaxed.gpu.global.add.u64 [set+{wire.POOL_SET_NOCHUNK_RECORDS}], x; mov.u64 x, 1;"
            f" @p red.relaxed.gpu.global.add.u64 [set+{wire.POOL_SET_NOCHUNK_LANES}], x;"
            f" @lost_p red.relaxed.gpu.global.min.u32 [set+{wire.POOL_SET_LOSS_MIN}], e;"
            f" @lost_p red.relaxed.gpu.global.max.u32 [set+{wire.POOL_SET_LOSS_MAX}], e; }} /* ikp epilogue */"
        )
        inline_ptx.asm(None, [self.state_base, _thread_x()], asm, "r,r")
