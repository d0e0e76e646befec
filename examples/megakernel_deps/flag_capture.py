"""The flag examples' traced runs (`run.py --trace`, both examples): a pipelines trace around the runner's own
compile (no kernel edit: the tracer hooks cutlass.utils.distributed), its capture saved with the sidecar keys of
docs/flags.md, and its records read back as the flag table host_decode.analysis.flags matches.

`flag_table(trace)` is this runner's reading of a decoded capture (docs/flags.md, "Records"): a signal is an
INSTANT of a `flags` entry followed by its payloads (FLAG_ADDR; FLAG_VALUE: the amount of an add made by
several lanes, or a stored value), a wait the END of a region of a `flags` entry followed by FLAG_ADDR and, when
its expected value is recorded, FLAG_VALUE; FLAG_ADDR maps to (buffer, owner rank, offset) through
`flag_buffers`. It needs only numpy and host_decode; the project's own reader of flag events belongs to the
host side (host_decode/analysis), which this one is a cross-check of.
"""

from __future__ import annotations

import numpy as np

from host_decode.analysis.flags import ADD, EQ, GE, LT, SIGNAL, STORE, UNKNOWN, WAIT, BlockSpans, FlagTable
from host_decode.core import wire

CMP_OPS = {"ge": GE, "eq": EQ, "lt": LT}


def traced_session(num_blocks: int, warps_per_block: int, records_per_lane: int, kernel: str, device: str = "cuda"):
    """A Session shaped for the tracer's lanes (one per warp), sized from the grid."""
    from ikp_cute.pipelines import session_for

    return session_for(num_blocks, warps_per_block, records_per_lane, kernel=kernel, device=device)


def locate(addr_lo: np.ndarray, buffers: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(buffer index, owner rank, offset in elements) of each FLAG_ADDR value (address >> 2, low 32 bits) in
    the recording process's `flag_buffers`; -1 where no buffer holds it; and the buffers' names."""
    names = sorted({b["name"] for b in buffers})
    index = np.full(addr_lo.size, -1, np.int64)
    owner = np.full(addr_lo.size, -1, np.int64)
    offset = np.full(addr_lo.size, -1, np.int64)
    a = addr_lo.astype(np.int64)
    for b in buffers:
        delta = (a - ((b["base"] >> wire.FLAG_ADDR_SHIFT) & 0xFFFF_FFFF)) % (1 << 32)  # in 4-byte units
        inside = delta * 4 < b["bytes"]
        index[inside], owner[inside] = names.index(b["name"]), b["owner_rank"]
        offset[inside] = delta[inside] * 4 // b["elem_bytes"]
    return index, owner, offset, names


def flag_table(trace, rank_of_block=None, launch: int = 0) -> tuple[FlagTable, dict]:
    """The capture's flag events as a FlagTable (module docstring) and counts of what could not be placed.
    rank_of_block: the recording rank per block (ranks simulated in one launch), else the sidecar's `rank`."""
    meta = trace.meta
    sites = {int(f["id"]): f for f in meta.get("flags") or []}
    p = trace.payloads
    first = p["index"] == 0
    key = np.cumsum(first) - 1  # the record each payload belongs to (its payloads are consecutive)
    rec = p[first]
    n = rec.size
    value = p["value"].astype(np.uint32).view(np.int32).astype(np.int64)  # FLAG_VALUE: a signed 32-bit value
    v = np.full((n, 2), np.iinfo(np.int64).min, np.int64)  # the first two FLAG_VALUEs of each record
    for i in (1, 2):
        at = (p["payload"] == wire.FLAG_VALUE_EVENT_ID) & (p["index"] == i)
        v[key[at], i - 1] = value[at]
    known = np.isin(rec["event"], list(sites)) & (rec["payload"] == wire.FLAG_ADDR_EVENT_ID)
    rec, v = rec[known], v[known]
    buf, owner, offset, names = locate(rec["value"], meta.get("flag_buffers") or [])

    def site_column(field, default):
        return np.array([sites[int(e)].get(field, default) for e in rec["event"]], object)

    kind = site_column("kind", "")
    is_signal = kind == "signal"
    stores = is_signal & (site_column("update", "") == "store")
    recorded = lambda col: np.array([x == "recorded" for x in col])  # noqa: E731
    constant = lambda col: np.array([0 if x in ("recorded", None) else int(x) for x in col], np.int64)  # noqa: E731
    site_value, site_expected = site_column("value", None), site_column("expected", None)
    has_v = v[:, 0] != np.iinfo(np.int64).min
    amount = np.where(is_signal & has_v, v[:, 0], constant(site_value))  # an add's increments, a store's value
    expected = np.where(recorded(site_expected), v[:, 0], constant(site_expected))
    op = np.where(is_signal, np.where(stores, STORE, ADD),
                  np.array([CMP_OPS.get(c, GE) for c in site_column("cmp", "ge")], np.int64))
    repeat = np.where(is_signal & ~stores, np.maximum(amount, 0), 1)  # an add of n: n increments at one time
    placed = np.repeat(buf >= 0, repeat)
    pick = lambda a: np.repeat(a, repeat)[placed]  # noqa: E731
    block = pick(rec["block"].astype(np.int64))
    if rank_of_block is not None:
        rank = np.asarray(rank_of_block, np.int64)[block]
    else:
        rank = np.full(block.size, int(meta.get("rank") or 0), np.int64)
    begin = np.where(is_signal, rec["ts_ns"], rec["begin_ns"])
    table = FlagTable(
        rank=rank, launch=np.full(block.size, launch, np.int64), block=block, warp=pick(rec["group"].astype(np.int64)),
        kind=pick(np.where(is_signal, SIGNAL, WAIT)), buffer=pick(buf), offset=pick(offset), owner=pick(owner),
        value=pick(np.where(is_signal, np.where(stores, amount, UNKNOWN), expected)), op=pick(op),
        begin_ns=pick(begin), end_ns=pick(rec["ts_ns"]), buffers=tuple(names))
    counts = {"records": int(n), "flag_records": int(known.sum()), "events": int(repeat.sum()),
              "unplaced_addresses": int((~placed).sum())}
    return table, counts


def block_spans(trace, rank_of_block=None, launch: int = 0) -> BlockSpans:
    """Each block's span: its lanes' first and last records."""
    lanes = trace.lanes[trace.lanes["first_ns"] >= 0]
    blocks = np.unique(lanes["block"])
    idx = np.searchsorted(blocks, lanes["block"])
    start = np.full(blocks.size, np.iinfo(np.int64).max)
    end = np.zeros(blocks.size, np.int64)
    np.minimum.at(start, idx, lanes["first_ns"])
    np.maximum.at(end, idx, lanes["last_ns"])
    rank = (np.asarray(rank_of_block, np.int64)[blocks] if rank_of_block is not None
            else np.full(blocks.size, int(trace.meta.get("rank") or 0)))
    return BlockSpans(rank=rank, launch=np.full(blocks.size, launch), block=blocks, start_ns=start, end_ns=end)


def analyse(table: FlagTable, spans: BlockSpans, clock_error_ns: int, initial: int = 0, clock_offset_ns=None) -> dict:
    """match_waits and critical_path of a traced run, for the runner's JSON and table."""
    from host_decode.analysis.flags import critical_path, describe_path, match_waits

    m = match_waits(table, clock_offset_ns=clock_offset_ns, clock_error_ns=clock_error_ns, initial=initial)
    path = critical_path(table, m, spans=spans, clock_offset_ns=clock_offset_ns)
    return {"events": len(table), "waits": int(m.wait_rows.size), "waits_blocked": int(m.blocked().sum()),
            "match": m.counts(), "path_ns": int(path["duration_ns"].sum()), "path": describe_path(table, path)[-12:],
            "_match": m, "_path": path}
