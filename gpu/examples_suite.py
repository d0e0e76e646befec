"""All examples on one GPU machine in one call: build, check correctness, time, capture, plot.

    python gpu/examples_suite.py [--only fa4|pipeline|megakernel] [--launches N] [--quick]

Writes everything under $OUT (or ./examples_out): per example the decoded-trace statistics (JSON),
Perfetto traces (.pftrace.gz), PNG plots, timing arrays, and the small captures meant to be committed
(<example>_capture.npy + .json), then packs it all into $OUT/examples_suite.tar.gz (the device tool
brings back at most 8 files) and prints a short table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

EXAMPLES = ("pipeline", "megakernel", "fa4")
DIRS = {"pipeline": "pipeline", "megakernel": "megakernel", "fa4": "fa4_sm90"}


def load_run_module(name: str):
    path = REPO / "examples" / DIRS[name] / "run.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"ikp_example_{name}_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_one(
    name: str, out: Path, launches: int, quick: bool, ablation: bool = False, lean_ab: bool = False
) -> list[dict]:
    module = load_run_module(name)
    work = out / name
    work.mkdir(parents=True, exist_ok=True)
    if ablation:  # FA4 only: where the slowdown comes from (partial instrumentations), both masks
        return [row for causal in (False, True) for row in module.ablation(work, launches=launches, causal=causal)]
    module.small_capture(out / f"{name}_capture.npy")
    kwargs = {"launches": launches}
    if quick:
        kwargs.update(getattr(module, "QUICK", {}))
    if lean_ab:  # FA4 only: lean with its leaf-region pairing off beside today's, in the same alternation
        kwargs["variants"] = tuple(module.VARIANTS) + tuple(module.LEAN_AB)
    return module.run(work, **kwargs)


def table(rows: list[dict]) -> str:
    head = f"{'example':<11}{'variant':<22}{'base ms':>9}{'ms':>9}{'slowdown':>10}{'rel err':>10}{'lost':>6}  notes"
    lines = [head, "-" * len(head)]
    for r in rows:
        variant = " ".join(str(r[k]) for k in ("mask", "detail", "variant") if k in r)
        notes = r.get("note", "")
        if r.get("wait"):
            w = r["wait"]
            notes = (
                f"n_block p50 {w['n_block_ns_p50']:.0f} ns, waits {100 * w['wait_share_total']:.1f}% "
                f"(p90 iter {100 * w['wait_share_p90']:.1f}%)"
            )
        if r.get("producer") and not r.get("wait"):
            p = r["producer"]
            notes = (
                f"producer waits for free stages {100 * p['wait_empty_share']:.0f}%, "
                f"K released every {p['k_release_interval_ns_p50']:.0f} ns"
            )
        if "noise" in r:
            notes = f"FA4 vs FA4 {100 * r['noise']:+.2f}%; " + notes
        base = r.get("fa4_ms", r.get("base_ms", float("nan")))
        lines.append(
            f"{r['example']:<11}{variant:<22}{base:>9.4f}{r.get('ms', float('nan')):>9.4f}"
            f"{100 * r.get('slowdown', float('nan')):>9.2f}%{r.get('rel_err', float('nan')):>10.2e}"
            f"{r.get('lost', 0):>6}  {notes}"
        )
    return "\n".join(lines)


def child(name: str, work: Path, launches: int, quick: bool, ablation: bool, lean_ab: bool) -> int:
    """Run one example in this process; rows go to work/<name>_rows.json."""
    rows = run_one(name, work, launches, quick, ablation, lean_ab)
    (work / f"{name}_rows.json").write_text(json.dumps(rows, indent=1, default=float))
    return 0


def pack(work: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / "examples_suite.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="examples_suite")
    for capture in work.glob("*_capture.*"):  # small: also as plain files
        shutil.copy(capture, out / capture.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=EXAMPLES, action="append")
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="smaller problems (a smoke run)")
    ap.add_argument(
        "--timeout", type=float, default=300, help="seconds per example (a hung kernel stops only its example)"
    )
    ap.add_argument(
        "--fa4-ablation", action="store_true", help="FA4: time partial instrumentations (where the cost is)"
    )
    ap.add_argument(
        "--fa4-lean-ab", action="store_true", help="FA4: add lean with its leaf-region pairing off to the table (A/B)"
    )
    ap.add_argument("--child", choices=EXAMPLES, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ikp_examples_suite"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.work, args.launches, args.quick, args.fa4_ablation, args.fa4_lean_ab)
    out = Path(os.environ.get("OUT") or "examples_out")
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows, failed = [], []
    for name in args.only or EXAMPLES:
        cmd = [sys.executable, __file__, "--child", name, "--work", str(work), "--launches", str(args.launches)]
        cmd += ["--quick"] if args.quick else []
        cmd += ["--fa4-ablation"] if args.fa4_ablation and name == "fa4" else []
        cmd += ["--fa4-lean-ab"] if args.fa4_lean_ab and name == "fa4" else []
        try:
            rc = subprocess.run(cmd, timeout=args.timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        rows_file = work / f"{name}_rows.json"
        if rc == 0 and rows_file.exists():
            rows += json.loads(rows_file.read_text())
        else:
            failed.append(f"{name} ({rc})")
        pack(work, out)  # after each example: a later hang cannot lose earlier results
        print(f"=== {name}: rc={rc}", flush=True)
    (work / "rows.json").write_text(json.dumps(rows, indent=1, default=float))
    pack(work, out)
    print(table(rows))
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
