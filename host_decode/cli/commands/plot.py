"""ikp plot CAPTURE... -o DIR: PNG histograms per region, per-SM Gantt of one launch, overlap per block."""

NAME = "plot"
HELP = "PNG plots of a capture or session: per-region duration histograms, per-SM Gantt of one launch, group overlap"


def add_arguments(p) -> None:
    from host_decode.cli.commands.stats import add_progress

    p.add_argument("captures", nargs="+", help="BUFFER.npy file(s) or directories of them (several = a session)")
    p.add_argument("-o", "--output", required=True, help="directory for the PNGs (created)")
    p.add_argument("--launch", type=int, default=0, help="which launch of a session the Gantt chart shows (default 0)")
    p.add_argument("--bins", type=int, default=40, help="histogram bins (default 40)")
    add_progress(p)


def run(args) -> int:
    from pathlib import Path

    from host_decode.reports import plots
    from host_decode.analysis.sessions import load_trace

    trace = load_trace(args.captures, progress=args.progress)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        plots.plot_histograms(trace, out / "histograms.png", bins=args.bins),
        plots.plot_gantt(trace, out / "gantt.png", launch=args.launch),
        plots.plot_overlap(trace, out / "overlap.png"),
    ]
    for p in written:
        print(f"wrote {p}")
    return 0
