"""trace_pipelines on real compiles (CPU, sm_90a / sm_100a): records at every pipeline call site, nothing
outside the context, the sidecar metadata (the device half of the pipelines tests).

* small kernels on cutlass.pipeline (ikp_cute/testing/kernels/pipelines_kernel.py): a kernel-defined
  subclass, named-barrier turns, cutlass's PipelineProducer / PipelineConsumer handles (cutlass only);
* FA4's Hopper forward and backward and quack's sm90 GEMM (through their own host APIs, torch
  FakeTensorMode), FA4's Blackwell forward and backward and quack's sm100 GEMM (sm_100a, in a
  subprocess): they need `.[kernels]` (CI installs it) and skip without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ikp_cute.testing.sass import dump_options
from tests.support.pipelines_ptx import (
    BAKED,
    assert_full_coverage,
    assert_sites_match_ptx,
    check_call_sites,
    markers,
    pipeline_spec,
)
from tests.support.record_order import checking_record_order

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")  # read when flash_attn is imported
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
pytest.importorskip("cutlass")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "pipelines"))


# --- the small kernel (CI) --------------------------------------------------------------------------------


def _compile_small(trace=None):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    out = make_fake_compact_tensor(Int32, (4,))
    if trace is None:
        return cute.compile(pk.launch, out, Int32(5), 4, options=dump_options("--keep-ptx")).__ptx__
    with trace:
        return cute.compile(pk.launch, out, Int32(5), 4, options=dump_options("--keep-ptx")).__ptx__


@pytest.fixture(scope="module")
def small():
    from ikp_cute.pipelines import trace_pipelines

    plain = _compile_small()
    traces = {level: trace_pipelines(pipeline_spec(8, 4), level=level, address=BAKED)
              for level in ("waits", "signals", "all")}
    ptx = {level: _compile_small(tr) for level, tr in traces.items()}
    return {"plain": plain, "after": _compile_small(), "ptx": ptx, "traces": traces}


@pytest.fixture(scope="module")
def small_kernel_ptx_by_polls():
    from ikp_cute.pipelines import POLL_MODES, trace_pipelines

    return {mode: _compile_small(trace_pipelines(pipeline_spec(8, 4), address=BAKED, polls=mode))
            for mode in POLL_MODES}


def test_off_is_untouched(small):
    """Outside the context nothing is patched: a compile after tracing equals the one before."""
    assert small["after"] == small["plain"]
    assert "ikp" not in small["plain"]
    assert small["ptx"]["waits"] != small["plain"]


@pytest.mark.parametrize("level", ["waits", "signals", "all"])
def test_every_call_site_has_its_markers(small, level):
    from ikp_cute.pipelines import LEVEL_OPS

    check_call_sites(small["ptx"][level], small["traces"][level].metadata(), LEVEL_OPS[level])


def test_levels_record_what_they_say(small):
    ops = {level: {label.split("_")[0] for label, _, _ in markers(ptx)} for level, ptx in small["ptx"].items()}
    assert ops["waits"] == {"acquire", "wait", "bar"}
    assert ops["signals"] == {"acquire", "wait", "commit", "release", "bar"}
    assert ops["all"] == ops["signals"] | {"poll"}


def _line(text: str) -> str:
    """`pipelines_kernel.py:<line>` of the first line of the test kernel containing `text`."""
    lines = (ROOT / "ikp_cute" / "testing" / "kernels" / "pipelines_kernel.py").read_text().splitlines()
    return f"pipelines_kernel.py:{next(i for i, line in enumerate(lines, 1) if text in line)}"


def test_kernel_defined_subclass_and_names(small):
    meta = small["traces"]["signals"].metadata()
    by_name = {p["name"]: p for p in meta["pipelines"]}
    assert set(by_name) == {"ring", "side_named"}  # the variable it is assigned to; the kernel's name=
    ring = by_name["ring"]
    assert ring["class"] == "CountedPipeline" and ring["num_stages"] == 3
    assert ring["site"] == _line("ring = CountedPipeline.create(")
    assert ring["producer_arrivals"] == 32 and ring["consumer_arrivals"] == 128
    assert set(ring["ids"]) == {"acquire", "commit", "wait", "release"}
    # consume_one (a method of the subclass) is not the call site: the kernel line that calls it is
    assert ring["call_sites"]["wait"] == [_line("ring.consume_one(state)")]
    assert meta["barriers"]["call_sites"]["bar_sync"] == [_line(".arrive_and_wait()"), _line("cute.arch.barrier(")]
    # a raw cute.arch.mbarrier_arrive on the pointer side.producer_get_barrier() returned is side's commit
    assert by_name["side_named"]["call_sites"]["commit"] == [_line("cute.arch.mbarrier_arrive(")]
    assert meta["warps_per_group"] == 1


def test_producer_and_consumer_handles_are_traced():
    """cutlass's PipelineProducer / PipelineConsumer (make_participants, acquire_and_advance, commit,
    wait_and_advance, release, tail) pass through the same pipeline methods: one pipeline, named from
    its variable, four ops, each at the kernel line that called the handle."""
    (ring,) = _small_kernel_signals("launch_participants")["pipelines"]
    assert ring["name"] == "ring" and ring["class"] == "PipelineAsync"
    assert ring["call_sites"]["acquire"][0] == _line("handle = producer.acquire_and_advance()")
    assert ring["call_sites"]["commit"] == [_line("handle.commit()")]
    assert ring["call_sites"]["wait"] == [_line("handle = consumer.wait_and_advance()")]
    assert ring["call_sites"]["release"] == [_line("handle.release()")]
    # the producer's tail() acquires every stage once more before the block exits
    assert ring["call_sites"]["acquire"][1:] == [_line("producer.tail()")]


def test_arrays_called_directly_belong_to_their_pipeline():
    """A kernel that calls a pipeline's arrays itself (`p.sync_object_empty.wait(...)` is p's acquire,
    `p.sync_object_full.arrive(...)` its commit), with the pipeline reached through a list element and
    through an attribute of a holder: each is still one pipeline with four ops, not anonymous arrays."""
    by_name = {p["name"]: p for p in _small_kernel_signals("launch_direct")["pipelines"]}
    assert set(by_name) == {"listed", "held"}
    for name, holder in (("listed", "listed[0]"), ("held", "held.ring")):
        sites = by_name[name]["call_sites"]
        assert by_name[name]["class"] == "PipelineAsync"
        assert sites["acquire"] == [_line(f"{holder}.sync_object_empty.wait(")]
        assert sites["commit"] == [_line(f"{holder}.sync_object_full.arrive(")]
        assert sites["wait"] == [_line("ring.consumer_wait(state)")]


def _small_kernel_signals(launch: str) -> dict:
    """pipelines_kernel.<launch> compiled under level signals: its sidecar metadata, once every call site
    was checked to have its markers."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import LEVEL_OPS, trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    trace = trace_pipelines(pipeline_spec(8, 4), level="signals", address=BAKED)
    with trace:
        ptx = cute.compile(getattr(pk, launch), make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                           options=dump_options("--keep-ptx")).__ptx__
    meta = trace.metadata()
    check_call_sites(ptx, meta, LEVEL_OPS["signals"])
    return meta


def test_ids_are_registered_in_the_session_events(small):
    trace = small["traces"]["signals"]
    events = trace.spec.events
    for pipe in trace.metadata()["pipelines"]:
        for op, base in pipe["ids"].items():
            assert [events.name(base + s) for s in range(pipe["num_stages"])] == [
                f"{op}_{pipe['name']}[{s}]" for s in range(pipe["num_stages"])]


def test_buffer_address_is_baked_and_state_is_in_shared_memory(small):
    ptx = small["ptx"]["waits"]
    assert str(BAKED + 8) in ptx  # first lane slot: the kernel's signature is unchanged
    assert ptx.count("elect.sync") >= 2  # one elected lane of each warp records
    assert "ld.volatile.shared.v2.u64" in ptx and "ld.local" not in ptx
    assert ptx.count(str(BAKED + 8)) == 1  # only the prologue holds the address: records read it from shared memory


def test_after_a_blocking_call_only_the_end_time_and_the_stores_remain(small):
    """record.finish_region: the code after a wait or barrier holds no load, no shared-memory access and
    no special-register read but the timer (those sit before the call, where the wait hides them, and a
    shared store after it would have to precede the kernel's next wgmma fence)."""
    ptx = small["ptx"]["waits"]
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, re.S)
    ends = [b for b in blocks if re.search(r"/\* ikp \S+ end \*/", b)]
    assert ends, "no region end in the PTX"
    for block in ends:
        assert "shared" not in block and "ld." not in block and "%tid" not in block, block
        assert "%lanemask" not in block and "activemask" not in block and block.count("st.global") == 2, block


def test_contexts_do_not_nest():
    from ikp_cute.pipelines import trace_pipelines

    outer = trace_pipelines(pipeline_spec(8, 1), address=BAKED)
    inner = trace_pipelines(pipeline_spec(8, 1), address=BAKED)
    with outer, pytest.raises(RuntimeError, match="nest"), inner:
        pass


def test_bad_arguments_are_refused():
    from ikp_cute import ProfileSpec
    from ikp_cute.pipelines import trace_pipelines

    with pytest.raises(ValueError, match="level"):
        trace_pipelines(pipeline_spec(8, 1), level="everything", address=BAKED)
    with pytest.raises(ValueError, match="address"):
        trace_pipelines(pipeline_spec(8, 1))
    with pytest.raises(ValueError, match="disabled"):
        trace_pipelines(ProfileSpec(enabled=False), address=BAKED)
    with pytest.raises(ValueError, match="32"):
        trace_pipelines(pipeline_spec(33, 1), address=BAKED)
    with pytest.raises(ValueError, match="polls"):
        trace_pipelines(pipeline_spec(8, 1), address=BAKED, polls=True)
    for bad in (0, -64, 64.0, True, "256", 2**31):
        with pytest.raises(ValueError, match="blocked_ns"):
            trace_pipelines(pipeline_spec(8, 1), address=BAKED, blocked_ns=bad)
    for bad in ({"poll": 64}, {"acquire": 0}, {"wait": "256"}):
        with pytest.raises(ValueError, match="blocked_ns"):
            trace_pipelines(pipeline_spec(8, 1), address=BAKED, blocked_ns=bad)
    options = trace_pipelines(pipeline_spec(8, 1), address=BAKED, blocked_ns=64).metadata()["pipeline_options"]
    assert options["blocked_ns"] == {"acquire": 64, "wait": 64, "bar_sync": 64}
    options = trace_pipelines(pipeline_spec(8, 1), address=BAKED).metadata()["pipeline_options"]
    assert options["blocked_ns"] == {"acquire": 1024, "wait": 256, "bar_sync": 256}


def test_each_blocking_op_is_checked_against_its_own_threshold():
    """blocked_ns per op: every blocked-only check of an acquire compares with the acquire's threshold, of a
    wait with the wait's, of a named-barrier wait with bar_sync's (one compare per timed call, none mixed)."""
    from ikp_cute.pipelines import trace_pipelines

    ptx = _compile_small(trace_pipelines(pipeline_spec(8, 4), address=BAKED,
                                         blocked_ns={"acquire": 777, "wait": 333, "bar_sync": 555}))
    timed = re.findall(r"ikp (acquire|wait|bar_sync)\S* call-end-time", ptx)
    # `took >= N` compiles to `setp.ge/lt ... N` or to `setp.gt/le ... N - 1`
    compares = [str(int(n) + (op in ("gt", "le"))) for op, n in
                re.findall(r"setp\.(\w+)\.u32\s+%p\d+, %r\d+, (777|333|555|776|332|554);", ptx)]
    assert timed and sorted(compares) == sorted({"acquire": "777", "wait": "333", "bar_sync": "555"}[t] for t in timed)


def test_poll_modes_differ_only_in_what_a_poll_records(small_kernel_ptx_by_polls):
    """polls="begin" reads one timer per poll and stores nothing there; "timed" adds an end-time read, the
    blocked test and a region store after the poll; "off" leaves polls untouched."""
    found = {mode: markers(ptx) for mode, ptx in small_kernel_ptx_by_polls.items()}
    kinds = {mode: {kind for (_, _, kind) in f} for mode, f in found.items()}
    assert "gate" in kinds["begin"] and "poll-end" not in kinds["begin"]
    assert "poll-end" in kinds["timed"] and "gate" not in kinds["timed"]
    assert "gate" not in kinds["off"] and "poll-end" not in kinds["off"]
    timers = {mode: ptx.count("%globaltimer") for mode, ptx in small_kernel_ptx_by_polls.items()}
    assert timers["begin"] < timers["timed"]  # a "begin" poll reads no end time


# --- FA4 and quack (torch + their packages) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fa4():
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm90")
    import compile_cpu as cc

    from ikp_cute.pipelines import trace_pipelines

    cc.sm90_env()
    trace = trace_pipelines(pipeline_spec(12, 32, 256), level="signals", address=BAKED)
    plain = cc.fa4_compile().__ptx__
    with checking_record_order() as order:
        traced = cc.fa4_compile(trace).__ptx__
    return {"plain": plain, "traced": traced, "after": cc.fa4_compile().__ptx__, "meta": trace.metadata(),
            "order": order}


def test_fa4_sm90_traced_with_no_source_change(fa4):
    from ikp_cute.pipelines import LEVEL_OPS

    assert fa4["after"] == fa4["plain"]
    assert fa4["order"] == []  # tests/support/record_order.py: every lane stores its records in time order
    check_call_sites(fa4["traced"], fa4["meta"], LEVEL_OPS["signals"])
    by_name = {p["name"]: p for p in fa4["meta"]["pipelines"]}
    assert all(p.get("scope") == "cta" for p in by_name.values())  # FA4 sm90 launches 1-CTA clusters
    assert set(by_name) == {"q", "k", "v"}
    assert by_name["k"]["class"] == "PipelineTmaAsync"  # FA4's own subclass (flash_attn/cute/pipeline.py)
    assert by_name["k"]["tx_bytes"] == 128 * 128 * 2
    for name in ("k", "v"):
        assert set(by_name[name]["ids"]) == {"acquire", "commit", "wait", "release"}
        assert all(site.startswith("flash_fwd_sm90.py:") for sites in by_name[name]["call_sites"].values()
                   for site in sites)
    assert fa4["meta"]["barriers"]["base_sync"] is not None  # warp-scheduler barriers (cute.arch.barrier)


def test_fa4_sm90_coverage(fa4):
    """The audit of FA4's traced compile: every barrier instruction of its final PTX names a site, every site
    was built by a Python hook (the IR pass adds nothing to FA4's records), and every site is traced but
    the pipeline-init __syncthreads, which level signals does not record."""
    meta = fa4["meta"]
    assert_full_coverage(meta)
    sites = meta["barrier_sites"]
    assert {s["via"] for s in sites} == {"hooks"}
    assert [s["op"] for s in sites if not s["traced"]] == ["sync_threads"]
    (coverage,) = meta["coverage"].values()
    assert coverage["removed"] == 0 and coverage["traced"] == coverage["sites"] - 1
    assert_sites_match_ptx(fa4["traced"], sites)


def test_fa4_phase_subclass_and_pipelines_compose(fa4):
    """examples/fa4_sm90/pipelines.py --phases: the phase subclass (its own baked session) and
    trace_pipelines in one compiled kernel; the subclass no longer proxies pipeline waits."""
    import compile_cpu as cc

    import ikp_cute
    from ikp_cute.pipelines import trace_pipelines

    sys.path.insert(0, str(ROOT / "examples" / "fa4_sm90"))
    import fa4_instrumented as fi

    assert not any(name.startswith("wait") for name in fi.events_for("full"))
    assert ikp_cute.trace_pipelines is trace_pipelines
    spec = ikp_cute.ProfileSpec(num_groups=3, num_blocks=32, write_stride=96, records_per_lane=64,
                                events=ikp_cute.EventRegistry(fi.events_for("full")), baked_address=BAKED + (1 << 24))
    trace = trace_pipelines(pipeline_spec(12, 32, 256), address=BAKED)
    with fi.patched_interface(spec, "full"):
        ptx = cc.fa4_compile(trace).__ptx__
    assert str(BAKED + 8) in ptx and str(BAKED + (1 << 24)) in ptx  # both buffers baked
    assert {p["name"] for p in trace.metadata()["pipelines"]} == {"q", "k", "v"}
    assert markers(ptx)


@pytest.fixture(scope="module")
def quack():
    pytest.importorskip("torch")
    pytest.importorskip("quack.gemm_interface")
    import compile_cpu as cc

    from ikp_cute.pipelines import trace_pipelines

    trace = trace_pipelines(pipeline_spec(12, 132, 512), level="signals", address=BAKED)
    plain = cc.quack_compile().__ptx__
    with checking_record_order() as order:
        traced = cc.quack_compile(trace).__ptx__
        cc.quack_compile(trace_pipelines(pipeline_spec(12, 132, 512), level="waits", address=BAKED))
    return {"plain": plain, "traced": traced, "after": cc.quack_compile().__ptx__, "meta": trace.metadata(),
            "order": order}


def test_quack_sm90_gemm_traced_with_no_source_change(quack):
    from ikp_cute.pipelines import LEVEL_OPS

    assert quack["after"] == quack["plain"]
    assert quack["order"] == []  # levels signals and waits (bfb5df8: 2 pairs out of order at waits)
    check_call_sites(quack["traced"], quack["meta"], LEVEL_OPS["signals"])
    by_name = {p["name"]: p for p in quack["meta"]["pipelines"]}
    assert {"ab", "sched"} <= set(by_name)  # make_ab_pipeline's result; quack's scheduler pipeline
    assert set(by_name["ab"]["ids"]) == {"acquire", "commit", "wait", "release"}
    # quack launches 2-CTA clusters whose consumers release the A/B stage in both CTAs (consumer_mask):
    # the sidecar says so, so `ikp waits` matches across the cluster without --cluster.
    assert by_name["ab"]["cluster"] == [2, 1, 1] and "scope" not in by_name["ab"]
    # The epilogue's TMA-store pipeline (quack's own PipelineTmaStore subclass, no mbarriers): its
    # acquires (cp.async.bulk.wait_group) at the epilogue's producer_acquire and producer_tail, its
    # commits (cp.async.bulk.commit_group), named from the variable make_epi_store_pipeline's caller assigns.
    store = by_name["epi_store"]
    assert store["class"] == "PipelineTmaStore" and store["released_by"] == "tma_store"
    assert set(store["ids"]) == {"acquire", "commit"}
    assert {site.split(":")[0] for site in store["call_sites"]["acquire"]} == {"gemm_base.py", "gemm_sm90.py"}


def test_quack_sm90_coverage(quack):
    """quack's GEMM: every barrier instruction names a site, all built by the hooks and traced at level
    signals; the scheduler's acquire and commit in a branch the compiler drops are reported removed (their
    call sites stay listed: other ops of the same lines remain)."""
    meta = quack["meta"]
    assert_full_coverage(meta)
    sites = meta["barrier_sites"]
    assert {s["via"] for s in sites} == {"hooks"} and all(s["traced"] for s in sites)
    removed = [s for s in sites if s["ptx"] == 0]
    assert removed and {s["pipeline"] for s in removed} == {"sched"}
    assert_sites_match_ptx(quack["traced"], sites)


def test_fa4_sm90_backward_traced_with_no_source_change():
    """FA4's Hopper backward (its preprocess, main and postprocess kernels) under level signals: every
    pipeline call site of every kernel has its markers, the pipelines are named from FA4's variables,
    and the kernels compiled after tracing are FA4's own."""
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_bwd_sm90")
    import compile_cpu as cc

    from ikp_cute.pipelines import LEVEL_OPS, trace_pipelines

    cc.sm90_env()
    plain = cc.fa4_bwd_compile()
    trace = trace_pipelines(pipeline_spec(12, 32, 256), level="signals", address=BAKED)
    with checking_record_order() as order:
        traced = cc.fa4_bwd_compile(trace)
    after = cc.fa4_bwd_compile()
    assert order == []
    assert len(plain) == len(traced) == len(after) == 3
    assert_full_coverage(trace.metadata())
    assert [c.__ptx__ for c in after] == [c.__ptx__ for c in plain]
    meta = trace.metadata()
    check_call_sites("".join(c.__ptx__ for c in traced), meta, LEVEL_OPS["signals"])
    by_name = {p["name"]: p for p in meta["pipelines"]}
    assert set(by_name) == {"Q", "dO"}
    for pipe in by_name.values():
        assert pipe["class"] == "PipelineTmaAsync" and set(pipe["ids"]) == {"acquire", "commit", "wait", "release"}
        assert all(site.startswith("flash_bwd_sm90.py:") for sites in pipe["call_sites"].values() for site in sites)
    # the main kernel's named barriers (its dQ hand-offs between warp groups) are traced too
    barrier_sites = meta["barriers"]["call_sites"]
    for op in ("bar_sync", "bar_arrive"):
        assert any(site.startswith("flash_bwd_sm90.py:") for site in barrier_sites[op]), op


_SM100 = """
import json, re, collections, sys
sys.path.insert(0, {examples!r})
import compile_cpu as cc
cc.sm100_env()
from tests.support.pipelines_ptx import markers, pipeline_spec
from tests.support.record_order import checking_record_order
from ikp_cute.pipelines import trace_pipelines
trace = trace_pipelines(pipeline_spec(16, 148, 256), level="signals", address={baked})
plain = cc.fa4_sm100_compile()
with checking_record_order() as order:
    traced = cc.fa4_sm100_compile(trace)
after = cc.fa4_sm100_compile()
bwd_trace = trace_pipelines(pipeline_spec(16, 148, 256), level="signals", address={baked})
bwd_plain = [c.__ptx__ for c in cc.fa4_sm100_bwd_compile()]
with checking_record_order() as bwd_order:
    bwd_traced = "".join(c.__ptx__ for c in cc.fa4_sm100_bwd_compile(bwd_trace))
bwd_after = [c.__ptx__ for c in cc.fa4_sm100_bwd_compile()]
gemm_trace = trace_pipelines(pipeline_spec(16, 148, 512), level="signals", address={baked})
gemm_plain = cc.quack_compile(blackwell=True).__ptx__
with checking_record_order() as gemm_order:
    gemm_traced = cc.quack_compile(gemm_trace, blackwell=True).__ptx__
gemm_after = cc.quack_compile(blackwell=True).__ptx__
print(json.dumps({{"identical_after": after.__ptx__ == plain.__ptx__, "meta": trace.metadata(),
                  "markers": [list(k) + [v] for k, v in markers(traced.__ptx__).items()],
                  "cubin": len(traced.__cubin__ or b""), "order": [order, bwd_order, gemm_order],
                  "bwd": {{"identical_after": bwd_after == bwd_plain, "meta": bwd_trace.metadata(),
                          "markers": [list(k) + [v] for k, v in markers(bwd_traced).items()]}},
                  "gemm": {{"identical_after": gemm_after == gemm_plain, "meta": gemm_trace.metadata(),
                           "markers": [list(k) + [v] for k, v in markers(gemm_traced).items()]}}}}))
"""


def test_fa4_sm100_compiles_with_tracing():
    """FA4's Blackwell forward and backward and quack's Blackwell GEMM compiled for sm_100a (a subprocess:
    the arch is fixed at import); every barrier instruction of their final PTX is a traced site, or an
    untraced one with its reason."""
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm100")
    pytest.importorskip("quack.gemm_interface")
    code = _SM100.format(examples=str(ROOT / "examples" / "pipelines"), baked=BAKED)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("CUTE_DSL_ARCH", None)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["identical_after"] and result["cubin"] > 0
    assert result["order"] == [[], [], []]  # tests/support/record_order.py, forward, backward and GEMM
    by_name = {p["name"]: p for p in result["meta"]["pipelines"]}
    assert {"q", "kv", "s_p_o", "o_acc"} <= set(by_name)
    assert {"PipelineTmaUmma", "PipelineUmmaAsync", "PipelineAsync"} <= {p["class"] for p in by_name.values()}
    _assert_every_call_site_marked(result)
    # FA4's NamedBarrier.arrive_and_wait_unaligned builds nvvm.barrier.cta.sync itself: traced by the IR pass
    sites = result["meta"]["barrier_sites"]
    assert any(s["instruction"] == "nvvm.barrier.cta.sync" and s["traced"] and s["via"] == "ir" for s in sites)
    # its UMMA GEMM waits inside its own tcgen05.mma inline PTX: not separable, reported with the reason
    mixed = [s for s in sites if not s["traced"] and s["instruction"] == "llvm.inline_asm"]
    assert mixed and all("tcgen05.mma" in s["reason"] for s in mixed)
    for part in (result, result["bwd"], result["gemm"]):
        assert_full_coverage(part["meta"], gaps=len(mixed) if part is result else 0)
    # The backward: its kernel also calls its pipelines' arrays directly
    # (`pipeline_S_P.sync_object_empty.wait(...)`); those calls are still that pipeline's acquires and
    # commits, so each pipeline is one, with all four ops, not split into anonymous barrier arrays.
    bwd = result["bwd"]
    assert bwd["identical_after"]
    _assert_every_call_site_marked(bwd)
    by_name = {p["name"]: p for p in bwd["meta"]["pipelines"]}
    assert {"Q", "dO", "S_P", "dP", "dS", "dQ", "dKV"} <= set(by_name)
    assert "MbarrierArray" not in {p["class"] for p in by_name.values()}
    for pipe in by_name.values():
        if pipe["class"] != "mbarrier":
            assert set(pipe["ids"]) == {"acquire", "commit", "wait", "release"}, pipe["name"]
    # its cluster exchange of dS on barriers of its own (raw cute.arch.mbarrier_* on pointers no pipeline
    # handed out): found by the IR pass, named from the pointers' variables
    assert by_name["dS_cluster_full"]["class"] == "mbarrier"
    assert set(by_name["dS_cluster_full"]["ids"]) == set(by_name["dS_cluster_leader"]["ids"]) == {"commit", "wait"}
    # quack's Blackwell GEMM (persistent, 2-CTA clusters, a UMMA accumulator pipeline)
    gemm = result["gemm"]
    assert gemm["identical_after"]
    _assert_every_call_site_marked(gemm)
    by_name = {p["name"]: p for p in gemm["meta"]["pipelines"]}
    # acc_tmem: the TMEM allocator's dealloc handshake with the peer CTA (cutlass's TmemAllocator.free
    # arrives and waits on its own barrier), found by the IR pass and named from `tmem.free(acc_tmem_ptr)`
    assert {name: p["class"] for name, p in by_name.items()} == {
        "ab": "PipelineTmaUmma", "acc": "PipelineUmmaAsync", "sched": "PipelineAsync",
        "epi_store": "PipelineTmaStore", "acc_tmem": "mbarrier"}
    assert all(set(by_name[n]["ids"]) == {"acquire", "commit", "wait", "release"} for n in ("ab", "acc", "sched"))
    assert by_name["ab"]["cluster"] == [2, 1, 1]
    # the epilogue's TMA stores: no mbarriers, acquired and committed through cp.async.bulk groups
    assert set(by_name["epi_store"]["ids"]) == {"acquire", "commit"}
    assert by_name["epi_store"]["released_by"] == "tma_store"


def _assert_every_call_site_marked(result):
    found = {(label, site) for label, site, _, _ in result["markers"]}
    for pipe in result["meta"]["pipelines"]:
        for op, sites in pipe["call_sites"].items():
            for site in sites:
                assert (f"{op}_{pipe['name']}", site) in found


def test_decorator_form():
    """@trace_pipelines(spec) on a function that compiles: same records as the with-statement form."""
    from ikp_cute.pipelines import trace_pipelines

    trace = trace_pipelines(pipeline_spec(8, 4), level="signals", address=BAKED)

    @trace
    def build():
        return _compile_small()

    ptx = build()
    assert {p["name"] for p in trace.metadata()["pipelines"]} == {"ring", "side_named"}
    assert markers(ptx) and _compile_small() == _compile_small()  # hooks gone after the call


def test_kernels_before_sm90_are_refused_at_trace_time(monkeypatch):
    """The records elect their lane with elect.sync (sm_90+): an sm_80 compile fails with our message,
    not in ptxas."""
    from cutlass.base_dsl import Arch, BaseDSL

    from ikp_cute.pipelines import emit

    dsl = BaseDSL._get_dsl()
    monkeypatch.setattr(dsl, "get_arch_enum", lambda: Arch.sm_80)
    with pytest.raises(RuntimeError, match="sm_80.*elect.sync"):
        emit.require_sm90()
    monkeypatch.setattr(dsl, "get_arch_enum", lambda: Arch.sm_90a)
    emit.require_sm90()


def _turns_ptx(level: str) -> str:
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    with trace_pipelines(pipeline_spec(8, 4), level=level, address=BAKED):
        return cute.compile(pk.launch_turns, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                            options=dump_options("--keep-ptx")).__ptx__


def _positions(ptx: str, pattern: str) -> list[int]:
    return [m.start() for m in re.finditer(pattern, ptx)]


def test_a_blocked_only_check_goes_after_the_next_signal():
    """Level waits: right after the named-barrier wait only its end time is read; the compare and the store
    branch come after the group's next signal (the barrier arrive that hands the turn on), so neither the
    work after the wait nor the arrive waits for them."""
    ptx = _turns_ptx("waits")
    (end_time,) = _positions(ptx, r"/\* ikp bar_sync\[\?\]@\S+ call-end-time \*/")
    (store,) = _positions(ptx, r"/\* ikp bar_sync\[\?\]@\S+ call-end \*/")
    arrives = _positions(ptx, r"bar(rier)?\.(cta\.)?arrive")
    assert len(arrives) == 2  # the first turn's (before the wait) and the hand-over
    assert end_time < arrives[1] < store
    assert "%clock" not in ptx  # blocked = %globaltimer advanced >= blocked_ns across the call


def test_a_producer_acquire_check_goes_past_its_commit(small):
    """cutlass's producer_acquire waits inside an `if` that always runs (no try token). That wait is timed
    from just before the if to just after it (the same span), so its check lives in the enclosing block and
    moves past the commit that follows (here a raw mbarrier arrive on the barrier the pipeline handed
    out): off the producer's way to its next load. The old placement stored it inside the if, before the
    commit (FA4: before the commit and the TMA issue of every K/V load)."""
    ptx = small["ptx"]["waits"]
    (begin,) = _positions(ptx, r"/\* ikp acquire_side_named@\S+ call-begin \*/")
    (end_time,) = _positions(ptx, r"/\* ikp acquire_side_named@\S+ call-end-time \*/")
    (store,) = _positions(ptx, r"/\* ikp acquire_side_named@\S+ call-end \*/")
    commit = min(p for p in _positions(ptx, r"mbarrier\.arrive") if p > end_time)
    assert begin < end_time < commit < store


def test_checks_stay_in_time_order_around_a_constant_if_and_a_loop():
    """order_kernel at level waits: a wait then a named barrier inside the kernel's own constant-true `if`,
    then a named barrier followed by a loop that releases before a poll-gated wait. Each blocked-only
    call's times and check stay in program order: the wait's end time is read before the barrier in the
    same `if` (a wait is timed around the if only when it is a pipeline's own if_generate body), and the
    release inside the loop does not carry the barrier's check past the loop's wait regions."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    with trace_pipelines(pipeline_spec(8, 4), level="waits", address=BAKED):
        ptx = cute.compile(pk.launch_order, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                           options=dump_options("--keep-ptx")).__ptx__
    order = []
    for label in ("acquire_ring", r"bar_sync\[3\]", r"bar_sync\[4\]"):
        for kind in ("call-begin", "call-end-time", "call-end"):
            (position,) = _positions(ptx, rf"/\* ikp {label}@\S+ {kind} \*/")
            order.append(position)
    first_loop_region = min(_positions(ptx, r"/\* ikp wait_ring@\S+ begin \*/"))
    assert order == sorted(order) and order[-1] < first_loop_region


@pytest.mark.parametrize("launch", ["launch", "launch_turns", "launch_participants", "launch_direct", "launch_order",
                                    "launch_two_rings", "launch_ordered"])
@pytest.mark.parametrize("level", ["waits", "signals"])
def test_every_lane_stores_its_records_in_time_order(launch, level):
    """tests/support/record_order.py on the small kernels: no reservation is made before another whose times it
    follows (it finds both cases order_kernel guards against in the code they were found in)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    with checking_record_order() as order, trace_pipelines(pipeline_spec(8, 4), level=level, address=BAKED):
        cute.compile(getattr(pk, launch), make_fake_compact_tensor(Int32, (4,)), Int32(5), 4)
    assert order == []


def test_a_check_stays_ahead_of_later_records():
    """Level signals: the hand-over arrive records an instant, so the check (which may store the wait's
    region) stays ahead of it: a lane's records remain in program order, which is time order."""
    ptx = _turns_ptx("signals")
    (store,) = _positions(ptx, r"/\* ikp bar_sync\[\?\]@\S+ call-end \*/")
    instants = _positions(ptx, r"/\* ikp bar_arrive\[[^]]*\]@\S+ \*/")
    assert len(instants) == 2 and instants[0] < store < instants[1]


def _small_ptx(launch: str, level: str = "waits", spec=None):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    trace = trace_pipelines(spec or pipeline_spec(8, 4), level=level, address=BAKED)
    with trace:
        ptx = cute.compile(getattr(pk, launch), make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                           options=dump_options("--keep-ptx")).__ptx__
    return ptx, trace


def test_a_wait_without_a_token_is_not_gated_by_another_rings_poll():
    """The poll of ring `a` is still a local when ring `b` is waited on without a token: b's wait must be
    timed around itself (call-begin / call-end), not from a's poll (it was, and its region was stored on
    every iteration, out of time order)."""
    ptx, _ = _small_ptx("launch_two_rings")
    found = {(label, kind) for label, _, kind in markers(ptx)}
    assert ("wait_ring_a", "gate") in found and ("wait_ring_a", "begin") in found
    assert ("wait_ring_b", "call-begin") in found and ("wait_ring_b", "begin") not in found


def test_pipeline_order_says_which_first_waits_pass():
    _, trace = _small_ptx("launch_ordered", "signals")
    (entry,) = trace.metadata()["pipelines"]
    assert entry["class"] == "PipelineOrder" and entry["first_wait_passes"] == [0, 2]


def test_a_kernel_traced_twice_keeps_its_pipelines_names_and_ids():
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    trace = trace_pipelines(pipeline_spec(8, 4), level="signals", address=BAKED)
    ptx = []
    for _ in range(2):
        with trace:
            ptx.append(cute.compile(pk.launch_two_rings, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                                    options=dump_options("--keep-ptx")).__ptx__)
    names = [(p["name"], p["ids"]) for p in trace.metadata()["pipelines"]]
    assert [n for n, _ in names] == ["ring_a", "ring_b"], names
    assert markers(ptx[0]) == markers(ptx[1])
