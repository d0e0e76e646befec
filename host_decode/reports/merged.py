"""Merged Chrome JSON traces: a session of launches / ranks, or a capture inside a torch.profiler trace.

Glue between the analyses that place the parts (host_decode.analysis.sessions.shifts,
host_decode.analysis.align.align) and the one Chrome JSON writer (host_decode.writers.chrome_json), which
writes the regions. Guarded by tests/unit/host_decode/analysis/test_multi.py and
tests/unit/host_decode/analysis/test_align.py.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from host_decode.analysis import align as al
from host_decode.analysis import sessions
from host_decode.core.jsonable import dumps
from host_decode.core.model import Trace
from host_decode.torch_traces.loader import read_chrome
from host_decode.writers import chrome_json

TID_BASE = 1_000_000  # tids of region tracks in a profiler trace: far above Kineto's stream ids
MAX_LANES = 4096  # lanes of a capture written into a merged torch trace by default (the rest counted)


def write_session(
    parts: Sequence[sessions.Part],
    out_path: str | os.PathLike,
    mode: str = "timeline",
    clock_offsets_ns: dict | None = None,
    max_lanes_per_part: int | None = None,
    progress: bool | None = None,
) -> dict:
    """One Chrome JSON trace, one process per part (pid = part index, named by its label), on the shared
    timeline or stacked (sessions.shifts). Returns a summary (origin_ns, mode, per part its shift and
    counts of what was written / left out)."""
    if not parts:
        raise ValueError("write_session needs at least one part")
    shift = sessions.shifts(parts, mode, clock_offsets_ns)
    placed = [(p.trace, p.label, int(dt)) for p, dt in zip(parts, shift)]
    summary = chrome_json.write_chrome_parts(placed, out_path, other_data={"mode": mode},
                                             max_lanes_per_part=max_lanes_per_part)
    return {"origin_ns": summary["origin_ns"], "mode": mode, "parts": summary["parts"]}


def merge_with_torch_trace(
    torch_trace_path: str | os.PathLike,
    capture_trace: Trace,
    out_path: str | os.PathLike,
    kernel_name: str | None = None,
    occurrence: int | Sequence[int] | None = None,
    *,
    placement: str = "mid",
    launch_latency_ns: int | None = None,
    max_lanes: int | None = MAX_LANES,
) -> al.Alignment:
    """Write `out_path` (Chrome JSON; .gz compresses): every event of the profiler trace plus the
    capture's regions, one track per (block, group) in the kernel slice's process, shifted by the
    solved offset so they lie inside the slice; a summary slice 'ikp: <kernel>' per launch carries the
    alignment in its args, and the document gets a top-level 'ikp_alignment'. Returns the Alignment."""
    doc = read_chrome(torch_trace_path)
    result, chosen = al.align(capture_trace, doc, kernel_name, occurrence, placement, launch_latency_ns,
                              source=str(torch_trace_path))
    pid = chosen[0].get("pid", 0)
    base = int(doc.get("baseTimeNanoseconds", 0))
    kept, left = chrome_json.keep_lanes(capture_trace, max_lanes)
    regions = chrome_json.chrome_events(kept, process=pid, tid_base=TID_BASE, origin_ns=base - result.offset_ns,
                                        cat="ikp")
    summary_tid = TID_BASE - 1
    info = dumps({k: v for k, v in result.to_json().items() if k not in ("lead_ns", "tail_ns")}, indent=None)
    ours = []
    for (t0, t1), _ in zip(al.launch_extents(capture_trace), chosen):
        ts = (t0 + result.offset_ns - base) / 1000.0
        ours.append(f'{{"ph":"X","pid":{json.dumps(pid)},"tid":{summary_tid},"ts":{ts:.3f},'
                    f'"dur":{(t1 - t0) / 1000.0:.3f},'
                    f'"name":{json.dumps("ikp: " + result.kernel_name[:80])},"cat":"ikp","args":{info}}}')
    ours.append(f'{{"ph":"M","pid":{json.dumps(pid)},"tid":{summary_tid},"name":"thread_name",'
                f'"args":{{"name":"ikp regions"}}}}')

    def events():
        yield from regions
        yield ours

    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    head["ikp_alignment"] = dict(result.to_json(), written=int(kept.spans.size), **left)
    chrome_json.write_document(out_path, events(), head=head, foreign=doc["traceEvents"])
    return result
