"""ikp report CAPTURE: one self-contained offline HTML page exploring one kernel (host_decode.reports.html)."""

NAME = "report"
HELP = "write a self-contained HTML explorer of one kernel: timeline stats, per-region hardware metrics, annotated source and SASS"


def add_arguments(p) -> None:
    p.add_argument("capture", help="BUFFER.npy (its BUFFER.json sidecar is read when present)")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--map", help="pc2region map JSON (host_decode.hardware.pc2region RegionMap.save)")
    p.add_argument("--cubin", help="the kernel's cubin: builds the map when --map is absent, and gives the SASS text (needs nvdisasm)")
    p.add_argument("--kernel", help="kernel symbol inside the cubin / per-PC data (default: the one with markers)")
    hw = p.add_mutually_exclusive_group()
    hw.add_argument("--ncu", help="Nsight Compute source-page CSV (ncu -i rep.ncu-rep --page source --csv --print-source sass)")
    hw.add_argument("--cupti", help="CUPTI PC-sampling JSON (host_decode.hardware.adapters.cupti)")
    hw.add_argument("--nvbit", help="NVBit-style per-PC JSON (host_decode.hardware.adapters.nvbit)")
    p.add_argument("--source", help="the kernel's source file (Python or CUDA C++), shown with lines coloured by region")
    p.add_argument("--names", help="JSON names sidecar {'events': {...}, 'groups': {...}} (overrides BUFFER.json's)")
    p.add_argument("--force", action="store_true", help="join per-PC data even when it does not match the map (reported on the page)")


def run(args) -> int:
    from pathlib import Path

    from host_decode.core.decoder import load_capture
    from host_decode.core.model import Names
    from host_decode.reports.html import write_report

    names = Names.read(args.names) if args.names else None
    trace = load_capture(args.capture, names=names)
    region_map, sass_text, pc_files = _region_map(args, trace)
    pc_table = _pc_table(args)
    source_text = None
    if args.source:
        source_text = Path(args.source).read_text(encoding="utf-8", errors="replace")
    out = write_report(args.output, trace, region_map=region_map, pc_table=pc_table, source_text=source_text,
                       source_path=args.source, sass_text=sass_text, pc_files=pc_files, capture_path=args.capture, force_join=args.force)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


def _region_map(args, trace):
    from host_decode.hardware import pc2region
    from host_decode.reports.html import read_sass_listing

    region_map = pc2region.load_map(args.map) if args.map else None
    sass_text = pc_files = None
    if args.cubin:
        cubin = pc2region.read_cubin(args.cubin)
        kernel = args.kernel or (region_map.kernel if region_map is not None else None)
        if region_map is None:
            region_map = pc2region.build_map(cubin, kernel=kernel, names=trace.names)
        sass_text, pc_files = read_sass_listing(cubin, region_map.kernel)
    return region_map, sass_text, pc_files


def _pc_table(args):
    if args.ncu:
        from host_decode.hardware.adapters.ncu import read_ncu_csv

        return read_ncu_csv(args.ncu, kernel=args.kernel)
    if args.cupti:
        from host_decode.hardware.adapters.cupti import read_cupti_json

        return read_cupti_json(args.cupti, kernel=args.kernel)
    if args.nvbit:
        from host_decode.hardware.adapters.nvbit import read_nvbit_json

        return read_nvbit_json(args.nvbit, kernel=args.kernel)
    return None
