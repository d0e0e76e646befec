"""One entry point for trace files: the format follows the file name.

    .pftrace / .perfetto-trace / .pb  (optionally + .gz)  -> Perfetto protobuf (host_decode.writers.perfetto)
    .json                             (optionally + .gz)  -> Chrome JSON (host_decode.writers.chrome_json)

What is written is chosen by one TraceOptions (host_decode.writers.options); the Perfetto writer draws
the options' overlays (host_decode.writers.overlays) from the trace itself, so `ikp decode -o`, `ikp view`
and ``write_trace(trace, path)`` write the same bytes for the same capture and options
(tests/unit/host_decode/writers/test_flows_counters.py::test_three_paths_same_bytes).
"""

from __future__ import annotations

from pathlib import Path

from host_decode.core.model import Trace
from host_decode.writers.options import DEFAULT_OPTIONS, TraceOptions
from host_decode.writers.overlays import OVERLAYS, Overlay

PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")
JSON_SUFFIXES = (".json",)

__all__ = ["OVERLAYS", "Overlay", "TraceOptions", "trace_format", "write_trace"]


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


def write_trace(trace: Trace, path: str | Path, options: TraceOptions | None = None, spans_seen=None):
    """Write `trace` to `path` in the format its extension names, with `options` (default TraceOptions():
    no slice args, lane counters for small traces, gzip iff the name ends in .gz, every overlay).
    Returns the writer's statistics (perfetto.WriteStats, whose ``notes`` say what each overlay drew, or
    a dict for JSON). spans_seen: given every span once as the file is written (restart(), then
    add(group, event, duration) per run of lanes; e.g. host_decode.analysis.stats.RunSummary)."""
    fmt, _ = trace_format(path)
    options = options or DEFAULT_OPTIONS
    if fmt == "perfetto":
        from host_decode.writers.perfetto import write_perfetto

        return write_perfetto(trace, path, options, spans_seen=spans_seen)
    from host_decode.writers.chrome_json import write_chrome_json

    return write_chrome_json(trace, path, options, spans_seen=spans_seen)
