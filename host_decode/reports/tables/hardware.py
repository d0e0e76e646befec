"""The tables of the hardware commands: `ikp join` (hardware.join.table's per-region metrics and stalls)
and `ikp pc2region` (a map's regions, instruction counts and PC ranges).

Invariants, and the tests that guard them: both fit 80 columns, numbers kept and long text folded
(tests/unit/host_decode/cli/test_cli_grammar.py::test_tables_readable_at_80_columns,
::test_every_table_command_fits_80_columns_end_to_end); PC ranges join consecutive instructions (16 bytes apart) into
one range (tests/unit/host_decode/hardware/test_pc2region.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import make_console


def print_join(jt, console) -> None:
    """join.table's cells with rich. Below 100 columns the numbers stay and long text folds."""
    from rich.table import Table

    narrow = console.width < 100
    folding = {"region": {"min_width": 12, "overflow": "fold"}, "markers' own share": {"overflow": "fold"}}
    folding["top stalls (of the region's samples)"] = {"overflow": "fold", "ratio": 1 if narrow else None}
    t = Table(title=jt.title, title_justify="left")
    for header, justify in jt.columns:
        t.add_column(header, justify=justify, **folding.get(header, {"no_wrap": True}))
    for row in jt.rows:
        t.add_row(*row)
    console.print(t)
    console.print(jt.footer)


def print_map(m, show: bool, console=None) -> None:
    """A pc2region map (hardware.pc2region.RegionMap): instructions and marker instructions per region path,
    with its first PC or (show) every PC range; then the map's problems as warnings."""
    from rich.table import Table

    console = console or make_console()
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
            pc_ranges(pcs) if show else (f"{int(pcs[0]):#06x}" if pcs.size else "-"),
        )
    console.print(t)
    for problem in m.problems:
        console.print(f"[yellow]warning:[/yellow] {problem}")


def pc_ranges(pcs) -> str:
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
