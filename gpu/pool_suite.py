"""The recording pool on a GPU (H100/H200), one command (~4 minutes): no sizes, no sizing pass, the launch
selection decided on the device, and what it costs.

Stages (each in its own try; a failure is listed in results["errors"] and the run goes on):
  protocol  a small kernel with ambient regions (ikp_cute/testing/kernels/ambient_kernel.py, 64 blocks x 8 warps)
            traced into a pool: the default selection records exactly launch 1; every=3, none, last, all pick
            the launches they say; every lane's records are exactly the ones its code made; a pool too small
            loses records and counts them, and its NEXT equals the host model's (ikp_cute/testing/pool_model.py)
            for the same lanes; a pool of the size the summary names holds everything; the jit function called
            in a loop under a trace (each call traced, the DSL's JIT cache serving all but the first): one
            kernel id, every launch counted.
  fa4       FA4's sm90 forward (flash_attn.cute.interface.flash_attn_func), bf16 b=2 s=4096 h=16 d=128, causal
            and not; quack  quack's GEMM (quack.gemm_interface.gemm(A, B, tuned=False)), bf16 8192^3. For each:
            compiled under `trace_pipelines(pool)` at the default level with a private compile cache; 20
            launches with the default selection: exactly launch 1 recorded, decoded with nothing lost, outputs
            bit-identical to the untouched kernel's. Then timed (median of --launches alternating launches,
            a GPU sleep before each batch: examples/pipeline/measure.py): untouched, untouched again (noise),
            recorded (selection "all", the pool emptied before each), closed ("none": the decision alone),
            ahead (a window set but not reached: the decision waits for the launch counter), default (the
            default selection's steady state after launch 1, its own compile and pool).
  exhaust   FA4 non-causal at level "signals" with every wait a region into a 1 MiB pool: lost records and
            lanes without a unit counted, the size that would have held everything named; then a pool of 1.25x
            that size (a launch's waits depend a little on timing): nothing lost, about as many records made.
Results: $OUT/pool_suite/results.json (written after every stage), a short table printed last.

    python gpu/pool_suite.py [--launches 200] [--only protocol,fa4,quack,exhaust]
    python gpu/pool_suite.py --dry-run       # no GPU: the compiles and the host side only
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
for sub in ("", "examples/pipeline", "examples/pipelines"):
    sys.path.insert(0, str(ROOT / sub))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")

SELECT_AHEAD = "1000000:"  # a window the run never reaches: every launch reads the counter and stays closed


class Suite:
    def __init__(self, out: Path, launches: int):
        self.out, self.launches = out, launches
        self.results: dict = {"errors": [], "config": {"launches": launches}}

    def log(self, *args):
        print(*args, flush=True)

    def save(self):
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def step(self, name, fn):
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (one failing stage must not cost the others' numbers)
            self.results["errors"].append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc()
        self.log(f"[{name}] {time.time() - t0:.1f} s")
        self.save()

    def check(self, group: str, name: str, ok: bool, detail=None):
        self.results.setdefault("checks", {}).setdefault(group, {})[name] = {"ok": bool(ok), "detail": detail}
        self.log(f"  {'ok  ' if ok else 'FAIL'} {group}: {name}" + (f" ({detail})" if detail is not None else ""))

    # --- what a pool says ---------------------------------------------------------------------------------

    def decoded(self, pool):
        """[(kernel id, launch, records per lane {lane: n}, nothing lost, spans)] of a pool's captures."""
        import numpy as np

        from host_decode.core.decoder import decode

        out = []
        for buf, meta in pool.captures():
            trace = decode(buf, names=meta, meta=meta)
            lanes = trace.lanes[trace.lanes["records"] > 0]
            # records per lane without the two anchors and the finalize the reader adds
            per_lane = {int(ln): int(n) - 3 - int(d > 0) for ln, n, d in zip(lanes["lane"], lanes["records"],
                                                                              lanes["dropped"])}
            clean = trace.loss.lost == 0 and trace.loss.dropped_on_device == 0 and meta["pool"]["lost_records"] == 0
            out.append({"kernel": meta["pool"]["kernel_id"], "launch": meta["launch_index"], "per_lane": per_lane,
                        "clean": bool(clean), "spans": int(len(trace.spans)), "instants": int(len(trace.instants)),
                        "dropped": int(trace.loss.dropped_on_device), "malformed": int(trace.loss.totals["malformed"]),
                        "sm_known": bool((lanes["sm"] >= 0).all()) if len(lanes) else True,
                        "units": int(meta["pool"]["units"]), "lanes": int(np.count_nonzero(trace.lanes["records"]))})
        return out

    # --- protocol: a small kernel against the host's model ------------------------------------------------------

    def protocol(self):
        import torch
        from cutlass import Int32, cute
        from cutlass.cute.runtime import from_dlpack

        from host_decode.core import wire
        from ikp_cute.pipelines import trace_pipelines
        from ikp_cute.pool import Pool
        from ikp_cute.testing.kernels import ambient_kernel as ak
        from ikp_cute.testing.pool_model import PoolModel

        blocks, iters, warps = 64, 7, ak.THREADS // 32
        x0 = torch.rand(blocks * ak.THREADS, device="cuda")
        expect = {b * warps + w: (2 + 4 * iters if w < 4 else 4) for b in range(blocks) for w in range(warps)}

        def build(pool):
            x = x0.clone()
            with trace_pipelines(pool):
                compiled = cute.compile(ak.launch, from_dlpack(x), Int32(iters), blocks, True)
            return compiled, x

        plain_x = x0.clone()
        plain = cute.compile(ak.launch, from_dlpack(plain_x), Int32(iters), blocks, False)
        plain(from_dlpack(plain_x), Int32(iters))
        pool = Pool.create(4 << 20, max_kernels=8)
        compiled, x = build(pool)

        def run(n):
            for _ in range(n):
                compiled(from_dlpack(x), Int32(iters))
            torch.cuda.synchronize()

        run(1)
        self.check("protocol", "output bit-identical to the kernel without regions", torch.equal(x, plain_x))
        run(4)
        got = self.decoded(pool)
        self.check("protocol", "default selection: launch 1 only", [g["launch"] for g in got] == [1],
                   [g["launch"] for g in got])
        self.check("protocol", "every lane's records exactly its code's", got and got[0]["per_lane"] == expect,
                   sum(got[0]["per_lane"].values()) if got else None)
        self.check("protocol", "decoded: nothing lost, SM ids known", got and got[0]["clean"] and got[0]["sm_known"])
        self.check("protocol", "launches counted on the device", pool.summary()["kernels"][0]["launches_seen"] == 5)
        pool.reset()
        pool.select(0, "every=3")
        run(7)
        self.check("protocol", "every=3 after reset: launches 0, 3, 6", [g["launch"] for g in self.decoded(pool)]
                   == [0, 3, 6])
        pool.reset()
        pool.select(0, "none")
        run(3)
        summary = pool.summary()
        self.check("protocol", "none: nothing recorded, 3 launches counted",
                   summary["captures"] == 0 and summary["units_requested"] == 0
                   and summary["kernels"][0]["launches_seen"] == 3)
        pool.reset()
        pool.select(0, "last")
        run(4)
        got = self.decoded(pool)
        self.check("protocol", "last: the newest launch (3) only", [g["launch"] for g in got] == [3]
                   and got[0]["per_lane"] == expect, pool.summary()["loss"]["superseded"])
        pool.select(0, "2:4")
        run(5)  # launches 4..8 of the count since the reset: the window 2:4 is past, nothing records
        self.check("protocol", "a passed window records nothing (and is emptied)",
                   [g["launch"] for g in self.decoded(pool)] == [3])
        # a pool too small: lost records counted, NEXT as the host model asks for the same lanes
        small = Pool.create(wire.pool_control_bytes(8) + 40 * wire.POOL_UNIT_BYTES, max_kernels=8,
                            default_selection="all")
        tiny, xs = build(small)
        tiny(from_dlpack(xs), Int32(iters))
        torch.cuda.synchronize()
        s = small.summary()
        model = PoolModel(small.size_bytes, max_kernels=8, default="all")
        model.launch(0, dict(expect), wpb=warps)  # an ambient region is two records of one slot each
        stored = s["records"]
        self.check("protocol", "tiny pool: stored + lost = every record made",
                   stored + s["lost_records"] == sum(expect.values()), (stored, s["lost_records"]))
        self.check("protocol", "tiny pool: NEXT equals the host model's", s["units_requested"] == model.next,
                   (s["units_requested"], model.next))
        enough = Pool.create(-(-s["bytes_needed"] // 8) * 8, max_kernels=8, default_selection="all")
        full, xf = build(enough)
        full(from_dlpack(xf), Int32(iters))
        torch.cuda.synchronize()
        got = self.decoded(enough)
        self.check("protocol", "the size the summary names holds everything",
                   enough.summary()["lost_records"] == 0 and got and got[0]["per_lane"] == expect,
                   s["bytes_needed"])
        self.results["protocol_tiny_summary"] = s
        # the jit function called directly under a trace (no cute.compile): traced at every call, the calls after
        # the first served by the DSL's JIT cache (the same module), every launch counted under one kernel id
        looped, xl = Pool.create(4 << 20, max_kernels=8), x0.clone()
        with trace_pipelines(looped):
            for _ in range(4):
                ak.launch(from_dlpack(xl), Int32(iters), blocks, True)
        torch.cuda.synchronize()
        got, seen = self.decoded(looped), looped.summary()["kernels"]
        self.check("protocol", "a jit called in a loop: one kernel id, 4 launches, launch 1 recorded",
                   len(looped.kernels) == 1 and seen[0]["launches_seen"] == 4 and [g["launch"] for g in got] == [1]
                   and got[0]["per_lane"] == expect, (looped.kernels, [k["launches_seen"] for k in seen]))

    # --- FA4 and quack ------------------------------------------------------------------------------------------

    def fa4(self, causal: bool):
        import torch
        from compile_cpu import fa4_private_cache
        from flash_attn.cute import interface

        from ikp_cute.pipelines import trace_pipelines

        name = "fa4_causal" if causal else "fa4_noncausal"
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
        try:
            plain, ref = build()
            self.kernel(name, runner(plain), ref, lambda pool: runner(build(trace_pipelines(pool))[0]))
        finally:
            interface._flash_attn_fwd.compile_cache = saved

    def quack(self):
        import torch
        from compile_cpu import quack_private_cache_dicts
        from quack.gemm_interface import gemm

        from ikp_cute.pipelines import trace_pipelines

        torch.manual_seed(2)
        A = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        B = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        dicts = quack_private_cache_dicts()

        def snapshot():
            return [dict(d) for d in dicts]

        def activate(snap):
            for d, entries in zip(dicts, snap):
                d.clear()
                d.update(entries)

        def runner(snap):
            return lambda: (activate(snap), gemm(A, B, tuned=False))[1]

        saved = snapshot()
        try:
            activate([{} for _ in dicts])
            ref = gemm(A, B, tuned=False)
            torch.cuda.synchronize()
            plain = snapshot()

            def traced(pool):
                activate([{} for _ in dicts])
                with trace_pipelines(pool):
                    gemm(A, B, tuned=False)
                torch.cuda.synchronize()
                return runner(snapshot())

            self.kernel("quack", runner(plain), ref, traced)
        finally:
            activate(saved)

    def kernel(self, name: str, untouched, ref, traced):
        """The checks and timings of one real kernel (module docstring). `traced(pool)` compiles it into `pool`
        and returns its launcher."""
        import numpy as np
        import torch
        from measure import time_alternating

        from ikp_cute.pool import Pool

        t0 = time.time()
        default_pool = Pool.create()
        default_run = traced(default_pool)  # its compile launches it once: launch 0
        outs = [default_run() for _ in range(19)]  # launches 1..19
        torch.cuda.synchronize()
        self.log(f"{name}: traced compile and 20 launches {time.time() - t0:.1f} s")
        got = self.decoded(default_pool)
        summary = default_pool.summary()
        self.check(name, "default selection: exactly launch 1 recorded", [g["launch"] for g in got] == [1],
                   [g["launch"] for g in got])
        self.check(name, "decoded with nothing lost", bool(got) and got[0]["clean"] and not summary["lost_records"],
                   {k: got[0][k] for k in ("spans", "instants", "lanes", "units", "dropped", "malformed")}
                   if got else None)
        self.check(name, "outputs bit-identical (launches 1, 2, 19)",
                   all(torch.equal(outs[i], ref) for i in (0, 1, 18)))
        self.check(name, "20 launches counted", summary["kernels"][0]["launches_seen"] == 20)
        var_pool = Pool.create()
        var_run = traced(var_pool)

        def selecting(selection, reset=False):
            def setup():
                if reset:
                    var_pool.reset()
                var_pool.select(0, selection)
            return setup

        variants = {"untouched": untouched, "noise": untouched, "recorded": (selecting("all", True), var_run),
                    "closed": (selecting("none"), var_run), "ahead": (selecting(SELECT_AHEAD), var_run),
                    "default": default_run}
        times = time_alternating(variants, self.launches)
        base = float(np.median(times["untouched"]))
        rows = {n: {"ms": float(np.median(t)), "cost": float(np.median(t)) / base - 1.0} for n, t in times.items()}
        var_pool.reset()
        var_pool.select(0, "all")
        out = var_run()
        torch.cuda.synchronize()
        recorded = self.decoded(var_pool)
        self.check(name, "recorded launch: output bit-identical, nothing lost",
                   torch.equal(out, ref) and bool(recorded) and recorded[0]["clean"])
        self.results[name] = {"cost": rows, "records": sum(sum(g["per_lane"].values()) for g in got),
                              "pool_bytes_used": summary["bytes_used"], "recorded_launch": got[0] if got else None}
        self.log(f"{name}: " + "  ".join(f"{n} {r['cost']:+.2%}" for n, r in rows.items()))

    # --- exhaustion on a real kernel ----------------------------------------------------------------------------

    def exhaust(self):
        import torch
        from compile_cpu import fa4_private_cache
        from flash_attn.cute import interface

        from ikp_cute.pipelines import trace_pipelines
        from ikp_cute.pool import Pool

        b, s, h, d = 2, 4096, 16, 128
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        saved = interface._flash_attn_fwd.compile_cache

        def record(size):
            pool = Pool.create(size, default_selection="all")
            with fa4_private_cache():
                with trace_pipelines(pool, level="signals", passing_waits=True):
                    interface.flash_attn_func(q, k, v)
                torch.cuda.synchronize()
            return pool.summary(), self.decoded(pool)

        try:
            small, got = record(1 << 20)
            made = small["records"] + small["lost_records"]
            row = small["kernels"][0]
            self.check("exhaust", "1 MiB pool: records lost and counted", small["lost_records"] > 0,
                       {"stored": small["records"], "lost": small["lost_records"],
                        "lanes_without_unit": row["lanes_without_unit"], "bytes_needed": small["bytes_needed"]})
            self.check("exhaust", "DROPPED instants carry the lost records of lanes with a unit",
                       sum(g["dropped"] for g in got) == row["lost_records_in_units"])
            # FA4's waits gated by a poll are made only when the poll failed: a second launch makes about as many
            # records (the protocol stage shows the size named holding exactly everything, on a kernel whose
            # records do not depend on timing)
            big, got = record(-(-int(small["bytes_needed"] * 1.25) // 8) * 8)
            self.check("exhaust", "a pool of 1.25 x the size named: nothing lost, about as many records made",
                       big["lost_records"] == 0 and abs(big["records"] - made) <= 0.05 * made and bool(got)
                       and got[0]["clean"], {"records": big["records"], "made before": made})
            self.results["exhaust"] = {"small": small, "big": {k: big[k] for k in ("records", "lost_records",
                                                                                     "bytes_used", "bytes_needed")}}
        finally:
            interface._flash_attn_fwd.compile_cache = saved

    # --- the table --------------------------------------------------------------------------------------------

    def table(self):
        self.log("\n==== recording pool (cost: median vs untouched; alternating launches) ====")
        head = ["kernel", "untouched ms", "noise", "recorded", "closed", "ahead", "default", "records"]
        self.log(" | ".join(head))
        for name in ("fa4_noncausal", "fa4_causal", "quack"):
            if name not in self.results:
                continue
            c = self.results[name]["cost"]
            self.log(" | ".join([name, f"{c['untouched']['ms']:.4f}"]
                                + [f"{c[v]['cost']:+.2%}" for v in head[2:7]] + [str(self.results[name]["records"])]))
        ex = self.results.get("exhaust")
        if ex:
            s = ex["small"]
            self.log(f"exhaustion (FA4, 1 MiB pool): stored {s['records']}, lost {s['lost_records']}, lanes without a "
                     f"unit {s['kernels'][0]['lanes_without_unit']}, bytes needed {s['bytes_needed']}; "
                     f"a pool of that size: lost {ex['big']['lost_records']}")
        checks = self.results.get("checks", {})
        failed = [f"{g}: {n}" for g, cs in checks.items() for n, c in cs.items() if not c["ok"]]
        total = sum(len(cs) for cs in checks.values())
        self.log(f"checks: {total - len(failed)}/{total} passed" + (f"; FAILED: {failed}" if failed else ""))
        self.log(f"errors: {self.results['errors']}")


def dry_run() -> None:
    """On a machine without a GPU: every kernel the suite runs compiled into a fake pool (FA4 and quack on fake
    tensors, examples/pipelines/compile_cpu.py), and the host side read back from a pool the host model built."""
    import numpy as np
    from compile_cpu import fa4_compile, quack_compile
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from host_decode.core.decoder import decode
    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.pool import Pool
    from ikp_cute.testing.kernels import ambient_kernel as ak
    from ikp_cute.testing.pool_model import PoolModel

    os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
    pool = Pool.fake(0x7F00_0000_0000)
    x = make_fake_compact_tensor(Float32, (64 * ak.THREADS,))
    with trace_pipelines(pool):
        cute.compile(ak.launch, x, Int32(7), 64, True)
    compiled = {
        "fa4": fa4_compile(trace_pipelines(pool), batch=2, seqlen=4096, heads=16, causal=False),
        "fa4 causal": fa4_compile(trace_pipelines(pool), batch=2, seqlen=4096, heads=16, causal=True),
        "fa4 signals": fa4_compile(trace_pipelines(pool, level="signals", passing_waits=True), batch=2, seqlen=4096,
                                   heads=16),
        "quack": quack_compile(trace_pipelines(pool), m=8192, n=8192, k=8192)}
    print("compiled into a fake pool:", {k: v[:60] for k, v in pool.kernels.items()})
    if len(pool.kernels) != 1 + len(compiled):  # other code (FA4 causal or not: one name), another kernel id
        raise SystemExit(f"expected {1 + len(compiled)} kernel ids, the pool holds {sorted(pool.kernels)}")
    from ikp_cute.testing import smem

    for name, c in compiled.items():  # what the launch will ask for (a traced kernel over the limit cannot launch)
        used = smem.block_bytes(c)
        print(f"shared memory, {name} traced: {used} bytes of {smem.SMEM_LIMIT_SM90} (dynamic "
              f"{smem.launch_dynamic(c)[0]})")
        if used > smem.SMEM_LIMIT_SM90:
            raise SystemExit(f"{name}: the traced kernel asks for {used} bytes of shared memory per block")
    model = PoolModel(1 << 20, default="all")
    model.launch(0, {lane: 30 for lane in range(64 * 8)}, wpb=8, rng=np.random.default_rng(0))
    from host_decode.load.pool import read_pool

    got = read_pool(model.words, {0: {"name": "ambient"}})
    for buf, meta in got.captures:
        trace = decode(buf, names=meta, meta=meta)
        print("host side:", meta["kernel"], "launch", meta["launch_index"], "spans", len(trace.spans), "instants",
              len(trace.instants), "lost", got.summary["lost_records"], "bytes needed", got.summary["bytes_needed"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--only", default="protocol,fa4,quack,exhaust")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile everything into a fake pool")
    args = parser.parse_args()
    if args.dry_run:
        dry_run()
        return
    out = Path(os.environ.get("OUT", "/tmp")) / "pool_suite"
    out.mkdir(parents=True, exist_ok=True)
    suite = Suite(out, args.launches)
    import torch

    suite.results["device"] = torch.cuda.get_device_name()
    only = set(args.only.split(","))
    steps = [("protocol", suite.protocol), ("fa4_noncausal", lambda: suite.fa4(False)),
             ("fa4_causal", lambda: suite.fa4(True)), ("quack", suite.quack), ("exhaust", suite.exhaust)]
    for name, fn in steps:
        if name.split("_")[0] in only:
            suite.step(name, fn)
    suite.table()
    suite.save()


if __name__ == "__main__":
    main()
