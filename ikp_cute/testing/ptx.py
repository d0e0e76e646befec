"""Small PTX text analyses used by the compile tests (tests/unit/ikp_cute/test_device_compile.py) and benchmarks."""

from __future__ import annotations

import re

_ENTRY_NAME = re.compile(r"\bkernel_cutlass_\w+")
_LABEL = re.compile(r"^(\$L__\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")
_STORE = re.compile(r"\bst\.global(?:\.\w+)*\s+\[(%rd\d+)(?:\+(-?\d+))?\]")
_DEFINES = re.compile(r"^\s*(?:@!?%p\d+\s+)?[a-z][\w.]*\s+(%\w+),")


def normalize(ptx: str) -> str:
    """PTX with the mangled kernel name (which encodes the argument list) replaced by KERNEL."""
    return _ENTRY_NAME.sub("KERNEL", ptx)


def instructions(ptx: str) -> list[str]:
    """Instruction and label lines of the PTX body: no comments, directives or declarations."""
    out = []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if not line or line.startswith((".", "{", "}", ")")):
            continue
        out.append(line)
    return out


def loops(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line indices of each loop: a label and a later branch back to it."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    found = []
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            found.append((labels[m.group(1)], i))
    return found


def global_stores(lines: list[str]) -> list[tuple[int, str, int]]:
    """(line index, base register, byte offset) of each st.global."""
    return [(i, m.group(1), int(m.group(2) or 0)) for i, line in enumerate(lines) if (m := _STORE.search(line))]


def loop_invariant_stores(ptx: str) -> list[str]:
    """Stores inside a loop whose address register is never written inside that loop: such a store hits
    the same slot in every iteration. A carried cursor gives none."""
    lines = instructions(ptx)
    bad = []
    for first, last in loops(lines):
        written = {m.group(1) for line in lines[first : last + 1] if (m := _DEFINES.match(line))}
        bad += [lines[i] for i, reg, _ in global_stores(lines) if first <= i <= last and reg not in written]
    return bad
