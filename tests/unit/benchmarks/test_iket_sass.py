"""IKET's per-event code, read on a CPU (benchmarks/iket_sass.py; docs/iket_comparison.md states the
findings these tests pin down):

* with the "iket" compile option (what IKET's launcher sets through CUTE_DSL_COMPILER_OPT), each event
  is inline PTX: a %globaltimer_lo read, the event id OR'ed into it, a 4-byte shared store to a fixed
  word 0x3f0 of the CTA's window, and a `pmevent.mask <id>` placeholder; without it, nothing;
* in SASS that is 4 instructions per event (CS2R, LOP3, STS, PMTRIG), every lane, no predicate;
* IKET's instrument points (its own IketContext on the cubin) span the timer read to the PMTRIG;
* the v1 floor record (timer read + one 64-bit store) is CS2R + STG.E.64 (+ a register move with the
  ptxas of the CUDA 12 DSL libraries);
* the patched-code table (fed by gpu/iket_sass.py's cuda-gdb capture) marks exactly the PCs that differ.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # sm_100a places IKET's placeholder word elsewhere (0x20)
pytest.importorskip("cutlass")
pytest.importorskip("iket._core.iket")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def iket_sass():
    from ikp_cute.testing import sass

    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm not installed")
    import iket_sass

    return iket_sass


def _ptx(options: str) -> str:
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels.overhead import launch_iket_overhead

    x = make_fake_compact_tensor(Float32, (528 * 256,))
    return cute.compile(launch_iket_overhead, x, Int32(4), 2, 528, 256, options=sass.keep_options(options)).__ptx__


def test_iket_events_compile_to_inline_placeholders_only_when_enabled():
    on, off = _ptx("iket"), _ptx("")
    assert ".target sm_90a" in on
    assert "pmevent" not in off and "globaltimer" not in off
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", on, flags=re.S)
    events = [b for b in blocks if "pmevent.mask" in b]
    assert len(events) == 4  # 2 regions (push + pop) in the loop body, once more in the loop's remainder
    for block in events:
        (event_id,) = re.findall(r"pmevent\.mask (\d+);", block)
        assert "mov.u32 %t, %globaltimer_lo;" in block
        assert f"or.b32 %t, %t, {event_id};" in block  # the id in the timer's low bits
        assert "mad.lo.u32 %r, %r, 0x1000000, 0x3F0;" in block and "st.weak.shared.u32 [%r], %t;" in block
    assert {re.search(r"pmevent\.mask (\d+)", b).group(1) for b in events} == {"1", "31"}  # push, pop


def test_iket_event_is_four_sass_instructions(iket_sass):
    assert iket_sass.opcodes_per_event("iket") == {"CS2R": 1.0, "LOP3": 1.0, "PMTRIG": 1.0, "STS": 1.0}
    floor = iket_sass.opcodes_per_event("v1_floor")
    assert floor["CS2R"] == 1.0 and floor["STG"] == 1.0 and sum(floor.values()) <= 3.0


def test_instrument_points_span_timer_read_to_placeholder(iket_sass):
    from host_decode.hardware import sass

    cubin = iket_sass.compile_build("iket", 8)
    listing = {ins.pc: iket_sass.guarded(ins) for ins in iket_sass.kernel_instructions(cubin)}
    points = iket_sass.iket_points(cubin)
    assert len(points) >= 16 and {p["method"] for p in points} == {"kNativeDump"}
    for p in points:
        assert "SR_GLOBALTIMERLO" in listing[p["pc_first"]]
        assert listing[p["pc_last"]] == f"PMTRIG {p['event_id']:#x}"
    assert sass.nvdisasm_available()


def test_patched_table_marks_exactly_the_changed_pcs(iket_sass):
    cubin = iket_sass.compile_build("iket", 8)
    instructions = iket_sass.kernel_instructions(cubin)
    kernel = re.search(rb"kernel_cutlass_iket_overhead_kernel\w+", cubin).group().decode()
    patched = {ins.pc: ("IADD3 R9, R9, 0x4, RZ" if ins.opcode == "PMTRIG" else iket_sass.guarded(ins))
               for ins in instructions}
    text = "\n".join(f"   0x7fffd3260{pc:03x} <{kernel}+{pc}>:\t/*{pc:04x}*/ {t} ;" for pc, t in patched.items())
    disasm = iket_sass.read_gdb_disassembly(text)
    assert disasm == patched
    rows = iket_sass.patched_table(disasm, cubin)
    changed = {r["pc"] for r in rows if r["patched"] != r["unpatched"]}
    assert changed == {ins.pc for ins in instructions if ins.opcode == "PMTRIG"}
    assert all(r["unpatched"] != "?" for r in rows)
