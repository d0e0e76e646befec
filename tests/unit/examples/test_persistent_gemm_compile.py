"""CPU tests (sm_90a, no GPU) of examples/persistent_gemm: the persistent warp-specialized GEMM and the TMA
latency probe, untraced and under `trace_pipelines` at each level.

* the GEMM compiles for both cluster shapes: four wgmma m64n256k16 per k-tile, TMA loads of A and B (the B
  load multicast to the cluster for 2x1, with cluster-scoped empty-barrier arrives), eight mbarriers whose
  empty side counts one arrive per consumer warp of every CTA writing the stage; it has no ikp_cute call;
* traced == untraced + records only: every opcode of the kernel outside the tracer's own inline-PTX blocks
  and integer glue occurs equally often (wgmma, cp.async.bulk.tensor, mbarrier, barriers, stores), every
  pipeline call site has its markers, every lane stores its records in time order (tests/support/record_order.py),
  and compiling after the context gives the untouched PTX again;
* the comparison catches a changed kernel (it can fail);
* no register spills (local memory) untraced or traced, when nvdisasm is there;
* the TMA probe compiles for each of its configurations; traced, its observer's own spin is untouched.
GPU counterparts: examples/persistent_gemm/run.py (results against torch), gpu/pipelines_cost.py (cost).
"""

from __future__ import annotations

import collections
import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")

from tests.support.pipelines_ptx import check_call_sites, markers  # noqa: E402
from tests.support.record_order import checking_record_order  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "persistent_gemm"
sys.path.insert(0, str(EXAMPLE))
BAKED = 0x7F0012340000
LEVELS = ("waits", "signals", "all")
M, N, K = 1000, 1500, 1024  # partial tiles in M and N: the predicated epilogue is compiled too

# Integer glue, control flow and register moves the tracer's check may add outside its inline-PTX blocks
# (compare, select, branch, %tid.x read); everything else is the kernel's and must be unchanged.
GLUE = re.compile(r"^(mov|cvt|cvta|shl|shr|or|and|xor|add|sub|mul|mad|setp|selp|bra|neg|not|min|max|ld\.param)\b")


def _spec(num_blocks=132, warps=12, records_per_lane=256):
    from ikp_cute import ProfileSpec

    return ProfileSpec(num_groups=warps, num_blocks=num_blocks, write_stride=warps * num_blocks,
                       records_per_lane=records_per_lane, warps_per_group=1)


def without_tracer_blocks(ptx: str) -> str:
    """The PTX with every inline-asm block of the tracer removed (blocks carrying an `/* ikp ... */` label)."""
    return re.sub(r"// begin inline asm\n(?:(?!// end inline asm).)*?/\* ikp .*?// end inline asm\n", "", ptx,
                  flags=re.S)


def kernel_opcodes(ptx: str) -> collections.Counter:
    """Opcodes (predicates dropped) of the instructions outside the tracer's blocks, glue excluded."""
    counts = collections.Counter()
    for line in without_tracer_blocks(ptx).splitlines():
        line = line.split("//")[0].strip().rstrip(";")
        if not line or line.startswith((".", "{", "}", ")", "$")) or line.endswith(":"):
            continue
        if line.startswith("@"):
            line = line.split(None, 1)[1]
        op = line.split()[0]
        if not GLUE.match(op):
            counts[op] += 1
    return counts


def kernel_difference(plain: str, traced: str) -> dict:
    a, b = kernel_opcodes(plain), kernel_opcodes(traced)
    return {op: (a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op]}


def _compile_gemm(cluster_m, trace=None, poll_before_wait=False):
    import host

    return host.compile_gemm(host.fake_operands(M, N, K), cluster_m=cluster_m, trace=trace,
                             poll_before_wait=poll_before_wait)


@pytest.fixture(scope="module", params=[1, 2], ids=["1x1", "2x1"])
def gemm(request):
    from ikp_cute.pipelines import trace_pipelines

    cluster_m = request.param
    plain = _compile_gemm(cluster_m)
    traced, traces, order = {}, {}, {}
    for level in LEVELS:
        traces[level] = trace_pipelines(_spec(), level=level, address=BAKED)
        with checking_record_order() as violations:
            traced[level] = _compile_gemm(cluster_m, traces[level])
        order[level] = list(violations)
    return {"cluster_m": cluster_m, "plain": plain, "traced": traced, "traces": traces, "order": order,
            "after": _compile_gemm(cluster_m)}


def _count(ptx: str, pattern: str) -> int:
    return len(re.findall(pattern, ptx))


def test_gemm_compiles_for_sm90a_with_its_cluster_protocol(gemm):
    ptx, cluster_m = gemm["plain"].__ptx__, gemm["cluster_m"]
    assert ".target sm_90a" in ptx
    assert _count(ptx, r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16") == 4  # one k-tile
    multicast = _count(ptx, r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx"
                            r"::bytes\.multicast::cluster")
    local = _count(ptx, r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global")
    assert (local, multicast) == ((2, 0) if cluster_m == 1 else (1, 1))  # B shared by multicast in 2x1
    inits = re.findall(r"mov\.b32\s+%r\d+, (\d+);\s*\n\s*mbarrier\.init\.shared\.b64", ptx)
    assert _count(ptx, r"mbarrier\.init\.shared\.b64") == 8
    assert sorted(set(map(int, inits))) == [1, 8 * cluster_m]  # full: the producer; empty: consumer warps x CTAs
    remote = _count(ptx, r"mbarrier\.arrive\.shared::cluster\.b64")
    assert (remote > 0) == (cluster_m == 2) and ("mapa" in ptx) == (cluster_m == 2)
    assert "ikp" not in ptx and "%globaltimer" not in ptx


def test_gemm_source_has_no_ikp_cute_call():
    import ast

    tree = ast.parse((EXAMPLE / "gemm.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not any("ikp" in str(name).lower() for name in imported | names)
    assert {"cutlass", "cute", "pipeline"} <= names  # the walk sees the kernel's own names


@pytest.mark.parametrize("level", LEVELS)
def test_traced_gemm_is_the_untraced_kernel_plus_records(gemm, level):
    from ikp_cute.pipelines import LEVEL_OPS

    plain, traced = gemm["plain"].__ptx__, gemm["traced"][level].__ptx__
    assert kernel_difference(plain, traced) == {}
    check_call_sites(traced, gemm["traces"][level].metadata(), LEVEL_OPS[level])
    if level != "all":  # at "all", a timed poll's region and the wait it gates are both in the IR
        assert gemm["order"][level] == []
    assert gemm["after"].__ptx__ == plain  # outside the context nothing is patched


def test_the_comparison_catches_a_changed_kernel(gemm):
    plain, traced = gemm["plain"].__ptx__, gemm["traced"]["waits"].__ptx__
    changed = traced.replace("wgmma.commit_group.sync.aligned;", "", 1)
    assert "wgmma.commit_group.sync.aligned" in kernel_difference(plain, changed)
    extra_store = re.search(r"\n(\s*st\.global\.b32[^\n]*\n)", traced).group(1)
    assert "st.global.b32" in kernel_difference(plain, traced.replace(extra_store, extra_store * 2, 1))
    assert kernel_difference(plain, without_tracer_blocks(traced)) == {}


def test_the_ring_is_found_with_no_edit(gemm):
    meta = gemm["traces"]["signals"].metadata()
    (ring,) = meta["pipelines"]
    assert ring["name"] == "ring" and ring["class"] == "PipelineTmaAsync" and ring["num_stages"] == 4
    assert ring["site"].startswith("gemm.py:") and ring["tx_bytes"] == (128 + 256) * 64 * 2
    assert ring["consumer_arrivals"] == 8 * gemm["cluster_m"] and ring["producer_arrivals"] == 1
    assert set(ring["ids"]) == {"acquire", "commit", "wait", "release"}
    if gemm["cluster_m"] == 2:  # the host matches waits across the CTA pair with no option
        assert ring["cluster"] == [2, 1, 1] and "scope" not in ring
    else:
        assert ring.get("scope") == "cta"
    waits = gemm["traces"]["waits"].metadata()["pipelines"][0]
    assert set(waits["ids"]) == {"acquire", "wait"}


def test_no_register_spills_untraced_or_traced(gemm):
    from ikp_cute.testing import sass

    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm not installed")
    for name, compiled in [("plain", gemm["plain"])] + [(lv, c) for lv, c in gemm["traced"].items()]:
        local = [ins for ins in sass.disassemble(compiled.__cubin__) if sass.opcode(ins).startswith(("LDL", "STL"))]
        assert local == [], (gemm["cluster_m"], name, local[:3])


def test_poll_before_wait_gates_the_wait_on_its_poll():
    from ikp_cute.pipelines import trace_pipelines

    trace = trace_pipelines(_spec(), level="waits", address=BAKED)
    polled = _compile_gemm(1, trace, poll_before_wait=True).__ptx__
    kinds = {kind for (label, _, kind) in markers(polled) if label == "wait_ring"}
    assert "gate" in kinds  # polls="begin": the poll reads the begin time, the wait runs only if it failed
    plain = _compile_gemm(1).__ptx__
    default_kinds = {kind for (label, _, kind) in markers(_compile_gemm(1, trace_pipelines(
        _spec(), level="waits", address=BAKED)).__ptx__) if label == "wait_ring"}
    assert "gate" not in default_kinds
    assert _count(plain, r"mbarrier\.try_wait") < _count(_compile_gemm(1, poll_before_wait=True).__ptx__,
                                                         r"mbarrier\.try_wait")


# --- the TMA latency probe ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probe():
    import tma_probe

    operands = tma_probe.fake_operands(16, 64)
    return tma_probe, operands


@pytest.mark.parametrize("config", [(4096, 1), (65536, 1), (32768, 4)], ids=["4K_x1", "64K_x1", "32K_x4"])
def test_tma_probe_compiles_with_its_ground_truth(probe, config):
    tma_probe, operands = probe
    ptx = tma_probe.compile_probe(operands, *config, 64).__ptx__
    assert ".target sm_90a" in ptx
    assert _count(ptx, r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global") == 1
    assert _count(ptx, r"mov\.u64\s+%rd\d+, %globaltimer;") == 2  # ISSUE (producer) and READY (observer)
    issue = ptx.index("%globaltimer")
    assert ptx.index("mbarrier.arrive.expect_tx") < issue < ptx.index("cp.async.bulk.tensor")
    assert _count(ptx, r"mbarrier\.init\.shared\.b64") == 2 * config[1]


def test_tma_probe_refuses_configs_that_do_not_fit(probe):
    tma_probe, _ = probe
    with pytest.raises(ValueError, match="192 KiB"):
        tma_probe.TmaProbe(65536, 4, 8)
    with pytest.raises(ValueError, match="tile_bytes"):
        tma_probe.TmaProbe(1000, 1, 8)


@pytest.mark.parametrize("level", ["waits", "signals"])
def test_traced_tma_probe_keeps_the_ring_apart_from_the_observer(probe, level):
    from ikp_cute.pipelines import LEVEL_OPS, trace_pipelines

    tma_probe, operands = probe
    plain = tma_probe.compile_probe(operands, 16384, 1, 64).__ptx__
    trace = trace_pipelines(_spec(16, 3, 288), level=level, address=BAKED, passing_waits=(level == "signals"))
    with checking_record_order() as order:
        traced = tma_probe.compile_probe(operands, 16384, 1, 64, trace=trace).__ptx__
    assert order == []
    assert kernel_difference(plain, traced) == {}
    meta = trace.metadata()
    check_call_sites(traced, meta, LEVEL_OPS[level])
    (ring,) = [p for p in meta["pipelines"] if p["class"] != "mbarrier"]
    assert ring["consumer_arrivals"] == 2 and ring["tx_bytes"] == 16384
    # the observer's try_wait loop and its arrive are on pointers it formed itself: not the ring's calls; the
    # IR pass traces them as a barrier of their own (nothing routes around the tracer), never as the ring's
    assert all(site.startswith("tma_probe.py:") for sites in ring["call_sites"].values() for site in sites)
    source = (EXAMPLE / "tma_probe.py").read_text().splitlines()
    observer_lines = {f"tma_probe.py:{i}" for i, line in enumerate(source, 1)
                      if "mbarrier_try_wait(barriers" in line or "mbarrier_arrive(barriers" in line}
    sites = {site for sites in ring["call_sites"].values() for site in sites}
    assert observer_lines and not sites & observer_lines
    for own in (p for p in meta["pipelines"] if p["class"] == "mbarrier"):
        assert {site for sites in own["call_sites"].values() for site in sites} <= observer_lines


# --- the GPU cost harness's variants (gpu/pipelines_cost.py) --------------------------------------------


def test_cost_harness_variants_are_valid_trace_options():
    """Every variant gpu/pipelines_cost.py builds is accepted by trace_pipelines (a bad option would only
    surface on the GPU), names are unique, and the ablation includes the rows the analysis relies on."""
    from ikp_cute.pipelines import DEFAULT_BLOCKED_NS, trace_pipelines
    from ikp_cute.testing.pipelines_cost_variants import ABLATION, DEFAULT, THRESHOLDS

    variants = DEFAULT + THRESHOLDS + ABLATION
    assert len({name for name, _, _ in variants}) == len(variants)
    names = {n for n, _, _ in variants}
    assert {"waits", "signals", "acquire_only", "wait_only", "never_stored", "acquire_256ns"} <= names
    options_of = {}
    for name, level, options in variants:
        options_of[name] = trace_pipelines(_spec(), level=level, address=BAKED, **options).options["blocked_ns"]
    # the threshold rows differ from the default in exactly the op they name
    assert options_of["waits"] == DEFAULT_BLOCKED_NS
    for name, op in (("acquire_256ns", "acquire"), ("bar_sync_1024ns", "bar_sync")):
        assert {o for o, ns in options_of[name].items() if ns != DEFAULT_BLOCKED_NS[o]} == {op}
    never = dict((n, o) for n, _, o in variants)["never_stored"]
    with pytest.raises(ValueError):
        trace_pipelines(_spec(), address=BAKED, blocked_ns=never["blocked_ns"] + 1)  # the largest it takes


def test_tma_probe_compare_matches_loads_to_their_ground_truth(probe):
    """compare() on a hand-built capture of 2 blocks x 4 loads (1 stage): every load is matched (k-th commit
    -> k-th consumer wait of the stage), and the differences are the ones built in: the traced issue (the
    commit) one timer step before ISSUE, the traced ready (the wait's end) one step after READY."""
    import numpy as np

    from host_decode.core.decoder import decode
    from tests.support.buffers import INST, B, BufferBuilder, E

    tma_probe, _ = probe
    step, blocks, loads = 32, 2, 4
    ring = {"name": "ring", "class": "PipelineTmaAsync", "num_stages": 1, "producer_arrivals": 1,
            "consumer_arrivals": 2, "tx_bytes": 4096, "ids": {"acquire": 0, "commit": 1, "wait": 2, "release": 3},
            "scope": "cta"}
    builder = BufferBuilder(blocks, 3, 4 * loads + 8)
    truth = np.zeros((blocks, loads, 2), np.int64)
    for blk in range(blocks):
        for i in range(loads):
            t = 1_000_000 + (blk * 100 + i * 40) * step
            builder.put(blk * 3, t, 0, B).put(blk * 3, t + step, 0, E).put(blk * 3, t + 2 * step, 1, INST)
            ready = t + 32 * step
            builder.put(blk * 3 + 1, t + step, 2, B).put(blk * 3 + 1, ready, 2, E)
            builder.put(blk * 3 + 1, ready + step, 3, INST)
            truth[blk, i] = (t + 3 * step, ready - step)  # ISSUE after the commit, READY before the wait's end
    trace = decode(builder.buf, meta={"pipelines": [ring], "pipeline_lanes": "warp", "warps_per_group": 1})
    result = tma_probe.compare(trace, tma_probe.truth_table(truth, 1), 1)
    assert result["matched"] == result["loads"] == blocks * loads
    diff = result["traced_minus_truth"]
    assert (diff["issue"]["p50"], diff["ready"]["p50"], diff["latency"]["p50"]) == (-step, step, 2 * step)
    assert result["truth_latency_ns"]["p50"] == 28 * step
    with pytest.raises(AssertionError, match="not written"):
        tma_probe.truth_table(np.zeros((1, 1, 2), np.int64), 1)
