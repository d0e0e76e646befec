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

import json
import math
import re
from pathlib import Path

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.core.model import Names, Trace
from host_decode.interop.tables import ForeignTables, build_trace

PID = re.compile(r"^(?P<kernel>.*) Core(?P<sm>\d+) CTA(?P<cta>\d+)$")
TID = re.compile(r"^warp (?P<warp>\d+) \(line (?P<line>\d+)\)$")
CANNOT_TELL = [
    "records Proton overwrote: its circular buffer drops the oldest silently when full",
    "absolute time and nanoseconds: Proton records SM cycles (shown as ns at an assumed 1 GHz); "
    "ikp keeps cycles, and each CTA's times are relative to that CTA",
]


def read_proton_chrome(path: str | Path) -> list[Trace]:
    from host_decode.interop.sniff import head

    try:
        doc = json.loads(head(path, size=None))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DecodeError(f"Proton Chrome trace does not parse: {e}", source=str(path)) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise DecodeError("not a Chrome trace: no 'traceEvents' list", source=str(path))
    per_kernel: dict[str, dict] = {}
    skipped = 0
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            skipped += 1
            continue
        pid, tid = PID.match(str(ev.get("pid", ""))), TID.match(str(ev.get("tid", "")))
        k = per_kernel.setdefault(
            pid.group("kernel") if pid else str(ev.get("cat", "?")), {"rows": [], "malformed": {}}
        )
        ts, dur = ev.get("ts"), ev.get("dur")
        if not (pid and tid) or not (_finite(ts) and _finite(dur)) or dur < 0:
            reason = "event without Proton's CTA/warp naming" if not (pid and tid) else "event without valid ts/dur"
            k["malformed"][reason] = k["malformed"].get(reason, 0) + 2
            continue
        # integer cycles: Proton prints ts/dur with 3 decimals of a microsecond at 1 GHz
        start = int(round(float(ts) * 1000.0))
        k["rows"].append((int(pid.group("cta")), int(tid.group("warp")), str(ev.get("name", "")), start,
                          start + int(round(float(dur) * 1000.0)), i, int(pid.group("sm"))))
    if not per_kernel:
        raise DecodeError("no Proton intra-kernel events (pid '<kernel> Core<sm> CTA<n>', tid 'warp <w> (line <l>)')",
                          source=str(path))
    return [_kernel_trace(kernel, k, path, skipped) for kernel, k in sorted(per_kernel.items())]


def _kernel_trace(kernel: str, k: dict, path, skipped: int) -> Trace:
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
            "non_slice_events_ignored": skipped,
            "lanes": "(block, warp): every warp is a lane; block = Proton's CTA index",
        },
    }
    return build_trace(tables, Names(events={v: n for n, v in names.items()},
                                     groups={w: f"warp {w}" for w in range(num_groups)}), absolute=False, meta=meta)


def _finite(value) -> bool:
    """A number a time can be made of: int or float, not bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

