"""pc2region: maps of real cubins checked against their known program structure, and small
hand-written SASS listings for each control-flow / tag shape.

Real cubins: tests/kernels_pc2region/markers.sm_90a.cubin (committed; source markers.cu next to it,
expected PC ranges read off its listing by hand), the same source recompiled with nvcc when present,
a CuTe DSL kernel compiled on the CPU (cute_loop.py), and a kernel using cuda_include/ikp.cuh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from host_decode.core.errors import DecodeError
from host_decode.hardware import pc2region, sass
from host_decode.hardware.pc2region import AMBIGUOUS, OUTSIDE, UNREACHABLE

TESTS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # tests/
KDIR = os.path.join(TESTS, "kernels_pc2region")
MARKERS_CUBIN = os.path.join(KDIR, "markers.sm_90a.cubin")
MARKERS_NAMES = {1: "outer", 2: "body", 3: "slow", 4: "inner"}
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)


needs_nvdisasm = pytest.mark.skipif(
    not sass.nvdisasm_available(), reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)"
)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def _pcs(ranges):
    return {pc for a, b in ranges for pc in range(a, b + 16, 16)}


def _check_complete(m):
    """Every PC is classified exactly once and the special buckets exist."""
    assert m.region.shape == m.pc.shape
    assert set(m.paths[:3]) == {OUTSIDE, AMBIGUOUS, UNREACHABLE}
    assert m.region.min() >= 0 and m.region.max() < len(m.paths)
    assert np.all(np.diff(m.pc) == 16)


# ================================================================================================
# the committed CUDA C++ cubin: exact PC sets
# ================================================================================================


@needs_nvdisasm
def test_markers_cubin_exact_regions():
    m = pc2region.build_map(open(MARKERS_CUBIN, "rb").read(), names=MARKERS_NAMES)
    _check_complete(m)
    assert m.problems == []
    expected = {
        OUTSIDE: _pcs([(0x0000, 0x0070), (0x0CC0, 0x0D50)]),  # before OUTER begin; result store + EXIT
        "outer": _pcs(
            [
                (0x0080, 0x02E0),
                (0x0370, 0x03B0),
                (0x0450, 0x04A0),
                (0x0540, 0x0590),
                (0x0630, 0x07B0),
                (0x0870, 0x0970),
                (0x0B00, 0x0B70),
                (0x0C40, 0x0CB0),
            ]
        ),
        # the 4x unrolled loop (four copies) and its remainder loop
        "outer/body": _pcs([(0x02F0, 0x0360), (0x03C0, 0x0440), (0x04B0, 0x0530), (0x05A0, 0x0620), (0x07C0, 0x0860)]),
        # the branch-only region, plus helper() and the division slow path placed after EXIT
        "outer/slow": _pcs([(0x0980, 0x0AF0), (0x0D60, 0x1800)]),
        "outer/inner": _pcs([(0x0B80, 0x0C30)]),
        UNREACHABLE: _pcs([(0x1810, 0x18F0)]),  # the BRA-to-self + NOP padding
        AMBIGUOUS: set(),
    }
    assert set().union(*expected.values()) == set(int(p) for p in m.pc)  # the expectation covers every PC
    for path, pcs in expected.items():
        assert m.pcs_in(path) == pcs, path


@needs_nvdisasm
def test_markers_cubin_markers_and_cost():
    m = pc2region.build_map(open(MARKERS_CUBIN, "rb").read(), names=MARKERS_NAMES)
    kinds = [(mk["event"], mk["event_type"]) for mk in m.markers]
    assert kinds.count(("outer", 0)) == kinds.count(("outer", 1)) == 1
    assert kinds.count(("body", 0)) == kinds.count(("body", 1)) == 5  # 4 unrolled copies + remainder
    assert kinds.count(("slow", 0)) == kinds.count(("slow", 1)) == 1
    assert kinds.count(("inner", 0)) == kinds.count(("inner", 1)) == 1
    assert all(mk["how"] == "dataflow" for mk in m.markers)
    # every timer read and every record store is counted as instrumentation, nothing else of the kernel's work
    ops = np.array(m.opcode)
    assert m.is_marker[np.char.startswith(ops.astype(str), "S2UR")].all()
    assert not m.is_marker[np.isin(ops, ["FFMA", "LDG.E", "EXIT", "CALL.REL.NOINC", "BRA"])].any()
    stores = np.flatnonzero(ops == "STG.E.64")
    assert m.is_marker[stores].all()


@needs_nvdisasm
def test_subroutines_after_exit_follow_their_call_site():
    """A linear scan would put helper() (after EXIT) outside every region; the CFG walk does not."""
    cubin = open(MARKERS_CUBIN, "rb").read()
    fn = sass.select_function(sass.parse_listing(sass.disassemble(cubin)), "markers")
    m = pc2region.build_map(cubin, names=MARKERS_NAMES)
    exit_pc = max(x.pc for x in fn.instructions if x.base == "EXIT")
    subs = {name: pc for name, pc in fn.symbols.items() if name != "markers"}
    assert len(subs) == 2 and all(pc > exit_pc for pc in subs.values())
    path = m.path_of_pc()
    for pc in subs.values():
        assert path[pc] == "outer/slow"


@needs_nvdisasm
def test_map_json_round_trip(tmp_path):
    cubin = open(MARKERS_CUBIN, "rb").read()
    m = pc2region.build_map(cubin, names=MARKERS_NAMES)
    out = tmp_path / "map.json"
    m.save(str(out))
    obj = json.loads(out.read_text())
    assert obj["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
    assert obj["kernel"] == "markers"
    back = pc2region.load_map(str(out))
    for col in ("pc", "region", "is_marker", "line", "ends_flow"):
        assert np.array_equal(getattr(back, col), getattr(m, col)), col
    assert back.paths == m.paths and back.opcode == m.opcode and back.stacks == m.stacks


def test_load_map_refuses_garbage(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(DecodeError, match="not a pc2region map"):
        pc2region.load_map(str(bad))
    bad.write_text("{not json")
    with pytest.raises(DecodeError, match="not JSON"):
        pc2region.load_map(str(bad))
    obj = {
        "format": pc2region.MAP_FORMAT,
        "kernel": "k",
        "pc": [0, 16],
        "opcode": ["NOP"],
        "region": [0, 0],
        "is_marker": [0, 0],
        "line": [-1, -1],
        "ends_flow": [0, 0],
        "paths": ["<outside>"],
        "stacks": [None],
    }
    with pytest.raises(DecodeError, match="differ in length"):
        pc2region.load_map(obj)


def test_not_a_cubin():
    with pytest.raises(DecodeError, match="ELF"):
        pc2region.build_map(b"hello world, not a cubin")


@needs_nvdisasm
def test_kernel_selection_errors():
    cubin = open(MARKERS_CUBIN, "rb").read()
    with pytest.raises(DecodeError, match="not found"):
        pc2region.build_map(cubin, kernel="no_such_kernel")


# ================================================================================================
# recompiled sources (structure checks that do not depend on the exact schedule)
# ================================================================================================


def _structure_checks(m, fn, events):
    _check_complete(m)
    path = m.path_of_pc()
    ins = fn.instructions
    assert not any(p == AMBIGUOUS for p in path.values())
    first_timer = min(x.pc for x in ins if "SR_GLOBALTIMER" in x.text)
    assert all(path[x.pc] == OUTSIDE for x in ins if x.pc < first_timer)
    exits = [x.pc for x in ins if x.base == "EXIT"]
    assert all(path[pc] == OUTSIDE for pc in exits)
    last_ret_or_exit = max(x.pc for x in ins if x.base in ("EXIT", "RET"))
    assert all(path[x.pc] == UNREACHABLE for x in ins if x.pc > last_ret_or_exit)
    assert not any(path[x.pc] == UNREACHABLE for x in ins if x.pc <= last_ret_or_exit and x.base != "NOP")
    return path


@needs_nvdisasm
@needs_nvcc
def test_markers_cu_recompiled(tmp_path):
    out = tmp_path / "markers.cubin"
    subprocess.run(
        [NVCC, "-arch=sm_90a", "-cubin", "-lineinfo", "-O3", "-o", str(out), os.path.join(KDIR, "markers.cu")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    cubin = out.read_bytes()
    fn = sass.select_function(sass.parse_listing(sass.disassemble(cubin)), None)
    m = pc2region.build_map(cubin, names=MARKERS_NAMES)
    path = _structure_checks(m, fn, MARKERS_NAMES)
    for x in fn.instructions:
        if x.base == "FFMA" and "1.5" in x.operands:
            assert path[x.pc] == "outer/body", hex(x.pc)
        if x.base == "FFMA" and "3.25" in x.operands:
            assert path[x.pc] == "outer/inner", hex(x.pc)
    for name, pc in fn.symbols.items():
        if name != fn.name:
            assert path[pc] == "outer/slow"


def _compile_cute_loop(tmp_path, arch="sm_90a"):
    pytest.importorskip("cutlass")
    from tests.support.scripts import load_script

    mod = load_script(os.path.join(KDIR, "cute_loop.py"), "cute_loop")
    return mod, mod.compile_loop_kernel(dump_dir=str(tmp_path), arch=arch)


@needs_nvdisasm
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_cute_dsl_kernel(tmp_path, arch):
    """Hopper listings guard branches with `@!P0 BRA`, Blackwell ones with `BRA.U !UP0, target`."""
    mod, compiled = _compile_cute_loop(tmp_path, arch)
    m = pc2region.map_compiled(compiled, names=mod.EVENTS)
    listing = sass.disassemble(compiled.__cubin__)
    assert f".target\t{arch}" in listing or f"EF_CUDA_SM{arch[3:-1]}" in listing  # the arch asked for
    fn = sass.select_function(sass.parse_listing(listing), None)
    assert m.problems == []
    path = _structure_checks(m, fn, mod.EVENTS)
    kinds = [(mk["event"], mk["event_type"]) for mk in m.markers]
    assert kinds.count(("outer", 0)) == kinds.count(("outer", 1)) == 1
    assert kinds.count(("branch", 0)) == kinds.count(("branch", 1)) == 1
    assert kinds.count(("body", 0)) == kinds.count(("body", 1)) >= 2  # the range loop is unrolled
    ffma = [x for x in fn.instructions if x.base == "FFMA"]
    assert ffma and all(path[x.pc] == ("outer/body" if "1.5" in x.operands else "outer/branch") for x in ffma)
    assert set(m.summary()) >= {"outer", "outer/body", "outer/branch"}
    assert m.cubin_sha256 == hashlib.sha256(compiled.__cubin__).hexdigest()


# ================================================================================================
# hand-written listings: one shape each
# ================================================================================================


def _listing(name: str, lines: list[str]) -> str:
    out = [
        f"//--------------------- .text.{name}                  --------------------------",
        f"        .type           {name},@function",
        f"{name}:",
    ]
    pc = 0
    for line in lines:
        s = line.strip()
        if s.endswith(":") or s.startswith("//##") or s.startswith(".type"):
            out.append(("        " + s) if s.startswith(".type") else s)
        else:
            out.append(f"        /*{pc:04x}*/                   {s} ;")
            pc += 16
    return "\n".join(out) + "\n"


def _map(lines, **kw):
    return pc2region.build_map(b"", listing=_listing("k", lines), **kw)


LANE = ["S2R R0, SR_CTAID.X", "IMAD.SHL.U32 R7, R0, 0x1000, RZ", "LDC.64 R4, c[0x0][0x210]"]


def _mark(tag_setup: list[str], tag_reg: int = 2) -> list[str]:
    return [
        "S2UR UR6, SR_GLOBALTIMERLO",
        "NOP",
        *tag_setup,
        f"MOV R{tag_reg + 1}, UR6",
        f"STG.E.64 desc[UR4][R4.64], R{tag_reg}",
    ]


def test_tag_shapes_hfma2_lop3_iadd3_lea():
    lines = LANE + _mark(["HFMA2.MMA R2, -RZ, RZ, 0, 2.384185791015625e-07"])  # 0x0004: event 1 begin
    lines += _mark(["LOP3.LUT R2, R7, 0x9, RZ, 0xfc, !PT"])  # lane | 0x9: event 2 begin + type 1 = end of 2
    lines += _mark(["IADD3 R2, R7, 0x8, RZ"])  # event 2 begin
    lines += _mark(["LEA R2, R0, 0x9, 0xc"])  # (ctaid << 12) + 0x9: event 2 end
    lines += _mark(["IMAD.MOV.U32 R2, RZ, RZ, 0x5"])  # event 1 end
    lines += ["EXIT"]
    m = _map(lines)
    got = [(mk["event_id"], mk["event_type"], mk["how"]) for mk in m.markers]
    assert got == [
        (1, 0, "dataflow"),
        (2, 1, "dataflow"),
        (2, 0, "dataflow"),
        (2, 1, "dataflow"),
        (1, 0 + 1, "dataflow"),
    ]
    # the first LOP3 END of 2 has no open BEGIN of 2: reported, not guessed
    assert any("END of event 2 with no open BEGIN" in p for p in m.problems)


def test_timer_in_low_register_and_cs2r():
    lines = LANE + [
        "CS2R.32 R3, SR_GLOBALTIMERLO",
        "VIADD R2, R7, 0x4",
        "STG.E.64 desc[UR4][R4.64], R2",
        "FFMA R9, R9, R9, R9",
        "CS2R.32 R2, SR_GLOBALTIMERLO",
        "VIADD R3, R7, 0x5",
        "STG.E.64 desc[UR4][R4.64], R2",
        "EXIT",
    ]
    m = _map(lines, names={1: "a"})
    assert [(mk["event_id"], mk["event_type"]) for mk in m.markers] == [(1, 0), (1, 1)]
    assert m.path_of_pc()[0x50] == "a"  # the FFMA between them


def test_predicated_tag_definitions_under_the_same_guard():
    """ptxas if-converts `if (slot < cap) store(...)`: the guarded definitions reach the guarded store,
    the unguarded older ones do not (else the tag would look unknown)."""
    lines = LANE + [
        "VIADD R2, R7, 0x7",  # an older, different tag value in R2
        "ISETP.GE.AND P0, PT, R0, 0x10, PT",
        "@!P0 CS2R.32 R3, SR_GLOBALTIMERLO",
        "@!P0 VIADD R2, R7, 0x4",
        "@!P0 STG.E.64 desc[UR4][R4.64], R2",
        "FFMA R9, R9, R9, R9",
        "@!P0 CS2R.32 R3, SR_GLOBALTIMERLO",
        "@!P0 VIADD R2, R7, 0x5",
        "@!P0 STG.E.64 desc[UR4][R4.64], R2",
        "EXIT",
    ]
    m = _map(lines, names={1: "a"})
    assert [(mk["event_id"], mk["event_type"]) for mk in m.markers] == [(1, 0), (1, 1)]
    assert m.problems == []
    assert m.path_of_pc()[0x90] == "a"


def test_guard_rewritten_between_def_and_store_is_not_trusted():
    lines = LANE + [
        "VIADD R2, R7, 0x7",
        "ISETP.GE.AND P0, PT, R0, 0x10, PT",
        "@!P0 VIADD R2, R7, 0x4",
        "ISETP.GE.AND P0, PT, R0, 0x20, PT",  # P0 rewritten: the guarded def may not have run
        "@!P0 CS2R.32 R3, SR_GLOBALTIMERLO",
        "@!P0 STG.E.64 desc[UR4][R4.64], R2",
        "EXIT",
    ]
    m = _map(lines)
    (mk,) = m.markers
    assert mk["how"] == "unresolved"  # 0x4 and 0x7 both reach: bits disagree
    assert any("not resolved" in p for p in m.problems)


def test_marker_table_and_line_fallback_resolve_unknown_bits():
    unknown_id = [
        "LDC R9, c[0x0][0x220]",
        "LOP3.LUT R2, R9, 0xffc, RZ, 0xc0, !PT",  # id bits unknown
        "LOP3.LUT R2, R2, 0x1, R7, 0xfe, !PT",
    ]  # | 1 | lane: type END known
    lines = LANE + ['//## File "k.cu", line 10'] + _mark(["IADD3 R2, R7, 0xc, RZ"])  # event 3 begin
    lines += ["FFMA R9, R9, R9, R9", '//## File "k.cu", line 11'] + _mark(unknown_id) + ["EXIT"]
    m = _map(lines)
    assert [mk["how"] for mk in m.markers] == ["dataflow", "unresolved"]
    m = _map(lines, marker_table=[(3, 0), (3, 1), (4, 0)])
    assert [(mk["event_id"], mk["event_type"], mk["how"]) for mk in m.markers] == [(3, 0, "dataflow"), (3, 1, "table")]
    assert m.problems == []
    # same source line as a resolved END marker (an unrolled copy): resolved from line info
    lines2 = LANE + _mark(["IADD3 R2, R7, 0xc, RZ"]) + ['//## File "k.cu", line 11'] + _mark(["IADD3 R2, R7, 0xd, RZ"])
    lines2 += _mark(["IADD3 R2, R7, 0xc, RZ"]) + ['//## File "k.cu", line 11'] + _mark(unknown_id) + ["EXIT"]
    m = _map(lines2)
    assert [mk["how"] for mk in m.markers] == ["dataflow", "dataflow", "dataflow", "line"]
    assert m.problems == []


def test_reserved_instants_and_finalize_are_not_boundaries():
    anchor = 0x3FE << 2 | 2  # ANCHOR_LO instant
    lines = LANE + _mark([f"IADD3 R2, R7, {anchor:#x}, RZ"]) + _mark(["IADD3 R2, R7, 0x4, RZ"])
    lines += (
        ["FFMA R9, R9, R9, R9"]
        + _mark(["S2R R11, SR_SMID", "LEA R2, R11, 0x3, 0x2"])
        + _mark(["IADD3 R2, R7, 0x5, RZ"])
        + ["EXIT"]
    )
    m = _map(lines, names={1: "a"})
    types = [(mk["event_id"], mk["event_type"]) for mk in m.markers]
    assert types == [(0x3FE, 2), (1, 0), (None, 3), (1, 1)]
    assert m.problems == []
    # the FFMA, the finalize marker's own instructions: all inside "a" (neither instant ended it)
    assert m.summary()["a"] >= 1 + 5 + 2
    assert m.path_of_pc()[int(m.markers[2]["pc"])] == "a"


def test_calls_return_to_their_own_call_site():
    """helper() called from region a and from region b: its PCs are ambiguous, but the code after each
    call stays in its caller's region (the states carry a call stack)."""
    lines = LANE + _mark(["IADD3 R2, R7, 0x4, RZ"])  # a begin
    lines += ["MOV R20, 0x0", "CALL.REL.NOINC `(helper)", "FFMA R9, R9, R9, R9"]  # after the call: a
    lines += _mark(["IADD3 R2, R7, 0x5, RZ"])  # a end
    lines += _mark(["IADD3 R2, R7, 0x8, RZ"])  # b begin
    lines += ["CALL.REL.NOINC `(helper)", "FFMA R10, R10, R10, R10"]  # after the call: b
    lines += _mark(["IADD3 R2, R7, 0x9, RZ"])  # b end
    lines += [
        "EXIT",
        ".type           helper,@function",
        "helper:",
        "FADD R9, R9, 1",
        "RET.REL.NODEC R20 `(k)",
        ".L_x_9:",
        "BRA `(.L_x_9)",
        "NOP",
    ]
    m = _map(lines, names={1: "a", 2: "b"})
    path = m.path_of_pc()
    ffma_a, ffma_b = [int(p) for p, o in zip(m.pc, m.opcode) if o == "FFMA"]
    assert path[ffma_a] == "a" and path[ffma_b] == "b"
    fadd = [int(p) for p, o in zip(m.pc, m.opcode) if o == "FADD"][0]
    helper = [p for p in sorted(path) if p >= fadd]
    assert [path[p] for p in helper] == [AMBIGUOUS, AMBIGUOUS, UNREACHABLE, UNREACHABLE]
    assert m.ambiguous_candidates[fadd] == ["a", "b"]


def test_two_paths_with_different_regions_are_ambiguous():
    lines = LANE + ["ISETP.NE.AND P0, PT, R0, RZ, PT", "@P0 BRA `(.L_x_2)"]
    lines += _mark(["IADD3 R2, R7, 0x4, RZ"]) + ["BRA `(.L_x_1)"]  # a begin, then jump over b's begin
    lines += [".L_x_2:"] + _mark(["IADD3 R2, R7, 0x8, RZ"])  # b begin
    lines += [".L_x_1:", "FFMA R9, R9, R9, R9", "EXIT"]
    m = _map(lines, names={1: "a", 2: "b"})
    ffma = [int(p) for p, o in zip(m.pc, m.opcode) if o == "FFMA"][0]
    assert m.path_of_pc()[ffma] == AMBIGUOUS
    assert m.ambiguous_candidates[ffma] == ["a", "b"]


def test_guard_branch_over_a_lone_marker_does_not_split_the_region():
    """`if (slot < capacity) record(BEGIN)` compiled as a branch: the region starts either way."""
    lines = LANE + ["ISETP.GE.AND P0, PT, R0, 0x10, PT", "@P0 BRA `(.L_x_1)"] + _mark(["IADD3 R2, R7, 0x4, RZ"])
    lines += [".L_x_1:", "FFMA R9, R9, R9, R9", "ISETP.GE.AND P0, PT, R0, 0x10, PT", "@P0 BRA `(.L_x_3)"]
    lines += _mark(["IADD3 R2, R7, 0x5, RZ"]) + [".L_x_3:", "EXIT"]
    m = _map(lines, names={1: "a"})
    path = m.path_of_pc()
    ffma = [int(p) for p, o in zip(m.pc, m.opcode) if o == "FFMA"][0]
    assert path[ffma] == "a"
    assert path[int(m.pc[-1])] == OUTSIDE  # the EXIT after the guarded END
    assert m.summary()[AMBIGUOUS] == 0


def test_indirect_branch_is_conservative_and_unreached_code_is_unreachable():
    lines = LANE + [
        "BRX R4 -0x10",
        ".L_x_1:",
        "FFMA R9, R9, R9, R9",
        "EXIT",
        ".L_x_2:",
        "FADD R9, R9, 1",
        "EXIT",
        "FMUL R9, R9, 2",
    ]  # no label: only reachable by falling through an EXIT: unreachable
    m = _map(lines)
    path = m.path_of_pc()
    assert path[0x40] == OUTSIDE and path[0x60] == OUTSIDE  # both labels are BRX targets
    assert path[0x80] == UNREACHABLE


def test_begin_without_end_in_a_loop_is_detected_and_deep_nesting_is_not():
    lines = LANE + [".L_x_1:"] + _mark(["IADD3 R2, R7, 0x4, RZ"]) + ["@P0 BRA `(.L_x_1)", "EXIT"]
    m = _map(lines)
    assert any("grows each time around a loop" in p for p in m.problems)
    assert m.reasons and all(m.paths[r] != AMBIGUOUS or int(pc) in m.reasons for pc, r in zip(m.pc, m.region))
    # 100 nested regions (deeper than the old limit of 64), straight-line: every level is exact
    depth = 100
    begins = [
        x for e in range(1, depth + 1) for x in _mark([f"IADD3 R2, R7, {e << 2:#x}, RZ"]) + ["FADD R20, R20, R20"]
    ]
    ends = [x for e in range(depth, 0, -1) for x in _mark([f"IADD3 R2, R7, {(e << 2) | 1:#x}, RZ"])]
    m = _map(LANE + begins + ends + ["EXIT"])
    assert not m.problems
    fadd = [m.paths[r] for r, op in zip(m.region, m.opcode) if op == "FADD"]
    assert fadd[-1].count("/") == depth - 1 and len(set(fadd)) == depth


# ================================================================================================
# the project's device APIs: cuda_include/ikp.cuh and ikp_cute
# ================================================================================================

ROOT = os.path.dirname(TESTS)


def _marker_balance(m):
    counts = {}
    for mk in m.markers:
        counts.setdefault(mk["event"], [0, 0, 0, 0])[mk["event_type"]] += 1
    return counts


@needs_nvdisasm
@needs_nvcc
@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "cuda_include", "ikp.cuh")), reason="no ikp.cuh")
def test_ikp_cuh_kernel(tmp_path):
    out = tmp_path / "ikp_regions.cubin"
    subprocess.run(
        [
            NVCC,
            "-arch=sm_90a",
            "-cubin",
            "-lineinfo",
            "-O3",
            "-I",
            os.path.join(ROOT, "cuda_include"),
            "-o",
            str(out),
            os.path.join(KDIR, "ikp_regions.cu"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    cubin = out.read_bytes()
    fn = sass.select_function(sass.parse_listing(sass.disassemble(cubin)), None)
    m = pc2region.build_map(cubin, names={1: "outer", 2: "body", 3: "slow"})
    assert m.problems == []
    path = _structure_checks_ikp(m, fn)
    balance = _marker_balance(m)
    assert balance["outer"][:2] == [1, 1] and balance["slow"][:2] == [1, 1]
    assert balance["body"][0] == balance["body"][1] >= 4
    assert balance["event_1022"][2] == balance["event_1023"][2] == 1  # the two anchors
    assert any(mk["event_type"] == 3 for mk in m.markers)  # FINALIZE (SM id in its event id)
    for x in fn.instructions:
        if x.base == "FFMA" and "1.5" in x.operands:
            assert path[x.pc] == "outer/body"
    for name, pc in fn.symbols.items():
        if name != fn.name:
            assert path[pc] == "outer/slow"


def _structure_checks_ikp(m, fn):
    _check_complete(m)
    path = m.path_of_pc()
    assert not any(p == AMBIGUOUS for p in path.values())
    exits = [x.pc for x in fn.instructions if x.base == "EXIT"]
    assert exits and all(path[pc] == OUTSIDE for pc in exits)
    return path


def _compile_ikp_cute(mode, tmp_path):
    pytest.importorskip("cutlass")
    try:
        import cutlass.cute as cute
        from cutlass import Float32, Int32
        from cutlass.cute.runtime import make_fake_compact_tensor

        from ikp_cute import ProfileSpec, fake_buffer
        from ikp_cute.testing.kernels import structured
    except ImportError as e:  # the device API is developed alongside; skip rather than fail on its absence
        pytest.skip(f"ikp_cute device API not importable: {e}")
    spec = ProfileSpec(mode=mode, num_groups=2, num_blocks=4, write_stride=8, records_per_lane=64)
    compiled = cute.compile(
        structured.launch_warp_specialized,
        make_fake_compact_tensor(Float32, (1024,)),
        Int32(3),
        fake_buffer(spec),
        spec,
        (4, 1, 1),
        options=f"--gpu-arch sm_90a --keep-cubin --generate-line-info --dump-dir {tmp_path}",
    )
    return compiled, spec.events.as_dict()


@needs_nvdisasm
@pytest.mark.parametrize("mode", ["cursor", "atomic", "static"])
def test_ikp_cute_warp_specialized_kernel(mode, tmp_path):
    """FA4-like roles: `load` in warps 0-3, `mma` (with nested `mma_half`) in the others, in loops and a
    runtime `if`; every region separable, nothing ambiguous, every marker resolved by data flow."""
    compiled, names = _compile_ikp_cute(mode, tmp_path)
    m = pc2region.map_compiled(compiled, names=names)
    fn = sass.select_function(sass.parse_listing(sass.disassemble(compiled.__cubin__)), None)
    assert m.problems == []
    _structure_checks_ikp(m, fn)
    real = {p for p in m.summary() if not p.startswith("<") and m.summary()[p]}
    assert real == {"load", "load/load_even", "mma", "mma/mma_half"}
    balance = _marker_balance(m)
    for event in ("load", "load_even", "mma", "mma_half"):
        assert balance[event][0] == balance[event][1] >= 1, event
    assert balance["mma_done"][2] >= 1
    assert all(mk["how"].startswith("dataflow") for mk in m.markers)
    path = m.path_of_pc()
    for x in fn.instructions:  # acc * 0.5 + 1.0 only happens inside mma_half
        if x.base == "FFMA" and x.operands[-1] == "1" and "R0" == x.operands[0] and path[x.pc].startswith("mma"):
            assert path[x.pc] == "mma/mma_half"


def test_instrumentation_cost_claims_only_marker_feeding_code():
    lines = LANE + [
        "S2UR UR6, SR_GLOBALTIMERLO",
        "NOP",
        "IADD3 R2, R7, 0x4, RZ",
        "MOV R3, UR6",
        "IMAD.WIDE.U32 R10, R0, 0x8, R4",
        "STG.E.64 desc[UR4][R10.64], R2",
        "FFMA R9, R9, R9, R9",
        "IADD3 R12, R0, 0x1, RZ",
        "S2UR UR6, SR_GLOBALTIMERLO",
        "NOP",
        "IADD3 R2, R7, 0x5, RZ",
        "MOV R3, UR6",
        "IMAD.WIDE.U32 R10, R12, 0x8, R4",
        "STG.E.64 desc[UR4][R10.64], R2",
        "STG.E desc[UR4][R4.64], R12",
        "EXIT",
    ]
    m = _map(lines, names={1: "a"})
    claimed = {o + " " + str(i) for i, (o, mk) in enumerate(zip(m.opcode, m.is_marker)) if mk}
    ops = list(m.opcode)
    want = {i for i, o in enumerate(ops) if o in ("S2UR", "NOP", "MOV", "STG.E.64", "IMAD.WIDE.U32")}
    want |= {1}  # IMAD.SHL.U32 R7 (lane << 12): only the tags read it
    want |= {i for i, o in enumerate(ops) if o == "IADD3" and i in (5, 13)}  # the two tags
    assert {i for i, mk in enumerate(m.is_marker) if mk} == want, claimed
    for i, o in enumerate(ops):  # the kernel's own work is never claimed
        if o in ("FFMA", "STG.E", "EXIT", "S2R", "LDC.64") or (o == "IADD3" and i == 10):
            assert not m.is_marker[i], (i, o)


@needs_nvdisasm
def test_wgmma_pipeline_example(tmp_path):
    """examples/pipeline: a warp-specialized TMA / mbarrier / wgmma GEMM (Hopper). The map must
    separate the producer's regions from the consumer's, with every HGMMA in `mma` and every TMA load
    in `issue_tma` (and HGMMA's accumulator range must not be taken to clobber the tag registers)."""
    pytest.importorskip("cutlass")
    from tests.support.scripts import load_script

    path = os.path.join(ROOT, "examples", "pipeline", "gemm_pipeline.py")
    if not os.path.exists(path):
        pytest.skip("examples/pipeline not present")
    try:
        import cutlass.cute as cute
        from cutlass import BFloat16, Float32
        from cutlass.cute.runtime import make_fake_compact_tensor as fake

        from ikp_cute import EventRegistry, ProfileSpec, fake_buffer

        gp = load_script(path, "gemm_pipeline")
    except ImportError as e:
        pytest.skip(f"pipeline example not importable: {e}")
    spec = ProfileSpec(
        num_groups=3, num_blocks=16, write_stride=48, records_per_lane=80, events=EventRegistry(gp.EVENTS)
    )
    a = fake(BFloat16, (512, 1024), stride_order=(1, 0), assumed_align=16)
    b = fake(BFloat16, (512, 1024), stride_order=(1, 0), assumed_align=16)
    c = fake(Float32, (512, 512), stride_order=(1, 0), assumed_align=16)
    compiled = cute.compile(
        gp.PipelinedGemm(),
        a,
        b,
        c,
        fake_buffer(spec),
        spec,
        options=f"--gpu-arch sm_90a --keep-cubin --dump-dir {tmp_path}",
    )
    m = pc2region.map_compiled(compiled, names=spec.events.as_dict())
    assert m.problems == []
    assert m.summary()[AMBIGUOUS] == 0
    assert all(mk["how"].startswith("dataflow") for mk in m.markers)
    path_of = m.path_of_pc()
    hgmma = [int(p) for p, o in zip(m.pc, m.opcode) if o.startswith("HGMMA")]
    tma = [int(p) for p, o in zip(m.pc, m.opcode) if o.startswith("UTMALDG")]
    assert hgmma and all(path_of[p].endswith("mma") for p in hgmma)
    assert tma and all(path_of[p] == "issue_tma" for p in tma)


@pytest.mark.parametrize(
    "opcode,regs",
    [
        ("HGMMA.64x128x16.F32.BF16", 64),
        ("HGMMA.64x256x16.F32.BF16", 128),
        ("HGMMA.64x64x16.F16.F16", 16),
        ("QGMMA.64x128x32.F32.E4M3.E4M3", 64),
        ("HMMA.16816.F32.BF16", 4),
        ("HMMA.16816.F16", 2),
        ("IMMA.16832.S32.S8.S8", 4),
        ("HMMA.WEIRD", 255),
    ],
)
def test_mma_accumulator_width(opcode, regs):
    """Too wide would hide tags kept in registers after the accumulators; too narrow would miss clobbers."""
    assert sass.mma_dest_registers(opcode) == regs


def test_correlated_branches_on_one_predicate_stay_balanced():
    """`if blocked: begin(w)` ... `if blocked: end(w)`: two branches on one predicate (not rewritten in
    between) go the same way, so what follows the END is outside w on every path (FA4's waits recorded
    only when they block). The code between the two branches is in w on one path only: <ambiguous>,
    with a reason. Rewriting the predicate in between forgets the assumption."""
    def kernel(between):
        return LANE + [
            "ISETP.NE.AND P0, PT, R0, RZ, PT",
            "@P0 BRA `(.L_x_1)",
            *_mark(["IADD3 R2, R7, 0x10, RZ"]),  # BEGIN 4
            "VIADD R30, R30, 0x1",  # the record cursor advances: a user branch, not a capacity guard
            ".L_x_1:",
            *between,
            "@P0 BRA `(.L_x_2)",
            *_mark(["IADD3 R2, R7, 0x11, RZ"]),  # END 4
            "VIADD R30, R30, 0x1",
            ".L_x_2:",
            "FADD R20, R20, R30",
            "EXIT",
        ]

    m = _map(kernel(["FMUL R21, R21, R21"]))
    path = {op: m.paths[r] for op, r in zip(m.opcode, m.region)}
    assert path["FADD"] == OUTSIDE and path["FMUL"] == AMBIGUOUS
    assert "meet at pc" in m.reasons[int(m.pc[m.opcode.index("FMUL")])]
    m = _map(kernel(["ISETP.NE.AND P0, PT, R21, RZ, PT"]))  # P0 rewritten: the second branch is free
    path = {op: m.paths[r] for op, r in zip(m.opcode, m.region)}
    assert path["FADD"] == AMBIGUOUS


def _instruction(text: str) -> sass.Instruction:
    (fn,) = sass.parse_listing(_listing("k", [text]))
    return fn.instructions[0]


def test_source_operand_widths():
    """Registers read per operand: IMAD.WIDE multiplies two 32-bit sources and adds a 64-bit one; a
    funnel shift (SHF.*.U64) names both 32-bit halves; a shared-memory address is 32-bit; a store's
    address is 64-bit where it says .64, its data as wide as the opcode. Reading a 32-bit source as
    a pair makes the next register look live, and cfg liveness then rejects capacity guards."""
    expected = {
        "IMAD.WIDE.U32 R16, R13, 0x4, R4": {"R13", "R4", "R5"},
        "IMAD.WIDE R2, R0, R3, R6": {"R0", "R3", "R6", "R7"},
        "UIMAD.WIDE UR4, UR4, 0x4, UR6": {"UR4", "UR6", "UR7"},
        "IMAD.WIDE.U32.X R8, R23, RZ, R8, P1": {"R23", "R8", "R9", "P1"},  # the addend is before the carry
        "SHF.L.U64.HI R5, R2, 0x2, R3": {"R2", "R3"},
        "MUFU.RSQ64H R3, R5": {"R5"},
        "LDS.64 R2, [R4+0x10]": {"R4"},
        "STG.E.128 desc[UR4][R2.64], R8": {"UR4", "UR5", "R2", "R3", "R8", "R9", "R10", "R11"},
        "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4+0x10], R3": {"UR4", "R3"},
        # unchanged: 32-bit carry chains, and ops whose type makes every source a pair
        "LEA.HI.X R5, R2, R7, R3, 0x2, P0": {"R2", "R7", "R3", "P0"},
        "IADD3.X R9, R0, R9, RZ, P0, !PT": {"R0", "R9", "P0"},
        "IADD.64 R6, R4, R2": {"R4", "R5", "R2", "R3"},
        "ISETP.NE.S64.AND P3, PT, R6, RZ, PT": {"R6", "R7"},
        "DMUL R6, R6, UR4": {"R6", "R7", "UR4", "UR5"},
    }
    got = {text: sass.uses(_instruction(text)) for text in expected}
    assert {t: g for t, g in got.items() if g != expected[t]} == {}


def test_capacity_guard_before_an_imad_wide_keeps_the_region():
    """A guarded record writes R14:R15; after the guard IMAD.WIDE.U32 reads R13 (32-bit) and R4:R5.
    R14 is dead there, so the branch is a capacity guard and the region holds on both paths (read
    as the pair R13:R14, R14 looked live: no guard, and a RAII region in a loop went <ambiguous>)."""
    guard = ["ISETP.GE.AND P0, PT, R0, 0x10, PT"]
    lines = LANE + guard + ["@P0 BRA `(.L_x_1)"] + _mark(["IADD3 R14, R7, 0x4, RZ"], tag_reg=14)
    lines += [".L_x_1:", "IMAD.WIDE.U32 R16, R13, 0x4, R4", "FFMA R9, R9, R9, R9"]
    lines += guard + ["@P0 BRA `(.L_x_2)"] + _mark(["IADD3 R14, R7, 0x5, RZ"], tag_reg=14) + [".L_x_2:", "EXIT"]
    m = _map(lines, names={1: "a"})
    ffma = [int(p) for p, o in zip(m.pc, m.opcode) if o == "FFMA"][0]
    assert m.path_of_pc()[ffma] == "a"
    assert m.summary()[AMBIGUOUS] == 0 and m.problems == []


def test_sm120_cs2ur_timer_reads_are_markers():
    """sm_120 reads %globaltimer into a uniform register: CS2UR.32 (one register) or CS2UR (a pair)."""
    lines = LANE + [
        "CS2UR.32 UR6, SR_GLOBALTIMERLO",
        "IADD3 R2, PT, PT, R7, 0x4, RZ",
        "MOV R3, UR6",
        "STG.E.64 desc[UR4][R4.64], R2",
        "FFMA R9, R9, R9, R9",
        "CS2UR UR8, SR_GLOBALTIMERLO",
        "IADD3 R2, PT, PT, R7, 0x5, RZ",
        "MOV R3, UR9",
        "STG.E.64 desc[UR4][R4.64], R2",
        "EXIT",
    ]
    m = _map(lines, names={1: "a"})
    assert [(mk["event_id"], mk["event_type"]) for mk in m.markers] == [(1, 0), (1, 1)]
    assert m.path_of_pc()[0x70] == "a" and m.problems == []  # the FFMA
    assert sass.may_defs(_instruction("CS2UR UR8, SR_GLOBALTIMERLO")) == ["UR8", "UR9"]


def test_debug_build_is_named_as_such():
    """Unoptimized code (nvcc -G, -Xptxas -O0) builds a record's 64-bit word with shifts and ORs, so
    both words look timer-derived. Say that it is a debug build whose tags could not be resolved, not
    that the kernel writes Proton-style bare timestamps or has no ikp markers."""
    lines = LANE + [
        "CS2R.32 R10, SR_GLOBALTIMERLO",
        "MOV R10, R10",  # a register copied onto itself: only unoptimized code does that
        "MOV R12, RZ",
        "SHF.L.U64.HI R12, R10, 0x20, R12",  # (timer << 32) | tag, one 64-bit word
        "SHF.L.U32 R11, R10, 0x20, RZ",
        "LOP3.LUT R11, R11, 0x4, RZ, 0xfc, !PT",
        "MOV R2, R11",
        "MOV R3, R12",
        "STG.E.64 desc[UR4][R4.64], R2",
        "EXIT",
    ]
    m = _map(lines)
    assert not any("Proton" in p or "no ikp v1 markers" in p for p in m.problems), m.problems
    last = m.problems[-1]  # the one `ikp pc2region` reports as its error when nothing maps
    assert "debug build" in last and "does not support" in last and "could be resolved" in last


def test_cubin_path_and_kernel_choice_errors_speak_to_cli_users(tmp_path):
    with pytest.raises(DecodeError, match="a directory, not a cubin"):
        pc2region.read_cubin(str(tmp_path))
    functions = sass.parse_listing(_listing("k1", ["EXIT"]) + _listing("k2", ["EXIT"]))
    with pytest.raises(DecodeError, match="--kernel"):
        sass.select_function(functions, None)


def test_pc_ranges_join_consecutive_instructions():
    """`ikp pc2region --show` lists a region's PCs as ranges of consecutive instructions (16 bytes apart)."""
    from host_decode.reports.tables.hardware import pc_ranges

    assert pc_ranges([0x10, 0x20, 0x30, 0x50, 0x80, 0x90]) == "0x0010-0x0030, 0x0050, 0x0080-0x0090"
    assert pc_ranges([]) == ""
