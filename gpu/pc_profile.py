"""Per-region hardware metrics of a real instrumented CuTe DSL kernel (issue 5, item 5), on the GPU machine.

Profiles the project's example kernel (examples/basic/kernel.py: producer "load" / consumer "compute"
regions inside "tile", ikp_cute device API) twice, each in its own process:

1. Nsight Compute: ``ncu --section SourceCounters --import-source yes`` on one launch, then the
   source page as CSV (``ncu -i rep --page source --csv --print-source sass``);
2. CUPTI PC sampling from Python (host_decode.hardware.adapters.cupti.PcSampler, ctypes on libcupti).
   If this part fails (library, driver or permission), the ncu part still runs and is reported.

Each process also writes the kernel's cubin, its pc2region map and the capture (the same compile in
both, checked by sha256). Then it joins each per-PC table with the map, prints the per-region tables
(exclusive and inclusive), checks conservation (per-region sums == input totals), attaches the result
to the decoded trace, and copies small fixtures to $OUT/fixtures/ for tests/fixtures/pc/.

    python gpu/pc_profile.py [--skip ncu,cupti] [--blocks 264] [--tiles 64]

Output: $OUT (or ./gpu_out/pc_profile when OUT is unset).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("PYTHONUNBUFFERED", "1")

KERNEL_REGEX = "regex:tiles_kernel"
EVENTS = ["tile", "load", "compute", "tile_done"]


# ================================================================================================
# worker: compile, map, run (optionally under CUPTI PC sampling)
# ================================================================================================


def worker(out: Path, cupti: bool, blocks: int, tiles: int, launches: int, sampling_period: int | None) -> int:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    torch.zeros(1, device="cuda")  # a current context: CUPTI attaches to it before the module loads
    sampler = None
    if cupti:
        try:
            from host_decode.hardware.adapters.cupti import PcSampler

            sampler = PcSampler(sampling_period=sampling_period).start()
            print("CUPTI PC sampling enabled with", sampler.lib_path, f"({len(sampler.reasons)} stall reasons)")
        except Exception as e:  # keep going: the map and capture are still useful
            (out / "cupti_error.txt").write_text(traceback.format_exc())
            print(f"CUPTI PC sampling unavailable: {e}")
    compiled, session, args = _compile(out, blocks, tiles)
    write_map(out, compiled, session)
    if sampler is not None:
        try:
            print(f"CUPTI CRC of the mapped cubin: {sampler.cubin_crc(bytes(compiled.__cubin__)):#x}")
        except Exception as e:  # the samples are still usable, filtered by function name only
            print(f"cuptiGetCubinCrc failed: {e}")
    for _ in range(launches):
        with session.zeroed_then_synced():
            compiled(*args)
        if sampler is not None:  # kernel-serialized mode: collect this launch before the next kernel runs
            try:
                sampler.flush()
            except Exception as e:
                print(f"CUPTI flush failed: {e}")
                (out / "cupti_error.txt").write_text(traceback.format_exc())
                sampler = None
    session.save(out / "capture.npy")
    if sampler is not None:
        try:
            result = sampler.stop()
            sampler.save(str(out / "cupti.json"))
            print(
                f"CUPTI: {len(result['records'])} PC records, {result['total_samples']} samples, "
                f"{result['dropped_samples']} dropped, buffer full: {result['hardware_buffer_full']}"
            )
        except Exception as e:
            (out / "cupti_error.txt").write_text(traceback.format_exc())
            print(f"CUPTI collection failed: {e}")
    return 0


def _compile(out: Path, blocks: int, tiles: int):
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.basic.kernel import THREADS, launch_tiles

    x = torch.rand(blocks * tiles * THREADS, device="cuda")
    y = torch.zeros(blocks * THREADS, device="cuda")
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=blocks, records_per_lane=4 * tiles + 8, events=EVENTS)
    session = ikp_cute.Session(spec, groups=["producer", "consumer"], kernel="tiles_kernel")
    x_arg, y_arg = from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16)
    compiled = cute.compile(
        launch_tiles,
        x_arg,
        y_arg,
        Int32(tiles),
        session.kernel_arg(),
        session.spec,
        blocks,
        options=f"--keep-cubin --generate-line-info --dump-dir {out}",
    )
    return compiled, session, (x_arg, y_arg, Int32(tiles), session.kernel_arg())


def write_map(out: Path, compiled, session) -> None:
    from host_decode.hardware import pc2region

    cubin = bytes(compiled.__cubin__)
    (out / "kernel.cubin").write_bytes(cubin)
    (out / "names.json").write_text(json.dumps(session.names().to_json()))
    try:
        m = pc2region.map_compiled(compiled, names=session.names())
    except Exception as e:  # keep the launch going (ncu needs it); the map can be rebuilt from kernel.cubin
        print(f"pc2region failed: {e}")
        (out / "map_error.txt").write_text(traceback.format_exc())
        return
    m.save(str(out / "map.json"))
    print(f"map: {m.kernel}: {m.pc.size} instructions, {len(m.markers)} marker records, regions {m.summary()}")
    for p in m.problems:
        print("  map problem:", p)


# ================================================================================================
# driver
# ================================================================================================


def run(cmd, log: Path, timeout: int, stdout_to: Path | None = None) -> int:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    t0 = time.time()
    try:
        if stdout_to is not None:
            with open(stdout_to, "w") as f:
                proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.PIPE, text=True, timeout=timeout)
            text = proc.stderr
        else:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            text = proc.stdout + proc.stderr
        rc = proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {timeout} s", 124
    log.write_text(text)
    print(f"  rc={rc} in {time.time() - t0:.0f} s; last lines:\n" + "\n".join(text.splitlines()[-15:]), flush=True)
    return rc


def find_ncu() -> str | None:
    for c in (
        shutil.which("ncu"),
        "/usr/local/cuda/bin/ncu",
        *sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")),
    ):
        if c and os.access(str(c), os.X_OK):
            return str(c)
    return None


def _worker_cmd(worker: str, d: Path, args, launches: int) -> list[str]:
    """This script re-run as a worker process (one compile + launches, files into d)."""
    return [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--dir", str(d),
            "--blocks", str(args.blocks), "--tiles", str(args.tiles), "--launches", str(launches)]


def profile_ncu(out: Path, args) -> Path | None:
    ncu = find_ncu()
    if ncu is None:
        print("ncu not found: skipping the Nsight Compute part")
        return None
    d = out / "ncu"
    d.mkdir(parents=True, exist_ok=True)
    worker_cmd = _worker_cmd("run", d, args, launches=1)
    rc = run(
        [
            ncu,
            "--section",
            "SourceCounters",
            "--import-source",
            "yes",
            "-k",
            KERNEL_REGEX,
            "-c",
            "1",
            "-f",
            "-o",
            str(d / "rep"),
            *worker_cmd,
        ],
        d / "ncu_profile.log",
        timeout=900,
    )
    if rc != 0 or not (d / "rep.ncu-rep").exists():
        print("ncu profiling failed (see ncu_profile.log)")
        return None
    rc = run(
        [ncu, "-i", str(d / "rep.ncu-rep"), "--page", "source", "--csv", "--print-source", "sass"],
        d / "ncu_export.log",
        timeout=300,
        stdout_to=d / "sass.csv",
    )
    return d if rc == 0 else None


def profile_cupti(out: Path, args) -> Path | None:
    d = out / "cupti"
    d.mkdir(parents=True, exist_ok=True)
    cmd = _worker_cmd("cupti", d, args, launches=args.launches)
    if args.sampling_period:
        cmd += ["--sampling-period", str(args.sampling_period)]
    run(cmd, d / "cupti_run.log", timeout=600)
    return d if (d / "cupti.json").exists() else None


def report(name: str, d: Path, data: Path, reader, out: Path) -> dict | None:
    from host_decode.core.errors import DecodeError
    from host_decode.hardware import join, pc2region
    from host_decode.load.capture import load_capture

    if not (d / "map.json").exists():  # the worker could not map: try again here
        names = json.loads((d / "names.json").read_text())
        pc2region.build_map((d / "kernel.cubin").read_bytes(), names=names).save(str(d / "map.json"))
    m = pc2region.load_map(str(d / "map.json"))
    try:
        table = reader(str(data), kernel=m.kernel)
    except DecodeError:
        table = reader(str(data))  # the data's only kernel, whatever its name
    try:
        result = join.join(m, table)
    except DecodeError as e:
        print(f"{name}: {e}\n{name}: joining anyway (force=True) to show what the data holds")
        result = join.join(m, table, force=True)
    print(f"\n===== {name}: {data} =====")
    for inclusive in (False, True):  # hardware/ returns the table as data (join.table); printed plainly here
        jt = join.table(result, inclusive=inclusive)
        print(jt.title)
        print(" | ".join(h for h, _ in jt.columns))
        for row in jt.rows:
            print(" | ".join(row))
        print(jt.footer)
    conserved = {c: (float(result.columns[c].sum()), float(v)) for c, v in result.totals.items()}
    bad = {c: v for c, v in conserved.items() if abs(v[0] - v[1]) > 1e-6 * max(1.0, abs(v[1]))}
    print(f"conservation (per-region sums == input totals): {'ok' if not bad else bad}")
    trace = load_capture(str(d / "capture.npy"))
    payload = join.attach_to_trace(trace, result)
    print(
        "attached to the trace as meta['regions_hw']; per event (inclusive):",
        json.dumps(
            {
                v["paths"][0].split("/")[-1]: {
                    "samples_share": round(v["samples_share"], 4),
                    "inst_executed": v["inst_executed"],
                }
                for v in payload["by_event"].values()
            }
        ),
    )
    (out / f"{name}_regions.json").write_text(json.dumps(result.to_json(), indent=1))
    return {
        "ok": result.check["ok"],
        "conserved": not bad,
        "samples": result.totals.get("samples"),
        "moved": result.moved_samples,
        "instrumentation": result.instrumentation(),
    }


def copy_fixtures(out: Path, dirs: dict[str, Path]) -> None:
    fx = out / "fixtures"
    fx.mkdir(exist_ok=True)
    pairs = {"ncu": [("sass.csv", "tiles_real_ncu.csv")], "cupti": [("cupti.json", "tiles_real_cupti.json")]}
    for name, d in dirs.items():
        if d is None:
            continue
        for src, dst in pairs[name] + [
            ("map.json", f"tiles_real_{name}.map.json"),
            ("kernel.cubin", f"tiles_real_{name}.cubin"),
        ]:
            if (d / src).exists():
                shutil.copy(d / src, fx / dst)
    print(f"fixtures for tests/fixtures/pc/: {sorted(p.name for p in fx.iterdir())}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", choices=["run", "cupti"], help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--skip", default="", help="comma list of parts to skip: ncu,cupti")
    p.add_argument("--blocks", type=int, default=264)
    p.add_argument("--tiles", type=int, default=64)
    p.add_argument("--launches", type=int, default=20, help="launches under CUPTI (more samples)")
    p.add_argument("--sampling-period", type=int, default=None, help="CUPTI: 2**N cycles (5..31)")
    args = p.parse_args(argv)
    if args.worker:
        return worker(
            Path(args.dir), args.worker == "cupti", args.blocks, args.tiles, args.launches, args.sampling_period
        )

    out = Path(os.environ.get("OUT") or ROOT / "gpu_out" / "pc_profile")
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    dirs = {
        "ncu": None if "ncu" in skip else profile_ncu(out, args),
        "cupti": None if "cupti" in skip else profile_cupti(out, args),
    }
    from host_decode.hardware.adapters.cupti import read_cupti_json
    from host_decode.hardware.adapters.ncu import read_ncu_csv

    summary = {}
    shas = {}
    for name, d in dirs.items():
        if d is None:
            summary[name] = "not captured"
            continue
        shas[name] = hashlib.sha256((d / "kernel.cubin").read_bytes()).hexdigest()
        data, reader = (d / "sass.csv", read_ncu_csv) if name == "ncu" else (d / "cupti.json", read_cupti_json)
        try:
            summary[name] = report(name, d, data, reader, out)
        except Exception as e:
            traceback.print_exc()
            summary[name] = f"failed: {e}"
    if len(set(shas.values())) > 1:
        print("note: the two processes compiled different cubins; each was joined with its own map")
    copy_fixtures(out, dirs)
    print("\nSUMMARY", json.dumps(summary, indent=1, default=str))
    return 0 if any(isinstance(v, dict) and v.get("ok") for v in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
