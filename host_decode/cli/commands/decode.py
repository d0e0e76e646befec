"""ikp decode BUFFER.npy: loss report + region summary; optional trace, CSV and JSON outputs."""

NAME = "decode"
HELP = "decode a raw v1 buffer (.npy): loss report, region summary, optional Perfetto/JSON trace and CSV"


def add_arguments(p) -> None:
    p.add_argument("buffer", help="raw v1 buffer saved with numpy (uint64 or int64 .npy); BUFFER.json sidecar is read if present")
    p.add_argument("-o", "--output", help="trace file: .pftrace (Perfetto protobuf) or .json (Chrome JSON), optionally .gz")
    p.add_argument("--csv", help="write one row per span: block,group,event,start_ns,end_ns,duration_ns (ids)")
    p.add_argument("--names", help="JSON names sidecar {'events': {...}, 'groups': {...}} (overrides BUFFER.json's)")
    p.add_argument("--report-json", help="write the loss report as JSON")
    p.add_argument("--write-stride", type=int, help="lane layout stride (default: sidecar, else inferred)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


def run(args) -> int:
    from pathlib import Path

    from host_decode.core.decoder import load_capture
    from host_decode.core.model import Names

    names = Names.read(args.names) if args.names else None
    trace = load_capture(args.buffer, names=names, write_stride=args.write_stride)
    if not args.quiet:
        from host_decode.reports.text import print_loss, print_summary

        print_loss(trace)
        print_summary(trace)
    if args.report_json:
        Path(args.report_json).write_text(trace.loss.dumps())
    if args.csv:
        write_spans_csv(trace, args.csv)
    if args.output:
        from host_decode.writers import write_trace

        extras, note = pipeline_extras(trace, write_trace)
        write_trace(trace, args.output, **extras)
        if not args.quiet:
            print(f"wrote {args.output}" + (f" ({note})" if note else ""))
    return 0


def pipeline_extras(trace, writer) -> tuple[dict, str]:
    """Keyword arguments that put the pipelines' flow arrows and stages-full counters into the trace
    (analysis/pipelines.py; docs/pipeline_waits.md), limited to what `writer` accepts, and a
    note of what was written or left out. ({}, "") when the capture has no pipeline metadata."""
    import inspect

    from host_decode.analysis.pipelines import analyze_pipelines, has_pipelines

    if not has_pipelines(trace):
        return {}, ""
    pa = analyze_pipelines(trace)
    params = inspect.signature(writer).parameters
    extras, said = {}, []
    if "flows" in params:
        extras.update(flows=pa.flows(), flow_kinds=pa.flow_kinds)
        said.append(f"{extras['flows'].size} pipeline flows")
    counters = params.get("counters")
    if counters is not None and not isinstance(counters.default, bool):  # the contract's sequence of CounterSeries
        extras["counters"] = pa.counters
        said.append(f"{len(pa.counters)} stages-full counters")
    if not extras:
        return {}, "pipeline flows and counters left out: this writer does not take them yet"
    return extras, ", ".join(said)


def write_spans_csv(trace, path) -> None:
    import numpy as np

    s = trace.spans
    cols = np.column_stack([s["block"], s["group"], s["event"], s["start_ns"], s["end_ns"], s["end_ns"] - s["start_ns"]])
    np.savetxt(path, cols, fmt="%d", delimiter=",", header="block,group,event,start_ns,end_ns,duration_ns", comments="")
