"""Everything of the ikp_cute device side that needs a GPU, in one run (issues 10 and 17):

1. GPU tests: pytest -m gpu tests/gpu/test_device_gpu.py tests/gpu/test_ring_gpu.py tests/gpu/test_pipelines_gpu.py
2. the example capture: examples/basic/run.py -> $OUT/capture.npy + .json + .pftrace
3. compute-sanitizer memcheck on misbehaving launches, every mode: capacity of 4 records per lane, a
   grid larger than the session, a runtime group= outside 0..num_groups-1; PyTorch's caching allocator
   off so an out-of-bounds store hits unallocated memory instead of a neighbouring pooled block
4. benchmarks/device_overhead.py -> $OUT/overhead.json
5. a small IKET trace (the twin kernel on 2 blocks x 2 warps x 4 regions) under IKET's launcher, IKET's
   own .pftrace and JSON packed into $OUT/iket_fixture.tar.gz
6. the benchmark with NVIDIA's IKET twin, under IKET's launcher -> $OUT/overhead_iket.json
7. benchmarks/record_ablation.py (the cursor record taken apart) beside IKET's twin, under IKET's
   launcher -> $OUT/record_ablation.json
and prints a short summary last. All output also goes to $OUT/suite.log ($OUT defaults to ./gpu_out).

    python gpu/device_suite.py [--skip tests,example,memcheck,bench,iket_fixture,iket,ablation]
    python gpu/device_suite.py --overflow-only      # the launches memcheck runs
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("PYTHONUNBUFFERED", "1")


def run_step(name, cmd, out_dir, timeout, env=None):
    """Run `cmd`, tee its output to out_dir/<name>.log; -> (returncode, output, seconds)."""
    t0 = time.time()
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
        output, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        output, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {timeout} s", 124
    with open(out_dir / "suite.log", "a") as log:  # one log file: few files come back from the machine
        log.write(f"\n===== {name}: {' '.join(map(str, cmd))}\n{output}")
    seconds = time.time() - t0
    print(f"== {name}: rc={rc} in {seconds:.0f} s", flush=True)
    print(output[-3000:], flush=True)
    return rc, output, seconds


def overflow_launches() -> int:
    """Launches that overflow: capacity 4 records per lane in every mode, and 6 blocks on a session
    sized for 4. Returns the number of records the device reported dropped (must be > 0)."""
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels import misuse, structured

    dropped = 0
    modes = ("cursor", "deferred", "smem", "lean", "atomic", "static")
    # (mode, grid, session blocks, case): capacity 4 records per lane; a grid larger than the session;
    # a runtime group outside 0..num_groups-1 (shift=1 and -1).
    cases = [(m, 4, 4, "structured") for m in modes] + [(m, 6, 4, "structured") for m in modes]
    cases += [(m, 4, 4, f"dynamic_group{shift:+d}") for m in modes if m != "lean" for shift in (1, -1)]
    for mode, blocks, session_blocks, case in cases:
        spec = ikp_cute.ProfileSpec(mode=mode, num_groups=2, num_blocks=session_blocks, records_per_lane=8)
        session = ikp_cute.Session(spec)
        x = torch.rand(blocks * 256, device="cuda")
        x_arg = from_dlpack(x, assumed_align=16)
        if case == "structured":
            compiled = cute.compile(
                structured.launch_structured, x_arg, Int32(5), session.kernel_arg(), session.spec, (blocks, 1, 1)
            )
            args = (x_arg, Int32(5), session.kernel_arg())
        else:
            shift = Int32(int(case[-2:]))
            buf, spec = session.kernel_arg(), session.spec
            compiled = cute.compile(misuse.launch_misuse, x_arg, Int32(5), shift, buf, spec, "dynamic_group", blocks)
            args = (x_arg, Int32(5), shift, session.kernel_arg())
        with session.zeroed_then_synced():
            compiled(*args)
        dropped += session.dropped_on_device() + session.stray_records()
        print(
            f"overflow {mode} {case} grid={blocks} session={session_blocks}: "
            f"dropped on device {session.dropped_on_device()} stray {session.stray_records()}"
        )
    torch.cuda.synchronize()
    return dropped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--skip",
        default="",
        help="comma list of steps to skip: tests,example,memcheck,bench,iket_fixture,iket,ablation",
    )
    p.add_argument("--overflow-only", action="store_true")
    p.add_argument(
        "--bench-args",
        default="",
        help="extra arguments for benchmarks/device_overhead.py",
    )
    args = p.parse_args(argv)
    if args.overflow_only:
        return 0 if overflow_launches() > 0 else 1

    out_dir = Path(os.environ.get("OUT") or ROOT / "gpu_out")
    out_dir.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    py = sys.executable
    summary = []

    smi = shutil.which("nvidia-smi")
    if smi:
        gpu = subprocess.run(
            [
                smi,
                "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        summary.append(f"gpu: {gpu}")

    if "tests" not in skip:
        rc, out, s = run_step(
            "pytest_gpu",
            [
                py,
                "-m",
                "pytest",
                "-q",
                "-m",
                "gpu",
                "tests/gpu/test_device_gpu.py",
                "tests/gpu/test_ring_gpu.py",
                "tests/gpu/test_pipelines_gpu.py",
                "-p",
                "no:cacheprovider",
            ],
            out_dir,
            400,
        )
        tail = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        summary.append(f"gpu tests: rc={rc} {tail[-1] if tail else ''} ({s:.0f} s)")

    if "example" not in skip:
        rc, out, s = run_step(
            "example",
            [py, "examples/basic/run.py", "--out", str(out_dir / "capture.npy")],
            out_dir,
            200,
        )
        line = next((ln for ln in out.splitlines() if ln.startswith("saved")), "")
        summary.append(f"example: rc={rc} {line}")

    if "memcheck" not in skip:
        sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
        rc, out, s = run_step(
            "memcheck",
            [
                sanitizer,
                "--tool",
                "memcheck",
                "--leak-check",
                "no",
                py,
                "gpu/device_suite.py",
                "--overflow-only",
            ],
            out_dir,
            300,
            env=env,
        )
        errors = re.findall(r"ERROR SUMMARY: (\d+) error", out)
        dropped = re.findall(r"dropped on device (\d+)", out)
        summary.append(
            f"memcheck: rc={rc} errors={errors[-1] if errors else '?'} dropped per launch={dropped} ({s:.0f} s)"
        )

    if "bench" not in skip:
        cmd = [
            py,
            "benchmarks/device_overhead.py",
            "--json",
            str(out_dir / "overhead.json"),
            *args.bench_args.split(),
        ]
        rc, out, s = run_step("bench", cmd, out_dir, 400)
        table_start = out.find("[")
        summary.append(f"benchmark: rc={rc} ({s:.0f} s)\n" + (out[table_start:] if table_start >= 0 else out[-2000:]))

    if "iket_fixture" not in skip:
        # A small real IKET trace (2 blocks x 2 warps x 4 regions of the twin kernel), kept with IKET's own
        # .pftrace and JSON: a fixture for reading IKET traces (issue 22).
        workdir = Path("/tmp/ikp_iket_fixture")
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        cmd = [py, "-m", "iket.cli.main", "--working-dir", str(workdir), "profile", "--postprocess", "perfetto", "--",
               py, str(ROOT / "benchmarks/device_overhead.py"), "--iket-fixture"]
        rc, out, s = run_step("iket_fixture", cmd, out_dir, 200)
        kept = []
        with tarfile.open(out_dir / "iket_fixture.tar.gz", "w:gz") as tar:
            for path in sorted(workdir.rglob("*")):
                if path.is_file() and path.stat().st_size < 8 << 20:
                    tar.add(path, arcname=str(path.relative_to(workdir)))
                    kept.append(f"{path.relative_to(workdir)} ({path.stat().st_size} B)")
        summary.append(f"iket fixture: rc={rc} ({s:.0f} s) files: {', '.join(kept) or 'none'}")

    if "iket" not in skip:
        # NVIDIA IKET needs its own launcher, which runs the script twice (sizing, then profiling);
        # the benchmark then times every ikp_cute mode and the IKET twin in the same process.
        workdir = Path("/tmp/ikp_iket_wd")
        workdir.mkdir(parents=True, exist_ok=True)
        cmd = [
            py,
            "-m",
            "iket.cli.main",
            "--working-dir",
            str(workdir),
            "profile",
            "--postprocess",
            "none",
            "--",
            py,
            str(ROOT / "benchmarks/device_overhead.py"),
            "--iket",
            "--json",
            str(out_dir / "overhead_iket.json"),
        ]
        rc, out, s = run_step("iket", cmd, out_dir, 480)
        starts = [m.start() for m in re.finditer(r"\[NVIDIA", out)]
        summary.append(
            f"benchmark under IKET's launcher (last pass): rc={rc} ({s:.0f} s)\n"
            + (out[starts[-1] : starts[-1] + 2500] if starts else out[-2000:])
        )

    if "ablation" not in skip:
        # where a record's time goes: the cursor record taken apart, beside the shipped cursor and IKET's
        # twin in one process (IKET's launcher again: it records nothing outside it)
        workdir = Path("/tmp/ikp_iket_ablation_wd")
        workdir.mkdir(parents=True, exist_ok=True)
        launcher = [py, "-m", "iket.cli.main", "--working-dir", str(workdir), "profile", "--postprocess", "none"]
        script = [py, str(ROOT / "benchmarks/record_ablation.py"), "--iket"]
        cmd = [*launcher, "--", *script, "--json", str(out_dir / "record_ablation.json")]
        rc, out, s = run_step("ablation", cmd, out_dir, 480)
        starts = [m.start() for m in re.finditer(r"\[NVIDIA", out)]
        summary.append(
            f"record ablation under IKET's launcher (last pass): rc={rc} ({s:.0f} s)\n"
            + (out[starts[-1] : starts[-1] + 2500] if starts else out[-2000:])
        )

    print("\n===== summary =====")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
