"""pc2region on the adversarial suite (tests/kernels_pc2region/suite): committed cubins of CUDA C++
kernels (nvcc 13 -O3, sm_90a) and CuTe DSL kernels (sm_90a and sm_100a), judged against ground truth
that does not come from pc2region: the `// @ path` line annotations of each source, line info from
nvdisasm, and the instructions the compiler moved across a timer read, checked by hand (`moved:`).

Each class of issue 19 has its reproducing kernel here; a test fails if any judged instruction is
wrong, or if an <ambiguous> PC has no reason in the map.
"""

from __future__ import annotations

import os
import sys

import pytest

from host_decode.core.errors import DecodeError
from host_decode.hardware import cfg, pc2region, sass
from host_decode.hardware.region_map import AMBIGUOUS

SUITE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "kernels_pc2region", "suite"))
sys.path.insert(0, SUITE)
import accuracy  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sass.nvdisasm_available(), reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)"
)


def test_cubins_were_built_from_these_sources():
    """Line annotations only mean something for the source the cubin was compiled from: after editing a
    source, rebuild (build.sh / cute_suite.py), re-check the `moved:` PCs, then `accuracy.py --manifest`."""
    import json

    with open(accuracy.MANIFEST) as f:
        assert json.load(f) == accuracy.source_hashes()


@pytest.mark.parametrize("case", accuracy.CASES, ids=[c[0] for c in accuracy.CASES])
def test_suite_case_has_no_wrong_instruction(case):
    _, source, cubin, kernel = case
    m, rows = accuracy.run_case(source, cubin, kernel)
    assert rows, "nothing judged: the annotations no longer match the cubin's line info"
    wrong = [r for r in rows if r["verdict"] == "wrong"]
    assert not wrong, wrong[:5]
    for pc, region in zip(m.pc, m.region):
        if m.paths[region] == AMBIGUOUS:
            assert int(pc) in m.reasons, f"pc {int(pc):#x} is <ambiguous> without a reason"


def _case(name_start: str, kernel: str | None = None):
    for name, source, cubin, k in accuracy.CASES:
        if name.startswith(name_start) and (kernel is None or k == kernel):
            return accuracy.run_case(source, cubin, k)
    raise KeyError(name_start)


def test_suite_noinline_helper():
    """Class 1: the Profiler passed by reference lives in local memory; the helper's tags are
    LDL-reloaded lane bits | constant, resolved through the STLs to the same frame offset."""
    m, rows = _case("1 ")
    # anchors (2), OUTER begin/end, the helper's STEP and INNER begin/end (one copy, called twice), FINALIZE
    assert len(m.markers) == 9 and all(mk["how"].startswith("dataflow") for mk in m.markers)
    helper_pc = min(pc for name, pc in _helper_symbols().items())
    in_helper = sorted((mk["event"], mk["event_type"]) for mk in m.markers if mk["pc"] >= helper_pc)
    assert in_helper == [("INNER", 0), ("INNER", 1), ("STEP", 0), ("STEP", 1)]
    assert not [p for p in m.problems if "not resolved" in p]
    assert {r["got"] for r in rows} == {"<outside>", "OUTER/STEP", "OUTER/STEP/INNER"}


def _helper_symbols():
    blob = pc2region.read_cubin(os.path.join(SUITE, "helper.sm_90a.cubin"))
    fn = sass.select_function(sass.parse_listing(sass.disassemble(blob)), None)
    return {k: v for k, v in fn.symbols.items() if "step" in k}


def test_line_fallback_refuses_a_line_shared_by_different_events():
    """Class 1 with --marker-table: markers of an inlined helper all sit on the helper's line; that
    line must not resolve an unknown marker to one of them."""
    lane = ["S2R R0, SR_CTAID.X", "IMAD.SHL.U32 R7, R0, 0x1000, RZ", "LDC.64 R4, c[0x0][0x210]"]

    def mark(tag_setup):
        return ["S2UR UR6, SR_GLOBALTIMERLO", "NOP", *tag_setup, "MOV R3, UR6", "STG.E.64 desc[UR4][R4.64], R2"]

    unknown = [
        "LDG.E R9, desc[UR4][R4.64]",
        "LOP3.LUT R2, R9, 0xffc, RZ, 0xc0, !PT",  # id bits unknown
        "LOP3.LUT R2, R2, 0x1, R7, 0xfe, !PT",  # END | lane
    ]
    helper_line = ['//## File "ikp.cuh", line 118']
    lines = lane + helper_line + mark(["IADD3 R2, R7, 0x8, RZ"]) + helper_line + mark(["IADD3 R2, R7, 0xd, RZ"])
    lines += helper_line + mark(unknown) + ["EXIT"]
    listing = "//--------------------- .text.k --------------------------\nk:\n" + "".join(
        line + "\n" if line.startswith("//##") else f"        /*{16 * k:04x}*/ {line} ;\n"
        for k, line in enumerate(lines)
    )
    m = pc2region.build_map(b"", listing=listing)
    assert [mk["how"] for mk in m.markers] == ["dataflow", "dataflow", "unresolved"]
    assert any("2 different event ids" in p for p in m.problems)
    last = [pc for pc, r in zip(m.pc, m.region) if m.paths[r] == AMBIGUOUS]
    assert last and all("not resolved" in m.reasons[int(pc)] for pc in last)


def test_suite_jump_table():
    """Class 2: each BRX goes to its BRANCH_TARGETS only (3 per table), never to the entry."""
    blob = pc2region.read_cubin(os.path.join(SUITE, "switch.sm_90a.cubin"))
    fn = sass.select_function(sass.parse_listing(sass.disassemble(blob)), None)
    prog = cfg.build_program(fn)
    brx = [i for i, x in enumerate(fn.instructions) if x.base == "BRX"]
    assert len(brx) == 3
    for i in brx:
        assert len(prog.succ[i]) == 3 and 0 not in prog.succ[i]
        assert {fn.labels[t] for t in fn.instructions[i].targets} == {fn.instructions[s].pc for s in prog.succ[i]}
    m, _ = _case("2 ")
    assert m.summary()[AMBIGUOUS] == 0 and not m.problems


def test_suite_indirect_call():
    """Class 3: CALL.REL.NOINC R6 through a function pointer: a stated problem naming the candidate
    subroutines, no recursion, nothing ambiguous."""
    m, _ = _case("3 ")
    assert len(m.problems) == 1 and "indirect call through R6" in m.problems[0] and "op_add" in m.problems[0]
    assert m.summary()[AMBIGUOUS] == 0
    assert all(mk["how"].startswith("dataflow") for mk in m.markers)


@pytest.mark.parametrize("kernel", ["unbalanced_kernel", "bare_end_kernel"])
def test_suite_unbalanced_region(kernel):
    """Class 4: `begin(OPEN); if (v > 10) { end(OPEN); ... }` is no capacity guard: what follows the
    merge is <ambiguous> (OPEN may still be open) and the divergence is a problem."""
    m, rows = _case("4 ", kernel)
    assert any("one path only" in p for p in m.problems)
    after = [r for r in rows if r["expected"] == ("?",)]
    assert after and all(r["got"] == AMBIGUOUS for r in after)
    assert any("meet at pc" in m.reasons[r["pc"]] for r in after)


def test_suite_tail_merged_guards():
    """Class 5: `@P0 BRA t; <END record>; BRA t` after an if/else arm is a guard: the epilogue after
    __syncthreads is not ambiguous."""
    m, rows = _case("5 ")
    assert m.summary()[AMBIGUOUS] == 0 and not m.problems
    assert {r["got"] for r in rows} >= {"EPILOGUE", "CONSUMER/MMA", "PRODUCER/LOAD"}


@pytest.mark.parametrize("kernel", ["last3", "last5", "last6", "last7", "groups3", "groups7"])
def test_suite_group_counts(kernel):
    """Class 6: lane bits = block * (G << 12) with G not a power of two: the product's trailing zeros."""
    m, _ = _case("6 ", kernel)
    assert m.markers and all(mk["how"].startswith("dataflow") for mk in m.markers) and not m.problems


def test_suite_kernel_without_markers(tmp_path, capsys):
    """Class 7: --kernel finds a kernel without markers, whose map says so; the CLI refuses it (exit 2,
    the reason on stderr, nothing written)."""
    from host_decode.cli import main

    cubin = os.path.join(SUITE, "foreign.sm_90a.cubin")
    m = pc2region.build_map(pc2region.read_cubin(cubin), kernel="plain_kernel")
    assert m.kernel == "plain_kernel" and not m.markers
    assert any("has no ikp v1 markers" in p for p in m.problems)
    out = tmp_path / "map.json"
    assert main(["pc2region", cubin, "--kernel", "plain_kernel", "-o", str(out)]) == 2
    assert "has no ikp v1 markers" in capsys.readouterr().err and not out.exists()


def test_errors_name_the_users_file(tmp_path):
    bad = tmp_path / "user_kernel.cubin"
    bad.write_bytes(b"\x7fELF" + b"\0" * 60)
    with pytest.raises(DecodeError) as e:
        pc2region.build_map(bad.read_bytes(), source=str(bad))
    assert str(bad) in str(e.value) and "ikp_sass_" not in str(e.value)


def test_suite_foreign_markers_are_named():
    """Class 8: IKET-style 32-bit timer|tag words and bare 64-bit timestamps are recognised and named."""
    m, _ = _case("8 ")
    text = "\n".join(m.problems)
    assert "IKET style" in text and "tag 0x5" in text and "shared memory" in text
    assert "64-bit %globaltimer timestamp without a tag" in text
    assert "next to a word with no known tag bits" in text  # a (timer, payload) pair
    assert not m.markers


def test_suite_sm_100a_cute_dsl():
    """sm_100a listings (BRA.U !UP0 predicate operands, uniform datapath) map like sm_90a ones."""
    for arch in ("sm_90a", "sm_100a"):
        m, rows = _case(f"CuTe DSL warp-specialized roles, barriers ({arch})")
        assert not m.problems and m.summary()[AMBIGUOUS] == 0
        assert {r["got"] for r in rows} == {"load", "mma/mma_half", "epilogue", "epilogue/branch", "<outside>"}


FA4_EVENTS = ["producer", "consumer", "wait_Q", "mainloop", "epilogue", "n_block", "wait_K", "wait_V", "softmax",
              "load_K", "load_V", "wait_empty_K", "wait_empty_V", "wait_empty_Q"]  # fmt: skip


def test_fa4_full_detail_regions():
    """FA4's sm90 forward with full-detail regions (suite/build_fa4.py): waits recorded only when they
    block (`if blocked: begin(w)` ... `if blocked: end(w)`) stay balanced. Checked by what the
    instructions are: every HGMMA under consumer/mainloop, every TMA load in the producer, the exp2 of
    softmax (MUFU.EX2) in softmax; the 5 PCs between a wait's two branches are <ambiguous> with a reason
    (inside the wait only when it blocked). Before: 1,338 <ambiguous>; main's version did not finish in
    14 minutes (12.8 GB)."""
    names = dict(enumerate(FA4_EVENTS))
    m = pc2region.build_map(pc2region.read_cubin(os.path.join(SUITE, "fa4_full.sm_90a.cubin")), names=names)
    assert all(mk["how"].startswith("dataflow") for mk in m.markers) and len(m.markers) == 48
    path = [m.paths[r] for r in m.region]
    assert path.count(AMBIGUOUS) <= 5
    assert all(int(pc) in m.reasons for pc, p in zip(m.pc, path) if p == AMBIGUOUS)
    ops = list(zip(m.opcode, path))
    assert all(p.startswith("consumer/mainloop") for op, p in ops if op.startswith("HGMMA"))
    assert all(p.startswith("producer") for op, p in ops if op.startswith("UTMALDG"))
    ex2 = [p for op, p in ops if op.startswith("MUFU.EX2")]
    assert len(ex2) >= 128 and all(p.endswith("softmax") for p in ex2)
