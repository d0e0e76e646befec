"""What the GPU tests of trace_pipelines share: the launch shape and the matched ops grouped by pipeline."""

from __future__ import annotations

BLOCKS, ITERS = 4, 6


def ops_by_pipeline(analysis) -> dict:
    """{(pipeline name, op): {status: count}} of the matched waits of the pipelines (not barriers)."""
    from host_decode.analysis.pipeline_match import STATUSES, WAIT_OPS

    out: dict = {}
    for row in analysis.waits:
        channel = analysis.channels[row["channel"]]
        if channel.kind != "pipeline":
            continue
        counts = out.setdefault((channel.name, WAIT_OPS[row["op"]]), {})
        status = STATUSES[row["status"]]
        counts[status] = counts.get(status, 0) + 1
    return out
