"""Flags and counters in global memory: match each wait to the signal that satisfied it, across blocks and
ranks, and walk the critical path back through those matches (docs/flags.md).

A :class:`FlagTable` holds one row per event, columnar: a *signal* (an instant: a ``red.add`` of one or a
store, with the value it made) or a *wait* (a spin on a flag until its value satisfied a comparison, with
the time it began and the time it saw the value). A flag is identified by (launch, owner rank, buffer,
offset in elements); `launch` is the step index, the same for the launches of all ranks that exchange
flags (a flag's values start at `initial`, 0 by default, in each launch).

Matching (:func:`match_waits`), times first moved to one clock (each rank's ``clock_offset_ns``):
* every signal gets the value it *made* (``made``): its recorded value, or, for an add whose value was
  not recorded, the value derived from the flag's time order (the k-th add since the last store makes
  that store's value + k; at the start of a launch, `initial` + k); and the value *before* it (an add:
  made - 1; a store: the value the previous signal of the flag made);
* a signal *crosses* a wait's condition when the condition holds for its value and not for the value
  before it ("ge v": before < v <= made; "eq v": made == v != before; "lt v": made < v <= before);
  for counters of adds that is the k-th increment for a wait on ">= k"; for flags set by stores, the
  store that changed the flag to a value that satisfies the wait;
* a wait is matched to the latest crossing signal of its flag at or before its end + ``clock_error_ns``
  (ties in time: the signal later in (rank, block, warp, row) order). Otherwise exactly one reason, the
  first that applies: ``initial_value`` (the condition held for the flag's value at the launch's start:
  nothing recorded released it), ``no_signal`` (no signal of that flag recorded at all),
  ``signal_after_wait`` (crossings exist but all after the wait ended, beyond the clock error: clock skew
  beyond the stated error, or a late record), ``value_never_reached`` (signals of the flag exist but none
  crossed the condition).
All of it whole-array (sort / searchsorted by flag), except one pass per distinct threshold of "ge"
waits on flags that stores move by more than one, and of "lt" waits.

Critical path (:func:`critical_path`): from the block that ended last (in a launch, over all ranks or
one), at its end time t: the block's latest wait that *blocked* (matched to a signal made after the
wait began, or unmatched and longer than zero) and ended at or before t; the time from its end to t is
the block's own ``work``; a matched wait adds a ``released`` link from the signal to the wait's end and
the walk continues on the signalling block at the signal's time; an unmatched one an ``unmatched``
link over the whole wait, and the walk continues on the same block at the wait's begin. Each wait is
used at most once, so the walk ends; the links tile the path from its start to the end time.

Invariants guarded by tests/unit/host_decode/analysis/test_flags.py: counters with several increments (recorded and
derived values), equal timestamps, cross-rank flags with a clock offset, each unmatched reason, the table's
validation naming the column, and a critical path worked out by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

KINDS = ("signal", "wait")
SIGNAL, WAIT = 0, 1
# signals: "add" (one increment: red_add1) or "store"; waits: the condition that ended the wait
OPS = ("add", "store", "ge", "eq", "lt")
ADD, STORE, GE, EQ, LT = range(len(OPS))
SIGNAL_OPS, WAIT_OPS = (ADD, STORE), (GE, EQ, LT)
REASONS = ("matched", "initial_value", "no_signal", "signal_after_wait", "value_never_reached")
MATCHED, INITIAL_VALUE, NO_SIGNAL, SIGNAL_AFTER_WAIT, VALUE_NEVER_REACHED = range(len(REASONS))
UNKNOWN = np.iinfo(np.int64).min  # a signal's value that was not recorded (allowed for adds only)

LINK_KINDS = ("work", "released", "unmatched")
WORK, RELEASED, UNMATCHED = range(len(LINK_KINDS))
LINK_DTYPE = np.dtype([
    ("kind", "u1"), ("rank", "i4"), ("block", "i4"), ("start_ns", "i8"), ("end_ns", "i8"), ("duration_ns", "i8"),
    ("wait_row", "i8"), ("signal_row", "i8"), ("from_rank", "i4"), ("from_block", "i4"),
])  # fmt: skip

_COLUMNS = {"rank": np.int32, "launch": np.int32, "block": np.int32, "warp": np.int32, "kind": np.uint8,
            "buffer": np.int32, "offset": np.int64, "owner": np.int32, "value": np.int64, "op": np.uint8,
            "begin_ns": np.int64, "end_ns": np.int64}


@dataclasses.dataclass
class FlagTable:
    """Columnar flag events, one row each, all columns of equal length. `buffer` indexes `buffers` (the
    buffers' names) when names are given; `offset` is in elements of the flag's type; `owner` is the rank
    whose memory holds the flag. `value`: a signal's value made (UNKNOWN allowed for an add), a wait's
    value waited for. `op`: an index into OPS. Times in ns of the recording rank's clock: a signal's
    `begin_ns` == `end_ns` (its time); a wait's begin and end (when it saw the value)."""

    rank: np.ndarray
    launch: np.ndarray
    block: np.ndarray
    warp: np.ndarray
    kind: np.ndarray
    buffer: np.ndarray
    offset: np.ndarray
    owner: np.ndarray
    value: np.ndarray
    op: np.ndarray
    begin_ns: np.ndarray
    end_ns: np.ndarray
    buffers: tuple = ()

    def __post_init__(self) -> None:
        n = None
        for name, dtype in _COLUMNS.items():
            raw = np.asarray(getattr(self, name))
            if raw.ndim != 1:
                raise ValueError(f"FlagTable.{name}: expected a 1-D column, got shape {raw.shape}")
            if raw.size and not (np.issubdtype(raw.dtype, np.integer) or raw.dtype == bool):
                raise ValueError(f"FlagTable.{name}: expected integers, got {raw.dtype}")
            col = raw.astype(dtype)
            if raw.size and not np.array_equal(col.astype(np.int64), raw.astype(np.int64)):
                raise ValueError(f"FlagTable.{name}: values out of range for {np.dtype(dtype).name}")
            if n is not None and col.size != n:
                raise ValueError(f"FlagTable.{name} has {col.size} rows, expected {n} (the length of rank)")
            n = col.size
            setattr(self, name, col)
        self.buffers = tuple(str(b) for b in self.buffers)
        sig, wait = self.kind == SIGNAL, self.kind == WAIT
        self._refuse(~(sig | wait), "kind", f"not one of {KINDS} (0 or 1)")
        self._refuse(sig & ~np.isin(self.op, SIGNAL_OPS), "op", "a signal's op must be add or store")
        self._refuse(wait & ~np.isin(self.op, WAIT_OPS), "op", "a wait's op must be ge, eq or lt")
        self._refuse((self.value == UNKNOWN) & ~(sig & (self.op == ADD)), "value",
                     "unknown (UNKNOWN) is allowed for an add signal only")
        self._refuse(sig & (self.begin_ns != self.end_ns), "begin_ns", "a signal's begin_ns must equal its end_ns")
        self._refuse(wait & (self.end_ns < self.begin_ns), "end_ns", "a wait ends before it begins")
        for name in ("rank", "launch", "block", "warp", "buffer", "offset", "owner"):
            self._refuse(getattr(self, name) < 0, name, "negative")
        if self.buffers:
            self._refuse(self.buffer >= len(self.buffers), "buffer", f"no name (buffers has {len(self.buffers)})")

    def _refuse(self, bad: np.ndarray, column: str, why: str) -> None:
        if bad.any():
            rows = np.flatnonzero(bad)
            raise ValueError(f"FlagTable.{column}, row {int(rows[0])} ({rows.size} rows in all): {why}")

    def __len__(self) -> int:
        return int(self.rank.size)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in _COLUMNS}

    def select(self, rows) -> "FlagTable":
        """The rows given by an index array or boolean mask (in that order)."""
        return FlagTable(**{k: v[rows] for k, v in self.columns().items()}, buffers=self.buffers)

    @staticmethod
    def concat(tables: Sequence["FlagTable"]) -> "FlagTable":
        """One table of several (e.g. one per rank); their buffer names must agree."""
        names = {t.buffers for t in tables if t.buffers}
        if len(names) > 1:
            raise ValueError(f"FlagTable.concat: the tables name their buffers differently: {sorted(names)}")
        cols = {k: np.concatenate([t.columns()[k] for t in tables]) if tables else np.zeros(0, d)
                for k, d in _COLUMNS.items()}
        return FlagTable(**cols, buffers=names.pop() if names else ())

    def flag_name(self, row: int) -> str:
        b = int(self.buffer[row])
        name = self.buffers[b] if self.buffers else f"buffer{b}"
        return f"{name}@rank{int(self.owner[row])}[{int(self.offset[row])}]"


@dataclasses.dataclass
class FlagMatch:
    """What match_waits found. Per table row: `begin_ns` / `end_ns` on the common clock, `made` (the value a
    signal made, recorded or derived; UNKNOWN for waits) and `derived` (made came from time order).
    Per wait (`wait_rows`, table order): `signal` (row of the releasing signal, -1 when unmatched),
    `reason` (index into REASONS) and `lag_ns` (wait end - signal time; 0 when unmatched)."""

    wait_rows: np.ndarray
    signal: np.ndarray
    reason: np.ndarray
    lag_ns: np.ndarray
    made: np.ndarray
    derived: np.ndarray
    begin_ns: np.ndarray
    end_ns: np.ndarray
    clock_error_ns: int

    def counts(self) -> dict[str, int]:
        """Waits per reason, plus: matched waits whose signal came after their end, within the clock error
        (`late_within_error`); matched waits whose value was already there when they began (`already_set`:
        they did not block on it); matched through a derived value (`derived_value`)."""
        out = {name: int(n) for name, n in zip(REASONS, np.bincount(self.reason, minlength=len(REASONS)))}
        ok = self.signal >= 0
        s = self.signal[ok]
        out["late_within_error"] = int((self.lag_ns[ok] < 0).sum())
        out["already_set"] = int((self.end_ns[s] < self.begin_ns[self.wait_rows[ok]]).sum())
        out["derived_value"] = int(self.derived[s].sum())
        return out

    def blocked(self) -> np.ndarray:
        """Per wait: it waited for its signal (matched to a signal made after it began) or, unmatched,
        lasted longer than zero."""
        w = self.wait_rows
        ok = self.signal >= 0
        t_sig = self.end_ns[np.where(ok, self.signal, 0)]
        return np.where(ok, t_sig > self.begin_ns[w], self.end_ns[w] > self.begin_ns[w])


def _offsets(clock_offset_ns, rank: np.ndarray) -> np.ndarray:
    """Per row: the ns to add to its rank's times to reach the common clock."""
    if clock_offset_ns is None:
        return np.zeros(rank.size, np.int64)
    if isinstance(clock_offset_ns, Mapping):
        missing = sorted(set(np.unique(rank).tolist()) - {int(r) for r in clock_offset_ns})
        if missing:
            raise ValueError(f"clock_offset_ns has no offset for rank(s) {missing}")
        table = np.zeros(int(rank.max(initial=0)) + 1, np.int64)
        for r, v in clock_offset_ns.items():
            if 0 <= int(r) < table.size:
                table[int(r)] = int(v)
        return table[rank]
    table = np.asarray(clock_offset_ns, np.int64)
    if rank.size and rank.max() >= table.size:
        raise ValueError(f"clock_offset_ns has {table.size} entries; rank {int(rank.max())} has none")
    return table[rank]


def _dense(*columns: np.ndarray) -> np.ndarray:
    """A dense id (0..) per row of equal tuples of `columns`, ascending in lexicographic tuple order."""
    if not columns[0].size:
        return np.zeros(0, np.int64)
    order = np.lexsort(columns[::-1])
    cols = [c[order] for c in columns]
    new = np.zeros(order.size, bool)
    new[0] = True
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    ids = np.empty(order.size, np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _latest_at_or_before(c_key, c_time, c_pos, q_key, q_limit) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the largest position `c_pos` among the candidates with c_key == q_key and c_time <= q_limit,
    or -1; and whether its key has any candidate at all. Keys: dense non-negative ints; positions ascend with
    time within a key."""
    if not c_key.size:
        return np.full(q_key.size, -1, np.int64), np.zeros(q_key.size, bool)
    order = np.lexsort((c_pos, c_key))
    ck, ct, cp = c_key[order], c_time[order], c_pos[order]
    times = np.unique(np.concatenate([ct, q_limit]))
    composite = ck * times.size + np.searchsorted(times, ct)
    p = np.searchsorted(composite, q_key * times.size + np.searchsorted(times, q_limit), side="right") - 1
    lo = np.searchsorted(ck, q_key)
    any_in_key = np.searchsorted(ck, q_key, side="right") > lo
    found = (p >= lo) & (p >= 0)
    return np.where(found, cp[np.maximum(p, 0)], -1), any_in_key


def match_waits(table: FlagTable, *, clock_offset_ns=None, clock_error_ns: int = 0, initial: int = 0) -> FlagMatch:
    """Match each wait of `table` to the signal that satisfied it (module docstring). clock_offset_ns: per
    rank, ns added to its times (a mapping rank -> ns, or a sequence indexed by rank; None: one clock).
    clock_error_ns: how far a signal may be recorded after the end of the wait it released (the offsets'
    error plus the timer step)."""
    if clock_error_ns < 0:
        raise ValueError(f"clock_error_ns={clock_error_ns}: must be >= 0")
    t = table
    off = _offsets(clock_offset_ns, t.rank)
    begin, end = t.begin_ns + off, t.end_ns + off
    flag = _dense(t.launch.astype(np.int64), t.owner.astype(np.int64), t.buffer.astype(np.int64), t.offset)
    sig = np.flatnonzero(t.kind == SIGNAL)
    order = sig[np.lexsort((sig, t.warp[sig], t.block[sig], t.rank[sig], end[sig], flag[sig]))]
    made_all = np.full(len(t), UNKNOWN, np.int64)
    derived_all = np.zeros(len(t), bool)
    before = np.zeros(order.size, np.int64)
    if order.size:
        k = flag[order]
        first = np.r_[True, k[1:] != k[:-1]]
        is_add = t.op[order] == ADD
        value = t.value[order]
        pos = np.arange(order.size)
        anchor = np.maximum.accumulate(np.where(first | ~is_add, pos, -1))
        base = np.where(is_add[anchor], initial, value[anchor])
        adds = np.cumsum(is_add)
        count = adds - adds[anchor] + is_add[anchor]
        unknown = value == UNKNOWN
        made = np.where(unknown, base + count, value)
        before = np.where(is_add, made - 1, np.where(first, initial, np.r_[initial, made[:-1]]))
        made_all[order], derived_all[order] = made, unknown
    s_flag, s_made, s_time = flag[order], made_all[order], end[order]

    w = np.flatnonzero(t.kind == WAIT)
    wf, wv, wop, limit = flag[w], t.value[w], t.op[w], end[w] + int(clock_error_ns)
    found = np.full(w.size, -1, np.int64)  # position in `order` of the releasing signal
    crossing_exists = np.zeros(w.size, bool)

    def search(cand: np.ndarray, waits: np.ndarray, by_value: bool) -> None:
        """Candidates (positions in `order`) for the waits (positions in `w`); by_value: same flag and made ==
        the wait's value, else same flag only."""
        if by_value:
            ids = _dense(np.r_[s_flag[cand], wf[waits]], np.r_[s_made[cand], wv[waits]])
            ck, qk = ids[: cand.size], ids[cand.size:]
        else:
            ck, qk = s_flag[cand], wf[waits]
        pos, anything = _latest_at_or_before(ck, s_time[cand], cand, qk, limit[waits])
        found[waits] = np.maximum(found[waits], pos)  # one flag per wait: a later position is a later signal
        crossing_exists[waits] |= anything

    unit_step = s_made == before + 1  # covers a single threshold: made
    eq, ge, lt = (np.flatnonzero(wop == op) for op in (EQ, GE, LT))
    search(np.flatnonzero(s_made != before), eq, True)
    search(np.flatnonzero(unit_step), ge, True)
    jumps = np.flatnonzero(s_made > before + 1)
    for v in np.unique(wv[ge]).tolist() if jumps.size else []:
        search(jumps[(before[jumps] < v) & (v <= s_made[jumps])], ge[wv[ge] == v], False)
    for v in np.unique(wv[lt]).tolist():
        down = np.flatnonzero((s_made < v) & (v <= before))
        search(down, lt[wv[lt] == v], False)

    signal = np.where(found >= 0, order[np.maximum(found, 0)] if order.size else -1, -1)
    has_signal = np.isin(wf, s_flag)
    held_initially = np.select([wop == GE, wop == EQ], [initial >= wv, initial == wv], initial < wv)
    reason = np.select(
        [signal >= 0, held_initially, ~has_signal, crossing_exists],
        [MATCHED, INITIAL_VALUE, NO_SIGNAL, SIGNAL_AFTER_WAIT], VALUE_NEVER_REACHED,
    ).astype(np.uint8)
    lag = np.where(signal >= 0, end[w] - end[np.maximum(signal, 0)], 0)
    return FlagMatch(w, signal, reason, lag, made_all, derived_all, begin, end, int(clock_error_ns))


@dataclasses.dataclass
class BlockSpans:
    """When each block ran (first and last ns on its rank's clock), for critical_path; without it, a
    block's span is taken from its own rows of the flag table."""

    rank: np.ndarray
    launch: np.ndarray
    block: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    def __post_init__(self) -> None:
        for name in ("rank", "launch", "block", "start_ns", "end_ns"):
            setattr(self, name, np.array(getattr(self, name), np.int64))  # a copy: columns never alias
            if getattr(self, name).shape != self.rank.shape:
                raise ValueError(f"BlockSpans.{name} has shape {getattr(self, name).shape}, expected {self.rank.shape}")
        if (self.end_ns < self.start_ns).any():
            raise ValueError(f"BlockSpans: row {int(np.argmax(self.end_ns < self.start_ns))} ends before it starts")


def _block_keys(rank: np.ndarray, block: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) << 32 | block.astype(np.int64)


def critical_path(table: FlagTable, match: FlagMatch, *, launch: int = 0, rank: int | None = None,
                  spans: BlockSpans | None = None, clock_offset_ns=None) -> np.ndarray:
    """The chain of LINK_DTYPE links (module docstring), in time order, of `launch`, starting from the
    block that ended last over all ranks (or over `rank`'s blocks; ties: the lowest (rank, block)).
    `spans` (on each rank's clock, moved by `clock_offset_ns` as the match was) give each block's start and
    end; otherwise its own rows do."""
    if spans is None:
        rows = np.flatnonzero(table.launch == launch)
        span_key = _block_keys(table.rank[rows], table.block[rows])
        span_start, span_end = match.begin_ns[rows], match.end_ns[rows]
    else:
        m = spans.launch == launch
        off = _offsets(clock_offset_ns, spans.rank[m])
        span_key = _block_keys(spans.rank[m], spans.block[m])
        span_start, span_end = spans.start_ns[m] + off, spans.end_ns[m] + off
    if not span_key.size:
        return np.zeros(0, LINK_DTYPE)
    keys = np.unique(span_key)  # block index = position in keys
    bid = np.searchsorted(keys, span_key)
    start = np.full(keys.size, np.iinfo(np.int64).max)
    stop = np.full(keys.size, np.iinfo(np.int64).min)
    np.minimum.at(start, bid, span_start)
    np.maximum.at(stop, bid, span_end)
    pick = np.arange(keys.size) if rank is None else np.flatnonzero(keys >> 32 == rank)
    if not pick.size:
        raise ValueError(f"critical_path: rank {rank} has no block in launch {launch}")
    cur = int(pick[np.argmax(stop[pick])])  # argmax: the first (lowest rank, block) among equal ends

    def block_of(rows: np.ndarray) -> np.ndarray:
        k = _block_keys(table.rank[rows], table.block[rows])
        i = np.minimum(np.searchsorted(keys, k), keys.size - 1)
        return np.where(keys[i] == k, i, -1)

    # the waits that blocked, grouped by block, by end time; the block of each one's signal
    wsel = (table.launch[match.wait_rows] == launch) & match.blocked()
    wrow, wsig = match.wait_rows[wsel], match.signal[wsel]
    wblk = block_of(wrow)
    o = np.lexsort((wrow, match.end_ns[wrow], wblk))
    o = o[wblk[o] >= 0]
    wrow, wsig, wblk = wrow[o], wsig[o], wblk[o]
    sblk = np.where(wsig >= 0, block_of(np.maximum(wsig, 0)), -1)
    bounds = np.searchsorted(wblk, np.arange(keys.size + 1))
    wend, wbegin = match.end_ns[wrow], match.begin_ns[wrow]

    links = []

    def link(kind, blk, a, z, wait_row=-1, signal_row=-1, src=-1):
        fk = int(keys[src]) if src >= 0 else -1
        links.append((kind, int(keys[blk]) >> 32, int(keys[blk]) & 0xFFFF_FFFF, a, z, z - a, wait_row, signal_row,
                      fk >> 32 if src >= 0 else -1, fk & 0xFFFF_FFFF if src >= 0 else -1))

    t = int(stop[cur])
    usable = {}  # block -> exclusive upper index (into its waits) still usable: each wait used once
    while True:
        lo, hi = bounds[cur], bounds[cur + 1]
        j = min(int(np.searchsorted(wend[lo:hi], t, side="right")), usable.get(cur, hi - lo)) - 1
        if j < 0:
            link(WORK, cur, min(int(start[cur]), t), t)
            break
        usable[cur] = j
        i = lo + j
        link(WORK, cur, int(wend[i]), t)
        if wsig[i] >= 0:
            src = int(sblk[i]) if sblk[i] >= 0 else cur  # a signalling block without a span: stay here
            ts = min(int(match.end_ns[wsig[i]]), int(wend[i]))
            link(RELEASED, cur, ts, int(wend[i]), int(wrow[i]), int(wsig[i]), src)
            cur, t = src, ts
        else:
            link(UNMATCHED, cur, int(wbegin[i]), int(wend[i]), int(wrow[i]))
            t = int(wbegin[i])
    return np.array([x for x in reversed(links) if x[0] != WORK or x[3] < x[4]], LINK_DTYPE)


def describe_path(table: FlagTable, links: np.ndarray) -> list[str]:
    """One line per link, for a console."""
    lines = []
    for x in links:
        who = f"rank {x['rank']} block {x['block']}"
        if x["kind"] == RELEASED:
            flag = table.flag_name(int(x["wait_row"]))
            lines.append(f"{x['duration_ns']:>10} ns  {who} waited on {flag}, released by rank {x['from_rank']} "
                         f"block {x['from_block']} (signal row {x['signal_row']})")
        elif x["kind"] == UNMATCHED:
            lines.append(f"{x['duration_ns']:>10} ns  {who} waited on {table.flag_name(int(x['wait_row']))}: unmatched")
        else:
            lines.append(f"{x['duration_ns']:>10} ns  {who} work")
    return lines
