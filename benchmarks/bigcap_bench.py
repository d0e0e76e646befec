"""Big captures end to end: time, peak memory and trace size of whole `ikp` processes.

    python benchmarks/bigcap_bench.py                 # 1 M and 10 M records
    python benchmarks/bigcap_bench.py --records 1e7 --repeat 5 --json-out docs/host_results/bigcap.json
    python benchmarks/bigcap_bench.py --with-100m     # also 100 M records (needs ~6 GB free and minutes)

Per size, one run measures side by side, each in a fresh process (peak RSS from the kernel, wait4). These
alternate --repeat times (medians of the walls, the largest peak RSS):
  decoder alone        load the .npy and decode() it (the time of the decode() call, and the process)
  decode -> .pftrace   `ikp decode X -o X.pftrace`, as a user types it: loss report and region summary printed
  ... -q               the same with -q (no summary: the trace writer alone on top of the decode)
  --loss-json          `ikp decode X --loss-json L` (loss report and region summary printed, no trace)
  decode, no output    `ikp decode X -q`: the decode's own peak memory
Once each: decode -> .json, `ikp report`; and
  warpscope            a minimal re-implementation of warpscope's decoder: a per-record Python loop that
                       pairs records by (block, group, event) with one open slot per key, durations modulo
                       2**32, a Chrome 'X' event dict per region (no file written: the loop alone)
and prints the ratios the goals are stated in:
  `ikp decode X -o X.pftrace` (summary printed) <= 1.9x the decoder process alone (the writer's floor is
  ~1.5x on 2 cores); `ikp decode X --loss-json L` >= 8x faster than warpscope's decoder loop; peak RSS of
  the decode (`-q`, no output) <= 3x the raw buffer, of -> .pftrace / .json / report <= 3x;
  .pftrace <= 40 B/region; `ikp report` <= 5 s.
The buffer is decode_bench.make_buffer (2 anchors, 256 nested region pairs and a finalize per lane, 4
groups) with lanes starting within 100 us of each other, as lanes of one launch do.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from decode_bench import make_buffer  # noqa: E402

DECODER_ALONE = """
import sys, time
import numpy as np
from host_decode.core.decoder import decode
buf = np.load(sys.argv[1])
t0 = time.perf_counter()
trace = decode(buf)
print(time.perf_counter() - t0, trace.spans.size)
"""

WARPSCOPE = """
import sys, time
import numpy as np
buf = np.load(sys.argv[1])
t0 = time.perf_counter()
header = int(buf[0])
num_blocks, num_groups = header & 0xFFFFFFFF, header >> 32
open_at, events = {}, []
for record in buf[1:].tolist():  # one Python iteration per slot, as warpscope's decoder
    if not record:
        continue
    tag = record & 0xFFFFFFFF
    timer = record >> 32
    lane, event, kind = tag >> 12, (tag >> 2) & 1023, tag & 3
    block, group = divmod(lane, num_groups)
    key = (block, group, event)
    if kind == 0:
        open_at[key] = timer  # one open region per key: re-entrant regions of one id break
    elif kind == 1 and key in open_at:
        start = open_at.pop(key)
        events.append({"name": str(event), "ph": "X", "ts": start / 1000.0,
                       "dur": ((timer - start) & 0xFFFFFFFF) / 1000.0, "pid": block, "tid": group})
print(time.perf_counter() - t0, len(events))
"""


CPU: dict = {}  # wall seconds -> CPU seconds (user + sys) of the run that took them, for the CPU ratios


def run_rss(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of a child process; its CPU seconds (user + sys, all threads)
    are kept in CPU[wall]. Both are read by /usr/bin/time: a child forked straight from this (large) process
    would report this process's peak as its own (Linux keeps the high-water mark across fork + exec)."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M cpu=%U+%S", *cmd], capture_output=True, text=True,
                          env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    tail = proc.stderr.rsplit("maxrss_kb=", 1)[1].split()
    user, system = tail[1].removeprefix("cpu=").split("+")
    CPU[wall] = float(user) + float(system)
    return wall, int(tail[0]) * 1024, proc.stdout


STAT = {"median": np.median, "min": np.min}  # --stat: how the walls of the alternations are summarized
stat = np.median


def median(values: list) -> float:
    """The walls' summary: their median, or with --stat min their least (the run least disturbed by other
    work on a shared machine)."""
    return float(stat(values))


def bench(records: int, workdir: Path, env: dict, warpscope: bool = True, skip: tuple = (), repeat: int = 3) -> dict:
    buf = make_buffer(records, lane_spread_ns=100_000)
    path = workdir / f"cap_{records}.npy"
    np.save(path, buf)
    raw = buf.nbytes
    del buf
    py = sys.executable
    ikp = [py, "-c", "import sys; from host_decode.cli import main; sys.exit(main())"]
    res: dict = {"records": records, "raw": raw}
    pftrace, loss = workdir / "t.pftrace", workdir / "loss.json"
    runs = {
        "decoder": [py, "-c", DECODER_ALONE, str(path)],
        "pftrace": ikp + ["decode", str(path), "-o", str(pftrace)],  # as typed: summary printed
        "pftrace_quiet": ikp + ["decode", str(path), "-o", str(pftrace), "-q"],
        "loss_json": ikp + ["decode", str(path), "--loss-json", str(loss)],
        "decode_only": ikp + ["decode", str(path), "-q"],
    }
    # the ratios are side by side: the processes alternate `repeat` times; medians of the walls, the
    # largest peak RSS
    walls: dict = {k: [] for k in runs}
    cpus: dict = {k: [] for k in runs}
    rss: dict = {k: 0 for k in runs}
    calls = []
    for _ in range(repeat):
        for name, cmd in runs.items():
            pftrace.unlink(missing_ok=True)  # ikp never writes over an existing file
            loss.unlink(missing_ok=True)
            wall, peak, out = run_rss(cmd, env)
            walls[name].append(wall)
            cpus[name].append(CPU[wall])
            rss[name] = max(rss[name], peak)
            if name == "decoder":
                secs, spans = out.split()
                calls.append(float(secs))
            if name == "pftrace_quiet":
                res["pftrace_bytes"] = pftrace.stat().st_size
    res.update(decode_call=median(calls), spans=int(spans))
    for name in runs:
        res[name] = (median(walls[name]), rss[name])
        res[f"{name}_cpu"] = float(np.median(cpus[name]))  # CPU seconds: a ratio that time-sharing moves less
    nan = (float("nan"), float("nan"))
    res["json"] = nan if "json" in skip else run_rss(ikp + ["decode", str(path), "-o", str(workdir / "t.json"),
                                                            "-q"], env)[:2]
    report = workdir / "r.html"
    res["report"] = nan if "report" in skip else run_rss(ikp + ["report", str(path), "-o", str(report)], env)[:2]
    for f in (pftrace, loss, workdir / "t.json", report):
        f.unlink(missing_ok=True)  # the next size writes these names again
    if warpscope:
        wall, peak, out = run_rss([py, "-c", WARPSCOPE, str(path)], env)
        res["warpscope"] = (float(out.split()[0]), wall, peak)
    path.unlink()
    return res


def table(rows: list[dict]) -> str:
    lines = [
        f"{'records':>8} {'spans':>10} {'raw MiB':>8} | {'decode()':>8} {'dec proc':>8} | {'->pftrace':>9} "
        f"{'x dproc':>7} {'-q x':>6} | {'loss-json':>9} {'warp/it':>7} | {'B/region':>8} | "
        f"{'RSS/raw: dec':>12} {'-q':>5} {'pftrace':>7} {'json':>5} {'report':>6} | {'report s':>8} {'json s':>7}"
    ]
    for r in rows:
        raw, dproc = r["raw"], r["decoder"][0]
        warp = r.get("warpscope")
        lines.append(
            f"{r['records'] / 1e6:>7.0f}M {r['spans']:>10,} {raw / 2**20:>8.1f} | {r['decode_call']:>7.2f}s "
            f"{dproc:>7.2f}s | {r['pftrace'][0]:>8.2f}s {r['pftrace'][0] / dproc:>6.2f}x "
            f"{r['pftrace_quiet'][0] / dproc:>5.2f}x | {r['loss_json'][0]:>8.2f}s "
            f"{(warp[0] / r['loss_json'][0] if warp else float('nan')):>6.1f}x | "
            f"{r['pftrace_bytes'] / r['spans']:>8.1f} | {r['decoder'][1] / raw:>12.2f} "
            f"{r['decode_only'][1] / raw:>5.2f} {r['pftrace'][1] / raw:>7.2f} {r['json'][1] / raw:>5.2f} "
            f"{r['report'][1] / raw:>6.2f} | {r['report'][0]:>7.2f}s {r['json'][0]:>6.2f}s"
        )
        if warp:
            lines.append(f"{'':>8} warpscope loop: {warp[0]:.2f} s ({r['records'] / warp[0] / 1e6:.2f} M records/s), "
                         f"process {warp[1]:.2f} s, peak RSS {warp[2] / 2**20:.0f} MiB")
    return "\n".join(lines)


def summary(r: dict) -> dict:
    """The figures of one size as the docs' results page renders them (docs/hooks/results.py, bigcap)."""
    raw, dproc = r["raw"], r["decoder"][0]
    warp = r.get("warpscope")
    return {
        "records": r["records"], "spans": r["spans"], "raw_bytes": raw,
        "decode_call_s": r["decode_call"], "decoder_process_s": dproc,
        "pftrace_s": r["pftrace"][0], "pftrace_quiet_s": r["pftrace_quiet"][0], "loss_json_s": r["loss_json"][0],
        "pftrace_over_decoder": r["pftrace"][0] / dproc, "pftrace_quiet_over_decoder": r["pftrace_quiet"][0] / dproc,
        "warpscope_loop_s": warp[0] if warp else None,
        "warpscope_over_loss_json": warp[0] / r["loss_json"][0] if warp else None,
        "rss_over_raw": {"decoder": r["decoder"][1] / raw, "decode_q": r["decode_only"][1] / raw,
                         "pftrace": r["pftrace"][1] / raw, "loss_json": r["loss_json"][1] / raw,
                         "json": r["json"][1] / raw, "report": r["report"][1] / raw},
        "pftrace_bytes_per_region": r["pftrace_bytes"] / r["spans"],
        "report_s": r["report"][0],
        "cpu_s": {k: r[f"{k}_cpu"] for k in ("decoder", "pftrace", "pftrace_quiet", "loss_json", "decode_only")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=float, action="append", help="sizes to run (default 1e6 and 1e7)")
    ap.add_argument("--with-100m", action="store_true", help="also 100 M records (~6 GB of memory, minutes)")
    ap.add_argument("--no-warpscope", action="store_true", help="skip the per-record Python loop (slow at 100 M)")
    ap.add_argument("--skip", default="", help="comma-separated: json, report (e.g. at 100 M on a busy box)")
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of the decode processes (medians)")
    ap.add_argument("--json-out", metavar="FILE", help="also write the figures as JSON (docs/hooks/results.py)")
    ap.add_argument("--label", default="", help="a label stored in the JSON (e.g. the code measured)")
    ap.add_argument("--stat", choices=tuple(STAT), default="median",
                    help="summary of the alternated walls: median, or min on a machine shared with other work")
    args = ap.parse_args()
    global stat
    stat = STAT[args.stat]
    sizes = [int(x) for x in (args.records or [1e6, 1e7])] + ([100_000_000] if args.with_100m else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BIGCAP_TMP")) as d:
        for n in sizes:
            rows.append(bench(n, Path(d), env, warpscope=not args.no_warpscope and n <= 10_000_000,
                              skip=tuple(x for x in args.skip.split(",") if x), repeat=max(1, args.repeat)))
            print(table(rows[-1:]), flush=True)
    print()
    print(table(rows))
    if args.json_out:
        import datetime
        import json
        import platform

        doc = {"date": datetime.date.today().isoformat(), "label": args.label,
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
                          f"{platform.python_version()}, numpy {np.__version__}",
               "command": "python benchmarks/bigcap_bench.py " + " ".join(sys.argv[1:]), "stat": args.stat,
               "sizes": [summary(r) for r in rows]}
        Path(args.json_out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
