"""`ikp record` on an H100/H200, one command of about 5 minutes (a hard limit of 6): the examples recorded and
checked, the cost of a recorded and of a closed-window launch, Nsight Compute's replay, NVIDIA IKET beside it.

    python gpu/record_suite.py              # on the GPU; results in $OUT (default /tmp/record_suite_out)
    python gpu/record_suite.py --dry-run    # no GPU: the recordings as dry runs, the cost worker's compiles

Phases (expected wall time on an H200; 16 CPU cores compile the first phase's programs side by side):
  1 (together, ~80 s)  ikp record of examples/record/standalone.py, fa4.py (causal and not, one process: two
                       compiles of one kernel name, two kernels; with --profile its torch.profiler trace is
                       aligned) and torch_compile_module.py; `ikp record --launches all -- ncu --section
                       SpeedOfLight -c 3 python standalone.py --iters 3` (kernel replay runs each launch several
                       times: the device must count 3 launches, like Python); `ikp record -- nsys profile python
                       standalone.py --iters 3` where nsys is installed (both record: nsys's report and the
                       recording); the cost worker compiling its untouched and traced builds, then waiting for
                       phase 2.
  2 (alone, ~15 s)     cost, same process, per kernel (row sums, FA4 non-causal b=2 s=4096 h=16 d=128, quack's
                       GEMM bf16 8192^3): the untouched build compiled before the recording, the traced build
                       compiled under ikp_cute.record's recorder; 30 launches of each variant taken in turns behind
                       a GPU sleep (examples/pipeline/measure.py): untouched, untouched again (noise), recorded
                       (the pool emptied and the kernel's window "all" before each) and closed (window "none":
                       the device's decision alone, as every launch past a selection runs). Medians.
  3 (alone, ~40 s)     ikp record of examples/record/quack_gemm.py --iters 10: the time per call it prints, the
                       pool's size, the wall time to a trace, the trace's size.
  4 (alone, <= 150 s)  IKET's launcher on the same quack program (its sizing pass, then its profiling pass):
                       the same five figures, under a hard timeout.
Each recording is checked: every traced kernel (FA4: two, labelled apart) recorded the launches its selection
selects, every capture decodes with no record lost, the device's launch count equals Python's, and the
summary names what bounds each kernel. $OUT holds record_suite.json, every folder's summary.txt, logs; a
short table is printed last. Exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "record"
OUT = Path(os.environ.get("OUT", "/tmp/record_suite_out"))
BUDGET_S = 345  # everything ends by then (IKET's timeout shrinks to fit)
IKET_TIMEOUT_S = 150
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
T0 = time.time()


def log(*args) -> None:
    print(f"[{time.time() - T0:5.0f} s]", *args, flush=True)


class Job:
    """A command running in the background, its output in $OUT/<name>.log."""

    def __init__(self, name: str, cmd: list, timeout: float, **env):
        self.name, self.timeout, self.t0 = name, timeout, time.time()
        self.log = open(OUT / f"{name}.log", "w")
        self.proc = subprocess.Popen([str(c) for c in cmd], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(ENV, **env), start_new_session=True)

    def wait(self) -> dict:
        try:
            rc = self.proc.wait(timeout=max(1.0, self.timeout - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            rc = self.proc.wait()
            rc = 124
        self.log.close()
        secs = time.time() - self.t0
        log(f"{self.name}: exit {rc} in {secs:.0f} s")
        return {"exit": rc, "seconds": round(secs, 1), "output": (OUT / f"{self.name}.log").read_text(errors="replace")}


def record(name: str, program: list, *options, dry: bool, timeout: float = 150) -> Job:
    shutil.rmtree(OUT / f"rec_{name}", ignore_errors=True)
    mode = ["--dry-run", "--arch", "sm_90a"] if dry else []
    return Job(f"record_{name}", [sys.executable, "-m", "host_decode.cli", "record", "-o", OUT / f"rec_{name}",
                                  "-f", *mode, *options, "--", *program], timeout)


def check(name: str, run: dict, dry: bool, kernels: int, launches: int | None = None) -> dict:
    """The recording's checks (module docstring); `kernels`: traced kernels expected, `launches`: launches the
    device must count per kernel (None: any)."""
    folder = OUT / f"rec_{name}"
    problems = [] if run["exit"] == 0 else [f"exit {run['exit']}: {run['output'][-400:]}"]
    if not (folder / "summary.json").exists():
        return {"ok": False, "seconds": run["seconds"], "problems": problems + ["no folder"]}
    shutil.copy(folder / "summary.txt", OUT / f"summary_{name}.txt")
    s = json.loads((folder / "summary.json").read_text())
    traced = [k for k in s["kernels"] if k.get("traced")]
    if len(traced) != kernels:
        problems.append(f"{len(traced)} traced kernels, expected {kernels}: {[k['label'] for k in traced]}")
    if len({k["label"] for k in traced}) != len(traced):
        problems.append("two kernels with one label")
    for k in [] if dry else traced:
        what = k["label"]
        problems += [f"{what}: {p}" for p in k["problems"]]
        if not k["recorded"] or k["lost_records"]:
            problems.append(f"{what}: {k['recorded']} launches recorded, {k['lost_records']} records lost")
        if k["launch_note"] or (launches is not None and k["device_seen"] != launches):
            problems.append(f"{what}: device counted {k['device_seen']}, Python {k['host_launches']}")
        for c in k["captures"]:
            if c.get("error") or c.get("lost_records"):
                problems.append(f"{c['path']}: {c.get('error') or str(c['lost_records']) + ' records lost'}")
        if not (k.get("bound") or {}).get("words"):
            problems.append(f"{what}: the summary names nothing that bounds it")
    torch = s.get("torch")
    if name == "fa4" and not dry and not (torch or {}).get("path"):
        problems.append(f"the program's torch.profiler trace not aligned: {torch}")
    if name == "nsys" and not list(OUT.glob("nsys_row_sums*.nsys-rep")):
        problems.append("nsys wrote no report")
    pools = [p["pool"] for p in s["processes"]]
    if not dry and (not (folder / "trace.pftrace").exists() or any(p.get("lost_records") for p in pools)):
        problems.append(f"no trace.pftrace, or records lost in the pool: {pools}")
    return {"ok": not problems, "seconds": run["seconds"], "problems": problems, "status": s["status"],
            "kernels": {k["label"]: {"seen": k["device_seen"], "python": k["host_launches"], "recorded": k["recorded"],
                                     "bound": (k.get("bound") or {}).get("words")} for k in traced},
            "untraced": s["untraced"], "torch": s.get("torch"), "pool": pools,
            "trace_bytes": (folder / "trace.pftrace").stat().st_size if (folder / "trace.pftrace").exists() else 0}


def ms_per_call(output: str) -> float | None:
    """The examples print '<n> calls, X ms each (host clock)'."""
    found = re.findall(r"([\d.]+) ms each", output)
    return float(found[-1]) if found else None


def iket(iters: int, timeout: float) -> dict:
    work = Path("/tmp/ikp_record_suite_iket")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # no compiled-kernel disk cache: a build loaded from one carries no IKET instrumentation
    run = Job("iket", [sys.executable, "-m", "iket.cli.main", "--working-dir", work, "profile", "--postprocess",
                       "perfetto", "--", sys.executable, EXAMPLES / "quack_gemm.py", "--iters", iters], timeout,
              QUACK_CACHE_ENABLED="0", CUTE_DSL_DISABLE_FILE_CACHING="1").wait()
    traces = sorted(work.rglob("*.pftrace"))
    out = run["output"]
    r = {"exit": run["exit"], "seconds_to_trace": run["seconds"], "trace_exists": bool(traces),
         "trace_bytes": sum(p.stat().st_size for p in traces),
         "files_bytes": sum(p.stat().st_size for p in work.rglob("*") if p.is_file()), "ms_per_call": ms_per_call(out),
         "buffer_sizes_printed": [" ".join(m) for m in re.findall(r"([\d.]+)\s*(GB|GiB|MB|MiB)", out)][:4],
         "last_lines": out.strip().splitlines()[-6:]}
    shutil.rmtree(work, ignore_errors=True)
    return r


# --- the cost worker (its own process) ---------------------------------------------------------------------


def worker(go: Path, path: Path, dry: bool, launches: int) -> None:
    """Compile each kernel untouched (before the recording) and traced (under the recorder), wait for `go`,
    then time the four variants of each (module docstring) and write the medians to `path`."""
    import tempfile

    import numpy as np

    from host_decode.load.recording import RecordConfig
    from ikp_cute.record.runtime import Recorder

    folder = tempfile.mkdtemp(prefix="ikp_cost_")
    rec = Recorder(RecordConfig(out=folder, launches="none", dry_run="sm_90a" if dry else None))
    if dry:  # the dry run's fake tensors and GPU first; no untouched build (nothing is launched)
        rec.start()
    cases = {name: make() for name, make in setups().items()}
    untouched = {} if dry else {name: case["untouched"]() for name, case in cases.items()}  # compiles + launches
    if not dry:
        rec.start()
    result: dict = {}
    try:
        traced = {name: case["traced"]() for name, case in cases.items()}  # compiles traced
        ids = {name: [e["kernel_id"] for e in rec.kernels if e["traced"] and case["kernel"] in e["name"]]
               for name, case in cases.items()}
        result["kernel_ids"] = ids
        if any(len(v) != 1 for v in ids.values()):
            raise RuntimeError(f"expected one traced kernel per case, got {ids}")
        go.parent.mkdir(parents=True, exist_ok=True)
        (go.parent / "cost_ready").write_text("ready")
        deadline = time.time() + 300
        while not dry and not go.exists() and time.time() < deadline:
            time.sleep(0.2)
        if not dry:
            sys.path.insert(0, str(ROOT / "examples" / "pipeline"))
            from measure import time_alternating

            pool = rec.pool
            for name, case in cases.items():
                (kid,) = ids[name]

                def window(selection, empty=False, kid=kid):
                    def setup():
                        if empty:
                            pool.reset()
                        pool.select(kid, selection)
                    return setup

                times = time_alternating({"untouched": untouched[name], "noise": untouched[name],
                                          "recorded": (window("all", True), traced[name]),
                                          "closed": (window("none"), traced[name])}, launches)
                base = float(np.median(times["untouched"]))
                costs = {k: float(np.median(t)) / base - 1.0 for k, t in times.items() if k != "untouched"}
                result[name] = {"untouched_ms": base, **costs}
                log(f"cost {name}: " + ", ".join(f"{k} {v:+.2%}" for k, v in costs.items()))
            pool.reset()
            for name, (kid,) in ids.items():  # one recorded launch each: nothing lost
                pool.select(kid, "all")
                traced[name]()
            result["recorded_check"] = {r["name"][:40]: {"records": r["records"], "lost": r["lost_records"]}
                                        for r in pool.summary()["kernels"] if r["recorded_launches"]}
    finally:
        rec.stop()
        shutil.rmtree(folder, ignore_errors=True)
    path.write_text(json.dumps(result, indent=1))


def setups() -> dict:
    """case -> () -> {"kernel": a part of its name, "untouched": compile + return its call, "traced": the same
    under the recorder}. FA4's and quack's own caches are switched per call so each call runs its build."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
    sys.path.insert(0, str(EXAMPLES))

    def row_sums():
        from standalone import compile_row_sums

        m, n = 132 * 16, 128 * 64
        x, y = torch.randn(m, n, device="cuda"), torch.empty(m, device="cuda")

        def build():
            kernel = compile_row_sums(m, n)
            kernel(x, y)
            return lambda: kernel(x, y)

        return {"kernel": "row_sums", "untouched": build, "traced": build}

    def fa4():
        from flash_attn.cute import interface

        q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        owner = interface._flash_attn_fwd

        def build():
            interface.flash_attn_func(q, k, v)  # compiles into the cache FA4 has now (the recorder's, traced)
            cache = owner.compile_cache

            def call():
                owner.compile_cache = cache
                interface.flash_attn_func(q, k, v)
            return call

        return {"kernel": "flash", "untouched": build, "traced": build}

    def quack():
        from compile_cpu import quack_private_cache_dicts
        from quack.gemm_interface import gemm

        a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        dicts = quack_private_cache_dicts()

        def build():
            gemm(a, b, tuned=False)  # compiles into quack's caches as they are now (the recorder empties them)
            entries = [dict(d) for d in dicts]

            def call():
                for d, e in zip(dicts, entries):
                    d.clear()
                    d.update(e)
                gemm(a, b, tuned=False)
            return call

        return {"kernel": "gemm", "untouched": build, "traced": build}

    return {"row_sums": row_sums, "fa4": fa4, "quack": quack}


# --- main -----------------------------------------------------------------------------------------------------


def table(results: dict) -> str:
    lines = [f"{'step':<15}{'ok':<4}{'s':>5}  detail", "-" * 100]
    for name, r in results["steps"].items():
        if name == "cost":
            for case, c in r.items():
                if isinstance(c, dict) and "untouched_ms" in c:
                    lines.append(f"{'cost ' + case:<15}{'':<4}{'':>5}  untouched {c['untouched_ms']:.4f} ms, recorded "
                                 f"{c['recorded']:+.2%}, closed {c['closed']:+.2%} (noise {c['noise']:+.2%})")
            detail = r.get("recorded_check") or r.get("error") or f"traced builds: kernel ids {r.get('kernel_ids')}"
            lines.append(f"{'cost':<15}{'':<4}{r.get('seconds', 0):>5.0f}  {detail}")
            continue
        if name.startswith("side by side"):
            lines.append(f"{name:<15}{'':<4}{r['seconds_to_trace']:>5.0f}  ms/call {r['ms_per_call']}, trace "
                         f"{'yes' if r['trace_exists'] else 'NO'} ({r['trace_bytes'] / 1e6:.1f} MB), buffer "
                         f"{r['buffer']}, exit {r['exit']}")
            continue
        bounds = "; ".join(f"{k[:28]}: {(v.get('bound') or '')[:46]}" for k, v in (r.get("kernels") or {}).items())
        lines.append(f"{name:<15}{'yes' if r.get('ok') else 'NO':<4}{r.get('seconds', 0):>5.0f}  {bounds[:150]} "
                     f"{r.get('problems') or ''}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: recordings as dry runs, compiles only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--launches", type=int, default=30, help="timed launches per variant (cost)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    go, cost_json = OUT / "cost_go", OUT / "cost.json"
    if args.worker:
        worker(go, cost_json, args.dry_run, args.launches)
        return 0
    dry = args.dry_run
    go.unlink(missing_ok=True)
    results: dict = {"dry_run": dry, "steps": {}, "errors": []}
    py = sys.executable
    # phase 1: side by side
    jobs = {"standalone": record("standalone", [py, EXAMPLES / "standalone.py", "--iters", 20], dry=dry),
            "fa4": record("fa4", [py, EXAMPLES / "fa4.py", "--iters", 20, *([] if dry else ["--profile"])], dry=dry),
            "torch_compile": record("torch_compile", [py, EXAMPLES / "torch_compile_module.py", "--iters", 20],
                                    dry=dry)}
    if not dry:
        ncu = [shutil.which("ncu") or "/usr/local/cuda/bin/ncu", "--section", "SpeedOfLight", "--kernel-name",
               "regex:row_sums", "-c", 3, "-f", "-o", OUT / "ncu_row_sums"]
        jobs["ncu"] = record("ncu", [*ncu, py, EXAMPLES / "standalone.py", "--iters", 3], "--launches", "all",
                             dry=False)
        nsys = shutil.which("nsys") or next((str(p) for p in Path("/usr/local/cuda/bin").glob("nsys")), None)
        if nsys:  # both record: nsys's report and the recording
            jobs["nsys"] = record("nsys", [nsys, "profile", "--force-overwrite", "true", "-o", OUT / "nsys_row_sums",
                                           py, EXAMPLES / "standalone.py", "--iters", 3], dry=False)
        else:
            results["steps"]["nsys"] = {"ok": True, "seconds": 0, "problems": ["no nsys on this machine: not run"]}
    cost = Job("cost", [py, __file__, "--worker", "--launches", args.launches, *(["--dry-run"] if dry else [])], 240)
    expected = {"standalone": (1, None), "fa4": (2, None), "torch_compile": (1, None), "ncu": (1, 3), "nsys": (1, 3)}
    for name, job in jobs.items():
        results["steps"][name] = check(name, job.wait(), dry, *expected[name])
    # phase 2: the cost timings, alone
    go.write_text("go")
    run = cost.wait()
    results["steps"]["cost"] = json.loads(cost_json.read_text()) if cost_json.exists() else {
        "error": f"exit {run['exit']}: {run['output'][-600:]}"}
    results["steps"]["cost"]["seconds"] = run["seconds"]
    if "error" in results["steps"]["cost"]:
        results["errors"].append(f"cost: {results['steps']['cost']['error']}")
    # phase 3: quack recorded alone; phase 4: IKET on the same program
    run = record("quack", [py, EXAMPLES / "quack_gemm.py", "--iters", 10], dry=dry, timeout=120).wait()
    results["steps"]["quack"] = check("quack", run, dry, 1)
    if not dry:
        q = results["steps"]["quack"]
        pool = (q.get("pool") or [{}])[0]
        results["steps"]["side by side ikp"] = {
            "ms_per_call": ms_per_call(run["output"]), "seconds_to_trace": run["seconds"], "exit": run["exit"],
            "trace_exists": q.get("trace_bytes", 0) > 0, "trace_bytes": q.get("trace_bytes", 0),
            "buffer": f"pool {(pool.get('bytes') or 0) >> 20} MiB, {(pool.get('used') or 0) / 2**20:.1f} MiB used"}
        left = BUDGET_S - (time.time() - T0)
        r = iket(10, min(IKET_TIMEOUT_S, left))
        r["buffer"] = r["buffer_sizes_printed"][:2]
        results["steps"]["side by side IKET"] = r
    results["seconds"] = round(time.time() - T0, 1)
    for step in results["steps"].values():
        step.pop("output", None)
    (OUT / "record_suite.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\n==== ikp record suite{' (dry run)' if dry else ''}: {results['seconds']:.0f} s, results in {OUT} ====")
    print(table(results))
    print("errors:", results["errors"] or "none")
    ok = not results["errors"] and all(r.get("ok", True) for r in results["steps"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
