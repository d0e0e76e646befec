"""What a record of a pool trace is in SASS, against the session (v1) record, compiled on a CPU (sm_90a).

1. The hot path of one record (an instant of the ambient-region kernel, ikp_cute/testing/kernels/
   ambient_kernel.py): the SASS instructions from the record's timer read to its last instruction on the
   fall-through path (the pool's: up to the branch past its refill; the session's: up to its last store).
2. FA4's sm90 forward (causal, default level) and quack's sm90 GEMM 8192^3: SASS of the untouched kernel, of the
   kernel traced into a session, and of the kernel traced into a pool (both copies: the closed one is the
   untouched kernel), record blocks in the PTX, static SASS per record block, local-memory spills.

    python benchmarks/pool_record_sass.py [--skip-real]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "pipelines"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")

ADDRESS = 0x7F00_1234_0000
RECORD = re.compile(r"/\* ikp (?!decision|setup|epilogue)[^*]*\*/")


def functions(cubin: bytes):
    from host_decode.hardware import sass

    return sass.parse_listing(sass.disassemble(cubin))


def hot_path(cubin: bytes, pool: bool) -> list[str]:
    """The first record of the kernel's traced code: opcodes from its timer read along the fall-through path, up
    to the branch past its refill (pool) or its shared-memory state write (session)."""
    from ikp_cute.testing import sass

    ins = sass.disassemble(cubin)
    timers = [i for i, x in enumerate(ins) if "SR_GLOBALTIMER" in x]
    start = timers[1]  # the first is the prologue's: the session's anchors, the pool's first unit header
    out = []
    stores = 0
    for x in ins[start:]:
        op = sass.opcode(x)
        out.append(op)
        stores += op.startswith(("STG", "STS"))
        if pool and op == "BRA":  # the branch past the refill: after the store and the state write
            break
        if not pool and stores == 3:  # the record, the DROPPED slot's (predicated off but issued), the state
            break
    return out


def ambient(trace_of):
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.testing import sass
    from ikp_cute.testing.kernels import ambient_kernel as ak

    x = make_fake_compact_tensor(Float32, (4 * ak.THREADS,))
    with trace_of():
        return cute.compile(ak.launch, x, Int32(5), 4, True, options=sass.keep_options())


def session_trace(level="waits"):
    from ikp_cute import ProfileSpec
    from ikp_cute.pipelines import trace_pipelines

    spec = ProfileSpec(num_groups=12, num_blocks=1024, records_per_lane=256, warps_per_group=1)
    return trace_pipelines(spec, level=level, address=ADDRESS)


def pool_trace(level="waits"):
    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.pool import Pool

    return trace_pipelines(Pool.fake(ADDRESS), level=level)


def row(name: str, plain, session, pool) -> dict:
    from ikp_cute.testing import sass

    counts = {k: len(sass.disassemble(c.__cubin__)) for k, c in (("plain", plain), ("session", session),
                                                                   ("pool", pool))}
    blocks = {k: len(RECORD.findall(c.__ptx__)) for k, c in (("session", session), ("pool", pool))}
    spills = {k: sum(sass.opcode(i).startswith(("STL", "LDL")) for i in sass.disassemble(c.__cubin__))
              for k, c in (("session", session), ("pool", pool))}
    traced_copy = counts["pool"] - counts["plain"]  # the closed copy is the untouched kernel
    return {"kernel": name, **{f"sass_{k}": v for k, v in counts.items()},
            "record_blocks_session": blocks["session"], "record_blocks_pool": blocks["pool"],
            "sass_per_block_session": round((counts["session"] - counts["plain"]) / max(blocks["session"], 1), 1),
            "sass_per_block_pool": round((traced_copy - counts["plain"]) / max(blocks["pool"], 1), 1),
            "spills_session": spills["session"], "spills_pool": spills["pool"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-real", action="store_true", help="the ambient-region kernel only (no FA4, quack)")
    args = parser.parse_args()
    session_hot = hot_path(ambient(session_trace).__cubin__, pool=False)
    pool_hot = hot_path(ambient(pool_trace).__cubin__, pool=True)
    print(f"hot path of one instant record: session {len(session_hot)} SASS, pool {len(pool_hot)} SASS")
    print("  session:", " ".join(session_hot))
    print("  pool:   ", " ".join(pool_hot))
    if args.skip_real:
        return
    from compile_cpu import fa4_compile, quack_compile

    rows = [row("fa4_sm90 causal", fa4_compile(causal=True), fa4_compile(session_trace(), causal=True),
                fa4_compile(pool_trace(), causal=True)),
            row("quack_gemm_sm90", quack_compile(), quack_compile(session_trace()), quack_compile(pool_trace()))]
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r[k]) for k in keys))


if __name__ == "__main__":
    main()
