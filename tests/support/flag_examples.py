"""The flag examples (examples/megakernel_deps, examples/distributed) for tests: their runners loaded as modules and
their kernels compiled on the CPU for sm_90a with fake tensors of small shapes (used by
tests/unit/examples/test_flag_examples.py, tests/unit/ikp_cute/test_flags_compile.py,
tests/unit/ikp_cute/test_checks_warp_uniform.py and tests/unit/examples/test_flag_examples_traced.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DEPS = ROOT / "examples" / "megakernel_deps"
DIST = ROOT / "examples" / "distributed"
for _p in (DEPS, DIST, ROOT / "examples" / "pipeline"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def load_runner(path: Path, name: str):
    """An example's run.py as a module named `name`; the process environment left as it was (distributed/run.py
    sets its no-multicast variables at import)."""
    saved = dict(os.environ)
    try:
        module = load_script(path, name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


deps_run = load_runner(DEPS / "run.py", "ikp_example_megakernel_deps_run")
dist_run = load_runner(DIST / "run.py", "ikp_example_distributed_run")


def compile_deps(wait_kind: str, log_tasks: bool, m=256, k=128, n1=128, n2=128) -> str:
    """The megakernel's PTX (132 CTAs)."""
    return compile_deps_kernel(wait_kind, log_tasks, m, k, n1, n2).__ptx__


def compile_deps_kernel(wait_kind: str, log_tasks: bool, m=256, k=128, n1=128, n2=128):
    """The megakernel compiled (132 CTAs), its PTX and cubin kept (`__ptx__`, `__cubin__`)."""
    import megakernel_deps as mk
    from cutlass import Float32, Int32, Int64, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute.testing.sass import keep_options

    tasks = deps_run.task_table(m // 64, n1 // 64, n2 // 64)
    row = dict(stride_order=(1, 0))
    args = [fake(Int32, tasks.shape, **row), fake(Int32, (1,)), fake(Int32, (m // 64,)), fake(Float32, (m, k), **row),
            fake(Float32, (k, n1), **row), fake(Float32, (m, n1), **row), fake(Float32, (n1, n2), **row),
            fake(Float32, (m, n2), **row), Int32(-1), Int64(0), fake(Int64, (tasks.shape[0], 6), **row)]
    return cute.compile(mk.launch, *args, wait_kind, log_tasks, 132, options=keep_options())


def compile_dist(wait_kind: str, log_tasks: bool, world=2, ranks_here=1, ms=128, k=128, n=128, chunks=2) -> str:
    """The all-gather GEMM's PTX (one rank of `world`, 66 CTAs)."""
    import ag_gemm as ag
    from cutlass import Float32, Int32, Int64, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute.testing.sass import keep_options

    t = dist_run.task_table(0, world, ms // 64, n // 64, chunks).shape[0]
    row = dict(stride_order=(1, 0))
    args = [fake(Int32, (ranks_here, t, 4), stride_order=(2, 1, 0)), fake(Int32, (ranks_here,)),
            fake(Float32, (ranks_here * ms, k), **row), fake(Float32, (k, ranks_here * n), **row),
            fake(Float32, (world * ms, ranks_here * n), **row), fake(Int64, (world,)), fake(Int64, (world,)),
            Int32(0), Int32(1), Int32(-1), Int64(0), fake(Int64, (ranks_here, t, 6), stride_order=(2, 1, 0))]
    return cute.compile(ag.launch, *args, world, ranks_here, 66, chunks, wait_kind, log_tasks,
                        options=keep_options()).__ptx__
