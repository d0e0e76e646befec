"""Run FlashAttention-4's Hopper forward with and without ikp_cute regions (needs an sm_90 GPU).

    python examples/fa4_sm90/run.py --out /tmp/fa4            # checks, timings, trace, stats, plots
    python examples/fa4_sm90/run.py --capture-only --out DIR   # just the small committed capture

What it does, per mask (non-causal, causal):
1. fresh random bf16 q, k, v (b=2 s=4096 h=16 d=128 by default); FA4 uninstrumented is the reference;
   its relative error against an fp32 SDPA is the tolerance the instrumented output must meet too
   (it is also compared bit for bit with FA4's output: the regions do not touch the math);
2. one capture per detail level (decoded, summarized; Perfetto trace + PNGs for the last level);
3. the slowdown: launches of FA4 and of each instrumented variant alternate in one stream, each launch
   between its own CUDA events, behind a sleep kernel that keeps the queue full (FA4's Python host path
   is slower than a 0.4 ms kernel); medians of `--launches` each.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import numpy as np

QUICK = {"batch": 1, "seqlen": 2048, "heads": 8, "variants": ("iter",)}

# The measured variants: name -> (detail level, InstrumentedFlashAttentionForwardSm90 options).
# "producer_full" records only the producer warp group (every producer event): the consumers' progress
# shows up as the ends of `wait_empty_K/V` (a stage is released when its consumers are done with it).
# "*_lean" variants keep no profiler state in registers between records (mode="lean"): FA4's
# consumer warp groups are register-tight, and state held live across their main loop costs more than
# the records themselves.
VARIANTS = {
    "tile": ("tile", {}),
    "tile_lean": ("tile", {"mode": "lean"}),
    "iter": ("iter", {}),
    "iter_lean": ("iter", {"mode": "lean"}),
    "full": ("full", {}),
    "full_lean": ("full", {"mode": "lean"}),
    "producer_full": ("full", {"roles": ("producer",)}),
}
# Lean with its leaf-region pairing turned off (every record loads its lane's state from shared memory and
# stores at once, the lean record's older design): the A/B rows for the lean record that
# takes a leaf region's slots at its BEGIN.
LEAN_AB = {
    f"{level}_lean_shared_state": (level, {"mode": "lean", "recorder_class": "SharedStateLean"})
    for level in ("tile", "iter", "full")
}
SESSION_OPTIONS = ("mode",)  # variant options that configure the Session, not the FA4 subclass


def split_options(options: dict) -> tuple[dict, dict]:
    """(Session options, InstrumentedFlashAttentionForwardSm90 options) of a variant."""
    return ({k: v for k, v in options.items() if k in SESSION_OPTIONS},
            {k: v for k, v in options.items() if k not in SESSION_OPTIONS})

sys.path.insert(0, str(HERE.parent / "pipeline"))
from measure import time_alternating, write_outputs


def with_recorder_class(options: dict) -> dict:
    """A variant names its recorder class (ikp_cute.testing.record_variants) by name: the class itself."""
    if not isinstance(options.get("recorder_class"), str):
        return options
    from ikp_cute.testing import record_variants

    return {**options, "recorder_class": getattr(record_variants, options["recorder_class"])}


def fa4_forward(q, k, v, causal: bool):
    from flash_attn.cute.interface import flash_attn_func

    out = flash_attn_func(q, k, v, causal=causal)
    return out[0] if isinstance(out, tuple) else out


def make_inputs(batch, seqlen, heads, dim, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (batch, seqlen, heads, dim)
    return [torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]


def rel_error(out, ref) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def fp32_reference(q, k, v, causal):
    import torch

    with torch.no_grad():
        qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal).transpose(1, 2)


def records_per_lane(seqlen: int, detail: str, tile_n: int = 128) -> int:
    """Records a lane can need: 8 per n-block at 'full' (producer: 2 waits + 2 issues, 2 records each),
    6 at 'iter', plus the per-tile regions, anchors and trailer; rounded up."""
    n_blocks = -(-seqlen // tile_n)
    per_block = {"tile": 0, "iter": 6, "full": 8}[detail]
    return int(16 + per_block * n_blocks + 32)


def make_session(fi, batch, seqlen, heads, detail, **session_options):
    import ikp_cute

    spec = ikp_cute.ProfileSpec(
        **session_options,
        num_groups=len(fi.GROUPS),
        num_blocks=fi.num_ctas(batch, seqlen, heads),
        records_per_lane=records_per_lane(seqlen, detail),
        events=fi.events_for(detail),
    )
    return ikp_cute.Session(spec, groups=list(fi.GROUPS), bake_address=True, kernel=f"fa4_sm90_fwd[{detail}]")


def capture(fi, session, detail, q, k, v, causal, **options):
    """One instrumented launch into a freshly zeroed buffer -> (output, Trace)."""
    import torch

    with fi.patched_interface(session.spec, detail, **options):
        session.reset()
        out = fa4_forward(q, k, v, causal)
        torch.cuda.synchronize()
    return out, session.decode()


def _time_inside(trace, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Per `outer` span (sorted by lane, start): the summed duration of the `inner` spans of the same
    lane that lie inside it. Keys are lane << 40 | time since launch (2^40 ns = 18 minutes)."""
    def keys(sp):
        return (sp["lane"].astype(np.int64) << 40) + (sp["start_ns"] - trace.start_ns)

    host = np.searchsorted(keys(outer), keys(inner), side="right") - 1
    ok = host >= 0
    safe = np.clip(host, 0, None)
    ok &= (outer["lane"][safe] == inner["lane"]) & (inner["end_ns"] <= outer["end_ns"][safe])
    return np.bincount(host[ok], weights=(inner["end_ns"] - inner["start_ns"])[ok], minlength=outer.size)


def consumer_wait_share(trace) -> dict:
    """How much of each consumer n-block iteration waits on the producer (wait_K + wait_V inside it),
    and (detail 'full') how much of it is softmax."""
    ids = {v: k for k, v in trace.names.events.items()}
    sp = trace.spans
    nb = sp[sp["event"] == ids["n_block"]] if "n_block" in ids else sp[:0]
    if nb.size == 0:  # a variant without consumer iterations (e.g. producer-only)
        return {}
    nb = nb[np.lexsort((nb["start_ns"], nb["lane"]))]
    dur = (nb["end_ns"] - nb["start_ns"]).astype(np.float64)
    # wait_K / wait_V: captures of the earlier subclass; waits now come from trace_pipelines (pipelines.py)
    wait_ns = _time_inside(trace, nb, sp[np.isin(sp["event"], [ids[n] for n in ("wait_K", "wait_V") if n in ids])])
    share = np.divide(wait_ns, dur, out=np.zeros_like(dur), where=dur > 0)
    out = {
        "n_block_iterations": int(nb.size),
        "n_block_ns_p50": float(np.median(dur)) if dur.size else 0.0,
        "wait_share_total": float(wait_ns.sum() / dur.sum()) if dur.sum() else 0.0,
        "wait_share_p50": float(np.median(share)) if share.size else 0.0,
        "wait_share_p90": float(np.percentile(share, 90)) if share.size else 0.0,
        "iterations_waiting_over_10pct": float(np.mean(share > 0.10)) if share.size else 0.0,
    }
    if "softmax" in ids and dur.sum():
        out["softmax_share_total"] = float(_time_inside(trace, nb, sp[sp["event"] == ids["softmax"]]).sum() / dur.sum())
    return out


def producer_wait_share(trace) -> dict:
    """Share of the producer's time spent waiting for a free K/V stage (the consumers' pace) and the
    median time between consecutive K-stage releases (one consumer n-block iteration, both groups)."""
    ids = {v: k for k, v in trace.names.events.items()}
    sp = trace.spans
    if "wait_empty_K" not in ids or not np.any(sp["event"] == ids["wait_empty_K"]):
        return {}
    role = sp[sp["event"] == ids["producer"]]
    waits = sp[np.isin(sp["event"], [ids["wait_empty_K"], ids["wait_empty_V"]])]
    total = float((role["end_ns"] - role["start_ns"]).sum())
    k_waits = sp[sp["event"] == ids["wait_empty_K"]]
    k_waits = k_waits[np.lexsort((k_waits["end_ns"], k_waits["lane"]))]
    gaps = np.diff(k_waits["end_ns"])[np.diff(k_waits["lane"]) == 0]
    return {
        "wait_empty_share": float((waits["end_ns"] - waits["start_ns"]).sum() / total) if total else 0.0,
        "k_release_interval_ns_p50": float(np.median(gaps)) if gaps.size else 0.0,
    }


def region_shares(trace) -> dict:
    """Total time per (group, event) as a share of that group's outermost role region."""
    from host_decode.analysis.stats import region_summary

    rows = region_summary(trace)
    out = {}
    for g in np.unique(rows["group"]):
        mine = rows[rows["group"] == g]
        outer = mine["total_ns"].max()
        for r in mine:
            out[f"{trace.names.group(g)}/{trace.names.event(r['event'])}"] = {
                "count": int(r["count"]),
                "p50_ns": float(r["p50_ns"]),
                "share_of_role": float(r["total_ns"] / outer) if outer else 0.0,
            }
    return out


def run(out_dir: Path, *, batch=2, seqlen=4096, heads=16, dim=128, launches=200,
        variants=tuple(VARIANTS), seed=0) -> list[dict]:
    import fa4_instrumented as fi
    import torch

    rows = []
    for causal in (False, True):
        mask = "causal" if causal else "non-causal"
        q, k, v = make_inputs(batch, seqlen, heads, dim, seed + int(causal))
        ref32 = fp32_reference(q, k, v, causal)
        base = fa4_forward(q, k, v, causal)
        torch.cuda.synchronize()
        tol = rel_error(base, ref32)
        # "fa4_again" is FA4 itself a second time: the noise floor of the comparison
        def call_fa4(q=q, k=k, v=v, causal=causal):
            return fa4_forward(q, k, v, causal)

        launches_by_name = {"fa4": call_fa4, "fa4_again": call_fa4}
        for name in variants:
            detail, options = {**VARIANTS, **LEAN_AB}[name]
            session_options, options = split_options(options)
            options = with_recorder_class(options)
            session = make_session(fi, batch, seqlen, heads, detail, **session_options)
            out, trace = capture(fi, session, detail, q, k, v, causal, **options)  # FA4 allocates `out` itself
            err = rel_error(out, ref32)
            same = bool(torch.equal(out, base))
            if not (err <= tol * 1.0001 + 1e-6 or same):
                raise AssertionError(f"FA4 {mask} [{name}]: rel err {err:.3e} > FA4's {tol:.3e}")
            stem = f"fa4_{mask}_{name}"
            stats = write_outputs(trace, out_dir, stem, plots=(name == "iter"))

            def launch(session=session, detail=detail, options=options, q=q, k=k, v=v, causal=causal):
                with fi.patched_interface(session.spec, detail, **options):  # session: keeps the buffer alive
                    fa4_forward(q, k, v, causal)

            launches_by_name[name] = launch
            rows.append(dict(
                example="fa4", mask=mask, detail=name, rel_err=err, fa4_rel_err=tol, bitwise_equal=same,
                spans=int(trace.spans.size), lost=int(trace.loss.lost), lanes=int(trace.num_lanes),
                wait=consumer_wait_share(trace), producer=producer_wait_share(trace), shares=region_shares(trace),
                bubble_frac=stats["analysis"]["bubbles"]["bubble_frac"],
            ))
        times = time_alternating(launches_by_name, launches)
        base_ms = float(np.median(times["fa4"]))
        noise = float(np.median(times["fa4_again"])) / base_ms - 1
        flops = 4 * batch * heads * seqlen * seqlen * dim / (2 if causal else 1)
        for row in rows:
            if row["mask"] == mask:
                t = float(np.median(times[row["detail"]]))
                row.update(
                    fa4_ms=base_ms,
                    ms=t,
                    slowdown=t / base_ms - 1,
                    tflops=flops / t / 1e9,
                    noise=noise,
                    fa4_ms_p10_p90=[float(np.percentile(times["fa4"], 10)), float(np.percentile(times["fa4"], 90))],
                    launches=len(times[row["detail"]]),
                )
        np.savez(out_dir / f"fa4_{mask}_times.npz", **times)
    (out_dir / "fa4_rows.json").write_text(json.dumps(rows, indent=1, default=float))
    return rows


ABLATIONS = {  # name: (detail, options): where does the cost of each detail level come from?
    "setup_only": ("tile", {"events": ()}),  # profilers built, anchors + finalize, no regions
    "setup_only_consumer_late": ("tile", {"events": (), "late_setup": True}),  # consumer's built after its loop
    "tile": ("tile", {}),
    "tile_consumer_only": ("tile", {"roles": ("consumer",)}),
    "lean setup_only": ("tile", {"events": (), "mode": "lean"}),
    "lean role regions only": ("tile", {"events": ("producer", "consumer"), "mode": "lean"}),
    "lean mainloop only": ("tile", {"events": ("mainloop",), "mode": "lean"}),
    "lean epilogue only": ("tile", {"events": ("epilogue",), "mode": "lean"}),
    "tile_lean": ("tile", {"mode": "lean"}),
    "tile_lean_consumer_only": ("tile", {"roles": ("consumer",), "mode": "lean"}),
    "iter_lean": ("iter", {"mode": "lean"}),
    "full_producer_only": ("full", {"roles": ("producer",)}),
    # where the cost of a lean n_block region goes: the records' compiler barrier alone, each record
    # storing on its own
    "iter": ("iter", {}),
    "iter_lean barrier only": ("iter", {"mode": "lean", "recorder_class": "LeanBarrierOnly"}),
    "iter_lean_shared_state": ("iter", {"mode": "lean", "recorder_class": "SharedStateLean"}),
    "iter_lean global count": ("iter", {"mode": "lean", "recorder_class": "LeanGlobalCount"}),
    "full_lean": ("full", {"mode": "lean"}),
    "full_lean global count": ("full", {"mode": "lean", "recorder_class": "LeanGlobalCount"}),
}


def ablation(
    out_dir: Path, *, batch=2, seqlen=4096, heads=16, dim=128, causal=False, launches=300, seed=0
) -> list[dict]:
    """Slowdown of partial instrumentations against FA4, all alternating in one run."""
    import fa4_instrumented as fi
    import torch

    q, k, v = make_inputs(batch, seqlen, heads, dim, seed)
    base = fa4_forward(q, k, v, causal)
    variants = {"fa4": lambda: fa4_forward(q, k, v, causal), "fa4_again": lambda: fa4_forward(q, k, v, causal)}
    for name, (detail, options) in ABLATIONS.items():
        session_options, options = split_options(options)
        options = with_recorder_class(options)
        session = make_session(fi, batch, seqlen, heads, detail, **session_options)

        def launch(session=session, detail=detail, options=options):
            with fi.patched_interface(session.spec, detail, **options):
                return fa4_forward(q, k, v, causal)

        out = launch()
        torch.cuda.synchronize()
        if not torch.equal(out, base):
            raise AssertionError(f"ablation {name}: output differs from FA4's")
        variants[name] = launch
    times = time_alternating(variants, launches)
    base_ms = float(np.median(times["fa4"]))
    rows = [
        dict(example="fa4", variant=f"ablation {n}", base_ms=base_ms, ms=float(np.median(t)),
             slowdown=float(np.median(t)) / base_ms - 1, rel_err=0.0, lost=0,
             note="non-causal" if not causal else "causal")
        for n, t in times.items()
        if n != "fa4"
    ]
    (out_dir / f"fa4_ablation_{'causal' if causal else 'non-causal'}.json").write_text(json.dumps(rows, indent=1))
    return rows


def small_capture(dest: Path, detail="iter", batch=1, seqlen=1024, heads=4, dim=128, causal=True) -> Path:
    """The committed capture: a small causal problem (b=1 s=1024 h=4: 32 CTAs x 3 lanes)."""
    import fa4_instrumented as fi
    import torch

    q, k, v = make_inputs(batch, seqlen, heads, dim, seed=7)
    base = fa4_forward(q, k, v, causal)
    session = make_session(fi, batch, seqlen, heads, detail)
    out, trace = capture(fi, session, detail, q, k, v, causal)
    if not torch.equal(out, base):
        raise AssertionError("instrumented FA4 output differs from FA4's on the capture problem")
    if trace.loss.lost:
        raise AssertionError(f"capture lost records: {trace.loss.to_json()}")
    from measure import save_capture_with_problem

    return save_capture_with_problem(session, dest, batch=batch, seqlen=seqlen, heads=heads, dim=dim, causal=causal,
                                     detail=detail, tile_m=128, tile_n=128)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("fa4_out"))
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--capture-only", action="store_true")
    args = ap.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/fa4_sm90/run.py')  # one line where there is no GPU
    args.out.mkdir(parents=True, exist_ok=True)
    small_capture(args.out / "capture.npy")
    if not args.capture_only:
        for row in run(args.out, launches=args.launches):
            print(
                json.dumps(
                    {k: row[k] for k in ("mask", "detail", "fa4_ms", "ms", "slowdown", "rel_err", "wait")},
                    default=float,
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
