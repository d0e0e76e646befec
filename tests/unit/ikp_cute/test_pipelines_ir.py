"""trace_pipelines against kernels that route around its Python hooks, its naming, and its audit (CPU,
sm_90a): ikp_cute/testing/kernels/pipelines_paths_kernel.py compiled under the trace.

* a kernel that swaps ``cute.arch.mbarrier_wait`` for its own inline-PTX wait while it is traced, and one
  that waits and arrives with its own inline PTX, are still fully traced (the IR pass);
* pipelines named from participants and makers; a pipeline with no traced op stays readable by the host;
* call sites in a zero-trip loop are reported removed;
* the audit changes no SASS, leaves the caller's artifacts as asked, and a hook left behind is inert.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import subprocess
import tempfile

import pytest

from ikp_cute.testing.sass import dump_options
from tests.support.pipelines_ptx import BAKED, assert_full_coverage, assert_sites_match_ptx, markers, pipeline_spec
from tests.support.record_order import checking_record_order

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")


def _compile(launch: str, level: str = "signals", options: str | None = None, swap: bool = False, **trace_options):
    """(PTX, trace) of pipelines_paths_kernel.<launch> compiled under trace_pipelines (`options` default: keep the
    PTX, its file in the private dump folder); `swap`: with the kernel's own mbarrier_wait in place of cutlass's
    while it is traced."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_paths_kernel as pk

    trace = trace_pipelines(pipeline_spec(8, 4), level=level, address=BAKED, **trace_options)
    with trace, (pk.swapped_wait() if swap else contextlib.nullcontext()):
        compiled = cute.compile(getattr(pk, launch), make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                                options=dump_options("--keep-ptx") if options is None else options)
    return compiled.__ptx__, trace


def _line(text: str, after: int = 0) -> str:
    """`pipelines_paths_kernel.py:<line>` of the first line containing `text` (or `after` lines below it)."""
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    path = os.path.join(root, "ikp_cute", "testing", "kernels", "pipelines_paths_kernel.py")
    with open(path) as f:
        lines = f.read().splitlines()
    return f"pipelines_paths_kernel.py:{next(i for i, line in enumerate(lines, 1) if text in line) + after}"


@pytest.mark.parametrize("level", ["waits", "signals"])
def test_a_swapped_mbarrier_wait_is_still_traced(level):
    """PipelineOrder's wait calls cute.arch.mbarrier_wait, which the kernel replaced with its own inline-PTX
    wait while traced: the Python hook never runs, the IR pass traces it as `turns`' wait, and the sidecar
    says the hook was replaced."""
    from cutlass import cute

    original = cute.arch.mbarrier_wait
    with checking_record_order() as order:
        ptx, trace = _compile("launch_turns", level, swap=True)
    assert cute.arch.mbarrier_wait is original
    meta = trace.metadata()
    assert_full_coverage(meta)
    assert meta["hooks_replaced"] == ["cutlass.cute.arch.mbarrier_wait"]
    (turns,) = meta["pipelines"]
    assert turns["class"] == "PipelineOrder" and turns["call_sites"]["wait"] == [_line("turns.wait(state)")]
    (wait,) = [s for s in meta["barrier_sites"] if s["kind"] == "wait"]
    assert (wait["instruction"], wait["via"], wait["op"], wait["traced"]) == ("llvm.inline_asm", "ir", "wait", True)
    found = markers(ptx)
    assert found[("wait_turns", _line("turns.wait(state)"), "call-begin")] >= 1
    assert found[("wait_turns", _line("turns.wait(state)"), "call-end")] >= 1
    assert order == []
    assert_sites_match_ptx(ptx, meta["barrier_sites"])


def test_an_inline_ptx_wait_is_traced():
    """The kernel's own barrier, arrived on and waited for in inline PTX, is a pipeline of its own named from
    its pointer's variable; an inline-PTX wait on the barrier a pipeline handed out is that pipeline's
    acquire."""
    with checking_record_order() as order:
        ptx, trace = _compile("launch_inline")
    meta = trace.metadata()
    assert_full_coverage(meta)
    by_name = {p["name"]: p for p in meta["pipelines"]}
    assert set(by_name) == {"ring", "flag"}
    assert by_name["flag"]["class"] == "mbarrier"
    assert by_name["flag"]["call_sites"] == {"commit": [_line("inline_arrive(flag_mbar_ptr)")],
                                             "wait": [_line("inline_wait(flag_mbar_ptr, 0)")]}
    assert by_name["ring"]["call_sites"]["acquire"] == [_line("inline_wait(ring.sync_object_empty")]
    via = collections.Counter((s["pipeline"], s["op"], s["via"]) for s in meta["barrier_sites"] if s["traced"])
    assert via[("flag", "wait", "ir")] == via[("flag", "commit", "ir")] == via[("ring", "acquire", "ir")] == 1
    assert markers(ptx)[("acquire_ring", _line("inline_wait(ring.sync_object_empty"), "call-begin")] >= 1
    assert order == []
    assert_sites_match_ptx(ptx, meta["barrier_sites"])


def test_names_from_participants_and_makers():
    """`load_q_producer, load_q_consumer = X.create(...).make_participants()` is `load_q`; `prod, cons =
    make_and_init_kv_pipeline(...).make_participants()` is `kv`, from the maker; a pipeline only committed
    to is named from its variable too."""
    _, trace = _compile("launch_names")
    names = [p["name"] for p in trace.metadata()["pipelines"]]
    assert names == ["load_q", "kv", "committed_only"]


def test_a_pipeline_with_no_traced_op_is_readable_by_the_host():
    """Level waits: `committed_only` is only committed to, which the level does not record. It is listed
    under `pipelines_untraced` with the reason, not in `pipelines` with empty ids, so the host's reader takes
    the sidecar (it refused the whole capture when one pipeline had no ids)."""
    from host_decode.analysis.pipelines import channels_of

    _, trace = _compile("launch_names", "waits")
    meta = trace.metadata()
    assert all(p["ids"] for p in meta["pipelines"])
    (untraced,) = meta["pipelines_untraced"]
    assert untraced["name"] == "committed_only"
    assert untraced["untraced"] == {"commit": "level waits does not record commit"}
    assert {c.name for c in channels_of(meta) if c.kind == "pipeline"} == {"load_q", "kv"}
    assert meta["pipelines"][0]["untraced"] == {"commit": "level waits does not record commit",
                                                "release": "level waits does not record release"}


@pytest.mark.parametrize("level", ["waits", "signals"])
def test_removed_call_sites(level):
    """A wait in a loop of n - n trips: in the traced IR, not in the final PTX. It is reported removed
    (`removed_sites`, its site's `ptx` 0), not as a present call site."""
    ptx, trace = _compile("launch_zero_trip", level)
    meta = trace.metadata()
    (ring,) = meta["pipelines"]
    in_loop, after = (_line("for _ in cutlass.range(n_iters - n_iters)", k) for k in (1, 2))
    assert ring["removed_sites"] == {"wait": [in_loop]}
    assert ring["call_sites"]["wait"] == [after]
    (coverage,) = meta["coverage"].values()
    assert coverage["removed"] == 1
    removed = [s for s in meta["barrier_sites"] if s["ptx"] == 0]
    assert [(s["op"], s["site"]) for s in removed] == [("wait", ring["removed_sites"]["wait"][0])]
    assert ring["removed_sites"]["wait"][0] not in {site for _, site, _ in markers(ptx)}


@pytest.mark.parametrize("launch", ["launch_turns", "launch_inline", "launch_names", "launch_zero_trip"])
@pytest.mark.parametrize("level", ["waits", "signals", "all"])
def test_every_barrier_instruction_names_its_site(launch, level):
    ptx, trace = _compile(launch, level, swap=launch == "launch_turns")
    meta = trace.metadata()
    assert_full_coverage(meta)
    assert_sites_match_ptx(ptx, meta["barrier_sites"])


def _sass(cubin: bytes) -> list[str]:
    """The instructions of a cubin, without addresses, encodings or line info."""
    from host_decode.hardware import sass

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([sass.find_nvdisasm(), "-c", f.name], capture_output=True, text=True, check=True).stdout
    return [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split(";")[0].strip()
            for line in text.splitlines() if re.match(r"^\s*/\*[0-9a-f]+\*/", line)]


def test_the_audit_changes_no_sass():
    """The audit turns line info on for the traced compile: `.loc` directives and a line table, not one
    instruction more or different (SASS of the same traced kernel, audited and not)."""
    from host_decode.hardware import sass

    if not sass.nvdisasm_available():
        pytest.skip("nvdisasm not installed")
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    cubins = {}
    for audit in (True, False):
        with trace_pipelines(pipeline_spec(8, 4), level="waits", address=BAKED, audit=audit) as trace:
            compiled = cute.compile(pk.launch, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                                    options=dump_options("--keep-ptx --keep-cubin"))
        cubins[audit] = compiled.__cubin__
        assert (".loc" in compiled.__ptx__) == audit
        assert all(c["ptx_checked"] == audit for c in trace.metadata()["coverage"].values())
    assert _sass(cubins[True]) == _sass(cubins[False])


def test_the_audit_leaves_artifacts_as_asked():
    """A traced compile without --keep-ptx is audited all the same (the PTX in the process's private directory,
    emptied after), and the compiled object reports no PTX, as the caller asked."""
    tmp = tempfile.gettempdir()
    before = {p for p in os.listdir(tmp) if p.startswith("ikp_audit_")}
    ptx, trace = _compile("launch_names", options="")
    assert ptx is None
    made = {p for p in os.listdir(tmp) if p.startswith("ikp_audit_")} - before
    assert len(made) <= 1 and not [f for p in made for f in os.listdir(os.path.join(tmp, p))], made
    assert_full_coverage(trace.metadata())


def test_a_hook_left_behind_is_inert():
    """A kernel that saved the hooked attribute while traced and puts it back after the context ended leaves
    the hook installed: it only calls cutlass's original (the kernel compiles as the untouched kernel)."""
    from cutlass import Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute.pipelines import trace_pipelines
    from ikp_cute.testing.kernels import pipelines_kernel as pk

    def build():
        return cute.compile(pk.launch, make_fake_compact_tensor(Int32, (4,)), Int32(5), 4,
                            options=dump_options("--keep-ptx")).__ptx__

    plain = build()
    original = cute.arch.mbarrier_wait
    with trace_pipelines(pipeline_spec(8, 4), address=BAKED):
        left_behind = cute.arch.mbarrier_wait
    assert left_behind is not original and cute.arch.mbarrier_wait is original
    cute.arch.mbarrier_wait = left_behind
    try:
        assert build() == plain
    finally:
        cute.arch.mbarrier_wait = original


def test_classify_ops_and_ptx():
    """One table of MLIR ops and one set of PTX patterns, agreeing on each kind; ours are never sites."""
    from ikp_cute.pipelines.sites import OP_KINDS, PTX_KINDS, ptx_kind

    assert ptx_kind("mbarrier.try_wait.parity.shared::cta.b64 P1, [%r7], %r1081, 10000000;") == "wait"
    assert ptx_kind("mbarrier.arrive.expect_tx.shared.b64 %rd99, [%r5], %r1088;") == "arrive"
    assert ptx_kind("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];") == "arrive"
    assert ptx_kind("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r3];") == "arrive"
    assert ptx_kind("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r1], 64;") == "expect_tx"
    assert ptx_kind("bar.sync 1, 256;") == ptx_kind("barrier.sync.aligned 2, 256;") == "bar_sync"
    assert ptx_kind("bar.arrive 3, 256;") == ptx_kind("barrier.cta.arrive 3, 256;") == "bar_arrive"
    for other in ("mbarrier.init.shared.b64 [%r1], 1;", "barrier.cluster.arrive.relaxed;", "membar.gl;",
                  "fence.mbarrier_init.release.cluster;", "cp.async.bulk.tensor.4d.shared::cta.global.tile."
                  "mbarrier::complete_tx::bytes [%r8], [%rd1, {%r1}], [%r5];", "bar.warp.sync -1;"):
        assert ptx_kind(other) is None, other
    # every MLIR kind is one the PTX patterns know (a poll and __syncthreads are a wait and a bar.sync there)
    assert set(OP_KINDS.values()) - {"sync_threads"} <= {kind for kind, _ in PTX_KINDS}
