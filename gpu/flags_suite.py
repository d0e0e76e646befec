"""The flag examples on a GPU machine in one call: build, check, time, skew, traced and untraced (docs/flags.md).

    python gpu/flags_suite.py [--launches N] [--only gpu_tests,megakernel_deps,distributed_1gpu,...]

0. gpu_tests: tests/gpu/test_flags_gpu.py (records and payloads of a traced signal and wait, a wait that does not fit
   dropped whole, the clock's offset);
1. examples/megakernel_deps/run.py --trace (one GPU): both library waits, skew 0 and 20 us on one task; the
   kernel also compiled inside trace_pipelines (default level, and flags only) and timed beside the plain one;
2. examples/distributed/run.py --world-size 1 --trace (one GPU, 2 ranks simulated in one launch);
3. with two or more GPUs visible, torchrun --nproc-per-node 2 examples/distributed/run.py --trace (one process
   per GPU, torch symmetric memory without multicast, a capture per rank with its clock offset), with
   NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 set here, in the child
   environment, and asserted;
4. ci_captures: both examples traced on a small problem and a small grid (16 CTAs, 128 records per lane), their
   captures under $OUT/ci_captures (about 130 KB each: what CI can keep);
5. ikp_waits: `ikp waits CAPTURE --format json` (host_decode's CLI, as a user runs it) on every capture the steps
   before saved (a distributed step's folder of rank captures as one session): its flag events, matches and
   malformed records per capture; a capture whose records the host counts as malformed fails the step.
Each step's JSON, captures and log go under $OUT (default ./flags_out); printed last: the tracer's cost (traced /
plain median, same process, same run; target <= 1.02 at the default level), what the host finds for the
injected skew, the host's reading of every capture, and the examples' tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)
STEPS = ("gpu_tests", "megakernel_deps", "distributed_1gpu", "distributed_2gpu", "ci_captures", "ikp_waits")
SMALL_DEPS = ["--m", "512", "--k", "256", "--n1", "256", "--n2", "256", "--ctas", "16", "--records-per-lane", "128"]
SMALL_DIST = ["--m", "512", "--k", "256", "--n", "256", "--ctas-per-rank", "8", "--records-per-lane", "128"]


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def commands(step: str, out: Path, launches: int) -> list[list[str]]:
    py = sys.executable
    deps, dist = str(ROOT / "examples/megakernel_deps/run.py"), str(ROOT / "examples/distributed/run.py")
    common = ["--out", str(out / step), "--launches", str(launches), "--trace"]
    if step == "gpu_tests":
        return [[py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_flags_gpu.py"]]
    if step == "megakernel_deps":
        return [[py, deps, *common]]
    if step == "distributed_1gpu":
        return [[py, dist, "--world-size", "1", *common]]
    if step == "ci_captures":
        small = ["--launches", "5", "--trace"]
        return [[py, deps, "--out", str(out / step / "megakernel_deps"), *small, *SMALL_DEPS],
                [py, dist, "--world-size", "1", "--out", str(out / step / "distributed_1gpu"), *small, *SMALL_DIST]]
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
    return [launcher + ["--nproc-per-node", "2", dist, *common]]


def saved_captures(out: Path) -> list[Path]:
    """What the steps saved: each megakernel capture, and each distributed step's folder of rank captures."""
    found = []
    for folder in sorted(out.rglob("captures")):
        for p in sorted(folder.iterdir()):
            if p.is_dir() and any(p.glob("*.npy")) or p.suffix == ".npy":
                found.append(p)
    return found


def host_reading(out: Path) -> tuple[list[str], int]:
    """`ikp waits PATH --format json` on every saved capture: (a line each, how many failed)."""
    lines, failed = [], 0
    for path in saved_captures(out):
        proc = subprocess.run([sys.executable, "-m", "host_decode.cli", "waits", str(path), "--format", "json"],
                              cwd=ROOT, capture_output=True, text=True)
        where = path.relative_to(out)
        if proc.returncode:
            failed += 1
            lines.append(f"{where}: ikp waits exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        data = json.loads(proc.stdout)
        flags = data.get("flags", data)
        bad = {k: v for k, v in flags["problems"].items() if v}
        failed += bool(bad)
        steps = flags.get("steps") or [{}]
        lines.append(f"{where}: {flags['events']['signals']} signals, {flags['events']['waits']} waits, match "
                     f"{flags['match']}, malformed {bad or 'none'}, clock bound {flags['clock']['error_bound_ns']} ns, "
                     f"path {steps[0].get('path_ns')} ns")
    return lines, failed


def findings(out: Path) -> list[str]:
    """The tracer's cost and the traced runs' findings, from the steps' JSON files."""
    lines = []
    for path in sorted(p for p in out.rglob("*.json") if p.name in ("megakernel_deps.json", "distributed.json")):
        summary = json.loads(path.read_text())
        for name, t in summary.get("timing", {}).items():
            if "vs_plain" in t:
                lines.append(f"{path.parent.relative_to(out)}: {name}: {t['vs_plain']:.4f} x plain "
                             f"({t['median_ms']:.4f} ms)")
        for r in summary.get("runs", []):
            g = r.get("traced")
            if g is None:
                continue
            skew = r.get("skew_ns", r.get("delay_ns"))
            extra = (f", longest wait {g.get('longest_wait_ns')} ns released by block "
                     f"{g.get('longest_wait_released_by_block')} (on the path: {g.get('releaser_on_path')})"
                     if "longest_wait_ns" in g else
                     f", median wait on the delayed rank {g.get('wait_ns_median_on_delayed_rank')} ns vs "
                     f"{g.get('wait_ns_median_other')} ns")
            where = path.parent.relative_to(out)
            lines.append(f"{where}: {r['wait']} {r['mode']} skew/delay {skew} ns: {g['events']} flag events, "
                         f"match {g['match']}, path {g['path_ns']} ns{extra}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--only", default=",".join(STEPS))
    a = ap.parse_args(argv)
    out = Path(os.environ.get("OUT") or "flags_out")
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUTE_DSL_ARCH=os.environ.get("CUTE_DSL_ARCH", "sm_90a"))
    env.update(NO_MULTICAST)
    wrong = {k: env.get(k) for k, v in NO_MULTICAST.items() if env.get(k) != v}
    assert not wrong, f"NVLink multicast must stay off: {wrong}"
    gpus = gpu_count()
    summary, failed = [], 0
    for step in [s for s in a.only.split(",") if s]:
        if step not in STEPS:
            raise SystemExit(f"--only: unknown step {step!r}; steps: {', '.join(STEPS)}")
        if step == "distributed_2gpu" and gpus < 2:
            summary.append(f"{step}: skipped ({gpus} GPU visible)")
            continue
        t0 = time.time()
        if step == "ikp_waits":
            lines, bad = host_reading(out)
            (out / f"{step}.log").write_text("\n".join(lines))
            failed += bool(bad)
            summary.append(f"--- {step}: {len(lines)} captures read, {bad} failed, in {time.time() - t0:.0f} s\n"
                           + "\n".join(lines[-24:]))
            continue
        logs, codes = [], []
        for command in commands(step, out, a.launches):
            proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            logs.append(proc.stdout + proc.stderr)
            codes.append(proc.returncode)
        log = "\n".join(logs)
        (out / f"{step}.log").write_text(log)
        failed += any(codes)
        tail = "\n".join(log.strip().splitlines()[-16:])
        summary.append(f"--- {step}: exit {codes} in {time.time() - t0:.0f} s\n{tail}")
    print("\n".join(summary))
    print("--- traced: cost and findings")
    print("\n".join(findings(out)) or "(no traced run finished)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
