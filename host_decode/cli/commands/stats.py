"""ikp stats CAPTURE...: region percentiles + histograms, bubbles, overlap, tail/imbalance, critical lanes."""

NAME = "stats"
HELP = ("statistics of one capture or a session of captures: percentiles, histograms, bubbles, overlap, tail, "
        "critical lanes")

EXAMPLE = "ikp stats examples/basic/capture.npy            # or a directory of captures (a session)"


def add_arguments(p) -> None:
    from host_decode.cli.common import MAX_BINS, add_force, add_format, add_names, add_progress, number

    p.add_argument(
        "captures",
        nargs="+",
        help="BUFFER.npy file(s) (sidecar BUFFER.json read) or directories of them; several = one session",
    )
    add_names(p)
    from host_decode.reports.tables.stats import TABLES

    add_format(p, TABLES)
    p.add_argument("-o", "--output", help="also write the statistics as JSON to this file")
    p.add_argument("--top-gaps", type=number(int, at_least=0), default=10, help="largest gaps to list (default 10)")
    p.add_argument("--bins", type=number(int, at_least=1, at_most=MAX_BINS), default=16,
                   help="histogram bins per region (default 16)")
    add_force(p)
    add_progress(p)


def run(args) -> int:
    from host_decode.analysis.regions import stats_data
    from host_decode.analysis.sessions import load_trace
    from host_decode.cli.common import Step, free_name, next_step, outputs, print_result
    from host_decode.core.jsonable import dumps
    from host_decode.load.inputs import read_names
    from host_decode.reports.tables.stats import stats_items

    with outputs(args, args.captures, args.names) as out:
        tmp = out.add(args.output) if args.output else None
        names = read_names(args.names)
        trace = load_trace(args.captures, progress=args.progress, names=names)
        with Step("statistics", args):
            data = stats_data(trace, args.top_gaps, args.bins)
        if tmp:
            tmp.write_text(dumps(data))
    print_result(args, stats_items(data), data)
    if args.output:
        print(f"wrote {args.output}")
    first = args.captures[0]
    next_step(f"`ikp report {first} -o {free_name(first, '.html')}` for an HTML explorer; `ikp diff A.npy B.npy` to "
              "compare two captures", args)
    return 0
