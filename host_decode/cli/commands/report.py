"""ikp report CAPTURE: one self-contained offline HTML page exploring one kernel (host_decode.reports.html)."""

NAME = "report"
HELP = ("write a self-contained HTML explorer of one kernel: timeline stats, per-region hardware metrics, "
        "annotated source and SASS")
EXAMPLE = (
    "ikp report examples/basic/capture.npy --source examples/basic/kernel.py -o basic.html\n"
    "  ikp report CAPTURE.npy --cubin kernel.cubin --ncu sass.csv --source kernel.py -o report.html"
)


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_names, add_progress

    p.add_argument("capture", help="BUFFER.npy (its BUFFER.json sidecar is read when present), or a directory of "
                                   "captures (a session, e.g. session.ring.save's): every launch on one page")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--map", help="pc2region map JSON (host_decode.hardware.pc2region RegionMap.save)")
    p.add_argument(
        "--cubin",
        help="the kernel's cubin: builds the map when --map is absent, and gives the SASS text (needs nvdisasm)",
    )
    p.add_argument("--kernel", help="kernel symbol inside the cubin / per-PC data (default: the one with markers)")
    hw = p.add_mutually_exclusive_group()
    hw.add_argument(
        "--ncu", help="Nsight Compute source-page CSV (ncu -i rep.ncu-rep --page source --csv --print-source sass)"
    )
    hw.add_argument("--cupti", help="CUPTI PC-sampling JSON (host_decode.hardware.adapters.cupti)")
    hw.add_argument("--nvbit", help="NVBit-style per-PC JSON (host_decode.hardware.adapters.nvbit)")
    p.add_argument(
        "--source", help="the kernel's source file (Python or CUDA C++), shown with lines coloured by region"
    )
    add_names(p, "the capture (every capture of a directory)")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="join per-PC data even when it does not match the map (reported on the page)",
    )
    add_force(p)
    add_progress(p)


def run(args) -> int:
    from pathlib import Path

    from host_decode.analysis.sessions import load_trace
    from host_decode.cli.common import Step, next_step, outputs
    from host_decode.load.inputs import read_names
    from host_decode.reports.html import write_report

    inputs = [args.capture, args.map, args.cubin, args.ncu, args.cupti, args.nvbit, args.source, args.names]
    with outputs(args, inputs) as out:
        tmp = out.add(args.output)
        names = read_names(args.names)
        # a directory is a session: its launches concatenated, the ring's counts in meta
        trace = load_trace([args.capture], progress=args.progress, names=names)
        region_map, sass_text, pc_files = _region_map(args, trace)
        pc_table = _pc_table(args, region_map, trace)
        source_text = None
        if args.source:
            source_text = Path(args.source).read_text(encoding="utf-8", errors="replace")
        with Step("writing the report", args):
            write_report(
                tmp,
                trace,
                region_map=region_map,
                pc_table=pc_table,
                source_text=source_text,
                source_path=args.source,
                sass_text=sass_text,
                pc_files=pc_files,
                capture_path=args.capture,
                force_join=args.allow_mismatch,
            )
    size = Path(args.output).stat().st_size
    print(f"wrote {args.output} ({size / 1024:.0f} KiB)")
    next_step(f"open {args.output} in a browser (one self-contained file, works offline)", args)
    return 0


def _region_map(args, trace):
    from host_decode.cli.common import cubin_errors, load_map, read_cubin_map
    from host_decode.hardware import pc2region
    from host_decode.reports.html_hardware import read_sass_listing

    region_map = load_map(args.map) if args.map else None
    sass_text = pc_files = None
    if args.cubin:
        if region_map is None:
            cubin, region_map = read_cubin_map(args.cubin, kernel=args.kernel, names=trace.names)
        else:
            cubin = pc2region.read_cubin(args.cubin)
        with cubin_errors(args.cubin):
            sass_text, pc_files = read_sass_listing(cubin, region_map.kernel)
    return region_map, sass_text, pc_files


def _pc_table(args, region_map, trace):
    """Per-PC data; --kernel defaults to the kernel with markers (the map's, else the capture's sidecar
    kernel), else the file's only one."""
    from host_decode.cli.common import read_pc_table

    for flag in ("ncu", "cupti", "nvbit"):
        path = getattr(args, flag)
        if path:
            return read_pc_table(
                flag,
                path,
                args.kernel,
                region_map,
                default_kernel=(trace.meta or {}).get("kernel"),
                allow_mismatch=args.allow_mismatch,
            )
    return None
