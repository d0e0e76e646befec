"""A recording pool read on the host (numpy only): one v1 capture per (kernel, launch), and the pool's counts.

The pool (layout: host_decode/core/wire.py, "the recording pool"; device side: ikp_cute/pool.py and
ikp_cute/pipelines/record_pool.py) holds units of one lane's records each, in the order lanes asked for
them. ``read_pool(words, kernels)`` takes the pool's bytes as uint64 words (a copy of the device buffer, or
a raw dump: the header line makes it self-describing) and gives back:

* ``captures``: one ``(v1 buffer, meta)`` per (kernel, launch): lanes are warps (num_groups = the launch's
  warps per block, num_blocks = one past the highest block seen), each lane's units concatenated in seq
  order; each lane opens with the ANCHOR_LO / ANCHOR_HI pair of its first unit's 64-bit time, and closes
  with a DROPPED instant (records it lost once the pool ran out, when any) and a FINALIZE carrying its SM id.
  ``meta`` holds sidecar keys (kernel, launch_index, write_stride, records_per_lane, mode, groups, events,
  warps_per_group, pipeline_lanes, whatever ``kernels[id]`` adds, and ``pool``: this launch's accounting),
  so host_decode's ``decode(buffer, names=meta, meta=meta)`` and ``save_capture(path, buffer, **meta)``
  take it unchanged;
* ``summary``: pool bytes, bytes used, the bytes that would have held everything, per kernel launches seen /
  recorded and losses, and the pool-level loss buckets.

Every non-zero word of the unit area is accounted for: a record of a capture, or in one named bucket
(``summary["loss"]``): ``unit_header_invalid`` (a unit with records whose header is not one the device
writes: magic, kernel id, warps per block inconsistent with its launch), ``duplicate_unit`` (a unit
claiming the (kernel, launch, lane, seq) of an earlier one), ``superseded`` (units of an older launch in a
``last`` region), ``outside_allocation`` (words in units no request was given). Records the device could
not store are counted per kernel: ``lost_records`` (lanes that had a unit wrote their count into it:
exact per lane and launch; lanes that never got one add to their kernel's counters) and
``stray_records`` (warps that cannot record: 2-D / 3-D blocks, more than 32 warps, lane >= 2**20).

Invariants a change could break (tests/unit/host_decode/load/test_pool.py guards each):
* units out of order, lanes and launches interleaved reassemble into exactly the lane's records in seq
  order (test_interleaved_units_reassemble_exactly);
* the v1 buffer decodes with nothing lost but what the device lost, and its DROPPED instants carry it
  (test_exhausted_pool_counts_lost_records_and_the_size_needed);
* a garbage header is a counted bucket, never a capture and never an exception
  (test_garbage_headers_are_counted_not_decoded);
* a pool whose header line is not ours is a DecodeError naming the word (test_not_a_pool_is_refused).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.core import wire
from host_decode.core.errors import DecodeError

U32 = 1 << 32
LOSS_BUCKETS = ("unit_header_invalid", "duplicate_unit", "superseded", "outside_allocation")
_INSTANT, _FINALIZE = int(wire.EventType.INSTANT), int(wire.EventType.FINALIZE)


def warp_lane_names(warps_per_block: int, warps_per_group: int = 4) -> list[str]:
    """Lane (group) names of a capture whose lanes are warps: `wg<G>.w<W>` for warp W of warp group G."""
    return [f"wg{w // warps_per_group}.w{w % warps_per_group}" for w in range(warps_per_block)]


@dataclasses.dataclass(frozen=True)
class PoolLayout:
    """What a pool's header line says (checked against the layout wire.py derives from it)."""

    size_bytes: int
    max_kernels: int
    units: int
    control_bytes: int
    top: int  # units the shared area may hand out (the `last` regions lie above)
    next: int  # units requested from the shared area, failed requests included

    @property
    def unit_words(self) -> int:
        return wire.POOL_UNIT_WORDS


@dataclasses.dataclass
class PoolRead:
    layout: PoolLayout
    captures: list  # [(v1 buffer uint64, meta dict)]
    summary: dict


def as_pool_words(data, source: str | None = None) -> np.ndarray:
    """The pool as a 1-D uint64 array (a copy is never made of a uint64 / int64 array)."""
    arr = np.asarray(data)
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize != 8:
        if arr.dtype == np.uint8 and arr.size % 8 == 0:
            arr = arr.view(np.uint64)
        else:
            raise DecodeError(f"a pool is 64-bit words (or bytes, a multiple of 8), got {arr.dtype} x {arr.size}",
                              source=source)
    return arr.reshape(-1).view(np.uint64)


def read_layout(words, source: str | None = None) -> PoolLayout:
    """The layout of a pool's bytes, every header field checked (DecodeError naming the word)."""
    words = as_pool_words(words, source)
    if words.size < 4 or int(words[0]) != wire.POOL_MAGIC:
        first = f"{int(words[0]):#018x}" if words.size else "nothing"
        raise DecodeError(f"not a recording pool: word 0 is {first}, a pool starts with {wire.POOL_MAGIC:#018x}",
                          slot=0, source=source)
    head = words[:4].view(np.uint32)
    field = {name: int(head[i]) for name, i in wire.POOL_HEADER_WORDS32.items()}
    size = 8 * words.size
    expect = {"version": wire.POOL_VERSION, "unit_words": wire.POOL_UNIT_WORDS}
    for name, value in expect.items():
        if field[name] != value:
            raise DecodeError(f"pool header {name} is {field[name]}, this reader knows {value}",
                              slot=wire.POOL_HEADER_WORDS32[name] // 2, source=source)
    kernels = field["max_kernels"]
    if not 1 <= kernels <= wire.POOL_MAX_KERNELS or field["control_bytes"] != wire.pool_control_bytes(kernels):
        raise DecodeError(f"pool header: max_kernels {kernels} and control_bytes {field['control_bytes']} do not "
                          "match the layout", slot=2, source=source)
    if field["units"] != wire.pool_units(size, kernels):
        raise DecodeError(f"pool header: {field['units']} units, but {size} bytes hold "
                          f"{wire.pool_units(size, kernels)} (a truncated dump?)", slot=2, source=source)
    if field["top"] > field["units"]:
        raise DecodeError(f"pool header: TOP {field['top']} is past the {field['units']} units", slot=3, source=source)
    return PoolLayout(size, kernels, field["units"], field["control_bytes"], field["top"],
                      int(words[wire.POOL_NEXT // 8]))


def kernel_counters(words, layout: PoolLayout) -> dict[str, np.ndarray]:
    """Per kernel id (arrays of max_kernels): the window words, TICKS, the `last` region and the counter sets
    (set 0 shared, 1 and 2 the halves of the `last` region): `<field>_<set>`."""
    words = as_pool_words(words)
    w32 = words.view(np.uint32)
    k = np.arange(layout.max_kernels)
    win = (wire.POOL_WINDOWS + wire.POOL_WINDOW_BYTES * k) // 4
    out = {name: w32[win + i].astype(np.int64) for i, name in enumerate(("start", "stop", "every", "mode"))}
    base = wire.pool_counters(layout.max_kernels) + wire.POOL_COUNTER_BYTES * k
    out["ticks"] = words[(base + wire.POOL_TICKS) // 8].astype(np.uint64)
    out["launches"] = (out["ticks"] >> np.uint64(wire.POOL_TICK_BITS)).astype(np.int64)
    out["last_first"] = w32[(base + wire.POOL_LAST_FIRST) // 4].astype(np.int64)
    out["last_half"] = w32[(base + wire.POOL_LAST_HALF) // 4].astype(np.int64)
    for s in range(3):
        at = base + wire.POOL_SETS + wire.POOL_SET_BYTES * s
        for name, off in (("next", wire.POOL_SET_NEXT), ("nochunk_records", wire.POOL_SET_NOCHUNK_RECORDS),
                          ("stray", wire.POOL_SET_STRAY), ("nochunk_lanes", wire.POOL_SET_NOCHUNK_LANES)):
            out[f"{name}_{s}"] = words[(at + off) // 8].astype(np.int64)
        out[f"loss_min_{s}"] = w32[(at + wire.POOL_SET_LOSS_MIN) // 4].astype(np.int64)
        out[f"loss_max_{s}"] = w32[(at + wire.POOL_SET_LOSS_MAX) // 4].astype(np.int64)
    return out


def selection_text(start: int, stop: int, every: int, mode: int) -> str:
    """The selection string the window words say (wire.pool_selection's inverse)."""
    if mode == wire.POOL_LAST:
        return "last"
    if start >= stop:
        return "none"
    if stop == wire.POOL_OPEN_ENDED:
        if every > 1:
            return f"every={every}" if start == 0 else f"{start}: every={every}"
        return "all" if start == 0 else f"{start}:"
    text = str(start) if stop == start + 1 else f"{start}:{stop}"
    return text if every <= 1 else f"{text} every={every}"


def read_pool(words, kernels: dict | None = None, source: str | None = None) -> PoolRead:
    """Captures and summary of a pool's bytes (module docstring). `kernels`: {kernel id: meta}, each meta
    with at least "name" (the traced kernel's), plus sidecar keys for its captures (events, pipelines...)."""
    words = as_pool_words(words, source)
    layout = read_layout(words, source)
    kernels = {int(k): dict(v) for k, v in (kernels or {}).items()}
    counters = kernel_counters(words, layout)
    start = layout.control_bytes // 8
    body = words[start : start + layout.units * wire.POOL_UNIT_WORDS].reshape(layout.units, wire.POOL_UNIT_WORDS)
    head = wire.unpack_unit_headers(body[:, : wire.POOL_UNIT_HEADER_WORDS])
    records = body[:, wire.POOL_UNIT_HEADER_WORDS :]
    filled = np.count_nonzero(records, axis=1)
    used = np.count_nonzero(body, axis=1) > 0
    loss = {name: {"units": 0, "records": 0} for name in LOSS_BUCKETS}

    # where each unit lies: a kernel's `last` region (two halves), else the shared area, which handed out
    # the units below NEXT
    region_kernel = np.full(layout.units, -1, np.int64)
    region_half = np.full(layout.units, -1, np.int64)
    for k in np.flatnonzero(counters["last_half"] > 0):
        first, half = int(counters["last_first"][k]), int(counters["last_half"][k])
        for h in (0, 1):
            lo = min(first + h * half, layout.units)
            region_kernel[lo : min(lo + half, layout.units)], region_half[lo : min(lo + half, layout.units)] = k, h
    in_region = region_kernel >= 0
    index = np.arange(layout.units)
    allocated = in_region | (index < min(layout.next, layout.units))
    _count(loss, "outside_allocation", used & ~allocated, filled)

    valid = allocated & head["written"] & (head["kernel"] < layout.max_kernels) & (head["reserved"] == 0)
    valid &= ~in_region | ((head["kernel"] == region_kernel) & ((head["launch"] & 1) == region_half))
    _count(loss, "unit_header_invalid", allocated & used & ~valid, filled)

    # `last` regions: the kernel's newest launch only (the other half holds an older one, or nothing)
    for k in np.unique(region_kernel[valid & in_region]):
        mine = valid & in_region & (region_kernel == k)
        old = mine & (head["launch"] != head["launch"][mine].max())
        _count(loss, "superseded", old, filled)
        valid &= ~old

    captures = []
    order = np.lexsort((index, head["seq"], head["lane"], head["launch"], head["kernel"]))
    order = order[valid[order]]
    key = np.stack((head["kernel"][order], head["launch"][order]), axis=1)
    splits = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1 if order.size else np.zeros(0, np.int64)
    per_kernel_captures: dict[int, int] = {}
    groups = np.split(order, splits) if order.size else []
    for units in groups:
        k = int(head["kernel"][units[0]])
        per_kernel_captures[k] = per_kernel_captures.get(k, 0) + 1
    for units in groups:
        capture = _capture(units, head, records, filled, counters, kernels, layout, loss, per_kernel_captures)
        if capture is not None:
            captures.append(capture)
    summary = _summary(layout, counters, kernels, captures, loss)
    return PoolRead(layout, captures, summary)


def _capture(units, head, records, filled, counters, kernels, layout, loss, per_kernel_captures):
    """One (kernel, launch): the v1 buffer and its meta; units of a lane in seq order (module docstring)."""
    k, launch = int(head["kernel"][units[0]]), int(head["launch"][units[0]])
    wpb_all = head["warps_per_block"][units]
    wpb = int(np.bincount(wpb_all).argmax())
    odd = units[wpb_all != wpb]
    _count(loss, "unit_header_invalid", odd, filled)
    units = units[wpb_all == wpb]
    lane, seq = head["lane"][units], head["seq"][units]
    # a second unit with a lane's (seq) is a duplicate: the first one (lowest unit index) is kept
    ident = lane * (1 << 16) + seq
    _, first_of = np.unique(ident, return_index=True)
    keep = np.zeros(units.size, bool)
    keep[first_of] = True
    _count(loss, "duplicate_unit", units[~keep], filled)
    units, lane, seq = units[keep], lane[keep], seq[keep]
    order = np.lexsort((units, lane))  # a lane's units in allocation order (= seq order)
    units, lane, seq = units[order], lane[order], seq[order]
    lane_starts = np.flatnonzero(np.r_[True, lane[1:] != lane[:-1]])
    lanes = lane[lane_starts]
    rank = np.arange(units.size) - np.repeat(lane_starts, np.diff(np.r_[lane_starts, units.size]))
    gaps = np.unique(lane[(seq - rank) % (1 << 16) != 0]).size

    # the lane's records: non-zero slots of its units, in unit then slot order
    slots = records[units]
    nz_unit, nz_slot = np.nonzero(slots)
    recs = slots[nz_unit, nz_slot]
    rec_lane = lane[nz_unit]
    per_lane = np.bincount(np.searchsorted(lanes, rec_lane), minlength=lanes.size)
    first_unit = units[lane_starts]
    time64 = head["time64"][first_unit]
    sm = head["sm"][first_unit]
    lost_with_unit = np.add.reduceat(head["lost"][units], lane_starts) if units.size else np.zeros(0, np.int64)
    dropped = (lost_with_unit > 0).astype(np.int64)

    num_blocks = int(lanes.max()) // wpb + 1
    stride = num_blocks * wpb
    rows = int((wire.ANCHOR_RECORDS + per_lane + dropped + 1).max())
    buf = np.zeros(1 + stride * rows, np.uint64)
    buf[0] = wire.pack_header(num_blocks, wpb)
    u = np.uint64
    at = lambda ln, kk: 1 + ln + kk * stride  # noqa: E731
    lanes_u = lanes.astype(u)
    tag = lambda event, kind: wire.make_tag(lanes_u, u(event), u(kind))  # noqa: E731
    buf[at(lanes, 0)] = wire.pack_record(time64 & u(0xFFFFFFFF), tag(wire.ANCHOR_LO_EVENT_ID, _INSTANT))
    buf[at(lanes, 1)] = wire.pack_record(time64 >> u(32), tag(wire.ANCHOR_HI_EVENT_ID, _INSTANT))
    starts = np.r_[0, np.cumsum(per_lane)[:-1]]
    k_in_lane = np.arange(recs.size) - np.repeat(starts, per_lane)
    buf[at(rec_lane, k_in_lane + wire.ANCHOR_RECORDS)] = recs
    end = wire.ANCHOR_RECORDS + per_lane
    d = np.flatnonzero(dropped)
    buf[at(lanes[d], end[d])] = wire.pack_record(lost_with_unit[d].astype(u) & u(0xFFFFFFFF),
                                                 tag(wire.DROPPED_EVENT_ID, _INSTANT)[d])
    last_time = time64 & u(0xFFFFFFFF)  # a lane without records closes at its anchor
    some = per_lane > 0
    last_time[some] = recs[(starts + per_lane - 1)[some]] >> u(32)
    finalize = wire.make_tag(lanes_u, sm.astype(u) & u(wire.MAX_EVENT_ID), u(_FINALIZE))  # SM id as its event id
    buf[at(lanes, end + dropped)] = wire.pack_record(last_time, finalize)

    kernel_meta = dict(kernels.get(k, {}))
    name = kernel_meta.pop("name", f"kernel_{k}")
    region = "last" if int(counters["mode"][k]) == wire.POOL_LAST and int(counters["last_half"][k]) else "shared"
    pool = {"kernel_id": k, "region": region, "units": int(units.size), "records": int(recs.size),
            "lost_records": int(lost_with_unit.sum()), "lanes_that_lost": int(d.size), "lanes_with_gaps": int(gaps),
            "pool_bytes": layout.size_bytes}
    counted = _counters_of(counters, k, launch, region, per_kernel_captures.get(k, 0))
    pool.update(counted)
    meta = {"kernel": name, "launch_index": launch, "write_stride": stride, "records_per_lane": rows,
            "mode": "cursor", "warps_per_group": 1, "pipeline_lanes": "warp",
            "groups": dict(enumerate(warp_lane_names(wpb)))}
    meta.update(kernel_meta)
    if "stray_records" in counted and counted["stray_records"] is not None:
        meta["stray_records"] = counted["stray_records"]
    meta["pool"] = pool
    return buf, meta


def _count(loss: dict, bucket: str, which, filled) -> None:
    """Add the units `which` selects (a mask or indices) and their record slots to loss bucket `bucket`."""
    loss[bucket]["units"] += int(np.count_nonzero(which) if np.asarray(which).dtype == bool else np.size(which))
    loss[bucket]["records"] += int(filled[which].sum())


def _counters_of(counters, k: int, launch: int, region: str, captures_of_kernel: int) -> dict:
    """The launch's share of its kernel's counters: a `last` half is this launch's alone; the shared set
    is cumulative, so it is this launch's only when the kernel has one capture and lost records in no
    other launch (else the summary holds them, per kernel)."""
    if region == "last":
        s = 1 + (launch & 1)
        return {"lanes_without_unit": int(counters[f"nochunk_lanes_{s}"][k]),
                "lost_records_without_unit": int(counters[f"nochunk_records_{s}"][k]),
                "stray_records": int(counters[f"stray_{s}"][k])}
    lo, hi = int(counters["loss_min_0"][k]), int(counters["loss_max_0"][k])
    alone = captures_of_kernel == 1 and (lo > hi or lo == hi == launch)
    if not alone:
        return {"lanes_without_unit": None, "lost_records_without_unit": None, "stray_records": None,
                "kernel_counters": "shared by the kernel's launches: see the pool summary"}
    return {"lanes_without_unit": int(counters["nochunk_lanes_0"][k]),
            "lost_records_without_unit": int(counters["nochunk_records_0"][k]),
            "stray_records": int(counters["stray_0"][k])}


def _summary(layout: PoolLayout, counters, kernels, captures, loss) -> dict:
    unit = wire.POOL_UNIT_BYTES
    rows = []
    by_kernel: dict[int, list] = {}
    for _, meta in captures:
        by_kernel.setdefault(meta["pool"]["kernel_id"], []).append(meta)
    listed = np.isin(np.arange(layout.max_kernels), list(kernels) + list(by_kernel))
    carved = layout.units - layout.top  # units the `last` regions took from the shared area's top
    needed = layout.next + carved  # the shared area's requests, and every region as large as it is ...
    for k in np.flatnonzero((counters["launches"] > 0) | listed):
        k = int(k)
        mine = by_kernel.get(k, [])
        last = int(counters["mode"][k]) == wire.POOL_LAST
        sets = (0, 1, 2) if last or counters["last_half"][k] else (0,)
        row = {"id": k, "name": kernels.get(k, {}).get("name", f"kernel_{k}"),
               "selection": selection_text(*(int(counters[f][k]) for f in ("start", "stop", "every", "mode"))),
               "launches_seen": int(counters["launches"][k]),
               "recorded_launches": sorted(m["launch_index"] for m in mine),
               "records": sum(m["pool"]["records"] for m in mine),
               "lost_records_in_units": sum(m["pool"]["lost_records"] for m in mine),
               "lanes_without_unit": int(sum(counters[f"nochunk_lanes_{s}"][k] for s in sets)),
               "lost_records_without_unit": int(sum(counters[f"nochunk_records_{s}"][k] for s in sets)),
               "stray_records": int(sum(counters[f"stray_{s}"][k] for s in sets))}
        lo, hi = int(counters["loss_min_0"][k]), int(counters["loss_max_0"][k])
        row["loss_launches"] = [lo, hi] if lo <= hi else None
        row["lost_records"] = row["lost_records_in_units"] + row["lost_records_without_unit"]
        half = int(counters["last_half"][k])
        if half:
            need = int(max(counters["next_1"][k], counters["next_2"][k]))
            row["last_region"] = {"first_unit": int(counters["last_first"][k]), "units_per_half": half,
                                  "units_requested_per_half": need}
            needed += 2 * max(need - half, 0)  # ... or larger, when a half asked for more
        rows.append(row)
    lost = sum(r["lost_records"] for r in rows)
    return {
        "pool_bytes": layout.size_bytes, "control_bytes": layout.control_bytes, "unit_bytes": unit,
        "units": layout.units, "shared_units": layout.top, "units_requested": layout.next,
        "bytes_used": layout.control_bytes + unit * (min(layout.next, layout.top) + carved),
        "bytes_needed": layout.control_bytes + unit * needed,
        "exhausted": bool(layout.next > layout.top or lost),
        "records": sum(r["records"] for r in rows), "lost_records": lost, "captures": len(captures),
        "kernels": rows, "loss": loss,
    }
