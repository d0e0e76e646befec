"""Run the persistent megakernel (one CTA per SM, atomic work queue) with ikp_cute regions (sm_90 GPU).

    python examples/megakernel/run.py --out DIR

Builds a queue of heterogeneous items (copies of 1..32 chunks, row reductions, 32x32 GEMM tiles),
checks every output against torch, times the instrumented and the uninstrumented build alternately,
and reports what the per-SM timeline shows: items per SM, busy share, the scheduling gaps (`fetch`),
and the tail imbalance (spread of the CTAs' finish times). Two queue orders are captured: `shuffled`
(random order) and `big_last` (the largest copies at the end: a long tail on a few SMs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent / "pipeline"))

import numpy as np

QUICK = {"copies": 200, "rows": 128, "gemm_tiles": 8}


class Problem:
    """Inputs, outputs, the queue and the references of one megakernel run."""

    def __init__(self, mk, copies=1200, rows=512, gemm_tiles=16, order="shuffled", seed=0):
        import torch

        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 33, copies)  # chunks per copy item
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.mk = mk
        n_chunks = int(sizes.sum())
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev = dict(device="cuda", dtype=torch.float32)
        self.src = torch.randn(n_chunks * mk.CHUNK, generator=g, **dev)
        self.X = torch.randn(rows, mk.ROW_LEN, generator=g, **dev)
        self.A = torch.randn(gemm_tiles * mk.TILE, mk.GEMM_K, generator=g, **dev)
        self.B = torch.randn(mk.GEMM_K, gemm_tiles * mk.TILE, generator=g, **dev)
        items = [(mk.COPY, f, s, 0) for f, s in zip(first, sizes)]
        items += [(mk.REDUCE, r, 0, 0) for r in range(rows)]
        items += [(mk.GEMM, i, j, 0) for i in range(gemm_tiles) for j in range(gemm_tiles)]
        items = np.asarray(items, np.int32)
        if order == "shuffled":
            items = items[rng.permutation(len(items))]
        elif order == "big_last":  # everything else first, then copies from small to large
            cost = np.where(items[:, 0] == mk.COPY, items[:, 2], 0)
            items = items[np.argsort(cost, kind="stable")]
        else:
            raise ValueError(f"order={order!r}")
        self.items = torch.from_numpy(items).cuda()
        self.counter = torch.zeros(1, device="cuda", dtype=torch.int32)
        self.dst = torch.empty_like(self.src)
        self.red_out = torch.empty(self.X.shape[0], **dev)
        self.C = torch.empty(self.A.shape[0], self.B.shape[1], **dev)
        self.poison()

    def poison(self):
        """NaN outputs (in place: compiled launchers hold views of these tensors), counter at 0."""
        for out in (self.dst, self.red_out, self.C):
            out.fill_(float("nan"))
        self.counter.zero_()

    def tensors(self):
        return [self.items, self.counter, self.src, self.dst, self.X, self.red_out, self.A, self.B, self.C]

    def check(self, what: str) -> float:
        import torch

        if not torch.equal(self.dst, self.src):
            raise AssertionError(f"{what}: copies wrong or missing ({int((self.dst != self.src).sum())} elements)")
        errs = []
        for out, ref in ((self.red_out, self.X.double().sum(1)), (self.C, self.A.double() @ self.B.double())):
            if not bool(out.isfinite().all()):
                raise AssertionError(f"{what}: unwritten outputs")
            errs.append(float((out.double() - ref).norm() / ref.norm()))
        if max(errs) > 1e-5:
            raise AssertionError(f"{what}: rel errors {errs}")
        return max(errs)


def compile_kernel(mk, problem, session, num_ctas):
    from cutlass import cute
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute

    spec = session.spec if session is not None else ikp_cute.disabled()
    buf = session.kernel_arg() if session is not None else None
    args = [from_dlpack(t, assumed_align=16) for t in problem.tensors()]
    compiled = cute.compile(mk.launch, *args, buf, spec, num_ctas)
    return lambda keep=problem: compiled(*args, buf)  # keep: the torch tensors outlive the views


def make_session(mk, num_ctas, num_items):
    import ikp_cute

    per_cta = -(-num_items // num_ctas)
    spec = ikp_cute.ProfileSpec(num_groups=len(mk.GROUPS), num_blocks=num_ctas,
                                records_per_lane=4 * (4 * per_cta + 16), events=mk.EVENTS)
    return ikp_cute.Session(spec, groups=list(mk.GROUPS), kernel="megakernel")


def timeline_numbers(trace) -> dict:
    """Per-SM items, busy share, fetch (scheduling) share, and the spread of CTA finish times."""
    sp = trace.spans
    ev = {v: k for k, v in trace.names.events.items()}
    work = np.isin(sp["event"], [ev[k] for k in ("copy", "reduce", "gemm")])
    lanes = np.unique(sp["lane"])
    first = np.full(lanes.size, np.iinfo(np.int64).max)
    last = np.zeros(lanes.size, np.int64)
    idx = np.searchsorted(lanes, sp["lane"])
    np.minimum.at(first, idx, sp["start_ns"])
    np.maximum.at(last, idx, sp["end_ns"])
    dur = sp["end_ns"] - sp["start_ns"]
    busy = np.bincount(idx[work], weights=dur[work], minlength=lanes.size)
    fetch = np.bincount(idx[sp["event"] == ev["fetch"]], weights=dur[sp["event"] == ev["fetch"]], minlength=lanes.size)
    items = np.bincount(idx[work], minlength=lanes.size)
    launch = last.max() - first.min()
    sms = trace.lanes["sm"] if "sm" in trace.lanes.dtype.names else np.array([-1])
    return {
        "ctas": int(lanes.size),
        "distinct_sms": int(np.unique(sms[sms >= 0]).size),
        "items_per_cta_min_max": [int(items.min()), int(items.max())],
        "busy_share_mean": float((busy / launch).mean()),
        "fetch_share_mean": float((fetch / launch).mean()),
        "finish_spread_ns": int(last.max() - last.min()),
        "tail_idle_share": float(((last.max() - last) / launch).mean()),
        "launch_ns": int(launch),
    }


def run(out_dir: Path, *, launches=200, copies=1200, rows=512, gemm_tiles=16, seed=0) -> list[dict]:
    import megakernel as mk
    import torch
    from measure import time_alternating, write_outputs

    num_ctas = torch.cuda.get_device_properties(0).multi_processor_count
    rows_out = []
    for order in ("shuffled", "big_last"):
        prob = Problem(mk, copies, rows, gemm_tiles, order, seed)
        plain = compile_kernel(mk, prob, None, num_ctas)
        plain()
        torch.cuda.synchronize()
        prob.check(f"{order} uninstrumented")
        prob.poison()
        session = make_session(mk, num_ctas, prob.items.shape[0])
        instr = compile_kernel(mk, prob, session, num_ctas)
        with session.zeroed_then_synced():
            instr()
        err = prob.check(f"{order} instrumented")
        trace = session.decode()
        stats = write_outputs(trace, out_dir, f"megakernel_{order}", plots=True)
        numbers = timeline_numbers(trace)
        times = time_alternating({"plain": (prob.counter.zero_, plain), "instrumented": (prob.counter.zero_, instr)},
                                 launches)
        t0, t1 = (float(np.median(times[v])) for v in ("plain", "instrumented"))
        rows_out.append(dict(
            example="megakernel", variant=order, base_ms=t0, ms=t1, slowdown=t1 / t0 - 1, rel_err=err,
            lost=int(trace.loss.lost), spans=int(trace.spans.size), numbers=numbers,
            bubble_frac=stats["analysis"]["bubbles"]["bubble_frac"],
            note=(f"{numbers['ctas']} CTAs on {numbers['distinct_sms']} SMs, items/CTA {numbers['items_per_cta_min_max']}, "
                  f"busy {100 * numbers['busy_share_mean']:.0f}%, fetch {100 * numbers['fetch_share_mean']:.1f}%, "
                  f"finish spread {numbers['finish_spread_ns'] / 1e3:.1f} us"),
        ))
    (out_dir / "megakernel_rows.json").write_text(json.dumps(rows_out, indent=1, default=float))
    return rows_out


def small_capture(dest: Path) -> Path:
    """The committed capture: a small shuffled queue (300 copies, 64 rows, 4x4 GEMM tiles) on all SMs."""
    import megakernel as mk
    import torch

    num_ctas = torch.cuda.get_device_properties(0).multi_processor_count
    prob = Problem(mk, copies=300, rows=64, gemm_tiles=4, order="shuffled", seed=7)
    session = make_session(mk, num_ctas, prob.items.shape[0])
    fn = compile_kernel(mk, prob, session, num_ctas)
    with session.zeroed_then_synced():
        fn()
    prob.check("capture")
    if session.decode().loss.lost:
        raise AssertionError("capture lost records")
    from measure import save_capture_with_problem

    kinds = prob.items[:, 0].cpu().numpy()
    return save_capture_with_problem(session, dest, num_ctas=num_ctas, items=int(kinds.size),
                                     items_by_kind={n: int((kinds == k).sum()) for k, n in enumerate(mk.KIND_NAMES)})


def main(argv=None) -> int:
    from measure import example_main

    return example_main(__doc__, "megakernel_out", small_capture, run, argv)


if __name__ == "__main__":
    sys.exit(main())
