"""The recorder in the program's own process, started before the program runs (`ikp record -- CMD`).

`ikp record` runs CMD with the environment variable ENV_CONFIG (the validated RecordConfig, JSON) and a
directory of its own first on PYTHONPATH holding a generated ``sitecustomize.py``, which Python imports at
start-up, before the program: it runs the site's own sitecustomize (the next one on the path: the program's
environment is kept), then ``start()`` here. The user's files are never touched. Every Python process
started under CMD with that environment records (a launcher's workers each write their own directory,
named by RANK or pid); one that never compiles a CuTe DSL kernel makes no pool and writes a manifest only.

The recording is written once (runtime.Recorder.write): at exit (atexit), when SIGTERM ends the program
(written, then the process ends by SIGTERM as it would have), and after Ctrl-C (SIGINT raises
KeyboardInterrupt as usual; the program unwinds, then atexit writes, marked "interrupted"). A process killed
by SIGKILL or ending through os._exit writes nothing, and the parent says so.

Guarded by tests/unit/host_decode/cli/test_record_cli.py (the child's plumbing, Ctrl-C leaves complete
files only).
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import os
import signal
import sys
import traceback
from pathlib import Path

from host_decode.load.recording import ENV_CONFIG, RecordConfig

from .runtime import Recorder


def chain_sitecustomize(ours: str) -> None:
    """Run the next sitecustomize on sys.path after the directory of `ours` (the site's own)."""
    here = Path(ours).resolve().parent
    path = [p for p in sys.path if p and Path(p).resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - as site.py does: report, go on
        print("ikp record: the site's sitecustomize failed:", file=sys.stderr)
        traceback.print_exc()


def start(ours: str | None = None) -> Recorder | None:
    """Start recording in this process from ENV_CONFIG (nothing when it is unset)."""
    if ours:
        chain_sitecustomize(ours)
    text = os.environ.get(ENV_CONFIG)
    if not text:
        return None
    try:
        config = RecordConfig.from_env(text)
        recorder = Recorder(config).start()
    except Exception as e:  # noqa: BLE001 - the program must run whatever the recorder thinks
        print(f"ikp record: not recording in this process: {e}", file=sys.stderr)
        return None
    atexit.register(finish, recorder)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, lambda signum, frame: interrupted(recorder, "SIGINT"))
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda signum, frame: terminated(recorder))
    return recorder


def interrupted(recorder: Recorder, name: str):
    recorder.signal_name = recorder.signal_name or name
    raise KeyboardInterrupt


def terminated(recorder: Recorder) -> None:
    recorder.signal_name = "SIGTERM"
    try:
        recorder.write("interrupted")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def finish(recorder: Recorder) -> None:
    try:
        recorder.stop("interrupted" if recorder.signal_name else "complete")
    except Exception:  # noqa: BLE001 - at exit: say it; the parent reports the missing manifest
        print("ikp record: writing the recording failed:", file=sys.stderr)
        traceback.print_exc()
