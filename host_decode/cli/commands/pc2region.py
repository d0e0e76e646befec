"""`ikp pc2region KERNEL.cubin -o map.json`: map every SASS PC of an instrumented kernel to its region."""

from __future__ import annotations

import json

NAME = "pc2region"
HELP = "map every SASS PC of an instrumented kernel (cubin) to its region path"


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


def run(args) -> int:
    from host_decode.hardware import pc2region

    names = _load_json(args.names) if args.names else None
    table = _load_json(args.marker_table) if args.marker_table else None
    m = pc2region.build_map(
        pc2region.read_cubin(args.cubin),
        kernel=args.kernel,
        names=names,
        marker_table=table,
        nvdisasm=args.nvdisasm,
        source=args.cubin,
    )
    if not m.markers:
        import sys

        print(f"error: {args.cubin}: {m.problems[-1]}; nothing written", file=sys.stderr)
        return 1
    if args.output:
        m.save(args.output)
    _print_summary(m, args.show)
    return 0


def _load_json(path: str):
    with open(path) as f:
        return json.load(f)


def _print_summary(m, show: bool) -> None:
    from rich.table import Table

    from host_decode.reports.text import make_console

    console = make_console()
    counts = m.summary()
    t = Table(title=f"{m.kernel}: {m.pc.size} instructions, {len(m.markers)} marker records", title_justify="left")
    t.add_column("region")
    t.add_column("instructions", justify="right")
    t.add_column("marker instr.", justify="right")
    t.add_column("PC ranges" if show else "first PC", overflow="fold")
    for k, path in enumerate(m.paths):
        sel = m.region == k
        if not sel.any() and path.startswith("<"):
            continue
        pcs = m.pc[sel]
        t.add_row(
            path,
            str(counts[path]),
            str(int(m.is_marker[sel].sum())),
            _ranges(pcs) if show else (f"{int(pcs[0]):#06x}" if pcs.size else "-"),
        )
    console.print(t)
    for problem in m.problems:
        console.print(f"[yellow]warning:[/yellow] {problem}")


def _ranges(pcs) -> str:
    out, start, prev = [], None, None
    for p in (int(x) for x in pcs):
        if start is None:
            start = prev = p
        elif p == prev + 16:
            prev = p
        else:
            out.append((start, prev))
            start = prev = p
    if start is not None:
        out.append((start, prev))
    return ", ".join(f"{a:#06x}-{b:#06x}" if a != b else f"{a:#06x}" for a, b in out)
