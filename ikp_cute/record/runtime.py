"""The recorder of one program run: a pool trace active for the whole program, every compile and launch
accounted for, and the recording written once, at the end or when a signal ends the program.

Life of a recording (``Recorder``):
* ``start``: compile caches set aside (caches.py), the DSL hooked as soon as cutlass is imported (hooks.py);
  a dry run puts its stand-ins in place first (dry_run.py);
* the first compile: the pool is made (``Pool.create``, or ``Pool.fake`` in a dry run) on the device current
  then, and ``trace_pipelines(pool, level=..., kernels=<--kernels>)`` entered; it stays entered until the
  end, so every CuTe DSL kernel compiled from then on is traced (the tracer's hooks act only while a kernel
  is being traced) and kernels not matched compile untouched;
* each compile: the build registered (builds.py); a traced kernel gets its pool kernel id and its launch
  selection (``Pool.select``, the parsed --launches), once;
* each launch: counted against its build, or reported untraced with the reason (a dry run skips it);
* ``write``: the pool read once (``Pool.read``), each capture saved (BUFFER.npy + sidecar, save_capture),
  then the manifest (host_decode.load.recording), atomically and last: a process directory without a
  manifest is incomplete and is never used. Signals are held off while writing;
* ``stop``: the trace exited, hooks removed, caches given back, every kernel's selection set to "none"; a
  traced build the program still holds keeps the pool alive (KEEPALIVE) and records nothing.

Invariants (tests/unit/ikp_cute/test_record_runtime.py guards each): every launch is counted once (traced
or untraced with a reason); a recording is written once, complete (manifest last) or not at all; recordings
do not nest; a build compiled before the recording started is reported "launched but not traced".
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import weakref
from pathlib import Path

from host_decode.load.launches import parse_selection
from host_decode.load.recording import MANIFEST_FORMAT, MANIFEST_NAME, RecordConfig, manifest_text
from host_decode.load.sidecar import NAME_KEYS

from .builds import BEFORE, EARLIER, LOADED, NOT_MATCHED, Build, Builds, Untraced, kernel_names

BUILDS = Builds()
KEEPALIVE: dict[int, object] = {}  # id(traced build) -> its pool, while the build lives
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
MANGLED = ("_tensor", "_object_at", "_Float", "_Int", "_Pointer")  # where the DSL's argument mangling starts


def process_tag() -> str:
    """The name of this process's recording: rank<R> under a launcher that sets RANK, else pid<P>."""
    rank = os.environ.get("RANK")
    return f"rank{int(rank)}" if rank and rank.isdigit() else f"pid{os.getpid()}"


def short_name(kernel: str, taken: dict) -> str:
    """A file-system name for a kernel (unique among `taken`: full name -> short)."""
    if kernel in taken:
        return taken[kernel]
    base = re.sub(r"^kernel_(cutlass_)?(kernel_)?", "", kernel)
    cut = min((i for i in (base.find(m) for m in MANGLED) if i >= 3), default=len(base))
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", base[:cut]).strip("._")[:48] or "kernel"
    name, n = base, 2
    while name in taken.values():
        name, n = f"{base}_{n}", n + 1
    taken[kernel] = name
    return name


def resolve_pool_api():
    """The recording pool's module (ikp_cute.pool): its Pool, and its trace_pipelines when it has one (else
    ikp_cute.pipelines.trace_pipelines, which takes a Pool)."""
    try:
        import ikp_cute.pool as api
    except ImportError as e:
        raise RuntimeError(f"ikp record needs the recording pool (ikp_cute.pool), which cannot be imported: {e}")
    return api


class Recorder:
    """One recording (see the module docstring). `pool_api`: a module with Pool (and trace_pipelines),
    default ikp_cute.pool."""

    active: Recorder | None = None

    def __init__(self, config: RecordConfig, *, tag: str | None = None, pool_api=None):
        from .caches import CacheGuards
        from .hooks import DslHooks

        self.config = config
        self.plan = config.plan()
        self.regex = config.kernel_regex()
        self.tag = tag or process_tag()
        self.pool_api = pool_api
        self.builds = BUILDS
        self.recording = BUILDS.new_recording()
        self.guards = CacheGuards()
        self.hooks = DslHooks(self)
        self.untraced = Untraced()
        self.kernels: dict[str, dict] = {}
        self.pending_selects: list[dict] = []  # kernels whose selection waits for the end of a graph capture
        self.shorts: dict[str, str] = {}
        self.pool = None
        self.trace = None
        self.failed = ""
        self.errors: list[str] = []
        self.dry = None
        self.skipped_launches = 0
        self.after_cutlass = None
        self.written = False
        self.stopped = False
        self.signal_name: str | None = None
        self.started_ns = time.time_ns()
        self.timings: dict = {}

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Recorder:
        from .hooks import AfterImport

        if Recorder.active is not None:
            raise RuntimeError("a recording is already active in this process (recordings do not nest)")
        Recorder.active = self
        if self.config.dry_run:
            from .dry_run import DryRun

            self.dry = DryRun(self.config.dry_run)
            self.dry.start()
        self.guards.enter()
        self.after_cutlass = AfterImport("cutlass", self.on_cutlass)
        self.after_cutlass.install()
        return self

    def on_cutlass(self, module) -> None:
        try:
            if self.dry is not None:
                self.dry.on_cutlass()
            self.hooks.install()
            self.guards.refresh()
        except Exception as e:  # noqa: BLE001 - never break the program's import: say it, record nothing
            self.fail(f"hooking the CuTe DSL failed: {type(e).__name__}: {e}")

    def fail(self, why: str) -> None:
        if not self.failed:
            self.failed = why
            print(f"ikp record: {why}; the program continues unrecorded", file=sys.stderr)
        self.errors.append(why)

    def before_compile(self) -> None:
        if Recorder.active is not self:
            return
        self.guards.refresh()
        if self.trace is None and not self.failed:
            self.start_trace()

    def start_trace(self) -> None:
        from .dry_run import FAKE_POOL_ADDRESS

        try:
            api = self.pool_api or resolve_pool_api()
            size = self.config.pool_bytes
            if self.dry is not None:
                self.pool = api.Pool.fake(FAKE_POOL_ADDRESS, size or 256 << 20)
            else:
                self.pool = api.Pool.create(size) if size else api.Pool.create()
            trace = getattr(api, "trace_pipelines", None)
            if trace is None:
                from ikp_cute.pipelines import trace_pipelines as trace
            self.trace = trace(self.pool, level=self.config.level, kernels=self.regex)
            self.trace.__enter__()
        except Exception as e:  # noqa: BLE001 - the program runs on; the summary says why nothing was recorded
            self.trace = None
            self.fail(f"starting the pool trace failed: {type(e).__name__}: {e}")

    def matches(self, kernel: str) -> bool:
        return self.regex is None or self.regex.search(kernel) is not None

    def after_compile(self, compiled, function_name: str, module_hash) -> None:
        try:
            self.register(compiled, function_name, module_hash)
        except Exception as e:  # noqa: BLE001 - the compile succeeded: the program keeps its kernel
            self.errors.append(f"registering {function_name}: {type(e).__name__}: {e}")

    def register(self, compiled, function_name: str, module_hash) -> None:
        names = kernel_names(compiled)
        tracing = self.trace is not None and Recorder.active is self
        traced = tracing and any(self.matches(n) for n in names)
        reason = "" if traced else NOT_MATCHED if tracing else (self.failed or "recording had stopped")
        BUILDS.add(compiled, Build(names, str(function_name), traced, reason, self.recording))
        meta = self.trace.metadata() if traced else None
        if traced:
            self.guards.traced_compile(module_hash)
            self.keep_pool_for(compiled)
        from .dry_run import kernel_report

        for name in names:
            entry = self.kernels.setdefault(name, {"name": name, "short": short_name(name, self.shorts),
                                                   "traced": False, "reason": reason, "compiles": 0,
                                                   "host_launches": 0, "function": str(function_name)})
            entry["compiles"] += 1
            if not (traced and self.matches(name)):
                continue
            entry["traced"], entry["reason"] = True, ""
            entry["trace"] = kernel_report(meta, name)
            if entry.get("kernel_id") is None:
                selection = self.plan.for_kernel(name)
                entry.update(kernel_id=int(self.pool.kernel_id(name)), selection=selection.text,
                             selection_words=selection.describe(), rule=self.plan.rule_for(name))
                if self.dry is None:
                    self.pending_selects.append(entry)
        self.select_pending()

    def capturing(self) -> bool:
        """A CUDA graph is being captured on the current stream (a selection issued now would be captured)."""
        torch = sys.modules.get("torch")
        try:
            return bool(torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())
        except Exception:  # noqa: BLE001
            return False

    def select_pending(self) -> None:
        """Issue the selections of kernels compiled since (Pool.select, a stream-ordered device operation),
        unless a CUDA graph is being captured: then at the next launch outside a capture, or at the end."""
        if not self.pending_selects or self.capturing():
            return
        pending, self.pending_selects = self.pending_selects, []
        for entry in pending:
            self.pool.select(entry["kernel_id"], entry["selection"])

    def keep_pool_for(self, compiled) -> None:
        key = id(compiled)
        KEEPALIVE[key] = self.pool
        try:
            weakref.finalize(compiled, KEEPALIVE.pop, key, None)
        except TypeError:
            pass  # held for the process's life

    def on_load(self, function, where: str):
        """A function handed out by a compiled binary: registered untraced; a bare tvm_ffi.Function wrapped so
        that its launches are seen."""
        from .hooks import UntracedBinary

        try:
            from cutlass.base_dsl.jit_executor import JitCompiledFunction

            if not isinstance(function, JitCompiledFunction) and callable(function):
                function = UntracedBinary(function, self.on_launch)
            BUILDS.add(function, Build((where,), where, False, LOADED, self.recording))
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"registering the binary {where}: {type(e).__name__}: {e}")
        return function

    def on_launch(self, obj) -> bool:
        """Count one launch; True when it must be skipped (a dry run)."""
        if Recorder.active is not self:
            return False
        try:
            if self.pending_selects:
                self.select_pending()
            build = BUILDS.find(obj)
            if build is None:
                self.untraced.add(kernel_names(obj), BEFORE)
            elif build.recording != self.recording:
                self.untraced.add(build.kernels, EARLIER if build.traced else (build.reason or BEFORE))
            elif not build.traced:
                self.untraced.add(build.kernels, build.reason)
            else:
                build.launches += 1
                for name in build.kernels:
                    if name in self.kernels:
                        self.kernels[name]["host_launches"] += 1
        except Exception as e:  # noqa: BLE001 - a launch must never fail for the recorder's sake
            self.errors.append(f"counting a launch: {type(e).__name__}: {e}")
        if self.dry is not None:
            self.skipped_launches += 1
            return True
        return False

    # --- the end ---------------------------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing happened here: no CuTe DSL compile or launch, no error (a helper process of the program)."""
        return self.pool is None and not self.kernels and not self.untraced.counts and not self.errors

    def write(self, status: str = "complete", always: bool = False) -> Path | None:
        """Write this process's recording (once): captures, then the manifest; an idle process writes nothing
        unless `always`. Returns the manifest path."""
        if self.written or (self.idle() and not always):
            return None
        self.written = True
        held = hold_signals()
        try:
            return self.write_now(status)
        finally:
            release_signals(held)

    def write_now(self, status: str) -> Path:
        from host_decode.load.capture import save_capture

        dest = Path(self.config.out) / self.tag
        dest.mkdir(parents=True, exist_ok=True)
        captures, pool_summary = [], {}
        if self.pool is not None and self.dry is None:
            try:
                if self.pending_selects and not self.capturing():
                    self.select_pending()
                contents = self.pool.read()
                for buffer, meta in self.pool.captures(contents):
                    meta = dict(meta)
                    kernel = str(meta.get("kernel", "kernel"))
                    index = int(meta.get("launch_index", len(captures)))
                    rel = f"captures/{short_name(kernel, self.shorts)}/launch_{index:06d}.npy"
                    names = {k: meta.pop(k) for k in NAME_KEYS if k in meta}
                    if "rank" not in meta and os.environ.get("RANK", "").isdigit():
                        meta["rank"] = int(os.environ["RANK"])
                    save_capture(dest / rel, buffer, names, **meta)
                    captures.append({"path": rel, "kernel": kernel, "launch_index": index})
                pool_summary = dict(self.pool.summary(contents))
            except Exception as e:  # noqa: BLE001 - write what there is, say what failed
                status = "failed"
                self.errors.append(f"reading the pool: {type(e).__name__}: {e}")
        manifest = self.manifest(status, captures, pool_summary)
        path = dest / MANIFEST_NAME
        tmp = dest / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
        tmp.write_text(manifest_text(manifest, str(path)), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def manifest(self, status: str, captures: list, pool_summary: dict) -> dict:
        if self.failed and status == "complete":
            status = "failed"
        rank = os.environ.get("RANK", "")
        out = {
            "format": MANIFEST_FORMAT, "status": status, "config": self.config.to_json(), "pid": os.getpid(),
            "rank": int(rank) if rank.isdigit() else None, "argv": list(sys.argv), "signal": self.signal_name,
            "device": self.device_name(), "started_ns": self.started_ns, "ended_ns": time.time_ns(),
            "pool": pool_summary, "kernels": list(self.kernels.values()), "untraced": self.untraced.as_json(),
            "caches": self.guards.report(), "captures": captures, "errors": list(self.errors),
            "timings": self.timings or None,
        }
        if self.dry is not None:
            out["dry_run"] = {"arch": self.dry.arch.name, "launches_skipped": self.skipped_launches,
                              "notes": self.dry.notes}
        return out

    def device_name(self) -> str | None:
        if self.dry is not None:
            return self.dry.arch.gpu
        try:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                return torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001
            pass
        return None

    def stop(self, status: str = "complete", always: bool = False) -> Path | None:
        """Write (if not yet), then undo everything (see the module docstring). Returns the manifest path."""
        path = self.write(status, always)
        if self.stopped:
            return path
        self.stopped = True
        try:
            if self.pool is not None and self.dry is None:
                for entry in self.kernels.values():
                    if entry.get("kernel_id") is not None:
                        self.pool.select(entry["kernel_id"], parse_selection("none").text)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"closing the launch windows: {type(e).__name__}: {e}")
        if self.trace is not None:
            self.trace.__exit__(None, None, None)
        self.hooks.uninstall()
        if self.after_cutlass is not None:
            self.after_cutlass.remove()
        self.guards.exit()
        if self.dry is not None:
            self.dry.stop()
        Recorder.active = None
        return path

    def traced_builds_alive(self) -> int:
        return BUILDS.alive(self.recording)


def hold_signals():
    """Block SIGINT/SIGTERM in this thread while the recording is written (delivered after)."""
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    except (AttributeError, ValueError, OSError):
        return None


def release_signals(previous) -> None:
    if previous is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
