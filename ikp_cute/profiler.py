"""The handle kernels hold: ``Profiler`` (built inside ``@cute.kernel`` with ``Profiler.create``),
``profile_region`` / ``Profiler.region``, and, for capture windows, ``launch_records`` and
``window_branch``.

``Profiler`` checks the use (ikp_cute/checks.py) and calls its recorder (ikp_cute/recorders/, chosen once
from ``spec.mode`` in RECORDERS); it holds no mode ladder.

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_device_compile.py unless
named otherwise; GPU ones in tests/gpu/test_device_gpu.py):
* A disabled spec compiles to exactly the uninstrumented kernel: every call folds away at trace time
  (test_disabled_ptx_identical_to_uninstrumented; examples: tests/unit/examples/test_examples_compile.py).
* The buffer is the session's: a static size smaller than the spec is a trace-time error, a dynamic one
  disables recording at run time, and a spec with a baked address needs no buffer argument
  (test_misuse_buffer_smaller_than_spec, test_lean_checks_a_dynamic_buffer_size_like_every_mode,
  test_baked_address_needs_no_kernel_argument).
* Misuse visible while tracing is a trace-time error naming the call (test_misuse_*, the checks in
  ikp_cute/checks.py; leader= with a capture window here, the mode's own refusals in its recorder).
* fence="cta" puts a CTA fence after every BEGIN and before every END record, and nothing else does
  (test_fence_option_emits_a_cta_fence_only_when_asked).
* window_branch and launch_records take the same decision in every thread of a launch
  (tests/unit/ikp_cute/test_ring.py, tests/gpu/test_ring_gpu.py).
* A kernel traced on a machine without a GPU and without CUTE_DSL_ARCH compiles for CuTe DSL's default
  architecture, which nobody chose: that is announced once per process, naming CUTE_DSL_ARCH
  (tests/unit/ikp_cute/test_no_gpu_messages.py::test_a_defaulted_architecture_is_announced_once).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import cutlass
from cutlass import Int32, Int64, Uint32, const_expr, cute
from cutlass.cutlass_dsl import if_generate

from . import ambient, inline_ptx, window
from .checks import RegionToken, TraceChecks, source_site
from .recorders import RECORDERS, Recorder, protocol_problems
from .spec import ProfileSpec, ProfileUsageError


def buffer_tensor(spec: ProfileSpec, buf):
    """(the buffer tensor, None or a run-time Boolean: the buffer is long enough) for the kernel argument
    `buf` (the session's kernel_arg()), or for the address baked into the spec when `buf` is None."""
    if buf is None:
        if spec.baked_address is None:
            raise ProfileUsageError(
                f"Profiler.create at {source_site()}: no buffer. Pass the session's kernel argument "
                "(session.kernel_arg()) or build the Session with bake_address=True"
            )
        ptr = cute.make_ptr(Int64, spec.baked_address, cute.AddressSpace.gmem, assumed_align=8)
        return cute.make_tensor(ptr, cute.make_layout(spec.buffer_slots)), None
    size = cute.size(buf.shape)
    if isinstance(size, int):
        if size < spec.buffer_slots:
            raise ProfileUsageError(
                f"Profiler.create at {source_site()}: the buffer has {size} int64 slots but the spec needs "
                f"{spec.buffer_slots} "
                f"({spec.num_blocks} blocks x {spec.num_groups} groups, write_stride {spec.write_stride}, "
                f"{spec.records_per_lane} records per lane): pass the kernel_arg() of the Session whose spec "
                "this is"
            )
        return buf, None
    return buf, Int32(size) >= spec.buffer_slots  # dynamic size: a short buffer disables recording


_arch_announced = False


def announce_defaulted_arch() -> None:
    """Warn once per process when CuTe DSL compiles for an architecture nobody chose: CUTE_DSL_ARCH unset and
    no GPU to detect one from (the DSL then targets its default, sm_100a in 4.8)."""
    global _arch_announced
    if _arch_announced or os.environ.get("CUTE_DSL_ARCH"):
        return
    _arch_announced = True
    try:
        from cutlass.base_dsl.runtime.cuda import get_compute_capability_major_minor
        from cutlass.cutlass_dsl import CuTeDSL

        if get_compute_capability_major_minor() != (None, None):
            return  # a GPU: the DSL compiles for it
        arch = CuTeDSL._get_dsl().envar.arch
    except Exception:  # noqa: BLE001 - a DSL without these hooks: nothing to say
        return
    warnings.warn(f"ikp_cute: no GPU here and CUTE_DSL_ARCH is not set: CuTe DSL compiles this kernel for {arch}, "
                  "its default; set CUTE_DSL_ARCH (e.g. sm_90a) to choose the architecture", UserWarning,
                  stacklevel=3)


@dataclasses.dataclass(frozen=True)
class Profiler:
    """Per-lane recording handle. Build it inside ``@cute.kernel``::

        prof = Profiler.create(spec, prof_buf, group=warp_idx // 4)   # spec: cutlass.Constexpr
        with prof.region("mma"):            # or: with profile_region(prof, "mma"):
            ...
        prof.mark("tile_done")
        prof.finalize()                     # [DROPPED] + FINALIZE; no record may follow it

    group:  the lane's group in this block, 0 <= group < spec.num_groups. A constant out of range is a
            trace-time error; a runtime one is dropped and counted in the stray word, never written.
    leader: runtime predicate choosing the writing thread; default lane 0 of warp
            ``group * spec.warps_per_group``. One thread per lane (atomic mode allows several).
    """

    spec: cutlass.Constexpr[ProfileSpec]
    recorder: Recorder | None  # the mode's recorder; None when the spec is disabled
    checks: TraceChecks

    @staticmethod
    def create(spec: ProfileSpec, buf=None, group=0, leader=None, recorder_class=None) -> Profiler:
        """`recorder_class`: a recorder to build instead of the mode's (a class implementing
        ikp_cute.recorders.Recorder, usually a subclass of the mode's recorder; benchmarks/record_ablation.py
        takes records apart this way)."""
        if not isinstance(spec, ProfileSpec):
            raise TypeError(f"Profiler.create needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
        announce_defaulted_arch()
        if not const_expr(spec.enabled):
            return Profiler(spec, None, TraceChecks())
        if recorder_class is not None:
            problems = protocol_problems(recorder_class)
            if problems:
                raise TypeError(
                    f"Profiler.create(recorder_class={recorder_class.__name__}) at {source_site()}: not a recorder "
                    f"(ikp_cute.recorders.Recorder): {'; '.join(problems)}"
                )
        buffer, buffer_ok = buffer_tensor(spec, buf)
        if spec.window_slots and leader is not None:
            raise ProfileUsageError(
                f"Profiler.create(leader=...) at {source_site()}: a spec with a capture window counts each lane "
                "once, from its default leader; several writers per lane (leader=) need a spec without window_slots"
            )
        recorder = (recorder_class or RECORDERS[spec.mode]).create(spec, buffer, group, leader, buffer_ok)
        return Profiler(spec, recorder, TraceChecks())

    def _fence(self):
        if const_expr(self.spec.fence == "cta"):
            cute.arch.fence_acq_rel_cta()

    def begin(self, name: str, index=None) -> RegionToken | None:
        """Open region `name`; returns the token end() takes. Prefer ``with prof.region(name):``."""
        if not const_expr(self.spec.enabled):
            return None
        self.checks.check_not_finalized(f"prof.begin({name!r})")
        value = self.recorder.begin(self.spec.event_id(name), index)
        self.checks.records += 1
        self._fence()
        token = RegionToken(
            name, value, inline_ptx.current_block(), source_site(), self.checks.records, self.checks
        )
        self.checks.opened(token, self.recorder.needs_token)
        return token

    def end(self, name: str, token: RegionToken | None = None):
        """Close region `name`. Modes "atomic", "static" and "deferred" need begin()'s token, and the
        end must sit in the same block (control-flow level) as its begin, so that a begin that runs is
        always closed: ``with prof.region(name):`` does both."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_not_finalized(f"prof.end({name!r})")
        block = inline_ptx.current_block()
        self.checks.check_end(name, token, self.spec.mode, self.recorder.needs_token, block)
        value, adjacent = None, False
        if token is not None:
            value = token.value
            # The END right after its BEGIN in program order: same control-flow level, nothing recorded
            # in between (a cursor's END then shares the BEGIN's capacity check).
            adjacent = token.block == block and token.records_before == self.checks.records
        self.checks.ended(name)
        self._fence()
        self.recorder.end(self.spec.event_id(name), value, adjacent)

    def mark(self, name: str, index=None):
        """An instant record. Static mode: `index` is a region index (the mark uses its begin slot)."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_not_finalized(f"prof.mark({name!r})")
        self.checks.records += 1
        self.recorder.mark(self.spec.event_id(name), index)

    def region(self, name: str, index=None) -> profile_region:
        """``with prof.region("mma"):`` = ``with profile_region(prof, "mma"):``."""
        return profile_region(self, name, index)

    def finalize(self, leader=None):
        """Write [DROPPED] + FINALIZE (SM id) in the lane's last two slots; once per lane, after its last
        record. Atomic mode with several writers per lane: call it after a barrier that orders all their
        records, with `leader=` naming one of them."""
        if not const_expr(self.spec.enabled):
            return
        self.checks.check_finalize()
        self.recorder.finalize(leader)


class profile_region:
    """``with profile_region(prof, "name"):`` records begin/end of the enclosed code on prof's lane.

    Works in any branch or ``cutlass.range`` loop, nested to any depth. Static mode needs ``index=``
    (the region's slot pair: records 2+2*index and 3+2*index). The name is mapped to an event id when
    the kernel is traced (prof.spec.events), so ids are fixed at compile time.

    ``with profile_region("name"):`` (no Profiler, the ambient form): recorded on the executing warp's lane
    by the ``trace_pipelines`` context the kernel is compiled in (its Session or Pool), and nothing at all
    outside one: the same source compiles to the untouched kernel (ikp_cute/ambient.py).
    """

    def __init__(self, prof: Profiler | str, name: str | None = None, index=None):
        if isinstance(prof, str) and name is None:
            prof, name = None, prof
        elif not isinstance(prof, Profiler):
            raise TypeError(
                f"profile_region(prof, {name!r}): prof must be an ikp_cute Profiler built with Profiler.create, "
                f"or the region's name alone (got {type(prof).__name__})"
            )
        self.prof = prof
        self.name = name
        self.index = index
        self._token = None

    def __enter__(self):
        if self.prof is None:
            ambient.region_event(self.name, ambient.BEGIN)
            return self
        self._token = self.prof.begin(self.name, self.index)
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            if self.prof is None:
                ambient.region_event(self.name, ambient.END)
            else:
                self.prof.end(self.name, self._token)
        return False


def launch_records(spec: ProfileSpec, buf=None):
    """Whether this launch records, the same in every thread of the launch: for a spec with a capture
    window (window_slots > 0) a run-time Boolean (ikp_cute/window.py launch_decision: one 16-byte load
    per thread); True for a spec without one and False for a disabled spec (Python bools: a `const_expr`
    branch on them folds at trace time). For a role whose two copies both create their Profilers (they
    count the lanes); a copy with no Profiler at all takes ``window_branch``, and then every group of the
    kernel does (its closed copies count per block or per warp, which does not add up with lanes that
    count themselves).

    Read it before the role's first collective operation: every lane holds one tick of the launch count
    back until its Profiler's finalize, so the value cannot change before the reader's own lane ends."""
    if not isinstance(spec, ProfileSpec):
        raise TypeError(f"launch_records needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
    if not const_expr(spec.enabled):
        return False
    if const_expr(spec.window_slots == 0):
        return True
    buffer, _ = buffer_tensor(spec, buf)
    return window.launch_decision(spec, buffer) >= 0


_COUNT_AT = ("start", "end")


def window_branch(spec: ProfileSpec, group, recorded, plain, buf=None, count_at: str = "start"):
    """Run ``recorded()`` in a launch that records and ``plain()`` in one that does not, deciding once per
    role (every thread takes the same branch: see launch_records). `recorded` creates and finalizes the
    Profiler of lane `group` (its default leader) as usual; `plain` is the kernel's own code with no
    Profiler for that group, where the copy counts itself in the launch count (ikp_cute/window.py
    count_copy: with the window empty one fire-and-forget add per block, by thread 0; otherwise one per
    warp), so nothing of the profiler is live across the copy: a closed window costs one load, a branch
    and one add per block (per warp while a window is set that the launch is not in;
    examples/fa4_sm90/fa4_instrumented.py). Every group of the kernel runs window_branch in each of its
    exactly ``spec.warps_per_group`` warps (a part of the count is missing otherwise, or counted twice,
    and ``ring.launches()`` refuses the ring); read the decision before the role's first collective
    operation (a warp deciding after its lane's end may read the next launch).

    `count_at`: where the plain copy's warps count themselves, "start" (before ``plain()``) or "end"
    (after it): either is exact; pick the end for a role whose start is on the block's critical path (a
    TMA producer whose first loads every other role waits for), the start for one that waits first (an
    MMA consumer, whose end is its block's end). FA4 closed, H200: producer at the end, consumers at the
    start +0.3%, all at the start +0.5% (docs/capture.md).

    A spec without a window runs ``recorded()`` only, a disabled spec ``plain()`` only (both folded at
    trace time). `group` must not also be counted elsewhere in the launch: a second Profiler for it, in
    either copy, is a lane counted twice (``ring.launches()`` refuses to read such a ring)."""
    if not isinstance(spec, ProfileSpec):
        raise TypeError(f"window_branch needs an ikp_cute ProfileSpec (got {type(spec).__name__})")
    if count_at not in _COUNT_AT:
        raise ProfileUsageError(f"window_branch: count_at={count_at!r} must be one of {_COUNT_AT} at {source_site()}")
    if not const_expr(spec.enabled):
        plain()
        return
    if const_expr(spec.window_slots == 0):
        recorded()
        return
    if isinstance(group, int) and not 0 <= group < spec.num_groups:
        raise ProfileUsageError(f"window_branch: group={group} is outside 0..{spec.num_groups - 1} at {source_site()}")
    buffer, _ = buffer_tensor(spec, buf)
    decision = window.launch_decision(spec, buffer)
    # A launch with a block past the session's lanes, or a group out of range, runs the recorded copy in
    # every block: a thread of no lane has no lane of its own holding the count back, so its decision could
    # be the next launch's, and there the Profilers count the lanes and the strays. Neither test reads
    # %ctaid: the branch waits on the decision alone (FA4 closed, H200: a lane test before the branch cost
    # ~0.28%, docs/capture.md).
    takes_plain = window.grid_fits(spec) & (decision < 0)
    if const_expr(not isinstance(group, int)):
        takes_plain = takes_plain & (Uint32(Int32(group)) < Uint32(spec.num_groups))

    def counted_plain():
        if const_expr(count_at == "start"):
            window.count_copy(spec, buffer, decision)
        else:
            window.count_copy(spec, buffer, decision, ticks=False)  # LOST only, and only when NOT_RECORDED
        plain()
        if const_expr(count_at == "end"):
            window.count_copy(spec, buffer)

    # The plain copy as the `then` block: laid out first, on the fall-through path (FA4 closed: +1.15%
    # against +1.34% the other way round, H200, docs/capture.md).
    if_generate(takes_plain, counted_plain, recorded)
