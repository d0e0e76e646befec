"""The tables of the hardware commands: `ikp join` (per-region instructions, samples and stalls, from the
join's JSON) and `ikp pc2region` (a map's regions, instruction counts and PC ranges).

Invariants, and the tests that guard them: every number shown is the JSON's, whole, at any terminal width
(tests/unit/host_decode/reports/test_tables_fit_terminal.py); PC ranges join consecutive instructions (16
bytes apart) into one range (tests/unit/host_decode/hardware/test_pc2region.py).
"""

from __future__ import annotations

from host_decode.reports.tables.console import Column, Table, make_console, print_tables


def si(x: float) -> str:
    """A count in k / M / G with two decimals (1234567 -> 1.23M)."""
    x = float(x)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def join_items(payload: dict, inclusive: bool = False) -> list:
    """`ikp join`'s output from the join's JSON (hardware.join.JoinResult.to_json): one row per region path
    (exclusive, or inclusive of the paths below; special buckets without samples or instructions are left
    out of the exclusive view), then the cubin check line."""
    totals = payload["totals"]
    rows = payload["inclusive" if inclusive else "exclusive"]
    if not inclusive:
        rows = [r for r in rows
                if not (r["path"].startswith("<") and not r.get("samples") and not r.get("inst_executed"))]
    has_inst = "inst_executed" in totals
    has_pred = "thread_inst_executed" in totals and "pred_on_thread_inst_executed" in totals
    has_samples = totals.get("samples", 0) > 0
    columns = [Column("region", "path", text=True, sep="/")]
    if has_inst:
        columns += [Column("instructions", "inst_executed", si),
                    Column("%", "inst_share", lambda v: f"{100 * (v or 0):.1f}")]
    if has_pred:
        columns.append(Column("pred-on", "predicated_on_ratio", lambda v: f"{100 * (v or 0):.0f}%"))
    if has_samples:
        columns += [Column("samples", "samples", si), Column("% ", "samples_share", lambda v: f"{100 * v:.1f}"),
                    Column("top stalls (of the region's samples)", "top_stalls", text=True, sep=", ",
                           fmt=lambda stalls: ", ".join(f"{r} {100 * f:.0f}%" for r, f in stalls))]
    if not inclusive:
        def own(r: dict) -> str:
            parts = []
            if has_inst:
                parts.append(f"{100 * r.get('marker_inst_executed_share', 0):.1f}% inst")
            if has_samples:
                parts.append(f"{100 * r.get('marker_samples_share', 0):.1f}% samples")
            return ", ".join(parts)

        columns.append(Column("markers' own share", value=own, text=True, sep=", "))
    kind = "inclusive: a path and everything below it" if inclusive else "exclusive"
    check = payload["check"]
    line = f"cubin check: {'ok' if check['ok'] else 'MISMATCH: ' + '; '.join(check['reasons'])}"
    if has_samples:
        line += f"; samples {si(totals['samples'])}, moved to the previous PC {si(payload['moved_samples'])}"
    if has_inst:
        line += f"; instructions {si(totals['inst_executed'])}"
    if "external_region_agreement" in check:
        line += f"; the data's own regions agree on {100 * check['external_region_agreement']:.1f}%"
    table = Table(f"{payload['kernel']} ({payload['source']}, {kind})", columns, rows,
                  name="inclusive" if inclusive else "exclusive",
                  terms=("exclusive", "inclusive", "samples", "stalls", "markers' own share", "pred-on"))
    return [table, line]


def print_join(payload: dict, console=None, inclusive: bool = False) -> None:
    print_tables(join_items(payload, inclusive), console or make_console())


def map_json(m) -> dict:
    """What `ikp pc2region --format json` prints of a map (hardware.pc2region.RegionMap): instruction counts
    per region path, and a row per region with its marker instructions, first PC and PC ranges."""
    counts = m.summary()
    rows = []
    for k, path in enumerate(m.paths):
        sel = m.region == k
        if not sel.any() and path.startswith("<"):
            continue
        pcs = m.pc[sel]
        rows.append({"region": path, "instructions": int(counts[path]),
                     "marker_instructions": int(m.is_marker[sel].sum()),
                     "first_pc": f"{int(pcs[0]):#06x}" if pcs.size else None, "pc_ranges": pc_ranges(pcs)})
    return {"kernel": m.kernel, "instructions": int(m.pc.size), "markers": len(m.markers), "regions": counts,
            "rows": rows, "problems": list(m.problems)}


def map_items(doc: dict, show: bool = False) -> list:
    """A pc2region map's table (map_json): instructions and marker instructions per region path, with its first
    PC or (show) every PC range; then the map's problems as warnings."""
    columns = [Column("region", "region", text=True, sep="/"), Column("instructions", "instructions"),
               Column("marker instr.", "marker_instructions")]
    if show:
        columns.append(Column("PC ranges", "pc_ranges", text=True, sep=", "))
    else:
        columns.append(Column("first PC", "first_pc", lambda v: v or "-"))
    items: list = [Table(f"{doc['kernel']}: {doc['instructions']} instructions, {doc['markers']} marker records",
                         columns, doc["rows"], name="regions", terms=("marker",))]
    items += [(f"warning: {problem}", "yellow") for problem in doc["problems"]]
    return items


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
