"""Run the warp-specialized TMA/mbarrier/wgmma GEMM with and without ikp_cute regions (sm_90 GPU).

    python examples/pipeline/run.py --out DIR

Checks C against torch (fp32 matmul of the same bf16 inputs; poisoned output, fresh inputs), times the
instrumented and the uninstrumented build alternately in one stream (median of --launches each), and
writes the decoded trace (Perfetto), statistics (JSON), PNG plots and the producer/consumer numbers:
how long consumers wait for data (`wait_data`), how long the producer waits for a free slot
(`wait_slot`), and how much of the consumers' time the tensor cores are busy (`mma`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import numpy as np

QUICK = {"m": 1024, "n": 1024, "k": 1024}


def compile_gemm(gp, session_or_none, a, b, c):
    from cutlass import cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute

    spec = session_or_none.spec if session_or_none is not None else ikp_cute.disabled()
    buf = session_or_none.kernel_arg() if session_or_none is not None else None
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    compiled = cute.compile(gp.PipelinedGemm(), *args, buf, spec)
    return lambda keep=(a, b, c): compiled(*args, buf)  # keep: the torch tensors outlive the views


def make_session(gp, m, n, k):
    import ikp_cute

    blocks = (m // 128) * (n // 128)
    k_tiles = k // 64
    spec = ikp_cute.ProfileSpec(num_groups=len(gp.GROUPS), num_blocks=blocks, records_per_lane=4 * k_tiles + 16,
                                events=gp.EVENTS)
    return ikp_cute.Session(spec, groups=list(gp.GROUPS), kernel="pipelined_gemm")


def inputs(m, n, k, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)  # poisoned
    return a, b, c


def check(c, a, b, what: str) -> float:
    ref = a.float() @ b.float().T
    if not bool(c.isfinite().all()):
        raise AssertionError(f"{what}: output has unwritten (NaN) elements")
    err = float((c - ref).norm() / ref.norm())
    if err > 1e-5:  # fp32 accumulation of exact bf16 products: only summation order differs
        raise AssertionError(f"{what}: rel err {err:.2e} vs fp32 matmul")
    return err


def pipeline_numbers(trace) -> dict:
    """Per role: share of time in each region; per consumer k-tile: wait_data vs mma."""
    from host_decode.analysis.stats import region_summary

    rows = region_summary(trace)
    out = {}
    for r in rows:
        out[f"{trace.names.group(r['group'])}/{trace.names.event(r['event'])}"] = {
            "count": int(r["count"]), "p50_ns": float(r["p50_ns"]), "total_ns": int(r["total_ns"])}
    cons = rows[rows["group"] > 0]
    total = {trace.names.event(e): int(cons["total_ns"][cons["event"] == e].sum()) for e in np.unique(cons["event"])}
    tile = total.get("tile", 0)
    prod = rows[rows["group"] == 0]
    prod_total = {trace.names.event(e): int(prod["total_ns"][prod["event"] == e].sum()) for e in np.unique(prod["event"])}
    busy = sum(prod_total.values())
    out["consumer_share"] = {k: v / tile for k, v in total.items() if tile and k != "tile"}
    out["producer_wait_slot_share"] = prod_total.get("wait_slot", 0) / busy if busy else 0.0
    return out


def run(out_dir: Path, *, m=4096, n=4096, k=4096, launches=200, seed=0) -> list[dict]:
    import gemm_pipeline as gp
    import torch
    from measure import time_alternating, write_outputs

    a, b, c0 = inputs(m, n, k, seed)
    plain = compile_gemm(gp, None, a, b, c0)
    plain()
    torch.cuda.synchronize()
    err0 = check(c0, a, b, "uninstrumented")

    session = make_session(gp, m, n, k)
    a, b, c = inputs(m, n, k, seed + 1)  # fresh inputs for the instrumented build
    instr = compile_gemm(gp, session, a, b, c)
    with session.zeroed_then_synced():
        instr()
    err = check(c, a, b, "instrumented")
    trace = session.decode()
    stats = write_outputs(trace, out_dir, "pipeline", plots=True)
    numbers = pipeline_numbers(trace)
    (out_dir / "pipeline_numbers.json").write_text(json.dumps(numbers, indent=1))

    # timing: each build runs on its own (random, same-sized) inputs and output
    times = time_alternating({"plain": plain, "instrumented": instr}, launches)
    t0, t1 = (float(np.median(times[v])) for v in ("plain", "instrumented"))
    ref_ms = _torch_ms(a, b)
    share = numbers["consumer_share"]
    return [dict(example="pipeline", variant=f"{m}x{n}x{k}", base_ms=t0, ms=t1, slowdown=t1 / t0 - 1,
                 rel_err=err, rel_err_plain=err0, lost=int(trace.loss.lost), spans=int(trace.spans.size),
                 tflops=2 * m * n * k / t0 / 1e9, torch_ms=ref_ms, bubble_frac=stats["analysis"]["bubbles"]["bubble_frac"],
                 note=f"consumers: mma {100 * share.get('mma', 0):.0f}%, wait_data {100 * share.get('wait_data', 0):.0f}%, "
                      f"epilogue {100 * share.get('epilogue', 0):.0f}%; producer wait_slot {100 * numbers['producer_wait_slot_share']:.0f}%; "
                      f"torch {ref_ms:.3f} ms")]


def _torch_ms(a, b) -> float:
    import torch

    bt = b.T
    for _ in range(3):
        a @ bt
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ bt
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 20


def small_capture(dest: Path, m=512, n=512, k=1024) -> Path:
    """The committed capture: 16 CTAs x 3 lanes, 16 k-tiles (4-stage ring, so the producer must wait)."""
    import gemm_pipeline as gp
    import torch

    session = make_session(gp, m, n, k)
    a, b, c = inputs(m, n, k, seed=7)
    fn = compile_gemm(gp, session, a, b, c)
    with session.zeroed_then_synced():
        fn()
    torch.cuda.synchronize()
    check(c, a, b, "capture")
    if session.decode().loss.lost:
        raise AssertionError("capture lost records")
    from measure import save_capture_with_problem

    return save_capture_with_problem(session, dest, m=m, n=n, k=k, tile_m=128, tile_n=128, tile_k=64)


def main(argv=None) -> int:
    from measure import example_main

    return example_main(__doc__, "pipeline_out", small_capture, run, argv)


if __name__ == "__main__":
    sys.exit(main())
