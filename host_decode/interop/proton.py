"""Triton Proton intra-kernel traces (``proton.start(..., data="trace", backend="instrumentation")``,
written as ``NAME.chrome_trace``) -> ikp Traces.

What Proton writes, read from its real output (examples/interop/proton_add.chrome_trace, Triton 3.6,
docs/interop.md): Chrome JSON ``traceEvents`` of complete events (``"ph": "X"``), ``ts``/``dur`` in
microseconds *derived from SM cycle counts at an assumed 1 GHz* (``args["Frequency (MHz)"]`` = 1000),
``pid`` = ``"<kernel> Core<sm> CTA<n>"``, ``tid`` = ``"warp <w> (line <l>)"`` (line = nesting row),
``name`` = the scope name, ``cat`` = the kernel. Each CTA's times are its own (its SM's clock, rebased
per CTA by Proton), so blocks are not on one shared timeline.

ikp keeps Proton's unit: trace times are cycles (``meta["time_unit"] = "cycles"``), one Trace per kernel.
Proton's default circular buffer overwrites the oldest records when full and counts nothing: said in
``meta["source"]["cannot_tell"]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.model import Names, Trace
from host_decode.interop.tables import (
    MAX_BLOCKS,
    MAX_GROUPS,
    TIME_LIMIT,
    ForeignTables,
    build_trace,
    count,
    usable_time,
    warp_names,
)

PID = re.compile(r"^(?P<kernel>.*) Core(?P<sm>\d+) CTA(?P<cta>\d+)$")
TID = re.compile(r"^warp (?P<warp>\d+) \(line (?P<line>\d+)\)$")
CANNOT_TELL = [
    "records Proton overwrote: its circular buffer drops the oldest silently when full",
    "absolute time and nanoseconds: Proton records SM cycles (shown as ns at an assumed 1 GHz); "
    "ikp keeps cycles, and each CTA's times are relative to that CTA",
]


NOT_COMPLETE = "Proton event that is not a complete ('X') event (B/E pair, instant, counter, ...)"
UNNAMED = "event without Proton's CTA/warp naming"
OUT_OF_RANGE = f"event whose CTA, warp or SM index is past ikp's limits ({MAX_BLOCKS}, {MAX_GROUPS})"


def read_proton_chrome(path: str | Path) -> list[Trace]:
    from host_decode.interop.sniff import read_json

    doc = read_json(path, "Proton Chrome trace")
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc  # Chrome's array form: the events alone
    if not isinstance(events, list):
        raise DecodeError("not a Chrome trace: no 'traceEvents' list", source=str(path))
    per_kernel: dict[str, dict] = {}
    unplaced: dict[str, int] = {}  # records of no kernel (reason -> records): the first kernel's report has them
    metadata = 0
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            count(unplaced, "event that is not an object")
            continue
        if ev.get("ph") == "M":
            metadata += 1  # process / thread names: no record of the kernel
            continue
        records = 2 if ev.get("ph") == "X" else 1  # a complete event is a begin and an end
        pid, tid = PID.match(str(ev.get("pid", ""))), TID.match(str(ev.get("tid", "")))
        if not (pid and tid):
            count(unplaced, UNNAMED, records)
            continue
        kernel = per_kernel.setdefault(pid.group("kernel"), {"rows": [], "malformed": {}})
        if ev.get("ph") != "X":
            count(kernel["malformed"], NOT_COMPLETE, records)
            continue
        start, dur = _cycles(ev.get("ts")), _cycles(ev.get("dur"))
        if start is None or dur is None or dur < 0 or not usable_time(start + dur):
            count(kernel["malformed"], "event without valid ts/dur", records)
            continue
        cta, warp, sm = int(pid.group("cta")), int(tid.group("warp")), int(pid.group("sm"))
        if cta >= MAX_BLOCKS or warp >= MAX_GROUPS or sm >= MAX_BLOCKS:
            count(kernel["malformed"], OUT_OF_RANGE, records)
            continue
        kernel["rows"].append((cta, warp, str(ev.get("name", "")), start, start + dur, i, sm))
    if not per_kernel:
        raise DecodeError("no Proton intra-kernel events (pid '<kernel> Core<sm> CTA<n>', tid 'warp <w> (line <l>)')",
                          source=str(path))
    first = per_kernel[min(per_kernel)]["malformed"]
    for reason, records in unplaced.items():
        count(first, reason, records)
    return [_kernel_trace(kernel, k, path, metadata) for kernel, k in sorted(per_kernel.items())]


def _kernel_trace(kernel: str, k: dict, path, metadata: int) -> Trace:
    rows = k["rows"]
    names: dict[str, int] = {}
    for r in rows:
        names.setdefault(r[2], len(names))
    num_blocks = max((r[0] for r in rows), default=0) + 1
    num_groups = max((r[1] for r in rows), default=0) + 1
    col = lambda j: np.asarray([r[j] for r in rows], np.int64)  # noqa: E731
    empty = np.zeros(0, np.int64)
    tables = ForeignTables(
        num_blocks=num_blocks,
        num_groups=num_groups,
        span_block=col(0), span_group=col(1),
        span_event=np.asarray([names[r[2]] for r in rows], np.int64),
        span_start=col(3), span_end=col(4), span_order=col(5),
        instant_block=empty, instant_group=empty, instant_event=empty, instant_ts=empty,
        lane_sm={r[0] * num_groups + r[1]: r[6] for r in rows},
        lane_window={},
        malformed=k["malformed"],
    )
    meta = {
        "kernel": kernel,
        "time_unit": "cycles",
        "source": {
            "format": "proton-chrome",
            "file": str(path),
            "cannot_tell": CANNOT_TELL,
            "metadata_events_in_file": metadata,
            "lanes": "(block, warp): every warp is a lane; block = Proton's CTA index",
        },
    }
    return build_trace(tables, Names(events={v: n for n, v in names.items()}, groups=warp_names(num_groups)),
                       absolute=False, meta=meta)


def _cycles(value) -> int | None:
    """Proton's microseconds (at its assumed 1 GHz) as integer cycles: Proton prints ts/dur with 3 decimals.
    None for what is no finite number (NaN, inf, a bool, a string) or is past TIME_LIMIT cycles."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if not abs(value) < TIME_LIMIT / 1000:  # also NaN; exact for ints of any size
        return None
    return int(round(float(value) * 1000.0))
