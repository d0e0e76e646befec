"""ikp record [options] -- CMD ...: run a program and record every CuTe DSL kernel it compiles, with no code, no
sizes and no sizing pass; the folder it writes is read by `ikp view DIR` and starts with summary.txt.

How (docs/guides/recording.md): CMD runs as a child process whose Python starts ikp_cute's recorder before
the program (a generated sitecustomize.py in a directory of its own, first on PYTHONPATH; the configuration,
validated here first, in the environment variable IKP_RECORD; the user's files are never touched). The child
writes what it recorded when it exits, and on SIGINT / SIGTERM; this process then finishes the folder
(host_decode.reports.recording) and renames it into place: DIR appears complete or not at all.

Signals: while CMD runs, Ctrl-C reaches it from the terminal (this process waits for it: the child writes the
launches recorded so far, then the folder is finished); SIGTERM sent to this process is passed on to the
child likewise. A second Ctrl-C while the folder is being finished stops with nothing written (exit 130).
The exit status is CMD's (128 + N when a signal N ended it), or 2 when nothing could be recorded.
"""

import argparse

NAME = "record"
HELP = ("run a program and record every CuTe DSL kernel it compiles (no code, no sizes, no sizing pass): "
        "captures, one timeline, waits and a summary of what bounds each kernel, in one folder")
EXAMPLE = ("ikp record --dry-run --arch sm_90a -- python examples/record/standalone.py   # no GPU needed\n"
           "  ikp record -o rec -- python examples/record/standalone.py && ikp view rec        # on a GPU")

SITECUSTOMIZE = '''\
# Written by `ikp record` (removed when it ends): starts ikp_cute's recorder in this Python process, after
# running the site's own sitecustomize. The program's files are not touched.
import sys

try:
    import ikp_cute.record.child as _ikp_record
except ImportError:
    sys.path.append({root!r})
    import ikp_cute.record.child as _ikp_record
_ikp_record.start(__file__)
'''


def _launches(text: str) -> str:
    from host_decode.load.launches import parse_launches

    try:
        parse_launches(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _kernels(text: str) -> str:
    from host_decode.load.recording import compile_kernels

    try:
        compile_kernels(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _size(text: str) -> int:
    from host_decode.load.recording import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p) -> None:
    from host_decode.cli.common import add_force, add_progress
    from host_decode.load.recording import ARCHES
    from host_decode.load.sidecar import PIPELINE_LEVELS

    p.add_argument("-o", "--output", metavar="DIR",
                   help="the folder to write (default: ikp_record, or ikp_record_N when that is taken)")
    p.add_argument("--kernels", metavar="REGEX", type=_kernels,
                   help="trace only kernels whose name matches (re.search); the others compile untouched")
    p.add_argument("--launches", metavar="SPEC", type=_launches, default="1",
                   help="launches to record per kernel: N, A:B (A..B-1), every=K, last, all, none, and per kernel "
                        "PATTERN=SELECTION, e.g. 'flash.*=2,default=1' (default 1: one launch after the first)")
    p.add_argument("--level", choices=PIPELINE_LEVELS, default="waits",
                   help="what each pipeline records: waits (default), signals (+ commits, releases), all (+ polls)")
    p.add_argument("--pool-size", metavar="SIZE", type=_size,
                   help="the recording pool's size (256M, 2G, ...; default: the pool's); what does not fit is "
                        "counted lost, never overwritten")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: compile the program's kernels for --arch, launch nothing, say what would be traced")
    p.add_argument("--arch", choices=ARCHES, help="the dry run's architecture (default sm_90a)")
    p.add_argument("--torch-trace", metavar="FILE",
                   help="a torch.profiler Chrome trace of this run to place the regions into (default: one the "
                        "program wrote into $IKP_RECORD_OUT, if any)")
    add_force(p)
    add_progress(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the program and its arguments")


def _free_name(base: str = "ikp_record") -> str:
    from pathlib import Path

    if not Path(base).exists():
        return base
    n = 2
    while Path(f"{base}_{n}").exists():
        n += 1
    return f"{base}_{n}"


def _check(args) -> list:
    from pathlib import Path

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("give the program to run after --, e.g. ikp record -- python train.py")
    if args.arch and not args.dry_run:
        raise ValueError("--arch is the architecture of a --dry-run; on a GPU the kernels are built for it")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise ValueError(f"{out}: output directory {out.parent} does not exist (create it first)")
    if (out.exists() or out.is_symlink()) and not args.force:
        raise ValueError(f"{out}: exists; use -f/--force to replace it (or name another -o DIR)")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: exists and is not a directory; name a new directory")
    if args.torch_trace:
        trace = Path(args.torch_trace)
        if not trace.is_file():
            raise ValueError(f"{trace}: no such file (--torch-trace)")
        if out.exists() and out.resolve() in trace.resolve().parents:
            raise ValueError(f"{trace}: --torch-trace lies inside {out}, which -f would replace; move it first")
    return command


def _run_child(command: list, env: dict) -> tuple[int, str | None]:
    """Run CMD; returns (its exit status as a shell reports it, the signal this process passed on, if any)."""
    import signal
    import subprocess

    passed: list[str] = []
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        raise ValueError(f"cannot run {command[0]!r}: {e.strerror or e}") from None

    def on_term(signum, frame):
        passed.append("SIGTERM")
        child.send_signal(signal.SIGTERM)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),  # the terminal sends it to CMD
                signal.SIGTERM: signal.signal(signal.SIGTERM, on_term)}
    try:
        rc = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return (128 - rc if rc < 0 else rc), (passed[0] if passed else None)


def run(args) -> int:
    import os
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from host_decode.cli.common import next_step, show_progress
    from host_decode.load.recording import ENV_CONFIG, ENV_OUT, RecordConfig
    from host_decode.reports.recording import find_processes, finish_recording

    args.output = args.output or _free_name()
    command = _check(args)
    final = Path(args.output)
    staging = final.parent / f".ikp-tmp-{os.urandom(4).hex()}-{final.name}"
    arch = (args.arch or "sm_90a") if args.dry_run else None
    config = RecordConfig(out=str(staging.resolve()), kernels=args.kernels, launches=args.launches,
                          level=args.level, pool_bytes=args.pool_size, dry_run=arch)
    site = Path(tempfile.mkdtemp(prefix="ikp-record-site-"))
    staging.mkdir()
    try:
        root = Path(__file__).resolve().parents[3]
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(root=str(root)), encoding="utf-8")
        env = dict(os.environ)
        env[ENV_CONFIG] = config.to_env()
        env[ENV_OUT] = str(staging.resolve())
        env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [env.get("PYTHONPATH")] if p])
        what = f"dry run for {arch}" if arch else "recording"
        print(f"ikp record: {what} of {' '.join(command)} -> {final}", file=sys.stderr)
        rc, passed = _run_child(command, env)
        shutil.rmtree(site, ignore_errors=True)
        processes, incomplete = find_processes(staging)
        if not processes:
            why = (f"the processes {', '.join(incomplete)} were ended before writing" if incomplete else
                   "no process of CMD compiled a CuTe DSL kernel (is CMD a Python program that builds one?)")
            print(f"ikp record: nothing recorded: {why}; nothing written (exit {rc})", file=sys.stderr)
            shutil.rmtree(staging, ignore_errors=True)
            return rc or 2
        summary = finish_recording(staging, final, torch_trace=args.torch_trace, force=args.force,
                                   progress=show_progress(args))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(site, ignore_errors=True)
        raise
    print((final / "summary.txt").read_text(encoding="utf-8"), end="")
    if passed:
        print(f"ikp record: {passed} passed on to the program; what it recorded before is in {final}", file=sys.stderr)
    if summary["timeline"]:
        next_step(f"ikp view {final} (every recorded launch on one timeline); {final}/index.html", args)
    else:
        next_step(f"read {final}/summary.txt; on a GPU: ikp record -o DIR -- {' '.join(command)}", args)
    return rc
