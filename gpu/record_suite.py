"""`ikp record` on an H100/H200, one command: every example recorded, checked and timed, and NVIDIA IKET run
side by side on quack's GEMM in the same job.

    python gpu/record_suite.py [--quick] [--only standalone,fa4,quack,torch_compile,cost,ncu,iket]

Steps (expected time on an H200, first compile included; --quick: fewer iterations, about half):
  standalone     ikp record -- python examples/record/standalone.py                              ~20 s
  fa4            ikp record -- python examples/record/fa4.py, non-causal (with --profile: its
                 torch.profiler trace is written into the recording and aligned) and causal,
                 b=2 s=4096 h=16, two recordings                                                  ~70 s
  quack          ikp record -- python examples/record/quack_gemm.py (bf16 8192^3), and the same
                 program with no tool (its time per call, for the table)                          ~50 s
  torch_compile  ikp record -- python examples/record/torch_compile_module.py                    ~60 s
  cost           per kernel (row sums, FA4 non-causal, quack), in one process each: the untouched
                 build compiled before recording, then ikp_cute.record's recorder with
                 --launches every=2 over the traced build; calls alternate untouched / traced, each
                 timed with CUDA events after a GPU sleep: medians of untouched, recorded (even
                 traced launches) and closed-window (odd) launches                               ~100 s
  ncu            ikp record --launches all -- ncu (kernel replay, SpeedOfLight: several passes)
                 on 3 row-sum launches: the pool must count 3 launches, not 3 x passes            ~40 s
  iket           NVIDIA IKET's launcher on the same quack program (its own ranges in quack's
                 tile scheduler): time per call, buffer size, wall time to a trace, trace size,
                 whether a trace exists at the end (timeout 240 s)                                ~150 s
Each recording is checked: every traced kernel recorded >= 1 launch, lost none, every capture decodes with no
lost record, and summary.txt names what bounds it. Results: $OUT/record_suite.json, each folder's
summary.txt, logs; a short table is printed last. Without a GPU the record steps run as dry runs (what a
CPU can check) and the others are skipped.
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
sys.path.insert(0, str(ROOT))
EXAMPLES = ROOT / "examples" / "record"
OUT = Path(os.environ.get("OUT", "/tmp/record_suite_out"))
STEPS = ("standalone", "fa4", "quack", "torch_compile", "cost", "ncu", "iket")
RESULTS: dict = {"steps": {}, "errors": []}
SLEEP_CYCLES = 400_000  # ~0.2 ms at 1.98 GHz before each timed call: launches queue, the host is not timed


def log(*args) -> None:
    print(*args, flush=True)


def run(name: str, cmd: list, timeout: int, cwd: Path | None = None) -> tuple[int, float, str]:
    """Run `cmd`, its output to $OUT/<name>.log; (exit status, seconds, output)."""
    t0 = time.time()
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                               [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])))
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    secs = time.time() - t0
    (OUT / f"{name}.log").write_text(out)
    log(f"[{name}] exit {rc} in {secs:.0f} s")
    return rc, secs, out


def ikp_record(name: str, program: list, *options, gpu: bool, timeout: int = 300) -> tuple[Path, dict]:
    folder = OUT / f"rec_{name}"
    shutil.rmtree(folder, ignore_errors=True)
    dry = [] if gpu else ["--dry-run", "--arch", "sm_90a"]
    cmd = [sys.executable, "-m", "host_decode.cli", "record", "-o", folder, *dry, *options, "--", *program]
    rc, secs, out = run(f"record_{name}", cmd, timeout)
    result = {"exit": rc, "seconds": round(secs, 1)}
    result.update(check_folder(folder, gpu) if folder.exists() else {"ok": False, "problems": ["no folder"]})
    if folder.exists():
        shutil.copy(folder / "summary.txt", OUT / f"summary_{name}.txt")
    return folder, result


def check_folder(folder: Path, gpu: bool) -> dict:
    """Every traced kernel recorded >= 1 launch and lost none; every capture decodes with no lost record; the
    summary names what bounds each kernel (on a GPU); the timeline exists."""
    s = json.loads((folder / "summary.json").read_text())
    problems = []
    kernels = [k for k in s["kernels"] if k.get("traced")]
    if not kernels:
        problems.append("no traced kernel")
    for k in kernels:
        name = k.get("short") or k["name"]
        if not gpu:
            continue
        if k["recorded"] < 1 or k["lost"]:
            problems.append(f"{name}: recorded {k['recorded']}, lost {k['lost']}")
        for c in k["captures"]:
            if c.get("error") or c.get("lost_records"):
                problems.append(f"{c['path']}: {c.get('error') or str(c['lost_records']) + ' records lost'}")
        if not (k.get("bound") or {}).get("words"):
            problems.append(f"{name}: the summary names nothing that bounds it")
        if k.get("accounting_note"):
            problems.append(f"{name}: {k['accounting_note']}")
    if gpu and not (folder / "trace.pftrace").exists():
        problems.append("no trace.pftrace")
    return {"ok": not problems, "problems": problems, "status": s["status"],
            "kernels": {k.get("short") or k["name"]: {"recorded": k["recorded"], "lost": k["lost"],
                                                      "device_seen": k["device_seen"],
                                                      "bound": (k.get("bound") or {}).get("words")} for k in kernels},
            "untraced": s["untraced"], "torch": s.get("torch"),
            "pool": [p["pool"] for p in s["processes"]],
            "trace_bytes": (folder / "trace.pftrace").stat().st_size if (folder / "trace.pftrace").exists() else 0}


def ms_per_call(output: str) -> list[float]:
    """The examples print '<n> calls, X ms each (host clock)'."""
    return [float(m) for m in re.findall(r"([\d.]+) ms each", output)]


# --- steps --------------------------------------------------------------------------------------------------


def step_standalone(args, gpu):
    _, r = ikp_record("standalone", [sys.executable, EXAMPLES / "standalone.py", "--iters", str(args.iters)],
                      gpu=gpu)
    return r


def step_fa4(args, gpu):
    """Causal and not in two recordings: FA4 builds both under one kernel name, which the pool counts as one
    kernel (one launch count, one selection). The non-causal run writes its torch.profiler trace into the
    recording, which aligns the regions with it."""
    out = {}
    for causal in ("no", "yes"):
        program = [sys.executable, EXAMPLES / "fa4.py", "--iters", str(args.iters), "--causal", causal]
        program += ["--profile"] if gpu and causal == "no" else []
        _, r = ikp_record(f"fa4_causal_{causal}", program, gpu=gpu, timeout=300)
        if gpu and causal == "no" and not (r.get("torch") or {}).get("path"):
            r["problems"].append(f"torch.profiler trace not aligned: {r.get('torch')}")
            r["ok"] = False
        out[f"causal_{causal}"] = r
    return {"ok": all(r["ok"] for r in out.values()), "seconds": sum(r["seconds"] for r in out.values()),
            "problems": [p for r in out.values() for p in r["problems"]],
            "kernels": {f"{c}: {k}": v for c, r in out.items() for k, v in r["kernels"].items()}, "runs": out}


def step_quack(args, gpu):
    program = [sys.executable, EXAMPLES / "quack_gemm.py", "--iters", str(args.quack_iters)]
    folder, r = ikp_record("quack", program, gpu=gpu, timeout=400)
    r["ms_per_call"] = ms_per_call((OUT / "record_quack.log").read_text())
    if gpu:
        rc, secs, out = run("quack_plain", program, 300)
        r["plain"] = {"exit": rc, "seconds": round(secs, 1), "ms_per_call": ms_per_call(out)}
    return r


def step_torch_compile(args, gpu):
    program = [sys.executable, EXAMPLES / "torch_compile_module.py", "--iters", str(args.iters)]
    _, r = ikp_record("torch_compile", program, gpu=gpu, timeout=400)
    return r


def step_cost(args, gpu):
    out = {}
    for case in ("row_sums", "fa4", "quack"):
        path = OUT / f"cost_{case}.json"
        rc, secs, _ = run(f"cost_{case}", [sys.executable, __file__, "--worker", case, "--iters",
                                           str(args.cost_iters), "--json", path], 300)
        out[case] = json.loads(path.read_text()) if path.exists() else {"exit": rc}
    return out


def step_ncu(args, gpu):
    """Nsight Compute's kernel replay runs each profiled launch several times and restores the device memory
    the kernel wrote between passes: the pool's launch counter and records included, so each launch is
    counted once and its records are the last pass's."""
    folder = OUT / "rec_ncu"
    shutil.rmtree(folder, ignore_errors=True)
    report = OUT / "ncu_row_sums"
    ncu = ["ncu", "--section", "SpeedOfLight", "--kernel-name", "regex:row_sums", "-c", "3", "-f", "-o", report]
    cmd = [sys.executable, "-m", "host_decode.cli", "record", "-o", folder, "--launches", "all", "--", *ncu,
           sys.executable, EXAMPLES / "standalone.py", "--iters", "3"]
    rc, secs, out = run("ncu", cmd, 300)
    r = {"exit": rc, "seconds": round(secs, 1), "ncu_report": report.with_suffix(".ncu-rep").exists()}
    if folder.exists():
        r.update(check_folder(folder, gpu))
        seen = [k["device_seen"] for k in r["kernels"].values()]
        r["launch_counts"] = seen
        if seen != [3]:
            r["ok"] = False
            r["problems"].append(f"launches counted on the device under ncu: {seen} (expected [3])")
    return r


def step_iket(args, gpu):
    """IKET's launcher on the quack program (quack's tile scheduler carries IKET ranges): it runs the program
    twice (sizing, then profiling) and post-processes to Perfetto."""
    work = Path("/tmp/ikp_record_suite_iket")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cmd = [sys.executable, "-m", "iket.cli.main", "--working-dir", work, "profile", "--postprocess", "perfetto",
           "--", sys.executable, (EXAMPLES / "quack_gemm.py").resolve(), "--iters", str(args.quack_iters)]
    rc, secs, out = run("iket", cmd, 240)
    traces = sorted(work.rglob("*.pftrace"))
    files = [p for p in work.rglob("*") if p.is_file()]
    sizes = re.findall(r"([\d.]+)\s*(GB|GiB|MB|MiB)", out)
    r = {"exit": rc, "seconds_to_trace": round(secs, 1), "trace_exists": bool(traces),
         "trace_bytes": sum(p.stat().st_size for p in traces), "files_bytes": sum(p.stat().st_size for p in files),
         "ms_per_call": ms_per_call(out), "sizes_printed": [" ".join(s) for s in sizes][:10],
         "last_lines": out.strip().splitlines()[-8:]}
    shutil.rmtree(work, ignore_errors=True)
    return r


# --- the cost worker (one process per kernel) -------------------------------------------------------------


def worker(case: str, iters: int, path: Path) -> None:
    import tempfile

    import numpy as np
    import torch

    from host_decode.load.recording import RecordConfig
    from ikp_cute.record.runtime import Recorder

    plain, make_traced = setups()[case]()
    plain()  # compiled before the recording: the untouched build
    torch.cuda.synchronize()
    # the untouched build is launched inside the recording too: reported "launched but not traced"
    folder = tempfile.mkdtemp(prefix="ikp_cost_")
    recorder = Recorder(RecordConfig(out=folder, launches="every=2", pool_bytes=16 << 30)).start()
    traced = make_traced()
    traced()  # compiles traced; the traced build's launch 0 (recorded)
    torch.cuda.synchronize()
    times: dict = {"untouched": [], "recorded": [], "closed": []}
    events = []
    for i in range(iters):
        for kind, fn in (("untouched", plain), ("recorded" if (i + 1) % 2 == 0 else "closed", traced)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            fn()
            end.record()
            events.append((kind, start, end))
    torch.cuda.synchronize()
    for kind, start, end in events:
        times[kind].append(start.elapsed_time(end))
    medians = {k: float(np.median(v)) for k, v in times.items() if v}
    result = {"case": case, "iters": iters, "median_ms": medians,
              "recorded_vs_untouched": medians["recorded"] / medians["untouched"] - 1,
              "closed_vs_untouched": medians["closed"] / medians["untouched"] - 1,
              "untouched_noise": float(np.median(times["untouched"][::2]) / np.median(times["untouched"][1::2]) - 1)}
    recorder.timings = result
    manifest = json.loads(Path(recorder.stop()).read_text())
    result["pool"] = manifest["pool"]
    result["untraced"] = manifest["untraced"]
    shutil.rmtree(folder, ignore_errors=True)
    Path(path).write_text(json.dumps(result, indent=1))


def setups() -> dict:
    """case -> () -> (untouched call, make_traced); make_traced() compiles the traced build (under the recorder)
    and returns its call. The untouched build is the one compiled before the recorder started."""

    def row_sums():
        import torch

        sys.path.insert(0, str(EXAMPLES))
        from standalone import compile_row_sums

        m, n = 132 * 16, 128 * 64
        x, y = torch.randn(m, n, device="cuda"), torch.empty(m, device="cuda")
        untouched = compile_row_sums(m, n)

        def make_traced():
            traced = compile_row_sums(m, n)
            return lambda: traced(x, y)

        return (lambda: untouched(x, y)), make_traced

    def fa4():
        import torch
        from flash_attn.cute import interface

        q, k, v = (torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        owner = interface._flash_attn_fwd
        caches = {"untouched": owner.compile_cache}  # FA4's own, before the recorder sets it aside

        def call(which):
            if len(caches) > 1:
                owner.compile_cache = caches[which]
            interface.flash_attn_func(q, k, v)

        def make_traced():
            interface.flash_attn_func(q, k, v)  # the recorder's fresh cache: a traced compile
            caches["traced"] = owner.compile_cache
            return lambda: call("traced")

        return (lambda: call("untouched")), make_traced

    def quack():
        import torch
        from quack.gemm_interface import gemm

        sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
        from compile_cpu import quack_private_cache_dicts

        a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        snaps: dict = {}

        def call(which):
            if len(snaps) > 1:
                for d, entries in zip(snaps["dicts"], snaps[which]):
                    d.clear()
                    d.update(entries)
            gemm(a, b, tuned=False)

        def untouched():
            if not snaps:
                gemm(a, b, tuned=False)
                snaps["dicts"] = quack_private_cache_dicts()
                snaps["untouched"] = [dict(d) for d in snaps["dicts"]]
                return
            call("untouched")

        def make_traced():
            gemm(a, b, tuned=False)  # the recorder emptied quack's caches: a traced compile
            snaps["traced"] = [dict(d) for d in snaps["dicts"]]
            return lambda: call("traced")

        return untouched, make_traced

    return {"row_sums": row_sums, "fa4": fa4, "quack": quack}


# --- main -----------------------------------------------------------------------------------------------------


def table() -> str:
    lines = [f"{'step':<14}{'ok':<5}{'s':>6}  detail", "-" * 78]
    for name, r in RESULTS["steps"].items():
        if name == "cost":
            for case, c in r.items():
                m = c.get("median_ms") or {}
                detail = (f"untouched {m.get('untouched', 0):.4f} ms, recorded "
                          f"{c.get('recorded_vs_untouched', 0):+.2%}, closed {c.get('closed_vs_untouched', 0):+.2%} "
                          f"(noise {c.get('untouched_noise', 0):+.2%})" if m else f"failed (exit {c.get('exit')})")
                lines.append(f"{'cost ' + case:<14}{'-':<5}{'':>6}  {detail}")
            continue
        if name == "iket":
            detail = (f"trace {'yes' if r['trace_exists'] else 'NO'} ({r['trace_bytes'] / 1e6:.1f} MB), wall "
                      f"{r['seconds_to_trace']:.0f} s, files {r['files_bytes'] / 1e9:.2f} GB, ms/call "
                      f"{r['ms_per_call'][-1:] or '?'}, sizes {r['sizes_printed'][:2]}")
            lines.append(f"{'iket quack':<14}{'yes' if r['trace_exists'] else 'NO':<5}{r['seconds_to_trace']:>6.0f}"
                         f"  {detail}")
            continue
        ok = "yes" if r.get("ok") else "NO"
        bounds = "; ".join(f"{k[:18]}: {(v.get('bound') or '')[:40]}" for k, v in (r.get("kernels") or {}).items())
        extra = ""
        if name == "quack" and r.get("plain"):
            extra = f" ms/call plain {r['plain']['ms_per_call'][-1:]} recorded {r['ms_per_call'][-1:]};"
        lines.append(f"{name:<14}{ok:<5}{r.get('seconds', 0):>6.0f} {extra} {bounds[:150]} {r.get('problems') or ''}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(STEPS))
    parser.add_argument("--worker", choices=("row_sums", "fa4", "quack"))
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.iters or 100, Path(args.json))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    import torch

    gpu = torch.cuda.is_available()
    RESULTS["device"] = torch.cuda.get_device_name() if gpu else "no GPU: record steps as dry runs"
    args.iters = args.iters or (10 if args.quick else 20)
    args.quack_iters = 10 if args.quick else 20
    args.cost_iters = 60 if args.quick else 150
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(STEPS))
    if unknown:
        parser.error(f"--only: unknown steps {unknown}; known: {', '.join(STEPS)}")
    t0 = time.time()
    for name in [s for s in STEPS if s in only]:
        if not gpu and name in ("cost", "ncu", "iket"):
            log(f"[{name}] skipped: no GPU")
            continue
        try:
            RESULTS["steps"][name] = globals()[f"step_{name}"](args, gpu)
        except Exception as e:  # noqa: BLE001 - one failing step must not cost the others' results
            RESULTS["errors"].append(f"{name}: {type(e).__name__}: {e}")
        (OUT / "record_suite.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    RESULTS["seconds"] = round(time.time() - t0, 1)
    (OUT / "record_suite.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    log(f"\n==== ikp record suite on {RESULTS['device']} ({RESULTS['seconds']:.0f} s) ====")
    log(table())
    log("errors:", RESULTS["errors"] or "none")
    return 0 if not RESULTS["errors"] and all(r.get("ok", True) for r in RESULTS["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
