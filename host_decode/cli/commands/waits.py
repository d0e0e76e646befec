"""ikp waits CAPTURE: who waited on whom in a capture traced with pipeline metadata (analysis/pipelines.py)."""

NAME = "waits"
HELP = (
    "pipeline waits of one capture: per pipeline x role wait time, blocked vs passed, whom it waited on, critical path"
)

EXAMPLE = "ikp waits examples/pipelines/fa4_sm90_signals.npy    # a capture traced under ikp_cute.trace_pipelines"
def add_arguments(p) -> None:
    from host_decode.cli.common import add_format, add_names, number
    from host_decode.reports.tables.waits import TABLES

    p.add_argument("capture", help="BUFFER.npy whose sidecar BUFFER.json carries 'pipelines' (and 'barriers')")
    add_names(p, "the capture")
    add_format(p, TABLES)
    p.add_argument("--max-blocks", type=number(int, at_least=1), default=4096,
                   help="blocks whose critical path is walked (default 4096)")
    p.add_argument(
        "--cluster",
        type=number(int, at_least=1),
        default=None,
        help="CTAs per cluster, for pipelines whose metadata says none (waits reported as signal_in_other_cta: "
        "their signals came from another CTA of the cluster)",
    )
    p.add_argument(
        "--roles",
        choices=("auto", "group", "warp_group"),
        default="auto",
        help="what a role is: auto (warp groups when the lanes are warps, else the capture's groups), "
        "group (every lane group, e.g. each warp), warp_group (4 consecutive groups)",
    )


def run(args) -> int:
    from host_decode.analysis.pipeline_meta import has_pipelines
    from host_decode.analysis.waits import waits_summary
    from host_decode.cli.common import free_name, load_input, next_step, print_result
    from host_decode.load.inputs import read_names
    from host_decode.reports.tables.waits import waits_items

    trace = load_input(args.capture, names=read_names(args.names))
    if not has_pipelines(trace):
        raise ValueError(
            f"{args.capture}: its sidecar has no 'pipelines' or 'barriers' metadata "
            "(capture the kernel under ikp_cute.trace_pipelines)"
        )
    if args.cluster is not None and args.cluster > trace.num_blocks:
        raise ValueError(f"--cluster {args.cluster}: more CTAs than the capture's {trace.num_blocks} blocks")
    data = waits_summary(trace, max_blocks=args.max_blocks, roles=args.roles, cluster=args.cluster)
    print_result(args, waits_items(data), data)
    trace = free_name(args.capture, ".pftrace")
    next_step(
        f"`ikp decode {args.capture} -o {trace}`, then `ikp view {trace}` (flow arrows and stages-full counters); "
        f"`ikp report {args.capture} -o {free_name(args.capture, '.html')}` (Waits tab)",
        args,
    )
    return 0
