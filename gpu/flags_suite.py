"""The flag examples on a GPU machine in one call: build, check, time, skew (docs/flags.md).

    python gpu/flags_suite.py [--launches N] [--only megakernel_deps,distributed_1gpu,distributed_2gpu]

1. examples/megakernel_deps/run.py (one GPU): both library waits, skew 0 and 20 us on one task;
2. examples/distributed/run.py --world-size 1 (one GPU, 2 ranks simulated in one launch);
3. with two or more GPUs visible, torchrun --nproc-per-node 2 examples/distributed/run.py (one process per
   GPU, torch symmetric memory without multicast), with NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1
   and NVSHMEM_DISABLE_NVLS=1 set here, in the child environment, and asserted.
Each step's JSON and log go under $OUT (default ./flags_out); the examples' tables are printed last.
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
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)
STEPS = ("megakernel_deps", "distributed_1gpu", "distributed_2gpu")


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def command(step: str, out: Path, launches: int) -> list[str]:
    py = sys.executable
    common = ["--out", str(out / step), "--launches", str(launches)]
    if step == "megakernel_deps":
        return [py, str(ROOT / "examples/megakernel_deps/run.py"), *common]
    run = str(ROOT / "examples/distributed/run.py")
    if step == "distributed_1gpu":
        return [py, run, "--world-size", "1", *common]
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
    return launcher + ["--nproc-per-node", "2", run, *common]


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
        proc = subprocess.run(command(step, out, a.launches), cwd=ROOT, env=env, capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        (out / f"{step}.log").write_text(log)
        failed += proc.returncode != 0
        tail = "\n".join(log.strip().splitlines()[-14:])
        summary.append(f"--- {step}: exit {proc.returncode} in {time.time() - t0:.0f} s\n{tail}")
    print("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
