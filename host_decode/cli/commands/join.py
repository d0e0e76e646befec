"""`ikp join --map map.json --ncu sass.csv`: per-region hardware metrics (instructions, stall samples)."""

from __future__ import annotations

NAME = "join"
HELP = "join per-PC data (Nsight Compute CSV, CUPTI PC sampling, NVBit JSON) with a pc2region map"
EXAMPLE = (
    "ikp join --map tests/fixtures/pc/tiles_real_ncu.map.json --ncu tests/fixtures/pc/tiles_real_ncu.csv "
    "-o regions.json"
)


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format

    p.add_argument("--map", required=True, help="pc2region map JSON (ikp pc2region ... -o map.json)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ncu", help="ncu source-page CSV (ncu -i rep --page source --csv --print-source sass)")
    src.add_argument("--cupti", help="CUPTI PC sampling JSON (host_decode.hardware.adapters.cupti.PcSampler)")
    src.add_argument("--nvbit", help="NVBit-style per-PC JSON")
    p.add_argument(
        "--kernel", help="kernel name in the data file (default: the map's kernel, else the file's only one)"
    )
    p.add_argument("-o", "--output", help="write the per-region results as JSON here")
    add_format(p, ("exclusive", "inclusive"))
    p.add_argument("--inclusive", action="store_true", help="print inclusive rows (a path plus all below it)")
    p.add_argument("--allow-mismatch", action="store_true", help="join even if the data does not match the map's cubin")
    p.add_argument(
        "--no-move",
        action="store_true",
        help="keep samples where they are (no move off zero-execution PCs / PCs after EXIT)",
    )
    p.add_argument("--trace", help="a capture (BUFFER.npy): its event names name the regions")
    add_force(p)


def run(args) -> int:
    from host_decode.cli.common import free_name, load_map, next_step, outputs, print_result, read_pc_table
    from host_decode.core.jsonable import dumps
    from host_decode.hardware import join
    from host_decode.reports.tables.hardware import join_items

    kind = "ncu" if args.ncu else "cupti" if args.cupti else "nvbit"
    data = getattr(args, kind)
    with outputs(args, args.map, data, args.trace) as out:
        tmp = out.add(args.output) if args.output else None
        region_map = load_map(args.map)
        table = read_pc_table(kind, data, args.kernel, region_map, allow_mismatch=args.allow_mismatch)
        result = join.join(region_map, table, force=args.allow_mismatch, move_samples=not args.no_move)
        if args.trace:
            from host_decode.load.capture import load_capture

            result = result.renamed({**result.events, **load_capture(args.trace).names.events})
        if tmp:
            tmp.write_text(dumps(result.to_json()))
    payload = result.to_json()
    inclusive = args.inclusive or args.table == "inclusive"  # either flag picks the inclusive rows
    args.table = "inclusive" if inclusive else "exclusive"
    print_result(args, join_items(payload, inclusive), payload)
    if args.output:
        print(f"wrote {args.output}")
    next_step(
        f"`ikp report CAPTURE.npy --map {args.map} --{kind} {data} -o {free_name('report', '.html')}` to see these "
        "per region next to the timeline of a capture of this kernel",
        args,
    )
    return 0 if result.check["ok"] else 1
