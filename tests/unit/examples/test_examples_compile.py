"""CPU tests of the real-kernel examples (examples/pipeline, examples/megakernel, examples/fa4_sm90).

* each example compiles for sm_90a without a GPU (CUTE_DSL_ARCH=sm_90a);
* instrumented vs uninstrumented PTX differ only by profiler code: every opcode outside the profiler's
  own vocabulary (timer reads, 64-bit stores, integer glue) occurs equally often in both (wgmma, TMA,
  mbarrier, barriers, the math, the kernel's own loads/stores), and each profiled event has its records;
* a disabled spec compiles to exactly the uninstrumented kernel (FA4: to FA4's own PTX);
* the committed captures (examples/*/capture.npy, real H100/H200 runs) decode with the structure their
  problem implies (lanes, groups, regions per lane), with nothing lost.
FA4 tests need torch + flash-attn-4 (not in CI): they skip without them.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re

import numpy as np
import pytest

from ikp_cute.testing.sass import dump_options
from tests.support.examples import (
    BAKED,
    EXAMPLES,
    compile_fa4,
    import_example,
    profile_spec,
    timer_reads,
)
from tests.support.scripts import load_script

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# Opcodes the profiler may add besides its stores (PTX): timer reads, record guards and arithmetic, and
# the warp-index broadcast (shfl.sync.idx) of the leader predicate where the kernel has none. The
# profiler's stores are told apart by address (`profiler_stores`), so every store opcode must match.
PROFILER_OPCODES = re.compile(
    r"^(mov|cvt|shl|shr|or|and|xor|add|sub|mul|mad|setp|selp|bra|neg|not|min|max|shfl\.sync\.idx\.b32|"
    r"ld\.param|ld\.local|st\.local|ld\.shared\.(u|b)32|st\.shared\.(u|b)32|bar\.warp\.sync|@?%p\d+|\{|\}|"
    r"ld\.volatile\.shared\.(u64|v2\.u32)|st\.volatile\.shared\.(u32|u64)|red\.global\.add\.u64|\.reg)",
)
_REG = re.compile(r"%[a-z]+\d+")


def _instructions(ptx: str) -> list[str]:
    out = []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip().rstrip(";")
        if line and not line.startswith((".", "$", "{", "}", ")")) and not line.endswith(":"):
            out.append(line[line.index(" ") + 1:].strip() if line.startswith("@") else line)
    return out


def profiler_stores(ptx: str, address: int = BAKED, span: int = 1 << 30) -> list[str]:
    """Global stores whose address derives from the baked buffer address (forward taint to a fixpoint:
    PTX loop-carried values are plain register moves). The compiler folds offsets into the immediate, so
    any literal in [address, address + span) seeds the taint."""
    lines = _instructions(ptx)

    def mentions_buffer(line: str) -> bool:
        return any(address <= int(x) < address + span for x in re.findall(r"(?<![%\w])\d{10,}", line))

    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for line in lines:
            if line.startswith("st."):
                continue
            regs = _REG.findall(line)
            if not regs or regs[0] in tainted:
                continue
            if mentions_buffer(line) or any(r in tainted for r in regs[1:]):
                tainted.add(regs[0])
                changed = True
    stores = []
    for line in lines:
        m = re.match(r"st\.global\S*\s+\[(%[a-z]+\d+)", line)
        if m and m.group(1) in tainted:
            stores.append(line)
    return stores


def opcode_counts(ptx: str, drop: list[str] = ()) -> collections.Counter:
    counts = collections.Counter(line.split()[0] for line in _instructions(ptx))
    counts.subtract(line.split()[0] for line in drop)
    return counts


def non_profiler_difference(plain: str, instrumented: str) -> dict:
    """Opcodes whose counts differ once the profiler's stores (by address) and its glue opcodes are set
    aside: must be empty. A profiler with no stores found is itself a failure (nothing recorded)."""
    stores = profiler_stores(instrumented)
    if not stores:
        return {"<no profiler stores found>": (0, 0)}
    a, b = opcode_counts(plain), opcode_counts(instrumented, stores)
    return {op: (a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op] and not PROFILER_OPCODES.match(op)}


def normalize(ptx: str) -> str:
    ptx = re.sub(r"\bkernel_cutlass_\w+", "KERNEL", ptx)
    return "\n".join(line for line in ptx.splitlines() if not line.lstrip().startswith(("//", ".file", ".loc")))


# --- the warp-specialized TMA/mbarrier/wgmma pipeline ---------------------------------------------------


def _compile_pipeline(spec):
    from cutlass import BFloat16, Float32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute import fake_buffer

    gp = import_example("pipeline", "gemm_pipeline")
    m, n, k = 512, 512, 1024
    a = fake(BFloat16, (m, k), stride_order=(1, 0), assumed_align=16)
    b = fake(BFloat16, (n, k), stride_order=(1, 0), assumed_align=16)
    c = fake(Float32, (m, n), stride_order=(1, 0), assumed_align=16)
    return cute.compile(gp.PipelinedGemm(), a, b, c, fake_buffer(spec), spec,
                        options=dump_options("--keep-ptx")).__ptx__


@pytest.fixture(scope="module")
def pipeline_ptx():
    pytest.importorskip("cutlass")
    from ikp_cute import disabled

    gp = import_example("pipeline", "gemm_pipeline")
    spec = profile_spec(gp.EVENTS, 3, 16, 80, baked=BAKED)
    return _compile_pipeline(disabled()), _compile_pipeline(spec), spec


def test_pipeline_compiles_for_sm90a(pipeline_ptx):
    plain, instrumented, _ = pipeline_ptx
    for ptx in (plain, instrumented):
        assert ".target sm_90a" in ptx
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx and "mbarrier" in ptx
    assert timer_reads(plain) == 0


def test_pipeline_instrumentation_is_only_profiler_code(pipeline_ptx):
    plain, instrumented, spec = pipeline_ptx
    assert non_profiler_difference(plain, instrumented) == {}
    # 6 regions (2 records each) + finalize; every event was registered while tracing
    assert set(spec.events.as_dict().values()) == set(import_example("pipeline", "gemm_pipeline").EVENTS)
    assert timer_reads(instrumented) >= 2 * len(spec.events)


def test_non_profiler_difference_catches_a_changed_kernel(pipeline_ptx):
    plain, instrumented, _ = pipeline_ptx
    changed = instrumented.replace("wgmma.mma_async", "wgmma.mma_async.changed", 1)
    assert any("changed" in op for op in non_profiler_difference(plain, changed))
    # a kernel store that is not the profiler's is not excused by the store exemption
    ours = set(profiler_stores(instrumented))
    kernel_store = next(ins for ins in _instructions(instrumented) if ins.startswith("st.global") and ins not in ours)
    extra = instrumented.replace(kernel_store, kernel_store + ";\n\t" + kernel_store, 1)
    assert kernel_store.split()[0] in non_profiler_difference(plain, extra)
    assert "<no profiler stores found>" in non_profiler_difference(plain, plain)


# --- the persistent megakernel --------------------------------------------------------------------------


def _compile_megakernel(spec, num_ctas=132):
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor as fake

    from ikp_cute import fake_buffer

    mk = import_example("megakernel", "megakernel")
    args = [fake(Int32, (1000, 4), stride_order=(1, 0)), fake(Int32, (1,)), fake(Float32, (1 << 20,)),
            fake(Float32, (1 << 20,)), fake(Float32, (64, mk.ROW_LEN), stride_order=(1, 0)), fake(Float32, (64,)),
            fake(Float32, (128, mk.GEMM_K), stride_order=(1, 0)), fake(Float32, (mk.GEMM_K, 128), stride_order=(1, 0)),
            fake(Float32, (128, 128), stride_order=(1, 0))]
    return cute.compile(mk.launch, *args, fake_buffer(spec), spec, num_ctas, options=dump_options("--keep-ptx")).__ptx__


@pytest.fixture(scope="module")
def megakernel_ptx():
    pytest.importorskip("cutlass")
    from ikp_cute import disabled

    mk = import_example("megakernel", "megakernel")
    spec = profile_spec(mk.EVENTS, 1, 132, 128, baked=BAKED)
    return _compile_megakernel(disabled()), _compile_megakernel(spec), spec


def test_megakernel_compiles_and_differs_only_by_profiler(megakernel_ptx):
    plain, instrumented, spec = megakernel_ptx
    assert ".target sm_90a" in plain
    assert "atom.global" in plain or "atom.relaxed.gpu.global" in plain
    assert non_profiler_difference(plain, instrumented) == {}
    assert set(spec.events.as_dict().values()) == set(import_example("megakernel", "megakernel").EVENTS)
    assert timer_reads(plain) == 0 < timer_reads(instrumented)


# --- FlashAttention-4 sm90 forward (needs torch + flash-attn-4) ----------------------------------------


@pytest.fixture(scope="module")
def fa4_ptx():
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm90")
    from ikp_cute import ProfileSpec

    fi = import_example("fa4_sm90", "fa4_instrumented")
    nb = fi.num_ctas(1, 1024, 4)
    spec = profile_spec(fi.events_for("full"), 3, nb, 128, baked=BAKED)
    return {
        "fa4": compile_fa4(None, None),
        "off": compile_fa4(ProfileSpec(enabled=False), "iter"),
        "full": compile_fa4(spec, "full"),
        "tile_lean": compile_fa4(profile_spec(fi.events_for("full"), 3, nb, 128, baked=BAKED, mode="lean"), "tile"),
        "full_lean": compile_fa4(profile_spec(fi.events_for("full"), 3, nb, 128, baked=BAKED, mode="lean"), "full"),
        "spec": spec,
    }


def test_fa4_disabled_is_fa4(fa4_ptx):
    assert normalize(fa4_ptx["off"]) == normalize(fa4_ptx["fa4"])


def test_fa4_instrumented_compiles_and_differs_only_by_profiler(fa4_ptx):
    fi = import_example("fa4_sm90", "fa4_instrumented")
    assert non_profiler_difference(fa4_ptx["fa4"], fa4_ptx["full"]) == {}
    assert set(fa4_ptx["spec"].events.as_dict().values()) == set(fi.events_for("full"))
    assert str(BAKED) in fa4_ptx["full"]  # the buffer address is an immediate: FA4's signature is unchanged


def test_fa4_lean_tile_view_differs_only_by_profiler(fa4_ptx):
    """The lean per-tile view (the README's <=2% FA4 view): only profiler code added, each slot taken from
    the lane's state in shared memory."""
    assert non_profiler_difference(fa4_ptx["fa4"], fa4_ptx["tile_lean"]) == {}
    assert "atom.shared.add.u32" in fa4_ptx["tile_lean"] and str(BAKED) in fa4_ptx["tile_lean"]


def test_fa4_lean_leaf_regions_take_both_slots_at_their_begin(fa4_ptx):
    """At detail `full`, FA4's leaf regions (softmax, the producer's load_K / load_V, the epilogue) take
    both slots with one atomic at their BEGIN and store at their END; the other records (n_block, which
    holds softmax; the role regions and mainloop, which hold FA4's loops) load the lane state alone."""
    assert non_profiler_difference(fa4_ptx["fa4"], fa4_ptx["full_lean"]) == {}
    amounts = re.findall(r"atom\.shared\.add\.u32 [^;]*\], (\d);", fa4_ptx["full_lean"])
    assert len(amounts) >= 4 and set(amounts) == {"2"}, amounts
    assert "@p ld.volatile.shared.v2.u32" in fa4_ptx["full_lean"]


def test_fa4_detail_levels_are_cumulative():
    pytest.importorskip("torch")
    pytest.importorskip("flash_attn.cute.flash_fwd_sm90")
    fi = import_example("fa4_sm90", "fa4_instrumented")
    levels = [fi.events_for(d) for d in fi.DETAILS]
    for coarse, fine in itertools.pairwise(levels):
        assert fine[: len(coarse)] == coarse and len(fine) > len(coarse)
    with pytest.raises(ValueError, match="detail"):
        fi.events_for("everything")


# --- committed captures ---------------------------------------------------------------------------------


def _load(example: str):
    from host_decode.load.capture import load_capture

    path = EXAMPLES / example / "capture.npy"
    if not path.exists():
        pytest.skip(f"{path} not committed yet")
    side = json.loads(path.with_suffix(".json").read_text())
    return load_capture(path), side


def _per_lane_counts(trace, event_name: str) -> dict[int, int]:
    ids = {v: k for k, v in trace.names.events.items()}
    sp = trace.spans[trace.spans["event"] == ids[event_name]]
    lanes, counts = np.unique(sp["lane"], return_counts=True)
    return dict(zip(lanes.tolist(), counts.tolist()))


def test_pipeline_capture_structure():
    trace, side = _load("pipeline")
    p = side["example"]
    blocks = (p["m"] // p["tile_m"]) * (p["n"] // p["tile_n"])
    k_tiles = p["k"] // p["tile_k"]
    assert trace.loss.lost == 0 and trace.num_blocks == blocks and trace.num_groups == 3
    assert [trace.names.group(g) for g in range(3)] == ["producer", "consumer_0", "consumer_1"]
    lanes = np.arange(blocks * 3)
    producers, consumers = lanes[lanes % 3 == 0], lanes[lanes % 3 != 0]
    for event in ("wait_slot", "issue_tma"):
        assert _per_lane_counts(trace, event) == {int(lane): k_tiles for lane in producers}
    for event in ("wait_data", "mma"):
        assert _per_lane_counts(trace, event) == {int(lane): k_tiles for lane in consumers}
    for event in ("tile", "epilogue"):
        assert _per_lane_counts(trace, event) == {int(lane): 1 for lane in consumers}


def test_megakernel_capture_structure():
    trace, side = _load("megakernel")
    p = side["example"]
    assert trace.loss.lost == 0 and trace.num_groups == 1 and trace.num_blocks == p["num_ctas"]
    for kind, count in p["items_by_kind"].items():
        assert sum(_per_lane_counts(trace, kind).values()) == count
    # every CTA fetches once per item it ran plus once more to find the queue empty
    fetches = _per_lane_counts(trace, "fetch")
    assert sum(fetches.values()) == p["items"] + p["num_ctas"]
    sms = trace.lanes["sm"]
    assert (sms >= 0).all()  # FINALIZE carried each CTA's SM id


def test_fa4_capture_structure():
    trace, side = _load("fa4_sm90")
    p = side["example"]
    m_blocks = -(-p["seqlen"] // p["tile_m"])
    n_blocks_total = -(-p["seqlen"] // p["tile_n"])
    assert trace.loss.lost == 0 and trace.num_groups == 3
    assert trace.num_blocks == p["batch"] * p["heads"] * m_blocks
    lanes = np.arange(trace.num_blocks * 3)
    consumers = lanes[lanes % 3 != 0]
    for event in ("consumer", "wait_Q", "mainloop", "epilogue"):
        assert _per_lane_counts(trace, event) == {int(lane): 1 for lane in consumers}
    # intra-warpgroup overlap: the first n-block is a "first half", the rest are full iterations
    n_iter = _per_lane_counts(trace, "n_block")
    waits_k = _per_lane_counts(trace, "wait_K")
    total_iters = sum(n_iter.values())
    if p["causal"]:
        # m-block i sees i+1 key blocks (tile_m == tile_n): sum over m-blocks of i, per head and consumer
        expected = 2 * p["batch"] * p["heads"] * sum(range(m_blocks))
    else:
        expected = 2 * p["batch"] * p["heads"] * m_blocks * (n_blocks_total - 1)
    assert total_iters == expected
    # K waits are recorded only when the try-wait poll saw the stage not ready: at most one per n-block
    # (first half included), and never outside an iteration's lane
    assert sum(waits_k.values()) <= total_iters + len(consumers)
    assert set(waits_k) <= {int(lane) for lane in consumers}


# --- the FA4 runner's trace analysis (numpy only) --------------------------------------------------------


def _fa4_runner():
    return load_script(EXAMPLES / "fa4_sm90" / "run.py", "ikp_fa4_example_run")


def test_consumer_wait_share_counts_only_waits_inside_each_iteration():
    from host_decode.core import wire
    from host_decode.core.decoder import decode
    from host_decode.core.model import Names

    begin, end = int(wire.EventType.BEGIN), int(wire.EventType.END)
    n_block, wait_k, wait_v = 5, 6, 7
    # lane 1: n_block [100,200] holding wait_K [110,130]; n_block [200,400] holding wait_V [300,380];
    # a wait_K [400,410] after the last iteration (the first-half block's wait): inside no iteration
    records = [(100, n_block, begin), (110, wait_k, begin), (130, wait_k, end), (200, n_block, end),
               (200, n_block, begin), (300, wait_v, begin), (380, wait_v, end), (400, n_block, end),
               (400, wait_k, begin), (410, wait_k, end)]
    write_stride, per_lane = 3, 16
    buf = np.zeros(wire.buffer_slots(write_stride, per_lane), np.uint64)
    buf[0] = wire.pack_header(1, 3)
    for k, (t, event, kind) in enumerate(records):
        buf[wire.slot_index(1, k + wire.ANCHOR_RECORDS, write_stride)] = np.uint64(
            wire.pack_record(t, int(wire.make_tag(1, event, kind))))
    trace = decode(buf, names=Names(events={n_block: "n_block", wait_k: "wait_K", wait_v: "wait_V"}),
                   write_stride=write_stride)
    share = _fa4_runner().consumer_wait_share(trace)
    assert share["n_block_iterations"] == 2
    assert share["wait_share_total"] == pytest.approx((20 + 80) / 300)
    assert share["wait_share_p50"] == pytest.approx((0.2 + 0.4) / 2)


def test_fa4_variants_name_recorders_that_exist():
    """The FA4 tables and ablations name their recorder classes (ikp_cute.testing.record_variants) by
    string, resolved only on the GPU machine: a misspelt or removed one must fail here, on the CPU."""
    pytest.importorskip("cutlass")
    from ikp_cute.testing import record_variants

    run = load_script(EXAMPLES / "fa4_sm90" / "run.py", "ikp_fa4_run_under_test")
    named = [
        options["recorder_class"]
        for table in (run.VARIANTS, run.LEAN_AB, run.ABLATIONS)
        for _, options in table.values()
        if "recorder_class" in options
    ]
    assert named and all(isinstance(getattr(record_variants, name, None), type) for name in named), named
    assert run.with_recorder_class({"recorder_class": named[0]})["recorder_class"] is getattr(record_variants, named[0])
