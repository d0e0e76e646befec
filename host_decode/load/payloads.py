"""Payload records of the flags tracer (docs/flags.md), read at load time: instants of the reserved ids
FLAG_ADDR and FLAG_VALUE whose 32-bit timer field carries a flag's address >> 2 or a value, not a time.

Decoded as ordinary records they would break their lane's timeline (an unsigned step to an address and
back moves the rest of the lane by up to 2**32 ns), so for a capture whose sidecar declares ``flags``:

1. `split_payloads` finds every payload in the raw buffer (lane-major, program order), keeps its value,
   the event id and type of the record it follows, and rewrites its timer field to the time of the nearest
   timed record before it in its lane (after it, when there is none before): the decoder then sees a
   step of zero and places it at its record's time;
2. the buffer is decoded as usual; `attach_payloads` moves the payload instants out of ``trace.instants``
   into ``trace.payloads`` (core.model.PAYLOAD_DTYPE) with their values. Both sides list the payloads in
   lane-major program order; a lane whose decoded payloads do not number what the buffer holds (a record
   set aside by the decoder) keeps none, counted in ``trace.meta["payload_losses"]``.

When host_decode.core.wire names the ids itself (FLAG_ADDR_EVENT_ID, FLAG_VALUE_EVENT_ID), the decoder
keeps payloads on its own and this module stands aside (`decoder_keeps_payloads`).

Invariants a change could break, with the test guarding each
(tests/unit/host_decode/load/test_payloads.py):
* a capture with payloads decodes its other records exactly as the same capture without them
  (::test_payloads_leave_the_timeline_alone);
* every payload of the buffer reaches trace.payloads with its value and its record, or is counted
  (::test_every_payload_is_kept_or_counted);
* captures without a ``flags`` sidecar key are decoded untouched (::test_captures_without_flags_are_untouched).
"""

from __future__ import annotations

import numpy as np

from host_decode.core import wire
from host_decode.core.model import PAYLOAD_DTYPE, Trace

# Until wire.py names them (docs/flags.md: FLAG_ADDR 1020, FLAG_VALUE 1019), the ids the flags tracer
# reserves; wire's own values win as soon as it has them.
FLAG_ADDR_EVENT_ID = int(getattr(wire, "FLAG_ADDR_EVENT_ID", wire.MAX_EVENT_ID - 3))
FLAG_VALUE_EVENT_ID = int(getattr(wire, "FLAG_VALUE_EVENT_ID", wire.MAX_EVENT_ID - 4))
PAYLOAD_IDS = (FLAG_VALUE_EVENT_ID, FLAG_ADDR_EVENT_ID)
_INSTANT, _FINALIZE = int(wire.EventType.INSTANT), int(wire.EventType.FINALIZE)
_UNTIMED_IDS = (wire.ANCHOR_HI_EVENT_ID, wire.DROPPED_EVENT_ID)


def decoder_keeps_payloads() -> bool:
    """The decoder handles payload records itself (wire names their ids): nothing to split here."""
    return hasattr(wire, "FLAG_ADDR_EVENT_ID")


def wants_split(side: dict) -> bool:
    """A capture whose payloads this module must split out before decoding."""
    return bool(side.get("flags")) and not decoder_keeps_payloads()


def split_payloads(buf: np.ndarray, write_stride: int, num_lanes: int) -> np.ndarray:
    """Rewrite, in place, the timer field of every payload record of `buf` (uint64, header first) to its
    record's time; returns the payloads found (PAYLOAD_DTYPE without times, lane-major program order).
    Records the decoder sets aside (another lane's tag, after the lane's finalize) are skipped."""
    body = buf[1:]
    slot = np.flatnonzero(body)
    timer, tag = wire.split_records(body[slot])
    lane, event, etype = wire.tag_fields(tag)
    col = slot % write_stride
    valid = (lane.astype(np.int64) == col) & (col < num_lanes)
    slot, timer, tag, event, etype, col = slot[valid], timer[valid], tag[valid], event[valid], etype[valid], col[valid]
    order = np.lexsort((slot, col))  # lane-major, program (slot) order
    slot, timer, tag, event, etype, col = slot[order], timer[order], tag[order], event[order], etype[order], col[order]
    n = slot.size
    first = np.r_[True, col[1:] != col[:-1]] if n else np.zeros(0, bool)
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    fin = etype == _FINALIZE  # records after the first finalize of a lane are not decoded
    fin_before = np.cumsum(fin) - fin
    after = fin_before - fin_before[start] > 0
    payload = (etype == _INSTANT) & np.isin(event, PAYLOAD_IDS) & ~after
    if not payload.any():
        return np.zeros(0, PAYLOAD_DTYPE)
    pos = np.arange(n)
    host = np.maximum.accumulate(np.where(~payload, pos, -1))  # the record each payload follows
    has_host = host >= start
    timed = ~payload & ~((etype == _INSTANT) & np.isin(event, _UNTIMED_IDS))
    before = np.maximum.accumulate(np.where(timed, pos, -1))
    after_t = np.minimum.accumulate(np.where(timed, pos, n)[::-1])[::-1]
    lane_end = np.r_[np.flatnonzero(first)[1:], n] if n else np.zeros(0, np.int64)
    stop = lane_end[np.cumsum(first) - 1]
    source = np.where(before >= start, before, np.where(after_t < stop, after_t, pos))
    p = np.flatnonzero(payload)
    out = np.zeros(p.size, PAYLOAD_DTYPE)
    out["lane"] = col[p]
    out["event"] = event[p]
    out["value"] = timer[p]
    h = host[p]
    out["of_event"] = np.where(has_host[p], event[np.maximum(h, 0)].astype(np.int16), -1)
    out["of_type"] = np.where(has_host[p], etype[np.maximum(h, 0)].astype(np.int8), -1)
    new_timer = timer[source[p]].astype(np.uint64)
    buf[1 + slot[p]] = (new_timer << np.uint64(32)) | tag[p].astype(np.uint64)
    return out


def attach_payloads(trace: Trace, found: np.ndarray) -> Trace:
    """`trace` (decoded from the buffer `split_payloads` rewrote) with its payload instants moved into
    trace.payloads, values from `found`; lanes whose counts disagree keep none (meta["payload_losses"])."""
    inst = trace.instants
    is_payload = np.isin(inst["event"], PAYLOAD_IDS)
    decoded = inst[is_payload]
    trace.instants = inst[~is_payload]
    lanes = np.union1d(decoded["lane"], found["lane"]).astype(np.int64)
    n_dec = np.bincount(np.searchsorted(lanes, decoded["lane"]), minlength=lanes.size)
    n_found = np.bincount(np.searchsorted(lanes, found["lane"]), minlength=lanes.size)
    good = lanes[n_dec == n_found]
    keep_dec, keep_found = np.isin(decoded["lane"], good), np.isin(found["lane"], good)
    differ = decoded["event"][keep_dec] != found["event"][keep_found]  # same count, other records: not ours
    if differ.any():
        good = np.setdiff1d(good, decoded["lane"][keep_dec][differ])
        keep_dec, keep_found = np.isin(decoded["lane"], good), np.isin(found["lane"], good)
    out = found[keep_found].copy()
    d = decoded[keep_dec]
    out["ts_ns"] = d["ts_ns"]
    out["block"], out["group"] = d["block"], d["group"]
    lost = int((~keep_found).sum())
    if lost:
        trace.meta["payload_losses"] = {"set_aside_by_decoder": lost}
    trace.payloads = out
    return trace
