"""What `trace_pipelines` costs on real kernels, and where the cost goes (H100/H200; one command, ~7 min).

Kernels (each untouched; untouched again = the noise row; traced at level "waits" = the default; traced at
level "signals"):
  fa4_noncausal, fa4_causal  FA4's sm90 forward, bf16 b=2 s=4096 h=16 d=128
  quack                      quack's GEMM, quack.gemm_interface.gemm(A, B, tuned=False), bf16 8192^3
  gemm_1x1, gemm_2x1         examples/persistent_gemm (4-stage TMA ring, 2 consumer warp groups, 128x256
                             tiles; 2x1: B multicast over a CTA pair), bf16 8192^3, C = A @ B^T
  gemm_1x1_poll              the same 1x1 GEMM whose consumers poll before waiting (as quack's do): the
                             untouched variant is its own base
Ablation (quack, gemm_1x1, gemm_2x1; same process, same base and noise rows), to find where a cost goes:
  acquire_only / wait_only / bar_sync_only   ops={...}: one op of the default level alone
  polls_timed / polls_off                    how polls are traced (default "begin")
  blocked_64ns / blocked_1024ns              the stored-region threshold (default 256 ns)
  never_stored                               blocked_ns = 2**31 - 1: timer reads and the moved checks,
                                             no region ever stored (what the calls cost by being traced)
  no_named_barriers                          named_barriers=False
  passing_waits                              every wait a region
  signals_commit / signals_release           level signals with only the producers' commits / only the
                                             consumers' releases as instants (the default level's waits off)
Timing: every variant of a kernel in one process, launches taking turns behind a GPU sleep
(examples/pipeline/measure.py:time_alternating), the median per variant; cost = median / untouched - 1.
Every traced variant's output is compared bit for bit with the untouched kernel's. One zeroed launch of
"waits" and "signals" per kernel is decoded: records per CTA by op, drops, losses.
Captures for CI fixtures (small), under $OUT/pipelines_cost/fixtures: the persistent GEMM (1x1 and 2x1,
1024x1024x512 on 8 CTAs) at "waits" and "signals", the TMA probe (4 blocks x 32 loads; 4 KiB x 1 stage,
32 KiB x 4 stages) at "signals" with its ground truth. And the TMA probe's comparison (every config of
examples/persistent_gemm/tma_probe.py: traced issue -> ready against the in-kernel ground truth).

    python gpu/pipelines_cost.py [--quick] [--only fa4,quack,gemm,probe,captures] [--launches N]
    python gpu/pipelines_cost.py --only iket      # gpu/iket_sass.py (IKET's patched code), ~5 min

Step "gemm" first checks the persistent GEMM against torch as examples/persistent_gemm/run.py does
(8192^3, ragged sizes with bf16 and fp32 out, fewer tiles than CTAs; both cluster shapes).

--quick: 60 launches per variant, no ablation, no FA4 causal (~2 min). Results: $OUT/pipelines_cost/
results.json (written after every step), log lines as they come, a short table last. Note for the
persistent GEMM: it has no named barriers and no polls, so `bar_sync_only` compiles to the untouched
kernel and `polls_timed`, `polls_off`, `no_named_barriers` to the "waits" kernel (checked on the CPU):
those rows are extra noise rows there (they matter for quack).
Expected on an H200 (full run): imports and compiles ~4 min (FA4 ~6 s per build, quack ~3 s, the
persistent GEMM ~2 s, ~55 builds), timing ~1 min, decodes ~30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("", "examples/pipeline", "examples/pipelines", "examples/persistent_gemm"):
    sys.path.insert(0, str(ROOT / sub))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")

from ikp_cute.testing.pipelines_cost_variants import ABLATION, DEFAULT, THRESHOLDS  # noqa: E402

RECORDS_PER_LANE = 8192  # a GEMM consumer warp at "signals": ~3 records per k-tile, ~2,000 k-tiles per CTA
SIZE = 8192


class Harness:
    def __init__(self, out: Path, launches: int, quick: bool):
        self.out, self.launches, self.quick = out, launches, quick
        self.results: dict = {"errors": [], "config": {"launches": launches, "quick": quick}}

    def log(self, *args):
        print(*args, flush=True)

    def save(self):
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def step(self, name, fn):
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (one failing kernel must not cost the others' numbers)
            self.results["errors"].append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc()
        self.log(f"[{name}] {time.time() - t0:.1f} s")
        self.save()

    def variants(self, ablation: bool):
        """The default levels; unless --quick, the thresholds' neighbours, and with `ablation` the ablation."""
        if self.quick:
            return DEFAULT
        return DEFAULT + THRESHOLDS + (ABLATION if ablation else [])

    def time_and_record(self, kernel: str, fns: dict, outputs: dict, sessions: dict, traces: dict):
        """Alternating launches of every variant, costs vs `base`, then the decoded waits/signals captures."""
        import numpy as np
        from measure import time_alternating

        times = time_alternating(fns, self.launches)
        base = float(np.median(times["base"]))
        rows = {name: {"ms": float(np.median(t)), "cost": float(np.median(t)) / base - 1.0,
                       "identical": outputs.get(name)} for name, t in times.items()}
        self.results[kernel] = {"cost": rows}
        self.log(f"{kernel}: " + "  ".join(f"{n} {r['cost']:+.2%}" for n, r in rows.items()))
        for name in ("waits", "signals"):
            if name in sessions:
                self.results[kernel][f"records_{name}"] = self.decode_one(fns[name], sessions[name], traces[name],
                                                                         f"{kernel}_{name}")

    def decode_one(self, launch, session, trace, stem: str) -> dict:
        """One launch into a zeroed buffer, decoded: records per CTA by region / instant kind, losses."""
        import numpy as np
        import summary

        from host_decode.load.capture import load_capture

        with session.zeroed_then_synced():
            launch()
        path = trace.save(session, self.out / f"{stem}.npy")
        try:
            meta = json.loads(Path(str(path)[:-4] + ".json").read_text())
            t = load_capture(path)
            ops = summary.op_of_event(meta)
            blocks = max(1, len(np.unique(t.lanes["block"])))

            def per_cta(events):
                counts: dict = {}
                for e, n in zip(*np.unique(events, return_counts=True)):  # one row per event id, not per record
                    pipe, op, _ = ops.get(int(e), ("?", f"event_{e}", 0))
                    key = op if pipe == "barrier" else f"{op}_{pipe}"
                    counts[key] = counts.get(key, 0) + int(n)
                return {k: round(v / blocks, 1) for k, v in sorted(counts.items())}

            return {"regions_per_cta": per_cta(t.spans["event"]), "instants_per_cta": per_cta(t.instants["event"]),
                    "dropped_on_device": int(t.loss.dropped_on_device), "lost": int(t.loss.lost),
                    "table": summary.table(t, meta)}
        finally:
            for p in (Path(path), Path(str(path)[:-4] + ".json")):
                p.unlink(missing_ok=True)

    # --- the persistent GEMM --------------------------------------------------------------------------------

    def gemm(self, cluster_m: int, poll: bool = False):
        import host
        import torch

        from ikp_cute.pipelines import session_for, trace_pipelines

        kernel = f"gemm_{cluster_m}x1" + ("_poll" if poll else "")
        a, b, c = host.gemm_inputs(SIZE, SIZE, SIZE, seed=cluster_m)
        views = host.dlpack_views(a, b, c)
        ctas = host.num_ctas(cluster_m)
        plain = host.compile_gemm(views, cluster_m=cluster_m, ctas=ctas, options="", poll_before_wait=poll)
        plain(*views)
        torch.cuda.synchronize()
        host.check_gemm(c, a, b, kernel)
        ref = c.clone()
        fns = {"base": lambda: plain(*views), "noise": lambda: plain(*views)}
        outputs, sessions, traces = {}, {}, {}
        for name, level, options in (self.variants(ablation=True) if not poll else DEFAULT):
            session = session_for(ctas, 12, records_per_lane=RECORDS_PER_LANE, kernel=kernel)
            trace = trace_pipelines(session, level=level, **options)
            t0 = time.time()
            compiled = host.compile_gemm(views, cluster_m=cluster_m, ctas=ctas, trace=trace, options="",
                                         poll_before_wait=poll)
            c.fill_(float("nan"))
            compiled(*views)
            torch.cuda.synchronize()
            outputs[name] = bool(torch.equal(c, ref))
            self.log(f"{kernel} {name}: compiled in {time.time() - t0:.1f} s, output identical: {outputs[name]}")
            fns[name] = lambda f=compiled: f(*views)
            sessions[name], traces[name] = session, trace
        self.results.setdefault("ctas", {})[kernel] = ctas
        self.time_and_record(kernel, fns, outputs, sessions, traces)

    # --- quack ----------------------------------------------------------------------------------------------

    def quack(self):
        import torch
        from compile_cpu import quack_private_cache_dicts
        from quack.gemm_interface import gemm

        from ikp_cute.pipelines import session_for, trace_pipelines

        torch.manual_seed(2)
        A = torch.randn(SIZE, SIZE, dtype=torch.bfloat16, device="cuda")
        B = torch.randn(SIZE, SIZE, dtype=torch.bfloat16, device="cuda")
        dicts = quack_private_cache_dicts()

        def snapshot():
            return [dict(d) for d in dicts]

        def activate(snap):
            for d, entries in zip(dicts, snap):
                d.clear()
                d.update(entries)

        saved = snapshot()
        activate([{} for _ in dicts])
        ref = gemm(A, B, tuned=False)
        torch.cuda.synchronize()
        plain = snapshot()
        sms = torch.cuda.get_device_properties(0).multi_processor_count

        def runner(snap):
            return lambda: (activate(snap), gemm(A, B, tuned=False))[1]

        fns = {"base": runner(plain), "noise": runner(plain)}
        outputs, sessions, traces = {}, {}, {}
        for name, level, options in self.variants(ablation=True):
            session = session_for(sms, 12, records_per_lane=RECORDS_PER_LANE, kernel="quack_gemm_sm90")
            trace = trace_pipelines(session, level=level, **options)
            activate([{} for _ in dicts])
            t0 = time.time()
            with trace:
                out = gemm(A, B, tuned=False)
            torch.cuda.synchronize()
            outputs[name] = bool(torch.equal(out, ref))
            self.log(f"quack {name}: compiled in {time.time() - t0:.1f} s, output identical: {outputs[name]}")
            fns[name] = runner(snapshot())
            sessions[name], traces[name] = session, trace
        try:
            self.time_and_record("quack", fns, outputs, sessions, traces)
        finally:
            activate(saved)

    # --- FA4 ------------------------------------------------------------------------------------------------

    def fa4(self, causal: bool):
        import torch
        from compile_cpu import fa4_private_cache
        from flash_attn.cute import interface

        from ikp_cute.pipelines import session_for, trace_pipelines

        kernel = "fa4_causal" if causal else "fa4_noncausal"
        b, s, h, d = 2, 4096, 16, 128
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))

        def build(trace=None):
            with fa4_private_cache() as cache:
                with trace or contextlib.nullcontext():
                    out = interface.flash_attn_func(q, k, v, causal=causal)
                torch.cuda.synchronize()
            return cache, out[0] if isinstance(out, tuple) else out

        def runner(cache):
            def run():
                interface._flash_attn_fwd.compile_cache = cache
                out = interface.flash_attn_func(q, k, v, causal=causal)
                return out[0] if isinstance(out, tuple) else out

            return run

        saved = interface._flash_attn_fwd.compile_cache
        plain, ref = build()
        fns = {"base": runner(plain), "noise": runner(plain)}
        outputs, sessions, traces = {}, {}, {}
        ctas = b * h * -(-s // 128)
        for name, level, options in self.variants(ablation=False):
            session = session_for(ctas, 12, records_per_lane=512, kernel=kernel)
            trace = trace_pipelines(session, level=level, **options)
            t0 = time.time()
            cache, _ = build(trace)
            out = runner(cache)()
            torch.cuda.synchronize()
            outputs[name] = bool(torch.equal(out, ref))
            self.log(f"{kernel} {name}: compiled in {time.time() - t0:.1f} s, output identical: {outputs[name]}")
            fns[name] = runner(cache)
            sessions[name], traces[name] = session, trace
        try:
            self.time_and_record(kernel, fns, outputs, sessions, traces)
        finally:
            interface._flash_attn_fwd.compile_cache = saved

    def gemm_check(self):
        """examples/persistent_gemm/run.py's checks against torch: 8192^3, ragged sizes (bf16 and fp32 out),
        fewer tiles than CTAs; both cluster shapes. A failure is an error of this run."""
        import importlib.util

        spec = importlib.util.spec_from_file_location("persistent_gemm_run", ROOT / "examples/persistent_gemm/run.py")
        gemm_run = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gemm_run)
        checks = {"checks": []}
        failures = gemm_run.check_all(gemm_run.QUICK_PROBLEMS if self.quick else gemm_run.PROBLEMS, checks)
        self.results["gemm_check"] = checks["checks"]
        if failures:
            raise AssertionError("; ".join(failures))

    def iket(self):
        """gpu/iket_sass.py in its own process (IKET's launcher and cuda-gdb run the workload again)."""
        import subprocess

        proc = subprocess.run([sys.executable, str(ROOT / "gpu" / "iket_sass.py")], capture_output=True, text=True,
                              timeout=540, check=False)
        (self.out / "iket_sass.log").write_text(proc.stdout + proc.stderr)
        self.results["iket_sass"] = {"rc": proc.returncode, "tail": proc.stdout[-4000:]}
        self.log(proc.stdout[-4000:])

    # --- TMA probe and CI fixtures ----------------------------------------------------------------------------

    def probe(self):
        import tma_probe

        configs = tma_probe.CONFIGS[:3] if self.quick else tma_probe.CONFIGS
        rows = []
        for tile_bytes, stages in configs:
            row = tma_probe.run_config(tile_bytes, stages, blocks=16, iters=64)
            rows.append(row)
            d, a = row["traced_minus_truth"]["latency"], row["async_units"]
            self.log(f"tma probe {tile_bytes} B x{stages}: truth p50 {row['truth_latency_ns']['p50']:.0f} ns, "
                     f"matched {row['matched']}/{row['loads']}, traced - truth p50 {d.get('p50')} ns, "
                     f"|diff| <= 64 ns {d.get('within_64ns')}; async units {a['exact']}/{a['loads']} exact, "
                     f"outside bounds issue {a['issue_outside']} ready {a['ready_outside']}")
        self.results["tma_probe"] = {"configs": rows, "fit": tma_probe.bandwidth_fit(rows)}

    def captures(self):
        """Small captures for CI fixtures: the persistent GEMM (waits, signals; 1x1, 2x1) and the TMA probe."""
        import host
        import tma_probe
        import torch

        from ikp_cute.pipelines import session_for, trace_pipelines

        fixtures = self.out / "fixtures"
        fixtures.mkdir(exist_ok=True)
        m, n, k, ctas = 1024, 1024, 512, 8
        kept = {}
        for cluster_m in (1, 2):
            for level in ("waits", "signals"):
                a, b, c = host.gemm_inputs(m, n, k, seed=10 + cluster_m)
                views = host.dlpack_views(a, b, c)
                kernel = f"persistent_gemm_{cluster_m}x1"
                session = session_for(ctas, 12, records_per_lane=128, kernel=kernel)
                trace = trace_pipelines(session, level=level)
                compiled = host.compile_gemm(views, cluster_m=cluster_m, ctas=ctas, trace=trace, options="")
                with session.zeroed_then_synced():
                    compiled(*views)
                host.check_gemm(c, a, b, f"{kernel} {level} capture")
                path = trace.save(session, fixtures / f"{kernel}_{level}.npy")
                kept[Path(path).name] = Path(path).stat().st_size
        for tile_bytes, stages in ((4096, 1), (32768, 4)):
            row = tma_probe.run_config(tile_bytes, stages, blocks=4, iters=32, out_dir=fixtures)
            kept[f"tma_probe_{tile_bytes}B_{stages}s"] = {**row["traced_minus_truth"],
                                                          "async_units": row["async_units"]}
        torch.cuda.synchronize()
        self.results["fixtures"] = kept
        self.log("fixtures: " + ", ".join(f"{name} ({v} B)" for name, v in kept.items() if isinstance(v, int)))


def print_table(results: dict) -> None:
    print("\n==== trace_pipelines cost (median of alternating launches, vs the untouched kernel) ====")
    kernels = [k for k in ("fa4_noncausal", "fa4_causal", "quack", "gemm_1x1", "gemm_2x1", "gemm_1x1_poll")
               if k in results]
    names = []
    for k in kernels:
        names += [n for n in results[k]["cost"] if n not in names]
    print(f"{'variant':<18}" + "".join(f"{k:>15}" for k in kernels))
    for n in names:
        cells = []
        for k in kernels:
            r = results[k]["cost"].get(n)
            cells.append("" if r is None else f"{r['cost']:+.2%}" + ("" if r["identical"] in (None, True) else "!"))
        print(f"{n:<18}" + "".join(f"{c:>15}" for c in cells))
    print("base ms: " + "  ".join(f"{k} {results[k]['cost']['base']['ms']:.4f}" for k in kernels))
    print("('!' = output differs from the untouched kernel's)")
    for k in kernels:
        for level in ("waits", "signals"):
            rec = results[k].get(f"records_{level}")
            if rec:
                print(f"{k} {level}: regions/CTA {rec['regions_per_cta']} instants/CTA {rec['instants_per_cta']} "
                      f"dropped {rec['dropped_on_device']} lost {rec['lost']}")
    probe = results.get("tma_probe")
    if probe:
        for r in probe["configs"]:
            d = r["traced_minus_truth"]
            print(f"tma probe {r['tile_bytes']:>6} B x{r['stages']}: truth p50 {r['truth_latency_ns']['p50']:.0f} ns; "
                  f"traced - truth: issue {d['issue'].get('p50')} ready {d['ready'].get('p50')} latency "
                  f"{d['latency'].get('p50')} ns (p90 |diff| {d['latency'].get('p90_abs')}); "
                  f"matched {r['matched']}/{r['loads']}")
            a = r.get("async_units") or {}
            print(f"  async units: {a.get('intervals')}/{a.get('loads')} loads ({a.get('exact')} exact); truth outside "
                  f"its bounds by > {a.get('timer_step_ns')} ns: issue {a.get('issue_outside')}, ready "
                  f"{a.get('ready_outside')} (farthest {a.get('farthest_outside_ns')} ns)")
        print("tma probe fit (fixed ns + bytes / bandwidth, 1-stage loads):", probe.get("fit"))
    print("errors:", results["errors"] or "none")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="fa4,quack,gemm,probe,captures")
    ap.add_argument("--launches", type=int, default=None, help="launches per variant (default 200; --quick 60)")
    args = ap.parse_args(argv)
    out = Path(os.environ.get("OUT", "gpu_out")) / "pipelines_cost"
    out.mkdir(parents=True, exist_ok=True)
    import torch

    h = Harness(out, args.launches or (60 if args.quick else 200), args.quick)
    h.results["device"] = torch.cuda.get_device_name()
    only = set(args.only.split(","))
    t0 = time.time()
    if "gemm" in only:
        h.step("gemm_check", h.gemm_check)
    if "captures" in only:
        h.step("captures", h.captures)
    if "probe" in only:
        h.step("probe", h.probe)
    if "gemm" in only:
        h.step("gemm_1x1", lambda: h.gemm(1))
        h.step("gemm_2x1", lambda: h.gemm(2))
        h.step("gemm_1x1_poll", lambda: h.gemm(1, poll=True))
    if "quack" in only:
        h.step("quack", h.quack)
    if "fa4" in only:
        h.step("fa4_noncausal", lambda: h.fa4(False))
        if not args.quick:
            h.step("fa4_causal", lambda: h.fa4(True))
    if "iket" in only:
        h.step("iket", h.iket)
    h.results["seconds"] = time.time() - t0
    h.save()
    print_table(h.results)
    print(f"total {h.results['seconds']:.0f} s; results: {out / 'results.json'}")
    return 1 if h.results["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
