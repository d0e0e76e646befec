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
from ikp_cute.testing import sass  # noqa: E402

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
        out[name] = {"plain": build(), "pool": build(trace_pipelines(pool, level="waits")), "kernels": pool.kernels}
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
