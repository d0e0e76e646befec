"""Device side of capture windows (spec.window_slots = R > 0): which launch records, into which ring slot.

Layout and rule: ikp_cute/ring.py (``ring.decide`` is the reference of the PTX below).

Per lane, at ``Profiler.create``: ONE predicated 16-byte load (``ld.global.v4.u32`` of EPOCH,
FILLED_EVERY, START, STOP) by the thread that would write the lane, then a few ALU instructions decide
`recording` and the slot; a lane that does not record keeps its leader predicate false, so every record
and trailer store of the kernel is predicated off (a closed window costs the load, the decision and
the finalize atomic below, nothing per record).

Per lane, at ``Profiler.finalize``: one ``atom.acq_rel.gpu.add`` on DONE by the lane's owner. The lane
that brings DONE to the number of lanes of this launch (min(grid * num_groups, write_stride)) is the
last: every other lane has loaded the control block and finished its records before its own acq_rel
atomic, so the last one re-reads the block, writes the slot's launch index, advances filled (or LOST
when the ring is full), resets DONE and advances EPOCH. The next launch on the stream sees it (kernel
boundary). Both steps are branch-free inline PTX, so they nest in any control flow.

Invariants (tests/test_ring.py CPU, tests/test_ring_gpu.py GPU): the PTX holds exactly two v4 loads of
the control block (create and the last finalizer), both predicated; a spec without window compiles
unchanged; the rule equals ring.decide.
"""

from __future__ import annotations

import cutlass
from cutlass import Boolean, Int32, Int64, cute

from . import inline_ptx, ring
from .spec import ProfileSpec


def _rule(slots: int) -> str:
    """PTX computing predicates w (in window) and r (recording) from e, f, s, t (the four words)."""
    return (
        " and.b32 filled, f, 65535; shr.u32 every, f, 16; max.u32 every, every, 1;"
        " sub.u32 d, e, s; rem.u32 d, d, every;"
        " setp.ge.u32 w, e, s; setp.lt.and.u32 w, e, t, w; setp.eq.and.u32 w, d, 0, w;"
        f" setp.lt.and.u32 r, filled, {int(slots)}, w;"
    )


def open_slot(spec: ProfileSpec, buffer, claims):
    """-> (slot buffer: a tensor of spec.total_slots words, recording: Boolean) for the thread `claims`."""
    control = Int64(buffer.iterator.toint())
    text = (
        "{ .reg .pred p, w, r; .reg .u32 e, f, s, t, filled, every, d;"
        " mov.u32 e, 0; mov.u32 f, 0; mov.u32 s, 1; mov.u32 t, 0;"
        " setp.ne.u32 p, $1, 0;"
        " @p ld.global.v4.u32 {e, f, s, t}, [$2];"
        + _rule(spec.window_slots)
        + " and.pred r, r, p; selp.u32 $0, filled, 0xFFFFFFFF, r; }"
    )
    slot = Int32(inline_ptx.asm(Int32.mlir_type, [Int32(Boolean(claims)), control], text, "=r,r,l"))
    recording = slot >= 0
    first = ring.control_words64(spec.window_slots) + cutlass.select_(recording, slot, Int32(0)) * spec.total_slots
    slot_buffer = cute.make_tensor(buffer.iterator + first, cute.make_layout(spec.total_slots))
    return slot_buffer, recording


def launch_records(spec: ProfileSpec, buffer):
    """Boolean: this launch records (in the window, a ring slot free): open_slot's decision taken by every
    thread (each loads the control block: the same 16 bytes for the whole launch, one broadcast
    transaction per warp). The block only changes after every lane of the launch has finalized, so the
    value is the same in every thread of the launch: a branch on it never splits a warp group."""
    return open_slot(spec, buffer, True)[1]


def close_launch(spec: ProfileSpec, buffer, owner):
    """The finalize step of a lane's owner (see the module docstring)."""
    gx, gy, gz = cute.arch.grid_dim()
    lanes = cutlass.min(Int32(gx * gy * gz) * spec.num_groups, Int32(spec.write_stride))
    control = Int64(buffer.iterator.toint())
    text = (
        "{ .reg .pred p, last, w, r, lost; .reg .u32 old, e, f, s, t, filled, every, d, n; .reg .u64 a;"
        " setp.ne.u32 p, $0, 0; mov.u32 old, 0;"
        f" @p atom.acq_rel.gpu.global.add.u32 old, [$1+{4 * ring.DONE}], 1;"
        " setp.eq.and.u32 last, old, $2, p;"
        " mov.u32 e, 0; mov.u32 f, 0; mov.u32 s, 1; mov.u32 t, 0;"
        " @last ld.relaxed.gpu.global.v4.u32 {e, f, s, t}, [$1];"
        + _rule(spec.window_slots)
        + " and.pred r, r, last; and.pred lost, w, last; and.pred lost, lost, !r;"
        f" mul.wide.u32 a, filled, 4; add.u64 a, a, $1;"
        f" @r st.relaxed.gpu.global.u32 [a+{4 * ring.SLOT_EPOCHS}], e;"
        f" add.u32 f, f, 1; @r st.relaxed.gpu.global.u32 [$1+{4 * ring.FILLED_EVERY}], f;"
        f" @lost ld.relaxed.gpu.global.u32 n, [$1+{4 * ring.LOST}]; add.u32 n, n, 1;"
        f" @lost st.relaxed.gpu.global.u32 [$1+{4 * ring.LOST}], n;"
        f" @last st.relaxed.gpu.global.u32 [$1+{4 * ring.DONE}], 0;"
        f" add.u32 e, e, 1; @last st.relaxed.gpu.global.u32 [$1+{4 * ring.EPOCH}], e; }}"
    )
    inline_ptx.asm(None, [Int32(Boolean(owner)), control, lanes - 1], text, "r,l,r")
