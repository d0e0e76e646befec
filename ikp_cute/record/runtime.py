"""The recorder of one program run: a pool trace active for the whole program, every compile and launch
accounted for, and the recording written once, at the end or when a signal ends the program.

Life of a recording (``Recorder``):
* ``start``: compile caches set aside (caches.py), the DSL hooked as soon as cutlass is imported (hooks.py);
  a dry run puts its stand-ins in place first (dry_run.py);
* the first compile: the pool is made (``ikp_cute.pool.Pool.create``, or ``Pool.fake`` in a dry run, its
  default selection the --launches default) on the device current then, and ``trace_pipelines(pool,
  level=..., kernels=<--kernels>)`` entered; it stays entered until the end, so every CuTe DSL kernel compiled
  from then on is traced (the tracer's hooks act only while a kernel is being traced) and kernels not matched
  compile untouched;
* each trace (the DSL's ``generate_original_ir``): the kernel ids its traced kernels ended the trace with are
  noted with the traced module: the ids the pool settled them on (``Pool.settled``), one per traced kernel of
  that compile. A kernel's code decides its id (``Pool.same_kernel``): a kernel traced again to the same code
  ends on the id of its first trace;
* each compile (``compile_and_cache`` of that module): the build registered (builds.py), one entry per kernel
  it compiled, with that compile's kernel id, and the selection --launches gives its kernel's name issued for
  that id (``Pool.select``: a stream-ordered device op, held back while a CUDA graph is being captured). Two
  compiles of one name to different code (FA4's causal and not) are two kernels, each with its own id, launch
  count and selection. A compile whose kernel ended on an id an earlier build of this recording holds is that
  build's kernel: the same entry (its ``builds`` counts the compiles sharing the id), its launches counted
  there, its selection the one already issued. A trace no compile followed hit the DSL's in-memory cache: the
  entries holding its ids (else those of the build the cache returned) count it as traced again;
* each launch: counted on the host against its build (the launch hooks), or reported untraced with the reason
  (a dry run skips it); the device counts the launches of each kernel id itself (the pool), and the summary
  compares the two. Every launch, traced or not, also counts against its kernel names (``name_launches``;
  those made while a CUDA graph is captured apart, ``name_graph_launches``), and each launch of a traced
  entry notes its occurrence among its name's launches (``name_occurrences``, host_decode.load.recording):
  the slice of that name a torch.profiler trace of the run holds for it;
* ``write``: the pool read once (``Pool.read``), each capture saved (BUFFER.npy + sidecar, save_capture),
  then the manifest (host_decode.load.recording), atomically and last: a process directory without a
  manifest is incomplete and is never used. Signals are held off while writing;
* ``stop``: the trace exited, hooks removed, caches given back, every kernel's selection set to "none"; a
  traced build the program still holds keeps the pool alive (KEEPALIVE) and records nothing.

Invariants (tests/unit/ikp_cute/test_record_runtime.py guards each): every launch is counted once (traced
or untraced with a reason); each compile takes the kernel id its kernel ended the trace with, one entry and one
selection per id (test_each_kernel_code_gets_one_id_and_selection); the host's launches of an id are those of
every build sharing it, issued one selection (test_compiles_alike_count_their_launches_on_one_entry); a trace
the DSL's cache answered counts on the kernel it ended on
(test_a_trace_the_dsl_cache_answers_is_counted_on_the_kernel_it_ended_on); a recording is written once,
complete (manifest last) or not at all; recordings do not nest; a build compiled before the recording started
is reported "launched but not traced"; launch L of an entry is occurrence ``occurrence_of(name_occurrences, L)``
among all host launches of its name, in host order (test_occurrences_number_launches_among_their_name).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
import weakref
from pathlib import Path

from host_decode.load.recording import MANIFEST_FORMAT, MANIFEST_NAME, RecordConfig, add_occurrence, manifest_text
from host_decode.load.sidecar import NAME_KEYS

from .builds import (
    BEFORE,
    EARLIER,
    LOADED,
    NOT_MATCHED,
    NOTHING_TO_RECORD,
    Build,
    Builds,
    Untraced,
    compile_report,
    kernel_names,
    name_compiles,
    short_name,
)

BUILDS = Builds()
KEEPALIVE: dict[int, object] = {}  # id(traced build) -> its pool, while the build lives
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def process_tag() -> str:
    """The name of this process's recording: rank<R> under a launcher that sets RANK, else pid<P>."""
    rank = os.environ.get("RANK")
    return f"rank{int(rank)}" if rank and rank.isdigit() else f"pid{os.getpid()}"


@dataclasses.dataclass
class Trace:
    """One run of the DSL's trace (generate_original_ir): its module, and the pool kernel ids its kernels ended
    the trace with (Pool.settled)."""

    module: object
    module_hash: str | None
    ids: list


class Recorder:
    """One recording (see the module docstring)."""

    active: Recorder | None = None

    def __init__(self, config: RecordConfig, *, tag: str | None = None):
        from .caches import CacheGuards
        from .hooks import DslHooks

        self.config = config
        self.plan = config.plan()
        self.regex = config.kernel_regex()
        self.tag = tag or process_tag()
        self.builds = BUILDS
        self.recording = BUILDS.new_recording()
        self.guards = CacheGuards()
        self.hooks = DslHooks(self)
        self.untraced = Untraced()
        self.kernels: list[dict] = []  # one entry per compiled kernel (builds.py)
        self.compiles: dict[str, int] = {}  # kernel name -> compiles seen
        self.traces: list[Trace] = []  # traces whose compile has not come yet
        self.claimed: set[int] = set()  # positions in pool.settled noted by a trace (traces may nest)
        self.by_id: dict[int, dict] = {}  # kernel id -> the entry that holds it (one per id)
        self.retraced_ids: list[int] = []  # ids of traces the DSL's cache answered that no entry holds (never run)
        self.pending_selects: list[dict] = []  # kernels whose selection waits for the end of a graph capture
        self.pool = None
        self.trace = None
        self.failed = ""
        self.errors: list[str] = []
        self.dry = None
        self.skipped_launches = 0
        self.name_launches: dict[str, int] = {}  # kernel name -> host launches of it, traced or not
        self.name_graph_launches: dict[str, int] = {}  # kernel name -> of those, made inside a CUDA graph capture
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

    def start_trace(self) -> None:
        from ikp_cute.pipelines import trace_pipelines
        from ikp_cute.pool import Pool

        from .dry_run import FAKE_POOL_ADDRESS

        default = self.plan.default.text if self.plan.default.kind != "last" else "1"  # `last` needs its region
        size = {"size_bytes": self.config.pool_bytes} if self.config.pool_bytes else {}
        try:
            if self.dry is not None:
                self.pool = Pool.fake(FAKE_POOL_ADDRESS, default_selection=default, **size)
            else:
                self.pool = Pool.create(default_selection=default, **size)
            self.trace = trace_pipelines(self.pool, level=self.config.level, kernels=self.regex)
            self.trace.__enter__()
        except Exception as e:  # noqa: BLE001 - the program runs on; the summary says why nothing was recorded
            self.trace = None
            self.fail(f"starting the pool trace failed: {type(e).__name__}: {e}")

    def matches(self, kernel: str) -> bool:
        return self.regex is None or self.regex.search(kernel) is not None

    # --- compiles --------------------------------------------------------------------------------------

    def tracing(self) -> bool:
        return self.trace is not None and Recorder.active is self

    def before_trace(self) -> int | None:
        """The DSL starts tracing a module: the pool trace starts on the first one. Returns the mark that
        after_trace takes (the ids the pool settled so far), or None when not tracing."""
        if Recorder.active is not self:
            return None
        self.guards.refresh()
        if self.trace is None and not self.failed:
            self.start_trace()
        if not self.tracing():
            return None
        self.settle_traces()
        return len(self.pool.settled)

    def after_trace(self, generated, mark: int | None) -> None:
        """The trace returned (module, module_hash, result): the ids the pool settled its kernels on since
        `mark` are its own (less those of a trace nested in it)."""
        if mark is None or not self.tracing():
            return
        try:
            positions = [i for i in range(mark, len(self.pool.settled)) if i not in self.claimed]
            self.claimed.update(positions)
            self.traces.append(Trace(generated[0], generated[1], [self.pool.settled[i] for i in positions]))
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"noting a trace's kernel ids: {type(e).__name__}: {e}")

    def take_trace(self, module) -> Trace | None:
        for i, t in enumerate(self.traces):
            if t.module is module:
                return self.traces.pop(i)
        return None

    def settle_traces(self) -> None:
        """Traces no compile followed: the DSL's in-memory cache held a build of the same module hash, which
        runs instead. Its kernels are the trace's (the same code ends on the same ids): the entries holding
        those ids count the trace as traced again; ids no entry holds (else the build the cache returned
        counts it) never run."""
        pending, self.traces = self.traces, []
        for t in pending:
            held = [self.by_id[i] for i in dict.fromkeys(t.ids) if i in self.by_id]
            self.retraced_ids.extend(i for i in t.ids if i not in self.by_id)
            if not held:
                cached = self.hooks.cached(t.module_hash)
                build = BUILDS.find(cached) if cached is not None else None
                held = build.entries if build is not None else []
            for entry in held:
                entry["retraced"] = entry.get("retraced", 0) + 1

    def after_compile(self, compiled, function_name: str, module_hash, module, arguments: dict) -> None:
        try:
            self.register(compiled, function_name, module_hash, module, arguments)
        except Exception as e:  # noqa: BLE001 - the compile succeeded: the program keeps its kernel
            self.errors.append(f"registering {function_name}: {type(e).__name__}: {e}")

    def compile_failed(self, module) -> None:
        self.take_trace(module)

    def register(self, compiled, function_name: str, module_hash, module, arguments: dict) -> None:
        names = kernel_names(compiled)
        tracing = self.tracing()
        trace = self.take_trace(module) if tracing else None
        ids = {self.pool.kernels[i]: i for i in trace.ids} if trace is not None else {}
        full = tracing and len(self.pool.kernels) >= self.pool.max_kernels
        sites = []  # a kernel compiled again reports its newest compile's sites (pipelines/sites.py drop_kernel)
        if tracing and any(self.matches(n) for n in names):
            sites = self.trace.metadata().get("barrier_sites") or []
        build = Build(names, str(function_name), bool(ids), "", self.recording)
        for name in names:
            known = self.by_id.get(ids.get(name, -1))
            if known is not None:  # the code of an earlier build: its kernel, launches counted on its entry
                known["builds"] += 1
                build.entries.append(known)
                continue
            self.compiles[name] = self.compiles.get(name, 0) + 1
            entry = {"name": name, "compile": self.compiles[name], "function": str(function_name),
                     "arguments": arguments, "traced": False, "kernel_id": None, "host_launches": 0,
                     "builds": 1, "retraced": 0, "reason": self.why_not(name, tracing, full)}
            if tracing and self.matches(name):
                entry["trace"] = compile_report(sites, name)
            if name in ids:
                selection = self.plan.for_kernel(name)
                entry.update(traced=True, reason="", kernel_id=ids[name], selection=selection.text,
                             selection_words=selection.describe(), rule=self.plan.rule_for(name))
                self.by_id[ids[name]] = entry
                self.pending_selects.append(entry)
            self.kernels.append(entry)
            build.entries.append(entry)
        build.reason = next((e["reason"] for e in build.entries if e["reason"]), "")
        for kernel_id in set(ids.values()) - {e["kernel_id"] for e in build.entries}:
            self.errors.append(f"kernel id {kernel_id} ({self.pool.kernels[kernel_id]}) was traced in the compile "
                               f"of {function_name}, which has no kernel of that name")
        BUILDS.add(compiled, build)
        if build.traced:
            self.guards.traced_compile(module_hash)
            self.keep_pool_for(compiled)
        self.select_pending()

    def why_not(self, name: str, tracing: bool, full: bool) -> str:
        if not tracing:
            return self.failed or "recording had stopped"
        if not self.matches(name):
            return NOT_MATCHED
        if full:
            return (f"the pool holds its {self.pool.max_kernels} kernels (one per distinct traced code): compiled "
                    "untouched (--kernels REGEX traces only the kernels you want)")
        return NOTHING_TO_RECORD

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
            try:
                self.pool.select(entry["kernel_id"], entry["selection"])
            except (RuntimeError, ValueError) as e:  # e.g. no room left for another `last` region
                entry["selection_error"] = str(e)
                self.errors.append(f"selection {entry['selection']!r} of kernel id {entry['kernel_id']}: {e}")

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

    # --- launches --------------------------------------------------------------------------------------

    def on_launch(self, obj) -> bool:
        """Count one launch on the host; True when it must be skipped (a dry run)."""
        if Recorder.active is not self:
            return False
        try:
            if self.pending_selects:
                self.select_pending()
            build = BUILDS.find(obj)
            names = kernel_names(obj) if build is None else build.kernels
            if build is None:
                self.untraced.add(names, BEFORE)
            elif build.recording != self.recording:
                self.untraced.add(build.kernels, EARLIER if build.traced else (build.reason or BEFORE))
            elif not build.traced:
                self.untraced.add(build.kernels, build.reason)
            else:
                build.launches += 1
                for entry in build.entries:
                    if entry["traced"]:
                        occurrence = self.name_launches.get(entry["name"], 0)
                        add_occurrence(entry.setdefault("name_occurrences", []), entry["host_launches"], occurrence)
                    else:
                        self.untraced.add((entry["name"],), entry["reason"])
                    entry["host_launches"] += 1
            self.count_names(names)
        except Exception as e:  # noqa: BLE001 - a launch must never fail for the recorder's sake
            self.errors.append(f"counting a launch: {type(e).__name__}: {e}")
        if self.dry is not None:
            self.skipped_launches += 1
            return True
        return False

    def count_names(self, names) -> None:
        """One host launch of each of `names` (a launch made inside a CUDA graph capture counted apart too: its
        replays run where Python does not see them)."""
        captured = self.capturing()
        for name in dict.fromkeys(names):
            self.name_launches[name] = self.name_launches.get(name, 0) + 1
            if captured:
                self.name_graph_launches[name] = self.name_graph_launches.get(name, 0) + 1

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
        self.settle_traces()
        name_compiles(self.kernels)
        shorts = {e["kernel_id"]: e["short"] for e in self.kernels if e["kernel_id"] is not None}
        captures, pool_summary = [], {}
        if self.pool is not None and self.dry is None:
            try:
                if self.pending_selects and not self.capturing():
                    self.select_pending()
                contents = self.pool.read()
                taken = {f"#{k}": short for k, short in shorts.items()}
                for buffer, meta in self.pool.captures(contents):
                    meta = dict(meta)
                    kernel = str(meta.get("kernel", "kernel"))
                    kernel_id = int((meta.get("pool") or {}).get("kernel_id", -1))
                    index = int(meta.get("launch_index", len(captures)))
                    short = shorts.get(kernel_id) or short_name(f"{kernel}#{kernel_id}", taken)
                    rel = f"captures/{short}/launch_{index:06d}.npy"
                    names = {k: meta.pop(k) for k in NAME_KEYS if k in meta}
                    if "rank" not in meta and os.environ.get("RANK", "").isdigit():
                        meta["rank"] = int(os.environ["RANK"])
                    save_capture(dest / rel, buffer, names, **meta)
                    captures.append({"path": rel, "kernel": kernel, "kernel_id": kernel_id, "launch_index": index})
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
            "pool": pool_summary, "kernels": list(self.kernels), "untraced": self.untraced.as_json(),
            "retraced_ids": sorted(self.retraced_ids), "caches": self.guards.report(), "captures": captures,
            "errors": list(self.errors), "timings": self.timings or None, "name_launches": dict(self.name_launches),
            "name_graph_launches": dict(self.name_graph_launches),
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
            if self.pool is not None:
                for entry in self.kernels:
                    if entry.get("kernel_id") is not None:
                        self.pool.select(entry["kernel_id"], "none")
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
