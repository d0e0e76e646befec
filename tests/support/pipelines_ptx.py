"""The PTX of kernels compiled under trace_pipelines, read back: the markers the tracer leaves at each call
site, the audit's coverage, the sites against the barrier instructions.
"""

from __future__ import annotations

import collections
import re

BAKED = 0x7F0012340000
MARKER = re.compile(r"/\* ikp (\S+)@(\S+?) ?(begin|end|poll-begin|poll-end|call-begin|call-end|gate)? \*/")


def markers(ptx: str) -> collections.Counter:
    """(label, site, begin|end|poll-begin|poll-end|'') -> occurrences in the PTX (unrolled loops repeat
    a call site)."""
    return collections.Counter((m.group(1), m.group(2), m.group(3) or "") for m in MARKER.finditer(ptx))


def check_call_sites(ptx: str, meta: dict, level_ops) -> None:
    """Every recorded call site of every pipeline op has its markers; regions pair begin with end."""
    found = markers(ptx)
    assert found, "no pipeline markers in the PTX"
    for pipe in meta["pipelines"]:
        for op, sites in pipe["call_sites"].items():
            assert op in level_ops
            for site in sites:
                label = f"{op}_{pipe['name']}"
                if op in ("acquire", "wait"):
                    begins, ends = found[(label, site, "begin")], found[(label, site, "end")]
                    polls = found[(label, site, "poll-begin")], found[(label, site, "poll-end")]
                    calls = found[(label, site, "call-begin")], found[(label, site, "call-end")]  # blocked-only
                    gates = found[(label, site, "gate")]  # polls="begin": a poll's begin time only
                    assert begins + polls[0] + calls[0] + gates >= 1, (label, site)
                    assert begins == ends and polls[0] == polls[1] and calls[0] == calls[1], (label, site)
                else:
                    assert found[(label, site, "")] >= 1, (label, site)
    ops_in_ptx = {label.split("_")[0] for label, _, _ in found} - {"bar"}
    assert ops_in_ptx <= set(level_ops)


def pipeline_spec(num_groups, num_blocks, records_per_lane=64):
    from ikp_cute import ProfileSpec

    return ProfileSpec(num_groups=num_groups, num_blocks=num_blocks, write_stride=num_groups * num_blocks,
                       records_per_lane=records_per_lane, warps_per_group=1)


def assert_full_coverage(meta, gaps: int = 0):
    """The audit of a traced compile: PTX read, every barrier instruction names a site, every site is traced
    or says why not, and only `gaps` sites are untraced for a reason other than the level / options."""
    assert meta["coverage"], "no kernel audited"
    for kernel, c in meta["coverage"].items():
        assert c["ptx_checked"] and not c["unattributed"], (kernel, c)
    assert sum(c["untraced"] for c in meta["coverage"].values()) == gaps
    for site in meta["barrier_sites"]:
        assert site["traced"] or site["reason"], site
        assert site["ptx"] is not None


def assert_sites_match_ptx(ptx: str, sites: list) -> None:
    """Each site's `ptx` count is the number of barrier instructions of the PTX naming it (the `.loc`
    column), each of the site's kind (sites.PTX_KINDS against sites.OP_KINDS), and none names no site."""
    import collections

    from ikp_cute.pipelines.audit import barrier_instructions

    found = barrier_instructions(ptx)
    assert found and all(number is not None for _, number, _, _ in found)
    counts = collections.Counter(number for _, number, _, _ in found)
    kinds = collections.defaultdict(set)
    for _, number, kind, _ in found:
        kinds[number].add(kind)
    expected = {"wait": "wait", "poll": "wait", "sync_threads": "bar_sync"}
    for site in sites:
        assert site["ptx"] == counts.get(site["number"], 0), site
        if site["ptx"] and site["instruction"] != "llvm.inline_asm":
            assert kinds[site["number"]] == {expected.get(site["kind"], site["kind"])}, site
