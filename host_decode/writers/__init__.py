"""One entry point for trace files: the format follows the file name.

    .pftrace / .perfetto-trace / .pb  (optionally + .gz)  -> Perfetto protobuf (host_decode.writers.perfetto)
    .json                             (optionally + .gz)  -> Chrome JSON (host_decode.writers.chrome_json)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from host_decode.core.model import CounterSeries, Trace

PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")
JSON_SUFFIXES = (".json",)


def trace_format(path: str | Path) -> tuple[str, bool]:
    """-> ("perfetto" | "json", gzipped) from the file name; ValueError naming the path otherwise."""
    name = Path(path).name.lower()
    gz = name.endswith(".gz")
    stem = name[:-3] if gz else name
    if stem.endswith(PERFETTO_SUFFIXES):
        return "perfetto", gz
    if stem.endswith(JSON_SUFFIXES):
        return "json", gz
    known = ", ".join(PERFETTO_SUFFIXES + JSON_SUFFIXES)
    raise ValueError(f"{path}: unknown trace file extension (use one of {known}, optionally followed by .gz)")


def write_trace(
    trace: Trace,
    path: str | Path,
    *,
    gzip: bool | None = None,
    args: bool = False,
    counters: bool | Sequence[CounterSeries] | None = (),
    flows: np.ndarray | None = None,
    flow_kinds: Sequence[str] = (),
    lane_counters: bool | None = None,
    progress: bool = False,
):
    """Write `trace` to `path` in the format its extension names. gzip=None: gzip iff the name ends in
    .gz. args: per-slice args (block, group, SM, lane, event; off by default: they are on the tracks).
    counters: CounterSeries for counter tracks (a bool is the older spelling of lane_counters); flows:
    FLOW_DTYPE dependency arrows named by flow_kinds (both Perfetto only: Chrome JSON ignores them).
    lane_counters: the lanes-inside-region counters (None: only for traces of at most
    order.LANE_COUNTERS_AUTO regions: they add about two samples per region).
    Returns the writer's statistics (perfetto.WriteStats or a dict for JSON)."""
    fmt, gz = trace_format(path)
    use_gzip = gz if gzip is None else bool(gzip)
    if fmt == "perfetto":
        from host_decode.writers.perfetto import write_perfetto

        return write_perfetto(trace, path, gzip=use_gzip, args=args, counters=counters, flows=flows,
                              flow_kinds=flow_kinds, lane_counters=lane_counters, progress=progress)
    from host_decode.writers.chrome_json import write_chrome_json

    if isinstance(counters, (bool, np.bool_)):
        lane_counters = bool(counters) if lane_counters is None else lane_counters
    return write_chrome_json(trace, path, gzip=use_gzip, args=args, counters=lane_counters, progress=progress)
