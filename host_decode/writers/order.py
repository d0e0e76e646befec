"""The one event order and sub-track assignment of every trace writer (Perfetto and Chrome JSON).

Order (the file order of a Perfetto trace; Chrome JSON writes its regions in the BEGIN order of it):
per lane by time; at equal time a lane's ENDs (inner region first), then its instants, then its BEGINs
(outer region first, i.e. by row of the span table in (lane, begin) order); a zero-length region is its
BEGIN immediately followed by its END. Trace processor sorts by timestamp and keeps file order for ties,
and the other order silently nests back-to-back slices.

The order is computed on runs of whole lanes (host_decode.writers.lanes); the sub-tracks that keep
slices nested come from it (host_decode.writers.subtracks).

Guarded by tests/unit/host_decode/writers/test_perfetto.py (test_file_order_is_merged_stream_order against the slow
reference in tests/support/stream_oracle.py, test_equal_timestamps_end_before_begin, test_overlap_goes_to_sibling_track,
test_random_traces_nest, test_lexsort_order_and_chunking_give_the_same_file) and
tests/unit/host_decode/writers/test_chrome_json.py.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np

from host_decode.core.model import Trace
from host_decode.writers.ids import nondecreasing

KIND_END, KIND_INSTANT, KIND_BEGIN = 0, 1, 2  # order of events of one lane at one timestamp

def trace_origin(trace: Trace) -> int:
    """The ns that becomes t=0: the launch's first record, or earlier if an event is earlier."""
    origin = trace.start_ns if trace.lanes.size else None
    lows = [int(trace.spans["start_ns"].min())] if trace.spans.size else []
    if trace.instants.size:
        lows.append(int(trace.instants["ts_ns"].min()))
    if lows and (origin is None or min(lows) < origin):
        origin = min(lows)
    return int(origin or 0)


def check_input(spans: np.ndarray, instants: np.ndarray) -> None:
    if spans.size:
        check_spans(spans, spans["lane"], spans["event"], spans["start_ns"], spans["end_ns"])
    check_instants(instants)


def check_spans(spans: np.ndarray, lane: np.ndarray, event: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """lane/event/start/end: the span table's columns (any common time offset)."""
    bad = np.flatnonzero(end < start)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{bad.size} span(s) end before they begin (first: span row {i}, lane {int(spans['lane'][i])}, "
            f"start {int(spans['start_ns'][i])} ns > end {int(spans['end_ns'][i])} ns)"
        )
    check_span_ids(lane, event)


def check_span_ids(lane: np.ndarray, event: np.ndarray) -> None:
    if int(lane.min()) < 0 or int(event.min()) < 0:
        raise ValueError("span table has negative lane or event ids")


def check_instants(instants: np.ndarray) -> None:
    if instants.size and (int(instants["lane"].min()) < 0 or int(instants["event"].min()) < 0):
        raise ValueError("instant table has negative lane or event ids")


KEY_BITS = 63  # packed sort keys (lane, time, kind, row) up to this width; wider traces take a lexsort


@dataclasses.dataclass
class SpanColumns:
    table: np.ndarray  # the span rows in (lane, begin) order (the trace's own array when already so)
    lane: np.ndarray  # int64 columns of `table`, each field read once
    event: np.ndarray
    tb: np.ndarray  # begin, ns after the origin
    te: np.ndarray  # end, ns after the origin
    dur: np.ndarray  # te - tb
    tbits: int  # bits of the largest time (spans and instants)
    key_bits: int  # bits of (lane << tbits) | time over spans and instants
    lk: np.ndarray | None  # ((lane - lane0) << tbits) | tb, the sort key, when key_bits <= 63
    lane0: int = 0  # the lowest lane of the run


def span_columns(spans: np.ndarray, instants: np.ndarray, origin: int) -> SpanColumns:
    lane = spans["lane"].astype(np.int64)
    event = spans["event"].astype(np.int64)
    tb = spans["start_ns"] - origin
    te = spans["end_ns"] - origin
    dur = te - tb
    if spans.size:
        if int(dur.min()) < 0:
            check_spans(spans, lane, event, tb, te)  # raises, naming the first such span
        check_span_ids(lane, event)
    check_instants(instants)
    times, lanes, lows = [0], [0], []
    if spans.size:
        times.append(int(te.max()))
        lane_sorted = nondecreasing(lane)  # a run of whole lanes in lane order: the usual table
        lanes.append(int(lane[-1]) if lane_sorted else int(lane.max()))
        lows.append(int(lane[0]) if lane_sorted else int(lane.min()))
    if instants.size:
        times.append(int(instants["ts_ns"].max()) - origin)
        lanes.append(int(instants["lane"].max()))
        lows.append(int(instants["lane"].min()))
    lane0 = min(lows) if lows else 0  # keys hold lane - lane0: a run of lanes needs few bits
    tbits = max(times).bit_length()
    lk = None
    key_bits = (max(lanes) - lane0).bit_length() + tbits
    if key_bits <= 63:
        lk = lane - lane0
        lk <<= tbits
        lk |= tb
        in_order = nondecreasing(lk)
    else:
        same = lane[1:] == lane[:-1]
        in_order = lane.size < 2 or bool(((lane[1:] > lane[:-1]) | (same & (tb[1:] >= tb[:-1]))).all())
    if not in_order:
        perm = np.argsort(lk, kind="stable") if lk is not None else np.lexsort((tb, lane))
        # stable: spans that begin together keep their (program) order
        spans, lane, event, tb, te, dur = spans[perm], lane[perm], event[perm], tb[perm], te[perm], dur[perm]
        lk = lk[perm] if lk is not None else None
    return SpanColumns(spans, lane, event, tb, te, dur, tbits, key_bits, lk, lane0)


@dataclasses.dataclass
class EventOrder:
    """Where each event sits in the file's event stream, and how many events of each kind come before
    it. A zero-length span is one stream event (its END packet directly follows its BEGIN packet)."""

    pb: np.ndarray  # stream position of each span's BEGIN, by row (increasing: rows are in file order)
    end_rows: np.ndarray  # spans with an END event of their own (not zero-length), in stream order
    pe: np.ndarray  # ... that END's stream position (increasing)
    inst_rows: np.ndarray  # instant rows in stream order
    pi: np.ndarray  # ... their stream positions
    zero: np.ndarray  # bool per span: zero-length
    zc: np.ndarray | None  # zero-length spans among rows [0, k) for k = 0..n; None when there are none
    ib: np.ndarray | int  # instants before each BEGIN (0: no instants)
    ie: np.ndarray | int  # instants before each END
    bi: np.ndarray  # BEGINs before each instant

    @functools.cached_property
    def be(self) -> np.ndarray:
        """BEGINs before each END: every event before it is an END, an instant or a BEGIN."""
        be = self.pe - np.arange(self.pe.size)
        if self.pi.size:
            be -= self.ie
        return be


def event_order(cols: SpanColumns, instants: np.ndarray, origin: int) -> EventOrder:
    """The one order: per lane by time; at equal time ENDs (inner first), instants, then BEGINs (outer
    first, i.e. by row)."""
    n, m = cols.lane.size, instants.size
    ilane = instants["lane"].astype(np.int64)
    ti = instants["ts_ns"] - origin
    zero = cols.dur == 0
    has_zero = bool(zero.any())
    ends = np.flatnonzero(~zero) if has_zero else None  # spans with an END event of their own
    rbits = max(n, m).bit_length()
    if cols.lk is not None and cols.key_bits + 2 + rbits <= KEY_BITS:
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, rbits)
    elif cols.lk is not None and cols.key_bits + 2 <= KEY_BITS:  # no room for rows: argsorts
        pb, end_rows, pe, inst_rows, pi = _order_packed(cols, ends, ilane, ti, 0)
    else:
        pb, end_rows, pe, inst_rows, pi = _order_lexsort(cols.lane, cols.tb, cols.te, ends, ilane, ti)
    zc = np.concatenate([[0], np.cumsum(zero)]) if has_zero else None
    ib = np.searchsorted(pi, pb) if m else 0
    ie = np.searchsorted(pi, pe) if m else 0
    bi = np.searchsorted(pb, pi)
    return EventOrder(pb, end_rows, pe, inst_rows, pi, zero, zc, ib, ie, bi)


def _order_packed(cols: SpanColumns, ends: np.ndarray | None, ilane: np.ndarray, ti: np.ndarray, rbits: int):
    """Sort keys ((lane, time), kind, row field) packed into one int64: distinct values, so plain value
    sorts, and the row comes back from the key's low bits. The row field of an END counts down, so
    at equal (lane, time) the later-begun (inner) span closes first. BEGIN keys are sorted already.
    rbits = 0: no row field; ENDs and instants take stable argsorts (ENDs in reverse row order)."""
    shift, rmask = rbits + 2, (1 << rbits) - 1
    n, m = cols.lane.size, ilane.size
    ne = n if ends is None else ends.size
    merged = np.empty(ne + m + n, np.int64)
    ke, ki, kb = merged[:ne], merged[ne : ne + m], merged[ne + m :]
    rows_e = np.arange(n) if ends is None else ends
    if ends is None:
        np.add(cols.lk, cols.dur, out=ke)
    else:
        np.add(cols.lk[ends], cols.dur[ends], out=ke)
    ke <<= shift  # (lane << tbits) | end, then kind END = 0
    if rbits:
        ke |= rmask - rows_e
        ke.sort(kind="stable")  # nearly sorted already: timsort runs
        end_rows = rmask - (ke & rmask)
    else:
        o = np.argsort(ke[::-1], kind="stable")
        end_rows = rows_e[::-1][o]
        ke[:] = ke[::-1][o]
    if m:
        ki[:] = (((ilane - cols.lane0) << cols.tbits) | ti) << shift
        ki |= KIND_INSTANT << rbits
        if rbits:
            ki |= np.arange(m)
            ki.sort(kind="stable")
            inst_rows = ki & rmask
        else:
            inst_rows = np.argsort(ki, kind="stable")
            ki[:] = ki[inst_rows]
    else:
        inst_rows = np.zeros(0, np.int64)
    np.left_shift(cols.lk, shift, out=kb)
    kb |= (np.arange(n) if rbits else 0) | (KIND_BEGIN << rbits)
    merged.sort(kind="stable")  # a merge of three sorted runs
    if m:
        kind = (merged >> rbits) & 3
        return (np.flatnonzero(kind == KIND_BEGIN), end_rows, np.flatnonzero(kind == KIND_END), inst_rows,
                np.flatnonzero(kind == KIND_INSTANT))
    if sys.byteorder == "little":  # the BEGIN bit, read from the one byte of each key that holds it
        bit = rbits + 1
        is_begin = ((merged.view(np.uint8)[bit // 8 :: 8] >> (bit % 8)) & 1).view(bool)
    else:
        is_begin = (merged & (KIND_BEGIN << rbits)).astype(bool)
    return np.flatnonzero(is_begin), end_rows, np.flatnonzero(~is_begin), inst_rows, np.zeros(0, np.int64)


def _order_lexsort(lane, tb, te, ends, ilane, ti):
    """The same order for keys too wide to pack (very long traces): one lexsort of all events."""
    n, m = lane.size, ilane.size
    ends = np.arange(n) if ends is None else ends
    kind = np.concatenate([np.full(ends.size, KIND_END, np.int8), np.full(m, KIND_INSTANT, np.int8),
                           np.full(n, KIND_BEGIN, np.int8)])
    tie = np.concatenate([-ends, np.arange(m), np.arange(n)])  # ENDs: later rows first
    o = np.lexsort((tie, kind, np.concatenate([te[ends], ti, tb]), np.concatenate([lane[ends], ilane, lane])))
    kind, tie = kind[o], tie[o]
    pe, pi = np.flatnonzero(kind == KIND_END), np.flatnonzero(kind == KIND_INSTANT)
    return np.flatnonzero(kind == KIND_BEGIN), -tie[pe], pe, tie[pi], pi
