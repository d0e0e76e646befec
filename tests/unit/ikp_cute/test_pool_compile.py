"""trace_pipelines into a Pool, compiled on the CPU (sm_90a): the decision and the two copies of a kernel, the
record blocks, ambient regions, the kernels filter; FA4's and quack's forward traced into a pool (they need
`.[kernels]` and skip without it)."""

from __future__ import annotations

import collections
import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
pytest.importorskip("cutlass")

from ikp_cute.pipelines import record_pool, trace_pipelines  # noqa: E402
from ikp_cute.pool import Pool  # noqa: E402
from ikp_cute.testing import ptx as ptx_text  # noqa: E402
from ikp_cute.testing import sass, smem  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ADDRESS = 0x7F00_1234_0000
BLOCK = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}\s*/\* ikp ([^*]*?) \*/", re.S)  # an inline-PTX block of ours


def fake_pool(**kw) -> Pool:
    return Pool.fake(ADDRESS, 1 << 20, max_kernels=8, **kw)


def compile_small(trace=None):
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    out = make_fake_compact_tensor(Int32, (4,))
    options = sass.keep_options()
    if trace is None:
        return cute.compile(pk.launch, out, Int32(5), 4, options=options)
    with trace:
        return cute.compile(pk.launch, out, Int32(5), 4, options=options)


def opcodes(lines: list[str]) -> list[str]:
    """Opcodes of PTX instruction lines, guards, labels, parameter loads and the final ret dropped: what two
    compiles of the same code share whatever their register numbering."""
    out = []
    for line in lines:
        words = line.split()
        op = words[1] if words[0].startswith("@") else words[0]
        if not op.endswith(":") and not op.startswith("ld.param") and op != "ret;":
            out.append(op)
    return out


def closed_copy(ptx: str, prefix: bool = False) -> list[str]:
    """The instructions a launch that does not record runs after the decision: from the branch that follows the
    decision block (to the traced copy) up to that branch's target. `prefix`: with the kernel's instructions
    the compiler placed between the decision and that branch (code both copies share, hoisted)."""
    raw = ptx.splitlines()
    at = next(i for i, line in enumerate(raw) if "/* ikp decision */" in line)
    before = ptx_text.instructions("\n".join(raw[:at]))  # the decision's own line is not an instruction line
    lines = ptx_text.instructions("\n".join(raw[at + 1 :]))
    branch = next(i for i, line in enumerate(lines) if re.search(r"\bbra(\.uni)?\s", line))
    target = re.search(r"(\$L__\w+)", lines[branch]).group(1)
    end = next(i for i, line in enumerate(lines) if line.startswith(target + ":"))
    copy = opcodes(lines[branch + 1 : end])
    copy = copy[:-1] if copy and copy[-1] == "bra.uni" else copy  # the jump past the traced copy
    shared = opcodes(before) + [op for op in opcodes(lines[:branch]) if not op.startswith(("setp", "and.b32", "cvt"))]
    return shared + copy if prefix else copy


ALU = ("add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "mov", "selp", "setp", "min", "max",
       "cvt", "neg", "bfe", "bfi", "prmt", "popc", "clz")


@pytest.fixture(scope="module")
def small():
    pool = fake_pool()
    trace = trace_pipelines(pool, level="signals")
    return {"plain": compile_small(), "traced": compile_small(trace), "pool": pool, "trace": trace}


def test_the_closed_copy_is_the_untouched_kernel(small):
    """A launch the selection does not pick runs the kernel's own instructions: after the decision, the PTX
    of the closed copy is the untouched kernel's (opcode for opcode), with no record and no timer read."""
    plain, traced = small["plain"].__ptx__, small["traced"].__ptx__
    copy = closed_copy(traced)
    assert copy == opcodes(ptx_text.instructions(plain))
    assert not any("globaltimer" in op for op in copy)
    assert traced.count("/* ikp decision */") == 1 and traced.count("/* ikp setup */") == 1
    assert traced.count("/* ikp epilogue */") == 1


def shared_memory(compiled) -> dict:
    """What a launch of `compiled` asks for: {"dynamic": the launch's dynamic size, "static": the PTX's static
    ``.shared`` bytes, "section": the cubin's ``.nv.shared.<kernel>`` (sm_90: 1 KiB reserved for the system, the
    static arrays, padded to the dynamic buffer's alignment)}."""
    (dynamic,) = smem.launch_dynamic(compiled)
    (section,) = smem.cubin_static(compiled.__cubin__).values()
    return {"dynamic": dynamic, "static": sum(smem.ptx_static(compiled.__ptx__).values()), "section": section}


def test_shared_memory_is_not_doubled(small):
    """Both copies share the kernel's shared memory: the traced kernel declares the untouched kernel's static
    arrays (its mbarriers, `cute.arch.alloc_smem`) once, plus the pool's state (32 bytes per warp and a 32-byte
    descriptor: 288 bytes for 8 warps), once."""
    plain, traced = shared_memory(small["plain"]), shared_memory(small["traced"])
    state = 8 * record_pool.smem_words(8)
    assert plain["static"] > 0 and state == 288
    assert traced["static"] == plain["static"] + state, (plain, traced)
    assert traced["dynamic"] == plain["dynamic"]
    assert traced["section"] == plain["section"] + state
    declared = smem.ptx_static_declarations(small["traced"].__ptx__)
    assert declared.count(".shared .align 16 .b8 __static_shmem__0[288];") == 1, declared


def test_every_record_block_has_one_atomic_behind_one_branch(small):
    """Each record block (an instant, a region's finish) takes the slow way only through its refill branch,
    and the refill holds the block's one atomic; a region's reserve holds none (its finish refills)."""
    blocks = [(m.group(1), m.group(0)) for m in BLOCK.finditer(small["traced"].__ptx__)]
    kinds = collections.Counter()
    for label, text in blocks:
        if label in ("decision", "setup", "epilogue") or "%globaltimer; /*" in text and text.count(";") < 4:
            continue
        hot = text.split("REFILL:")[0]
        if "st.global" not in hot and "REFILL" not in text:  # a timer read or a reserve
            assert "atom" not in text, label
            kinds["reserve/timer"] += 1
            continue
        assert text.count("atom.") == 1 and text.count("REFILL:") == 1, label
        assert len(re.findall(r"\bbra(\.uni)?\b", hot)) == 1, label  # the branch past the refill
        assert "atom." not in hot and "ld.global" not in hot, label
        kinds["with refill"] += 1
    assert kinds["with refill"] >= 10 and kinds["reserve/timer"] >= 10, kinds


def test_the_decision_waits_for_ticks_only_when_a_window_is_set():
    """TICKS is loaded beside the window words, but nothing uses it before the empty-window branch; the only
    write to the window line is the store that empties a passed window (no atomic lands there)."""
    text = record_pool.decision_ptx(record_pool.PoolGeometry(ADDRESS, 8, 100), 3)
    branch = text.index("@!x bra.uni DECIDED")
    assert text.index("ld.global.v2.u32 {lo, hi}") < branch
    assert all(text.index(use) > branch for use in ("shr.u32 e, lo", "shl.b32 d, hi"))
    assert re.findall(r"(?:red|atom|st)[.\w]*\s+\[pw\]", text) == ["st.relaxed.gpu.global.v2.u32 [pw]"]
    assert re.findall(r"red[.\w]*\s+\[pt\]", text) == ["red.relaxed.gpu.global.add.u64 [pt]"]


def test_the_trace_names_its_kernels_and_events(small):
    pool, meta = small["pool"], small["trace"].metadata()
    (kernel_id, name), = pool.kernels.items()
    assert kernel_id == 0 and name.startswith("kernel_cutlass_kernel")
    assert meta["events"] and set(meta["events"].values()) >= {"acquire_ring[0]", "wait_ring[0]"}
    assert pool.kernel_meta()[0]["events"] == meta["events"]  # captures carry the trace's names


def test_the_kernels_filter_leaves_other_kernels_untouched(small):
    pool = fake_pool()
    skipped = compile_small(trace_pipelines(pool, kernels="no_such_kernel"))
    assert ptx_text.normalize(skipped.__ptx__) == ptx_text.normalize(small["plain"].__ptx__)
    assert pool.kernels == {}
    chosen = compile_small(trace_pipelines(pool, kernels=r"kernel_cutlass_kernel_tensor"))
    assert "/* ikp decision */" in chosen.__ptx__ and len(pool.kernels) == 1
    with pytest.raises(ValueError, match="not a regular expression"):
        trace_pipelines(pool, kernels="(")


def compile_ambient(regions: bool, trace=None):
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import ambient_kernel as ak

    x = make_fake_compact_tensor(Float32, (4 * ak.THREADS,))
    if trace is None:
        return cute.compile(ak.launch, x, Int32(5), 4, regions, options=sass.keep_options())
    with trace:
        return cute.compile(ak.launch, x, Int32(5), 4, regions, options=sass.keep_options())


def test_ambient_regions_record_only_inside_a_trace():
    """``with profile_region("mma"):`` (no Profiler): outside a trace the kernel compiles to the PTX of the same
    kernel without the calls; inside a pool trace every call site records BEGIN and END, in a warp branch,
    a dynamic loop (unrolled: each copy records) and nested."""
    without = ptx_text.normalize(compile_ambient(False).__ptx__)
    outside = ptx_text.normalize(compile_ambient(True).__ptx__)
    assert outside == without and "ikp" not in outside
    pool = fake_pool()
    inside = compile_ambient(True, trace_pipelines(pool)).__ptx__
    found = collections.Counter(re.findall(r"/\* ikp region:(\w+)@ambient_kernel\.py:\d+ (begin|end) \*/", inside))
    for name in ("setup", "mma", "inner", "epilogue"):
        assert found[(name, "begin")] == found[(name, "end")] >= 1, (name, found)
    assert found[("mma", "begin")] == found[("inner", "begin")] >= 2  # the loop body, unrolled
    trace_meta = pool.kernel_meta()[0]
    assert {"setup", "mma", "inner", "epilogue"} <= set(trace_meta["events"].values())
    assert closed_copy(inside) == opcodes(ptx_text.instructions(compile_ambient(False).__ptx__))


def test_a_session_trace_of_the_same_kernel_has_no_decision(small):
    """A Session target is traced as before: one copy, no decision, the v1 records."""
    from ikp_cute import ProfileSpec

    spec = ProfileSpec(num_groups=8, num_blocks=4, write_stride=32, records_per_lane=64, warps_per_group=1)
    v1 = compile_small(trace_pipelines(spec, level="signals", address=ADDRESS)).__ptx__
    assert "/* ikp decision */" not in v1 and "REFILL" not in v1 and "/* ikp" in v1


# --- FA4 and quack (sm90), traced into a pool ------------------------------------------------------------


@pytest.fixture(scope="module")
def real_kernels():
    pytest.importorskip("flash_attn.cute")
    pytest.importorskip("quack")
    sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
    from compile_cpu import fa4_compile, quack_compile

    out = {}
    for name, build in (("fa4", lambda tr=None: fa4_compile(tr, causal=True)), ("quack", quack_compile)):
        pool = Pool.fake(ADDRESS, 32 << 20)
        trace = trace_pipelines(pool, level="waits")
        out[name] = {"plain": build(), "pool": build(trace), "kernels": pool.kernels, "into": pool, "trace": trace}
    return out


@pytest.mark.parametrize("name", ["fa4", "quack"])
def test_fa4_and_quack_traced_into_a_pool(real_kernels, name):
    """Each gets a kernel id; its closed copy is the untouched kernel (every memory, barrier, tensor-core and
    branch instruction; the integer arithmetic within 1%, which LLVM schedules and hoists a little
    differently); no register spills anywhere (FA4's producer warp runs with 24 registers, quack's consumers
    are near their cap)."""
    got = real_kernels[name]
    assert len(got["kernels"]) == 1
    ptx = got["pool"].__ptx__
    closed = closed_copy(ptx, prefix=True)
    plain = opcodes(ptx_text.instructions(got["plain"].__ptx__))
    heavy = lambda ops: collections.Counter(op for op in ops if not op.startswith(ALU))  # noqa: E731
    assert heavy(closed) == heavy(plain)
    assert abs(len(closed) - len(plain)) <= 0.01 * len(plain)
    assert not any("globaltimer" in op or "atom" in op for op in closed)
    instructions = sass.disassemble(got["pool"].__cubin__)
    assert not [i for i in instructions if sass.opcode(i).startswith(("STL", "LDL"))]
    assert sum(sass.opcode(i).startswith("ATOMG") for i in instructions) >= 10


# SASS a warp runs when ptxas cannot prove its warp index warp-uniform: uniform values copied in from vector registers
# (R2UR) before each tensor-core / TMA instruction, ELECT results voted into uniform predicates, and every TMA
# issue wrapped in a loop over the warp's distinct operands (BRA.U.ANY).
NOT_UNIFORM = ("R2UR", "VOTEU.ANY", "BRA.U.ANY")


def closed_copy_sass(cubin: bytes) -> list[str]:
    """The SASS laid out before the traced copy's first atomic (the setup's first unit): the decision and the
    closed copy (copies.py lays the closed copy out first)."""
    instructions = sass.disassemble(cubin)
    first_atomic = next(i for i, ins in enumerate(instructions) if sass.opcode(ins).startswith("ATOMG"))
    return instructions[:first_atomic]


def not_uniform(instructions: list[str]) -> dict:
    found = collections.Counter(sass.opcode(i) for i in instructions)
    return {op: found[op] for op in NOT_UNIFORM}


@pytest.mark.parametrize("name", ["fa4", "quack"])
def test_the_closed_copy_keeps_the_kernels_warp_uniform_code(real_kernels, name):
    """ptxas compiles the closed copy as it compiles the untouched kernel: its warp index stays warp-uniform, so
    the copy has the untouched kernel's R2UR / VOTEU / BRA.U.ANY (FA4 causal: 3 / 0 / 0, against 167 / 39 / 10
    with a %tid.x read that every block's decision makes: record_pool.py's docstring, "%tid.x")."""
    got = real_kernels[name]
    plain = not_uniform(sass.disassemble(got["plain"].__cubin__))
    closed = not_uniform(closed_copy_sass(got["pool"].__cubin__))
    assert closed["VOTEU.ANY"] <= plain["VOTEU.ANY"] and closed["BRA.U.ANY"] <= plain["BRA.U.ANY"], (plain, closed)
    assert closed["R2UR"] <= plain["R2UR"] + 4, (plain, closed)


def test_fa4_noncausal_traced_copy_keeps_its_warp_uniform_code():
    """FA4's non-causal forward traced into a pool: neither copy loses the kernel's warp-uniform code (the traced
    copy's R2UR come from the refills' elected lanes, a handful; 59 / 38 / 10 in the closed copy alone and as
    many again in the traced one when a refill re-read %tid.x itself)."""
    pytest.importorskip("flash_attn.cute")
    sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
    from compile_cpu import fa4_compile

    plain = not_uniform(sass.disassemble(fa4_compile(causal=False).__cubin__))
    traced = fa4_compile(trace_pipelines(Pool.fake(ADDRESS, 32 << 20), level="waits"), causal=False).__cubin__
    closed, whole = not_uniform(closed_copy_sass(traced)), not_uniform(sass.disassemble(traced))
    assert closed["VOTEU.ANY"] == plain["VOTEU.ANY"] and closed["BRA.U.ANY"] == plain["BRA.U.ANY"], (plain, closed)
    assert whole["BRA.U.ANY"] == plain["BRA.U.ANY"] and whole["R2UR"] <= plain["R2UR"] + 16, (plain, whole)


def test_no_block_of_ours_reads_tid_x_where_every_block_runs_it(small):
    """%tid.x comes into every block of ours as the DSL's operand; only the decision reads it itself, and only in
    block 0 (behind a branch on %ctaid, where it picks the warp that adds the launch count's remainder)."""
    decision = record_pool.decision_ptx(record_pool.PoolGeometry(ADDRESS, 8, 100), 3)
    assert decision.index("%tid.") > decision.index("@zero bra.uni COUNTED") > decision.index("%ctaid.z")
    blocks = [(m.group(1), m.group(0)) for m in BLOCK.finditer(small["traced"].__ptx__)]
    assert len(blocks) > 10
    assert [label for label, text in blocks if "%tid." in text] == ["decision"]


@pytest.mark.parametrize("name", ["fa4", "quack"])
def test_fa4_and_quack_shared_memory_fits_sm90(real_kernels, name):
    """FA4's sm90 causal forward and quack's sm90 GEMM traced into a pool ask for the untouched kernel's dynamic
    shared memory (the SmemAllocator's buffers: FA4 164,864 bytes, quack 230,400), not twice it, plus the pool
    state as one static array (416 bytes for 12 warps; with the dynamic buffer's 1,024-byte alignment, 1 KiB of
    the cubin's static section), and the total fits an sm_90a block (232,448 bytes)."""
    got = real_kernels[name]
    plain, traced = shared_memory(got["plain"]), shared_memory(got["pool"])
    state = traced["static"] - plain["static"]
    assert traced["dynamic"] == plain["dynamic"] > 100_000, (plain, traced)
    assert 0 < state <= 8 * record_pool.smem_words(record_pool.MAX_WARPS), (plain, traced)
    assert len(smem.ptx_static_declarations(got["pool"].__ptx__)) == 1  # the pool state, allocated once
    assert traced["section"] <= plain["section"] + -(-state // 1024) * 1024
    assert smem.block_bytes(got["pool"]) == traced["dynamic"] + traced["section"] - smem.SM90_SYSTEM_RESERVE
    assert smem.block_bytes(got["pool"]) <= smem.SMEM_LIMIT_SM90, (plain, traced)



def test_fa4_causal_and_not_are_two_kernels(real_kernels):
    """FA4's forward compiled causal and not under one pool trace (one kernel name, other code): two kernel ids;
    the causal one traced again takes id 0 back, its PTX the first compile's."""
    from compile_cpu import fa4_compile

    got = real_kernels["fa4"]
    pool, trace = got["into"], got["trace"]
    (name,) = got["kernels"].values()
    not_causal = fa4_compile(trace, causal=False).__ptx__
    assert pool.kernels == {0: name, 1: name}
    assert "/* ikp decision */" in not_causal and not_causal != got["pool"].__ptx__
    assert fa4_compile(trace, causal=True).__ptx__ == got["pool"].__ptx__
    assert pool.kernels == {0: name, 1: name}


STRIPPED = """
func.func @k(%p: !llvm.ptr, %x: i64) {
  %c = arith.constant true
  scf.if %c {
    %k = arith.muli %x, %x : i64
    %t = llvm.inline_asm has_side_effects "mov.u64 $0, %globaltimer; /* ikp a */", "=l" : () -> i64
    %e = llvm.inline_asm has_side_effects "mov.u64 $0, %globaltimer; /* ikp b */", "=l" : () -> i64
    %d = arith.subi %e, %t : i64
    %b = arith.cmpi uge, %d, %x : i64
    scf.if %b {
      llvm.inline_asm has_side_effects "st.global.b64 [$0], $1; /* ikp c */", "l,l" %p, %d : (!llvm.ptr, i64) -> ()
    }
    USE
  }
  return
}
"""


@pytest.mark.parametrize("use, refused", [("llvm.store %k, %p : i64, !llvm.ptr", False),
                                          ("llvm.store %d, %p : i64, !llvm.ptr", True)])
def test_strip_erases_only_what_is_ours(use, refused):
    """The closed copy loses every op of ours and what only they use (a blocked-only check: its compare and
    its `scf.if`), and nothing of the kernel's: a kernel op using a value of ours is refused, by name."""
    from cutlass._mlir import ir

    from ikp_cute.pipelines import copies

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(STRIPPED.replace("USE", use))
        block = module.body.operations[0].regions[0].blocks[0].operations[1].regions[0].blocks[0]
        if refused:
            with pytest.raises(RuntimeError, match="llvm.store .* uses a value of the tracer's"):
                copies.strip(block)
            return
        assert copies.strip(block) == 3
        left = [op.operation.name for op in block.operations]
        assert left == ["arith.muli", "llvm.store", "scf.yield"], left


SPLIT = """
func.func @k(%n: index) {
  %c = arith.constant true
  %a = "cute.memref.alloca"() : () -> !cute.memref<i8, smem, align<1024>, "1024:1">
  %lo = arith.constant 0 : index
  %one = arith.constant 1 : index
  scf.for %i = %lo to %n step %one {
    %b = "cute_nvgpu.arch.alloc_smem"() {input = 4 : i32} : () -> !cute.ptr<i64, smem, align<8>>
    %r = "cute.memref.alloca"() : () -> !cute.memref<f32, rmem, align<32>, "2:1">
    "kernel.use"(%a, %b, %r) : (!cute.memref<i8, smem, align<1024>, "1024:1">, !cute.ptr<i64, smem, align<8>>,
                                !cute.memref<f32, rmem, align<32>, "2:1">) -> ()
  }
  return
}
"""


def test_split_moves_shared_allocations_above_both_copies():
    """Every shared-memory allocation of the body (nested ones too) ends above the split, once, and both copies
    use it; a register allocation stays in each copy; an allocation with operands is refused, by name."""
    from cutlass._mlir import ir

    from ikp_cute.pipelines import copies
    from ikp_cute.pipelines.sites import walk

    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(SPLIT)
        kernel = module.body.operations[0].operation
        split_after = kernel.regions[0].blocks[0].operations[0].operation
        copies.split(kernel, split_after, split_after.results[0], lambda: None)
        top = [op.operation.name for op in kernel.regions[0].blocks[0].operations]
        assert top[:3] == ["arith.constant", "cute.memref.alloca", "cute_nvgpu.arch.alloc_smem"], top
        names = [op.name for op in walk(kernel)]
        assert names.count("cute_nvgpu.arch.alloc_smem") == 1 and names.count("kernel.use") == 2
        assert names.count("cute.memref.alloca") == 3  # the shared one once, the register one in each copy
        text = str(kernel)
        uses = re.findall(r'"kernel.use"\((%\w+), (%\w+), (%\w+)\)', text)
        assert len(uses) == 2 and uses[0][:2] == uses[1][:2], uses  # one value each, defined once at the top
        assert all(text.count(f"{name} = ") == 1 for name in uses[0][:2]), text

        bad = ir.Module.parse(SPLIT)  # an allocation whose size the loop computes (built unverified)
        kernel = bad.body.operations[0].operation
        kernel.attributes["sym_name"] = ir.StringAttr.get("k")
        loop = next(op for op in walk(kernel) if op.name == "scf.for")
        body = loop.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(body):
            ir.Operation.create("cute_nvgpu.arch.alloc_smem", results=[ir.Type.parse("!cute.ptr<i64, smem, align<8>>")],
                                operands=[body.arguments[0]])
        split_after = kernel.regions[0].blocks[0].operations[0].operation
        with pytest.raises(RuntimeError, match="kernel k: the shared-memory allocation cute_nvgpu.arch.alloc_smem"):
            copies.split(kernel, split_after, split_after.results[0], lambda: None)


# --- re-traces: the same module, the DSL's JIT cache, one kernel id ------------------------------------------


def module_hashes():
    """(keys, a context entering a trace-finalize hook that collects the key of the DSL's in-memory JIT cache:
    `dsl.get_module_hash` of the module as the hooks entered before it left it, compile options included)."""
    from cutlass.cutlass_dsl import CuTeDSL

    dsl = CuTeDSL._get_dsl()
    seen = []
    return seen, lambda: dsl.trace_finalize_hooks(lambda d, module, name: seen.append(d.get_module_hash(module, name)))


@pytest.mark.parametrize("target", ["session", "pool"])
def test_a_retrace_is_the_same_module(target):
    """Two traced compiles of one kernel under one trace give the same module (site numbers, hooked calls'
    locations and a pool kernel's id come from the module's content), so the same DSL cache key and the same
    PTX; the audit maps the second compile's PTX to its sites as it did the first's; a pool keeps one id."""
    from ikp_cute import ProfileSpec

    pool = fake_pool()
    if target == "pool":
        trace = trace_pipelines(pool, level="signals")
    else:
        spec = ProfileSpec(num_groups=8, num_blocks=4, write_stride=32, records_per_lane=64, warps_per_group=1)
        trace = trace_pipelines(spec, level="signals", address=ADDRESS)
    seen, hashing = module_hashes()
    ptx, counts = [], []
    for _ in range(2):
        with trace, hashing():  # the hook after the trace's: it sees what the DSL hashes
            ptx.append(compile_small().__ptx__)
        counts.append([(s["number"], s["kind"], s["site"], s["ptx"]) for s in trace.metadata()["barrier_sites"]])
    assert ptx[0] == ptx[1] and seen[0] == seen[1]
    assert counts[0] == counts[1] and all(c[3] for c in counts[1]) and len(counts[1]) >= 10
    assert len(pool.kernels) == (1 if target == "pool" else 0)


def test_a_jit_call_in_a_loop_compiles_once():
    """A `@cute.jit` function called directly in a loop under a pool trace (how `ikp record` sees a program
    that does not call cute.compile) is compiled at the first call and served by the DSL's in-memory JIT cache
    after, under one kernel id, its audit kept. On a CPU each call compiles (or hits the cache) and then fails
    to launch."""
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack
    from cutlass.cutlass_dsl import CuTeDSL

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    if torch.cuda.is_available():
        pytest.skip("the calls would launch the kernel into a fake pool")
    cache = CuTeDSL._get_dsl().jit_cache
    before = len(cache)
    pool = fake_pool()
    x = from_dlpack(torch.zeros(4, dtype=torch.int32))
    trace = trace_pipelines(pool, level="signals")
    with trace:
        for _ in range(3):
            with pytest.raises(Exception, match="cudaErrorInsufficientDriver|driver|CUDA"):
                pk.launch(x, Int32(5), 4)
    assert len(cache) - before == 1
    assert len(pool.kernels) == 1
    sites = trace.metadata()["barrier_sites"]  # the calls the cache served keep the audit of the one compile
    assert len(sites) >= 10 and all(s["ptx"] is not None for s in sites)


@pytest.mark.parametrize("old, new", [(0, 1), (5, 0), (3, 511), (511, 7)])
def test_renumbering_a_kernel_id_is_exact(old, new):
    """A kernel's blocks renumbered from one id to another are the blocks emitted for the other id (every
    number that depends on the id is mapped, nothing else)."""
    g = record_pool.PoolGeometry(ADDRESS, 512, 1000)
    assert record_pool.renumber(record_pool.decision_ptx(g, old), g, old, new) == record_pool.decision_ptx(g, new)
    for warps in (4, 12, 32):
        setup = record_pool.setup_ptx(g, old, warps)  # the refill included
        assert record_pool.renumber(setup, g, old, new) == record_pool.setup_ptx(g, new, warps)



def test_a_kernel_traced_again_after_another_takes_its_id_back():
    """Kernels of other code get other ids; a kernel traced again after another takes its own id back (its
    blocks renamed from the id it was handed: the PTX is the first compile's) and the id it was handed is free
    for the next kernel. (FA4 causal or not, one kernel name: test_fa4_causal_and_not_are_two_kernels.)"""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing.kernels import pipelines_kernel as pk

    pool = fake_pool()
    trace = trace_pipelines(pool, level="signals")
    first = compile_small(trace).__ptx__
    with trace:
        turns = cute.compile(pk.launch_turns, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                             options=sass.keep_options()).__ptx__
    assert len(set(pool.kernels.values())) == 2 and sorted(pool.kernels) == [0, 1] and turns != first
    again = compile_small(trace).__ptx__
    assert again == first and sorted(pool.kernels) == [0, 1]
    assert pool.kernel_id("next") == 2
