"""Ground truth for the pc2region adversarial suite, independent of pc2region's own analysis.

Each kernel source annotates its lines with ``// @ PATH`` (event names joined by "/", ``-`` for outside
every region, ``?`` where the region cannot be decided from the code: an instruction that runs both
inside and outside a region, e.g. after an END taken on one path only). Line info of the cubin
(``nvdisasm -g``, compiled with ``-lineinfo``) names the source line of each SASS instruction; an
instruction is judged only when its innermost line is an annotated line of the kernel's own source
(the marker code inlined from ikp.cuh, and unannotated lines, are not judged). Where the compiler moved
an instruction of an annotated line across a timer read, the annotation ``// @ A | B`` lists both paths
the instruction may legitimately fall in; each such line was checked by hand in the listing.

Verdicts per judged instruction: ``correct`` (the map's path is the annotated one), ``ambiguous``
(the map says <ambiguous> or <outside>-by-guess and its ``reasons`` give a reason for that PC; counts as
correct for ``?`` lines), ``wrong`` (anything else, including an <ambiguous> without a reason).
"""

from __future__ import annotations

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
_ANN_RE = re.compile(r"(?://|#)\s*@\s*(.+?)\s*$")  # C++ `// @ path`, Python `# @ path`
_NAMES_RE = re.compile(r"^(?://|#)?\s*names:\s*(.*)$")
_MOVED_RE = re.compile(r"^(?://|#)\s*moved:\s*(\S+)\s+(0x[0-9a-fA-F]+)\s+(\S+)\s+(.*)$")


def moved(cu_path: str) -> dict[tuple[str, int], str]:
    """(kernel, pc) -> path, for instructions the compiler moved across a timer read (checked by hand)."""
    out = {}
    with open(cu_path) as f:
        for line in f:
            m = _MOVED_RE.match(line.strip())
            if m:
                out[(m.group(1), int(m.group(2), 16))] = m.group(3)
    return out


def annotations(cu_path: str) -> dict[int, tuple[str, ...]]:
    out = {}
    with open(cu_path) as f:
        for k, line in enumerate(f, 1):
            m = _ANN_RE.search(line)
            if m and not line.lstrip().startswith(("//", "#")):
                out[k] = tuple(p.strip() for p in m.group(1).split("|"))
    return out


def event_names(cu_path: str) -> dict[int, str]:
    with open(cu_path) as f:
        for line in f:
            m = _NAMES_RE.match(line.strip())
            if m:
                return {int(a): b for a, b in (t.split("=") for t in m.group(1).split() if "=" in t)}
    return {}


def judge(region_map, cu_path: str, function) -> list[dict]:
    """One row per judged instruction: pc, line, expected paths, the map's path, verdict.
    `function`: the kernel's parsed listing (host_decode.hardware.sass.Function), for file + line."""
    from host_decode.hardware.pc2region import AMBIGUOUS, OUTSIDE

    ann = annotations(cu_path)
    base = os.path.basename(cu_path)
    rows = []
    reasons = getattr(region_map, "reasons", {}) or {}
    where = {x.pc: (os.path.basename(x.file or ""), x.line) for x in function.instructions}
    # ptxas pads a function with `.L: BRA .L` and NOPs after its last EXIT; line info may give them
    # the last line it saw, but they never run: not judged
    padding = set()
    for x in reversed(function.instructions):
        padding.add(x.pc)
        if x.base == "BRA" and not x.guard and x.targets and function.labels.get(x.targets[0]) == x.pc:
            break
    else:
        padding = set()
    overrides = moved(cu_path)
    for k, pc in enumerate(region_map.pc):
        file, line = where[int(pc)]
        if file != base or line not in ann or int(pc) in padding:
            continue
        expected = ann[line]
        override = overrides.get((function.name, int(pc)))
        for (kernel, at), path in overrides.items():  # `KERNEL_PREFIX*`: long CuTe DSL symbols
            if override is None and kernel.endswith("*") and function.name.startswith(kernel[:-1]) and at == pc:
                override = path
        if override is not None:
            expected = (override,)
        expected = tuple(OUTSIDE if p == "-" else p for p in expected)
        got = region_map.paths[region_map.region[k]]
        has_reason = int(pc) in reasons
        if "?" in expected:
            verdict = "ambiguous" if got in (AMBIGUOUS, OUTSIDE) and has_reason else "wrong"
        elif got in expected:
            verdict = "correct"
        elif got == AMBIGUOUS and has_reason:
            verdict = "ambiguous"
        else:
            verdict = "wrong"
        rows.append({"pc": int(pc), "line": line, "expected": expected, "got": got, "verdict": verdict})
    return rows
