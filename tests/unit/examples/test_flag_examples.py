"""CPU tests of the flag examples: examples/megakernel_deps (a persistent megakernel whose layer-2 tasks wait
on per-row-block counters) and examples/distributed (all-gather + GEMM through symmetric-memory flags).

* both compile for sm_90a without a GPU, for both library waits ("ld", "cas");
* their PTX holds exactly the flag operations the examples promise: megakernel_deps one
  `red.release.gpu` signal and one gpu-scope wait (relaxed `ld` + `fence.acq_rel.gpu`, or an acquire
  `atom.cas`); distributed one `red.release.sys` signal and one sys-scope wait; neither any `multimem`
  instruction (NVLink multicast stays off, docs/flags.md);
* no ikp_cute code: without the ground-truth log the only timer reads are the skew knob's and there is no
  64-bit store; the flag calls go through `cutlass.utils.distributed`'s module attributes at trace time,
  where a tracer substitutes them (test_flag_calls_are_hookable);
* the hosts' task graphs are deadlock-free by construction and their ground-truth logs become flag tables
  whose matching and critical path are worked out by hand here.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tests.support.flag_examples import DEPS, DIST, deps_run, dist_run  # noqa: E402
from tests.support.flag_examples import compile_deps as _compile_deps  # noqa: E402
from tests.support.flag_examples import compile_dist as _compile_dist  # noqa: E402


def count(pattern: str, ptx: str) -> int:
    return len(re.findall(pattern, ptx))


# --- compile (sm_90a, no GPU) ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deps_ptx():
    pytest.importorskip("cutlass")
    return {(wk, log): _compile_deps(wk, log) for wk, log in (("ld", False), ("cas", False), ("ld", True))}


@pytest.fixture(scope="module")
def dist_ptx():
    pytest.importorskip("cutlass")
    return {(wk, log): _compile_dist(wk, log) for wk, log in (("ld", False), ("cas", False), ("ld", True))}


def test_megakernel_deps_flag_operations(deps_ptx):
    for (wk, _), ptx in deps_ptx.items():
        assert ".target sm_90a" in ptx
        assert count(r"red\.release\.gpu\.global\.add\.s32", ptx) == 1  # the layer-1 signal
        assert count(r"atom\.global\.add\.u32", ptx) == 2  # the task queue: first fetch and the loop's
        assert ".sys" not in ptx and "multimem" not in ptx
        if wk == "ld":
            assert count(r"ld\.relaxed\.gpu\.global\.b32", ptx) == 1 and count(r"fence\.acq_rel\.gpu", ptx) == 1
            assert "cas" not in ptx
        else:
            assert count(r"atom\.global\.acquire\.cas\.b32", ptx) == 1 and "ld.relaxed" not in ptx
    assert count(r"fma\.rn\.f32", deps_ptx[("ld", False)]) == 2 * 32 * 16  # two tile GEMMs, 32 k x 16 outputs


def test_megakernel_deps_has_no_profiler_code(deps_ptx):
    source = (DEPS / "megakernel_deps.py").read_text() + (DEPS / "tile_gemm.py").read_text()
    assert "ikp_cute" not in source.replace("no ikp_cute call", "")
    plain, logged = deps_ptx[("ld", False)], deps_ptx[("ld", True)]
    assert count(r"%globaltimer", plain) == 2  # the skew knob's spin: its start and its loop
    assert count(r"st\.global\.b64", plain) == 0
    assert count(r"%globaltimer", logged) == 2 + 5 and count(r"st\.global\.b64", logged) == 6  # the log's fields


def test_distributed_flag_operations_are_system_scope_without_multimem(dist_ptx):
    for (wk, _), ptx in dist_ptx.items():
        assert ".target sm_90a" in ptx and "multimem" not in ptx
        assert count(r"red\.release\.sys\.global\.add\.s32", ptx) == 1  # the push's signal to its destination
        assert count(r"\bred\.", ptx) == 1
        if wk == "ld":
            assert count(r"ld\.relaxed\.sys\.global\.b32", ptx) == 1 and count(r"fence\.acq_rel\.sys", ptx) == 1
        else:
            assert count(r"atom\.global\.sys\.acquire\.cas\.b32", ptx) == 1
        # every scoped operation is system scope except the rank's own queue counter
        scoped = re.findall(r"\b(?:red|atom|ld|st|fence)\.[\w.]*\b(?:gpu|sys|cta|cluster)\b[\w.]*", ptx)
        assert scoped and all(".sys" in op for op in scoped), scoped
    assert count(r"st\.global\.b64", dist_ptx[("ld", False)]) == 0


def test_flag_calls_are_hookable(monkeypatch):
    """A tracer needs no kernel edit: the examples reach the library's flag functions through
    `cutlass.utils.distributed`'s attributes when they are traced, so a substitute installed there for the
    duration of the compile sees every call site."""
    pytest.importorskip("cutlass")
    import cutlass.utils.distributed as distributed

    calls = []
    for name in ("red_add1", "spin_lock_ld_lt_relaxed_wait", "spin_lock_atom_cas_acquire_wait"):
        original = getattr(distributed, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls.append((_name, kwargs.get("scope"), kwargs.get("order")))
            return _original(*args, **kwargs)

        monkeypatch.setattr(distributed, name, spy)
    _compile_deps("ld", False)
    _compile_deps("cas", False)
    _compile_dist("ld", False)
    assert calls == [("red_add1", "gpu", "release"), ("spin_lock_ld_lt_relaxed_wait", "gpu", None),
                     ("red_add1", "gpu", "release"), ("spin_lock_atom_cas_acquire_wait", "gpu", None),
                     ("red_add1", "sys", "release"), ("spin_lock_ld_lt_relaxed_wait", "sys", None)]


# --- megakernel_deps host side -----------------------------------------------------------------------------------


def test_task_tables_and_their_order():
    L1, L2 = deps_run.LAYER1, deps_run.LAYER2
    t = deps_run.task_table(4, 3, 2, "interleaved", lag=2)
    assert t.shape == (4 * 3 + 4 * 2, 4)
    # row blocks 0, 1 of layer 1, then layer 1 of row block 2 and layer 2 of row block 0, ...
    assert t[:9, :2].tolist() == [[L1, 0]] * 3 + [[L1, 1]] * 3 + [[L1, 2]] * 3
    assert t[9:11, :2].tolist() == [[L2, 0]] * 2
    deps_run.check_order(t)
    deps_run.check_order(deps_run.task_table(4, 3, 2, "layered"))
    with pytest.raises(ValueError, match="row block 0 comes before"):
        deps_run.check_order(t[::-1].copy())
    with pytest.raises(ValueError, match="order="):
        deps_run.task_table(4, 3, 2, "random")
    skew = deps_run.middle_task(t)
    assert t[skew, :3].tolist() == [L1, 1, 0]
    assert deps_run.dependents(t, skew).tolist() == [14, 15]  # layer 2 of row block 1, after layer 1 of row block 3
    with pytest.raises(ValueError, match="layer-2 task"):
        deps_run.dependents(t, 9)


def _deps_log():
    """Two row blocks, 2 x 2 tiles per layer, layered; 2 CTAs; task 1 (layer 1, row block 0) delayed by 800."""
    tasks = deps_run.task_table(2, 2, 2, "layered")
    log = np.zeros((8, 6), np.int64)
    #            cta start wait_b wait_e signal  end
    log[0] = (0, 100, 0, 0, 200, 210)  # L1 (0, 0)
    log[2] = (0, 220, 0, 0, 320, 330)  # L1 (1, 0)
    log[4] = (0, 340, 345, 1120, 0, 1300)  # L2 (0, 0): waits for task 1 (blocked)
    log[6] = (0, 1310, 1312, 1315, 0, 1500)  # L2 (1, 0): row block 1 complete at 1220 already
    log[1] = (1, 100, 0, 0, 1100, 1110)  # L1 (0, 1): the delayed task
    log[3] = (1, 1120, 0, 0, 1220, 1230)  # L1 (1, 1)
    log[5] = (1, 1240, 1242, 1250, 0, 1350)  # L2 (0, 1): finds row block 0 complete (1100)
    log[7] = (1, 1360, 1362, 1365, 0, 1450)  # L2 (1, 1)
    return tasks, log


def test_megakernel_deps_ground_truth_by_hand():
    tasks, log = _deps_log()
    g = deps_run.ground_truth(log, tasks, row_tiles=2, skew_task=1, skew_ns=800)
    assert g["skewed_task_ns"] == 1000 and g["dependents"] == 2
    assert g["dependents_released_by_skewed_task"] == 2  # the 2nd increment of ready[0] is task 1's, at 1100
    assert g["match"]["matched"] == 4 and g["match"]["derived_value"] == 4
    assert g["waits_blocked"] == 1  # only task 4 began its wait before its signal
    # from CTA 0's end (1500) back: its work after its wait (1120..1500), released at 1100 by CTA 1, which
    # worked from its start (100)
    assert g["path_has_skewed_task"] and g["path_ns"] == 1400
    assert len(g["path"]) == 3 and "released by rank 0 block 1" in g["path"][1]
    early = log.copy()
    early[4, 3] = 1000  # task 4 "left its wait" 100 ns before the signal it needed
    with pytest.raises(AssertionError, match="1 layer-2 tasks left their wait"):
        deps_run.ground_truth(early, tasks, 2, 1, 800)
    never = log.copy()
    never[7] = 0
    with pytest.raises(AssertionError, match="1 tasks never ran"):
        deps_run.ground_truth(never, tasks, 2, 1, 800)


# --- distributed host side ---------------------------------------------------------------------------------------


def test_distributed_task_tables():
    P, G = dist_run.PUSH, dist_run.GEMM
    t = dist_run.task_table(rank=1, world=2, row_blocks=2, tiles_n=1, chunks=2)
    # pushes: row block 0 to rank 0 (chunks 0, 1), then to itself; row block 1 likewise; then its own rows
    # (tiles 2, 3), then rank 0's (tiles 0, 1)
    assert t.tolist() == [[P, 0, 0, 0], [P, 0, 0, 1], [P, 0, 1, 0], [P, 0, 1, 1], [P, 1, 0, 0], [P, 1, 0, 1],
                          [P, 1, 1, 0], [P, 1, 1, 1], [G, 2, 0, 0], [G, 3, 0, 0], [G, 0, 0, 0], [G, 1, 0, 0]]
    dist_run.check_order(t)
    with pytest.raises(ValueError, match="every PUSH must come before every GEMM"):
        dist_run.check_order(t[::-1].copy())


def _dist_logs():
    """world 2, one row block per shard, one tile column, 2 chunks; rank 1 delayed by 1000; CTAs 0, 1 are rank
    0's, CTAs 2, 3 rank 1's (one GPU, one clock)."""
    tasks = np.stack([dist_run.task_table(r, 2, 1, 1, 2) for r in range(2)])
    logs = np.zeros((2, 6, 6), np.int64)
    #               cta start wait_b wait_e signal end
    logs[0, 0] = (0, 100, 0, 0, 150, 160)  # push to rank 1, chunk 0
    logs[0, 1] = (1, 100, 0, 0, 150, 160)  # push to rank 1, chunk 1: same ns as chunk 0
    logs[0, 2] = (0, 170, 0, 0, 200, 210)  # push to itself
    logs[0, 3] = (1, 170, 0, 0, 200, 210)
    logs[0, 4] = (0, 220, 0, 0, 0, 400)  # its own rows: no wait
    logs[0, 5] = (1, 220, 225, 1260, 0, 1500)  # rank 1's rows: waits for rank 1's second push (1250)
    logs[1, 0] = (2, 1100, 0, 0, 1150, 1160)  # push to rank 0, chunk 0
    logs[1, 1] = (3, 1100, 0, 0, 1250, 1260)  # push to rank 0, chunk 1
    logs[1, 2] = (2, 1170, 0, 0, 1200, 1210)
    logs[1, 3] = (3, 1270, 0, 0, 1300, 1310)
    logs[1, 4] = (2, 1220, 0, 0, 0, 1400)
    logs[1, 5] = (3, 1320, 1322, 1330, 0, 1450)  # rank 0's rows arrived at 150
    return tasks, logs


def test_distributed_ground_truth_by_hand():
    tasks, logs = _dist_logs()
    table = dist_run.flag_events(logs, tasks, row_blocks=1, chunks=2, epoch=1)
    assert len(table) == 8 + 2 and table.flag_name(0) == "flags@rank1[0]"  # rank 0's push lands in rank 1's flags[0]
    g = dist_run.ground_truth(logs, tasks, 1, 2, epoch=1, delay_rank=1, one_clock=True)
    assert g["waits"] == 2 and g["match"]["matched"] == 2 and g["waits_blocked"] == 1
    assert g["wait_ns_median_on_delayed_rank"] == 1035 and g["wait_ns_median_other"] == 8
    # from rank 0's CTA 1 (ends 1500): work 1260..1500, released at 1250 by rank 1's CTA 3, which worked from 1100
    assert g["path_ns"] == 400 and "released by rank 1 block 3" in g["path"][1]
    # the same flags in the next launch: the counts start at (epoch - 1) * chunks
    g2 = dist_run.ground_truth(logs, tasks, 1, 2, epoch=2, delay_rank=1, one_clock=True)
    assert g2["match"] == g["match"]
    early = logs.copy()
    early[0, 5, 3] = 1200
    with pytest.raises(AssertionError, match="1 GEMM tiles left their wait"):
        dist_run.ground_truth(early, tasks, 1, 2, 1, 1, one_clock=True)
    # across GPUs the check is off and a signal up to 5 us after the wait's end still matches
    assert dist_run.ground_truth(early, tasks, 1, 2, 1, 1, one_clock=False)["match"]["late_within_error"] == 1


def test_no_multicast_environment():
    env = {"NCCL_NVLS_ENABLE": "1"}
    dist_run.guard_environment(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    text = (DIST / "run.py").read_text()
    assert text.index("guard_environment()") < text.index("import numpy")  # set before anything loads NCCL
    assert "cuMulticastCreate" not in (DIST / "ag_gemm.py").read_text() + text


# --- the runners' own compile path (CPU tensors in place of the GPU's) ------------------------------------------


def test_runners_compile_their_kernels_on_cpu_tensors():
    """run.py's compile_kernel (argument order, runtime scalars, compile-time options) on CPU tensors of the
    runners' real shapes: it compiles; only calling the result needs a GPU."""
    pytest.importorskip("cutlass")
    torch = pytest.importorskip("torch")
    import types

    import ag_gemm as ag
    import megakernel_deps as mk

    m, k, n = 256, 128, 128
    tasks = deps_run.task_table(m // 64, n // 64, n // 64)
    z = dict(dtype=torch.float32)
    deps = types.SimpleNamespace(
        tasks=torch.from_numpy(tasks), queue=torch.zeros(1, dtype=torch.int32),
        ready=torch.zeros(m // 64, dtype=torch.int32), X=torch.zeros(m, k, **z), W1=torch.zeros(k, n, **z),
        Y=torch.zeros(m, n, **z), W2=torch.zeros(n, n, **z), Z=torch.zeros(m, n, **z),
        log=torch.zeros(tasks.shape[0], 6, dtype=torch.int64), no_log=torch.zeros(1, 6, dtype=torch.int64))
    assert callable(deps_run.compile_kernel(mk, deps, "cas", True, 132))
    world, ms = 2, m // 2
    dtasks = np.stack([dist_run.task_table(r, world, ms // 64, n // 64, 2) for r in range(world)])
    dist = types.SimpleNamespace(
        tasks=torch.from_numpy(dtasks), queue=torch.zeros(world, dtype=torch.int32), shards=torch.zeros(m, k, **z),
        B=torch.zeros(k, world * n, **z), C=torch.zeros(m, world * n, **z),
        a_ptrs=torch.zeros(world, dtype=torch.int64), flag_ptrs=torch.zeros(world, dtype=torch.int64),
        log=torch.zeros(world, dtasks.shape[1], 6, dtype=torch.int64), no_log=torch.zeros(1, 1, 6, dtype=torch.int64),
        rank_base=0, world=world, ranks_here=world, chunks=2, epoch=0)
    assert callable(dist_run.compile_kernel(ag, dist, "ld", False, 66))
