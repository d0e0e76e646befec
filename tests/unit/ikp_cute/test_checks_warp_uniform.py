"""A blocked-only check's branch is taken by the whole warp or by none of it (ikp_cute/pipelines/emit.py `warp_any`).

ptxas takes `%globaltimer` values for warp-uniform: a branch on `end - begin >= blocked_ns` gets no reconvergence,
and the kernel's loop counters stay in uniform registers across it (the traced megakernel's k-loop: `UIADD3 URn`).
A warp whose lanes disagreed would stay split, each part stepping the uniform counter (a loop run past its bound:
reads far past the operands) and reaching the aligned `bar.sync` on its own. So the check votes over the active
lanes, and its branch is predicated on the vote, in the PTX and in the SASS ptxas makes of it.
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tests.support.flag_examples import compile_deps_kernel  # noqa: E402


@pytest.fixture(scope="module")
def traced_megakernel():
    from ikp_cute.pipelines import session_for, trace_pipelines

    session = session_for(132, 8, 64, kernel="megakernel_deps", device="cpu")
    with trace_pipelines(session):
        return compile_deps_kernel("ld", False)


def check_branches(ptx: str) -> list[tuple[str, str]]:
    """(branch line, the definition of its predicate) for each blocked-only check: the `@%p bra` that skips the
    check's records (the last branch before its `call-end` record block)."""
    lines = ptx.splitlines()
    out = []
    for i, line in enumerate(lines):
        if "call-end */" not in line:
            continue
        j = next(j for j in range(i, -1, -1) if re.search(r"@!?%p\d+ bra", lines[j]))
        pred = re.search(r"@!?(%p\d+) bra", lines[j]).group(1)
        definition = next(lines[k] for k in range(j - 1, -1, -1) if re.search(rf"\s{pred},", lines[k]))
        out.append((lines[j].strip(), definition.strip()))
    return out


def test_every_check_branches_on_a_vote_of_the_warp(traced_megakernel):
    ptx = traced_megakernel.__ptx__
    branches = check_branches(ptx)
    assert len(branches) == 11, branches  # the megakernel's 11 named-barrier sites
    votes = {m.group(1) for m in re.finditer(r"selp\.u32 (%r\d+), 1, 0, p; \} /\* ikp [^*]*warp-any", ptx)}
    for branch, definition in branches:
        source = re.search(r"setp\.\w+\.\w+\s+%p\d+, (%r\d+), 0;", definition)
        assert source is not None and source.group(1) in votes, (branch, definition)


def test_ptxas_keeps_the_votes(traced_megakernel):
    from ikp_cute.testing import sass

    if sass.nvdisasm_path() is None:
        pytest.skip("nvdisasm is not installed")
    instructions = sass.disassemble(traced_megakernel.__cubin__)
    predicate_votes = [ins for ins in instructions if re.search(r"\bVOTE\.ANY P\d+, P\d+", ins)]
    assert len(predicate_votes) == 11, predicate_votes
