"""GPU proof (H100/H200), one run: FA4's sm90 forward (b=2 s=4096 h=16 d=128 bf16, causal and not) and
quack's persistent warp-specialized sm90 GEMM (bf16 8192^3), traced by `trace_pipelines` with zero
source edits.

For each kernel: outputs of the traced kernel equal the untouched kernel's (bit for bit); cost of each
level against the untouched kernel (median of ITERS alternating launches, a GPU sleep before each so
launches do not wait on the host; the untouched kernel against itself is the noise row); a full-size
capture at the default level summarized per pipeline x op x warp group; small captures at level
"signals" written for the repository. Everything goes under $OUT (results.json, *.npy + *.json, log);
a short table is printed last.

    python examples/pipelines/gpu_proof.py [--iters 300] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")

import summary
import torch
from compile_cpu import fa4_private_cache, quack_private_cache_dicts

from ikp_cute.pipelines import session_for, trace_pipelines
from ikp_cute.pipelines.audit import summary as audit_summary

OUT = os.environ.get("OUT", "/tmp/pipelines_out")
os.makedirs(OUT, exist_ok=True)
RESULTS: dict = {"device": torch.cuda.get_device_name(), "errors": []}
SLEEP_CYCLES = 400_000  # ~0.2 ms at 1.98 GHz: the host runs ahead, launches queue back to back
# (name, level, options): the default level, its ablations (polls timed, every call a region, one op), signals.
VARIANTS = [
    ("waits", "waits", {}),
    ("waits_timed", "waits", {"polls": "timed"}),
    ("waits_64ns", "waits", {"blocked_ns": 64}),
    ("waits_passing", "waits", {"passing_waits": True}),
    ("consumer_wait", "waits", {"ops": {"wait"}}),
    ("bar_sync", "waits", {"ops": {"bar_sync"}}),
    ("signals", "signals", {}),
]
QUACK_VARIANTS = ("waits", "waits_timed", "signals")

def log(*args):
    print(*args, flush=True)


def bench(fns: dict, iters: int) -> dict:
    """Median ms per variant; the order rotates every iteration so no variant always runs first."""
    names = list(fns)
    events = {n: [] for n in names}
    for n in names:  # warm-up
        fns[n]()
    torch.cuda.synchronize()
    for i in range(iters):
        for j in range(len(names)):
            n = names[(i + j) % len(names)]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            s.record()
            fns[n]()
            e.record()
            events[n].append((s, e))
    torch.cuda.synchronize()
    return {n: float(np.median([s.elapsed_time(e) for s, e in events[n]])) for n in names}


def cost_rows(times: dict, base: str) -> dict:
    return {n: {"ms": t, "vs_base": t / times[base] - 1.0} for n, t in times.items()}


# --- FA4 ----------------------------------------------------------------------------------------------------


def fa4_num_ctas(b, s, h, tile_m=128):
    return b * h * -(-s // tile_m)


def fa4_runner(cache, q, k, v, causal):
    from flash_attn.cute import interface

    def run():
        interface._flash_attn_fwd.compile_cache = cache
        out = interface.flash_attn_func(q, k, v, causal=causal)
        return out[0] if isinstance(out, tuple) else out

    return run


def fa4_build(q, k, v, causal, trace=None):
    """A compile cache holding FA4's kernel for these shapes, compiled (under `trace` if given)."""
    from flash_attn.cute import interface

    with fa4_private_cache() as cache:
        with trace or contextlib.nullcontext():
            out = interface.flash_attn_func(q, k, v, causal=causal)
        torch.cuda.synchronize()
    return cache, out[0] if isinstance(out, tuple) else out


def fa4_case(causal: bool, iters: int, b=2, s=4096, h=16):
    tag = "causal" if causal else "noncausal"
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    plain_cache, ref = fa4_build(q, k, v, causal)
    nctas = fa4_num_ctas(b, s, h)
    variants = {"fa4": fa4_runner(plain_cache, q, k, v, causal), "fa4_noise": fa4_runner(plain_cache, q, k, v, causal)}
    sessions, traces = {}, {}
    for variant, level, options in VARIANTS:
        session = session_for(nctas, 12, records_per_lane=512, kernel=f"fa4_sm90_{tag}")
        trace = trace_pipelines(session, level=level, **options)
        t0 = time.time()
        cache, _ = fa4_build(q, k, v, causal, trace)
        log(f"fa4 {tag} {variant}: traced compile {time.time() - t0:.1f} s")
        run = fa4_runner(cache, q, k, v, causal)
        out = run()
        torch.cuda.synchronize()
        RESULTS[f"fa4_{tag}_{variant}_output_identical"] = bool(torch.equal(out, ref))
        variants[variant] = run
        sessions[variant], traces[variant] = session, trace
    times = bench(variants, iters)
    RESULTS[f"fa4_{tag}_cost"] = cost_rows(times, "fa4")
    full_captures(f"fa4_{tag}", variants, sessions, traces, pipeline="k")


def full_captures(prefix: str, variants: dict, sessions: dict, traces: dict, pipeline: str) -> None:
    """One full-size launch of the default level, its polls="timed" variant and level signals (per n-block
    time from the producer's commits too), each into a zeroed buffer, summarized into RESULTS under
    `prefix` (`prefix_<variant>` but for the default) and removed: too large to bring back."""
    for name in ("waits", "waits_timed", "signals"):
        if name not in sessions:
            continue
        session, trace = sessions[name], traces[name]
        with session.zeroed_then_synced():
            variants[name]()
        path = trace.save(session, os.path.join(OUT, f"{prefix}_full_{name}.npy"))
        summarize(prefix + ("" if name == "waits" else f"_{name}"), path, session, trace, pipeline=pipeline)
        _remove_capture(path)


def _remove_capture(path):
    os.remove(path)
    os.remove(str(path)[:-4] + ".json")


def summarize(name, path, session, trace, pipeline):
    from host_decode.load.capture import load_capture

    with open(str(path)[:-4] + ".json") as f:
        meta = json.load(f)
    t = load_capture(path)
    rows = summary.table(t, meta)
    RESULTS[f"{name}_table"] = rows
    RESULTS[f"{name}_dropped"] = int(t.lanes["dropped"].sum())
    RESULTS[f"{name}_lanes_written"] = int((t.lanes["records"] > 0).sum())
    RESULTS[f"{name}_loss"] = {"totals": {k: int(v) for k, v in t.loss.totals.items()},
                               "malformed": dict(t.loss.malformed_reasons),
                               "dropped_on_device": int(t.loss.dropped_on_device)}
    RESULTS[f"{name}_producer_ns_per_iter"] = summary.per_iteration_ns(t, meta, pipeline, "acquire")
    RESULTS[f"{name}_records_per_lane_max"] = int(t.lanes["records"].max()) if len(t.lanes) else 0
    RESULTS[f"{name}_records_per_group"] = {int(g): int(t.lanes["records"][t.lanes["group"] == g].mean())
                                            for g in np.unique(t.lanes["group"])}
    RESULTS[f"{name}_pipelines"] = meta.get("pipelines")
    RESULTS[f"{name}_barriers"] = meta.get("barriers")
    RESULTS[f"{name}_coverage"] = audit_summary(meta)  # the audit of the traced compile (sites traced, why not)
    per_iter = RESULTS[f"{name}_producer_ns_per_iter"]
    log(f"--- {name}: dropped {RESULTS[f'{name}_dropped']}, producer {per_iter:.0f} ns/iter")
    log(summary.format_table(rows))


def fa4_small():
    """The committed FA4 capture: b=1 s=1024 h=2 non-causal (16 CTAs), level signals, every wait recorded
    (passing_waits=True: the occurrence counts of the pipeline protocol are exact,
    tests/unit/host_decode/load/test_pipelines_captures.py)."""
    torch.manual_seed(1)
    b, s, h = 1, 1024, 2
    q, k, v = (torch.randn(b, s, h, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    session = session_for(fa4_num_ctas(b, s, h), 12, records_per_lane=128, kernel="fa4_sm90_small")
    trace = trace_pipelines(session, level="signals", passing_waits=True)
    cache, _ = fa4_build(q, k, v, False, trace)
    with session.zeroed_then_synced():
        fa4_runner(cache, q, k, v, False)()
    path = trace.save(session, os.path.join(OUT, "fa4_sm90_signals.npy"))
    summarize("fa4_small", path, session, trace, pipeline="k")


# --- quack ---------------------------------------------------------------------------------------------


class QuackCaches:
    """Snapshots of every quack compile/plan cache, so two compiled variants can be called alternately."""

    def __init__(self):
        self.dicts = quack_private_cache_dicts()

    def snapshot(self):
        return [dict(d) for d in self.dicts]

    def clear(self):
        for d in self.dicts:
            d.clear()

    def activate(self, snap):
        for d, entries in zip(self.dicts, snap):
            d.clear()
            d.update(entries)


def quack_case(iters: int, m=8192, n=8192, k=8192):
    from quack.gemm_interface import gemm

    torch.manual_seed(2)
    A = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    B = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    caches = QuackCaches()
    saved = caches.snapshot()
    caches.clear()
    ref = gemm(A, B, tuned=False)
    torch.cuda.synchronize()
    plain = caches.snapshot()
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def runner(snap):
        def run():
            caches.activate(snap)
            return gemm(A, B, tuned=False)

        return run

    variants = {"quack": runner(plain), "quack_noise": runner(plain)}
    sessions, traces = {}, {}
    for variant, level, options in VARIANTS:
        if variant not in QUACK_VARIANTS:
            continue
        session = session_for(sms, 12, records_per_lane=8192, kernel="quack_gemm_sm90")
        trace = trace_pipelines(session, level=level, **options)
        caches.clear()
        t0 = time.time()
        with trace:
            out = gemm(A, B, tuned=False)
        torch.cuda.synchronize()
        log(f"quack {variant}: traced compile {time.time() - t0:.1f} s")
        snap = caches.snapshot()
        RESULTS[f"quack_{variant}_output_identical"] = bool(torch.equal(out, ref))
        variants[variant] = runner(snap)
        sessions[variant], traces[variant] = session, trace
    times = bench(variants, iters)
    RESULTS["quack_cost"] = cost_rows(times, "quack")
    full_captures("quack", variants, sessions, traces, pipeline="ab")
    caches.activate(saved)


def quack_small():
    """The committed quack capture: m=4096 n=2048 k=512 (256 tiles over the persistent grid), level
    signals with every wait recorded (passing_waits=True), trimmed to the first 16 blocks (the v1 layout
    re-packed; sidecar says so)."""
    from quack.gemm_interface import gemm

    torch.manual_seed(3)
    A = torch.randn(4096, 512, dtype=torch.bfloat16, device="cuda")
    B = torch.randn(512, 2048, dtype=torch.bfloat16, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    caches = QuackCaches()
    saved = caches.snapshot()
    caches.clear()
    session = session_for(sms, 12, records_per_lane=128, kernel="quack_gemm_sm90_small")
    trace = trace_pipelines(session, level="signals", passing_waits=True)
    with trace:
        gemm(A, B, tuned=False)
    torch.cuda.synchronize()
    with session.zeroed_then_synced():
        gemm(A, B, tuned=False)
    caches.activate(saved)
    full = trace.save(session, os.path.join(OUT, "quack_small_untrimmed.npy"))
    summarize("quack_small_untrimmed", full, session, trace, pipeline="ab")
    path = summary.trim_capture(full, os.path.join(OUT, "quack_gemm_sm90_signals.npy"), keep_blocks=16)
    os.remove(full)
    os.remove(str(full)[:-4] + ".json")
    summarize("quack_small", path, session, trace, pipeline="ab")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--only", default="fa4,quack,small")
    args = parser.parse_args()
    steps = []
    if "small" in args.only:
        steps += [("fa4_small", fa4_small), ("quack_small", quack_small)]
    if "fa4" in args.only:
        steps += [("fa4_noncausal", lambda: fa4_case(False, args.iters)),
                  ("fa4_causal", lambda: fa4_case(True, args.iters))]
    if "quack" in args.only:
        steps += [("quack", lambda: quack_case(max(200, args.iters * 2 // 3)))]
    for name, step in steps:
        t0 = time.time()
        try:
            step()
        except Exception as e:  # noqa: BLE001  (keep going: one failing kernel must not cost the others' numbers)
            RESULTS["errors"].append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc()
        log(f"[{name}] {time.time() - t0:.1f} s")
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    log("\n==== cost (median of alternating launches; vs the untouched kernel) ====")
    for key in ("fa4_noncausal_cost", "fa4_causal_cost", "quack_cost"):
        if key in RESULTS:
            log(key, "  ".join(f"{n}: {r['ms']:.4f} ms ({r['vs_base']:+.2%})" for n, r in RESULTS[key].items()))
    for key in sorted(k for k in RESULTS if k.endswith("output_identical")):
        log(key, RESULTS[key])
    for key in sorted(k for k in RESULTS if k.endswith("ns_per_iter")):
        log(key, f"{RESULTS[key]:.0f}")
    log("errors:", RESULTS["errors"])


if __name__ == "__main__":
    main()
