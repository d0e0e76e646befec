"""ikp plot CAPTURE... -o DIR: PNG histograms per region, per-SM Gantt of one launch, overlap per block."""

NAME = "plot"
HELP = "PNG plots of a capture or session: per-region duration histograms, per-SM Gantt of one launch, group overlap"
EXAMPLE = "ikp plot examples/insight/launch_0.npy examples/insight/launch_1.npy -o plots"

FILES = ("histograms.png", "gantt.png", "overlap.png")


def add_arguments(p) -> None:
    from host_decode.cli.common import MAX_BINS, add_force, add_names, add_progress, number

    p.add_argument("captures", nargs="+", help="BUFFER.npy file(s) or directories of them (several = a session)")
    p.add_argument(
        "-o", "--output", required=True, help=f"directory for {', '.join(FILES)} (created when its parent exists)"
    )
    add_names(p)
    p.add_argument("--launch", type=number(int, at_least=0), default=0,
                   help="which launch of a session the Gantt chart shows (default 0)")
    p.add_argument("--bins", type=number(int, at_least=1, at_most=MAX_BINS), default=40,
                   help="histogram bins (default 40)")
    add_force(p)
    add_progress(p)


def run(args) -> int:
    from pathlib import Path

    from host_decode.analysis.sessions import load_trace
    from host_decode.cli.common import next_step, outputs, progress
    from host_decode.load.inputs import read_names
    from host_decode.reports import plots

    out_dir = Path(args.output)
    with outputs(args, args.captures, args.names) as out:
        if out_dir.is_dir():  # each PNG replaced atomically, and only with --force
            tmp = out.add_dir(out_dir, FILES)
        else:  # a new directory: written whole under a temporary name, renamed into place at the end
            tmp_dir = out.add_new_dir(out_dir)
            tmp = {name: tmp_dir / name for name in FILES}
        names = read_names(args.names)
        trace = load_trace(args.captures, progress=args.progress, names=names)
        steps = [
            lambda: plots.plot_histograms(trace, tmp["histograms.png"], bins=args.bins),
            lambda: plots.plot_gantt(trace, tmp["gantt.png"], launch=args.launch),
            lambda: plots.plot_overlap(trace, tmp["overlap.png"]),
        ]
        for step in progress(steps, "plot", args):
            step()
    for name in FILES:
        print(f"wrote {out_dir / name}")
    next_step(f"open {out_dir / 'gantt.png'}; `ikp stats {' '.join(args.captures)}` for the numbers behind the plots",
              args)
    return 0
