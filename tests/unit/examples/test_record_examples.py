"""The examples of examples/record as CI runs them without a GPU: `ikp record --dry-run --arch sm_90a -- python
EXAMPLE` compiles each program's kernels traced (FA4's Hopper forward causal and not, quack's Hopper GEMM, the
row-sum kernel called plainly and from a torch.compile'd module) and says per kernel what would be traced."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.support.record_cli import ROOT, ikp_record

# the examples run in child processes: this one imports neither cutlass nor torch
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("cutlass", "torch")),
                                reason="needs nvidia-cutlass-dsl and torch")

EXAMPLES = {  # example -> (modules it needs, {pipelines expected in one kernel}, builds of that kernel)
    "standalone": ((), {"tiles"}, 1),
    "torch_compile_module": ((), {"tiles"}, 1),
    "fa4": (("flash_attn.cute.flash_fwd_sm90",), {"q", "k", "v"}, 2),  # causal and not: two builds, one name
    "quack_gemm": (("quack.gemm_interface",), {"ab", "sched"}, 1),
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_dry_run(example, tmp_path):
    needs, pipelines, builds = EXAMPLES[example]
    for module in needs:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"needs {module}")
    r = ikp_record(tmp_path, "-o", "rec", "--dry-run", "--arch", "sm_90a", "--", sys.executable,
                   ROOT / "examples" / "record" / f"{example}.py", "--iters", "2", own_tmp=False)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((tmp_path / "rec" / "record.json").read_text())
    traced = [k for k in m["kernels"] if k["traced"]]
    (kernel,) = [k for k in traced if pipelines <= set(k["trace"]["pipelines"])]
    assert kernel["compiles"] == builds
    coverage = kernel["trace"]["coverage"]
    assert coverage["ptx_checked"] and coverage["untraced"] == 0 and coverage["traced"] > 0
    assert not m["untraced"] and not m["errors"] and m["dry_run"]["arch"] == "sm_90a"
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert "dry run for sm_90a: nothing launched" in text and "barrier sites traced" in text
