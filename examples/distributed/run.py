"""All-gather + GEMM through symmetric-memory flags (ag_gemm.py): check it, time it, delay one rank.

Two GPUs, one process each (torch.distributed over NCCL, buffers from torch symmetric memory without
multicast):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 examples/distributed/run.py [--out DIR] [--delay-rank 1] [--delay-us 20]

One GPU, every rank simulated in one launch (rank r = the r-th slice of the grid, ordinary buffers in
place of the peers' symmetric ones; the same kernel code path, scope "sys" included):

    python examples/distributed/run.py --world-size 1 [--ranks 2] [--out DIR]

NVLink multicast stays off: this program sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 before it imports torch, asserts them, and uses no multimem instruction (the
kernel's PTX is checked on the CPU by tests/unit/examples/test_flag_examples.py).

Each rank checks a_full (the all-gathered A, exactly) and C_r = A @ B_r against float64 torch, with
outputs poisoned before each checked launch; both library waits ("ld", "cas") run with no delay and
with `--delay-us` on the CTAs of `--delay-rank`, timed alternately (a collective on the kernel's stream
between launches keeps the ranks in step). The ground-truth build logs every task; rank 0 gathers the
logs, checks that no GEMM tile left its wait before the last push it needed (one GPU only: one clock),
and matches waits to signals across ranks with host_decode.analysis.flags. Writes distributed.json under
--out (rank 0) and prints a table last.

--trace: the same kernel compiled inside ikp_cute.trace_pipelines (no kernel edit: the tracer hooks
cutlass.utils.distributed), at the default level and with flags only, checked like the plain one, timed beside
it; each rank saves its capture (captures/distributed_<wait>_<mode>_delay<D>us/rank<R>.npy, a folder per step:
sidecar with `flags`, `flag_buffers`, every rank's copy of the symmetric `flags` and `a_full` in this process's
address space, `rank`, `world_size` and the clock's offset to the host); rank 0 reads every rank's capture,
puts them on the host clock and matches waits to signals across ranks (host_decode's loader, sessions.concat and
analysis.flag_paths).
"""

from __future__ import annotations

import os

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def guard_environment(env=os.environ) -> None:
    """NVLink multicast off for this process and every child it starts (they inherit `env`)."""
    env.update(NO_MULTICAST)
    wrong = {k: env.get(k) for k, v in NO_MULTICAST.items() if env.get(k) != v}
    if wrong:
        raise AssertionError(f"NVLink multicast must stay off; environment has {wrong}")


guard_environment()

import argparse  # noqa: E402  (the environment is set before anything that may load NCCL)
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
for _p in (HERE, HERE.parent / "megakernel_deps", HERE.parents[1], HERE.parent / "pipeline"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import numpy as np  # noqa: E402

from host_decode.analysis.flags import ADD, GE, SIGNAL, UNKNOWN, WAIT, BlockSpans, FlagTable  # noqa: E402

TILE = 64
PUSH, GEMM = 0, 1
LOG_FIELDS = ("cta", "start", "wait_begin", "wait_end", "signal", "end")
CTA, START, WAIT_BEGIN, WAIT_END, SIGNAL_AT, END = range(len(LOG_FIELDS))
TIMER_STEP_NS = 32  # %globaltimer's resolution on H100/H200 (docs/gpu.md)


# --- the task graph (numpy; tests/unit/examples/test_flag_examples.py) ------------------------------------------------


def task_table(rank: int, world: int, row_blocks: int, tiles_n: int, chunks: int) -> np.ndarray:
    """int32 [tasks, 4] of `rank`: every PUSH (row block by row block; peers first, itself last), then
    every GEMM tile: its own rows first (no wait), then the other ranks' rows in the order they are pushed
    to it ((rank + 1) % world first)."""
    pushes = [(PUSH, rb, (rank + 1 + j) % world, c) for rb in range(row_blocks) for j in range(world)
              for c in range(chunks)]
    sources = [(rank + j) % world for j in range(world)]
    gemms = [(GEMM, s * row_blocks + rb, tn, 0) for s in sources for rb in range(row_blocks) for tn in range(tiles_n)]
    return np.asarray(pushes + gemms, np.int32)


def check_order(tasks: np.ndarray) -> None:
    """Every PUSH before every GEMM: a CTA only waits on pushes, which never wait (no deadlock)."""
    kinds = tasks[:, 0]
    if (np.diff(kinds) < 0).any() or not set(np.unique(kinds).tolist()) <= {PUSH, GEMM}:
        raise ValueError("task order: every PUSH must come before every GEMM")


def flag_events(logs: np.ndarray, tasks: np.ndarray, row_blocks: int, chunks: int, epoch: int) -> FlagTable:
    """The ground-truth logs of every rank ([ranks, tasks, 6] and [ranks, tasks, 4]) as the flag table a
    tracer would produce: each PUSH an add on flags[rank, rb] of its destination (owner), each GEMM tile of
    another rank's rows a wait on its own flags[src, rb] for >= epoch * chunks (match with
    initial=(epoch - 1) * chunks: the flags count across launches)."""
    ranks, n = tasks.shape[:2]
    rank = np.repeat(np.arange(ranks), n)
    t, lg = tasks.reshape(-1, 4), logs.reshape(-1, len(LOG_FIELDS))
    push = t[:, 0] == PUSH
    src = t[:, 1] // row_blocks
    waits = ~push & (src != rank)
    keep = push | waits
    at = np.where(push, lg[:, SIGNAL_AT], 0)
    zeros = np.zeros(int(keep.sum()), np.int64)
    return FlagTable(
        rank=rank[keep], launch=zeros, block=lg[keep, CTA], warp=zeros, kind=np.where(push, SIGNAL, WAIT)[keep],
        buffer=zeros,
        offset=np.where(push, rank * row_blocks + t[:, 1], t[:, 1])[keep],
        owner=np.where(push, t[:, 2], rank)[keep], value=np.where(push, UNKNOWN, epoch * chunks)[keep],
        op=np.where(push, ADD, GE)[keep], begin_ns=np.where(push, at, lg[:, WAIT_BEGIN])[keep],
        end_ns=np.where(push, at, lg[:, WAIT_END])[keep], buffers=("flags",),
    )


def block_spans(logs: np.ndarray) -> BlockSpans:
    ranks, n = logs.shape[:2]
    lg = logs.reshape(-1, len(LOG_FIELDS))
    key = np.repeat(np.arange(ranks), n).astype(np.int64) << 32 | lg[:, CTA]
    keys, idx = np.unique(key, return_inverse=True)
    start = np.full(keys.size, np.iinfo(np.int64).max)
    end = np.zeros(keys.size, np.int64)
    np.minimum.at(start, idx, lg[:, START])
    np.maximum.at(end, idx, lg[:, END])
    return BlockSpans(rank=keys >> 32, launch=np.zeros(keys.size, np.int64), block=keys & 0xFFFF_FFFF, start_ns=start,
                      end_ns=end)


def ground_truth(logs, tasks, row_blocks, chunks, epoch, delay_rank, one_clock: bool) -> dict:
    from host_decode.analysis.flags import critical_path, describe_path, match_waits

    lg = logs.reshape(-1, len(LOG_FIELDS))
    if (lg[:, START] <= 0).any():
        raise AssertionError(f"log: {int((lg[:, START] <= 0).sum())} tasks never ran")
    table = flag_events(logs, tasks, row_blocks, chunks, epoch)
    if one_clock:  # every GEMM wait ended after the last push of its row block to its rank
        sig = table.kind == SIGNAL
        flag = table.owner.astype(np.int64) << 32 | table.offset
        keys, idx = np.unique(flag, return_inverse=True)
        last = np.zeros(keys.size, np.int64)
        np.maximum.at(last, idx[sig], table.end_ns[sig])
        early = ~sig & (table.end_ns + TIMER_STEP_NS < last[idx])
        if early.any():
            raise AssertionError(f"{int(early.sum())} GEMM tiles left their wait before the last push they needed")
    # ranks' clocks: one GPU has one; across GPUs the offset is not measured here (5 us of error allowed)
    m = match_waits(table, initial=(epoch - 1) * chunks, clock_error_ns=TIMER_STEP_NS if one_clock else 5000)
    w = m.wait_rows
    on_delayed = table.offset[w] // row_blocks == delay_rank  # waits for the delayed rank's rows (none if -1)
    dur = table.end_ns[w] - table.begin_ns[w]
    path = critical_path(table, m, spans=block_spans(logs))
    return {
        "match": m.counts(),
        "waits": int(m.wait_rows.size),
        "waits_blocked": int(m.blocked().sum()),
        "wait_ns_median_on_delayed_rank": float(np.median(dur[on_delayed])) if on_delayed.any() else None,
        "wait_ns_median_other": float(np.median(dur[~on_delayed])) if (~on_delayed).any() else None,
        "path_ns": int(path["duration_ns"].sum()),
        "path": describe_path(table, path)[-10:],
    }


# --- the GPU run ----------------------------------------------------------------------------------------------


class Problem:
    """One launch's tensors: `ranks_here` ranks of `world` (1 per process, or all of them on one GPU)."""

    def __init__(self, world: int, rank_base: int, ranks_here: int, m: int, k: int, n: int, chunks: int, seed=0):
        import torch

        if m % (world * TILE) or n % TILE or k % (32 * chunks):
            raise ValueError(f"m must be a multiple of {world * TILE}, n of {TILE}, k of {32 * chunks}")
        self.world, self.rank_base, self.ranks_here = world, rank_base, ranks_here
        self.m, self.k, self.n, self.chunks = m, k, n, chunks
        self.shard_rows = m // world
        self.row_blocks = self.shard_rows // TILE
        dev = dict(device="cuda", dtype=torch.float32)
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.A = torch.randn(m, k, generator=g, **dev)  # the same on every rank (same seed): a rank takes its shard
        mine = range(rank_base, rank_base + ranks_here)
        bs = [torch.randn(k, n, generator=torch.Generator(device="cuda").manual_seed(seed + 1 + r), **dev) / k**0.5
              for r in mine]
        self.shards = self.A[rank_base * self.shard_rows:(rank_base + ranks_here) * self.shard_rows].contiguous()
        self.B = torch.cat(bs, dim=1).contiguous()
        self.C = torch.empty(m, ranks_here * n, **dev)
        tasks = [task_table(r, world, self.row_blocks, n // TILE, chunks) for r in mine]
        for t in tasks:
            check_order(t)
        self.tasks_np = np.stack(tasks)
        self.tasks = torch.from_numpy(self.tasks_np).cuda()
        self.queue = torch.zeros(ranks_here, device="cuda", dtype=torch.int32)
        self.log = torch.zeros(ranks_here, self.tasks_np.shape[1], len(LOG_FIELDS), device="cuda", dtype=torch.int64)
        self.no_log = torch.zeros(1, 1, len(LOG_FIELDS), device="cuda", dtype=torch.int64)
        self.c_ref = torch.cat([self.A.double() @ b.double() for b in bs], dim=1)
        self.epoch = 0

    def symmetric_single_gpu(self):
        """Ordinary buffers for every simulated rank: a_full [M, K] and flags [world, row_blocks] each."""
        import torch

        self.a_full = [torch.empty(self.m, self.k, device="cuda") for _ in range(self.world)]
        self.flags = [torch.zeros(self.world, self.row_blocks, device="cuda", dtype=torch.int32)
                      for _ in range(self.world)]
        self._ptrs([t.data_ptr() for t in self.a_full], [t.data_ptr() for t in self.flags])

    def symmetric_distributed(self, group):
        """a_full and flags in torch symmetric memory (no multicast); the peers' addresses from rendezvous."""
        import warnings

        import torch
        import torch.distributed._symmetric_memory as symm_mem

        rank = self.rank_base
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed by older torch, a deprecated no-op later
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group.group_name)
        a = symm_mem.empty(self.m, self.k, dtype=torch.float32, device="cuda")
        f = symm_mem.empty(self.world, self.row_blocks, dtype=torch.int32, device="cuda")
        f.zero_()
        ptrs, self.handles = [], []
        for t in (a, f):
            h = symm_mem.rendezvous(t, group.group_name)
            offset = t.data_ptr() - int(h.buffer_ptrs[rank])
            ptrs.append([int(p) + offset for p in h.buffer_ptrs])
            self.handles.append(h)
        self.a_full, self.flags = [a], [f]
        self._ptrs(*ptrs)

    def register_flag_buffers(self):
        """Where a recorded flag address lies (ikp_cute.flags): every rank's copy of `flags` and `a_full` (their
        symmetric-memory handles), or, ranks simulated on one GPU, each simulated rank's buffers."""
        import ikp_cute.flags

        if getattr(self, "handles", None):
            ikp_cute.flags.register_symmetric("a_full", self.a_full[0], self.handles[0])
            ikp_cute.flags.register_symmetric("flags", self.flags[0], self.handles[1])
        else:
            for r, (a, f) in enumerate(zip(self.a_full, self.flags)):
                ikp_cute.flags.register_buffer("a_full", a, owner_rank=r)
                ikp_cute.flags.register_buffer("flags", f, owner_rank=r)

    def _ptrs(self, a_ptrs, flag_ptrs):
        import torch

        self.a_ptrs = torch.tensor(a_ptrs, dtype=torch.int64, device="cuda")
        self.flag_ptrs = torch.tensor(flag_ptrs, dtype=torch.int64, device="cuda")

    def poison(self):
        self.queue.zero_()
        self.C.fill_(float("nan"))
        for a in self.a_full:
            a.fill_(float("nan"))
        self.log.zero_()

    def check(self, what: str) -> float:
        for i, a in enumerate(self.a_full):
            if not bool((a == self.A).all()):
                raise AssertionError(f"{what}: a_full of rank {self.rank_base + i}: "
                                     f"{int((a != self.A).sum())} elements not the gathered A")
        if not bool(self.C.isfinite().all()):
            raise AssertionError(f"{what}: {int((~self.C.isfinite()).sum())} outputs unwritten")
        err = float((self.C.double() - self.c_ref).norm() / self.c_ref.norm())
        if err > 1e-5:
            raise AssertionError(f"{what}: relative error {err}")
        return err


def compile_kernel(ag, prob: Problem, wait_kind: str, log_tasks: bool, ctas_per_rank: int):
    import cutlass
    from cutlass import cute
    from cutlass.cute.runtime import from_dlpack

    log = prob.log if log_tasks else prob.no_log
    tensors = [prob.tasks, prob.queue, prob.shards, prob.B, prob.C, prob.a_ptrs, prob.flag_ptrs]
    views = [from_dlpack(t, assumed_align=16) for t in tensors]
    log_view = from_dlpack(log, assumed_align=16)
    i32, i64 = cutlass.Int32, cutlass.Int64
    compiled = cute.compile(ag.launch, *views, i32(prob.rank_base), i32(1), i32(-1), i64(0), log_view, prob.world,
                            prob.ranks_here, ctas_per_rank, prob.chunks, wait_kind, log_tasks)

    def run(delay_rank: int = -1, delay_ns: int = 0, keep=(prob, tensors, log)):  # keep: tensors outlive views
        prob.epoch += 1
        compiled(*views, i32(prob.rank_base), i32(prob.epoch), i32(delay_rank), i64(delay_ns), log_view)

    return run


TRACE_MODES = {"traced": None, "flags only": {"flag_signal", "flag_wait"}}  # trace_pipelines(ops=...)


def compile_traced(ag, prob: Problem, ctas_per_rank: int, records_per_lane: int, device: str = "cuda") -> dict:
    """{(wait kind, mode): (trace, session, run)}: the kernel compiled inside trace_pipelines (a Session sized
    from this launch's grid, a lane per warp)."""
    import tile_gemm as tg

    from ikp_cute.pipelines import session_for, trace_pipelines

    prob.register_flag_buffers()
    out = {}
    for wk in ag.WAIT_KINDS:
        for mode, ops in TRACE_MODES.items():
            session = session_for(prob.ranks_here * ctas_per_rank, tg.THREADS // 32, records_per_lane, kernel="ag_gemm",
                                  device=device)
            trace = trace_pipelines(session, ops=ops)
            with trace:
                out[(wk, mode)] = (trace, session, compile_kernel(ag, prob, wk, False, ctas_per_rank))
    return out


def traced_story(traces: list, ctas_per_rank: int, initial: int, delay_rank: int, simulated: bool) -> dict:
    """What the host finds in the captures of one traced step (one per rank, merged on the host clock by
    host_decode.analysis.sessions.concat, or one holding every simulated rank): the flag table and waits matched
    to signals across ranks (host_decode.analysis.flag_paths), the critical path, waits on the delayed rank's
    rows."""
    import dataclasses

    from host_decode.analysis.flag_paths import analyze_flags, block_spans
    from host_decode.analysis.flags import critical_path, describe_path, match_waits
    from host_decode.analysis.sessions import concat, parts_from_traces

    trace = traces[0] if len(traces) == 1 else concat(parts_from_traces(traces, by="rank"))
    fa = analyze_flags(trace, initial=initial)
    table, m, spans, offsets = fa.events.table, fa.match, block_spans(fa), fa.events.pending_offsets()
    if simulated:  # ranks as slices of one grid (one clock): rank = block // ctas_per_rank
        table = dataclasses.replace(table, rank=table.block // ctas_per_rank, block=table.block % ctas_per_rank)
        spans = dataclasses.replace(spans, rank=spans.block // ctas_per_rank, block=spans.block % ctas_per_rank)
        m, offsets = match_waits(table, clock_error_ns=fa.error_bound_ns, initial=initial), None
    path = critical_path(table, m, spans=spans, clock_offset_ns=offsets)
    w = m.wait_rows
    row_blocks = int(traces[0].meta["example"]["row_blocks"])  # flags[src, row block]: the offset's rank is src
    on_delayed = table.offset[w] // row_blocks == delay_rank
    dur = table.end_ns[w] - table.begin_ns[w]
    return dict(events=len(table), waits=int(w.size), waits_blocked=int(m.blocked().sum()), match=m.counts(),
                path_ns=int(path["duration_ns"].sum()), path=describe_path(table, path)[-12:],
                problems={k: v for k, v in fa.events.problems.items() if v},
                unknown_addresses=fa.events.unknown_addresses, lost=sum(t.loss.lost for t in traces),
                clock_error_ns=fa.error_bound_ns,
                wait_ns_median_on_delayed_rank=float(np.median(dur[on_delayed])) if on_delayed.any() else None,
                wait_ns_median_other=float(np.median(dur[~on_delayed])) if (~on_delayed).any() else None)


def run_traced(traced: dict, prob: Problem, out: Path, delay_rank: int, delay_ns: int, step_barrier,
               distributed: bool, ctas: int) -> list[dict]:
    """Each traced variant with no delay and with delay_ns: checked, saved per rank, read back (rank 0) and
    analysed across ranks."""
    import torch

    from host_decode.load.capture import load_capture

    rows = []
    for (wk, mode), (trace, session, fn) in traced.items():
        for d in (0, delay_ns):
            prob.poison()
            step_barrier()
            session.reset()
            fn(delay_rank, d)
            torch.cuda.synchronize()
            err = prob.check(f"traced {wk} ({mode}) d={d}")
            step = f"distributed_{wk}_{mode.replace(' ', '_')}_delay{d // 1000}us"  # a folder: the step's ranks
            name = f"{step}/rank{prob.rank_base}.npy"
            example = {"wait": wk, "mode": mode, "delay_ns": d, "delay_rank": delay_rank, "epoch": prob.epoch,
                       "chunks": prob.chunks, "row_blocks": prob.row_blocks, "ctas_per_rank": ctas,
                       "simulated_ranks": 0 if distributed else prob.ranks_here}
            path = str(trace.save(session, out / "captures" / name, example=example))
            paths = [path]
            if distributed:
                import torch.distributed as dist

                paths = [None] * dist.get_world_size()
                dist.all_gather_object(paths, path)
            row = dict(example="distributed", wait=wk, mode=mode, delay_ns=d, rel_err=err, captures=paths)
            if not distributed or prob.rank_base == 0:
                traces = [load_capture(p) for p in paths]
                row["traced"] = traced_story(traces, ctas, (prob.epoch - 1) * prob.chunks, delay_rank if d else -1,
                                             simulated=not distributed)
            rows.append(row)
    return rows


def run(out: Path, *, world_size: int, ranks: int, m=4096, k=1024, n=1024, chunks=4, delay_rank=1, delay_us=20.0,
        launches=100, seed=0, trace=False, records_per_lane=1024, ctas_per_rank=None):
    import ag_gemm as ag
    import torch
    from measure import time_alternating

    distributed = world_size > 1
    if distributed:
        import torch.distributed as dist

        rank = int(os.environ["RANK"])
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
        if dist.get_world_size() != world_size:
            raise ValueError(f"--world-size {world_size} but torch.distributed has {dist.get_world_size()} ranks")
        prob = Problem(world_size, rank, 1, m, k, n, chunks, seed)
        prob.symmetric_distributed(dist.group.WORLD)
        ctas = ctas_per_rank or torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        tick = torch.zeros(1, device="cuda")

        def step_barrier():  # on the kernel's stream: the next launch starts after every rank's previous one
            prob.queue.zero_()
            dist.all_reduce(tick)
    else:
        prob = Problem(ranks, 0, ranks, m, k, n, chunks, seed)
        prob.symmetric_single_gpu()
        ctas = ctas_per_rank or torch.cuda.get_device_properties(0).multi_processor_count // ranks
        step_barrier = prob.queue.zero_
    delay_ns = int(delay_us * 1e3)
    kernels = {(wk, log): compile_kernel(ag, prob, wk, log, ctas) for wk in ag.WAIT_KINDS for log in (False, True)}
    traced = compile_traced(ag, prob, ctas, records_per_lane) if trace else {}
    rows, variants = [], {}
    for (wk, log), fn in kernels.items():
        for d in (0, delay_ns):
            prob.poison()
            step_barrier()
            fn(delay_rank, d)
            torch.cuda.synchronize()
            row = dict(example="distributed", wait=wk, log=log, delay_ns=d, rel_err=prob.check(f"{wk} log={log} d={d}"))
            if log:
                logs, tasks = prob.log.cpu().numpy(), prob.tasks_np
                if distributed:
                    gathered = [None] * world_size
                    dist.all_gather_object(gathered, (logs, tasks))
                    logs, tasks = np.concatenate([g[0] for g in gathered]), np.concatenate([g[1] for g in gathered])
                row["truth"] = ground_truth(logs, tasks, prob.row_blocks, chunks, prob.epoch,
                                            delay_rank if d else -1, one_clock=not distributed)
            rows.append(row)
            name = f"{wk}{' log' if log else ''} delay {d // 1000}us"
            variants[name] = (step_barrier, lambda fn=fn, d=d: fn(delay_rank, d))
    rows += run_traced(traced, prob, out, delay_rank, delay_ns, step_barrier, distributed, ctas)
    for (wk, mode), (_, session, fn) in traced.items():  # timed with no delay beside the plain kernel
        def setup(session=session):
            step_barrier()
            session.reset()

        variants[f"{wk} {mode} delay 0us"] = (setup, lambda fn=fn: fn(delay_rank, 0))
    times = time_alternating(variants, launches)
    if distributed:  # a step takes as long as its slowest rank
        local = {name: torch.tensor(t, device="cuda") for name, t in times.items()}
        for t in local.values():
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = {name: t.cpu().numpy() for name, t in local.items()}
    base = float(np.median(times["ld delay 0us"]))
    summary = dict(
        mode="torch.distributed" if distributed else f"{ranks} ranks simulated on one GPU", world=prob.world,
        problem=dict(m=m, k=k, n=n, chunks=chunks, ctas_per_rank=ctas, tasks_per_rank=int(prob.tasks_np.shape[1]),
                     delay_rank=delay_rank),
        timing={name: {"median_ms": float(np.median(t)), "vs_ld_delay0": float(np.median(t)) / base,
                       **({"vs_plain": float(np.median(t)) / float(np.median(times[f"{name.split()[0]} delay 0us"]))}
                          if name.split()[1] in ("traced", "flags") else {})}
                for name, t in times.items()},
        tflops_all_ranks=2.0 * m * k * n * prob.world / (base * 1e-3) / 1e12,
        runs=rows,
    )
    if distributed:
        dist.barrier()
        if dist.get_rank() != 0:
            dist.destroy_process_group()
            return None
        dist.destroy_process_group()
    out.mkdir(parents=True, exist_ok=True)
    (out / "distributed.json").write_text(json.dumps(summary, indent=1, default=float))
    return summary


def table(summary: dict) -> str:
    lines = [f"distributed ({summary['mode']}, world {summary['world']}) {summary['problem']}",
             f"{'variant':<30}{'median ms':>11}{'vs ld delay0':>14}{'vs plain':>10}"]
    for name, t in summary["timing"].items():
        vs_plain = f"{t['vs_plain']:>10.4f}" if "vs_plain" in t else ""
        lines.append(f"{name:<30}{t['median_ms']:>11.4f}{t['vs_ld_delay0']:>14.3f}{vs_plain}")
    for r in summary["runs"]:
        if "truth" in r:
            g = r["truth"]
            lines.append(f"truth wait={r['wait']} delay={r['delay_ns']}ns: waits {g['waits']} (blocked "
                         f"{g['waits_blocked']}), median wait on the delayed rank {g['wait_ns_median_on_delayed_rank']}"
                         f" ns vs others {g['wait_ns_median_other']} ns, match {g['match']}, path {g['path_ns']} ns")
        if "traced" in r:
            g = r["traced"]
            lines.append(f"traced wait={r['wait']} ({r['mode']}) delay={r['delay_ns']}ns: {g['events']} flag events "
                         f"(lost {g['lost']}, malformed {g['problems'] or 'none'}), waits {g['waits']} (blocked "
                         f"{g['waits_blocked']}), median wait on the "
                         f"delayed rank {g['wait_ns_median_on_delayed_rank']} ns vs others {g['wait_ns_median_other']}"
                         f" ns, match {g['match']} (clock error {g['clock_error_ns']} ns), path {g['path_ns']} ns")
    lines.append(f"TFLOP/s, all ranks (ld, no delay): {summary['tflops_all_ranks']:.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("distributed_out"))
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)),
                    help="processes (GPUs); 1: every rank simulated on one GPU (default without torchrun)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks simulated with --world-size 1")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--chunks", type=int, default=4, help="pushes (flag increments) per row block and destination")
    ap.add_argument("--delay-rank", type=int, default=1)
    ap.add_argument("--delay-us", type=float, default=20.0)
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="inputs: torch.randn with this seed")
    ap.add_argument("--trace", action="store_true", help="also run the kernel traced (flag records, no kernel edit)")
    ap.add_argument("--records-per-lane", type=int, default=1024, help="--trace: slots per warp lane")
    ap.add_argument("--ctas-per-rank", type=int, default=None, help="CTAs per rank (default: the SMs, shared)")
    a = ap.parse_args(argv)
    summary = run(a.out, world_size=a.world_size, ranks=a.ranks, m=a.m, k=a.k, n=a.n, chunks=a.chunks,
                  delay_rank=a.delay_rank, delay_us=a.delay_us, launches=a.launches, seed=a.seed, trace=a.trace,
                  records_per_lane=a.records_per_lane, ctas_per_rank=a.ctas_per_rank)
    if summary is not None:
        for r in summary["runs"]:
            if "traced" in r:
                print(f"critical path from the records (wait={r['wait']}, {r['mode']}, delay={r['delay_ns']} ns), "
                      "last links:")
                print("\n".join("   " + line for line in r["traced"]["path"]))
        print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
