"""Per-class accuracy of pc2region on the adversarial suite (prints the table of docs/pc2region_suite.md).

    python tests/kernels_pc2region/suite/accuracy.py [-v]
    python tests/kernels_pc2region/suite/accuracy.py --manifest   # after rebuilding the cubins
"""

from __future__ import annotations

import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "..", "..")))

import ground_truth  # noqa: E402

from host_decode.hardware import pc2region, sass  # noqa: E402

# (class, source, cubin, kernel)
CASES = [
    ("1 markers in a __noinline__ helper", "helper.cu", "helper.sm_90a.cubin", None),
    ("2 jump table (switch)", "switch.cu", "switch.sm_90a.cubin", None),
    ("3 indirect call", "indirect.cu", "indirect.sm_90a.cubin", None),
    ("4 unbalanced region", "unbalanced.cu", "unbalanced.sm_90a.cubin", "unbalanced_kernel"),
    ("4 unbalanced region: a bare conditional END", "unbalanced.cu", "unbalanced.sm_90a.cubin", "bare_end_kernel"),
    ("5 warp-specialized, tail-merged guards", "warpspec.cu", "warpspec.sm_90a.cubin", None),
] + [
    (f"6 {g} group{'s' if g > 1 else ''}", "groups.cu", "groups.sm_90a.cubin", f"groups{g}") for g in range(1, 8)
] + [
    (f"6 last of {g} groups (constant group id)", "groups.cu", "groups.sm_90a.cubin", f"last{g}") for g in (3, 5, 6, 7)
] + [
    ("7 kernel without markers", "foreign.cu", "foreign.sm_90a.cubin", "plain_kernel"),
    ("8 foreign markers", "foreign.cu", "foreign.sm_90a.cubin", "foreign_kernel"),
    ("predication, unrolling, early exit, overlap", "mixed.cu", "mixed.sm_90a.cubin", None),
] + [
    (f"CuTe DSL {what} ({arch})", "cute_suite.py", f"cute_{name}.{arch}.cubin", None)
    for name, what in (("roles", "warp-specialized roles, barriers"), ("three_groups", "3 groups"))
    for arch in ("sm_90a", "sm_100a")
]


@functools.cache
def _listing(cubin: str) -> tuple[bytes, str]:
    blob = pc2region.read_cubin(os.path.join(HERE, cubin))
    return blob, sass.disassemble(blob)


def run_case(source: str, cubin: str, kernel: str | None):
    cu = os.path.join(HERE, source)
    blob, text = _listing(cubin)
    fn = sass.select_function(sass.parse_listing(text), kernel)
    m = pc2region.build_map(blob, kernel=fn.name, names=ground_truth.event_names(cu) or None, listing=text)
    return m, ground_truth.judge(m, cu, fn)


MANIFEST = os.path.join(HERE, "sources.sha256.json")


def source_hashes() -> dict[str, str]:
    """cubin -> sha256 of the source it was compiled from (the annotations' line numbers must match)."""
    import hashlib

    out = {}
    for _, source, cubin, _ in CASES:
        with open(os.path.join(HERE, source), "rb") as f:
            out[cubin] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(out.items()))


def main(argv: list[str]) -> int:
    if "--manifest" in argv:  # after rebuilding the cubins (build.sh, cute_suite.py)
        import json

        with open(MANIFEST, "w") as f:
            json.dump(source_hashes(), f, indent=1)
        return 0
    verbose = "-v" in argv
    print("| class | instructions | correct | ambiguous with reason | wrong |")
    print("|---|---:|---:|---:|---:|")
    for name, source, cubin, kernel in CASES:
        m, rows = run_case(source, cubin, kernel)
        counts = {v: sum(r["verdict"] == v for r in rows) for v in ("correct", "ambiguous", "wrong")}
        print(f"| {name} | {len(rows)} | {counts['correct']} | {counts['ambiguous']} | {counts['wrong']} |")
        if verbose:
            groups: dict = {}
            for r in rows:
                if r["verdict"] != "correct":
                    groups.setdefault((r["line"], r["expected"], r["got"], r["verdict"]), []).append(r["pc"])
            for (line, exp, got, verdict), pcs in groups.items():
                print(f"    line {line}: expected {exp} got {got} ({verdict}) x{len(pcs)} first {pcs[0]:#06x}")
            for p in m.problems:
                print("    problem:", p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
