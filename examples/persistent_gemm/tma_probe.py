"""TMA latency probe: every load's issue and data-ready times measured in the kernel itself (the ground
truth), beside what `trace_pipelines` records of the same launch.

Per CTA, three warps share one `cutlass.pipeline.PipelineTmaAsync` ring of `stages` stages of `tile_bytes`
bytes each (a tile_rows x 64 fp32 box, tile_bytes / 256 rows, no swizzle):
  warp 0, producer:  per iteration i, `producer_acquire` (free stage, then arrive.expect_tx: the tracer's
                     *commit*), reads %globaltimer (ISSUE), issues the TMA load of tile (block * iters + i)
                     of X (distinct per load: X is larger than L2, so loads come from DRAM), `producer_commit`;
  warp 1, consumer:  `consumer_wait` (the tracer's *wait*, whose end is data-ready), `consumer_release`;
  warp 2, observer:  spins on the same full barrier (`mbarrier.try_wait` in a loop, on a pointer it forms
                     itself, so no tracer sees it), reads %globaltimer the moment the phase completes
                     (READY), then arrives on the stage's empty barrier itself.
The empty barriers count two arrivals (the consumer's release and the observer's arrive), so the producer
cannot refill a stage the observer has not seen: the observer is never lapped. Lane 0 of the producer and
of the observer write ISSUE and READY to T[block, i, 0/1] (int64 ns of %globaltimer).

With `stages=1` each load is alone in flight (latency); with more, loads overlap (throughput: a load's
ready - issue then includes queueing behind the loads ahead of it). Expected on an H100/H200: ready - issue
grows with bytes (fixed latency + bytes / per-SM TMA bandwidth). The timer reads are not ordered with the
TMA instruction by anything but program order (ptxas may move them by a few instructions, a few ns, below
%globaltimer's 32 ns step on these GPUs).

`async_unit_check(trace, truth, stages)` checks the host's async-unit intervals (host_decode.analysis.async_units:
issue and ready bounds per load) against the truth: every truth inside its interval's bounds, within one timer step.

`compare(trace, truth, stages)` matches the traced pipeline (level "signals", `passing_waits=True`, so
every commit and every wait is recorded) to the ground truth: the k-th commit and the k-th consumer wait
of stage s are iteration k * stages + s. traced issue = the commit instant (its timer read comes before the
record block and the arrive.expect_tx: 32-64 ns before ISSUE on an H200, 2026-11-29); traced ready = the end of
the consumer's wait (the phase flip only where the wait blocked: with four stages in flight the consumer finds
most loads landed, its wait passes, and its end is later than the flip). At the default level ("waits")
there is no commit: the producer's acquire region ends just before the issue, when it blocked.

    python examples/persistent_gemm/tma_probe.py [--out DIR]      # GPU: every config, traced + truth

CPU test: tests/unit/examples/test_persistent_gemm_compile.py::test_tma_probe_*.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cutlass
from cutlass import Float32, Int64, cute, pipeline
from cutlass.cute.nvgpu import cpasync

HERE = Path(__file__).resolve().parent
COLS = 64  # fp32 per row: 256-byte rows
WARPS = 3  # producer, consumer, observer
# (tile_bytes, stages): latency alone (1 stage) from 4 KiB to 64 KiB, then overlapped loads
CONFIGS = [(4096, 1), (16384, 1), (65536, 1), (4096, 4), (16384, 4), (32768, 4)]
X_ROWS = 1 << 20  # X: 1 Mi rows x 256 B = 256 MiB (more than L2: distinct tiles come from DRAM)


class TmaProbe:
    def __init__(self, tile_bytes: int, stages: int, iters: int):
        if tile_bytes % (4 * COLS) or not 1 <= tile_bytes // (4 * COLS) <= 256:
            raise ValueError(f"TmaProbe: tile_bytes={tile_bytes}; need a multiple of {4 * COLS} up to 64 KiB")
        if stages * tile_bytes > 192 * 1024:
            raise ValueError(f"TmaProbe: {stages} stages x {tile_bytes} bytes exceed 192 KiB of shared memory")
        self.rows, self.tile_bytes, self.stages, self.iters = tile_bytes // (4 * COLS), tile_bytes, stages, iters

    @cute.jit
    def __call__(self, mX: cute.Tensor, mT: cute.Tensor):
        s_layout = cute.make_layout((self.rows, COLS, self.stages), stride=(COLS, 1, self.rows * COLS))
        tma, tX = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mX, cute.slice_(s_layout, (None, None, 0)), (self.rows, COLS)
        )

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[Int64, self.stages * 2]
            sX: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(s_layout)], 128]

        self.kernel(tma, tX, mT, s_layout, SharedStorage).launch(
            grid=[cute.size(mT, mode=[0]), 1, 1], block=[32 * WARPS, 1, 1]
        )

    @cute.kernel
    def kernel(self, tma: cute.CopyAtom, mX: cute.Tensor, mT: cute.Tensor, s_layout: cute.Layout,
               SharedStorage: cutlass.Constexpr):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        bid, _, _ = cute.arch.block_idx()
        storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
        barriers = storage.barriers.data_ptr()
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers,
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 2),  # consumer release + observer
            tx_count=self.tile_bytes,
        )
        sX = storage.sX.get_tensor(s_layout)
        if warp == 0:
            gX = cute.local_tile(mX, (self.rows, COLS), (None, 0))  # (rows, COLS, tiles)
            tXs, tXg = cpasync.tma_partition(
                tma, 0, cute.make_layout(1), cute.group_modes(sX, 0, 2), cute.group_modes(gX, 0, 2)
            )
            num_tiles = cute.size(gX, mode=[2])
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
            for i in cutlass.range(self.iters, unroll=1):
                ring.producer_acquire(state)
                issue = cute.arch.globaltimer()
                tile = (bid * self.iters + i) % num_tiles
                cute.copy(tma, tXg[None, tile], tXs[None, state.index], tma_bar_ptr=ring.producer_get_barrier(state))
                if lane == 0:
                    mT[bid, i, 0] = issue
                ring.producer_commit(state)
                state.advance()
            ring.producer_tail(state)
        elif warp == 1:
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            for i in cutlass.range(self.iters, unroll=1):
                ring.consumer_wait(state)
                ring.consumer_release(state)
                state.advance()
        elif warp == 2:
            for i in cutlass.range(self.iters, unroll=1):
                stage = i % self.stages
                phase = (i // self.stages) % 2
                ready = cute.arch.mbarrier_try_wait(barriers + stage, phase)
                while not ready:
                    ready = cute.arch.mbarrier_try_wait(barriers + stage, phase)
                now = cute.arch.globaltimer()
                if lane == 0:
                    mT[bid, i, 1] = now
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive(barriers + self.stages + stage)


# --- host --------------------------------------------------------------------------------------------------


def fake_operands(blocks: int, iters: int):
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    return (fake(Float32, (X_ROWS, COLS), stride_order=(1, 0), assumed_align=16),
            fake(Int64, (blocks, iters, 2), stride_order=(2, 1, 0), assumed_align=16))


def compile_probe(operands, tile_bytes: int, stages: int, iters: int, trace=None, options: str | None = None):
    """cute.compile the probe (PTX and cubin kept unless `options` says otherwise), under `trace` if given."""
    import contextlib

    import host

    probe = TmaProbe(tile_bytes, stages, iters)
    with trace if trace is not None else contextlib.nullcontext():
        return cute.compile(probe, *operands, options=host.keep_options() if options is None else options)


def truth_table(times, stages: int) -> dict:
    """Ground truth of one launch: T (blocks, iters, 2) int64 -> per-load issue, ready, latency (ns)."""
    import numpy as np

    t = np.asarray(times, dtype=np.int64)
    if (t <= 0).any():
        raise AssertionError(f"TMA probe: {(t <= 0).sum()} ground-truth times not written")
    latency = t[:, :, 1] - t[:, :, 0]
    if (latency < 0).any():
        raise AssertionError(f"TMA probe: {(latency < 0).sum()} loads ready before their issue")
    return {"issue": t[:, :, 0], "ready": t[:, :, 1], "latency": latency}


def compare(trace, truth: dict, stages: int) -> dict:
    """Traced (commit -> consumer wait end) against the ground truth, load by load (level signals,
    passing_waits=True). Differences in ns: traced - truth."""
    import numpy as np

    from host_decode.analysis.pipeline_match import FLOW_KINDS, WAIT_OPS
    from host_decode.analysis.pipelines import analyze_pipelines

    analysis = analyze_pipelines(trace)
    ring = next(i for i, c in enumerate(analysis.channels) if c.kind == "pipeline")
    w = analysis.waits
    w = w[(w["channel"] == ring) & (w["op"] == WAIT_OPS.index("wait"))
          & (w["kind"] == FLOW_KINDS.index("commit->wait"))]
    blocks, iters = truth["issue"].shape
    block = w["block"]
    it = w["occurrence"] * stages + w["stage"]
    keep = (block < blocks) & (it < iters)
    block, it, w = block[keep], it[keep], w[keep]
    issue_diff = w["src_ns"] - truth["issue"][block, it]
    ready_diff = w["end_ns"] - truth["ready"][block, it]
    lat_diff = (w["end_ns"] - w["src_ns"]) - truth["latency"][block, it]

    def stats(x):
        if not x.size:
            return {}
        return {"p50": float(np.median(x)), "p90_abs": float(np.percentile(np.abs(x), 90)),
                "min": int(x.min()), "max_abs": int(np.abs(x).max()), "within_64ns": float((np.abs(x) <= 64).mean())}

    return {
        "loads": int(blocks * iters),
        "matched": int(w.size),
        "truth_latency_ns": {q: float(np.percentile(truth["latency"], p)) for q, p in (("p10", 10), ("p50", 50),
                                                                                        ("p90", 90))},
        "traced_minus_truth": {"issue": stats(issue_diff), "ready": stats(ready_diff), "latency": stats(lat_diff)},
    }


def async_unit_check(trace, truth: dict, stages: int) -> dict:
    """The ring's TMA intervals (host_decode.analysis.async_units) against the ground truth: loads with an
    interval, how many of them exact, and truths outside their interval's bounds by more than one timer step
    (issue, ready), with the farthest outside (ns; 0 when all inside)."""
    import numpy as np

    from host_decode.analysis.async_units import CLASSES, analyze_async_units

    units = analyze_async_units(trace)
    ring = next(i for i, c in enumerate(units.channels) if c.name == "ring")
    iv = units.of(ring, "full")
    blocks, iters = truth["issue"].shape
    load = iv["phase"] * stages + iv["stage"]
    keep = (iv["phase"] >= 0) & (iv["block"] < blocks) & (load < iters)
    iv, load = iv[keep], load[keep]
    issue, ready = truth["issue"][iv["block"], load], truth["ready"][iv["block"], load]
    ready_hi = np.where(iv["ready_hi"] >= 0, iv["ready_hi"], np.iinfo(np.int64).max)
    out_issue = np.maximum(iv["issue_lo"] - issue, issue - iv["issue_hi"])
    out_ready = np.maximum(iv["ready_lo"] - ready, ready - ready_hi)
    step = units.timer_step_ns
    return {"loads": int(blocks * iters), "intervals": int(iv.size),
            "exact": int((iv["cls"] == CLASSES.index("exact")).sum()), "timer_step_ns": step,
            "issue_outside": int((out_issue > step).sum()), "ready_outside": int((out_ready > step).sum()),
            "farthest_outside_ns": int(max(out_issue.max(initial=0), out_ready.max(initial=0), 0))}


def run_config(tile_bytes: int, stages: int, *, blocks: int = 16, iters: int = 64, out_dir: Path | None = None) -> dict:
    """GPU: one untraced launch (ground truth alone) and one launch traced at level signals with every wait
    recorded (ground truth + capture of the same launch, compared load by load). Saves the capture and the
    truth (`tma_probe_<bytes>B_<stages>s.npy/.json` + `_truth.npy`) under `out_dir` when given."""
    import numpy as np
    import torch
    from cutlass.cute.runtime import from_dlpack

    from host_decode.load.capture import load_capture
    from ikp_cute.pipelines import session_for, trace_pipelines

    x = torch.randn(X_ROWS, COLS, device="cuda", dtype=torch.float32)
    t_plain = torch.zeros(blocks, iters, 2, device="cuda", dtype=torch.int64)
    args = [from_dlpack(x, assumed_align=16), from_dlpack(t_plain, assumed_align=16)]
    compile_probe(args, tile_bytes, stages, iters, options="")(*args)
    torch.cuda.synchronize()
    plain = truth_table(t_plain.cpu().numpy(), stages)

    session = session_for(blocks, WARPS, records_per_lane=4 * iters + 32, kernel=f"tma_probe_{tile_bytes}B_{stages}s")
    trace = trace_pipelines(session, level="signals", passing_waits=True)
    t_traced = torch.zeros_like(t_plain)
    args = [from_dlpack(x, assumed_align=16), from_dlpack(t_traced, assumed_align=16)]
    compiled = compile_probe(args, tile_bytes, stages, iters, trace=trace, options="")
    with session.zeroed_then_synced():
        compiled(*args)
    truth = truth_table(t_traced.cpu().numpy(), stages)
    stem = f"tma_probe_{tile_bytes}B_{stages}s"
    target = Path(out_dir or "/tmp") / f"{stem}.npy"
    path = trace.save(session, target)
    np.save(Path(path).with_name(f"{stem}_truth.npy"), t_traced.cpu().numpy())
    traced = load_capture(path)
    result = {"tile_bytes": tile_bytes, "stages": stages, "blocks": blocks, "iters": iters,
              "untraced_latency_p50_ns": float(np.median(plain["latency"])),
              **compare(traced, truth, stages), "async_units": async_unit_check(traced, truth, stages)}
    if out_dir is None:
        for p in (path, Path(path).with_suffix(".json"), Path(path).with_name(f"{stem}_truth.npy")):
            os.remove(p)
    return result


def bandwidth_fit(rows: list[dict]) -> dict:
    """Least squares latency = a + bytes / bw over the 1-stage configs (ground truth and traced)."""
    import numpy as np

    alone = [r for r in rows if r["stages"] == 1]
    if len(alone) < 2:
        return {}
    b = np.array([r["tile_bytes"] for r in alone], float)
    out = {}
    for key, lat in (("truth", [r["truth_latency_ns"]["p50"] for r in alone]),
                     ("traced", [r["truth_latency_ns"]["p50"] + r["traced_minus_truth"]["latency"].get("p50", 0.0)
                                 for r in alone])):
        slope, intercept = np.polyfit(b, np.array(lat, float), 1)
        out[key] = {"fixed_ns": float(intercept), "gb_per_s": float(1.0 / slope) if slope > 0 else None}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/tma_probe")))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parents[1]))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run_config(b, s, out_dir=args.out) for b, s in CONFIGS]
    report = {"configs": rows, "fit": bandwidth_fit(rows)}
    (args.out / "tma_probe_results.json").write_text(json.dumps(report, indent=1))
    for r in rows:
        d = r["traced_minus_truth"]
        a = r["async_units"]
        print(f"{r['tile_bytes']:>6} B x{r['stages']}: truth p50 {r['truth_latency_ns']['p50']:.0f} ns, matched "
              f"{r['matched']}/{r['loads']}, traced-truth latency p50 {d['latency'].get('p50')} ns; async units "
              f"{a['intervals']}/{a['loads']} ({a['exact']} exact), outside bounds: issue {a['issue_outside']} "
              f"ready {a['ready_outside']} (farthest {a['farthest_outside_ns']} ns)")
    print("fit:", report["fit"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
