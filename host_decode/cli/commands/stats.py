"""ikp stats CAPTURE...: region percentiles + histograms, bubbles, overlap, tail/imbalance, critical lanes."""

NAME = "stats"
HELP = ("statistics of one capture or a session of captures: percentiles, histograms, bubbles, overlap, tail, "
        "critical lanes")

EXAMPLE = "ikp stats examples/basic/capture.npy            # or a directory of captures (a session)"

SPARK = " ▁▂▃▄▅▆▇█"


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_format, add_names, add_progress, number

    p.add_argument(
        "captures",
        nargs="+",
        help="BUFFER.npy file(s) (sidecar BUFFER.json read) or directories of them; several = one session",
    )
    add_names(p)
    add_format(p)
    p.add_argument("-o", "--output", help="also write the statistics as JSON to this file")
    p.add_argument("--top-gaps", type=number(int, at_least=0), default=10, help="largest gaps to list (default 10)")
    p.add_argument("--bins", type=number(int, at_least=1), default=16, help="histogram bins per region (default 16)")
    add_force(p)
    add_progress(p)


def collect(trace, top_gaps: int = 10, bins: int = 16) -> dict:
    """Everything `ikp stats` reports, JSON-ready."""
    from host_decode.analysis import regions as analysis
    from host_decode.analysis.stats import region_summary, summary_rows
    from host_decode.core.jsonable import to_jsonable
    from host_decode.load.ring import ring_counts

    summary = region_summary(trace)
    regions = summary_rows(summary, trace.names)
    for row, r in zip(regions, summary):
        counts, edges = analysis.duration_histogram(trace, int(r["group"]), int(r["event"]), bins=bins)
        row["hist_counts"] = counts.tolist()
        row["hist_edges_ns"] = [float(x) for x in edges]
    out = {
        "kernel": (trace.meta or {}).get("kernel"),
        "num_blocks": trace.num_blocks,
        "num_groups": trace.num_groups,
        "absolute_time": bool(trace.absolute),
        "launches": len((trace.meta or {}).get("parts", [])) or 1,
        "records_lost": int(trace.loss.lost),
        "ring": ring_counts(trace),  # a capture window's launches seen / recorded / lost, strays (else None)
        "regions": regions,
    }
    out.update(analysis.analyze(trace, top_gaps=top_gaps))
    return to_jsonable(out)


def run(args) -> int:
    from host_decode.analysis.sessions import load_trace
    from host_decode.cli.common import Step, next_step, outputs
    from host_decode.core.jsonable import dumps
    from host_decode.load.inputs import read_names

    with outputs(args, args.captures, args.names) as out:
        tmp = out.add(args.output) if args.output else None
        names = read_names(args.names)
        trace = load_trace(args.captures, progress=args.progress, names=names)
        with Step("statistics", args):
            data = collect(trace, args.top_gaps, args.bins)
        if tmp:
            tmp.write_text(dumps(data))
    if args.format == "json":
        print(dumps(data))
    else:
        print_report(data)
    if args.output:
        print(f"wrote {args.output}")
    first = args.captures[0]
    next_step(f"ikp report {first} -o report.html for an HTML explorer; ikp diff A B to compare two captures", args)
    return 0


def spark(counts) -> str:
    if not counts:
        return ""
    top = max(counts) or 1
    return "".join(SPARK[0 if c == 0 else max(1, round(8 * c / top))] for c in counts)


def _ns(x) -> str:
    if x is None:
        return "-"
    x = float(x)
    if abs(x) >= 1e6:
        return f"{x / 1e6:.3f} ms"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.2f} us"
    return f"{x:.0f} ns"


def _num(x) -> str:
    return "-" if x is None else f"{x:g}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_report(d: dict, console=None) -> None:
    from rich.table import Table

    from host_decode.cli.common import console as make_console

    console = console or make_console()
    head = (f"{d.get('kernel') or 'kernel'}: {d['num_blocks']} blocks x {d['num_groups']} groups, "
            f"{d['launches']} launch(es)")
    if d["records_lost"]:
        head += f", [red]{d['records_lost']} records lost[/red] (see `ikp decode`)"
    console.print(head)
    if d.get("ring"):
        from host_decode.load.ring import describe_ring

        ring = d["ring"]
        missed = ring["lost_launches"] or ring["stray_records"] or ring["launches_without_records"]
        console.print(f"[red]{describe_ring(ring)}[/red]" if missed else describe_ring(ring))

    if not d["regions"]:
        console.print(
            "[yellow]no regions recorded[/yellow] (every lane is all bubble; see `ikp decode` for what was read)"
        )
    from host_decode.cli.common import table

    t = table(
        console,
        "regions (durations)",
        ["group", "region", "count", "total", "mean", "p50", "p90", "p99", "max", "cv", "histogram (min..max)"],
        [
            [
                r["group_name"],
                r["region"],
                str(r["count"]),
                _ns(r["total_ns"]),
                _ns(r["mean_ns"]),
                _ns(r["p50_ns"]),
                _ns(r["p90_ns"]),
                _ns(r["p99_ns"]),
                _ns(r["max_ns"]),
                f"{r['cv']:.2f}",
                spark(r["hist_counts"]),
            ]
            for r in d["regions"]
        ],
        secondary=("total", "p90", "cv", "histogram (min..max)"),
        text=("group", "region"),
    )
    if d["regions"]:
        console.print(t)

    L = d["launch"]
    per = f" (median over {L['launches']} launches)" if L.get("launches") else ""
    t = Table(title="launch: tail and imbalance" + per, title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("meaning")
    rows = [
        ("launch length", _ns(L.get("launch_ns")), "earliest record to latest block end"),
        ("tail", _ns(L.get("tail_ns")), "last block end - median block end"),
        ("tail share", _pct(L.get("tail_frac")), "tail / launch length"),
        ("tail SM utilization", _pct(L.get("tail_sm_utilization")), "SMs holding a block during the tail"),
        (
            "imbalance, block end",
            f"{L['imbalance_block_end']:.3f}" if L.get("imbalance_block_end") else "-",
            "max / mean block end",
        ),
        (
            "imbalance, SM busy",
            f"{L['imbalance_sm_busy']:.3f}" if L.get("imbalance_sm_busy") else "-",
            "max / mean SM busy time",
        ),
        ("waves (max per SM)", _num(L.get("waves_max")), "blocks on an SM / most resident at once"),
    ]
    for r in rows:
        t.add_row(*r)
    console.print(t)

    B = d["bubbles"]
    t = Table(title=f"bubbles: {_pct(B['bubble_frac'])} of lane time is in no region", title_justify="left")
    for c in ("group", "lanes", "bubble share", "worst lane", "largest gap"):
        t.add_column(c, justify="left" if c == "group" else "right")
    for g in B["per_group"]:
        t.add_row(
            g["group"], str(g["lanes"]), _pct(g["bubble_frac"]), _pct(g["bubble_frac_max"]), _ns(g["largest_gap_ns"])
        )
    console.print(t)
    if B["largest_gaps"]:
        t = Table(title="largest gaps", title_justify="left")
        for c in ("block", "group", "lane", "at (from trace start)", "length", "after", "before"):
            t.add_column(c)
        for g in B["largest_gaps"]:
            t.add_row(
                str(g["block"]),
                g["group"],
                str(g["lane"]),
                _ns(g["start_ns"]),
                _ns(g["dur_ns"]),
                g["after"],
                g["before"],
            )
        console.print(t)

    if d["overlap"]:
        t = Table(title="overlap between groups (per block, time-weighted over blocks)", title_justify="left")
        for c in ("A", "B", "blocks", "A overlapped by B", "worst block", "B overlapped by A", "worst block "):
            t.add_column(c)
        for o in d["overlap"]:
            t.add_row(
                o["group_a"],
                o["group_b"],
                str(o["blocks"]),
                _pct(o["a_overlapped"]),
                _pct(o["a_overlapped_min"]),
                _pct(o["b_overlapped"]),
                _pct(o["b_overlapped_min"]),
            )
        console.print(t)

    C = d["critical"]
    console.print(
        "critical lanes (last to finish in their block): by group "
        + ", ".join(f"{k}: {v}" for k, v in C["blocks_by_group"].items())
        + "; last region "
        + ", ".join(f"{k}: {v}" for k, v in C["last_event"].items())
        + f"; median lead over the next lane {_ns(C['slack_ns_p50'])}"
    )
    if C["regions"]:
        t = Table(title="time of the critical lanes by region (inclusive)", title_justify="left")
        for c in ("group", "region", "spans", "total", "share"):
            t.add_column(c)
        for r in C["regions"][:10]:
            t.add_row(r["group"], r["event"], str(r["spans"]), _ns(r["total_ns"]), _pct(r["share"]))
        console.print(t)
