"""The slow reference of the writers' event order (formerly host_decode's merged_stream), kept only as
the tests' oracle: host_decode.writers.order computes the same order without sorting the BEGINs and per
run of lanes; tests/unit/host_decode/writers/test_perfetto.py::test_file_order_is_merged_stream_order compares the
two."""

from __future__ import annotations

import dataclasses

import numpy as np

_TS_BITS = 41
_LANE_BITS = 20

KIND_END, KIND_INSTANT, KIND_BEGIN = 0, 1, 2  # order of events of one lane at one timestamp


@dataclasses.dataclass
class Stream:
    """The file order of all events: per lane by time; at equal time ENDs (inner first), then
    instants, then BEGINs (outer first). A zero-length span is its BEGIN then its END, adjacent."""

    kind: np.ndarray  # int8 KIND_* per stream position
    index: np.ndarray  # row in spans (BEGIN/END) or instants (INSTANT)
    pos_begin: np.ndarray  # stream position of each span's BEGIN
    pos_end: np.ndarray  # ... and END


def merged_stream(spans: np.ndarray, instants: np.ndarray, origin: int) -> Stream:
    """The file order as a Stream (for the Chrome JSON writer, multi-launch views and as the reference
    the Perfetto writer's _event_order is tested against)."""
    n, m = spans.size, instants.size
    lane_b = spans["lane"].astype(np.int64)
    lane_i = instants["lane"].astype(np.int64)
    tb = spans["start_ns"] - origin
    te_all = spans["end_ns"] - origin
    ti = instants["ts_ns"] - origin
    zero = te_all == tb
    end_rows = np.flatnonzero(~zero)  # spans whose END is its own stream event
    te = te_all[end_rows]
    lane_e = lane_b[end_rows]
    tmax = max([int(a.max()) for a in (tb, te_all, ti) if a.size] + [0])
    lmax = max([int(a.max()) for a in (lane_b, lane_i) if a.size] + [0])
    if tmax < (1 << _TS_BITS) and lmax < (1 << _LANE_BITS):
        def key(lane, t, kind):
            return ((lane << _TS_BITS) | t) << 2 | kind

        # each kind sorted on its own (rows are nearly in order, so these sorts are cheap), then one
        # merge of three sorted runs; stable sorts keep row order for ties
        kb, ke, ki = key(lane_b, tb, KIND_BEGIN), key(lane_e, te, KIND_END), key(lane_i, ti, KIND_INSTANT)
        ob = np.arange(n) if _nondecreasing(kb) else np.argsort(kb, kind="stable")
        oe = np.argsort(ke, kind="stable")
        oe = oe[_reverse_ties(ke[oe])]  # equal END keys: the later-begun (inner) region closes first
        oi = np.argsort(ki, kind="stable")
        keys = np.concatenate([ke[oe], ki[oi], kb[ob]])
        order = np.argsort(keys, kind="stable")
    else:  # very long or very wide traces: the same order from a lexsort
        oe, oi, ob = np.arange(end_rows.size)[::-1], np.arange(m), np.arange(n)
        lanes = np.concatenate([lane_e[oe], lane_i, lane_b])
        ts = np.concatenate([te[oe], ti, tb])
        kinds = np.concatenate([np.full(end_rows.size, KIND_END), np.full(m, KIND_INSTANT), np.full(n, KIND_BEGIN)])
        order = np.lexsort((kinds, ts, lanes))
    src_index = np.concatenate([end_rows[oe], oi, ob])
    src_kind = np.concatenate(
        [np.full(end_rows.size, KIND_END, np.int8), np.full(m, KIND_INSTANT, np.int8), np.full(n, KIND_BEGIN, np.int8)]
    )
    kind = src_kind[order]
    index = src_index[order]
    at = np.empty(order.size, np.int64)  # stream position of each source event
    at[order] = np.arange(order.size)
    pos_begin = np.empty(n, np.int64)
    pos_end = np.empty(n, np.int64)
    n_end = end_rows.size
    pos_begin[ob] = at[n_end + m :]
    pos_end[end_rows[oe]] = at[:n_end]
    if n and zero.any():  # a zero-length span is its BEGIN immediately followed by its END
        is_zero_begin = kind == KIND_BEGIN
        is_zero_begin[is_zero_begin] = zero[index[is_zero_begin]]
        width = 1 + is_zero_begin
        start = np.cumsum(width) - width
        kind2 = np.empty(int(start[-1] + width[-1]), np.int8)
        index2 = np.empty(kind2.size, np.int64)
        kind2[start] = kind
        index2[start] = index
        second = start[is_zero_begin] + 1
        kind2[second] = KIND_END
        index2[second] = index[is_zero_begin]
        kind, index = kind2, index2
        pos_begin = start[pos_begin]
        pos_end[end_rows] = start[pos_end[end_rows]]
        pos_end[zero] = pos_begin[zero] + 1
    return Stream(kind=kind, index=index, pos_begin=pos_begin, pos_end=pos_end)


def _reverse_ties(sorted_keys: np.ndarray) -> np.ndarray:
    """Permutation of a sorted array that reverses the order inside each run of equal keys."""
    perm = np.arange(sorted_keys.size)
    if sorted_keys.size < 2:
        return perm
    tie = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1]) + 1  # equal to the one before
    if tie.size == 0:
        return perm
    in_run = np.zeros(sorted_keys.size, bool)
    in_run[tie] = True
    in_run[tie - 1] = True
    r = np.flatnonzero(in_run)  # members of runs of equal keys, runs contiguous
    new = np.r_[True, sorted_keys[r[1:]] != sorted_keys[r[:-1]]] | np.r_[True, r[1:] != r[:-1] + 1]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], r.size] - 1
    run = np.cumsum(new) - 1
    perm[r] = r[starts[run] + ends[run] - np.arange(r.size)]
    return perm


def _nondecreasing(a: np.ndarray) -> bool:
    return bool(a.size < 2 or (a[1:] >= a[:-1]).all())


