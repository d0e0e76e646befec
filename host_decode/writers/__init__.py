"""One entry point for trace files: the format follows the file name.

    .pftrace / .perfetto-trace / .pb  (optionally + .gz)  -> Perfetto protobuf (host_decode.writers.perfetto)
    .json                             (optionally + .gz)  -> Chrome JSON (host_decode.writers.chrome_json)
"""

from __future__ import annotations

from pathlib import Path

from host_decode.core.model import Trace

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


def write_trace(trace: Trace, path: str | Path, *, gzip: bool | None = None, counters: bool = True, progress: bool = False):
    """Write `trace` to `path` in the format its extension names. gzip=None: gzip iff the name ends in
    .gz. Returns the writer's statistics (perfetto.WriteStats or a dict for JSON)."""
    fmt, gz = trace_format(path)
    use_gzip = gz if gzip is None else bool(gzip)
    if fmt == "perfetto":
        from host_decode.writers.perfetto import write_perfetto

        return write_perfetto(trace, path, gzip=use_gzip, counters=counters, progress=progress)
    from host_decode.writers.chrome_json import write_chrome_json

    return write_chrome_json(trace, path, gzip=use_gzip, counters=counters, progress=progress)
