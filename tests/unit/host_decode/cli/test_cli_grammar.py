"""One grammar across `ikp` commands (host_decode/cli/common.py): -o/--output is the main output file,
--format table|json|csv where a table is printed, no flag both a switch and a path, --version, an
example in every help, workflow order, tables readable at 80 columns, progress only on a terminal, and
one "next:" line after each command."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from host_decode.cli import WORKFLOW, build_parser, main

ROOT = Path(__file__).resolve().parents[4]
BASIC = ROOT / "examples" / "basic" / "capture.npy"
FA4 = ROOT / "examples" / "fa4_sm90" / "capture.npy"
PC = ROOT / "tests" / "fixtures" / "pc"


def subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, action


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("ikp ")


def test_workflow_order_and_an_example_each():
    parser, action = subparsers()
    names = list(action.choices)
    known = [n for n in names if n in WORKFLOW]
    assert known == [n for n in WORKFLOW if n in names]  # workflow order
    assert names[: len(known)] == known  # commands added later come after
    for name, p in action.choices.items():
        assert "example:" in (p.epilog or "") and f"ikp {name}" in p.epilog, name


def test_every_example_names_files_that_ship():
    """Every file an example reads exists in the repository (-o values are outputs; a line naming an
    UPPERCASE placeholder such as CAPTURE.npy is a synopsis): `ikp waits --help` once named capture.npy."""
    import shlex

    _, action = subparsers()
    for name, p in action.choices.items():
        for line in p.epilog.splitlines()[1:]:
            words = shlex.split(line.split("#")[0].split("(")[0].rstrip(" \\"))
            words = words[words.index("ikp") + 2 :] if "ikp" in words else words
            files = [w for before, w in zip([""] + words, words)
                     if before not in ("-o", "--output") and not w.startswith("-") and "." in w]
            if any(Path(w).name.split(".")[0].isupper() for w in files):
                continue
            for word in files:
                assert (ROOT / word).exists(), f"ikp {name} --help example: {word} does not exist"


def test_one_meaning_per_flag():
    _, action = subparsers()
    meaning = {}
    for name, p in action.choices.items():
        for a in p._actions:
            for flag in a.option_strings:
                takes_value = a.nargs != 0
                if flag in ("--json", "--csv"):
                    pytest.fail(f"ikp {name} {flag}: use --format (and -o for a file)")
                if flag in ("-o", "--output"):
                    assert takes_value and "output" == a.dest, name
                if flag in ("-f", "--force"):
                    assert not takes_value and a.dest == "force" and "replace" in a.help, name
                if flag == "--format":
                    assert set(a.choices) <= {"table", "json", "csv"} and "table" in a.choices, name
                meaning.setdefault(flag, set()).add(takes_value)
    assert all(len(v) == 1 for v in meaning.values()), {k: v for k, v in meaning.items() if len(v) > 1}
    writers = [n for n, p in action.choices.items() if any("-o" in a.option_strings for a in p._actions)]
    for name in writers:
        assert any("--force" in a.option_strings for a in action.choices[name]._actions), f"ikp {name} lacks -f"


def run_cli(*argv, columns=80, tty=False):
    """ikp in a subprocess with a given terminal width; stdout is a pipe (not a terminal)."""
    env = dict(os.environ, COLUMNS=str(columns), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "host_decode.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def test_tables_readable_at_80_columns(tmp_path):
    # stdout is a pipe here, so the console is 160 wide; what a terminal of 80 gets is asked for by width
    import io

    from host_decode.analysis.regions import stats_data
    from host_decode.hardware import join
    from host_decode.hardware.adapters.ncu import read_ncu_csv
    from host_decode.hardware.pc2region import load_map
    from host_decode.load.capture import load_capture
    from host_decode.reports.tables.console import make_console
    from host_decode.reports.tables.decode import print_loss, print_summary
    from host_decode.reports.tables.hardware import print_join
    from host_decode.reports.tables.stats import print_stats

    trace = load_capture(FA4)
    for show in (
        lambda c: (print_loss(trace, c), print_summary(trace, c)),
        lambda c: print_stats(stats_data(trace), c),
        lambda c: print_join(
            join.join(load_map(str(PC / "tiles_real_ncu.map.json")), read_ncu_csv(str(PC / "tiles_real_ncu.csv")))
            .to_json(),
            c,
        ),
    ):
        out = io.StringIO()
        show(make_console(out, width=80))
        text = out.getvalue()
        assert max(len(line) for line in text.splitlines()) <= 80
        if "regions (" in text:
            assert "consumer_0" in text and "mainloop" in text  # names whole, not cut to 3 letters
        if "cubin check" in text:
            assert "instructions" in text and "%" in text  # numeric columns kept


def test_every_table_command_fits_80_columns_end_to_end():
    ins = ROOT / "examples" / "insight"
    for argv in (["decode", FA4], ["stats", FA4], ["diff", ins / "launch_0.npy", ins / "launch_1.npy"],
                 ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", PC / "tiles_real_ncu.csv"],
                 ["kernels", ROOT / "tests" / "fixtures" / "torch" / "torch_gpu_2streams.json.gz", "--no-cache"],
                 ["pc2region", PC / "tiles_real_ncu.cubin"]):
        r = run_cli(*argv, columns=80)
        assert r.returncode == 0, (argv, r.stderr)
        wide = [line for line in r.stdout.splitlines() if len(line) > 80]
        assert not wide, (argv[0], wide[:3])


def test_progress_off_when_not_a_terminal_and_next_step_line(tmp_path):
    r = run_cli("decode", BASIC, "-o", tmp_path / "t.pftrace")
    assert r.returncode == 0
    assert "\r" not in r.stderr and "decoding" not in r.stderr
    nexts = [ln for ln in r.stderr.splitlines() if ln.startswith("next: ")]
    assert len(nexts) == 1 and nexts[0].startswith(f"next: `ikp view {tmp_path / 't.pftrace'}`")
    assert "ui.perfetto.dev" not in r.stderr  # the hint points at the offline viewer: clusters reach no web UI
    r = run_cli("stats", BASIC, "--format", "json")
    assert json.loads(r.stdout)["regions"]  # stdout stays machine-readable: "next:" goes to stderr
    assert r.stderr.startswith("next: ")


def test_quiet_on_every_command_drops_the_next_line(capsys):
    _, action = subparsers()
    for name, p in action.choices.items():
        assert any(a.option_strings == ["-q", "--quiet"] for a in p._actions), f"ikp {name} lacks -q/--quiet"
    assert main(["stats", str(BASIC), "--format", "json", "-q"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["regions"] and "next:" not in cap.err


def test_progress_shown_when_asked(tmp_path):
    """--progress forces the progress lines (what a terminal gets by default) on each slow step."""
    for argv, text in ((["decode", BASIC, "-o", tmp_path / "t.pftrace"], "decoding"),
                       (["stats", BASIC], "statistics"),
                       (["report", BASIC, "-o", tmp_path / "r.html"], "writing the report"),
                       (["kernels", ROOT / "examples" / "insight" / "torch_trace.json.gz", "--no-cache"],
                        "reading the profiler trace")):
        r = run_cli(*argv, "--progress")
        assert r.returncode == 0 and text in r.stderr, (argv[0], r.stderr[-500:])


def test_format_json_everywhere_a_table_is_printed(tmp_path, capsys):
    cases = [
        ["stats", BASIC],
        ["diff", BASIC, BASIC],
        ["merge", BASIC, "-o", tmp_path / "m.json"],
        ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", PC / "tiles_real_ncu.csv"],
        ["kernels", ROOT / "examples" / "insight" / "torch_trace.json.gz", "--no-cache"],
    ]
    for argv in cases:
        assert main([str(a) for a in argv] + ["--format", "json"]) == 0, argv
        json.loads(capsys.readouterr().out)


CAPTURE_COMMANDS = ("decode", "stats", "report", "view", "waits", "diff", "merge", "plot")  # they decode captures
UNBOUNDED = {("kernels", "--stream"), ("kernels", "--device")}  # tids and pids may be negative


def test_names_and_bounds_on_every_command():
    """Every command that decodes captures takes --names FILE (cli/common.py add_names); every int/float flag
    is checked by cli/common.py number(...) but the ids that may be negative."""
    _, action = subparsers()
    for name in CAPTURE_COMMANDS:
        flag = next((a for a in action.choices[name]._actions if "--names" in a.option_strings), None)
        assert flag is not None and flag.metavar == "FILE" and "sidecar" in flag.help, name
    plain = {(name, a.option_strings[-1]) for name, p in action.choices.items() for a in p._actions
             if a.type in (int, float)}
    assert plain == UNBOUNDED


PIPELINES = ROOT / "examples" / "pipelines" / "fa4_sm90_signals.npy"
RENAMED = {"events": {"1": "renamed_load", "2": "renamed_compute"}, "groups": {"0": "renamed_producer"}}


@pytest.mark.parametrize("command", ["stats", "diff", "merge", "plot", "waits", "report-session"])
def test_names_flag_names_the_captures(tmp_path, monkeypatch, capsys, command):
    """--names reaches every capture a command decodes (diff: both sides; report: every launch of a directory),
    over the sidecars' names, through analysis.sessions.load_trace / load_parts."""
    names = tmp_path / "names.json"
    names.write_text(json.dumps(RENAMED))
    session = tmp_path / "session"
    session.mkdir()
    for f in ("launch_0.npy", "launch_0.json", "launch_1.npy", "launch_1.json"):
        (session / f).symlink_to(ROOT / "examples" / "insight" / f)
    argv = {
        "stats": ["stats", BASIC, "--format", "json"],
        "diff": ["diff", BASIC, BASIC, "--format", "json"],
        "merge": ["merge", session, "-o", tmp_path / "m.json"],
        "plot": ["plot", session, "-o", tmp_path / "plots"],
        "waits": ["waits", PIPELINES, "--roles", "group", "--format", "json"],
        "report-session": ["report", session, "-o", tmp_path / "r.html"],
    }[command]
    seen = []
    if command == "plot":  # a PNG's text cannot be read back: look at the trace the histograms are drawn from
        from host_decode.reports import plots

        draw = plots.plot_histograms
        monkeypatch.setattr(plots, "plot_histograms", lambda trace, *a, **k: seen.append(trace) or draw(trace, *a, **k))
    assert main([str(a) for a in argv] + ["--names", str(names)]) == 0
    text = capsys.readouterr().out + "".join(p.read_text() for p in tmp_path.glob("[mr].*"))
    if command == "plot":
        text = json.dumps(seen[0].names.to_json())
    assert "renamed_producer" in text, command
    if command != "waits":  # waits names roles (groups), not regions
        assert "renamed_load" in text, command
    if command == "diff":  # one naming on both sides: every region matched, none on one side only
        rows = json.loads(text)["regions"]
        assert rows and all(r["status"] not in ("only_a", "only_b") for r in rows)
