"""ikp waits CAPTURE|DIR: who waited on whom: pipeline waits (analysis/pipelines.py), flags and counters across
blocks and ranks (analysis/flag_paths.py)."""

NAME = "waits"
HELP = (
    "pipeline waits of one capture: coverage, per pipeline x role wait time, blocked vs passed, whom it waited on, "
    "critical path, TMA / UMMA issue -> ready latency; flags and counters across blocks and ranks: what bounded "
    "each step"
)

EXAMPLE = "ikp waits examples/pipelines/fa4_sm90_signals.npy    # a capture traced under ikp_cute.trace_pipelines"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_format, add_names, number
    from host_decode.reports.tables.flags import TABLES as FLAG_TABLES
    from host_decode.reports.tables.waits import TABLES

    p.add_argument("capture", help="BUFFER.npy whose sidecar BUFFER.json carries 'pipelines' (and 'barriers') or "
                   "'flags', or a folder of captures (the ranks of a distributed kernel)")
    add_names(p, "the capture")
    add_format(p, TABLES + FLAG_TABLES)
    p.add_argument("--max-blocks", type=number(int, at_least=1), default=4096,
                   help="blocks whose critical path is walked (default 4096)")
    p.add_argument(
        "--cluster",
        type=number(int, at_least=1),
        default=None,
        help="CTAs per cluster, for pipelines whose metadata says none (waits reported as signal_in_other_cta: "
        "their signals came from another CTA of the cluster)",
    )
    p.add_argument("--rank", type=number(int, at_least=0), default=None,
                   help="flags: the critical path of each step within this rank (default: over every rank)")
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
    from host_decode.load.sidecar import has_flags
    from host_decode.reports.tables.waits import TABLES, waits_items

    trace = load_input(args.capture, names=read_names(args.names))
    flags = has_flags(trace)
    if not has_pipelines(trace) and not flags:
        raise ValueError(
            f"{args.capture}: its sidecar has no 'pipelines' or 'barriers' metadata, nor 'flags' "
            "(capture the kernel under ikp_cute.trace_pipelines)"
        )
    if args.cluster is not None and args.cluster > trace.num_blocks:
        raise ValueError(f"--cluster {args.cluster}: more CTAs than the capture's {trace.num_blocks} blocks")
    pipelines = has_pipelines(trace)
    data = waits_summary(trace, max_blocks=args.max_blocks, roles=args.roles, cluster=args.cluster) \
        if pipelines else {}
    items = waits_items(data) if pipelines else []
    if flags:
        from host_decode.analysis.flag_paths import flags_summary
        from host_decode.reports.tables.flags import flags_items

        flag_data = flags_summary(trace, rank=args.rank)
        data = dict(data, flags=flag_data) if data else flag_data
        items += flags_items(flag_data)
    if not pipelines and args.table == TABLES[0]:
        args.table = None  # a capture of flags only: --format csv prints its first table
    print_result(args, items, data)
    out = free_name(args.capture, ".pftrace")
    if not pipelines:
        next_step(f"`ikp decode {args.capture} -o {out}`, then `ikp view {out}` (a flow from each signal to the "
                  f"wait it released); `ikp export {args.capture} -o {free_name(args.capture, '-tables')}` "
                  "(Parquet for DuckDB)", args)
        return 0
    next_step(
        f"`ikp decode {args.capture} -o {out}`, then `ikp view {out}` (flow arrows, stages-full counters, "
        f"TMA / UMMA in-flight rows); `ikp report {args.capture} -o {free_name(args.capture, '.html')}` (Waits tab)",
        args,
    )
    return 0
