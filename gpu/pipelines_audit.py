"""The pipeline tracer's IR pass and audit on a GPU (H100/H200), one run:

1. GPU tests: pytest -m gpu tests/gpu/test_pipelines_ir_gpu.py tests/gpu/test_pipelines_gpu.py (the records the IR
   pass adds, for a kernel that swaps cute.arch.mbarrier_wait and one that waits and arrives in its own
   inline PTX, are matched exactly as the hooked kernels' are; the hooked kernels still are);
2. examples/pipelines/gpu_proof.py --only small: FA4's and quack's small captures at level signals,
   decoded with nothing lost, each with its sidecar's coverage line (results.json `*_coverage`).

FA4's and quack's cost needs no new measurement: their traced SASS is the same instruction for
instruction as before the IR pass and the audit (docs/pipelines.md, "Coverage audit"). Output under $OUT
(default ./gpu_out): pipelines_audit.log, results.json; a short summary is printed last.

    python gpu/pipelines_audit.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")


def step(name: str, cmd: list[str], out: Path, timeout: int) -> tuple[int, str]:
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OUT=str(out))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {timeout} s"
    with open(out / "pipelines_audit.log", "a") as log:
        log.write(f"\n===== {name}: {' '.join(cmd)}\n{text}")
    print(f"== {name}: rc={rc} in {time.time() - t0:.0f} s\n{text[-2500:]}", flush=True)
    return rc, text


def main() -> int:
    out = Path(os.environ.get("OUT", "gpu_out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    rc, text = step("gpu tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                  "tests/gpu/test_pipelines_ir_gpu.py", "tests/gpu/test_pipelines_gpu.py"], out, 900)
    rows.append(("gpu tests", rc, (text.strip().splitlines() or ["?"])[-1]))
    rc, _ = step("small captures", [sys.executable, "examples/pipelines/gpu_proof.py", "--only", "small"], out, 900)
    results = out / "results.json"
    coverage = json.loads(results.read_text()) if results.exists() else {}
    for key in sorted(k for k in coverage if k.endswith("_coverage")):
        rows.append((key, rc, "; ".join(coverage[key])))
    for key in sorted(k for k in coverage if k.endswith("_loss")):
        rows.append((key, rc, json.dumps(coverage[key]["totals"])))
    print("\n==== pipelines audit ====")
    for name, code, detail in rows:
        print(f"{name:32} rc={code}  {detail}")
    return max(code for _, code, _ in rows)


if __name__ == "__main__":
    sys.exit(main())
