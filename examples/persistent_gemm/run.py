"""Check the persistent GEMM against torch on an sm_90 GPU, for both cluster shapes, and time it.

    python examples/persistent_gemm/run.py [--quick] [--out DIR]

For each cluster shape (1x1, 2x1) and each problem (8192^3 with bf16 out, a ragged 3000x1928x1048 with bf16
and fp32 out, a problem smaller than one wave): fresh random inputs, a NaN-poisoned output, one launch, and
C compared with the fp32 matmul of the same bf16 inputs (every element written; relative error within bf16
rounding, or 1e-5 for fp32 out). Then the 8192^3 kernels are timed against torch.matmul (median of
alternating launches, examples/pipeline/measure.py). Exits non-zero when any check fails; writes
results.json under --out (default $OUT or /tmp/persistent_gemm).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent / "pipeline"))  # measure.time_alternating

import host  # noqa: E402

PROBLEMS = [  # (m, n, k, c dtype)
    (8192, 8192, 8192, "bf16"),
    (3000, 1928, 1048, "bf16"),  # ragged in M, N and K (K a multiple of 8, not of the 64-wide k-tile)
    (3000, 1928, 1048, "fp32"),
    (200, 300, 64, "fp32"),  # fewer tiles than CTAs: most CTAs have no work
]
QUICK_PROBLEMS = [(2048, 2048, 2048, "bf16"), (3000, 1928, 1048, "fp32")]


def check_all(problems, results: dict) -> list[str]:
    import torch

    failures = []
    for cluster_m in (1, 2):
        ctas = host.num_ctas(cluster_m)
        for seed, (m, n, k, c_dtype) in enumerate(problems):
            what = f"cluster {cluster_m}x1, {m}x{n}x{k}, C {c_dtype}"
            try:
                a, b, c = host.gemm_inputs(m, n, k, seed, c_dtype)
                views = host.dlpack_views(a, b, c)
                compiled = host.compile_gemm(views, cluster_m=cluster_m, ctas=ctas, options="")
                compiled(*views)
                torch.cuda.synchronize()
                err = host.check_gemm(c, a, b, what)
                results["checks"].append({"case": what, "ctas": ctas, "rel_err": err, "ok": True})
                print(f"ok   {what}: rel err {err:.2e} ({ctas} CTAs)", flush=True)
            except Exception as e:  # noqa: BLE001  (report every case, fail at the end)
                traceback.print_exc()
                failures.append(f"{what}: {type(e).__name__}: {e}")
                results["checks"].append({"case": what, "ok": False, "error": str(e)})
    return failures


def time_all(m: int, n: int, k: int, launches: int, results: dict) -> None:
    import numpy as np
    import torch
    from measure import time_alternating

    a, b, c = host.gemm_inputs(m, n, k, 100)
    variants = {"torch": lambda: torch.matmul(a, b.T)}
    for cluster_m in (1, 2):
        views = host.dlpack_views(a, b, c)
        compiled = host.compile_gemm(views, cluster_m=cluster_m, ctas=host.num_ctas(cluster_m), options="")
        variants[f"gemm_{cluster_m}x1"] = lambda f=compiled, v=views: f(*v)
    times = time_alternating(variants, launches)
    flops = 2.0 * m * n * k
    for name, t in times.items():
        ms = float(np.median(t))
        results["timing"][name] = {"ms": ms, "tflops": flops / ms / 1e9}
        print(f"{name:>10}: {ms:.4f} ms  {flops / ms / 1e9:.0f} TFLOP/s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/persistent_gemm")))
    args = ap.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/persistent_gemm/run.py')  # one line where there is no GPU
    import torch

    results = {"device": torch.cuda.get_device_name(), "checks": [], "timing": {}}
    failures = check_all(QUICK_PROBLEMS if args.quick else PROBLEMS, results)
    size = 2048 if args.quick else 8192
    time_all(size, size, size, args.launches, results)
    results["failures"] = failures
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "persistent_gemm_results.json").write_text(json.dumps(results, indent=1))
    print("failures:", failures or "none")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
