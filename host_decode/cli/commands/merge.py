"""ikp merge: sessions over many launches, several ranks/GPUs, or one capture into a torch.profiler trace."""

NAME = "merge"
HELP = (
    "merge captures into one Chrome JSON trace: launches / ranks as track groups on a shared timeline, "
    "or into a torch.profiler trace (--torch) with the kernel slice containing its regions"
)
EXAMPLE = (
    "ikp merge examples/insight/launch_0.npy examples/insight/launch_1.npy -o session.json.gz\n"
    "  ikp merge examples/insight/launch_0.npy --torch examples/insight/torch_trace.json.gz --occurrence 0 \\\n"
    "        -o merged.json.gz"
)


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format, add_names, add_progress, number

    p.add_argument("captures", nargs="+", help="BUFFER.npy files or directories of them")
    p.add_argument("-o", "--output", required=True,
                   help="merged trace: Chrome JSON (.json, .json.gz) or Perfetto (.pftrace, with flow arrows: "
                   "flags across ranks, pipeline waits)")
    add_names(p)
    p.add_argument(
        "--by",
        choices=("launch", "rank"),
        default=None,
        help="one track group per launch (sidecar launch_index) or per rank (sidecar rank); default: per rank "
        "when the captures come from several ranks, else per launch",
    )
    p.add_argument(
        "--mode",
        choices=("timeline", "stacked"),
        default="timeline",
        help="timeline: shared clock (absolute globaltimer, else host_ns); stacked: each rebased to its start",
    )
    p.add_argument(
        "--clock-offset",
        type=clock_offset,
        action="append",
        default=[],
        metavar="RANK=NS",
        help="ns added to a rank's times before merging (measured per-GPU clock offset); repeatable",
    )
    p.add_argument("--torch", metavar="TRACE", help="torch.profiler Chrome trace of the same run: merge into it")
    p.add_argument(
        "--kernel", help="kernel name (or unique substring) in the profiler trace (default: sidecar 'kernel')"
    )
    p.add_argument(
        "--occurrence",
        type=number(int, at_least=0),
        help="index of the kernel slice of the (first) launch among slices of that name",
    )
    p.add_argument(
        "--placement",
        choices=("mid", "start"),
        default="mid",
        help="offset within the feasible interval: its middle, or kernel start + --launch-latency",
    )
    p.add_argument(
        "--launch-latency",
        type=number(int, at_least=0),
        metavar="NS",
        help="kernel start -> first record, for --placement start",
    )
    p.add_argument(
        "--max-lanes",
        type=number(int, at_least=1),
        default=4096,
        help="lanes written per launch at most (the rest counted)",
    )
    add_format(p)
    add_force(p)
    add_progress(p)


def clock_offset(text: str) -> tuple[int, int]:
    """argparse type of --clock-offset: RANK=NS, both integers (NS may be negative)."""
    import argparse

    rank, _, ns = text.partition("=")
    try:
        return int(rank), int(ns)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants RANK=NS (integers, e.g. 1=-2500), got {text!r}") from None


def run(args) -> int:
    from host_decode.analysis import sessions as multi
    from host_decode.cli.common import Step, ensure_gzip, next_step, outputs, print_result, say_left_out
    from host_decode.load.inputs import load_launches, read_names
    from host_decode.reports.tables.merge import session_items, torch_items
    from host_decode.writers import trace_format

    if args.torch and trace_format(args.output)[0] == "perfetto":
        raise ValueError(f"{args.output}: --torch merges into a Chrome JSON trace (.json or .json.gz)")

    with outputs(args, args.captures, args.torch, args.names) as out:
        tmp = out.add(args.output)
        names = read_names(args.names)
        launches = load_launches(args.captures, progress=args.progress, names=names)
        by = args.by or multi.grouping(launches.traces)
        parts = multi.parts_from_traces(launches.traces, by=by)
        offsets = dict(args.clock_offset)
        if trace_format(args.output)[0] == "perfetto" and not args.torch:
            from host_decode.writers import TraceOptions, write_trace

            trace = multi.concat(parts, mode=args.mode, clock_offsets_ns=offsets)
            stats = write_trace(trace, tmp, TraceOptions(timings=args.verbose))
            summary = {"mode": args.mode, "by": by, "parts": trace.meta["parts"], "notes": list(stats.notes)}
        elif args.torch:
            from host_decode.reports.merged import merge_with_torch_trace

            trace = (
                parts[0].trace if len(parts) == 1 else multi.concat(parts, mode="timeline", clock_offsets_ns=offsets)
            )
            with Step("merging into the profiler trace", args):
                result = merge_with_torch_trace(
                    args.torch,
                    trace,
                    tmp,
                    args.kernel,
                    args.occurrence,
                    placement=args.placement,
                    launch_latency_ns=args.launch_latency,
                    max_lanes=args.max_lanes,
                )
            summary = result.to_json()
        else:
            from host_decode.reports.merged import write_session

            summary = write_session(
                parts,
                tmp,
                mode=args.mode,
                clock_offsets_ns=offsets,
                max_lanes_per_part=args.max_lanes,
                progress=args.progress,
            )
        if trace_format(args.output)[0] != "perfetto":
            ensure_gzip(tmp)
    if args.torch:
        items = torch_items(summary)
    else:
        items = session_items(summary, parts=len(parts), by=by, mode=args.mode, output=args.output)
    print_result(args, items, summary)
    if args.torch and args.format == "table":
        say_left_out(trace, args.max_lanes)
    if args.format == "table":
        print(f"wrote {args.output}")
    next_step(f"`ikp view {args.output}` (the Perfetto UI, served offline)", args)
    return 0

