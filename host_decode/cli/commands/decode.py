"""ikp decode BUFFER.npy: loss report + region summary; optional trace, spans CSV and loss JSON outputs."""

NAME = "decode"
HELP = "decode a raw v1 buffer (.npy): loss report, region summary, Perfetto/JSON trace, spans CSV"
EXAMPLE = "ikp decode examples/basic/capture.npy -o basic.pftrace     # then: ikp view basic.pftrace"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format, add_names, add_progress, number

    p.add_argument(
        "buffer", help="raw v1 buffer saved with numpy (uint64 or int64 .npy); BUFFER.json sidecar is read if present"
    )
    p.add_argument(
        "-o", "--output", help="trace file: .pftrace (Perfetto protobuf) or .json (Chrome JSON), optionally .gz"
    )
    p.add_argument(
        "--spans-csv",
        metavar="FILE",
        help="also write one row per span: block,group,event,start_ns,end_ns,duration_ns (ids)",
    )
    p.add_argument("--loss-json", metavar="FILE", help="also write the loss report as JSON")
    add_names(p, "the capture")
    p.add_argument("--write-stride", type=number(int, at_least=1),
                   help="lane layout stride (default: sidecar, else inferred)")
    p.add_argument("--slice-args", action="store_true",
                   help="per-slice args in the trace (block, group, SM, lane, event; they are on the tracks already)")
    p.add_argument("--lane-counters", choices=("auto", "on", "off"), default="auto",
                   help="'lanes in <region>' counter tracks (auto: for traces of at most 65,536 regions)")
    add_format(p, ("regions", "loss"))
    add_force(p)
    add_progress(p)


def run(args) -> int:
    import sys

    from host_decode.cli.common import Step, free_name, load_input, next_step, outputs, print_result
    from host_decode.load.inputs import read_names

    with outputs(args, args.buffer, args.names) as out:
        if args.output:
            from host_decode.writers import trace_format

            trace_format(args.output)  # an unknown extension fails before the decode, not after
        trace_tmp = out.add(args.output) if args.output else None
        csv_tmp = out.add(args.spans_csv) if args.spans_csv else None
        loss_tmp = out.add(args.loss_json) if args.loss_json else None
        names = read_names(args.names)
        with Step(f"decoding {args.buffer}", args):
            trace = load_input(args.buffer, names=names, write_stride=args.write_stride)
        if loss_tmp:
            loss_tmp.write_text(trace.loss.dumps())
        if csv_tmp:
            from host_decode.writers.spans_csv import write_spans_csv

            write_spans_csv(trace, csv_tmp)
        tables = args.format != "table" or not args.quiet  # -q drops the tables, never an output asked for
        note, seen = "", None
        if trace_tmp:
            from host_decode.writers import TraceOptions, write_trace

            if tables:  # the region summary counted as the writer streams the spans: no pass of its own
                from host_decode.analysis.stats import RunSummary

                seen = RunSummary(trace.spans.size)
            options = TraceOptions(slice_args=args.slice_args, lane_counters=args.lane_counters,
                                   timings=args.verbose)
            stats = write_trace(trace, trace_tmp, options, spans_seen=seen)
            note = "; ".join(getattr(stats, "notes", ()))  # what the overlays drew (Perfetto only)
        if tables:
            from host_decode.reports.tables.decode import decode_json, loss_items, summary_table

            data = decode_json(trace, seen.result() if seen is not None else None)
            items = []
            if trace.meta.get("launch_index") is not None:  # one launch of a ring: named as its trace is titled
                from host_decode.writers.tracks import root_name

                items.append(root_name(trace))
            items += loss_items(trace) + [summary_table(trace, data["regions"])]
            print_result(args, items, data)
    if not args.quiet:
        for path in (args.output, args.spans_csv, args.loss_json):
            if path:  # beside JSON or CSV on stdout, on stderr
                print(f"wrote {path}" + (f" ({note})" if path == args.output and note else ""),
                      file=sys.stdout if args.format == "table" else sys.stderr)
    if args.output:
        next_step(f"`ikp view {args.output}` (the Perfetto UI, served offline); `ikp stats {args.buffer}` for "
                  "statistics", args)
    else:
        next_step(
            f"`ikp view {args.buffer}` to see it in the Perfetto UI (served offline); "
            f"`ikp report {args.buffer} -o {free_name(args.buffer, '.html')}` for an HTML page",
            args,
        )
    return 0
