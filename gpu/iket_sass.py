"""IKET's per-event code as its launcher patches it, captured on the GPU (one command, ~4-6 minutes).

What a CPU cannot show: IKET compiles each event to a timer read, an OR of the event id, a placeholder
store and a `PMTRIG` placeholder (benchmarks/iket_sass.py, docs/iket_comparison.md); its launcher
rewrites the placeholders when the module is loaded, in memory. This script gets the loaded code:

1. IKET's launcher, `--keep`, on a fixture (IKET's twin of the overhead kernel: 8 regions of 32 FMAs per
   iteration, 4 iterations, 2 blocks x 2 warps; its input copied to the GPU, so no other kernel runs
   before it). Kept under $OUT/iket_sass/: the cubins IKET's tracker pass saw (the original code), the
   tracker JSON, the instrument config it generated, the injection config of its profiling pass, IKET's
   JSON trace, the launcher's log.
2. cuda-gdb (when on PATH), twice, stopping at each kernel launch (`set cuda break_on_launch
   application`) and disassembling the loaded code: `gdb_plain.txt` with instrumentation compiled in but
   no launcher (calibration: the loaded code must equal the cubin's), `gdb_patched.txt` with the
   injection environment IKET's launcher gave its profiling pass (CUDA_INJECTION64_PATH,
   IKET_INJECTION_CONFIG of step 1). No kernel runs past its first instruction (the debugger kills it).
3. benchmarks/iket_sass.py --patched on each: per instrument point, the instructions at its PCs,
   unpatched beside loaded; printed last, also `patched_table.txt` / `.json`.
4. benchmarks/iket_sass.py on its own: the per-event SASS of IKET's (unpatched) event, the cursor, the v1
   floor and the pipeline tracer's records with this machine's DSL libraries -> `per_event.txt` / `.json`.

    python gpu/iket_sass.py              # everything, under $OUT/iket_sass ($OUT defaults to ./gpu_out)
    python gpu/iket_sass.py --fixture    # the workload of steps 1 and 2 (run by them)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
KERNEL = "iket_overhead_kernel"
GDB_STOPS = 6  # kernel launches to stop at (IKET may launch kernels of its own before the twin)


def fixture() -> int:
    """The IKET twin, compiled with IKET's instrumentation on, launched once on 2 blocks x 2 warps."""
    import numpy as np
    import torch
    from cutlass import Int32, cute
    from cutlass.cute.runtime import from_dlpack

    from ikp_cute.testing.kernels.overhead import launch_iket_overhead

    x = torch.from_numpy(np.random.default_rng(0).random(2 * 64, dtype=np.float32)).cuda()  # a copy, no kernel
    x_arg = from_dlpack(x, assumed_align=16)
    compiled = cute.compile(launch_iket_overhead, x_arg, Int32(4), 8, 2, 64, options="iket")
    compiled(x_arg, Int32(4))
    torch.cuda.synchronize()
    print(f"fixture: IKET twin launched (2 blocks x 2 warps, 4 x 8 regions); x[0] = {float(x[0]):.6f}")
    return 0


def run(name: str, cmd: list[str], out: Path, timeout: int, env=None, cwd=ROOT) -> tuple[int, str]:
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {timeout} s", 124
    (out / f"{name}.log").write_text(f"$ {' '.join(cmd)}\n{text}")
    print(f"== {name}: rc={rc} in {time.time() - t0:.0f} s", flush=True)
    return rc, text if isinstance(text, str) else text.decode(errors="replace")


def launcher_pass(out: Path, py: str) -> Path:
    """Step 1. Returns IKET's output directory (kept)."""
    work = Path("/tmp/ikp_iket_sass_wd")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    iket_out = work / "iket_out"
    cmd = [py, "-m", "iket.cli.main", "--working-dir", str(work), "--output-dir", str(iket_out), "--clobber",
           "--log-level", "info", "profile", "--keep", "--postprocess", "json", "--",
           py, str(Path(__file__).resolve()), "--fixture"]
    run("iket_launcher", cmd, out, 360, cwd=work)
    for path in sorted(iket_out.rglob("*")) if iket_out.exists() else []:
        if path.is_file() and path.stat().st_size < 16 << 20 and not path.name.endswith(".bin"):
            dest = out / "launcher" / path.relative_to(iket_out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
    return iket_out


def twin_cubin(out: Path) -> Path | None:
    """The cubin of the twin among those IKET's tracker pass saved."""
    for path in sorted((out / "launcher").rglob("*.cubin")):
        if KERNEL.encode() in path.read_bytes():
            return path
    return None


def gdb_pass(name: str, out: Path, py: str, injection: dict | None) -> Path | None:
    """Step 2: disassemble the loaded code at each of the first GDB_STOPS launches."""
    gdb = shutil.which("cuda-gdb")
    if gdb is None:
        print("cuda-gdb not on PATH: the loaded (patched) code cannot be read; step 2 skipped")
        return None
    env = dict(os.environ, CUTE_DSL_COMPILER_OPT="iket", PYTHONUNBUFFERED="1")
    env.update(injection or {})
    per_stop = ["info cuda kernels", "disassemble", "x/1200i $pc"]
    commands = ["set pagination off", "set confirm off", "set width 0", "set cuda break_on_launch application",
                "run"] + (per_stop + ["continue"]) * GDB_STOPS + ["kill"]
    cmd = [gdb, "-batch", "-nx"] + [a for c in commands for a in ("-ex", c)]
    cmd += ["--args", py, str(Path(__file__).resolve()), "--fixture"]
    rc, text = run(f"gdb_{name}", cmd, out, 240, env=env)
    path = out / f"gdb_{name}.txt"
    path.write_text(text)
    return path


def injection_env(iket_out: Path) -> dict | None:
    """CUDA_INJECTION64_PATH and IKET_INJECTION_CONFIG as IKET's launcher set them for its profiling pass."""
    from iket.profiler import default_injection_lib

    config = iket_out / "iket" / "iket.config.json"
    if not config.exists():
        print(f"{config} missing (the launcher's profiling pass did not run): no patched capture")
        return None
    return {"CUDA_INJECTION64_PATH": str(default_injection_lib), "IKET_INJECTION_CONFIG": str(config)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", action="store_true", help="run the workload only")
    args = ap.parse_args(argv)
    if args.fixture:
        return fixture()
    out = Path(os.environ.get("OUT", "gpu_out")) / "iket_sass"
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    iket_out = launcher_pass(out, py)
    cubin = twin_cubin(out)
    print(f"twin cubin from IKET's tracker pass: {cubin or 'not found (the table uses a cubin compiled here)'}")
    captures = {"plain": gdb_pass("plain", out, py, None)}
    injection = injection_env(iket_out)
    if injection is not None:
        captures["patched"] = gdb_pass("patched", out, py, injection)
    tables = []
    for name, path in captures.items():
        if path is None:
            continue
        cmd = [py, str(ROOT / "benchmarks/iket_sass.py"), "--patched", str(path),
               "--json", str(out / f"{name}_table.json")] + (["--cubin", str(cubin)] if cubin else [])
        rc, text = run(f"table_{name}", cmd, out, 300)
        (out / f"{name}_table.txt").write_text(text)
        tables.append(f"--- {name} (rc={rc}) ---\n{text[-6000:]}")
    rc, text = run("per_event", [py, str(ROOT / "benchmarks/iket_sass.py"), "--json", str(out / "per_event.json")],
                   out, 300)
    (out / "per_event.txt").write_text(text)
    print(text[-5000:])
    print("\n===== IKET per-event code: unpatched (cubin) vs loaded =====")
    print("\n".join(tables) or "no disassembly captured (see the logs under " + str(out) + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
