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

EXAMPLES = {  # example -> (modules it needs, {pipelines expected in the kernel}, labels of its compiles)
    "standalone": ((), {"tiles"}, ["row_sums_kernel"]),
    "torch_compile_module": ((), {"tiles"}, ["row_sums_kernel"]),
    # causal and not: one kernel name, two compiles, each a kernel of its own (kernel id, selection, captures)
    "fa4": (("flash_attn.cute.flash_fwd_sm90",), {"q", "k", "v"},
            ["flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90 #1 (is_causal=False)",
             "flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90 #2 (is_causal=True)"]),
    "quack_gemm": (("quack.gemm_interface",), {"ab", "sched"}, ["quackgemm_default_epiGemmDefaultSm90"]),
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_dry_run(example, tmp_path):
    needs, pipelines, labels = EXAMPLES[example]
    for module in needs:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"needs {module}")
    r = ikp_record(tmp_path, "-o", "rec", "--dry-run", "--arch", "sm_90a", "--", sys.executable,
                   ROOT / "examples" / "record" / f"{example}.py", "--iters", "2", own_tmp=False)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((tmp_path / "rec" / "record.json").read_text())
    kernels = [k for k in m["kernels"] if k["traced"] and pipelines <= set(k["trace"]["pipelines"])]
    assert [k["label"] for k in kernels] == labels
    assert sorted(k["kernel_id"] for k in kernels) == list(range(len(labels)))  # one pool kernel id per compile
    for kernel in kernels:
        coverage = kernel["trace"]["coverage"]
        assert coverage["ptx_checked"] and coverage["untraced"] == 0 and coverage["traced"] > 0
        assert kernel["selection"] == "1"
    assert not m["untraced"] and not m["errors"] and m["dry_run"]["arch"] == "sm_90a"
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert "dry run for sm_90a: nothing launched" in text and "barrier sites traced" in text
    assert all(f"\n{label}\n" in text for label in labels)
