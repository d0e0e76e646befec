"""Device side of capture windows (spec.window_slots = R > 0): which launch records, into which ring slot.

Layout and rule: ikp_cute/ring.py (``ring.decide`` is the reference of the PTX below).

Per lane, at ``Profiler.create``: ONE predicated load of the control block (``ld.global.v4.u32`` of
TICKS, FILLED_EVERY, START, and STOP beside it, same line) by the thread that would write the lane, then a
few ALU instructions decide `recording` and the slot; a lane that does not record keeps its leader
predicate false, so every record and trailer store of the kernel is predicated off.

Counting launches: each launch adds exactly 2**24 to the 64-bit TICKS, split over its lanes (lane i of L
adds 2**24 // L, plus 1 when i < 2**24 % L), and the launch index is TICKS >> 24. Every lane of a
launch reads TICKS before its own share lands and no launch adds more than 2**24, so all lanes of a launch
read the same index whatever the order, and nobody has to know which lane is last for it to advance.
* Every lane adds its share at create, right after its decision, with a fire-and-forget ``red`` (and the
  same share to LOST when the launch is in the window but the ring is full): a closed launch costs the
  decision and nothing at the end of the kernel, and nothing is held for later.
* A lane of a launch that records, at ``Profiler.finalize``: one ``atom.acq_rel.gpu.add`` on DONE; the lane
  that brings it to L is the last (every other lane has finished its records before its acq_rel atomic),
  so it re-reads the block (its own share is in TICKS, the launch's last shares may be, so the index is
  that of TICKS - 1), writes the slot's launch index, advances filled and resets DONE.
The next launch on the stream sees all of it (kernel boundary). Both steps are branch-free inline PTX,
so they nest in any control flow.

Invariants (tests/test_ring.py CPU, tests/test_ring_gpu.py GPU): the PTX holds exactly two decisions'
loads of the control block (create and the last finalizer), both predicated; a spec without window
compiles unchanged; the rule equals ring.decide; the shares of L lanes sum to 2**24 for every L.
"""

from __future__ import annotations

import cutlass
from cutlass import Boolean, Int32, Int64, cute

from . import inline_ptx, ring
from .spec import ProfileSpec


def _rule(slots: int, own_share_in: bool = False) -> str:
    """PTX computing the launch index e from TICKS (lo, hi), then predicates w (in window) and r
    (recording) from e, f, s, t. `own_share_in`: the reader's own share has landed (the last finalizer:
    TICKS is then in (index * 2**24, (index + 1) * 2**24], so the index is that of TICKS - 1)."""
    minus_one = " sub.cc.u32 lo, lo, 1; subc.u32 hi, hi, 0;" if own_share_in else ""
    return (
        minus_one
        + f" shr.u32 e, lo, {ring.TICK_BITS}; shl.b32 d, hi, {32 - ring.TICK_BITS}; or.b32 e, e, d;"
        " and.b32 filled, f, 65535; shr.u32 every, f, 16; max.u32 every, every, 1;"
        " sub.u32 d, e, s; rem.u32 d, d, every;"
        " setp.ge.u32 w, e, s; setp.lt.and.u32 w, e, t, w; setp.eq.and.u32 w, d, 0, w;"
        f" setp.lt.and.u32 r, filled, {int(slots)}, w;"
    )


def _load(predicate: str, scope: str = "") -> str:
    """PTX loading the decision's five words (lo, hi, f, s, t) when `predicate`; defaults decide "closed"."""
    return (
        " mov.u32 lo, 0; mov.u32 hi, 0; mov.u32 f, 0; mov.u32 s, 1; mov.u32 t, 0;"
        f" @{predicate} ld{scope}.global.v4.u32 {{lo, hi, f, s}}, [ctl];"
        f" @{predicate} ld{scope}.global.u32 t, [ctl+{4 * ring.STOP}];"
    )


# The lane's share of the launch's 2**24 ticks into `sh` (u64): q = 2**24 // L, plus 1 for the first
# 2**24 % L lanes; operands lane (i) and lanes (L).
_SHARE = (
    f" div.u32 q, {ring.LAUNCH_TICKS}, {{lanes}}; mul.lo.u32 d, q, {{lanes}}; sub.u32 d, {ring.LAUNCH_TICKS}, d;"
    " setp.lt.u32 x, {lane}, d; selp.u32 d, 1, 0, x; add.u32 q, q, d; cvt.u64.u32 sh, q;"
)
_REGS = ".reg .pred w, r, x; .reg .u32 lo, hi, e, f, s, t, filled, every, d, q; .reg .u64 ctl, sh;"


def _lanes(spec: ProfileSpec):
    """Lanes of this launch: min(grid * num_groups, write_stride)."""
    gx, gy, gz = cute.arch.grid_dim()
    return cutlass.min(Int32(gx * gy * gz) * spec.num_groups, Int32(spec.write_stride))


def open_slot(spec: ProfileSpec, buffer, claims, owner=None, lane=None, unless_recording: bool = False):
    """-> (slot buffer: a tensor of spec.total_slots words, recording: Boolean) for the thread `claims`.
    With `owner` (this thread owns lane `lane`): the lane adds its share of the launch count here, after
    its decision (and to LOST when the window holds the launch but the ring is full); `unless_recording`:
    only when the launch does not record."""
    control = Int64(buffer.iterator.toint())
    count = owner is not None
    text = (
        "{ .reg .pred p, c, lost; " + _REGS + " mov.b64 ctl, $2;"
        " setp.ne.u32 p, $1, 0;"
        + _load("p")
        + _rule(spec.window_slots)
        + " and.pred r, r, p; selp.u32 $0, filled, 0xFFFFFFFF, r;"
    )
    operands = [Int32(Boolean(claims)), control]
    if count:
        text += (
            " setp.ne.u32 c, $3, 0; and.pred lost, c, w; and.pred lost, lost, !r;"
            + (" and.pred c, c, !r;" if unless_recording else "")
            + _SHARE.format(lane="$4", lanes="$5")
            + " @c red.relaxed.gpu.global.add.u64 [ctl], sh;"
            f" @lost red.relaxed.gpu.global.add.u64 [ctl+{4 * ring.LOST}], sh;"
        )
        operands += [Int32(Boolean(owner)), Int32(lane), _lanes(spec)]
    text += " }"
    slot = Int32(inline_ptx.asm(Int32.mlir_type, operands, text, "=r,r,l" + (",r,r,r" if count else "")))
    recording = slot >= 0
    first = ring.control_words64(spec.window_slots) + cutlass.select_(recording, slot, Int32(0)) * spec.total_slots
    slot_buffer = cute.make_tensor(buffer.iterator + first, cute.make_layout(spec.total_slots))
    return slot_buffer, recording


def launch_records(spec: ProfileSpec, buffer, owner=None, lane=None):
    """Boolean: this launch records (in the window, a ring slot free): open_slot's decision taken by every
    thread (each loads the control block: the same bytes for the whole launch, one broadcast transaction
    per warp). The block only changes in ways the decision cannot see until every lane of the launch has
    counted itself, so the value is the same in every thread of the launch: a branch on it never splits a
    warp group. With `owner` / `lane`: that lane is counted here when the launch does not record."""
    return open_slot(spec, buffer, True, owner, lane, unless_recording=True)[1]


def close_launch(spec: ProfileSpec, buffer, recorder):
    """The finalize step of a lane's writer in a launch that records (see the module docstring)."""
    lanes = _lanes(spec)
    control = Int64(buffer.iterator.toint())
    text = (
        "{ .reg .pred p, last; .reg .u32 old; .reg .u64 a; " + _REGS + " mov.b64 ctl, $1;"
        " setp.ne.u32 p, $0, 0; mov.u32 old, 0;"
        f" @p atom.acq_rel.gpu.global.add.u32 old, [ctl+{4 * ring.DONE}], 1;"
        " add.u32 d, $2, -1; setp.eq.and.u32 last, old, d, p;"
        + _load("last", ".relaxed.gpu")
        + _rule(spec.window_slots, own_share_in=True)
        + " and.pred r, r, last;"
        " mul.wide.u32 a, filled, 4; add.u64 a, a, ctl;"
        f" @r st.relaxed.gpu.global.u32 [a+{4 * ring.SLOT_EPOCHS}], e;"
        f" add.u32 f, f, 1; @r st.relaxed.gpu.global.u32 [ctl+{4 * ring.FILLED_EVERY}], f;"
        f" @last st.relaxed.gpu.global.u32 [ctl+{4 * ring.DONE}], 0; }}"
    )
    inline_ptx.asm(None, [Int32(Boolean(recorder)), control, lanes], text, "r,l,r")
