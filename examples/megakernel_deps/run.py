"""Run the dependency megakernel on one sm_90 GPU: check it, time it, skew one task.

    python examples/megakernel_deps/run.py [--out DIR] [--m 4096] [--k 1024] [--n1 1024] [--n2 1024]
        [--order interleaved|layered] [--skew-us 20] [--skew-task T] [--launches 100]

Fresh random inputs, outputs poisoned with NaN before every checked launch; Y and Z are checked against
float64 torch (Y = relu(X @ W1), Z = Y @ W2 from the kernel's own Y). Both library waits ("ld", "cas")
run with skew 0 and with `--skew-us` on one layer-1 task (by default one in the middle row block; its
dependents are the layer-2 tasks of that row block), timed alternately in one run. The ground-truth build
(`log_tasks`) logs every task's times: the host checks that no layer-2 task left its wait before the
last layer-1 signal of its row block, then matches the log's waits to its signals and walks the critical
path with host_decode.analysis.flags, the matching a tracer's records will get. Writes
megakernel_deps.json under --out and prints a table last.

--trace: the same kernel compiled inside ikp_cute.trace_pipelines (no kernel edit: the tracer hooks
cutlass.utils.distributed), at the default level, with flags only (`ops=`) and without the named-barrier records
(TRACE_MODES), checked like the plain one, timed beside it, each run saved as a capture (captures/*.npy + sidecar
with `flags`, `flag_buffers`: the `ready` counters, and the clock's offset), read back with host_decode's loader and
its records matched and walked (host_decode.analysis.flag_paths). --diagnose: a traced variant that fails its
check is diagnosed instead of stopping the run (diagnosis(); the example's README).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _p in (HERE, HERE.parents[1], HERE.parent / "pipeline"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import numpy as np

from host_decode.analysis.flags import ADD, GE, SIGNAL, UNKNOWN, WAIT, BlockSpans, FlagTable

TILE = 64
TIMER_STEP_NS = 32  # %globaltimer's resolution on H100/H200 (docs/gpu.md)
LAYER1, LAYER2 = 0, 1
LOG_FIELDS = ("cta", "start", "wait_begin", "wait_end", "signal", "end")
CTA, START, WAIT_BEGIN, WAIT_END, SIGNAL_AT, END = range(len(LOG_FIELDS))


# --- the task graph (numpy; tests/unit/examples/test_flag_examples.py) ------------------------------------------------


def task_table(row_blocks: int, tiles_n1: int, tiles_n2: int, order: str = "interleaved", lag: int = 2) -> np.ndarray:
    """int32 [tasks, 4] rows (layer, tile_m, tile_n, 0). "layered": every layer-1 task, then every layer-2
    task. "interleaved": row block by row block, the layer-2 tasks of row block r right after the layer-1
    tasks of row block r + lag, so that layer-2 tasks are taken while their inputs are still being made."""
    l1 = [[(LAYER1, m, n, 0) for n in range(tiles_n1)] for m in range(row_blocks)]
    l2 = [[(LAYER2, m, n, 0) for n in range(tiles_n2)] for m in range(row_blocks)]
    if order == "layered":
        rows = [t for blk in l1 + l2 for t in blk]
    elif order == "interleaved":
        rows = []
        for m in range(row_blocks + lag):
            if m < row_blocks:
                rows += l1[m]
            if m - lag >= 0:
                rows += l2[m - lag]
    else:
        raise ValueError(f"order={order!r}: expected 'interleaved' or 'layered'")
    return np.asarray(rows, np.int32)


def check_order(tasks: np.ndarray) -> None:
    """Every layer-2 task comes after all layer-1 tasks of its row block (what keeps the grid deadlock-free)."""
    l1 = tasks[:, 0] == LAYER1
    last_l1 = np.full(int(tasks[:, 1].max()) + 1, -1)
    np.maximum.at(last_l1, tasks[l1, 1], np.flatnonzero(l1))
    first_l2 = np.full(last_l1.size, tasks.shape[0])
    np.minimum.at(first_l2, tasks[~l1, 1], np.flatnonzero(~l1))
    bad = np.flatnonzero(first_l2 < last_l1)
    if bad.size:
        raise ValueError(f"task order: a layer-2 task of row block {int(bad[0])} comes before a layer-1 task it needs")


def dependents(tasks: np.ndarray, task: int) -> np.ndarray:
    """The layer-2 tasks that wait for `task` (a layer-1 task): those of its row block."""
    if tasks[task, 0] != LAYER1:
        raise ValueError(f"task {task} is a layer-2 task: nothing waits for it")
    return np.flatnonzero((tasks[:, 0] == LAYER2) & (tasks[:, 1] == tasks[task, 1]))


def middle_task(tasks: np.ndarray) -> int:
    """The first layer-1 task of the middle row block."""
    m = int(tasks[:, 1].max()) // 2
    return int(np.flatnonzero((tasks[:, 0] == LAYER1) & (tasks[:, 1] == m))[0])


def log_flags(log: np.ndarray, tasks: np.ndarray, row_tiles: int) -> tuple[FlagTable, BlockSpans]:
    """The ground-truth log as the flag table a tracer would produce: one add signal per layer-1 task on
    ready[tile_m] (value not recorded: a `red` returns nothing), one wait per layer-2 task on the same
    counter for >= row_tiles; and each CTA's span."""
    l1 = tasks[:, 0] == LAYER1
    n = tasks.shape[0]
    t = np.where(l1, log[:, SIGNAL_AT], 0)
    table = FlagTable(
        rank=np.zeros(n, np.int64), launch=np.zeros(n, np.int64), block=log[:, CTA], warp=np.zeros(n, np.int64),
        kind=np.where(l1, SIGNAL, WAIT), buffer=np.zeros(n, np.int64), offset=tasks[:, 1], owner=np.zeros(n, np.int64),
        value=np.where(l1, UNKNOWN, row_tiles), op=np.where(l1, ADD, GE),
        begin_ns=np.where(l1, t, log[:, WAIT_BEGIN]), end_ns=np.where(l1, t, log[:, WAIT_END]), buffers=("ready",),
    )
    ctas = np.unique(log[:, CTA])
    idx = np.searchsorted(ctas, log[:, CTA])
    start = np.full(ctas.size, np.iinfo(np.int64).max)
    end = np.zeros(ctas.size, np.int64)
    np.minimum.at(start, idx, log[:, START])
    np.maximum.at(end, idx, log[:, END])
    zeros = np.zeros(ctas.size, np.int64)
    spans = BlockSpans(rank=zeros, launch=zeros, block=ctas, start_ns=start, end_ns=end)
    return table, spans


def ground_truth(log: np.ndarray, tasks: np.ndarray, row_tiles: int, skew_task: int, skew_ns: int) -> dict:
    """What the log says: dependencies held, the skewed task's delay and dependents, matching and path."""
    from host_decode.analysis.flags import critical_path, describe_path, match_waits

    if (log[:, START] <= 0).any() or (log[:, END] < log[:, START]).any():
        raise AssertionError(f"log: {int((log[:, START] <= 0).sum())} tasks never ran")
    l1 = tasks[:, 0] == LAYER1
    last_signal = np.zeros(int(tasks[:, 1].max()) + 1, np.int64)
    np.maximum.at(last_signal, tasks[l1, 1], log[l1, SIGNAL_AT])
    # the signal's time is read before its `red`, the wait's end after its spin: one timer step of slack
    early = ~l1 & (log[:, WAIT_END] + TIMER_STEP_NS < last_signal[tasks[:, 1]])
    if early.any():
        raise AssertionError(f"{int(early.sum())} layer-2 tasks left their wait before their row block's last signal")
    table, spans = log_flags(log, tasks, row_tiles)
    m = match_waits(table, clock_error_ns=TIMER_STEP_NS)
    deps = dependents(tasks, skew_task)
    released_by_skewed = int((m.signal[np.searchsorted(m.wait_rows, deps)] == skew_task).sum())
    path = critical_path(table, m, spans=spans)
    return {
        "match": m.counts(),
        "skewed_task_ns": int(log[skew_task, SIGNAL_AT] - log[skew_task, START]),
        "skew_ns": skew_ns,
        "dependents": int(deps.size),
        "dependents_released_by_skewed_task": released_by_skewed,
        "dependents_wait_ns_median": float(np.median(log[deps, WAIT_END] - log[deps, WAIT_BEGIN])),
        "waits_blocked": int(m.blocked().sum()),
        "path_has_skewed_task": bool((path["signal_row"] == skew_task).any()),
        "path_ns": int(path["duration_ns"].sum()),
        "path": describe_path(table, path)[-12:],
    }


# --- the GPU run ----------------------------------------------------------------------------------------------


class Problem:
    def __init__(self, m: int, k: int, n1: int, n2: int, order: str, seed: int = 0):
        import torch

        if m % TILE or n1 % TILE or n2 % TILE or k % 32 or n1 % 32:
            raise ValueError(f"m, n1, n2 must be multiples of {TILE} and k, n1 of 32 (got m={m} k={k} n1={n1} n2={n2})")
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev = dict(device="cuda", dtype=torch.float32)
        self.X = torch.randn(m, k, generator=g, **dev)
        self.W1 = torch.randn(k, n1, generator=g, **dev) / k**0.5
        self.W2 = torch.randn(n1, n2, generator=g, **dev) / n1**0.5
        self.Y = torch.empty(m, n1, **dev)
        self.Z = torch.empty(m, n2, **dev)
        tasks = task_table(m // TILE, n1 // TILE, n2 // TILE, order)
        check_order(tasks)
        self.tasks_np = tasks
        self.tasks = torch.from_numpy(tasks).cuda()
        self.queue = torch.zeros(1, device="cuda", dtype=torch.int32)
        self.ready = torch.zeros(m // TILE, device="cuda", dtype=torch.int32)
        self.log = torch.zeros(tasks.shape[0], len(LOG_FIELDS), device="cuda", dtype=torch.int64)
        self.no_log = torch.zeros(1, len(LOG_FIELDS), device="cuda", dtype=torch.int64)
        self.row_tiles = n1 // TILE
        self.y_ref = (self.X.double() @ self.W1.double()).relu()
        self.sums = {n: float(getattr(self, n).double().sum()) for n in ("X", "W1", "W2")}  # --diagnose: intact?

    def reset(self):
        """Queue and counters at 0 (in place: compiled launchers hold views of these tensors)."""
        self.queue.zero_()
        self.ready.zero_()

    def poison(self):
        self.reset()
        self.Y.fill_(float("nan"))
        self.Z.fill_(float("nan"))
        self.log.zero_()

    def check(self, what: str) -> float:
        errs = []
        for out, ref in ((self.Y, self.y_ref), (self.Z, self.Y.double() @ self.W2.double())):
            if not bool(out.isfinite().all()):
                raise AssertionError(f"{what}: {int((~out.isfinite()).sum())} outputs unwritten")
            errs.append(float((out.double() - ref).norm() / ref.norm()))
        if max(errs) > 1e-5:
            raise AssertionError(f"{what}: relative errors {errs}")
        return max(errs)


def compile_kernel(mk, prob: Problem, wait_kind: str, log_tasks: bool, num_ctas: int):
    import cutlass
    from cutlass import cute
    from cutlass.cute.runtime import from_dlpack

    log = prob.log if log_tasks else prob.no_log
    tensors = [prob.tasks, prob.queue, prob.ready, prob.X, prob.W1, prob.Y, prob.W2, prob.Z]
    views = [from_dlpack(t, assumed_align=16) for t in tensors]
    log_view = from_dlpack(log, assumed_align=16)
    compiled = cute.compile(mk.launch, *views, cutlass.Int32(-1), cutlass.Int64(0), log_view, wait_kind, log_tasks,
                            num_ctas)

    def run(skew_task: int = -1, skew_ns: int = 0, keep=(prob, tensors, log)):  # keep: torch tensors outlive views
        compiled(*views, cutlass.Int32(skew_task), cutlass.Int64(skew_ns), log_view)

    return run


# trace_pipelines options of each traced variant: the default level, flags only, and the default level without the
# named-barrier records (the CTA barriers' blocked-only checks: the bisecting row between the other two)
TRACE_MODES = {"traced": {}, "flags only": {"ops": {"flag_signal", "flag_wait"}},
               "no named barriers": {"named_barriers": False}}


def compile_traced(mk, prob: Problem, num_ctas: int, records_per_lane: int, device: str = "cuda") -> dict:
    """{(wait kind, mode): (trace, session, run)}: the kernel compiled inside trace_pipelines, one Session (sized
    from the grid: a lane per warp) per variant; the `ready` counters registered as the flags' buffer."""
    import tile_gemm as tg

    import ikp_cute.flags
    from ikp_cute.pipelines import session_for, trace_pipelines

    ikp_cute.flags.register_buffer("ready", prob.ready)
    out = {}
    for wk in mk.WAIT_KINDS:
        for mode, options in TRACE_MODES.items():
            session = session_for(num_ctas, tg.THREADS // 32, records_per_lane, kernel="megakernel_deps", device=device)
            trace = trace_pipelines(session, **options)
            with trace:
                out[(wk, mode)] = (trace, session, compile_kernel(mk, prob, wk, False, num_ctas))
    return out


def traced_story(trace, skew_ns: int) -> dict:
    """What the host finds in a traced run's capture (host_decode.analysis.flag_paths: the flag table, waits matched
    to signals, the critical path): the longest blocked wait and whether the block that released it is on the path
    (the skewed task's block when the skew is on)."""
    from host_decode.analysis.flag_paths import analyze_flags, block_spans
    from host_decode.analysis.flags import critical_path, describe_path

    fa = analyze_flags(trace)
    table, m = fa.events.table, fa.match
    path = critical_path(table, m, spans=block_spans(fa), clock_offset_ns=fa.events.pending_offsets())
    story = dict(events=len(table), waits=int(m.wait_rows.size), waits_blocked=int(m.blocked().sum()),
                 match=m.counts(), path_ns=int(path["duration_ns"].sum()), path=describe_path(table, path)[-12:],
                 problems={k: v for k, v in fa.events.problems.items() if v},
                 unknown_addresses=fa.events.unknown_addresses, loss=trace.loss.lost,
                 dropped=trace.loss.dropped_on_device, skew_ns=skew_ns)
    waits = m.wait_rows[m.signal >= 0]
    if waits.size:
        length = table.end_ns[waits] - table.begin_ns[waits]
        longest = int(np.argmax(length))
        releaser = int(table.block[m.signal[m.signal >= 0][longest]])
        story.update(longest_wait_ns=int(length[longest]), longest_wait_released_by_block=releaser,
                     releaser_on_path=bool(np.isin(releaser, path["block"]) | np.isin(releaser, path["from_block"])))
    work = path[path["kind"] == 0]
    if work.size:
        w = work[np.argmax(work["duration_ns"])]
        story.update(longest_work_on_path_ns=int(w["duration_ns"]), longest_work_block=int(w["block"]))
    return story


def run_traced(traced: dict, prob: Problem, out: Path, skew_task: int, skew_ns: int, diagnose=None) -> list[dict]:
    """Each traced variant with skew 0 and skew_ns: checked, saved, read back and analysed. `diagnose` (the plain
    kernel's launcher, --diagnose): a variant that fails its check is diagnosed (diagnosis()) instead of raising,
    and the others still run."""
    import torch

    from host_decode.load.capture import load_capture

    rows = []
    for (wk, mode), (trace, session, fn) in traced.items():
        for skew in (0, skew_ns):
            prob.poison()
            with session.zeroed_then_synced():
                fn(skew_task, skew)
            torch.cuda.synchronize()
            name = f"megakernel_deps_{wk}_{mode.replace(' ', '_')}_skew{skew // 1000}us.npy"
            try:
                err = prob.check(f"traced wait {wk} ({mode}), skew {skew} ns")
            except AssertionError as e:
                if diagnose is None:
                    raise
                rows.append(dict(example="megakernel_deps", wait=wk, mode=mode, skew_ns=skew, failed=str(e),
                                 diagnosis=diagnosis(prob, trace, session, out / "captures" / name, diagnose)))
                continue
            path = trace.save(session, out / "captures" / name, example={"wait": wk, "mode": mode, "skew_ns": skew,
                                                                         "skew_task": skew_task})
            story = traced_story(load_capture(path), skew)
            rows.append(dict(example="megakernel_deps", wait=wk, mode=mode, skew_ns=skew, rel_err=err,
                             capture=str(path), traced=story))
    return rows


def diagnosis(prob: Problem, trace, session, path: Path, plain) -> dict:
    """What a traced launch that failed its check left behind (--diagnose): which tiles of Y and Z are not finite
    or wrong, the counters and the queue, whether the inputs and the task table are intact, what the records
    say (loss, drops, slots used), and whether the plain kernel, launched right after, is still correct."""
    import torch

    def tiles(bad):
        t = bad.reshape(bad.shape[0] // TILE, TILE, bad.shape[1] // TILE, TILE).any(3).any(1).nonzero().tolist()
        return {"tiles": len(t), "first": t[:8], "elements": int(bad.sum())}

    y_bad = ~prob.Y.isfinite() | ((prob.Y.double() - prob.y_ref).abs() > 1e-3)
    z_ref = prob.Y.double() @ prob.W2.double()
    out = {"Y": tiles(y_bad), "Z_not_finite": tiles(~prob.Z.isfinite()),
           "Z_wrong": tiles(prob.Z.isfinite() & ((prob.Z.double() - z_ref).abs() > 1e-3)),
           "ready": prob.ready.tolist(), "ready_expected": prob.row_tiles, "queue": int(prob.queue.item()),
           "tasks": int(prob.tasks_np.shape[0]),
           "task_table_intact": bool((prob.tasks.cpu().numpy() == prob.tasks_np).all()),
           "inputs_intact": {n: float(getattr(prob, n).double().sum()) == prob.sums[n] for n in prob.sums}}
    from host_decode.core.errors import DecodeError
    from host_decode.load.capture import load_capture

    saved = trace.save(session, path, example={"failed": True})
    stride = session.spec.write_stride
    used = session.buffer.cpu().numpy()[1:1 + stride * session.spec.records_per_lane].reshape(-1, stride) != 0
    out["records"] = {"capture": str(saved), "rows": int(used.shape[0]), "stray_records": session.stray_records(),
                      "rows_used": int(np.flatnonzero(used.any(1)).max()) + 1 if used.any() else 0}
    try:
        t = load_capture(saved)
        out["records"].update(lost=t.loss.lost, dropped_on_device=t.loss.dropped_on_device,
                              malformed=t.loss.malformed_reasons, totals=t.loss.totals)
    except DecodeError as e:
        out["records"]["decode_error"] = str(e)
    prob.poison()
    plain(-1, 0)
    torch.cuda.synchronize()
    try:
        out["plain_after"] = f"correct (error {prob.check('plain after'):.2e})"
    except AssertionError as e:
        out["plain_after"] = str(e)
    return out


def run(out: Path, *, m=4096, k=1024, n1=1024, n2=1024, order="interleaved", skew_us=20.0, skew_task=None,
        launches=100, seed=0, trace=False, records_per_lane=1024, ctas=None, diagnose=False) -> list[dict]:
    import megakernel_deps as mk
    import torch
    from measure import time_alternating

    num_ctas = ctas or torch.cuda.get_device_properties(0).multi_processor_count
    prob = Problem(m, k, n1, n2, order, seed)
    skew_task = middle_task(prob.tasks_np) if skew_task is None else skew_task
    skew_ns = int(skew_us * 1e3)
    kernels = {(wk, log): compile_kernel(mk, prob, wk, log, num_ctas) for wk in mk.WAIT_KINDS for log in (False, True)}
    traced = compile_traced(mk, prob, num_ctas, records_per_lane) if trace else {}
    rows, variants = [], {}
    for (wk, log), fn in kernels.items():
        for skew in (0, skew_ns):
            prob.poison()
            fn(skew_task, skew)
            torch.cuda.synchronize()
            err = prob.check(f"wait {wk}, log {log}, skew {skew} ns")
            row = dict(example="megakernel_deps", wait=wk, log=log, skew_ns=skew, rel_err=err)
            if log:
                row["truth"] = ground_truth(prob.log.cpu().numpy(), prob.tasks_np, prob.row_tiles, skew_task, skew)
            rows.append(row)
            variants[f"{wk}{' log' if log else ''} skew {skew // 1000}us"] = (
                prob.reset, lambda fn=fn, skew=skew: fn(skew_task, skew))
    out.mkdir(parents=True, exist_ok=True)
    rows += run_traced(traced, prob, out, skew_task, skew_ns, kernels[("ld", False)] if diagnose else None)
    if any("failed" in r for r in rows):  # --diagnose: no timing of a kernel that computes wrong results
        out.mkdir(parents=True, exist_ok=True)
        summary = dict(problem=dict(m=m, k=k, n1=n1, n2=n2, order=order, ctas=num_ctas, skew_task=skew_task),
                       timing={}, runs=rows, tflops_ld_skew0=0.0)
        (out / "megakernel_deps.json").write_text(json.dumps(summary, indent=1, default=float))
        return summary
    for (wk, mode), (_, session, fn) in traced.items():  # timed at skew 0 beside the plain kernel
        def setup(session=session):
            prob.reset()
            session.reset()

        variants[f"{wk} {mode} skew 0us"] = (setup, lambda fn=fn: fn(skew_task, 0))
    times = time_alternating(variants, launches)
    base = float(np.median(times["ld skew 0us"]))
    timing = {name: {"median_ms": float(np.median(t)), "p10_ms": float(np.percentile(t, 10)),
                     "p90_ms": float(np.percentile(t, 90)), "vs_ld_skew0": float(np.median(t)) / base}
              for name, t in times.items()}
    for (wk, mode) in traced:  # the tracer's cost: traced / plain median, same wait, same run
        timing[f"{wk} {mode} skew 0us"]["vs_plain"] = (timing[f"{wk} {mode} skew 0us"]["median_ms"]
                                                       / timing[f"{wk} skew 0us"]["median_ms"])
    flops = 2.0 * m * k * n1 + 2.0 * m * n1 * n2
    summary = dict(problem=dict(m=m, k=k, n1=n1, n2=n2, order=order, tasks=int(prob.tasks_np.shape[0]),
                                ctas=num_ctas, skew_task=skew_task, skew_layer_tile=prob.tasks_np[skew_task].tolist(),
                                dependents=dependents(prob.tasks_np, skew_task).tolist()),
                   tflops_ld_skew0=flops / (base * 1e-3) / 1e12, timing=timing, runs=rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "megakernel_deps.json").write_text(json.dumps(summary, indent=1, default=float))
    return summary


def table(summary: dict) -> str:
    lines = [f"megakernel_deps {summary['problem']}",
             f"{'variant':<30}{'median ms':>11}{'vs ld skew0':>13}{'vs plain':>10}"]
    for name, t in summary["timing"].items():
        vs_plain = f"{t['vs_plain']:>10.4f}" if "vs_plain" in t else ""
        lines.append(f"{name:<30}{t['median_ms']:>11.4f}{t['vs_ld_skew0']:>13.3f}{vs_plain}")
    for r in summary["runs"]:
        if "truth" in r:
            g = r["truth"]
            lines.append(f"truth wait={r['wait']} skew={r['skew_ns']}ns: skewed task {g['skewed_task_ns']} ns, "
                         f"{g['dependents_released_by_skewed_task']}/{g['dependents']} dependents released by it, "
                         f"waits blocked {g['waits_blocked']}, match {g['match']}, path {g['path_ns']} ns "
                         f"(skewed task on it: {g['path_has_skewed_task']})")
        if "traced" in r:
            g = r["traced"]
            lines.append(f"traced wait={r['wait']} ({r['mode']}) skew={r['skew_ns']}ns: {g['events']} flag events "
                         f"(lost {g['loss']}, dropped {g['dropped']}, unknown addresses {g['unknown_addresses']}, "
                         f"malformed {g['problems'] or 'none'}), "
                         f"waits blocked {g['waits_blocked']}, match {g['match']}, path {g['path_ns']} ns, longest "
                         f"wait {g.get('longest_wait_ns')} ns released by block "
                         f"{g.get('longest_wait_released_by_block')} (on the path: {g.get('releaser_on_path')}), "
                         "longest work on the path "
                         f"{g.get('longest_work_on_path_ns')} ns (block {g.get('longest_work_block')})")
        if "failed" in r:
            lines.append(f"FAILED traced wait={r['wait']} ({r['mode']}) skew={r['skew_ns']}ns: {r['failed']}")
            lines += [f"    {key}: {value}" for key, value in r["diagnosis"].items()]
    lines.append(f"TFLOP/s (ld, skew 0): {summary['tflops_ld_skew0']:.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("megakernel_deps_out"))
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n1", type=int, default=1024)
    ap.add_argument("--n2", type=int, default=1024)
    ap.add_argument("--order", choices=("interleaved", "layered"), default="interleaved")
    ap.add_argument("--skew-us", type=float, default=20.0)
    ap.add_argument("--skew-task", type=int, default=None, help="queue index of a layer-1 task (default: middle)")
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="inputs: torch.randn with this seed")
    ap.add_argument("--trace", action="store_true", help="also run the kernel traced (flag records, no kernel edit)")
    ap.add_argument("--records-per-lane", type=int, default=1024, help="--trace: slots per warp lane")
    ap.add_argument("--ctas", type=int, default=None, help="CTAs of the persistent grid (default: one per SM)")
    ap.add_argument("--diagnose", action="store_true",
                    help="--trace: a traced variant that fails its check is diagnosed (tiles, counters, records, "
                         "the plain kernel after it) and the others still run; exit status 1 if any failed")
    a = ap.parse_args(argv)
    import ikp_cute

    ikp_cute.require_gpu('examples/megakernel_deps/run.py')  # one line where there is no GPU
    summary = run(a.out, m=a.m, k=a.k, n1=a.n1, n2=a.n2, order=a.order, skew_us=a.skew_us, skew_task=a.skew_task,
                  launches=a.launches, seed=a.seed, trace=a.trace, records_per_lane=a.records_per_lane,
                  ctas=a.ctas, diagnose=a.diagnose)
    for r in summary["runs"]:
        for key, what in (("truth", "log"), ("traced", "records")):
            if key in r:
                print(f"critical path from the {what} (wait={r['wait']}{', ' + r['mode'] if 'mode' in r else ''}, "
                      f"skew={r['skew_ns']} ns), last links:")
                print("\n".join("   " + line for line in r[key]["path"]))
    print(table(summary))
    return 1 if any("failed" in r for r in summary["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
