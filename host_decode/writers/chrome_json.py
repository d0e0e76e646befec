"""Chrome JSON trace ("traceEvents") for tools that read only JSON; Perfetto opens it too.

Layout: pid = block (process "block 37 (SM 12)", sorted by block), tid = warp group (thread named after
the group, sorted by group). JSON has only these two levels, so there is no SM or launch level; regions
of different ids that overlap without nesting get their own thread right after the group's
("consumer (overlap 1)"), chosen exactly like the Perfetto writer's sibling tracks.

Regions are ``X`` events, instants ``i`` events (thread scope), the lanes-inside-region counters ``C``
events on one extra process. ts/dur are microseconds rebased to the launch origin, written from integer
ns as ``<us>.<3 digits>`` so no nanosecond is lost to float rounding. No ``displayTimeUnit``: older
importers read it as the unit of the input. tests/test_chrome_json.py parses the output back.
"""

from __future__ import annotations

import gzip as gzip_module
import json
import time
from pathlib import Path

import numpy as np

from host_decode.writers import perfetto as pf
from host_decode.core.model import Trace

CHUNK = 200_000  # events formatted per write


def _us(ns: list[int]) -> list[str]:
    return [f"{v // 1000}.{v % 1000:03d}" for v in ns]


def _names(table: dict, ids: np.ndarray) -> list[str]:
    """JSON-quoted name per id, through an object array (one gather instead of a dict lookup each)."""
    keys = np.array(sorted(table), np.int64)
    values = np.array([table[k] for k in keys.tolist()], dtype=object)
    return values[np.searchsorted(keys, ids)].tolist()


def chrome_events(trace: Trace, *, args: bool = True, counters: bool = True):
    """Yield the JSON text of each event (metadata first), in chunks of strings."""
    spans, instants = trace.spans, trace.instants
    pf._check_input(spans, instants)
    origin = pf.trace_origin(trace)
    stream = pf.merged_stream(spans, instants, origin)
    sub = pf.assign_subtracks(spans, stream)
    nsub = int(sub.max()) + 1 if sub.size else 1
    ename = {e: json.dumps(trace.names.event(e)) for e in
             np.unique(np.concatenate([spans["event"], instants["event"]]).astype(np.int64)).tolist()}

    # metadata: one process per block, one thread per (group, overlap row)
    lanes_all = np.concatenate([spans["lane"], instants["lane"]]).astype(np.int64)
    blocks_all = np.concatenate([spans["block"], instants["block"]]).astype(np.int64)
    groups_all = np.concatenate([spans["group"], instants["group"]]).astype(np.int64)
    tid_all = groups_all * nsub + np.concatenate([sub, np.zeros(instants.size, np.int64)])
    lanes, first = np.unique(lanes_all, return_index=True)
    sm = pf._lane_sm(trace, lanes)
    meta = []
    blocks_seen: dict[int, int] = {}
    for b, s in zip(blocks_all[first].tolist(), sm.tolist()):
        blocks_seen[b] = max(blocks_seen.get(b, -1), s)
    for b, s in sorted(blocks_seen.items()):
        label = json.dumps(f"block {b}" + (f" (SM {s})" if s >= 0 else ""))
        meta.append(f'{{"ph":"M","name":"process_name","pid":{b},"tid":0,"args":{{"name":{label}}}}}')
        meta.append(f'{{"ph":"M","name":"process_sort_index","pid":{b},"tid":0,"args":{{"sort_index":{b}}}}}')
    pairs = np.unique(np.stack([blocks_all, tid_all], 1), axis=0) if tid_all.size else np.zeros((0, 2), np.int64)
    for b, tid in pairs.tolist():
        g, k = divmod(tid, nsub)
        label = json.dumps(trace.names.group(g) + (f" (overlap {k})" if k else ""))
        meta.append(f'{{"ph":"M","name":"thread_name","pid":{b},"tid":{tid},"args":{{"name":{label}}}}}')
        meta.append(f'{{"ph":"M","name":"thread_sort_index","pid":{b},"tid":{tid},"args":{{"sort_index":{tid}}}}}')
    yield meta

    # X events in the writer's file order (parents before children at equal start)
    is_b = stream.kind == pf.KIND_BEGIN
    order = stream.index[is_b]
    sm_span = pf._lane_sm(trace, lanes)[np.searchsorted(lanes, spans["lane"].astype(np.int64))] if spans.size else np.zeros(0, np.int64)
    x_fmt = '{"name":%s,"ph":"X","ts":%d.%03d,"dur":%d.%03d,"pid":%d,"tid":%d'
    x_fmt += ',"args":{"lane":%d,"event":%d,"sm":%d}}' if args else "}"
    for lo in range(0, order.size, CHUNK):
        rows = order[lo : lo + CHUNK]
        s = spans[rows]
        ts_q, ts_r = np.divmod(s["start_ns"] - origin, 1000)
        dur_q, dur_r = np.divmod(s["end_ns"] - s["start_ns"], 1000)
        event = s["event"].astype(np.int64)
        cols = [_names(ename, event), ts_q.tolist(), ts_r.tolist(), dur_q.tolist(), dur_r.tolist(),
                s["block"].tolist(), (s["group"].astype(np.int64) * nsub + sub[rows]).tolist()]
        if args:
            cols += [s["lane"].tolist(), event.tolist(), sm_span[rows].tolist()]
        yield list(map(x_fmt.__mod__, zip(*cols)))

    if instants.size:
        i = instants
        ts = _us((i["ts_ns"] - origin).tolist())
        yield [f'{{"name":{ename[e]},"ph":"i","s":"t","ts":{t},"pid":{p},"tid":{g * nsub}}}'
               for e, t, p, g in zip(i["event"].tolist(), ts, i["block"].tolist(), i["group"].tolist())]

    if counters and spans.size:
        cpid = int(blocks_all.max()) + 1
        yield [f'{{"ph":"M","name":"process_name","pid":{cpid},"tid":0,"args":{{"name":"lanes inside regions"}}}}',
               f'{{"ph":"M","name":"process_sort_index","pid":{cpid},"tid":0,"args":{{"sort_index":-1}}}}']
        ev, t, value = pf.lanes_inside(spans)
        cname = {e: json.dumps(f"lanes in {trace.names.event(e)}") for e in np.unique(ev).tolist()}
        yield [f'{{"name":{cname[e]},"ph":"C","ts":{ts},"pid":{cpid},"tid":0,"args":{{"lanes":{v}}}}}'
               for e, ts, v in zip(ev.tolist(), _us((t - origin).tolist()), value.tolist())]


def write_chrome_json(
    trace: Trace, path: str | Path, *, gzip: bool | None = None, args: bool = True, counters: bool = True,
    progress: bool = False,
) -> dict:
    """Write `trace` as Chrome JSON. gzip=None: gzip iff the path ends in .gz. Returns counts."""
    t0 = time.perf_counter()
    path = Path(path)
    use_gzip = path.suffix == ".gz" if gzip is None else bool(gzip)
    opener = (lambda p: gzip_module.open(p, "wt", compresslevel=6, encoding="utf-8")) if use_gzip else (
        lambda p: open(p, "w", encoding="utf-8"))
    events = 0
    with opener(path) as f:
        f.write('{"traceEvents":[\n')
        sep = ""
        for chunk in chrome_events(trace, args=args, counters=counters):
            if chunk:
                f.write(sep + ",\n".join(chunk))
                sep = ",\n"
                events += len(chunk)
        f.write("\n]}\n")
    secs = time.perf_counter() - t0
    if progress:
        import sys

        print(f"chrome json: {events:,} events in {secs * 1e3:.0f} ms -> {path}", file=sys.stderr)
    return {"path": str(path), "events": events, "bytes": path.stat().st_size, "seconds": secs}
