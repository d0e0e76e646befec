"""NVIDIA IKET traces (``cutlass.cute.experimental.iket`` run under IKET's launcher) -> ikp Traces.

What IKET writes, read from its real output (examples/interop/iket_twin/, docs/interop.md):

* ``*.trace.json`` (``--postprocess json``): ``stringTable`` (names), ``locationTable`` (one entry per
  warp: ``ctaId`` [x, y, z], ``warpId``, ``smId``, ``tpcId``, ``gpcId``), ``launches`` (one per kernel
  launch: grid/block dims, ``kernelName``, ``ranges``, ``markers``, ``warpLifetimes``) and
  ``graphLaunches``. A range has ``startTs``/``endTs`` (absolute ``%globaltimer`` ns),
  ``rangeNameIdx``, ``rangeType`` (2: range_push/range_pop, stacked; 1: range_start/range_end with a
  token), ``warpLocIdxs`` [start warp, end warp] and ``internalEvents`` (payloads). A marker has
  ``timestamp``, ``markerNameIdx``, ``locIdx`` and an optional payload.
* ``*.pftrace`` (``--postprocess perfetto``): tracks Root > Grid > GPC > "TPC<t>|VSM<sm>" > "CTA(x, y, z)" >
  "WarpNN" > "StackedRanges" (push/pop) and one track per range_start name; slices by name.

Lanes are (block, warp): block = x + y*gx + z*gx*gy, warp = ``warpId``. IKET counts no dropped events (it
sizes its buffers in a dry run), so a launch whose event count changed between its two passes can lose
events that no file records: said in ``meta["source"]["cannot_tell"]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.model import Names, Trace, is_json_int
from host_decode.interop.tables import (
    MAX_BLOCKS,
    MAX_GROUPS,
    ForeignTables,
    build_trace,
    count,
    usable_time,
    warp_names,
)

CANNOT_TELL = [
    "events IKET lost: it counts no drops (buffers are sized by a dry run of the whole workload)",
    "payloads of ranges and markers are kept in meta only (no ikp analysis reads them)",
]


def _load_json(path: str | Path) -> dict:
    from host_decode.interop.sniff import read_json

    doc = read_json(path, "IKET JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("launches"), list):
        raise DecodeError("not an IKET trace: no 'launches' list", source=str(path))
    return doc


def _list_field(obj: dict, key: str, where: str, path) -> list:
    """A list member of `obj`, [] when absent; DecodeError naming the field when it is something else."""
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise DecodeError(f"IKET JSON: {where}.{key} is not a list (got {type(value).__name__})", source=str(path))
    return value


def _dimension(launch: dict, key: str, where: str, path) -> int:
    value = launch.get(key)
    if not (is_json_int(value) and 1 <= value <= MAX_BLOCKS):
        raise DecodeError(f"IKET JSON: {where} has no valid {key!r} (an integer from 1 to {MAX_BLOCKS}, "
                          f"got {value!r:.40})", source=str(path))
    return value


def read_iket_json(path: str | Path) -> list[Trace]:
    doc = _load_json(path)
    strings = doc.get("stringTable", [])
    locations = doc.get("locationTable", [])
    if not isinstance(strings, list) or not isinstance(locations, list):
        raise DecodeError("IKET JSON: stringTable / locationTable must be lists", source=str(path))
    launches = [(f"launches[{i}]", launch) for i, launch in enumerate(doc["launches"])]
    graph = doc.get("graphLaunches") or {}
    if not isinstance(graph, (dict, list)):
        raise DecodeError(f"IKET JSON: graphLaunches is not an object (got {type(graph).__name__})",
                          source=str(path))
    for key, item in graph.items() if isinstance(graph, dict) else enumerate(graph):
        for launch in item if isinstance(item, list) else [item]:
            if isinstance(launch, dict) and "ranges" in launch:
                launches.append((f"graphLaunches[{key!r}]", launch))
    if not launches:
        raise DecodeError("IKET JSON holds no launch", source=str(path))
    for where, launch in launches:
        if not isinstance(launch, dict):
            raise DecodeError(f"IKET JSON: {where} is not an object (got {type(launch).__name__})", source=str(path))
    return [_launch_trace(launch, i, where, strings, locations, path) for i, (where, launch) in enumerate(launches)]


def _launch_trace(launch: dict, index: int, where: str, strings: list, locations: list, path) -> Trace:
    gx, gy, gz = (_dimension(launch, f"gridDim{a}", where, path) for a in "XYZ")
    threads = 1
    for a in "XYZ":
        threads *= _dimension(launch, f"blockDim{a}", where, path)
    num_groups = -(-threads // 32)
    num_blocks = gx * gy * gz
    if num_blocks > MAX_BLOCKS or num_groups > MAX_GROUPS:
        raise DecodeError(f"IKET JSON: {where} has a grid of {num_blocks} blocks of {threads} threads; ikp reads "
                          f"at most {MAX_BLOCKS} blocks of {MAX_GROUPS} warps", source=str(path))
    malformed: dict[str, int] = {}

    loc_block = np.full(len(locations), -1, np.int64)
    loc_warp = np.full(len(locations), -1, np.int64)
    loc_sm = np.full(len(locations), -1, np.int64)
    for i, loc in enumerate(locations):
        if not isinstance(loc, dict):
            continue  # no warp: events naming this location are counted as on an unknown one
        cta, warp = loc.get("ctaId"), loc.get("warpId")
        if isinstance(cta, list) and len(cta) == 3 and all(is_json_int(c) for c in cta) and is_json_int(warp):
            x, y, z = cta
            if 0 <= x < gx and 0 <= y < gy and 0 <= z < gz and 0 <= warp < num_groups:
                sm = loc.get("smId")  # absent or null: not recorded
                if sm is not None and not (is_json_int(sm) and 0 <= sm < MAX_BLOCKS):
                    raise DecodeError(f"IKET JSON: locationTable[{i}] has no valid 'smId' (got {sm!r:.40})",
                                      source=str(path))
                loc_block[i], loc_warp[i] = x + y * gx + z * gx * gy, warp
                loc_sm[i] = -1 if sm is None else sm

    def lane_of(loc_idx) -> tuple[int, int]:
        if is_json_int(loc_idx) and 0 <= loc_idx < len(locations) and loc_block[loc_idx] >= 0:
            return int(loc_block[loc_idx]), int(loc_warp[loc_idx])
        return -1, -1

    def named(idx) -> bool:
        return is_json_int(idx) and 0 <= idx < len(strings)

    cols: dict[str, list[int]] = {k: [] for k in ("sb", "sg", "se", "ss", "sn", "so", "ib", "ig", "ie", "it")}
    event_names: dict[int, str] = {}
    payloads: list[dict] = []
    cross_warp = 0
    unreadable_payloads = 0  # ranges kept whose internalEvents are not a list of objects
    for order, r in enumerate(_list_field(launch, "ranges", where, path)):
        if not isinstance(r, dict):
            count(malformed, "range that is not an object", 2)
            continue
        locs = r.get("warpLocIdxs")
        locs = locs if isinstance(locs, list) and locs else [None]
        block, warp = lane_of(locs[0])
        start, end, name = r.get("startTs"), r.get("endTs"), r.get("rangeNameIdx")
        if block < 0:
            count(malformed, "range on an unknown warp location", 2)
            continue
        if not (usable_time(start) and usable_time(end) and named(name)):
            count(malformed, "range without times or name", 2)
            continue
        if end < start:
            count(malformed, "range ends before it starts", 2)
            continue
        if len(locs) > 1 and locs[1] != locs[0]:
            cross_warp += 1  # range_start on one warp, range_end on another: kept on the starting warp
        event_names[name] = str(strings[name])
        for k, v in zip(("sb", "sg", "se", "ss", "sn", "so"), (block, warp, name, start, end, order)):
            cols[k].append(v)
        internal = r.get("internalEvents", [])
        if not (isinstance(internal, list) and all(isinstance(e, dict) for e in internal)):
            unreadable_payloads += 1
        elif any("payloadVal" in e for e in internal):
            payloads.append({"block": block, "warp": warp, "event": name, "start_ns": start,
                             "payloads": [e.get("payloadVal") for e in internal]})
    for m in _list_field(launch, "markers", where, path):
        if not isinstance(m, dict):
            count(malformed, "marker that is not an object")
            continue
        block, warp = lane_of(m.get("locIdx"))
        ts, name = m.get("timestamp"), m.get("markerNameIdx")
        if block < 0:
            count(malformed, "marker on an unknown warp location")
            continue
        if not (usable_time(ts) and named(name)):
            count(malformed, "marker without time or name")
            continue
        event_names[name] = str(strings[name])
        for k, v in zip(("ib", "ig", "ie", "it"), (block, warp, name, ts)):
            cols[k].append(v)
        if "payloadVal" in m:
            payloads.append({"block": block, "warp": warp, "event": name, "ts_ns": ts, "payload": m["payloadVal"]})

    lane_window: dict[int, tuple[int, int]] = {}
    lane_sm: dict[int, int] = {}
    for life in _list_field(launch, "warpLifetimes", where, path):  # a lifetime is a begin and an end record
        block, warp = lane_of(life.get("locIdx")) if isinstance(life, dict) else (-1, -1)
        if block < 0:
            count(malformed, "warp lifetime on an unknown warp location", 2)
        elif not (usable_time(life.get("startTs")) and usable_time(life.get("endTs"))):
            count(malformed, "warp lifetime without times", 2)
        elif life["endTs"] < life["startTs"]:
            count(malformed, "warp lifetime ends before it starts", 2)
        else:
            lane_window[block * num_groups + warp] = (life["startTs"], life["endTs"])
    for i in range(len(locations)):
        if loc_block[i] >= 0:
            lane_sm[int(loc_block[i] * num_groups + loc_warp[i])] = int(loc_sm[i])

    arr = {k: np.asarray(v, np.int64) for k, v in cols.items()}
    tables = ForeignTables(
        num_blocks=num_blocks,
        num_groups=num_groups,
        span_block=arr["sb"], span_group=arr["sg"], span_event=arr["se"],
        span_start=arr["ss"], span_end=arr["sn"], span_order=arr["so"],
        instant_block=arr["ib"], instant_group=arr["ig"], instant_event=arr["ie"], instant_ts=arr["it"],
        lane_sm=lane_sm, lane_window=lane_window, malformed=malformed,
    )
    meta = {
        "kernel": launch.get("kernelName"),
        "launch_index": index,
        "grid": [gx, gy, gz],
        "source": {
            "format": "iket-json",
            "file": str(path),
            "cannot_tell": CANNOT_TELL,
            "cross_warp_ranges": cross_warp,
            "ranges_with_unreadable_payloads": unreadable_payloads,
            "lanes": "(block, warp): every warp is a lane",
        },
        "payloads": payloads[:10000],
    }
    return build_trace(tables, Names(events=event_names, groups=warp_names(num_groups)), absolute=True, meta=meta)


# IKET decorates slice names in its .pftrace: payloads "math(start_payload=0, end_payload=0)",
# "tile_done(payload=3)", zero-length ranges "load [duration=0]"; one "Warp Life Time" slice per warp.
DECORATION = re.compile(r"^(?P<name>.*?)(?:\((?:start_)?payload=[^()]*\))?(?: \[duration=\d+\])?$")
WARP_LIFETIME = "Warp Life Time"
OUTSIDE_WARPS = "event on a track that is no warp's (not a kernel slice)"
OUT_OF_RANGE = f"event on a warp track whose CTA, warp or SM index is past ikp's limits ({MAX_BLOCKS}, {MAX_GROUPS})"


def read_iket_pftrace(path: str | Path) -> list[Trace]:
    """IKET's Perfetto output -> one Trace per grid track. Needs the `perfetto` package (its protos)."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError:
        raise DecodeError("reading an IKET .pftrace needs the 'perfetto' package (pip install perfetto); "
                          "IKET's --postprocess json output reads with numpy alone", source=str(path)) from None
    from google.protobuf.message import DecodeError as ProtoError

    from host_decode.interop.sniff import head

    trace = pb.Trace()
    try:
        trace.ParseFromString(head(path, size=None))
    except ProtoError as e:
        raise DecodeError(f"IKET .pftrace does not parse: {e}", source=str(path)) from None
    return iket_pftrace_traces(trace, path)


def iket_pftrace_traces(trace, path) -> list[Trace]:
    tracks = {}
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            tracks[td.uuid] = (td.parent_uuid, td.name)

    def ancestry(uuid: int) -> list[str]:
        out = []
        while uuid in tracks:
            parent, name = tracks[uuid]
            out.append(name)
            uuid = parent
        return out

    lane_of: dict[int, tuple[str, tuple[int, int, int], int, int]] = {}
    out_of_range: set[int] = set()  # warp tracks whose CTA or warp index is past ikp's limits
    for uuid in tracks:
        chain = ancestry(uuid)
        warp = cta = sm = grid = None
        for name in chain:
            if warp is None and (m := re.fullmatch(r"Warp(\d+)", name)):
                warp = int(m.group(1))
            elif cta is None and (m := re.fullmatch(r"CTA\((\d+), (\d+), (\d+)\)", name)):
                cta = tuple(int(v) for v in m.groups())
            elif sm is None and (m := re.search(r"VSM(\d+)", name)):
                sm = int(m.group(1))
            elif grid is None and re.fullmatch(r"Grid\d+", name):
                grid = name
        if warp is not None and cta is not None and grid is not None:
            if warp >= MAX_GROUPS or max(cta) >= MAX_BLOCKS or (sm or 0) >= MAX_BLOCKS:
                out_of_range.add(uuid)
            else:
                lane_of[uuid] = (grid, cta, warp, -1 if sm is None else sm)
    open_slices: dict[int, list] = {}
    kernels: dict[str, str] = {}
    per_grid: dict[str, dict] = {}
    # events with no lane to put them on (reason -> records), other than each grid's kernel slice: counted
    unplaced: dict[str, int] = {}
    order = 0
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        where = lane_of.get(ev.track_uuid)
        if where is None:
            name = tracks.get(ev.track_uuid, (0, ""))[1]
            on_grid = re.fullmatch(r"Grid\d+", name) is not None
            if ev.track_uuid in out_of_range:
                count(unplaced, OUT_OF_RANGE)
            elif ev.type == ev.TYPE_SLICE_BEGIN and ev.name.startswith("kernel:") and on_grid:
                kernels[name] = ev.name[len("kernel:"):].split(", gridId:")[0]
            elif not (ev.type == ev.TYPE_SLICE_END and on_grid):
                count(unplaced, OUTSIDE_WARPS)
            continue
        grid, cta, warp, sm = where
        g = per_grid.setdefault(grid, {"spans": [], "instants": [], "malformed": {}, "sm": {}, "windows": {}})
        g["sm"][(cta, warp)] = sm
        if ev.type == ev.TYPE_SLICE_BEGIN:
            open_slices.setdefault(ev.track_uuid, []).append((ev.name, p.timestamp, order))
            order += 1
        elif ev.type == ev.TYPE_SLICE_END:
            stack = open_slices.get(ev.track_uuid)
            if not stack:
                count(g["malformed"], "slice end without begin")
                continue
            name, start, o = stack.pop()
            if not (usable_time(start) and usable_time(p.timestamp)):
                count(g["malformed"], "slice with a time out of range", 2)
                continue
            if p.timestamp < start:
                count(g["malformed"], "slice ends before it begins", 2)
                continue
            name = DECORATION.match(name or ev.name).group("name")
            if name == WARP_LIFETIME:
                g["windows"][(cta, warp)] = (start, p.timestamp)
            else:
                g["spans"].append((cta, warp, name, start, p.timestamp, o))
        elif ev.type == ev.TYPE_INSTANT:
            if not usable_time(p.timestamp):
                count(g["malformed"], "instant with a time out of range")
                continue
            g["instants"].append((cta, warp, DECORATION.match(ev.name).group("name"), p.timestamp))
        else:  # a counter sample or an event of no type: nothing of ikp's model holds it
            count(g["malformed"], "event neither slice nor instant on a warp track")
    for uuid, stack in open_slices.items():
        if stack and uuid in lane_of:
            count(per_grid[lane_of[uuid][0]]["malformed"], "slice begin without end", len(stack))
    if not per_grid:
        past = unplaced.get(OUT_OF_RANGE)
        detail = f" ({past} events on warp tracks past ikp's limits)" if past else ""
        raise DecodeError(f"no IKET warp tracks (Grid > ... > CTA(x, y, z) > WarpNN) in this .pftrace{detail}",
                          source=str(path))
    first = per_grid[min(per_grid)]["malformed"]  # no lane to put them on: the first grid's loss report has them
    for reason, records in unplaced.items():
        count(first, reason, records)
    return [_pftrace_grid(name, kernels.get(name, name), g, path) for name, g in sorted(per_grid.items())]


def _pftrace_grid(grid: str, kernel: str, g: dict, path) -> Trace:
    ctas = {c for c, _ in g["sm"]}
    gx, gy, gz = (max(c[i] for c in ctas) + 1 for i in range(3))
    num_groups = max(w for _, w in g["sm"]) + 1
    if gx * gy * gz > MAX_BLOCKS:
        raise DecodeError(f"{grid}: CTA indices up to ({gx - 1}, {gy - 1}, {gz - 1}) make a grid of {gx * gy * gz} "
                          f"blocks; ikp reads at most {MAX_BLOCKS}", source=str(path))
    names: dict[str, int] = {}

    def eid(name: str) -> int:
        return names.setdefault(name, len(names))

    def block(c) -> int:
        return c[0] + c[1] * gx + c[2] * gx * gy

    spans, inst = g["spans"], g["instants"]
    tables = ForeignTables(
        num_blocks=gx * gy * gz,
        num_groups=num_groups,
        span_block=np.asarray([block(s[0]) for s in spans], np.int64),
        span_group=np.asarray([s[1] for s in spans], np.int64),
        span_event=np.asarray([eid(s[2]) for s in spans], np.int64),
        span_start=np.asarray([s[3] for s in spans], np.int64),
        span_end=np.asarray([s[4] for s in spans], np.int64),
        span_order=np.asarray([s[5] for s in spans], np.int64),
        instant_block=np.asarray([block(s[0]) for s in inst], np.int64),
        instant_group=np.asarray([s[1] for s in inst], np.int64),
        instant_event=np.asarray([eid(s[2]) for s in inst], np.int64),
        instant_ts=np.asarray([s[3] for s in inst], np.int64),
        lane_sm={block(c) * num_groups + w: sm for (c, w), sm in g["sm"].items()},
        lane_window={block(c) * num_groups + w: win for (c, w), win in g["windows"].items()},
        malformed=g["malformed"],
    )
    meta = {
        "kernel": kernel,
        "grid": [gx, gy, gz],
        "source": {
            "format": "iket-pftrace",
            "file": str(path),
            "cannot_tell": CANNOT_TELL[:1] + [
                "the grid size: taken as the largest CTA index seen + 1 (the .pftrace names only CTAs that ran)",
                "payload values as data (the .pftrace has them only inside slice names; IKET's JSON has them)",
            ],
            "lanes": "(block, warp): every warp is a lane",
        },
    }
    return build_trace(tables, Names(events={v: k for k, v in names.items()}, groups=warp_names(num_groups)),
                       absolute=True, meta=meta)
