"""Coverage and partly traced pipelines (host_decode.analysis.pipeline_coverage) and what `ikp waits` says of
them: the audit line of each kernel first (the device side's text), and pipelines with only some ops traced,
or none, analysed as far as they go, the missing side counted under its reason."""

import json

import pytest

from host_decode.analysis import pipeline_coverage as pc
from host_decode.analysis.pipelines import analyze_pipelines
from host_decode.analysis.waits import waits_summary
from host_decode.load.capture import save_capture
from tests.support.pipeline_capture import PipelineCapture, pipeline_entry

COVERAGE = {
    "fwd_kernel": {"sites": 46, "traced": 42, "not_recorded": 13, "untraced": 0, "removed": 4,
                   "ptx_instructions": 60, "unattributed": {}, "ptx_checked": True},
    "post_kernel": {"sites": 2, "traced": 1, "not_recorded": 0, "untraced": 1, "removed": 0,
                    "ptx_instructions": 2, "unattributed": {"bar_sync": 2}, "ptx_checked": False},
}
SITES = [
    {"number": 1, "kernel": "fwd_kernel", "kind": "arrive", "site": "f.py:3", "traced": False,
     "reason": "level waits does not record commit", "ptx": 1},
    {"number": 2, "kernel": "fwd_kernel", "kind": "arrive", "site": "f.py:9", "traced": False,
     "reason": "level waits does not record commit", "ptx": 2},
    {"number": 3, "kernel": "fwd_kernel", "kind": "wait", "site": "f.py:12", "traced": False,
     "reason": "inline PTX that does other work", "ptx": 0},  # removed by the compiler: not counted
    {"number": 4, "kernel": "post_kernel", "kind": "wait", "site": "p.py:1", "traced": True, "reason": "", "ptx": 1},
]


def test_audit_lines_are_the_device_sides():
    from ikp_cute.pipelines.audit import summary

    meta = {"coverage": COVERAGE}
    assert pc.audit_lines(meta) == summary(meta)
    assert pc.audit_lines(meta)[0] == ("fwd_kernel: 42 of 42 barrier sites traced (13 not recorded by the "
                                       "level/options; 4 removed by the compiler)")
    assert pc.audit_lines({}) == [] and pc.coverage_summary({}) is None
    cov = pc.coverage_summary({"coverage": COVERAGE, "barrier_sites": SITES, "hooks_replaced": ["x.y"]})
    assert cov["not_traced"] == {"level waits does not record commit": 2}
    assert cov["kernels"] == COVERAGE and cov["hooks_replaced"] == ["x.y"] and len(cov["lines"]) == 2


def test_malformed_coverage_is_refused_by_name():
    with pytest.raises(ValueError, match=r"coverage\['k'\]: \['traced'\]"):
        pc.audit_lines({"coverage": {"k": {**COVERAGE["fwd_kernel"], "traced": "42"}}})
    with pytest.raises(ValueError, match="'coverage' must be an object"):
        pc.audit_lines({"coverage": [1]})
    with pytest.raises(ValueError, match=r"pipelines_untraced\[0\]"):
        pc.pipeline_ops(PipelineCapture(1, 1).region(0, 0, 1, 0, 1).trace([], pipelines_untraced=[3]), [])


def partial_capture():
    """Pipeline A: commits (ids 0, 1) and releases, no wait or acquire traced; pipeline B: waits (10) only; C in
    pipelines_untraced (seen committing at level waits)."""
    cap = PipelineCapture(1, 2)
    for k in range(3):
        cap.instant(0, 0, 0 + k % 2, 10 * k + 1)  # A commits
        cap.region(0, 1, 10, 10 * k + 2, 10 * k + 6)  # B waits
        cap.instant(0, 1, 20 + k % 2, 10 * k + 8)  # A releases
    pipes = [pipeline_entry("A", {"commit": 0, "release": 20}, 2,
                            untraced={"wait": "ops= leaves out wait", "acquire": "ops= leaves out acquire"}),
             pipeline_entry("B", {"wait": 10}, 1, op_type="TmaLoad",
                            untraced={"commit": "level waits does not record commit"})]
    untraced = [{"name": "C", "class": "PipelineUmmaAsync", "site": "c.py:7", "num_stages": 2,
                 "untraced": {"commit": "level waits does not record commit"}}]
    return cap, pipes, untraced


def test_partial_pipelines_are_counted():
    cap, pipes, untraced = partial_capture()
    trace = cap.trace(pipes, pipelines_untraced=untraced, pipeline_level="waits", kernel="partial")
    pa = analyze_pipelines(trace)
    ops = {p["name"]: p for p in pc.pipeline_ops(trace, pa.channels)}
    assert ops["A"]["records"] == {"commit": 3, "release": 3}
    assert ops["A"]["unmatched"] == {
        "commit": {"records": 3, "reason": "waits not traced: ops= leaves out wait"},
        "release": {"records": 3, "reason": "acquires not traced: ops= leaves out acquire"}}
    assert ops["B"]["records"] == {"wait": 3} and ops["B"]["unmatched"] == {
        "wait": {"records": 3, "reason": "commits not traced: level waits does not record commit"}}
    assert ops["B"]["missing"]["acquire"] == "not in the sidecar (no reason given)"
    assert ops["C"] == {"name": "C", "class": "PipelineUmmaAsync", "site": "c.py:7", "traced": [], "records": {},
                        "missing": {"commit": "level waits does not record commit"}, "unmatched": {}}
    data = waits_summary(trace, pa)  # everything analyses: A's commits give TMA intervals with no wait to end them
    a, b = data["async_units"]
    assert a["pipeline"] == "A" and a["uses"] == 3 and a["open"] == 0  # the releases bound ready
    assert "wait: ops= leaves out wait" in a["ready"]
    # B's blocked waits measure ready; with neither commit nor acquire traced nothing bounds the issue: open
    assert b["pipeline"] == "B" and b["classes"]["issue_bounded"] == 3 and b["open"] == 3
    assert b["issue"] == ("not bounded (commit: level waits does not record commit; acquire: not in the sidecar "
                          "(no reason given))")
    assert b["not_used"] == {"ready measured, no earlier anchor to bound the issue": 3}
    assert data["status"]["no_signal_recorded"] == 3  # B's waits: nothing signals them, counted


def test_a_capture_with_only_untraced_pipelines_analyses():
    cap, _, untraced = partial_capture()
    trace = cap.trace([], pipelines_untraced=untraced)
    data = waits_summary(trace)
    assert data["waits"] == 0 and data["async_units"] == [] and [p["name"] for p in data["pipeline_ops"]] == ["C"]


def test_ikp_waits_prints_the_audit_first(tmp_path, capsys):
    from host_decode.cli import main

    cap, pipes, untraced = partial_capture()
    path = save_capture(tmp_path / "cap.npy", cap.buffer(), pipelines=pipes, pipelines_untraced=untraced,
                        coverage=COVERAGE, barrier_sites=SITES, pipeline_level="waits", kernel="partial")
    assert main(["waits", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "coverage: " + pc.audit_lines({"coverage": COVERAGE})[0]
    assert out[1] == "coverage: " + pc.audit_lines({"coverage": COVERAGE})[1]
    text = "\n".join(out)
    assert "pipeline A: 3 commit records with nothing to match (waits not traced: ops= leaves out wait)" in text
    assert "pipeline C (PipelineUmmaAsync, c.py:7): nothing traced (commit: level waits does not record commit)" in text
    assert main(["waits", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["coverage"]["kernels"] == COVERAGE and data["coverage"]["lines"] == [line[10:] for line in out[:2]]
    assert {p["name"] for p in data["pipeline_ops"]} == {"A", "B", "C"}
