"""Whether a trace's metadata describes pipelines or barriers (sidecar keys ``pipelines`` / ``barriers``,
read by host_decode.analysis.pipelines). A module of its own so that `ikp decode` can ask before it
imports the analysis (about 6 ms at every start)."""

from __future__ import annotations

from host_decode.core.model import Trace


def has_pipelines(trace: Trace) -> bool:
    meta = trace.meta or {}
    return bool(meta.get("pipelines") or meta.get("barriers"))
