"""Record a whole program's CuTe DSL kernels, with no source edit, no sizes and no sizing pass.

From the command line (docs/guides/recording.md)::

    ikp record -o rec -- python train.py          # every CuTe DSL kernel the program compiles is traced
    ikp view rec                                  # rec/summary.txt says what bounds each kernel first

From Python, the same recording around part of a program::

    with ikp_cute.record(out="rec", kernels="flash", launches="every=100", level="waits"):
        train_steps()

Modules, by job: runtime.py (the recorder: pool, pool trace, compile/launch accounting, writing),
hooks.py (where it meets the DSL: compiles, launches, binary loads, cutlass's import), caches.py (compile
caches set aside while recording), builds.py (what was compiled and launched, traced or why not),
dry_run.py (compiling for an architecture without a GPU), child.py (the recorder in `ikp record`'s child
process). The configuration and the --launches grammar are host_decode.load.recording and
host_decode.load.launches (the CLI validates them before the program starts; host_decode never imports
ikp_cute); the output folder is finished by host_decode.reports.recording.

Invariants: see each module (and tests/unit/ikp_cute/test_record_*.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from pathlib import Path

from host_decode.load.launches import LaunchPlan, Selection, parse_launches, parse_selection
from host_decode.load.recording import RecordConfig, parse_size

__all__ = ["LaunchPlan", "RecordConfig", "Selection", "parse_launches", "parse_selection", "parse_size", "record"]


class record(contextlib.ContextDecorator):
    """``with ikp_cute.record(out=..., kernels=..., launches=..., level=...):`` records every CuTe DSL kernel
    compiled inside (kernels compiled before it are launched untraced, and reported so); on leaving, the
    folder `out` is written whole (captures, trace.pftrace, waits, summary.txt, index.html), as
    `ikp record` writes it.

    out:        the folder to write (must not exist, unless force=True replaces it)
    kernels:    regular expression on kernel names; only those are traced (None: every kernel)
    launches:   --launches spec (host_decode.load.launches): "1" (default), "3:6", "every=100", "last",
                "flash.*=2,default=1", ...
    level:      "waits" (default), "signals" or "all" (trace_pipelines' levels)
    pool_size:  bytes (int) or a size ("256M", "2G"); None: the pool's default
    torch_trace: a torch.profiler Chrome trace of the same run, to align the recording with
    progress:   progress lines on stderr while the folder is finished (default: when stderr is a terminal)
    """

    def __init__(self, out: str | os.PathLike = "ikp_record", kernels: str | None = None, launches: str = "1",
                 level: str = "waits", pool_size: int | str | None = None, *, torch_trace=None,
                 force: bool = False, progress: bool | None = None):
        self.final = Path(out)
        if self.final.exists() and not force:
            raise FileExistsError(f"{out}: exists; pass force=True to replace it")
        size = parse_size(pool_size) if isinstance(pool_size, str) else pool_size
        self.staging = self.final.parent / f".ikp-tmp-{os.urandom(4).hex()}-{self.final.name}"
        self.config = RecordConfig(out=str(self.staging), kernels=kernels, launches=launches, level=level,
                                   pool_bytes=size)
        self.torch_trace, self.force, self.progress = torch_trace, force, progress
        self.recorder = None
        self.summary = None

    def __enter__(self):
        from .runtime import Recorder

        if not self.final.parent.is_dir():
            raise FileNotFoundError(f"{self.final}: its directory {self.final.parent} does not exist")
        self.staging.mkdir()
        self.recorder = Recorder(self.config).start()
        return self

    def __exit__(self, exc_type, exc, tb):
        from host_decode.reports.recording import finish_recording

        status = "interrupted" if exc_type is KeyboardInterrupt else "complete"
        try:
            self.recorder.stop(status, always=True)
            self.summary = finish_recording(self.staging, self.final, torch_trace=self.torch_trace,
                                            force=self.force, progress=self.progress)
        except BaseException:
            import shutil

            shutil.rmtree(self.staging, ignore_errors=True)
            raise
        return False


class _CallableModule(types.ModuleType):
    """`import ikp_cute.record` binds this package to ikp_cute.record: calling it is calling record()."""

    def __call__(self, *args, **kwargs):
        return record(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
