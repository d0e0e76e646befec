"""The folder `ikp record` leaves (host_decode.reports.recording): built from process folders by hand
(tests/support/recordings.py): summary.txt says per compiled kernel what bounds it and what to run next, the
pool's accounting per kernel id is checked against the selection's reference and the launches the device
counted against those Python saw, two compiles of one name are two kernels, every launch is on one timeline
in trace.pftrace (what `ikp view DIR` serves), `ikp waits` of each capture, an index page, and the folder
appears whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host_decode.reports.recording import finish_recording
from tests.support.recordings import (
    FA4,
    FA4_KERNEL,
    QUACK,
    QUACK_KERNEL,
    kernel_entry,
    pool_row,
    pool_summary,
    process_folder,
)


def kernel(summary: dict, name: str, compile: int = 1) -> dict:
    (entry,) = [k for k in summary["kernels"] if k["name"] == name and k["compile"] == compile]
    return entry


@pytest.fixture()
def finished(tmp_path):
    staging = tmp_path / ".ikp-tmp-1234-rec"
    process_folder(staging, untraced=[{"kernels": ["kernel_old_0"], "launches": 3,
                                       "reason": "compiled before recording started (its compile was not traced)"}])
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    return tmp_path / "rec", summary


def test_the_folder_holds_everything_and_appears_whole(finished):
    out, summary = finished
    assert not any(p.name.startswith(".ikp-tmp") for p in out.parent.iterdir())
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"summary.txt", "index.html", "summary.json", "trace.pftrace", "record.json"} <= names
    assert {"captures/flash_fwd/launch_000001.npy", "captures/flash_fwd/launch_000001.json",
            "waits/flash_fwd/launch_000001.txt", "waits/flash_fwd/launch_000001.json",
            "waits/gemm/launch_000001.txt"} <= names
    assert (out / "trace.pftrace").stat().st_size > 10_000  # `ikp view DIR` serves this file
    waits = json.loads((out / "waits" / "flash_fwd" / "launch_000001.json").read_text())
    assert waits["critical_path"]["segments"]


def test_summary_says_what_bounds_each_kernel_and_what_to_run(finished):
    out, summary = finished
    text = (out / "summary.txt").read_text()
    fa4 = kernel(summary, FA4_KERNEL)
    top = fa4["bound"]["segments"][0]
    # the committed FA4 capture's critical path (ikp waits examples/pipelines/fa4_sm90_signals.npy): the
    # consumer warp groups' own work, ~44.7% each
    assert top["what"] == "work" and top["role"] in ("wg1", "wg2") and 0.40 < top["share"] < 0.50
    assert (f"bounded by: {top['role']}'s own work is the largest part of the critical path ({top['share']:.0%}); "
            "work 92%, waiting 8%; the largest wait: wg1 waiting on q for wg0 (2.7%)") in text
    assert f"{top['share']:6.1%}  {top['role']} works" in text
    assert f"ikp waits {out}/captures/flash_fwd/launch_000001.npy" in text
    assert f"ikp report {out}/captures/gemm/launch_000001.npy -o gemm.html" in text
    assert "launched but not traced:\n  kernel_old_0: 3 launch(es): compiled before recording started" in text
    assert "10 on the device (10 from Python)" in text and "kernel id 0: 1 recorded of 1 selected" in text
    assert "CHECK" not in text and "note:" not in text
    assert kernel(summary, QUACK_KERNEL)["bound"]["segments"]
    html = (out / "index.html").read_text()
    assert "captures/flash_fwd/launch_000001.npy" in html and top["text"] in html and "<script" not in html


def test_pool_accounting_is_checked_against_the_selection(tmp_path):
    """every=4 out of 10 launches selects 0, 4, 8: a pool that recorded 0 and 4 and lost no record is flagged;
    one that recorded 0 and 4 and lost records is not (launch 8 found no room), and the pool's size advice is
    printed. A launch recorded that the selection does not select is flagged whatever was lost."""
    def run(name, recorded, lost):
        staging = tmp_path / f".ikp-tmp-{name}"
        kernels = [kernel_entry(FA4_KERNEL, "flash_fwd", 0, "every=4"), kernel_entry(QUACK_KERNEL, "gemm", 1)]
        pool = pool_summary([pool_row(0, FA4_KERNEL, 10, recorded, lost), pool_row(1, QUACK_KERNEL, 10, [1])])
        captures = {0: (FA4, FA4_KERNEL, "flash_fwd", recorded)}
        process_folder(staging, captures=captures, kernels=kernels, pool=pool)
        finish_recording(staging, tmp_path / name, progress=False)
        return (tmp_path / name / "summary.txt").read_text()

    bad = run("bad", [0, 4], 0)
    assert ("CHECK: selection 'every=4' selects launches [0, 4, 8] of the 10 the device counted; the pool recorded "
            "[0, 4]") in bad
    good = run("good", [0, 4], 300)
    assert "CHECK" not in good and "2 recorded of 3 selected, 300 records lost" in good
    assert "300 records lost; EXHAUSTED: a pool of" in good and "would have held everything (--pool-size)" in good
    extra = run("extra", [0, 3], 300)
    assert "the pool recorded [0, 3] and lost 300 records" in extra


def test_two_compiles_of_one_name_are_two_kernels(tmp_path):
    """FA4's causal and non-causal forward share a kernel name: two compiles, two kernel ids, each with its own
    launch count, selection, captures and critical path; the launches the device counted beyond those Python
    saw (CUDA graph replays) are said."""
    staging = tmp_path / "staging"
    kernels = [kernel_entry(FA4_KERNEL, "flash_fwd-1", 0, compile=1, label="flash_fwd #1 (is_causal=False)",
                            arguments={"is_causal": False}),
               kernel_entry(FA4_KERNEL, "flash_fwd-2", 1, "2", compile=2, label="flash_fwd #2 (is_causal=True)",
                            host_launches=1, arguments={"is_causal": True})]
    pool = pool_summary([pool_row(0, FA4_KERNEL, 10, [1]), pool_row(1, FA4_KERNEL, 5, [2])])
    captures = {0: (FA4, FA4_KERNEL, "flash_fwd-1", [1]), 1: (FA4, FA4_KERNEL, "flash_fwd-2", [2])}
    process_folder(staging, captures=captures, kernels=kernels, pool=pool)
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    one, two = kernel(summary, FA4_KERNEL, 1), kernel(summary, FA4_KERNEL, 2)
    assert [c["path"] for c in one["captures"]] == ["captures/flash_fwd-1/launch_000001.npy"]
    assert [c["path"] for c in two["captures"]] == ["captures/flash_fwd-2/launch_000002.npy"]
    assert one["bound"] and two["bound"] and (one["device_seen"], two["device_seen"]) == (10, 5)
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert "\nflash_fwd #1 (is_causal=False)\n" in text and "\nflash_fwd #2 (is_causal=True)\n" in text
    assert "kernel id 1: 1 recorded of 1 selected" in text and "CHECK" not in text
    assert "compile 2 of this kernel name (its compile-time arguments differ)" in text
    assert ("note: the device counted 5 launches, Python saw 1: 4 ran where Python does not see them (CUDA graph "
            "replays, a launch from C++), counted on the device only") in text


def test_compiles_alike_are_said(tmp_path):
    """Compiles to the same code share one kernel id (the pool settles a kernel on the id of its code): one
    entry, its `builds` the compiles sharing it and its host launches theirs summed, checked against the
    device's count of that id; the summary says the compiles are alike and share the id. Compiles with the same
    compile-time arguments but other code are kernels apart, and the summary says why."""
    staging = tmp_path / "staging"
    kernels = [kernel_entry(QUACK_KERNEL, "gemm", 0, host_launches=7, function="gemm", builds=3, retraced=2),
               kernel_entry(FA4_KERNEL, "flash_fwd-1", 1, compile=1, label="flash_fwd #1", host_launches=1,
                            function="fwd", arguments={"tile_m": 128}),
               kernel_entry(FA4_KERNEL, "flash_fwd-2", 2, compile=2, label="flash_fwd #2", host_launches=1,
                            function="fwd", arguments={"tile_m": 128})]
    pool = pool_summary([pool_row(0, QUACK_KERNEL, 7, [1]), pool_row(1, FA4_KERNEL, 1, []),
                         pool_row(2, FA4_KERNEL, 1, [])])
    process_folder(staging, captures={0: (QUACK, QUACK_KERNEL, "gemm", [1])}, kernels=kernels, pool=pool)
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    text = (tmp_path / "rec" / "summary.txt").read_text()
    gemm = kernel(summary, QUACK_KERNEL)
    assert (gemm["builds"], gemm["host_launches"], gemm["device_seen"], gemm["launch_note"]) == (3, 7, 7, None)
    assert text.count("compiled 3 times alike (the same code): the compiles share kernel id 0") == 1
    assert "traced again 2 time(s) to the same code" in text
    assert text.count("compile-time arguments of another compile of this name, but other code") == 2
    assert "launches: 7 on the device (7 from Python)" in text and "1 recorded of 1 selected" in text
    assert "note:" not in text
    assert "nothing recorded: its selection selected no launch it made" in text and "CHECK" not in text


def test_several_processes_and_an_incomplete_one(tmp_path):
    staging = tmp_path / "staging"
    process_folder(staging, "rank0", rank=0)
    process_folder(staging, "rank1", rank=1, fa4_launches=(1, 2))
    (staging / "rank2").mkdir()  # a process killed before it wrote its manifest
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    out = tmp_path / "rec"
    assert (out / "rank0" / "record.json").exists() and (out / "rank1" / "captures" / "flash_fwd").is_dir()
    assert summary["incomplete"] == ["rank2"]
    assert kernel(summary, FA4_KERNEL)["recorded"] == 3
    assert "left out, no manifest (killed before writing?): rank2" in (out / "summary.txt").read_text()
    assert (out / "trace.pftrace").exists()


def test_an_existing_folder_is_replaced_only_with_force(tmp_path):
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "old.txt").write_text("old")
    staging = tmp_path / "staging"
    process_folder(staging)
    with pytest.raises(FileExistsError, match="use -f/--force"):
        finish_recording(staging, tmp_path / "rec", progress=False)
    assert (tmp_path / "rec" / "old.txt").exists() and staging.exists()
    finish_recording(staging, tmp_path / "rec", force=True, progress=False)
    assert not (tmp_path / "rec" / "old.txt").exists() and (tmp_path / "rec" / "summary.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec"]


def test_a_capture_that_cannot_be_read_is_said_and_the_rest_finished(tmp_path):
    staging = tmp_path / "staging"
    folder = process_folder(staging)
    (folder / "captures" / "gemm" / "launch_000001.npy").write_bytes(b"not numpy")
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert "captures/gemm/launch_000001.npy: DecodeError" in text
    assert kernel(summary, FA4_KERNEL)["bound"] is not None


def test_torch_trace_alignment_is_tried_and_its_outcome_said(tmp_path):
    """A profiler trace with no slice of the recorded kernels: the folder is finished and says why the regions
    were not placed in it (a trace it can align is tested with the real one on the GPU, gpu/record_suite.py)."""
    torch_trace = Path(__file__).resolve().parents[4] / "examples" / "insight" / "torch_trace.json.gz"
    staging = tmp_path / "staging"
    process_folder(staging)
    summary = finish_recording(staging, tmp_path / "rec", torch_trace=torch_trace, progress=False)
    assert summary["torch"]["path"] is None and summary["torch"]["not_aligned"]
    assert "not aligned" in (tmp_path / "rec" / "summary.txt").read_text()


def test_a_torch_trace_written_into_the_recording_is_found_and_aligned(tmp_path):
    """The program wrote its profiler trace into $IKP_RECORD_OUT (the staging folder): found, aligned on the
    FA4 kernel's slices (which contain its regions, 2 us of launch latency before), every region of both
    kernels placed in trace_torch.json.gz beside the profiler's events."""
    import gzip

    from host_decode.load.capture import load_capture

    staging = tmp_path / "staging"
    folder = process_folder(staging)
    trace = load_capture(folder / "captures" / "flash_fwd" / "launch_000001.npy")
    t0, t1 = int(trace.lanes["first_ns"][trace.lanes["first_ns"] >= 0].min()), int(trace.lanes["last_ns"].max())
    skew = 123_456  # the profiler's clock ahead of %globaltimer
    base = t0 - 5_000_000
    slices = [(i, t0 + skew - 2_000 + (i - 1) * 50_000_000, t1 - t0 + 5_000) for i in range(10)]
    events = [{"ph": "X", "cat": "kernel", "name": FA4_KERNEL, "pid": 0, "tid": 7,
               "ts": round((start - base) / 1000.0, 3), "dur": round(dur / 1000.0, 3)} for _, start, dur in slices]
    (staging / "fa4_torch_trace.json").write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": events}))
    summary = finish_recording(staging, tmp_path / "rec", progress=False)
    torch = summary["torch"]
    assert torch["path"] == "trace_torch.json.gz" and torch["aligned_on"] == FA4_KERNEL and torch["consistent"]
    assert abs(torch["offset_ns"] - skew) <= 5_000
    with gzip.open(tmp_path / "rec" / "trace_torch.json.gz", "rt") as f:
        doc = json.load(f)
    ours = [e for e in doc["traceEvents"] if e.get("cat") == "ikp"]
    assert len(ours) > 1000 and doc["ikp_alignment"]["aligned_on"] == FA4_KERNEL
    assert sum(e.get("cat") == "kernel" for e in doc["traceEvents"]) == 10


def fa4_interleaved(staging: Path, first_slice: int = 0, launches: int = 21) -> tuple[Path, int]:
    """FA4 non-causal (kernel id 0) and causal (id 1), one kernel name, launched alternately `launches` times
    each, launch 1 of each recorded; the program's profiler trace holds the slices of that name from
    occurrence `first_slice` on, 300 us apart, its clock 150 us ahead of %globaltimer (the capture of id 0's
    launch 1, occurrence 2, sits 2 us into its slice). Returns the process folder and t0 of the captures."""
    from host_decode.load.capture import load_capture

    kernels = [kernel_entry(FA4_KERNEL, "flash_fwd-1", 0, compile=1, label="flash_fwd #1 (is_causal=False)",
                            host_launches=launches, name_occurrences=[[0, 0, launches, 2]]),
               kernel_entry(FA4_KERNEL, "flash_fwd-2", 1, compile=2, label="flash_fwd #2 (is_causal=True)",
                            host_launches=launches, name_occurrences=[[0, 1, launches, 2]])]
    pool = pool_summary([pool_row(0, FA4_KERNEL, launches, [1]), pool_row(1, FA4_KERNEL, launches, [1])])
    captures = {0: (FA4, FA4_KERNEL, "flash_fwd-1", [1]), 1: (FA4, FA4_KERNEL, "flash_fwd-2", [1])}
    folder = process_folder(staging, captures=captures, kernels=kernels, pool=pool,
                            name_launches={FA4_KERNEL: 2 * launches})
    trace = load_capture(folder / "captures" / "flash_fwd-1" / "launch_000001.npy")
    t0, t1 = int(trace.lanes["first_ns"][trace.lanes["first_ns"] >= 0].min()), int(trace.lanes["last_ns"].max())
    base = t0 - 5_000_000
    start = t0 + 150_000 - 2_000 - 2 * 300_000  # occurrence 0
    events = [{"ph": "X", "cat": "kernel", "name": FA4_KERNEL, "pid": 0, "tid": 7,
               "ts": round((start + i * 300_000 - base) / 1000.0, 3), "dur": round((t1 - t0 + 5_000) / 1000.0, 3)}
              for i in range(first_slice, 2 * launches)]
    (folder / "fa4_torch_trace.json").write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": events}))
    return folder, t0


def test_each_capture_is_aligned_on_the_slice_its_recorded_occurrence_names(tmp_path):
    """Two kernels of one name, launches interleaved: the capture's absolute time is 150 us from the nearest
    slice and the slices are 300 us apart, too close to pick by time; the occurrence the recorder noted
    (launch 1 of id 0 is the name's occurrence 2, launch 1 of id 1 its occurrence 3) picks each slice. The
    summary names the profiler trace where it lies once the recording is finished."""
    fa4_interleaved(tmp_path / ".ikp-tmp-1-rec")
    summary = finish_recording(tmp_path / ".ikp-tmp-1-rec", tmp_path / "rec", progress=False)
    torch = summary["torch"]
    assert torch["path"] == "trace_torch.json.gz" and torch["consistent"] and not torch["not_aligned"]
    assert [(a["kernel_id"], a["launch_indices"], a["occurrences"], a["by"]) for a in torch["alignments"]] == [
        (0, [1], [2], "recorded occurrences"), (1, [1], [3], "recorded occurrences")]
    assert abs(torch["offset_ns"] - 150_000) <= 5_000 and all(a["consistent"] for a in torch["alignments"])
    assert torch["torch_trace"] == str(tmp_path / "rec" / "fa4_torch_trace.json")
    text = (tmp_path / "rec" / "summary.txt").read_text()
    assert f"torch.profiler trace {tmp_path / 'rec' / 'fa4_torch_trace.json'}: regions placed" in text
    assert "flash_fwd #2 (is_causal=True): launch 1 = slice 3 of its name (by recorded occurrences" in text
    assert ".ikp-tmp" not in text


def test_a_profiler_trace_cut_by_its_schedule_is_refused_with_the_reason(tmp_path):
    """The profiler kept only the later slices (its schedule): fewer slices than the program's launches of the
    name, so the recorded occurrences name no slice of this trace; the aligner's own pick by time refuses, and
    the summary says the trace was cut."""
    fa4_interleaved(tmp_path / "staging", first_slice=20)
    summary = finish_recording(tmp_path / "staging", tmp_path / "rec", progress=False)
    torch = summary["torch"]
    assert torch["path"] is None and len(torch["not_aligned"]) == 2
    assert all("holds 22 slices of this name and the program launched it 42 times: the trace was cut" in why
               for why in torch["not_aligned"])
    assert "the trace was cut" in (tmp_path / "rec" / "summary.txt").read_text()
