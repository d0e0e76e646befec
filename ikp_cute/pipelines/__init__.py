"""Pipelines traced automatically: every CuTe DSL pipeline wait and signal, with no source change.

    session = ikp_cute.pipelines.session_for(num_blocks=1024, warps_per_block=12, records_per_lane=512)
    with ikp_cute.trace_pipelines(session, level="waits") as trace:
        compiled = cute.compile(...)            # or any host API that compiles (FA4's, quack's)
    with session.zeroed_then_synced():
        compiled(...)
    trace.save(session, "capture.npy")          # v1 buffer + sidecar with `pipelines` / `barriers`

    pool = ikp_cute.Pool.create()               # or: nothing sized at all (docs/pool.md)
    with ikp_cute.trace_pipelines(pool):        # every kernel compiled inside records into the pool, in the
        ...                                     # launches its selection picks (pool.select; default launch 1)
    captures = pool.captures()                  # [(v1 buffer, sidecar meta)] per kernel launch

Under the context, every kernel *traced* (compiled) records, for each pipeline built on cutlass.pipeline's
MbarrierArray (cutlass.pipeline sm90/sm100 classes and kernels' own subclasses): regions ``acquire_<P>[s]``
(producer waiting for a free stage), ``wait_<P>[s]`` (consumer waiting for data) and ``bar_sync[i]`` (named-
barrier waits), each when it blocked (lasted >= ``blocked_ns``: 256 ns, producer acquires 1024 ns; or followed
a failed poll; a wait that a successful ``try_wait`` poll skipped is not a wait and records nothing); at level
"signals" also instants
``commit_<P>[s]`` (producer arrive / arrive-expect-tx = TMA issue), ``release_<P>[s]`` (consumer arrive) and
``bar_arrive[i]``; at level "all" also ``poll_<P>[s]`` (every try_wait), ``bar_sync[0]`` for
``sync_threads`` and the waits that passed without blocking. Lanes are (block, warp) (see record.py for who
records and why).

Flags in global memory (docs/flags.md) are traced under the same switch, at every level: the primitives of
cutlass.utils.distributed (red_add1 and the spin_lock_* waits, hooked), ikp_cute.flags.signal / wait, and
release reds / atoms / stores no hook built (the IR pass): a signal's INSTANT, a blocked wait's region, each
followed by its payloads (FLAG_ADDR, FLAG_VALUE); the sidecar's ``flags`` names every call site
(flag_ops.py, flag_trace.py).

Every traced compile is audited: each mbarrier / named-barrier operation of the traced kernel is a
numbered site, traced by the Python hooks (hooks.py, the rich path: pipeline objects, roles, names) or by
the IR pass (ir_pass.py: the ops no hook built, e.g. a kernel's own wait or inline PTX), or listed untraced
with a reason; the final PTX says which sites the compiler kept (audit.py). Sidecar keys: ``barrier_sites``,
``coverage``, ``pipelines_untraced``, ``hooks_replaced`` (docs/pipelines.md, "Sidecar keys").

Modules, by job: patches.py (the table of what is hooked), hooks.py (the Tracer and its hooks), roles.py
(which pipeline and role a call belongs to), names.py (call sites and pipeline names), emit.py (records
around a call), placement.py (where blocked-only checks go), record.py (the records' PTX), sites.py
(barrier sites and their identity), ir_pass.py (the IR pass), audit.py (the PTX audit), catalog.py (ids,
names, the sidecar's pipeline keys), flag_ops.py (flag signals and waits as device code), flag_trace.py
(flag call sites, recorded or why not).

Outside the context nothing is patched: a kernel compiled without it is the untouched kernel
(tests/unit/ikp_cute/test_pipelines_compile.py::test_off_is_untouched). Compile caches: a host API that caches
compiled kernels by its own key (FA4's ``compile_cache``, quack's ``jit_cache``) would hand back a
kernel compiled without tracing; the context empties nothing itself: give the traced compile its own
cache (examples/pipelines/compile_cpu.py: ``fa4_private_cache``, ``quack_private_caches``).

Invariants guarded by tests/unit/ikp_cute/test_pipelines_catalog.py (ids, names) and test_pipelines_compile.py
(records per call site in the PTX, off == untouched, the buffer address baked).
"""

from __future__ import annotations

import contextlib
import sys

from .catalog import LEVEL_OPS, LEVELS, Catalog, check_level

__all__ = ["LEVELS", "LEVEL_OPS", "POLL_MODES", "PipelineTrace", "active_tracer", "group_names", "session_for",
           "trace_pipelines"]

POLL_MODES = ("begin", "timed", "off")
# A producer waiting for a free stage is the steady state of a pipeline kept full (a persistent TMA GEMM's
# producer blocks ~2,000 times per CTA for 300-600 ns): stored from 1 us, the GEMM's cost falls from +1.5%
# to +0.15%; consumer waits, the ones that starve math, stay at 256 ns (docs/pipelines.md).
DEFAULT_BLOCKED_NS = {"acquire": 1024, "wait": 256, "bar_sync": 256}


def blocked_thresholds(blocked_ns) -> dict[str, int]:
    """`blocked_ns` as {op: ns} for every blocking op: an int for all of them, or a dict of some
    (the rest at DEFAULT_BLOCKED_NS)."""
    given = blocked_ns if isinstance(blocked_ns, dict) else dict.fromkeys(DEFAULT_BLOCKED_NS, blocked_ns)
    unknown = sorted(set(given) - set(DEFAULT_BLOCKED_NS))
    if unknown:
        raise ValueError(f"trace_pipelines: blocked_ns keys {unknown}; expected some of {sorted(DEFAULT_BLOCKED_NS)}")
    for op, ns in given.items():
        if isinstance(ns, bool) or not isinstance(ns, int) or not 1 <= ns < 2**31:
            raise ValueError(f"trace_pipelines: blocked_ns[{op!r}]={ns!r}; expected an int of ns in [1, 2**31)")
    return {**DEFAULT_BLOCKED_NS, **given}


def group_names(warps_per_block: int, warps_per_group: int = 4) -> list[str]:
    """Lane (group) names of a pipeline capture: `wg<G>.w<W>` for warp W of warp group G."""
    from host_decode.load.pool import warp_lane_names

    return warp_lane_names(warps_per_block, warps_per_group)


def session_for(num_blocks: int, warps_per_block: int, records_per_lane: int = 256, *, kernel: str | None = None,
                device: str = "cuda"):
    """A Session shaped for pipeline lanes: one group per warp (``warps_per_group=1``)."""
    from ikp_cute import ProfileSpec, Session

    spec = ProfileSpec(num_groups=warps_per_block, num_blocks=num_blocks, records_per_lane=records_per_lane,
                       warps_per_group=1)
    return Session(spec, groups=group_names(warps_per_block), kernel=kernel, device=device)


class PipelineTrace(contextlib.ContextDecorator):
    """``with trace_pipelines(session):`` (or ``@trace_pipelines(session)``): kernels compiled inside
    record their pipelines into `session`'s buffer (address baked into the kernel).

    target:  an ikp_cute Session (its buffer's address is used), or a ProfileSpec with `address=`
             (compile without a GPU, CI), or an ikp_cute Pool (``Pool.create()``, or ``Pool.fake(address)`` to
             compile without a GPU): every kernel traced gets a kernel id in the pool and records into it, only
             in the launches its selection picks (ikp_cute/pool.py; a launch not picked runs the kernel's own
             code, pipelines/copies.py).
    kernels: a regex (str or compiled) searched in each kernel's name: kernels it does not match compile
             untouched (no hook, no site, no record). None: every kernel.
    level:   "waits" (default), "signals" or "all".
    polls:   "begin" (default at levels "waits" and "signals"): a try_wait poll reads the time only; when it
             fails, the wait it gates begins there. A wait that a poll's hardware suspension absorbs
             (the poll succeeds after blocking) is not seen. "timed" (default at level "all"): also
             time every poll and record it as a wait/acquire region when it blocked (>= blocked_ns) before
             succeeding; costs FA4 more (docs/pipelines.md). "off": polls untouched (a wait after a failed
             poll begins at the wait).
    blocked_ns: a wait, acquire or named-barrier wait (and a timed poll) is stored when `%globaltimer`
             advanced at least this much across it: an int for every op, or {op: ns} for some of
             "acquire", "wait", "bar_sync". Default: consumer waits and named-barrier waits 256 ns (8 of
             the timer's 32 ns steps on H100/H200), producer acquires 1024 ns (a full pipeline's producer
             blocks all the time; storing those short blocks is most of a persistent GEMM's cost). 64
             also catches the short turn-taking waits of a ping-pong schedule, at a cost
             (docs/pipelines.md). Not used for calls that `passing_waits` records anyway.
    passing_waits: record waits, acquires and named-barrier waits that did not block too (default: only
             at level "all"; each one recorded lengthens the code around the call, docs/pipelines.md).
    named_barriers: record named-barrier waits (bar_sync) and arrives. Default on.
    ops:     record only these ops of the level (e.g. {"acquire"}: the producers' waits only); None = all.
    audit:   read each traced compile's final PTX (with line info on: no instruction changes) to say which
             barrier sites the compiler kept (default True); False: sites are listed, `ptx` unknown.
    """

    def __init__(self, target, level: str = "waits", address: int | None = None, *, polls: str | None = None,
                 named_barriers: bool = True, passing_waits: bool | None = None, ops=None,
                 blocked_ns: int | dict[str, int] | None = None, audit: bool = True, kernels=None):
        import re

        from ikp_cute.pool import Pool

        self.pool = target if isinstance(target, Pool) else None
        self.level = check_level(level)
        if self.pool is not None:
            from ikp_cute.spec import EventRegistry

            from .record_pool import PoolGeometry

            self.spec = None
            self.geometry = PoolGeometry.of_pool(self.pool)
            self.catalog = Catalog(EventRegistry(), level, ops)
        else:
            spec = getattr(target, "spec", target)
            if address is None:
                buffer = getattr(target, "buffer", None)
                if buffer is None:
                    raise ValueError("trace_pipelines: give a Session with a buffer, a Pool, or a spec and address=")
                address = int(buffer.data_ptr())
            if not getattr(spec, "enabled", True):
                raise ValueError("trace_pipelines: the session is disabled (no buffer to record into)")
            from .record import Geometry

            self.spec = spec
            self.geometry = Geometry.of_spec(spec, address)
            self.catalog = Catalog(spec.events, level, ops)
        try:
            self.kernels = re.compile(kernels) if isinstance(kernels, str) else kernels
        except re.error as e:
            raise ValueError(f"trace_pipelines(kernels={kernels!r}): not a regular expression ({e})") from None
        if passing_waits is None:
            passing_waits = self.level == "all"
        if polls is None:
            polls = "timed" if self.level == "all" else "begin"
        if polls not in POLL_MODES:
            raise ValueError(f"trace_pipelines: polls={polls!r}; expected one of {POLL_MODES}")
        blocked_ns = blocked_thresholds({} if blocked_ns is None else blocked_ns)
        self.options = {"polls": polls, "named_barriers": bool(named_barriers),
                        "passing_waits": bool(passing_waits), "blocked_ns": blocked_ns}
        self.ops = None if ops is None else sorted(ops)
        self.audit = bool(audit)
        self._tracer = None

    def __enter__(self):
        from .hooks import Tracer

        if PipelineTrace._active is not None:
            raise RuntimeError("trace_pipelines: already tracing (contexts do not nest)")
        if self._tracer is None:  # one tracer for every entry: its sites and audit accumulate
            self._tracer = Tracer(self.catalog, self.geometry, audit=self.audit, kernels=self.kernels, pool=self.pool,
                                  kernel_meta=self.capture_metadata if self.pool is not None else None, **self.options)
        self._tracer.install()
        PipelineTrace._active = self
        if "torch.distributed" in sys.modules:  # symmetric buffers rendezvoused from now on name their flags
            from ikp_cute.flags import watch_symmetric_memory

            watch_symmetric_memory()
        return self

    def __exit__(self, *exc):
        try:
            self._tracer.uninstall()
        finally:
            PipelineTrace._active = None
        return False

    _active = None

    # --- results ---------------------------------------------------------------------------------------

    def metadata(self) -> dict:
        """Sidecar keys (contract, docs/pipelines.md "Sidecar keys"): pipelines, pipelines_untraced,
        barriers, pipeline_level, barrier_sites, coverage, hooks_replaced, warps_per_group = 1, ..."""
        from .audit import metadata as audit_metadata

        meta = self.catalog.metadata()
        meta["warps_per_group"] = 1
        meta["pipeline_lanes"] = "warp"
        if self.pool is not None:  # a pool's captures carry the names (a session's come from the session)
            meta["events"] = self.catalog.events.as_dict()
        meta["pipeline_options"] = dict(self.options, ops=self.ops, audit=self.audit)
        if self._tracer is not None:
            meta.update(audit_metadata(self._tracer.ledger, self._tracer.audit))
            if self._tracer.replaced:
                meta["hooks_replaced"] = list(self._tracer.replaced)
        return meta

    def capture_metadata(self) -> dict:
        """The sidecar keys of a pool's captures (read at Pool.read time): metadata(), and with flag call sites
        traced the flag keys save() adds (flag_buffers, rank / world_size, the clock measured now when the pool
        is on a GPU)."""
        meta = self.metadata()
        if meta.get("flags"):
            meta.update(flag_facts(self.pool, None))
        return meta

    def save(self, session, path, *, clock: bool | None = None, **extra):
        """Write the session's buffer + sidecar (session's names/geometry + this trace's metadata). With flag
        call sites traced, also `flag_buffers` (ikp_cute.flags.registered()), `rank` / `world_size` under
        torch.distributed, and, `clock` (default: when flags were traced and the buffer is on a GPU), the GPU
        clock's offset to the host's measured now (ikp_cute.clock). `extra`: more sidecar keys. A pool's
        captures: ``pool.captures()`` (each with this trace's metadata and the same flag keys:
        `capture_metadata`)."""
        from host_decode.load.capture import save_capture

        meta = session.meta()
        meta.pop("format", None)
        meta.update(self.metadata())
        if meta.get("flags"):
            meta.update(flag_facts(session, clock))
        meta.update(extra)
        return save_capture(path, session.records(), session.names(), **meta)


def active_tracer():
    """The Tracer of the trace_pipelines context being entered now (None outside one): what ikp_cute.flags uses."""
    trace = PipelineTrace._active
    return None if trace is None else trace._tracer


def flag_facts(session, clock: bool | None) -> dict:
    """Sidecar keys of a flag capture: flag_buffers, rank / world_size, and the clock's offset (docs/flags.md)."""
    from ikp_cute import flags

    out: dict = {}
    buffers = flags.registered()
    if buffers:
        out["flag_buffers"] = buffers
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        out["rank"], out["world_size"] = int(dist.get_rank()), int(dist.get_world_size())
    buffer = getattr(session, "buffer", None)
    if clock or (clock is None and buffer is not None and getattr(buffer, "is_cuda", False)):
        from ikp_cute.clock import sidecar_keys

        out.update(sidecar_keys(buffer.device))
    return out


def trace_pipelines(target, level: str = "waits", address: int | None = None, **options) -> PipelineTrace:
    """Trace every CuTe DSL pipeline of the kernels compiled under it; see the module docstring."""
    return PipelineTrace(target, level, address, **options)
