"""IKET's instrumented code per event, instruction by instruction, beside ikp's records.

Every build is the issue-bound overhead kernel (ikp_cute/testing/kernels/overhead.py: 32 dependent FMAs
per region, 8 regions per iteration of a loop that is not unrolled), instrumented five ways:

    iket            IKET's twin (range_push / range_pop on every warp), compiled with IKET's instrumentation
                    on (cute.compile option "iket", which is what IKET's launcher sets through
                    CUTE_DSL_COMPILER_OPT): the code as compiled, before IKET's launcher patches it
    cursor          ikp_cute's default mode (a region's END under its BEGIN's capacity check)
    v1_floor        the v1 record with nothing but a timer read and one 64-bit store
                    (ikp_cute.testing.record_variants.NoCheck)
    tracer_instant  the pipeline tracer's instant record (commit / release at level "signals")
    tracer_region   the pipeline tracer's region (reserve before the call, timer + two stores after)

For each: the marginal SASS instructions per event by opcode (8 vs 4 regions per iteration, the FMAs
subtracted) and two consecutive events in the middle of the loop (from one timer read to the timer read
two records later, FMAs left out) listed instruction by instruction with what each instruction is for.
For IKET also its instrument points (iket._core.iket.IketContext on the cubin: the PC of each event's
timer read and of its placeholder), as IKET's launcher reads them.

    python benchmarks/iket_sass.py [--json out.json]                      # CPU: everything above
    python benchmarks/iket_sass.py --patched DISASM.txt [--cubin C.cubin] # the patched code (GPU capture)

--patched reads a disassembly of the kernel as loaded under IKET's launcher (gpu/iket_sass.py writes one
with cuda-gdb) and prints, for each instrument point of the original cubin (--cubin: the one IKET's
tracker pass saved; default: compiled here), the patched instructions at the point's PCs beside the
unpatched ones. docs/iket_comparison.md holds the findings.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cutlass  # noqa: E402
from cutlass import Float32, Int32, cute  # noqa: E402

FMAS = 32
BLOCKS, THREADS = 528, 256


# --- the pipeline tracer's records in the overhead loop --------------------------------------------------


@cute.kernel
def tracer_twin_kernel(x: cute.Tensor, iters: Int32, regions: cutlass.Constexpr, geometry: cutlass.Constexpr,
                       kind: cutlass.Constexpr):
    """The overhead loop with the pipeline tracer's record blocks (ikp_cute.pipelines.record.KernelState)
    between the FMA chains: an instant per region (kind "instant"), or a region around each chain."""
    from ikp_cute.pipelines.record import INSTANT, KernelState, event_bits

    state = KernelState.create(geometry)
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    idx = bidx * bdim + tidx
    acc = x[idx]
    b = acc * 0.25
    for i in cutlass.range(iters, unroll=1):
        for r in cutlass.range_constexpr(regions):
            if cutlass.const_expr(kind == "instant"):
                state.record(event_bits(0, r, INSTANT), label="instant")
                for _ in cutlass.range_constexpr(FMAS):
                    acc = acc * b + 0.25
            else:
                token = state.reserve_region(event_bits(0, r, 1), label="reserve")
                for _ in cutlass.range_constexpr(FMAS):
                    acc = acc * b + 0.25
                state.finish_region(token, label="finish")
    x[idx] = acc


@cute.jit
def launch_tracer_twin(x: cute.Tensor, iters: Int32, regions: cutlass.Constexpr, geometry: cutlass.Constexpr,
                       kind: cutlass.Constexpr):
    tracer_twin_kernel(x, iters, regions, geometry, kind).launch(grid=[BLOCKS, 1, 1], block=[THREADS, 1, 1])


# --- builds ----------------------------------------------------------------------------------------------


def _fake_x():
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(Float32, (BLOCKS * THREADS,))


@functools.lru_cache(maxsize=None)
def compile_build(name: str, regions: int) -> bytes:
    """The cubin of build `name` with `regions` regions per loop iteration."""
    from ikp_cute.testing import sass

    x = _fake_x()
    if name == "iket":
        from ikp_cute.testing.kernels.overhead import launch_iket_overhead

        return cute.compile(launch_iket_overhead, x, Int32(256), regions, BLOCKS, THREADS,
                            options=sass.keep_options("iket")).__cubin__
    if name.startswith("tracer_"):
        from ikp_cute.pipelines.record import Geometry

        geometry = Geometry(address=0x7F0012340000, warps_per_block=THREADS // 32, write_stride=BLOCKS * 8,
                            records_per_lane=2 * 256 * regions + 8)
        return cute.compile(launch_tracer_twin, x, Int32(256), regions, geometry, name.split("_")[1],
                            options=sass.keep_options()).__cubin__
    from ikp_cute.testing.record_variants import NoCheck

    return _compile_overhead("cursor", regions, NoCheck if name == "v1_floor" else None)


@functools.lru_cache(maxsize=None)
def _compile_overhead(mode, regions: int, recorder=None) -> bytes:
    """The overhead kernel in ikp_cute mode `mode` (None: uninstrumented), as benchmarks/device_overhead.py
    builds it (528 blocks x 8 warps, every warp a lane)."""
    from ikp_cute import fake_buffer
    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels.overhead import launch_overhead, overhead_spec

    spec = overhead_spec(mode)
    return cute.compile(launch_overhead, _fake_x(), Int32(256), fake_buffer(spec), spec, regions, 1, BLOCKS, THREADS,
                        recorder, options=sass.keep_options()).__cubin__


BUILDS = ("iket", "cursor", "v1_floor", "tracer_instant", "tracer_region")
RECORDS_PER_REGION = {"tracer_instant": 1}  # every other build records a region's two ends


def kernel_instructions(cubin: bytes):
    from host_decode.hardware import sass

    functions = sass.parse_listing(sass.disassemble(cubin))
    return max(functions, key=lambda f: len(f.instructions)).instructions


def opcodes_per_event(name: str) -> dict[str, float]:
    """Marginal SASS instructions per event by base opcode: (8 regions - 4 regions) of this build minus the
    same difference of the uninstrumented kernel (the FMAs), over the extra events."""
    def base_counts(cubin):
        return collections.Counter(ins.opcode.split(".")[0] for ins in kernel_instructions(cubin))

    diff = base_counts(compile_build(name, 8))
    diff.subtract(base_counts(compile_build(name, 4)))
    bare = base_counts(_compile_overhead(None, 8))
    bare.subtract(base_counts(_compile_overhead(None, 4)))
    diff.subtract(bare)
    events = 4 * RECORDS_PER_REGION.get(name, 2)
    return {op: n / events for op, n in sorted(diff.items()) if n}


def steady_events(instructions, events: int = 2) -> list:
    """`events` consecutive records in the middle of the kernel's loop, listed without the FMAs: from one
    %globaltimer read (every record has exactly one) up to the read `events` records later. Instructions the
    scheduler moved between them (loop control, the next record's address) are listed where they are."""
    loop_end = max((i for i, ins in enumerate(instructions) if ins.opcode.startswith("BRA") and ins.targets), default=0)
    timers = [i for i, ins in enumerate(instructions[:loop_end]) if "SR_GLOBALTIMER" in ins.text]
    if len(timers) <= events:
        return []
    first = (len(timers) - events) // 2
    window = instructions[timers[first]:timers[first + events]]
    return [ins for ins in window if ins.opcode != "FFMA"]


# What each instruction of a record is for (first match wins); `ins.text` is matched.
PURPOSES = [
    (r"SR_GLOBALTIMER", "timer read (%globaltimer_lo / %globaltimer)"),
    (r"^PMTRIG", "IKET placeholder (pmevent.mask <event id>): rewritten by IKET's launcher at load time"),
    (r"^STS.*0x3f0\]", "IKET placeholder store: timer|id, 4 bytes, to a fixed word (0x3f0) of the CTA's "
                       "reserved shared memory; its launcher patches the point at load time"),
    (r"^LOP3\.LUT R\d+, R\d+, 0x[0-9a-f]+, RZ, 0xfc", "OR of the event id into the timer's low 5 bits "
                                                      "(the timer ticks in 32 ns steps: they are zero)"),
    (r"^STG\.E\.64", "the 64-bit record store (global)"),
    (r"^STG", "a global store"),
    (r"^LDS", "load of the warp's record state (shared memory)"),
    (r"^STS", "write-back of the warp's record state (shared memory)"),
    (r"^(ISETP|UISETP)", "compare: capacity check / leader / drop"),
    (r"^(ELECT|VOTE)", "recording lane election"),
    (r"^S2R.*SR_TID|^S2UR.*SR_TID", "thread index (which warp's state)"),
    (r"^S2UR.*SR_CgaCtaId|^S2R.*SR_CgaCtaId", "CTA's shared-window base (shared-memory address)"),
    (r"^(IMAD\.MOV|MOV|UMOV)", "register move (the timer into the record's register pair)"),
    (r"^(IMAD|IADD|VIADD|LEA|UIADD|UIMAD|ULEA|SHF|USHF|IADD3|PRMT|SEL|LOP3|ULOP3)", "address / tag arithmetic"),
    (r"^(BRA|BSSY|BSYNC|WARPSYNC)", "control flow"),
    (r"^NOP", "scheduling filler"),
]


def guarded(ins) -> str:
    """The instruction as nvdisasm prints it, guard predicate included (`@P1 STG.E.64 ...`)."""
    return f"@{ins.guard} {ins.text}" if ins.guard else ins.text


def purpose(text: str) -> str:
    return next((why for pattern, why in PURPOSES if re.search(pattern, text)), "")


def iket_points(cubin: bytes) -> list[dict]:
    """IKET's instrument points of the twin (iket._core.iket.IketContext, as its launcher reads them)."""
    import iket._core.iket as core

    kernel = re.search(rb"kernel_cutlass_iket_overhead_kernel\w+", cubin).group().decode()
    ctx = core.IketContext.create(cubin)
    events = ctx.get_events()
    return [{"event_id": p.evt_attr.event_id, "name": events[p.evt_attr.event_id].name,
             "method": str(p.evt_attr.instrument_method).split(".")[-1],
             "pc_first": p.offset_start, "pc_last": p.offset_end}
            for p in ctx.get_kernel_instrument_points(kernel)]


def report() -> dict:
    out = {}
    for name in BUILDS:
        instructions = kernel_instructions(compile_build(name, 8))
        listing = steady_events(instructions)
        out[name] = {
            "sass_per_event": opcodes_per_event(name),
            "two_events": [{"pc": ins.pc, "text": guarded(ins), "purpose": purpose(ins.text)} for ins in listing],
        }
    out["iket"]["instrument_points"] = iket_points(compile_build("iket", 8))
    return out


def print_report(rep: dict) -> None:
    for name, r in rep.items():
        total = sum(r["sass_per_event"].values())
        print(f"\n== {name}: {total:.2f} SASS per event ("
              + ", ".join(f"{op} {n:g}" for op, n in r["sass_per_event"].items()) + ")")
        print("   two consecutive events in the loop (FMAs left out):")
        for ins in r["two_events"]:
            print(f"   {ins['pc']:>#7x}  {ins['text']:<56} {ins['purpose']}")
        for p in r.get("instrument_points", [])[:4]:
            print(f"   instrument point: event {p['event_id']} ({p['name']}, {p['method']}) "
                  f"pc {p['pc_first']:#x}..{p['pc_last']:#x}")


# --- the patched code (a disassembly captured on the GPU) ---------------------------------------------------

_GDB_FUNCTION = re.compile(r"Dump of assembler code for function (\S+?):?$")
_GDB_LINE = re.compile(r"0x[0-9a-fA-F]+\s+<([^>+]*)(?:\+(\d+))?>:\s*(.+)$")


def read_gdb_disassembly(text: str, kernel_substring: str = "iket_overhead_kernel") -> dict[int, str]:
    """{function offset: instruction} of the kernel in cuda-gdb output: `x/Ni` lines name the function
    (`<kernel+288>:`), `disassemble` lines follow a `Dump of assembler code for function kernel:` header
    (`<+288>:`). SASS comments and the trailing ';' are dropped. The last listing of the kernel wins."""
    out: dict[int, str] = {}
    function = ""
    for line in text.splitlines():
        header = _GDB_FUNCTION.search(line)
        if header:
            function = header.group(1)
            continue
        m = _GDB_LINE.search(line)
        if not m:
            continue
        name = m.group(1) or function
        if kernel_substring in name:
            instruction = re.sub(r"/\*.*?\*/", "", m.group(3)).strip().rstrip(";").strip()
            out[int(m.group(2) or 0)] = instruction
    return out


def patched_table(disasm: dict[int, str], cubin: bytes) -> list[dict]:
    """Per instrument point: the unpatched and the patched instructions at each of its PCs."""
    from host_decode.hardware import sass

    function = max(sass.parse_listing(sass.disassemble(cubin)), key=lambda f: len(f.instructions))
    original = {ins.pc: guarded(ins) for ins in function.instructions}
    rows = []
    for p in iket_points(cubin):
        for pc in range(p["pc_first"], p["pc_last"] + 16, 16):
            rows.append({"event_id": p["event_id"], "pc": pc, "unpatched": original.get(pc, "?"),
                         "patched": disasm.get(pc, "?")})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--patched", help="a disassembly of the kernel as loaded under IKET's launcher (cuda-gdb)")
    ap.add_argument("--cubin", help="the original cubin of that kernel (IKET's tracker pass saves it)")
    args = ap.parse_args(argv)
    if args.patched:
        cubin = Path(args.cubin).read_bytes() if args.cubin else compile_build("iket", 8)
        disasm = read_gdb_disassembly(Path(args.patched).read_text())
        if not disasm:
            print(f"{args.patched}: no instruction of the IKET twin found", file=sys.stderr)
            return 2
        rows = patched_table(disasm, cubin)
        changed = [r for r in rows if r["patched"] != r["unpatched"]]
        print(f"{len(disasm)} instructions read; {len(changed)} of {len(rows)} instrument-point PCs differ")
        print(f"{'event':>5} {'pc':>7}  {'unpatched':<48} patched")
        for r in rows:
            mark = "*" if r["patched"] != r["unpatched"] else " "
            print(f"{r['event_id']:>5} {r['pc']:>#7x}{mark} {r['unpatched']:<48} {r['patched']}")
        if args.json:
            Path(args.json).write_text(json.dumps({"points": rows}, indent=1))
        return 0
    rep = report()
    print_report(rep)
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
