"""Host side of ikp_cute: decode v1 buffers into a trace model, write Perfetto / Chrome JSON traces,
analyse, compare, join per-PC hardware data and report (numpy is the only requirement).

The public API (what the README uses; everything loads on first use, so ``import host_decode`` is
cheap and imports no numpy)::

    import host_decode as hd

    trace = hd.load_capture("capture.npy")        # BUFFER.npy + BUFFER.json sidecar -> Trace
    trace = hd.decode(buffer, names={...})        # a raw buffer (numpy / torch.cpu().numpy())
    hd.save_capture("capture.npy", buffer, names={...}, write_stride=...)
    hd.write_trace(trace, "trace.pftrace")        # or .json, optionally .gz
    hd.write_trace(trace, "t.pftrace", hd.TraceOptions(slice_args=True, lane_counters="on"))
    hd.region_summary(trace)                      # per (group, region) statistics
    trace.loss                                    # LossReport: every record decoded or counted

Unusable input raises ``hd.DecodeError`` naming the file, the slot and the reason. Everything else
lives in the subpackages, by stage of the data flow (docs/layout.md): core, interop, writers,
torch_traces, load, analysis, hardware, reports, cli. tests/unit/host_decode/test_public_api.py imports every name of
``__all__``.
"""

from host_decode.core.lazy import lazy_exports

_PUBLIC = {
    "DecodeError": "host_decode.core.errors:DecodeError",
    "LossReport": "host_decode.core.model:LossReport",
    "Names": "host_decode.core.model:Names",
    "Trace": "host_decode.core.model:Trace",
    "decode": "host_decode.core.decoder:decode",
    "load_capture": "host_decode.load.capture:load_capture",
    "save_capture": "host_decode.load.capture:save_capture",
    "write_trace": "host_decode.writers:write_trace",
    "TraceOptions": "host_decode.writers.options:TraceOptions",
    "region_summary": "host_decode.analysis.stats:region_summary",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
