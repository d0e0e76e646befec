"""`ikp pc2region KERNEL.cubin -o map.json`: map every SASS PC of an instrumented kernel to its region."""

from __future__ import annotations

import json

NAME = "pc2region"
HELP = "map every SASS PC of an instrumented kernel (cubin) to its region path"
EXAMPLE = "ikp pc2region tests/fixtures/pc/tiles_real_ncu.cubin -o map.json"


def add_arguments(p) -> None:
    p.add_argument("cubin", help="the kernel's cubin (CuTe DSL: compile with options='--keep-cubin')")
    p.add_argument("-o", "--output", help="write the map JSON here")
    p.add_argument("--kernel", help="kernel symbol (exact or unique substring) when the cubin has several")
    p.add_argument("--names", help="event names: a capture sidecar JSON (its 'events') or {id: name} JSON")
    p.add_argument(
        "--marker-table",
        help="JSON list of [event_id, event_type] pairs the kernel writes "
        "(resolves tags whose bits are computed at run time)",
    )
    p.add_argument("--nvdisasm", help="path of nvdisasm (default: the nvidia-cuda-nvdisasm wheel, PATH, CUDA)")
    p.add_argument("--show", action="store_true", help="print the PC ranges of each region")
    from host_decode.cli.common import add_force, add_format

    add_format(p)
    add_force(p)


def run(args) -> int:
    from host_decode.cli.common import free_name, next_step, outputs, print_result, read_cubin_map
    from host_decode.reports.tables.hardware import map_items, map_json

    with outputs(args, args.cubin, args.names, args.marker_table) as out:
        tmp = out.add(args.output) if args.output else None
        names = _names(args.names) if args.names else None
        table = _marker_table(args.marker_table) if args.marker_table else None
        _, m = read_cubin_map(
            args.cubin,
            kernel=args.kernel,
            names=names,
            marker_table=table,
            nvdisasm=args.nvdisasm,
            source=str(args.cubin),
        )
        if not m.markers:  # nothing to map: say so instead of a table of zeros (and write nothing)
            from host_decode.core.errors import DecodeError

            raise DecodeError(m.problems[-1], source=str(args.cubin))
        if tmp:
            m.save(tmp)
    doc = map_json(m)
    print_result(args, map_items(doc, args.show), doc)
    if args.output:
        print(f"wrote {args.output}")
        next_step(f"`ikp join --map {args.output} --ncu SASS.csv` (or --cupti / --nvbit) for per-region hardware "
                  "metrics", args)
    else:
        next_step(f"`ikp pc2region {args.cubin} -o {free_name(args.cubin, '.map.json')}` keeps the map for ikp join / "
                  "ikp report --map", args)
    return 0


def _load_json(path: str):
    from host_decode.core.errors import DecodeError

    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DecodeError(f"not a JSON file: {e}", source=str(path)) from None


def _names(path: str):
    """A capture sidecar / names file ({'events': ...}) or a bare {id: name} object; else an error."""
    from host_decode.core.errors import DecodeError

    obj = _load_json(path)
    if isinstance(obj, dict) and "events" in obj and isinstance(obj["events"], (dict, list)):
        return obj
    if (
        isinstance(obj, dict)
        and obj
        and all(isinstance(v, str) for v in obj.values())
        and all(str(k).lstrip("-").isdigit() for k in obj)
    ):
        return obj
    raise DecodeError(
        "not a names file: want a capture sidecar / names file {'events': {id: name}} or {id: name}", source=str(path)
    )


def _marker_table(path: str):
    from host_decode.core.errors import DecodeError

    obj = _load_json(path)
    if not (
        isinstance(obj, list)
        and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) for x in p) for p in obj)
    ):
        raise DecodeError("not a marker table: want a JSON list of [event_id, event_type] pairs", source=str(path))
    return obj
