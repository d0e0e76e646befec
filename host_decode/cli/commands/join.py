"""`ikp join --map map.json --ncu sass.csv`: per-region hardware metrics (instructions, stall samples)."""

from __future__ import annotations

NAME = "join"
HELP = "join per-PC data (Nsight Compute CSV, CUPTI PC sampling, NVBit JSON) with a pc2region map"


def add_arguments(p) -> None:
    p.add_argument("--map", required=True, help="pc2region map JSON (ikp pc2region ... -o map.json)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ncu", help="ncu source-page CSV (ncu -i rep --page source --csv --print-source sass)")
    src.add_argument("--cupti", help="CUPTI PC sampling JSON (host_decode.hardware.adapters.cupti.PcSampler)")
    src.add_argument("--nvbit", help="NVBit-style per-PC JSON")
    p.add_argument("--kernel", help="kernel name in the data file (default: the map's kernel when present)")
    p.add_argument("--json", help="write the per-region results as JSON here")
    p.add_argument("--inclusive", action="store_true", help="print inclusive rows (a path plus all below it)")
    p.add_argument("--force", action="store_true", help="join even if the data does not match the map's cubin")
    p.add_argument(
        "--no-move",
        action="store_true",
        help="keep samples where they are (no move off zero-execution PCs / PCs after EXIT)",
    )
    p.add_argument("--trace", help="a capture (BUFFER.npy): its event names name the regions")


def run(args) -> int:
    import json

    from host_decode.hardware import join

    from host_decode.hardware import pc2region
    from host_decode.hardware.adapters import cupti, ncu, nvbit

    region_map = pc2region.load_map(args.map)
    if args.ncu:
        table = _read(ncu.read_ncu_csv, args.ncu, args.kernel, region_map.kernel)
    elif args.cupti:
        table = _read(cupti.read_cupti_json, args.cupti, args.kernel, region_map.kernel)
    else:
        table = _read(nvbit.read_nvbit_json, args.nvbit, args.kernel, region_map.kernel)
    result = join.join(region_map, table, force=args.force, move_samples=not args.no_move)
    if args.trace:
        from host_decode.core.decoder import load_capture

        result = result.renamed({**result.events, **load_capture(args.trace).names.events})
    _print_table(join.table(result, inclusive=args.inclusive))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    return 0 if result.check["ok"] else 1


def _print_table(jt) -> None:
    from rich.table import Table

    from host_decode.reports.text import make_console

    t = Table(title=jt.title, title_justify="left")
    for header, justify in jt.columns:
        t.add_column(header, justify=justify, no_wrap=header in ("region", "top stalls (of the region's samples)", "markers' own share"))
    for row in jt.rows:
        t.add_row(*row)
    console = make_console()
    console.print(t)
    console.print(jt.footer)


def _read(reader, path, kernel, map_kernel):
    """Use the explicit --kernel; else try the map's kernel symbol, then the file's only kernel."""
    from host_decode.core.errors import DecodeError

    if kernel:
        return reader(path, kernel=kernel)
    try:
        return reader(path, kernel=map_kernel)
    except DecodeError:
        return reader(path)
