"""One program, two front ends: ikp_example.cu's "nested" program (CUDA C++, cuda_include/ikp.cuh) and its
CuTe DSL twin (examples/cuda_cpp/twin_kernel.py, ikp_cute) run on one GPU; both buffers must decode to
the program's span structure (gpu/cuda_cross_check.py's model) and to each other's (lanes, events,
nesting depth, counts), with ample capacity and overflowing.

    python gpu/twin_cross_check.py          (repo root; GPU, torch, nvcc, CuTe DSL; OUT=dir keeps captures)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_twin(twin, records_per_lane: int, iters: int):
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute

    spec = ikp_cute.ProfileSpec(num_groups=len(twin.GROUPS), num_blocks=12, records_per_lane=records_per_lane,
                                write_stride=32, warps_per_group=2, events=twin.EVENTS)
    session = ikp_cute.Session(spec, groups=list(twin.GROUPS), kernel="twin nested (CuTe DSL)")
    out = torch.empty(12 * twin.THREADS, device="cuda")
    compiled = cute.compile(twin.launch_twin, from_dlpack(out), Int32(iters), session.kernel_arg(), session.spec)
    with session.zeroed_then_synced():
        compiled(from_dlpack(out), Int32(iters), session.kernel_arg())
    return session, out


def main() -> int:
    import torch

    from host_decode.core.decoder import decode
    from host_decode.core.model import Names
    from ikp_cute.testing import cuda_program as cp

    cc = _load("cuda_cross_check", REPO / "gpu" / "cuda_cross_check.py")
    example = cc._example_module()
    twin = _load("twin_kernel", REPO / "examples" / "cuda_cpp" / "twin_kernel.py")
    dll = example.build_library()
    names = Names(events=dict(example.EVENTS), groups=dict(example.GROUPS))
    out_dir = os.environ.get("OUT")
    rows, failures = [], 0
    for tag, rpl in (("nested", 4 * cp.ITERS + 8), ("nested_overflow", 14)):
        buf_t, out_c = example.launch(dll, "nested", cp.GRID, cp.WRITE_STRIDE, rpl, cp.ITERS)
        cuda_trace = decode(buf_t.cpu().numpy(), names=names, write_stride=cp.WRITE_STRIDE)
        session, out_t = run_twin(twin, rpl, cp.ITERS)
        cute_trace = session.decode()
        problems = [f"cute: {p}" for p in cp.check_trace(cute_trace, "nested", rpl, cp.ITERS)]
        problems += [f"cuda: {p}" for p in cp.check_trace(cuda_trace, "nested", rpl, cp.ITERS)]
        if cp.structure(cute_trace) != cp.structure(cuda_trace):
            problems.append("CuTe DSL and CUDA C++ structures differ")
        drops = (cute_trace.loss.dropped_on_device, cuda_trace.loss.dropped_on_device)
        if drops[0] != drops[1]:
            problems.append(f"dropped: cute {drops[0]} vs cuda {drops[1]}")
        if not torch.allclose(out_t, out_c, rtol=1e-4, atol=1e-3):
            problems.append("the two kernels computed different outputs")
        failures += bool(problems)
        for p in problems:
            print(f"  {tag}: {p}")
        rows.append((tag, "OK" if not problems else "FAIL",
                     f"{cute_trace.spans.size} spans / {cute_trace.instants.size} instants each, dropped {drops[0]}"))
        if out_dir:
            session.save(os.path.join(out_dir, f"twin_cute_{tag}.npy"))
    cc.print_table(f"{torch.cuda.get_device_name(0)}: CUDA C++ (ikp.cuh) vs CuTe DSL (ikp_cute), same program", rows)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
