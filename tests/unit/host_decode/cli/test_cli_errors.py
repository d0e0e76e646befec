"""Bad input -> one clear line naming the file (exit 2), never a traceback or a silent wrong result.
One test per item of issue 15, each reproduced on the shipped data before the fix (docs/cli_safety.md)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from host_decode.cli import main

ROOT = Path(__file__).resolve().parents[4]
PC = ROOT / "tests" / "fixtures" / "pc"
BASIC = ROOT / "examples" / "basic" / "capture.npy"
INSIGHT = ROOT / "examples" / "insight"


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_error_line(err: str, *needles) -> bool:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return len(lines) == 1 and "Traceback" not in err and all(str(n) in lines[0] for n in needles)


def capture_copy(tmp_path, sidecar_text: str | None = None) -> Path:
    cap = tmp_path / "cap.npy"
    shutil.copy(BASIC, cap)
    if sidecar_text is not None:
        cap.with_suffix(".json").write_text(sidecar_text)
    return cap


def test_merge_torch_on_a_json_list(tmp_path, capsys):
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2, 3]")
    rc, _, err = run(capsys, "merge", BASIC, "--torch", bad, "-o", tmp_path / "m.json")
    assert rc == 2 and one_error_line(err, "list.json", "not an event object")
    assert not (tmp_path / "m.json").exists()


def test_join_ncu_on_random_bytes(tmp_path, capsys):
    bad = tmp_path / "random.csv"
    bad.write_bytes(os.urandom(4000) + b"\n\x00" + os.urandom(100))
    for flag in ("--ncu", "--cupti", "--nvbit"):
        rc, _, err = run(capsys, "join", "--map", PC / "tiles_real_ncu.map.json", flag, bad)
        assert rc == 2 and one_error_line(err, "random.csv"), (flag, err)


@pytest.mark.parametrize(
    "other", [{"traceEvents": []}, {"regions": [], "launch": {}, "bubbles": {}}], ids=["chrome-trace", "stats-output"]
)
def test_sidecar_that_is_some_other_json_object(tmp_path, capsys, other):
    cap = capture_copy(tmp_path, json.dumps(other))
    for cmd in (["decode", cap], ["stats", cap], ["report", cap, "-o", tmp_path / "r.html"]):
        rc, _, err = run(capsys, *cmd)
        assert rc == 2 and one_error_line(err, "cap.json", "not an ikp capture sidecar"), (cmd, err)


@pytest.mark.parametrize("text", ['{"kernel": "x"}', "[1, 2]", '{"events": 5}', "\x00\x01 binary"])
def test_names_of_the_wrong_shape(tmp_path, capsys, text):
    names = tmp_path / "names.json"
    names.write_text(text)
    rc, _, err = run(capsys, "decode", BASIC, "--names", names)
    assert rc == 2 and one_error_line(err, "names.json", "names")


@pytest.mark.parametrize("text", ['{"traceEvents": []}', '{"kernel": "x"}', "[[0, 1]]"])
def test_pc2region_names_and_marker_table_of_the_wrong_shape(tmp_path, capsys, text):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    flag = "--marker-table" if text.startswith("{") else "--names"
    for f in ("--names", "--marker-table") if flag == "--marker-table" else ("--names",):
        rc, _, err = run(capsys, "pc2region", PC / "tiles_real_ncu.cubin", f, bad)
        assert rc == 2 and one_error_line(err, "bad.json", "not a"), (f, err)


def test_ncu_csv_cut_in_half(tmp_path, capsys):
    text = (PC / "tiles_real_ncu.csv").read_text()
    mid_line = tmp_path / "mid.csv"
    mid_line.write_text(text[: len(text) // 2])
    at_line = tmp_path / "line.csv"
    at_line.write_text(text[: text.rfind("\n", 0, len(text) // 2) + 1])
    rc, _, err = run(capsys, "join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", mid_line)
    assert rc == 2 and one_error_line(err, "mid.csv", "cut short")
    rc, out, err = run(capsys, "join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", at_line)
    assert rc == 2 and one_error_line(err, "line.csv", "of the kernel's 200 instructions")
    rc, out, err = run(capsys, "join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", PC / "tiles_real_ncu.csv")
    assert rc == 0 and "cubin check: ok" in out


def test_diff_fail_above_with_no_matching_region(capsys):
    rc, _, err = run(capsys, "diff", BASIC, ROOT / "examples" / "megakernel" / "capture.npy", "--fail-above", "1")
    assert rc == 2 and "no region is in both A and B" in err
    rc, _, _ = run(capsys, "diff", BASIC, BASIC, "--fail-above", "1")
    assert rc == 0


def test_merge_gz_writes_real_gzip(tmp_path, capsys):
    out = tmp_path / "s.json.gz"
    rc, _, _ = run(capsys, "merge", INSIGHT / "launch_0.npy", INSIGHT / "launch_1.npy", "-o", out)
    assert rc == 0 and out.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    out2 = tmp_path / "t.json.gz"
    rc, _, _ = run(
        capsys,
        "merge",
        INSIGHT / "launch_0.npy",
        "--torch",
        INSIGHT / "torch_trace.json.gz",
        "--occurrence",
        "0",
        "-o",
        out2,
    )
    assert rc == 0 and json.loads(gzip.decompress(out2.read_bytes()))["ikp_alignment"]


def test_random_bytes_npy_never_suggest_allow_pickle(tmp_path, capsys):
    import random

    bad = tmp_path / "random.npy"
    header = b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, 'shape': (3,), }" + b" " * 50 + b"\n"
    for seed in range(20):  # deterministic fuzz: plain garbage, and a numpy header followed by garbage
        rng = random.Random(seed)
        for blob in (rng.randbytes(3000), header + rng.randbytes(64), header[:10] + rng.randbytes(200)):
            bad.write_bytes(blob)
            rc, _, err = run(capsys, "decode", bad)
            assert rc == 2 and one_error_line(err, "random.npy") and "pickle" not in err.lower(), (seed, err)


def test_missing_file_names_the_file(tmp_path, capsys):
    for cmd in (
        ["decode", tmp_path / "nope.npy"],
        ["stats", tmp_path / "nope.npy"],
        ["kernels", tmp_path / "nope.json"],
        ["join", "--map", tmp_path / "nope.json", "--ncu", "x.csv"],
        ["pc2region", tmp_path / "nope.cubin"],
    ):
        rc, _, err = run(capsys, *cmd)
        assert rc == 2 and one_error_line(err, "nope."), (cmd, err)
        assert not err.split("error: ", 1)[1].startswith("[Errno"), err


def test_cubin_errors_name_the_users_file(tmp_path, capsys):
    random_cubin = tmp_path / "random.cubin"
    random_cubin.write_bytes(os.urandom(3000))
    elf = tmp_path / "elf.cubin"  # an ELF that is not a cubin: nvdisasm's own error used a temporary path
    elf.write_bytes(Path(shutil.which("python3") or "/bin/sh").resolve().read_bytes()[:200000])
    for cubin in (random_cubin, elf):
        for cmd in (["pc2region", cubin], ["report", BASIC, "--cubin", cubin, "-o", tmp_path / "r.html"]):
            rc, _, err = run(capsys, *cmd)
            assert rc == 2 and one_error_line(err, cubin.name) and "ikp_sass_" not in err, (cmd, err)


def test_binary_map_names_the_file(tmp_path, capsys):
    bad = tmp_path / "binary.map"
    bad.write_bytes(b"\xff\xfe" + os.urandom(500))
    rc, _, err = run(capsys, "join", "--map", bad, "--ncu", PC / "tiles_real_ncu.csv")
    assert rc == 2 and one_error_line(err, "binary.map", "not a pc2region map")
    rc, _, err = run(capsys, "report", BASIC, "--map", bad, "-o", tmp_path / "r.html")
    assert rc == 2 and one_error_line(err, "binary.map")


def test_report_cupti_defaults_to_the_kernel_with_markers(tmp_path, capsys):
    """The CUPTI file holds samples of four functions; --kernel defaults to the map's (with markers)."""
    from host_decode.reports.html import extract_data

    out = tmp_path / "r.html"
    rc, _, err = run(
        capsys,
        "report",
        BASIC,
        "--map",
        PC / "tiles_real_cupti.map.json",
        "--cupti",
        PC / "tiles_real_cupti.json.gz",
        "-o",
        out,
    )
    assert rc == 0, err
    data = extract_data(out.read_text())
    assert data["hardware"]["kernel"].startswith("kernel_cutlass_tiles")


def test_ctrl_c_at_any_command(monkeypatch, capsys, tmp_path):
    import host_decode.torch_traces.loader as loader

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(loader, "parse_trace", interrupted)
    rc, _, err = run(capsys, "kernels", INSIGHT / "torch_trace.json.gz", "--no-cache")
    assert rc == 130 and err.strip() == "ikp kernels: interrupted (no output written)"


@pytest.mark.parametrize(
    "key,value", [("launch_index", [1]), ("launch_index", "abc"), ("rank", {}), ("launch_index", True)]
)
def test_session_sidecar_value_that_is_no_integer(tmp_path, capsys, key, value):
    for name, index in (("a", 0), ("b", 1)):
        shutil.copy(BASIC, tmp_path / f"{name}.npy")
        side = json.loads(BASIC.with_suffix(".json").read_text())
        side.update({"launch_index": index, "rank": index})
        if name == "a":
            side[key] = value
        (tmp_path / f"{name}.json").write_text(json.dumps(side))
    caps = [tmp_path / "a.npy", tmp_path / "b.npy"]
    for argv in (["merge", *caps, "--by", "rank", "-o", tmp_path / "m.json"], ["stats", *caps]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and one_error_line(err, "a.json", repr(key), "must be an integer"), (argv, err)
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["merge", BASIC, "-o", "m.json", "--max-lanes", "0"], "--max-lanes"),
        (["merge", BASIC, "-o", "m.json", "--max-lanes", "-1"], "--max-lanes"),
        (["merge", BASIC, "-o", "m.json", "--clock-offset", "x=1"], "--clock-offset: wants RANK=NS"),
        (["diff", BASIC, BASIC, "--alpha", "2"], "--alpha"),
        (["diff", BASIC, BASIC, "--alpha", "0"], "--alpha"),
        (["diff", BASIC, BASIC, "--alpha", "nan"], "--alpha"),
        (["stats", BASIC, "--bins", "0"], "--bins"),
        (["stats", BASIC, "--bins", "-1"], "--bins"),
        (["plot", BASIC, "-o", "p", "--bins", "0"], "--bins"),
        (["plot", BASIC, "-o", "p", "--launch", "-1"], "--launch"),
        (["waits", BASIC, "--max-blocks", "0"], "--max-blocks"),
        (["waits", BASIC, "--cluster", "0"], "--cluster"),
        (["kernels", INSIGHT / "torch_trace.json.gz", "--no-cache", "--bins", "0"], "--bins"),
        (["kernels", INSIGHT / "torch_trace.json.gz", "--no-cache", "--top", "-1"], "--top"),
        (["kernels", INSIGHT / "torch_trace.json.gz", "--no-cache", "--gap-min", "-1"], "--gap-min"),
        (["kernels", INSIGHT / "torch_trace.json.gz", "--no-cache", "-j", "0"], "-j/--jobs"),
        (["diff", BASIC, BASIC, "--min-delta", "-1"], "--min-delta"),
        (["diff", BASIC, BASIC, "--fail-above", "-5"], "--fail-above"),
        (["merge", BASIC, "-o", "m.json", "--occurrence", "-1"], "--occurrence"),
        (["decode", BASIC, "--write-stride", "0"], "--write-stride"),
        (["view", BASIC, "--no-browser", "--port", "70000"], "--port"),
    ],
)
def test_numeric_flag_out_of_range_is_a_usage_error_naming_it(tmp_path, monkeypatch, capsys, argv, flag):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {flag}" in err.splitlines()[-1] and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_diff_gate_error_leaves_no_output(tmp_path, capsys):
    out = tmp_path / "d.json"
    rc, _, err = run(capsys, "diff", BASIC, ROOT / "examples" / "megakernel" / "capture.npy", "--fail-above", "1",
                     "-o", out)
    assert rc == 2 and one_error_line(err, "no region is in both A and B")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["stats", "diff", "plot", "merge", "waits", "report"])
def test_names_on_a_foreign_trace_is_refused(tmp_path, capsys, command):
    """--names names ikp captures; an IKET / Proton trace carries its own: every command refuses the pair with
    decode's message (analysis.sessions.load_trace / load_parts), writing nothing."""
    foreign = ROOT / "examples" / "interop" / "proton_add.chrome_trace"
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"events": {"0": "x"}}))
    rc, _, err = run(capsys, "decode", foreign, "--names", names)
    reason = err.split("error: ", 1)[1].strip()
    assert rc == 2 and "--names" in reason and "proton-chrome" in reason
    argv = {"diff": ["diff", foreign, foreign], "plot": ["plot", foreign, "-o", tmp_path / "p"],
            "merge": ["merge", foreign, "-o", tmp_path / "m.json"],
            "report": ["report", foreign, "-o", tmp_path / "r.html"]}
    rc, _, err = run(capsys, *argv.get(command, [command, foreign]), "--names", names)
    assert rc == 2 and one_error_line(err, f"ikp {command}: error: {reason}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["names.json"]


def test_plot_launch_past_a_single_capture_is_refused(tmp_path):
    """A single capture is one launch: --launch 5 used to draw launch 0 and exit 0."""
    from host_decode.cli import main

    rc = main(["plot", "examples/insight/launch_0.npy", "--launch", "5", "-o", str(tmp_path / "plots")])
    assert rc == 2 and not (tmp_path / "plots").exists()
