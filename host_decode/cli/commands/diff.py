"""ikp diff A B: per-region deltas between two captures with significance; --fail-above as a CI gate."""

NAME = "diff"
HELP = "compare two captures (or sessions) of the same kernel: per-region deltas, significance, --fail-above PCT gate"
EXAMPLE = "ikp diff examples/insight/launch_0.npy examples/insight/launch_1.npy --fail-above 5"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format, add_names, add_progress, number

    p.add_argument("a", nargs="+", help="baseline capture(s): BUFFER.npy or a directory of them (a session)")
    p.add_argument("--vs", dest="b", nargs="+", help="candidate capture(s), when A or B is a session of several files")
    add_names(p, "every capture of both sides")
    add_format(p)
    p.add_argument("-o", "--output", help="also write the comparison as JSON to this file")
    p.add_argument(
        "--fail-above",
        type=number(float, at_least=0),
        metavar="PCT",
        help="exit 1 if a region got significantly slower by more than PCT percent (CI gate); "
        "exit 2 when no region is in both A and B (a gate that cannot fail is an error)",
    )
    p.add_argument(
        "--metric",
        choices=("mean", "p50"),
        default="mean",
        help="duration compared: mean (Welch t test) or p50 (Mann-Whitney U); default mean",
    )
    p.add_argument(
        "--alpha",
        type=number(float, above=0, below=1),
        default=0.01,
        help="significance level, in (0, 1) (default 0.01)",
    )
    p.add_argument(
        "--unit",
        choices=("span", "lane"),
        default="span",
        help="samples: every span, or each lane's mean (spans of a lane are correlated); default span",
    )
    p.add_argument(
        "--min-delta",
        type=number(float, at_least=0),
        default=0.0,
        metavar="PCT",
        help="smaller deltas (in percent, >= 0) are reported as 'same' even when significant (default 0)",
    )
    add_force(p)
    add_progress(p)


def split_args(args) -> tuple[list, list]:
    """`ikp diff A B` (two paths) or `ikp diff A... --vs B...`."""
    if args.b:
        return list(args.a), list(args.b)
    if len(args.a) != 2:
        raise ValueError(
            "give two captures (ikp diff A B) or sessions with --vs (ikp diff A1 A2 --vs B1 B2); "
            f"got {len(args.a)} path(s)"
        )
    return [args.a[0]], [args.a[1]]


def run(args) -> int:
    import sys

    from host_decode.analysis import diff
    from host_decode.analysis.sessions import load_trace
    from host_decode.cli.common import free_name, next_step, outputs, print_result
    from host_decode.core.jsonable import dumps
    from host_decode.load.inputs import read_names
    from host_decode.reports.tables.diff import diff_items

    pa, pb = split_args(args)
    with outputs(args, pa, pb, args.names) as out:
        tmp = out.add(args.output) if args.output else None
        names = read_names(args.names)  # one naming for both sides
        a = load_trace(pa, progress=args.progress, names=names)
        b = load_trace(pb, progress=args.progress, names=names)
        rows = diff.compare(a, b, unit=args.unit, alpha=args.alpha, metric=args.metric, min_delta_pct=args.min_delta)
        launches = diff.compare_launches(a, b, alpha=args.alpha)
        matched = [r for r in rows if r["status"] not in ("only_a", "only_b")]
        if args.fail_above is not None and not matched:  # inside the block: the error leaves no -o file
            raise ValueError(
                f"no region is in both A and B ({len(rows)} region(s), each in one side only): "
                "--fail-above cannot check anything (same kernel? same names?)"
            )
        bad = diff.regressions(rows, args.fail_above, args.metric) if args.fail_above is not None else []
        doc = {
            "regions": rows,
            "launch": launches,
            "regressions": bad,
            "fail_above_pct": args.fail_above,
            "metric": args.metric,
        }
        if tmp:
            tmp.write_text(dumps(doc))
    print_result(args, diff_items(rows, launches, metric=args.metric, unit=args.unit, alpha=args.alpha), doc)
    if args.output:
        print(f"wrote {args.output}")
    if bad:
        names = ", ".join(
            f"{r['group']}/{r['event']} {r['delta_pct' if args.metric == 'mean' else 'delta_p50_pct']:+.1f}%"
            for r in bad
        )
        print(
            f"ikp diff: {len(bad)} region(s) slower than +{args.fail_above}% ({args.metric}): {names}", file=sys.stderr
        )
        return 1
    next_step(f"`ikp report {pa[0]} -o {free_name(pa[0], '.html')}` for one capture's details; `--fail-above PCT` "
              "makes this a CI gate", args)
    return 0
