"""Flag events of decoded captures: the records of the flags tracer (docs/flags.md, "Records") as a
host_decode.analysis.flags.FlagTable, ready for match_waits and critical_path.

What a trace holds (one capture, or a merged session whose meta["parts"] keep each capture's flag keys,
host_decode.analysis.sessions.concat): per call site of the sidecar's ``flags`` a *signal* is an instant of
the site's id, a *wait* a region (BEGIN before its first probe, END when it saw its value). The decoder puts
the payload instants that follow each record into ``trace.payloads`` (core.model.PAYLOAD_DTYPE) with that
record's lane, event id, type and times: ``index`` 0 is its FLAG_ADDR (the flag's address >> 2, low 32
bits), then its FLAG_VALUEs (signed 32-bit values) in the order the site records them.

* A signal whose site's ``update`` is "add" adds its amount: its FLAG_VALUE when it has one (a runtime
  amount, or several lanes of a warp adding to the flag in one call), else the site's ``value``; an amount of
  n is n adds at the signal's time (0: ``zero_increments``; below 0: ``negative_add``, both left out). A store
  stores its FLAG_VALUE when the site's ``value`` is "recorded", else the site's value.
* A wait waits for its site's ``expected``, or its first FLAG_VALUE when that is "recorded"; ``cmp`` "ge",
  "eq" or "lt". A site with ``reset`` (an ``atom.cas`` wait whose reset value differs from the expected one)
  also stores the reset value (the site's, or its next FLAG_VALUE when "recorded") at the wait's end.
* An address maps through the recording rank's ``flag_buffers``: a buffer's range is [base, base + bytes)
  seen through the 16 GiB window of the field, offset in elements of ``elem_bytes``. In no range: its own
  buffer ``gmem@0x...`` owned by the recording rank (counted: ``unknown_address``); in more than one
  (ranges that alias modulo 16 GiB): ``ambiguous_address``, left out and counted.
* Everything malformed is left out and counted by reason (`PROBLEMS`), never raised: a record without its
  address, a recorded value missing, payloads that belong to no flag record, more payloads than the site
  records. Payloads whose record the decoder did not keep are its ``payload_orphan`` loss bucket. A sidecar
  entry of the wrong shape is a DecodeError naming the capture and the key (``flags[3].kind``: the one
  validator, host_decode.load.sidecar.flag_entries).

Invariants a change could break, with the test guarding each
(tests/unit/host_decode/analysis/test_flag_events.py):
* every flag record of a capture becomes a row or is counted under one named reason
  (::test_malformed_sequences_are_counted_by_name);
* a peer's signal and the owner's wait of one flag get the same (buffer, owner, offset) although each rank
  maps the buffer elsewhere (::test_symmetric_buffers_map_to_one_identity);
* aliasing ranges make `ambiguous_address`, never a guess
  (::test_aliasing_ranges_are_ambiguous_and_unknown_addresses_keep_theirs).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.flags import ADD, EQ, GE, LT, SIGNAL, STORE, UNKNOWN, WAIT, FlagTable
from host_decode.core import wire
from host_decode.core.model import Trace
from host_decode.load.sidecar import RECORDED, flag_entries

PROBLEMS = ("record_without_address", "wait_without_value", "signal_without_value", "payload_without_record",
            "extra_payload", "ambiguous_address", "zero_increments", "negative_add")
WINDOW = 1 << 32  # the address field: address >> 2, low 32 bits (a 16 GiB window of 4-byte words)
_END, _INSTANT = int(wire.EventType.END), int(wire.EventType.INSTANT)
_CMP = {"ge": GE, "eq": EQ, "lt": LT}
_MISSING = np.iinfo(np.int64).min  # a FLAG_VALUE a record does not have


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
    flag_entries("flags", "flag_sites", entries, where)
    return entries


def _buffers(entries, where: str) -> list[dict]:
    flag_entries("flag_buffers", "flag_buffers", entries, where)
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


def _site_facts(sites: list[dict]) -> dict:
    """Per site (in `sites` order): what its records carry (module docstring), as arrays."""
    def ints(key, kinds):
        return np.array([s[key] if s["kind"] in kinds and _is_int(s.get(key)) else _MISSING for s in sites], np.int64)

    def recorded(key):
        return np.array([s.get(key) == RECORDED for s in sites], bool)

    wait = np.array([s["kind"] == "wait" for s in sites], bool)
    store = np.array([s["kind"] == "signal" and s.get("update") == "store" for s in sites], bool)
    resets = np.array([s["kind"] == "wait" and s.get("reset") is not None for s in sites], bool)
    f = {"wait": wait, "store": store, "value": ints("value", ("signal",)), "value_recorded": recorded("value"),
         "expected": ints("expected", ("wait",)), "expected_recorded": recorded("expected") & wait,
         "resets": resets, "reset": ints("reset", ("wait",)), "reset_recorded": recorded("reset") & resets,
         "cmp": np.array([_CMP.get(s.get("cmp"), GE) for s in sites], np.uint8)}
    # FLAG_VALUEs a record of the site may carry: a signal one (an add's amount, or a recorded store value), a
    # wait its recorded expected and reset values
    f["values_allowed"] = np.where(wait, f["expected_recorded"].astype(np.int64) + f["reset_recorded"],
                                   np.where(store, f["value_recorded"].astype(np.int64), 1))
    return f


def _payload_groups(pl: np.ndarray) -> dict:
    """The payloads of each record (a run starting at index 0): its lane, record, first FLAG_ADDR, its first two
    FLAG_VALUEs (signed) and how many of each kind it has."""
    starts = np.flatnonzero(pl["index"] == 0)
    group = np.cumsum(pl["index"] == 0) - 1
    n = starts.size
    is_addr = pl["payload"] == wire.FLAG_ADDR_EVENT_ID
    is_val = pl["payload"] == wire.FLAG_VALUE_EVENT_ID
    signed = pl["value"].astype(np.uint32).view(np.int32).astype(np.int64)
    vrows = np.flatnonzero(is_val)
    vg = group[vrows]
    rank = np.arange(vrows.size) - np.searchsorted(vg, vg)  # position among its record's FLAG_VALUEs
    values = np.full((n, 2), _MISSING, np.int64)
    for k in (0, 1):
        values[vg[rank == k], k] = signed[vrows[rank == k]]
    out = {name: pl[name][starts].astype(np.int64) for name in ("lane", "event", "kind", "ts_ns", "begin_ns")}
    out.update(size=np.bincount(group, minlength=n))
    # per record, then one row for records with no payloads (index n): no address, no value
    out.update(addr=np.r_[np.where(is_addr[starts], pl["value"][starts].astype(np.int64), -1), -1],
               values=np.r_[values, [[_MISSING, _MISSING]]], n_addr=np.r_[np.bincount(group[is_addr], minlength=n), 0],
               n_values=np.r_[np.bincount(vg, minlength=n), 0])
    return out


def flag_events(trace: Trace) -> FlagEvents:
    """The FlagTable of `trace` (module docstring)."""
    parts = parts_of(trace)
    offsets = np.array([p.block_offset for p in parts], np.int64)
    problems = {name: 0 for name in PROBLEMS}

    def part_of(block):
        return np.maximum(np.searchsorted(offsets, np.asarray(block, np.int64), side="right") - 1, 0)

    # the call sites: (part, event id) -> site row
    site_key, site_entry = [], []
    for i, p in enumerate(parts):
        for s in p.sites:
            site_key.append(i * (wire.MAX_EVENT_ID + 1) + s["id"])
            site_entry.append(s)
    site_key = np.array(site_key, np.int64)
    o = np.argsort(site_key, kind="stable")
    site_key, site_entry = site_key[o], [site_entry[k] for k in o.tolist()]
    facts = _site_facts(site_entry)

    def site_of(part, event):
        key = part * (wire.MAX_EVENT_ID + 1) + np.asarray(event, np.int64)
        at = np.minimum(np.searchsorted(site_key, key), max(site_key.size - 1, 0))
        hit = site_key[at] == key if site_key.size else np.zeros(key.size, bool)
        return np.where(hit, at, -1)

    # hosts: signal instants and wait regions of a site
    inst, sp = trace.instants, trace.spans
    i_site = site_of(part_of(inst["block"]), inst["event"])
    i_sel = np.flatnonzero(i_site >= 0)
    i_sel = i_sel[~facts["wait"][i_site[i_sel]]] if site_key.size else i_sel[:0]
    s_site = site_of(part_of(sp["block"]), sp["event"])
    s_sel = np.flatnonzero(s_site >= 0)
    s_sel = s_sel[facts["wait"][s_site[s_sel]]] if site_key.size else s_sel[:0]
    n_sig, n_wait = i_sel.size, s_sel.size
    h_lane = np.r_[inst["lane"][i_sel], sp["lane"][s_sel]].astype(np.int64)
    h_block = np.r_[inst["block"][i_sel], sp["block"][s_sel]].astype(np.int64)
    h_group = np.r_[inst["group"][i_sel], sp["group"][s_sel]].astype(np.int64)
    h_event = np.r_[inst["event"][i_sel], sp["event"][s_sel]].astype(np.int64)
    h_type = np.r_[np.full(n_sig, _INSTANT), np.full(n_wait, _END)]
    h_t = np.r_[inst["ts_ns"][i_sel], sp["end_ns"][s_sel]].astype(np.int64)
    h_begin = np.r_[inst["ts_ns"][i_sel], sp["start_ns"][s_sel]].astype(np.int64)
    hs = np.r_[i_site[i_sel], s_site[s_sel]].astype(np.int64)
    h_is_wait = np.r_[np.zeros(n_sig, bool), np.ones(n_wait, bool)]

    # each record's payloads onto it: same lane, record id, type and times, and rank among equal ones
    g = _payload_groups(trace.payloads)
    both = _keys(np.r_[h_lane, g["lane"]], np.r_[h_event, g["event"]], np.r_[h_type, g["kind"]],
                 np.r_[h_t, g["ts_ns"]], np.r_[h_begin, g["begin_ns"]])
    hk, gk = both[: h_lane.size], both[h_lane.size:]
    width = h_lane.size + g["lane"].size + 1
    hkey, gkey = hk * width + _nth(hk), gk * width + _nth(gk)
    o = np.argsort(hkey)
    at = np.minimum(np.searchsorted(hkey[o], gkey), max(o.size - 1, 0))
    found = (hkey[o][at] == gkey) if o.size else np.zeros(gkey.size, bool)
    problems["payload_without_record"] = int(g["size"][~found].sum())
    hg = np.full(h_lane.size, g["lane"].size, np.int64)  # each host's payload group (none: the empty row)
    hg[o[at[found]]] = np.flatnonzero(found)
    addr, v0, v1 = g["addr"][hg], g["values"][hg, 0], g["values"][hg, 1]
    extra = g["n_addr"][hg] - (addr >= 0) + np.maximum(g["n_values"][hg] - facts["values_allowed"][hs], 0)
    problems["extra_payload"] = int(extra.sum())

    # the sites' facts per host, and the values their records carry
    ok = addr >= 0
    problems["record_without_address"] = int((~ok).sum())
    f = {k: v[hs] if hs.size else v[:0] for k, v in facts.items()}
    is_store = ~h_is_wait & f["store"]
    sig_value = np.where(f["value_recorded"] | (~is_store & (v0 != _MISSING)), v0, f["value"])
    bad = ok & ~h_is_wait & (sig_value == _MISSING)
    problems["signal_without_value"] = int(bad.sum())
    ok &= ~bad
    expected = np.where(f["expected_recorded"], v0, f["expected"])
    reset = np.where(f["reset_recorded"], np.where(f["expected_recorded"], v1, v0), f["reset"])
    bad = ok & h_is_wait & ((expected == _MISSING) | (f["resets"] & (reset == _MISSING)))
    problems["wait_without_value"] = int(bad.sum())
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
            lo = (b["base"] >> wire.FLAG_ADDR_SHIFT) % WINDOW
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
        names += [f"gmem@0x{int(r) << wire.FLAG_ADDR_SHIFT:x}" for r in raw.tolist()]
        buf[unknown] = len(names) - raw.size + np.searchsorted(raw, addr[unknown])
        owner[unknown] = ranks[h_part[unknown]]
        offset[unknown] = 0

    # signal rows: an add of n is n increments at its time; a store its value; waits; resets as stores
    sig = np.flatnonzero(ok & ~h_is_wait)
    adds = ~is_store[sig]
    problems["zero_increments"] = int((adds & (sig_value[sig] == 0)).sum())
    problems["negative_add"] = int((adds & (sig_value[sig] < 0)).sum())
    reps = np.where(adds, np.maximum(sig_value[sig], 0), 1)
    sig_rows = np.repeat(sig, reps)
    sig_made = np.repeat(np.where(adds, UNKNOWN, sig_value[sig]), reps)
    sig_op = np.repeat(np.where(adds, ADD, STORE), reps)
    wait = np.flatnonzero(ok & h_is_wait)
    rs = wait[f["resets"][wait]]  # an atom.cas wait that resets: a store at its end
    rows = np.r_[sig_rows, wait, rs]
    kind = np.r_[np.full(sig_rows.size, SIGNAL), np.full(wait.size, WAIT), np.full(rs.size, SIGNAL)]
    begin = np.r_[h_t[sig_rows], h_begin[wait], h_t[rs]]
    table = FlagTable(
        rank=ranks[h_part[rows]], launch=np.array([p.launch for p in parts], np.int64)[h_part[rows]],
        block=h_block[rows] - offsets[h_part[rows]], warp=h_group[rows], kind=kind, buffer=buf[rows],
        offset=offset[rows], owner=owner[rows], value=np.r_[sig_made, expected[wait], reset[rs]],
        op=np.r_[sig_op, f["cmp"][wait], np.full(rs.size, STORE)].astype(np.uint8),
        begin_ns=begin, end_ns=h_t[rows], buffers=tuple(names),
    )
    return FlagEvents(table, h_lane[rows], h_part[rows], parts, problems, int(unknown.size))
