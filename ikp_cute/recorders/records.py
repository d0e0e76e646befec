"""One record as every recorder writes it: its tag bits, the timer read, the packing into a 64-bit slot,
and the guarded store of a (tag, timer) pair.

A record is the v1 wire format's (host_decode/core/wire.py): ``(timer_lo32 << 32) | tag32``, the tag
holding the lane (OR-ed in by the recorder), the event id and the event type.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py):
* The timer is the low half of one 64-bit `%globaltimer` read, which ptxas reads with one CS2R
  (`%globaltimer_lo` costs S2UR + NOP + MOV): test_cursor_record_ablation counts one CS2R per record.
* A record is two 32-bit words (tag, timer) merged into one 64-bit store (test_cursor_record_ablation:
  one STG per record).
* `sub_nsw` lets LLVM fold `room - j > 0` into `room > j` after unrolling: one compare per region against
  an immediate (test_cursor_record_ablation: half an ISETP per record).
* Every read and store is inline PTX with side effects or an ordinary store ordered by it, so it lands
  where its call is traced (ikp_cute/inline_ptx.py).
"""

from __future__ import annotations

from cutlass import Int32, Int64, Uint32, Uint64, cute

from host_decode.core import wire

from .. import inline_ptx

BEGIN = int(wire.EventType.BEGIN)
END = int(wire.EventType.END)
INSTANT = int(wire.EventType.INSTANT)
FINALIZE = int(wire.EventType.FINALIZE)


def event_bits(event_id: int, event_type: int) -> int:
    """A record's low tag bits for `event_id` and `event_type` (the lane's bits are OR-ed in by the recorder)."""
    return (event_id << wire.EVENT_ID_SHIFT) | event_type


def pack(timer32, tag32):
    """(timer32 << 32) | tag32 as Int64, both halves zero-extended."""
    return Int64((Uint64(Uint32(timer32)) << 32) | Uint64(Uint32(tag32)))


def timer_lo():
    """Low 32 bits of a 64-bit `%globaltimer` read: ptxas reads it with one CS2R, whereas
    `%globaltimer_lo` costs S2UR + NOP + MOV."""
    return timer_read()[0]


def timer_read():
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


@cute.jit
def store_if(pred, words, k, tag_bits, timer):
    """Slot `k` of `words` (the (tag, timer) int32 pairs of a lane) gets one record when `pred`."""
    if pred:
        words[k, 0] = tag_bits
        words[k, 1] = timer
