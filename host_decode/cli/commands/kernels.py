"""`ikp kernels TRACE.json[.gz]`: kernel table, runtime table and per-stream gap analysis of a PyTorch
profiler Chrome trace (see host_decode/torch_traces/trace.py for the parsing and the definitions)."""

from __future__ import annotations

import argparse
import math
import os
import sys

NAME = "kernels"
HELP = "kernel-level analysis of a PyTorch profiler trace: where the GPU time and the idle gaps go"
EXAMPLE = (
    "ikp kernels examples/insight/torch_trace.json.gz --top 10\n"
    "  ikp kernels TRACE.json.gz --format csv --table pairs -o pairs.csv"
)

VERBOSE_HELP = "full kernel names; say what the cache did"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from host_decode.cli.common import MAX_BINS, add_force, add_format, add_progress, number

    p.add_argument("trace", help="torch.profiler Chrome trace (.json or .json.gz)")
    p.add_argument(
        "--sort",
        choices=("count", "total", "mean", "share", "max", "std"),
        default="total",
        help="kernel/runtime table order, descending (default: total)",
    )
    p.add_argument("--top", type=number(int, at_least=0), default=30, help="rows per table (0: all; default 30)")
    p.add_argument("--step", type=number(int, at_least=0), default=None,
                   help="only ProfilerStep#N (GPU rows by their launch)")
    p.add_argument("--stream", type=int, default=None, help="only this stream (tid for CPU categories)")
    p.add_argument("--device", type=int, default=None, help="only this device (pid for CPU categories)")
    p.add_argument(
        "--category",
        default=None,
        help="comma-separated event categories to tabulate instead of kernels "
        "(default kernel; memcpy/memset have their own table; e.g. cpu_op)",
    )
    gap_us = number(float, at_least=0)  # gaps are >= 0 (overlaps count as 0)
    p.add_argument("--gap-min", type=gap_us, default=0.0, help="gap histogram/pairs range start, us (default 0)")
    p.add_argument("--gap-max", type=gap_us, default=math.inf, help="gap histogram/pairs range end, us (default inf)")
    p.add_argument("--bins", type=number(int, at_least=1, at_most=MAX_BINS), default=10,
                   help="gap histogram bins (default 10)")
    p.add_argument("--linear", action="store_true", help="linear gap histogram bins (default: log-spaced)")
    p.add_argument(
        "--pairs-by",
        choices=("count", "mean", "max", "std", "total"),
        default="count",
        help="order of the A -> B gap pairs (default: count)",
    )
    p.add_argument("--no-gaps", action="store_true", help="skip the gap analysis")
    from host_decode.reports.tables.kernels import CSV_TABLES

    add_format(p, CSV_TABLES)
    p.add_argument(
        "-o",
        "--output",
        default=None,
        help="write the report (in --format) to FILE instead of stdout; with --merge, the merged trace",
    )
    add_force(p)
    add_progress(p)
    p.add_argument("--no-cache", action="store_true", help="neither read nor write TRACE.ikpcache.npz")
    p.add_argument(
        "-j",
        "--jobs",
        type=number(int, at_least=1),
        default=min(2, os.cpu_count() or 1),
        help="parser processes for large traces (default: min(2, CPUs))",
    )
    p.add_argument(
        "--parser",
        choices=("auto", "orjson", "msgspec"),
        default="auto",
        help="JSON parser for the bulk of the events (auto: msgspec when installed, else orjson)",
    )
    p.add_argument(
        "--capture",
        default=None,
        help="an ikp capture (BUFFER.npy) of the same run: summarize its regions under the kernel "
        "row whose name contains the capture's sidecar 'kernel'",
    )
    p.add_argument(
        "--merge",
        default=None,
        metavar="CAPTURE",
        help="write TRACE merged with this ikp capture to -o FILE (host_decode.analysis.align)",
    )
    p.add_argument(
        "--occurrence",
        type=number(int, at_least=0),
        default=None,
        help="with --merge: which launch (0-based) of the kernel the capture is, when not unique",
    )


def run(args) -> int:
    from host_decode.cli.common import Step, free_name, next_step, outputs, print_result
    from host_decode.reports.tables.kernels import csv_text, kernels_items
    from host_decode.torch_traces import trace as tt

    if args.merge:
        return _merge(args)
    with outputs(args, args.trace, args.capture) as out:
        tmp = out.add(args.output) if args.output else None
        with Step("reading the profiler trace", args):
            trace = tt.load_torch_trace(
                args.trace, cache=not args.no_cache, workers=args.jobs, parser=args.parser
            )
        report = build_report(trace, args)
        if args.capture:
            report["capture"] = _capture_summary(args.capture, report["kernels"])
        if args.format == "csv":  # an empty table is an empty CSV, never an error
            text = csv_text(report, args.table)
            if tmp is not None:
                tmp.write_text(text)
        elif tmp is not None:
            with open(tmp, "w") as f:
                print_result(args, kernels_items(report, verbose=args.verbose, pairs_by=args.pairs_by), report, file=f)
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    elif args.format == "csv":
        sys.stdout.write(text)
    else:
        print_result(args, kernels_items(report, verbose=args.verbose, pairs_by=args.pairs_by), report)
    next_step(f"`ikp kernels {args.trace} --merge CAPTURE.npy -o {free_name('merged', '.json.gz')}` puts an ikp "
              "capture's regions into this trace", args)
    return 0


def build_report(trace, args) -> dict:
    """Every table of the report, as lists of row dicts (JSON-ready)."""
    from host_decode.torch_traces import trace as tt

    top = None if args.top == 0 else args.top
    cats = [c.strip() for c in args.category.split(",")] if args.category else sorted(tt.KERNEL_CATS)
    where = dict(step=args.step, stream=args.stream, device=args.device)
    sel = tt.select(trace, categories=cats, **where)
    # device time and stream gaps count every device activity (a memcpy keeps its stream busy too)
    device_sel = sel if args.category else tt.select(trace, categories=sorted(tt.DEVICE_CATS), **where)
    report = {
        "trace": trace.source,
        "events": len(trace),
        "phases": trace.meta.get("phases", {}),
        "skipped": trace.meta.get("skipped", {}),
        "cache": trace.meta.get("cache"),
        "parser": trace.meta.get("parser"),
        "selection": {
            "categories": cats,
            "step": args.step,
            "stream": args.stream,
            "device": args.device,
            "rows": int(len(sel.rows)),
            **sel.note,
        },
        "devices": tt.busy_summary(trace, device_sel),
    }
    report["kernels"] = _rows(tt.name_table(trace, sel, sort=args.sort, top=top, verbose=args.verbose))
    if not args.category:
        mem = tt.select(trace, categories=sorted(tt.MEMORY_CATS), **where)
        report["memory"] = _rows(tt.name_table(trace, mem, sort=args.sort, top=top, verbose=args.verbose))
    rt = tt.select(trace, categories=list(tt.RUNTIME_CATS), step=args.step)
    report["runtime"] = _rows(tt.name_table(trace, rt, sort=args.sort, top=top, verbose=args.verbose))
    if not args.no_gaps:
        gaps = tt.gap_analysis(
            trace,
            device_sel,
            gap_min_us=args.gap_min,
            gap_max_us=args.gap_max,
            bins=args.bins,
            log_bins=not args.linear,
            pair_sort=args.pairs_by,
            top=top,
            verbose=args.verbose,
        )
        hist = gaps["histogram"]
        lo, hi = gaps["range_us"]
        report["gaps"] = {
            "n_gaps": gaps["n_gaps"],
            "n_in_range": gaps["n_in_range"],
            "range_us": [lo, hi if math.isfinite(hi) else None],  # JSON has no infinity
            "zero_or_overlap_in_range": hist["zero"],
        }
        report["streams"] = _rows(gaps["streams"])
        edges = list(hist["edges_us"])
        report["histogram"] = [
            {"lo_us": edges[i], "hi_us": edges[i + 1], "count": int(c)} for i, c in enumerate(hist["counts"])
        ]
        report["pairs"] = _rows(gaps["pairs"])
    return report


def _rows(table: dict) -> list:
    from host_decode.core.jsonable import to_jsonable

    keys = list(table)
    n = len(table[keys[0]]) if keys else 0
    return [{k: to_jsonable(table[k][i]) for k in keys} for i in range(n)]


# ------------------------------------------------------------------------------- link to captures


def _capture_summary(capture_path: str, kernel_rows: list) -> dict:
    """Regions of an ikp capture, attached to the kernel row whose full name contains the capture's
    sidecar 'kernel' name (substring match)."""
    from host_decode.analysis.stats import region_summary, summary_rows
    from host_decode.load.capture import load_capture

    trace = load_capture(capture_path)
    kernel = str(trace.meta.get("kernel") or "")
    matches = [r["full_name"] for r in kernel_rows if kernel and kernel in r["full_name"]]
    rows = summary_rows(region_summary(trace), trace.names)
    return {"capture": capture_path, "kernel": kernel, "matched_rows": matches, "regions": rows}


def _merge(args) -> int:
    """Same as `ikp merge CAPTURE --torch TRACE -o OUT`."""
    from host_decode.cli.common import ensure_gzip, next_step, outputs, say_left_out
    from host_decode.load.capture import load_capture
    from host_decode.reports.merged import MAX_LANES, merge_with_torch_trace

    if not args.output:
        raise ValueError("--merge needs -o FILE for the merged trace")
    with outputs(args, args.trace, args.merge) as out:
        tmp = out.add(args.output)
        capture = load_capture(args.merge)
        merge_with_torch_trace(args.trace, capture, tmp, occurrence=args.occurrence, max_lanes=MAX_LANES)
        ensure_gzip(tmp)
    say_left_out(capture, MAX_LANES)
    print(f"wrote {args.output}", file=sys.stderr)
    next_step(f"`ikp view {args.output}` (the Perfetto UI, served offline)", args)
    return 0
