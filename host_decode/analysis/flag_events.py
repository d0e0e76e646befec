"""Flag events of decoded captures: the records of the flags tracer (docs/flags.md) as a
host_decode.analysis.flags.FlagTable, ready for match_waits and critical_path.

What a trace holds (one capture, or a merged session whose meta["parts"] keep each capture's flag keys,
host_decode.analysis.sessions.concat): per call site of the sidecar's ``flags`` a *signal* is an instant of
the site's id, a *wait* a region (BEGIN at its first probe, END when it saw its value); the payloads that
follow each record (trace.payloads, host_decode.load.payloads) carry the flag's address (FLAG_ADDR: address
>> 2, low 32 bits) and a value (FLAG_VALUE). A payload belongs to the record it follows: same lane, same
time, that record's id and type; several records of one id at one time take their payloads in order.

* A signal's value: on a site with ``values: true`` (an ``atom.add`` that returned old + 1, or a store)
  the value it made; otherwise the number of increments of a warp-wide call: the signal becomes that many
  adds at its time (none: one add). A store site (``op`` without "add") needs its value.
* A wait's value: its site's ``expected`` when an integer, else its FLAG_VALUE. ``cmp`` "ge" or "eq".
  A site with an integer ``reset`` (an ``atom.cas`` wait whose reset value differs) also stores it at the
  wait's end.
* An address maps through the recording rank's ``flag_buffers``: a buffer's range is [base, base + bytes)
  seen through the 16 GiB window of the field, offset in elements of ``elem_bytes``. In no range: its own
  buffer ``gmem@0x...`` owned by the recording rank (counted: ``unknown_address``); in more than one
  (ranges that alias modulo 16 GiB): ``ambiguous_address``, left out and counted.
* Everything malformed is left out and counted by reason (`PROBLEMS`), never raised: a record without its
  address, a wait of a recorded value without it, a payload that follows no flag record, a second address or
  value for one record, a store without a value. A sidecar entry of the wrong shape is a DecodeError naming
  the capture and the key (``flags[3].kind``).

Invariants a change could break, with the test guarding each
(tests/unit/host_decode/analysis/test_flag_events.py):
* every flag record of a capture becomes a row or is counted under one named reason
  (::test_malformed_sequences_are_counted_by_name);
* a peer's signal and the owner's wait of one flag get the same (buffer, owner, offset) although each rank
  maps the buffer elsewhere (::test_symmetric_buffers_map_to_one_identity);
* aliasing ranges make `ambiguous_address`, never a guess (::test_aliasing_ranges_are_ambiguous).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.flags import ADD, EQ, GE, SIGNAL, STORE, UNKNOWN, WAIT, FlagTable
from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.core.model import Trace
from host_decode.load.payloads import FLAG_ADDR_EVENT_ID, FLAG_VALUE_EVENT_ID

PROBLEMS = ("record_without_address", "wait_without_value", "store_without_value", "payload_without_record",
            "extra_payload", "ambiguous_address", "zero_increments", "payload_set_aside_by_decoder")
WINDOW = 1 << 32  # the address field: address >> 2, low 32 bits (a 16 GiB window of 4-byte words)
_END, _INSTANT = int(wire.EventType.END), int(wire.EventType.INSTANT)
_CMP = {"ge": GE, "eq": EQ}


@dataclasses.dataclass
class Part:
    """One capture of a trace: its blocks [block_offset, block_offset + num_blocks) of the trace, and what
    its sidecar says of flags and clocks."""

    label: str
    rank: int
    launch: int
    block_offset: int
    num_blocks: int
    sites: list
    buffers: list
    clock_offset_ns: int  # measured offset to the reference clock (sidecar), 0 when none
    clock_error_ns: int | None  # its error bound (None: not stated)
    clock_reference: str | None
    offset_applied: bool  # the trace's times already include clock_offset_ns (a merged session)
    absolute: bool


@dataclasses.dataclass
class FlagEvents:
    """The flag table of a trace, with per row the trace lane it was recorded on (for flows) and its part."""

    table: FlagTable
    lane: np.ndarray
    part: np.ndarray
    parts: list
    problems: dict
    unknown_addresses: int

    def pending_offsets(self) -> dict:
        """rank -> ns still to add to the table's times to reach the common clock."""
        return {p.rank: 0 if p.offset_applied else p.clock_offset_ns for p in self.parts}


def has_flags(trace: Trace) -> bool:
    """The trace (or a part of a merged one) declares flag call sites."""
    meta = trace.meta or {}
    return bool(meta.get("flags")) or any(bool(p.get("flags")) for p in meta.get("parts") or [])


def parts_of(trace: Trace) -> list[Part]:
    meta = trace.meta or {}
    entries = meta.get("parts")
    if not entries:
        return [_part(meta, str(meta.get("source") or "capture"), 0, trace.num_blocks, False, trace.absolute)]
    return [_part(e, str(e.get("label")), int(e["block_offset"]), int(e["num_blocks"]), True,
                  bool(e.get("absolute", trace.absolute))) for e in entries]


def _part(meta: dict, label: str, offset: int, blocks: int, merged: bool, absolute: bool) -> Part:
    where = str(meta.get("source") or label)
    sites = _sites(meta.get("flags") or [], where)
    buffers = _buffers(meta.get("flag_buffers") or [], where)
    err = meta.get("clock_error_ns")
    return Part(label, int(meta.get("rank") or 0), int(meta.get("launch_index") or 0), offset, blocks, sites,
                buffers, int(meta.get("clock_offset_ns") or 0), None if err is None else int(err),
                meta.get("clock_reference"), merged, absolute)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _sites(entries, where: str) -> list[dict]:
    if not isinstance(entries, list):
        raise DecodeError(f"'flags' must be a list of call sites, got {type(entries).__name__}", source=where)
    out = []
    for i, e in enumerate(entries):
        key = f"flags[{i}]"
        if not isinstance(e, dict):
            raise DecodeError(f"'{key}' must be an object, got {type(e).__name__}", source=where)
        if not _is_int(e.get("id")) or not 0 <= e["id"] <= wire.MAX_EVENT_ID:
            raise DecodeError(f"'{key}.id' must be an event id 0..{wire.MAX_EVENT_ID}, got {e.get('id')!r}",
                              source=where)
        if e.get("kind") not in ("signal", "wait"):
            raise DecodeError(f"'{key}.kind' must be 'signal' or 'wait', got {e.get('kind')!r}", source=where)
        if e["kind"] == "wait":
            if e.get("cmp") not in _CMP:
                raise DecodeError(f"'{key}.cmp' must be one of {sorted(_CMP)}, got {e.get('cmp')!r}", source=where)
            if not (_is_int(e.get("expected")) or e.get("expected") == "recorded"):
                raise DecodeError(f"'{key}.expected' must be an integer or 'recorded', got {e.get('expected')!r}",
                                  source=where)
            if e.get("reset") is not None and not _is_int(e["reset"]):
                raise DecodeError(f"'{key}.reset' must be an integer, got {e['reset']!r}", source=where)
        out.append(e)
    return out


def _buffers(entries, where: str) -> list[dict]:
    if not isinstance(entries, list):
        raise DecodeError(f"'flag_buffers' must be a list, got {type(entries).__name__}", source=where)
    rules = {"name": lambda v: isinstance(v, str) and v, "owner_rank": lambda v: _is_int(v) and v >= 0,
             "base": lambda v: _is_int(v) and v >= 0, "bytes": lambda v: _is_int(v) and v >= 1,
             "elem_bytes": lambda v: _is_int(v) and v >= 1}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise DecodeError(f"'flag_buffers[{i}]' must be an object, got {type(e).__name__}", source=where)
        for name, ok in rules.items():
            if not ok(e.get(name)):
                raise DecodeError(f"'flag_buffers[{i}].{name}' is missing or invalid: {e.get(name)!r}", source=where)
    return entries


def _nth(key: np.ndarray) -> np.ndarray:
    """Per row: how many rows before it (in row order) share its key (int64 keys)."""
    if not key.size:
        return np.zeros(0, np.int64)
    o = np.argsort(key, kind="stable")
    k = key[o]
    first = np.r_[True, k[1:] != k[:-1]]
    at = np.arange(k.size) - np.maximum.accumulate(np.where(first, np.arange(k.size), 0))
    out = np.empty(key.size, np.int64)
    out[o] = at
    return out


def _keys(*cols) -> np.ndarray:
    """One int64 id per distinct tuple of the columns (dense)."""
    stacked = np.stack([np.asarray(c, np.int64) for c in cols], axis=1)
    if not stacked.size:
        return np.zeros(len(cols[0]), np.int64)
    return np.unique(stacked, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def flag_events(trace: Trace) -> FlagEvents:
    """The FlagTable of `trace` (module docstring)."""
    parts = parts_of(trace)
    offsets = np.array([p.block_offset for p in parts], np.int64)
    problems = {name: 0 for name in PROBLEMS}
    problems["payload_set_aside_by_decoder"] = int(((trace.meta or {}).get("payload_losses") or {}).get(
        "set_aside_by_decoder", 0))

    def part_of(block):
        return np.maximum(np.searchsorted(offsets, np.asarray(block, np.int64), side="right") - 1, 0)

    # the call sites: (part, event id) -> site row
    site_key, site_part, site_entry = [], [], []
    for i, p in enumerate(parts):
        for s in p.sites:
            site_key.append(i * (wire.MAX_EVENT_ID + 1) + s["id"])
            site_part.append(i)
            site_entry.append(s)
    site_key = np.array(site_key, np.int64)
    o = np.argsort(site_key, kind="stable")
    site_key, site_entry = site_key[o], [site_entry[k] for k in o.tolist()]
    kind_of = np.array([s["kind"] == "wait" for s in site_entry], bool)

    def site_of(part, event):
        key = part * (wire.MAX_EVENT_ID + 1) + np.asarray(event, np.int64)
        at = np.minimum(np.searchsorted(site_key, key), max(site_key.size - 1, 0))
        hit = site_key[at] == key if site_key.size else np.zeros(key.size, bool)
        return np.where(hit, at, -1)

    # hosts: signal instants and wait regions of a site
    inst, sp = trace.instants, trace.spans
    i_site = site_of(part_of(inst["block"]), inst["event"])
    i_sel = np.flatnonzero(i_site >= 0)
    i_sel = i_sel[~kind_of[i_site[i_sel]]] if site_key.size else i_sel[:0]
    s_site = site_of(part_of(sp["block"]), sp["event"])
    s_sel = np.flatnonzero(s_site >= 0)
    s_sel = s_sel[kind_of[s_site[s_sel]]] if site_key.size else s_sel[:0]
    n_sig, n_wait = i_sel.size, s_sel.size
    h_lane = np.r_[inst["lane"][i_sel], sp["lane"][s_sel]].astype(np.int64)
    h_block = np.r_[inst["block"][i_sel], sp["block"][s_sel]].astype(np.int64)
    h_group = np.r_[inst["group"][i_sel], sp["group"][s_sel]].astype(np.int64)
    h_event = np.r_[inst["event"][i_sel], sp["event"][s_sel]].astype(np.int64)
    h_type = np.r_[np.full(n_sig, _INSTANT), np.full(n_wait, _END)]
    h_t = np.r_[inst["ts_ns"][i_sel], sp["end_ns"][s_sel]].astype(np.int64)
    h_begin = np.r_[inst["ts_ns"][i_sel], sp["start_ns"][s_sel]].astype(np.int64)
    h_site = np.r_[i_site[i_sel], s_site[s_sel]].astype(np.int64)
    h_is_wait = np.r_[np.zeros(n_sig, bool), np.ones(n_wait, bool)]

    # payloads onto their hosts: same lane, record id and type, time, and rank among equal ones
    pl = trace.payloads
    p_lane, p_ev, p_ty, p_t = (pl[f].astype(np.int64) for f in ("lane", "of_event", "of_type", "ts_ns"))
    is_addr = pl["event"] == FLAG_ADDR_EVENT_ID
    is_val = pl["event"] == FLAG_VALUE_EVENT_ID
    both = _keys(np.r_[h_lane, p_lane], np.r_[h_event, p_ev], np.r_[h_type, p_ty], np.r_[h_t, p_t])
    hk, pk = both[: h_lane.size], both[h_lane.size:]
    h_nth = _nth(hk)
    host_id = np.full(pl.size, -1, np.int64)
    for sel in (is_addr, is_val):
        rows = np.flatnonzero(sel)
        nth = _nth(pk[rows])
        # the host with the same key and the same rank among its equals
        hkey = hk * (h_lane.size + 1) + h_nth
        o = np.argsort(hkey)
        want = pk[rows] * (h_lane.size + 1) + nth
        at = np.minimum(np.searchsorted(hkey[o], want), max(o.size - 1, 0))
        found = (hkey[o][at] == want) if o.size else np.zeros(rows.size, bool)
        host_id[rows[found]] = o[at[found]]
        extra = ~found & np.isin(pk[rows], hk)  # a second payload of one kind for one host
        problems["extra_payload"] += int(extra.sum())
        problems["payload_without_record"] += int((~found & ~extra).sum())
    problems["payload_without_record"] += int((~(is_addr | is_val)).sum())
    addr = np.full(h_lane.size, -1, np.int64)
    value = np.full(h_lane.size, -1, np.int64)
    a, v = np.flatnonzero(is_addr & (host_id >= 0)), np.flatnonzero(is_val & (host_id >= 0))
    addr[host_id[a]] = pl["value"][a]
    value[host_id[v]] = pl["value"][v]

    # the sites' facts per host
    expected = np.array([s["expected"] if _is_int(s.get("expected")) else -1 for s in site_entry], np.int64)
    recorded = np.array([s.get("expected") == "recorded" for s in site_entry], bool)
    values_mode = np.array([bool(s.get("values")) for s in site_entry], bool)
    is_store = np.array([s["kind"] == "signal" and "add" not in str(s.get("op", "add")) for s in site_entry], bool)
    cmp = np.array([_CMP.get(s.get("cmp"), GE) for s in site_entry], np.uint8)
    reset = np.array([s["reset"] if _is_int(s.get("reset")) else -1 for s in site_entry], np.int64)
    hs = h_site
    ok = addr >= 0
    problems["record_without_address"] = int((~ok).sum())
    need_val = h_is_wait & recorded[hs] if hs.size else h_is_wait
    bad = ok & need_val & (value < 0)
    problems["wait_without_value"] = int(bad.sum())
    ok &= ~bad
    store = ~h_is_wait & is_store[hs] if hs.size else h_is_wait
    bad = ok & store & (value < 0)
    problems["store_without_value"] = int(bad.sum())
    ok &= ~bad

    # addresses -> (buffer, owner, offset) through the recording rank's table
    h_part = part_of(h_block)
    names: list[str] = sorted({b["name"] for p in parts for b in p.buffers})
    buf = np.full(h_lane.size, -1, np.int64)
    owner = np.full(h_lane.size, -1, np.int64)
    offset = np.zeros(h_lane.size, np.int64)
    hits = np.zeros(h_lane.size, np.int64)
    for i, p in enumerate(parts):
        mine = np.flatnonzero((h_part == i) & ok)
        for b in p.buffers:
            lo = (b["base"] >> 2) % WINDOW
            rel = (addr[mine] - lo) % WINDOW
            inside = rel < -(-b["bytes"] // 4)
            rows = mine[inside]
            hits[rows] += 1
            buf[rows] = names.index(b["name"])
            owner[rows] = b["owner_rank"]
            offset[rows] = rel[inside] * 4 // b["elem_bytes"]
    ambiguous = ok & (hits > 1)
    problems["ambiguous_address"] = int(ambiguous.sum())
    ok &= ~ambiguous
    unknown = np.flatnonzero(ok & (hits == 0))
    ranks = np.array([p.rank for p in parts], np.int64)
    if unknown.size:
        raw = np.unique(addr[unknown])
        names += [f"gmem@0x{int(r) << 2:x}" for r in raw.tolist()]
        buf[unknown] = len(names) - raw.size + np.searchsorted(raw, addr[unknown])
        owner[unknown] = ranks[h_part[unknown]]
        offset[unknown] = 0

    # signal rows: k increments (count mode), a value made (values mode / store), or one add
    sig = np.flatnonzero(ok & ~h_is_wait)
    counted = ~values_mode[hs[sig]] & ~is_store[hs[sig]] if sig.size else np.zeros(0, bool)
    reps = np.where(counted & (value[sig] >= 0), value[sig], 1)
    problems["zero_increments"] = int((reps == 0).sum())
    sig_rows = np.repeat(sig, reps)
    sig_value = np.repeat(np.where(counted, UNKNOWN, value[sig]), reps)
    sig_op = np.repeat(np.where(is_store[hs[sig]], STORE, ADD), reps) if sig.size else np.zeros(0, np.uint8)
    wait = np.flatnonzero(ok & h_is_wait)
    w_value = np.where(recorded[hs[wait]], value[wait], expected[hs[wait]]) if wait.size else wait
    rs = wait[reset[hs[wait]] >= 0] if wait.size else wait  # an atom.cas wait that resets: a store at its end
    rows = np.r_[sig_rows, wait, rs]
    kind = np.r_[np.full(sig_rows.size, SIGNAL), np.full(wait.size, WAIT), np.full(rs.size, SIGNAL)]
    begin = np.r_[h_t[sig_rows], h_begin[wait], h_t[rs]]
    table = FlagTable(
        rank=ranks[h_part[rows]], launch=np.array([p.launch for p in parts], np.int64)[h_part[rows]],
        block=h_block[rows] - offsets[h_part[rows]], warp=h_group[rows], kind=kind, buffer=buf[rows],
        offset=offset[rows], owner=owner[rows],
        value=np.r_[sig_value, w_value, reset[hs[rs]] if rs.size else rs],
        op=np.r_[sig_op, cmp[hs[wait]] if wait.size else wait, np.full(rs.size, STORE)].astype(np.uint8),
        begin_ns=begin, end_ns=h_t[rows], buffers=tuple(names),
    )
    return FlagEvents(table, h_lane[rows], h_part[rows], parts, problems, int(unknown.size))
