"""Device side of capture windows (spec.window_slots = R > 0): which launch records, into which ring slot.

Layout and rule: ikp_cute/ring.py (``ring.decide`` is the reference of the PTX below).

Per lane, at ``Profiler.create``: ONE predicated decision load of the window words (``ld.global.v4.u32``
of FILLED_EVERY, START, STOP, DONE: line 0 of the control block, which no lane writes in a launch that
does not record) by the thread that would write the lane, with the TICKS load (512 bytes away) issued
beside it; an empty window is decided closed by a branch past every use of TICKS, so a closed window
never waits on the line every lane's count lands on (ring.py: why). Otherwise a few ALU instructions
decide `recording` and the slot; a lane that does not record keeps its leader
predicate false, so every record and trailer store of the kernel is predicated off.

Counting launches: each launch adds exactly 2**24 to the 64-bit TICKS, split over its lanes (lane i of L
adds 2**24 // L, plus 1 when i < 2**24 % L; window_branch's copies that do not record split it over
blocks or warps instead, last bullet), and the launch index is TICKS >> 24. Every Profiler's lane holds
one of its ticks back until its role's end, so TICKS stays below the next multiple of 2**24 until every lane of
the launch has ended: a thread of any lane that reads TICKS before its own lane ends reads the launch's
index, whatever the order of the other lanes (nobody has to know which lane is last).
* Every lane adds its share minus one at create, right after its decision, with a fire-and-forget ``red``
  (and its whole share to LOST when the launch is in the window but the ring is full).
* At the lane's end ``Profiler.finalize`` adds the held tick, one fire-and-forget ``red``. In a launch that
  records, the lane's writer then does one ``atom.acq_rel.gpu.add`` on DONE; the lane that brings it to L
  is the last (every other lane added its ticks and finished its records before its acq_rel atomic), so it
  re-reads the block (TICKS is then exactly (index + 1) * 2**24), writes the slot's launch index, advances
  filled and resets DONE, and empties the window (START = STOP = 0) when no later launch is in it. When
  TICKS is not a whole number of launches there (a lane counted twice, or created again after its own
  finalize; best effort, docs/capture.md) it leaves DONE at
  ``ring.COUNT_ERROR`` instead: sticky until ``ring.arm``, and ``ring.launches()`` refuses to read,
  saying so.
* A copy of a role that has no Profiler (``ikp_cute.window_branch``, a launch that does not record)
  holds nothing back: ``count_copy`` adds one part per block when the window is empty (nobody reads
  TICKS then), one per warp otherwise (each warp's part lands after its own read).
The next launch on the stream sees all of it (kernel boundary). Every step is one inline PTX block (the
decision's one branch stays inside it), so it nests in any control flow.

Invariants (tests/unit/ikp_cute/test_ring.py CPU, tests/gpu/test_ring_gpu.py GPU): per Profiler the PTX holds exactly
two decisions' loads of the window words (create and the last finalizer), both predicated, each with its
TICKS load (window_branch adds its own decision and, counting at the copy's end, one re-read), and
the create's rule behind the empty-window branch; no add lands on line 0 (TICKS, LOST and STRAY are 512
bytes away); a spec without window compiles unchanged; the rule equals ring.decide; the shares of L
lanes sum to 2**24 for every L.
"""

from __future__ import annotations

import cutlass
from cutlass import Boolean, Int32, Int64, cute

from . import inline_ptx, ring
from .spec import ProfileSpec


def _rule(slots: int, own_share_in: bool = False) -> str:
    """PTX computing the launch index e from TICKS (lo, hi), then predicates w (in window) and r
    (recording) from e, f, s, t, done (a count error stops recording). `own_share_in`: every share of
    the launch has landed (the last finalizer: TICKS is then (index + 1) * 2**24, so the index is that of
    TICKS - 1)."""
    minus_one = " sub.cc.u32 lo, lo, 1; subc.u32 hi, hi, 0;" if own_share_in else ""
    return (
        minus_one
        + f" shr.u32 e, lo, {ring.TICK_BITS}; shl.b32 d, hi, {32 - ring.TICK_BITS}; or.b32 e, e, d;"
        " and.b32 filled, f, 65535; shr.u32 every, f, 16; max.u32 every, every, 1;"
        # every == 1 (the usual window) skips the remainder, a software sequence of ~20 instructions
        " sub.u32 d, e, s; setp.eq.u32 one, every, 1; @one mov.u32 d, 0; @one bra EVERY_ONE; rem.u32 d, d, every;"
        " EVERY_ONE:"
        " setp.ge.u32 w, e, s; setp.lt.and.u32 w, e, t, w; setp.eq.and.u32 w, d, 0, w;"
        f" setp.lt.and.u32 r, filled, {int(slots)}, w; setp.lt.and.u32 r, done, {ring.COUNT_ERROR}, r;"
    )


def _load(predicate: str, scope: str = "") -> str:
    """PTX loading the decision's six words when `predicate`: f, s, t, done from line 0 (one 16-byte
    load) and TICKS (lo, hi), both issued at once; x = the window is not empty (s < t). A caller that
    skips the rule when !x never waits for TICKS (ring.py says why that matters); defaults decide
    "closed"."""
    return (
        " mov.u32 lo, 0; mov.u32 hi, 0; mov.u32 f, 0; mov.u32 s, 1; mov.u32 t, 0; mov.u32 done, 0;"
        f" @{predicate} ld{scope}.global.v4.u32 {{f, s, t, done}}, [ctl];"
        f" @{predicate} ld{scope}.global.v2.u32 {{lo, hi}}, [ctl+{4 * ring.TICKS}];"
        f" setp.lt.and.u32 x, s, t, {predicate};"
    )


def _share(spec: ProfileSpec, lane: str, lanes: str) -> str:
    """PTX: lane `lane`'s share of the launch's 2**24 ticks into `sh` (u64): q = 2**24 // L, plus 1 for the
    first 2**24 % L lanes (>= 16: L <= 2**20), with L = `lanes`; `held`: the share less the tick held back
    until the lane's end. A launch of the spec's own grid has q and 2**24 % L known at compile time: the
    division (a software sequence, +0.2% of FA4 with the window closed, H100) runs only for another grid,
    behind a branch taken the same way by the whole launch (its label is local to the caller's block)."""
    full = min(spec.num_lanes, spec.write_stride)
    return (
        f" mov.u32 q, {ring.LAUNCH_TICKS // full}; mov.u32 d, {ring.LAUNCH_TICKS % full};"
        f" setp.eq.u32 x, {lanes}, {full}; @x bra SHARE_KNOWN;"
        f" div.u32 q, {ring.LAUNCH_TICKS}, {lanes}; mul.lo.u32 d, q, {lanes}; sub.u32 d, {ring.LAUNCH_TICKS}, d;"
        " SHARE_KNOWN:"
        f" setp.lt.u32 x, {lane}, d; selp.u32 d, 1, 0, x; add.u32 q, q, d; cvt.u64.u32 sh, q;"
        " sub.u64 held, sh, 1;"
    )


_REGS = ".reg .pred w, r, x, one; .reg .u32 lo, hi, e, f, s, t, done, filled, every, d, q; .reg .u64 ctl, sh, held;"


def _lanes(spec: ProfileSpec):
    """Lanes of this launch: min(grid * num_groups, write_stride), in 64 bits until clamped (a grid of
    2**31 x 65535 x 65535 blocks does not fit 32 bits)."""
    gx, gy, gz = cute.arch.grid_dim()
    blocks = Int64(gx) * Int64(gy) * Int64(gz)
    blocks_with_lanes = Int64(-(-spec.write_stride // spec.num_groups))
    return cutlass.min(Int32(cutlass.min(blocks, blocks_with_lanes)) * spec.num_groups, Int32(spec.write_stride))


NOT_IN_WINDOW = -1  # launch_decision: the launch is outside the window
NOT_RECORDED = -2  # launch_decision: in the window, but the ring is full (or a count error): counted in LOST
WINDOW_EMPTY = -3  # launch_decision: the window is empty, decided from line 0 alone (TICKS unread)


def _decide(spec: ProfileSpec, buffer, claims, owner=None, lane=None):
    """Int32 decision of the thread `claims` (others: WINDOW_EMPTY): the ring slot this launch records
    into (>= 0), NOT_IN_WINDOW, NOT_RECORDED or WINDOW_EMPTY. With `owner` (this thread owns lane `lane`):
    the lane adds its share of the launch count less the held tick here, after its decision (and its
    share to LOST when NOT_RECORDED)."""
    control = Int64(buffer.iterator.toint())
    count = owner is not None
    text = (
        "{ .reg .pred p, c, lost; " + _REGS + " mov.b64 ctl, $2;"
        " setp.ne.u32 p, $1, 0;"
        + _load("p")
        # an empty window is decided without TICKS: the branch skips every use of it (no wait on its load)
        + " setp.ne.u32 w, f, f; mov.pred r, w; mov.u32 filled, 0; @!x bra DECIDED;"
        + _rule(spec.window_slots)
        + " DECIDED: and.pred r, r, p; and.pred w, w, p;"
        f" selp.b32 d, {NOT_RECORDED & 0xFFFFFFFF}, {NOT_IN_WINDOW & 0xFFFFFFFF}, w;"
        f" @!x mov.b32 d, {WINDOW_EMPTY & 0xFFFFFFFF}; selp.u32 $0, filled, d, r;"
    )
    operands = [Int32(Boolean(claims)), control]
    if count:
        text += (
            " setp.ne.u32 c, $3, 0; and.pred lost, c, w; and.pred lost, lost, !r;"
            + _share(spec, "$4", "$5")
            + f" @c red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}], held;"
            f" @lost red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.LOST}], sh;"
        )
        operands += [Int32(Boolean(owner)), Int32(lane), _lanes(spec)]
    text += " }"
    return Int32(inline_ptx.asm(Int32.mlir_type, operands, text, "=r,r,l" + (",r,r,r" if count else "")))


def open_slot(spec: ProfileSpec, buffer, claims, owner=None, lane=None):
    """-> (slot buffer: a tensor of spec.total_slots words, recording: Boolean) for the thread `claims`;
    `owner` / `lane`: _decide's."""
    slot = _decide(spec, buffer, claims, owner, lane)
    recording = slot >= 0
    first = ring.control_words64(spec.window_slots) + cutlass.select_(recording, slot, Int32(0)) * spec.total_slots
    slot_buffer = cute.make_tensor(buffer.iterator + first, cute.make_layout(spec.total_slots))
    return slot_buffer, recording


def launch_decision(spec: ProfileSpec, buffer):
    """Int32, the same in every thread of the launch: _decide's, taken by every thread (each loads the
    control block: the same bytes for the whole launch, one broadcast transaction per warp), counting
    nothing. The launch index cannot move before the reader's own lane has ended, nor the slot count
    before every lane has, so every thread that reads before its lane's end (before its role's first
    collective operation, in practice) gets the launch's value: a branch on it never splits a warp group."""
    return _decide(spec, buffer, True)


def grid_fits(spec: ProfileSpec):
    """Boolean, the same in every block: every lane of every block of this launch exists (grid blocks x
    num_groups <= write_stride), from %nctaid alone (nothing that waits for %ctaid)."""
    gx, gy, gz = cute.arch.grid_dim()
    return Int64(gx) * Int64(gy) * Int64(gz) <= Int64(spec.write_stride // spec.num_groups)


def count_copy(spec: ProfileSpec, buffer, decision=None, ticks: bool = True):
    """A role's copy that holds no Profiler counts itself in the launch count (fire-and-forget adds):
    - window empty (WINDOW_EMPTY: nobody reads TICKS in the launch): thread 0 of each block adds the
      block's part, 2**24 // B of the launch's B blocks, one add per block;
    - otherwise lane 0 of each warp adds the warp's part, 2**24 // W of the launch's W warps: a thread
      reads TICKS only in its decision, before its warp's part is in, so no reader sees the launch
      complete, and nothing is held back (a lane-wide count would hold a tick for the group's late warps
      until after the copy).
    Each part is a constant for the spec's own grid; thread 0 of block 0 adds the remainder.
    `ticks`: the part to TICKS. `decision` (launch_decision's, < 0): the warp's part to LOST in a launch
    the window holds but the full ring cannot (NOT_RECORDED), and without `ticks` nothing else (computed
    only in such a launch: a uniform branch past it). Without `decision` (after the copy, where it is no
    longer live) the window words are read again: no lane writes them in a launch that does not record.
    Where is the caller's choice (window_branch's `count_at`): the copy's start or end, whichever is off
    the block's critical path. Per block with the window empty: one add per warp from every block at once
    cost FA4 up to +0.3% more, depending on where the counter lies in L2 (docs/capture.md)."""
    if not ticks and decision is None:
        raise ValueError("count_copy: ticks=False counts LOST only, which needs the decision")
    warps_per_block = spec.num_groups * spec.warps_per_group
    full_blocks = min(spec.num_lanes, spec.write_stride) // spec.num_groups  # the spec's own grid
    full_warps = full_blocks * warps_per_block
    block_part, block_rest = ring.count_parts(full_blocks)
    warp_part, warp_rest = ring.count_parts(full_warps)
    tick = ring.LAUNCH_TICKS
    control = Int64(buffer.iterator.toint())
    given = decision is not None
    if given:
        empty = f" setp.eq.s32 empty, $3, {WINDOW_EMPTY};"
    else:  # by the threads that may add (lane 0 of each warp), the others default to "empty"
        empty = (" mov.u32 s, 0; mov.u32 e, 0; @lead ld.global.v4.u32 {f, s, e, v}, [ctl];"
                 " setp.ge.u32 empty, s, e;")
    text = (
        "{ .reg .pred p, x, lead, empty, lost; .reg .u32 t, v, n, part, extra, f, s, e;"
        " .reg .u64 ctl, amount; mov.b64 ctl, $0; mov.u32 v, %laneid; setp.eq.u32 lead, v, 0;"
        + empty
        + ("" if ticks else f" setp.ne.s32 x, $3, {NOT_RECORDED}; @x bra COUNTED;")
        # the launch's blocks or warps, and the part when they are the spec's own
        + " selp.u32 n, $1, $2, empty;"
        f" selp.u32 part, {block_part}, {warp_part}, empty; selp.u32 extra, {block_rest}, {warp_rest}, empty;"
        f" selp.u32 v, {full_blocks}, {full_warps}, empty;"
        " setp.eq.u32 x, n, v; @x bra PART_KNOWN;"
        f" div.u32 part, {tick}, n; mul.lo.u32 extra, part, n; sub.u32 extra, {tick}, extra;"
        " PART_KNOWN:"
        # thread 0 of its block counts the block, lane 0 of its warp the warp
        " mov.u32 t, %tid.x; mov.u32 v, %tid.y; or.b32 t, t, v; mov.u32 v, %tid.z; or.b32 t, t, v;"
        " setp.eq.u32 p, t, 0; @!empty mov.pred p, lead;"
        # the remainder: thread 0 of block 0
        " mov.u32 v, %ctaid.x; or.b32 t, t, v; mov.u32 v, %ctaid.y; or.b32 t, t, v; mov.u32 v, %ctaid.z;"
        " or.b32 t, t, v; setp.eq.u32 x, t, 0; selp.u32 extra, extra, 0, x; add.u32 part, part, extra;"
        " cvt.u64.u32 amount, part;"
        + (f" @p red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}], amount;" if ticks else "")
        + (f" setp.eq.and.s32 lost, $3, {NOT_RECORDED}, p;"
           f" @lost red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.LOST}], amount;" if given else "")
        + ("" if ticks else " COUNTED:")
        + " }"
    )
    gx, gy, gz = cute.arch.grid_dim()
    blocks = Int32(gx * gy * gz)  # the copy runs only where the grid fits the session (grid_fits)
    operands = [control, blocks, blocks * warps_per_block]
    operands += [Int32(decision)] if given else []
    inline_ptx.asm(None, operands, text, "l,r,r" + (",r" if given else ""))


def end_lane(spec: ProfileSpec, buffer, counted, writer):
    """Profiler.finalize's step with a window: `counted` (the thread that counted the lane at create)
    adds the held tick; in a launch that records, the writer then does the last-lane step (module
    docstring). The writer is the counting thread of a recording lane, so its tick precedes its DONE
    atomic in program order and the last lane's acquire sees every tick."""
    lanes = _lanes(spec)
    control = Int64(buffer.iterator.toint())
    text = (
        "{ .reg .pred c, p, last, bad, ok; .reg .u32 old, flag; .reg .u64 a; " + _REGS + " mov.b64 ctl, $2;"
        " setp.ne.u32 c, $0, 0; setp.ne.u32 p, $1, 0; mov.u32 old, 0;"
        f" @c red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.TICKS}], 1;"
        f" @p atom.acq_rel.gpu.global.add.u32 old, [ctl+{4 * ring.DONE}], 1;"
        " add.u32 d, $3, -1; setp.eq.and.u32 last, old, d, p;"
        + _load("last", ".relaxed.gpu")
        + f" and.b32 d, lo, {ring.LAUNCH_TICKS - 1}; setp.ne.and.u32 bad, d, 0, last;"
        + _rule(spec.window_slots, own_share_in=True)
        + f" setp.lt.and.u32 ok, filled, {int(spec.window_slots)}, last; and.pred ok, ok, !bad;"
        " mul.wide.u32 a, filled, 4; add.u64 a, a, ctl;"
        f" @ok st.relaxed.gpu.global.u32 [a+{4 * ring.SLOT_EPOCHS}], e;"
        f" add.u32 f, f, 1; @ok st.relaxed.gpu.global.u32 [ctl+{4 * ring.FILLED_EVERY}], f;"
        # the window's last launch empties it, so later launches decide without reading TICKS
        " sub.u32 d, t, e; setp.le.and.u32 ok, d, every, ok;"
        f" @ok st.relaxed.gpu.global.u32 [ctl+{4 * ring.START}], 0;"
        f" @ok st.relaxed.gpu.global.u32 [ctl+{4 * ring.STOP}], 0;"
        f" selp.u32 flag, {ring.COUNT_ERROR}, 0, bad;"
        f" @last st.relaxed.gpu.global.u32 [ctl+{4 * ring.DONE}], flag; }}"
    )
    inline_ptx.asm(None, [Int32(Boolean(counted)), Int32(Boolean(writer)), control, lanes], text, "r,r,l,r")
