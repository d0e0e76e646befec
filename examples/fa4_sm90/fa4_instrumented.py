"""FlashAttention-4's Hopper forward: the phase regions that pipelines cannot say, without copying a line.

Waits, signals and stages of FA4's pipelines (K, V, Q), and its warp-scheduler barriers, come from
`ikp_cute.trace_pipelines` with no subclass at all (examples/fa4_sm90/pipelines.py, docs/pipelines.md).
What is left here is what no pipeline call marks: the role regions (`producer`, `consumer`), the main
loop, each n-block iteration, softmax, the TMA issue of K/V (`load_K`, `load_V`) and the epilogue.

`InstrumentedFlashAttentionForwardSm90` subclasses FA4's `FlashAttentionForwardSm90` and overrides the
seams the kernel already has (`load`, `mma`, the per-n-block steps, `load_KV`, `epilogue`); each
override opens a profile region and calls the parent's method (plain Python, no ``@cute.jit``: they run
while FA4's kernel is traced). Softmax is timed through a thin proxy of FA4's own Softmax object.

The profiler buffer reaches the kernel without changing FA4's launch signature: the session is built
with ``bake_address=True``, so its address is an immediate in the kernel (one compiled kernel per
buffer). `patched_interface(spec)` makes `flash_attn.cute.interface` build this class instead of FA4's,
with a private compile cache for the duration (FA4's cache key does not know about the profiler).
It composes with `trace_pipelines` (its own session, per-warp lanes): enter both around one compile.

Lanes: group 0 = producer warp group (leader: lane 0 of warp 0, FA4's TMA warp), groups 1 and 2 = the
two consumer (MMA) warp groups (leaders: lane 0 of warps 4 and 8). One lane per (CTA, group); FA4's
sm90 forward is not persistent, so num_blocks = batch * heads * ceil(seqlen_q / tile_m).

Cost (H200, b=2 s=4096 h=16 d=128 bf16, medians of 200 alternating launches, 2026-11-27; README, "Real
kernels"): per-tile regions on both roles cost +1.88% non-causal / +1.00% causal with a lean session
(`ProfileSpec(mode="lean")`: no profiler state in the consumers' registers across FA4's register-tight main
loop), +4.73% / -0.57% with the default register cursor, whose lane state held live across that loop
changes its schedule. Per-iteration regions (`iter`: +3.11% / +1.18% with the cursor, +7.51% / +4.81% lean)
are cheaper with the default cursor; the producer role alone costs +0.43% / +0.93% even at detail "full".

Invariants a change could break (tests/unit/examples/test_examples_compile.py guards them):
* with a disabled spec the class compiles to FA4's own PTX (test_fa4_disabled_is_fa4);
* instrumented PTX differs from FA4's only by profiler code, every event of the detail level is
  registered, and the buffer address is an immediate
  (test_fa4_instrumented_compiles_and_differs_only_by_profiler);
* FA4's positional `mma`/`load` signatures are bound by name (inspect), so a reordering upstream
  fails loudly at trace time instead of wrapping the wrong argument.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import weakref

from cutlass import cute
from cutlass.base_dsl.utils.mlir_value_tree import (
    extract_mlir_values,
    new_from_mlir_values,
)
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90

from ikp_cute import Profiler, ProfileSpec, profile_region, window_branch

GROUPS = ("producer", "consumer_0", "consumer_1")

# Detail levels: each adds events to the previous one. Ids are pinned in this order (stable names).
DETAIL_EVENTS = {
    "tile": ("producer", "consumer", "mainloop", "epilogue"),
    "iter": ("n_block",),
    "full": ("softmax", "load_K", "load_V"),
}
DETAILS = tuple(DETAIL_EVENTS)


def events_for(detail: str) -> list[str]:
    """Event names recorded at `detail` (cumulative), in id order."""
    if detail not in DETAILS:
        raise ValueError(f"detail={detail!r}: expected one of {DETAILS}")
    names: list[str] = []
    for level in DETAILS[: DETAILS.index(detail) + 1]:
        names += DETAIL_EVENTS[level]
    return names


def num_ctas(batch: int, seqlen_q: int, heads: int, tile_m: int = 128) -> int:
    """CTAs of FA4's (non-persistent) sm90 forward launch: one per (m-block, head, batch)."""
    return batch * heads * math.ceil(seqlen_q / tile_m)


class _Timed:
    """Proxy of one of FA4's objects (its Softmax): listed methods run inside a profile region, all else
    passes through."""

    def __init__(self, inner, prof: Profiler, regions: dict[str, str]):
        self._inner, self._prof, self._regions = inner, prof, regions

    def __getattr__(self, attr):
        if attr.startswith("__"):  # never impersonate the inner object's type protocols (dataclass, ...)
            raise AttributeError(attr)
        value = getattr(self._inner, attr)
        name = self._regions.get(attr)
        if name is None:
            return value

        def timed(*args, **kwargs):
            with profile_region(self._prof, name):
                return value(*args, **kwargs)

        return timed

    # FA4 carries its objects through `while`/`cutlass.range` loops: be a DynamicExpression whose MLIR
    # values are the inner object's, rebuilt around the loop's block arguments.
    def __extract_mlir_values__(self):
        return extract_mlir_values(self._inner)

    def __new_from_mlir_values__(self, values):
        return _Timed(new_from_mlir_values(self._inner, values), self._prof, self._regions)


class InstrumentedFlashAttentionForwardSm90(FlashAttentionForwardSm90):
    """FA4 sm90 forward + ikp_cute regions. `profile_spec`: a baked-address ProfileSpec with 3 groups."""

    def __init__(self, *args, profile_spec: ProfileSpec, detail: str = "iter", roles=("producer", "consumer"),
                 events=None, late_setup: bool = False, recorder_class=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.profile_spec = profile_spec
        self.recorder_class = recorder_class  # an A/B knob: another recorder of the mode (ikp_cute.testing)
        self.detail = detail
        self.roles = tuple(roles)  # which roles record at all (an ablation knob: cost per role)
        if profile_spec.enabled and profile_spec.window_slots and set(self.roles) != {"producer", "consumer"}:
            # capture windows: every lane must finalize once per launch (ikp_cute/ring.py)
            raise ValueError(f"roles={self.roles}: a spec with window_slots needs both roles (every lane finalizes)")
        # Diagnostic knob: build the consumer's Profiler only after FA4's mma returns (anchors + finalize,
        # no profiler state live across the main loop); requires no consumer regions.
        self.late_setup = late_setup
        chosen = set(events_for(detail)) if events is None else set(events)  # events: explicit subset
        unknown = chosen - set(events_for(DETAILS[-1]))
        if unknown:
            raise ValueError(f"unknown FA4 events {sorted(unknown)}")
        self._on = chosen if profile_spec.enabled else set()
        if profile_spec.enabled:
            if profile_spec.baked_address is None:
                raise ValueError(
                    "FA4's launch signature has no buffer argument: build the Session with bake_address=True"
                )
            if profile_spec.num_groups != len(GROUPS):
                raise ValueError(f"spec has {profile_spec.num_groups} groups; FA4 sm90 needs {len(GROUPS)} {GROUPS}")
            if self.num_threads != 128 * len(GROUPS):
                raise ValueError(
                    f"num_threads={self.num_threads}: expected {128 * len(GROUPS)} (1 producer + 2 MMA warp groups)"
                )
        self._prof = None  # the running role's Profiler, set while that role is traced

    # --- helpers (trace time only) --------------------------------------------------------------------

    def _region(self, name: str):
        if name in self._on:
            return profile_region(self._prof, name)
        return contextlib.nullcontext()

    def _timed(self, obj, regions: dict[str, str]):
        regions = {method: name for method, name in regions.items() if name in self._on}
        return _Timed(obj, self._prof, regions) if regions else obj

    def _call_parent(self, method: str, args, kwargs, replace):
        """Bind args to the parent's signature by name, replace some of them, call the parent."""
        parent = getattr(super(), method)
        bound = inspect.signature(parent).bind(*args, **kwargs)
        for name, wrap in replace.items():
            if name not in bound.arguments:
                raise TypeError(f"FA4's {method} has no argument {name!r}: its signature changed")
            bound.arguments[name] = wrap(bound.arguments[name])
        return parent(*bound.args, **bound.kwargs)

    # --- roles --------------------------------------------------------------------------------------

    def load(self, *args, **kwargs):
        if not self.profile_spec.enabled or "producer" not in self.roles:
            return super().load(*args, **kwargs)
        self._role(0, "producer", super().load, args, kwargs, count_at="end")

    def load_KV(self, *args, **kwargs):
        if not self.profile_spec.enabled or "producer" not in self.roles:
            return super().load_KV(*args, **kwargs)
        which = inspect.signature(super().load_KV).bind(*args, **kwargs).arguments["K_or_V"]
        with self._region(f"load_{which}"):
            return super().load_KV(*args, **kwargs)

    def mma(self, *args, **kwargs):
        if not self.profile_spec.enabled or "consumer" not in self.roles:
            self._on = set()  # the per-n-block overrides run inside mma: keep them silent too
            return super().mma(*args, **kwargs)
        warp_group = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4
        if self.late_setup:
            self._on = set()
            super().mma(*args, **kwargs)
            Profiler.create(self.profile_spec, None, group=warp_group).finalize()
            return
        self._role(warp_group, "consumer", super().mma, args, kwargs)

    def _role(self, group, region: str, body, args, kwargs, count_at: str = "start"):
        """One role's body, recorded. With a capture window the body is traced twice, and each launch
        branches once (the same way in every thread: ikp_cute.window_branch) into the recorded copy or
        into FA4's own code with no Profiler at all (window_branch counts each warp there with one
        fire-and-forget add, ikp_cute/window.py), so a closed window costs a load and a branch per role
        and no profiler state is live across FA4's loops there. The producer's warps count themselves
        after its loads (`count_at="end"`): its start is on the block's critical path (the first TMA
        loads), the consumers' end is (the epilogue)."""

        def recorded():
            self._prof = Profiler.create(self.profile_spec, None, group=group, recorder_class=self.recorder_class)
            with self._region(region):
                body(*args, **kwargs)
            self._prof.finalize()
            self._prof = None

        def plain():
            on, self._on = self._on, set()  # the per-n-block overrides run inside: keep them silent
            body(*args, **kwargs)
            self._on = on

        window_branch(self.profile_spec, group, recorded, plain, count_at=count_at)

    # --- per-n-block steps (consumers) ----------------------------------------------------------------

    def first_half_block_overlap(self, *args, **kwargs):
        # The main loop starts with the first half block (QK^T of the last n-block) ...
        if "mainloop" in self._on:
            self._prof.begin("mainloop")
        return self._step("first_half_block_overlap", args, kwargs)

    def last_half_block_overlap(self, *args, **kwargs):
        # ... and ends with the last half block (its PV GEMM).
        state = self._step("last_half_block_overlap", args, kwargs)
        if "mainloop" in self._on:
            self._prof.end("mainloop")
        return state

    def mma_one_n_block_intrawg_overlap(self, *args, **kwargs):
        with self._region("n_block"):
            return self._step("mma_one_n_block_intrawg_overlap", args, kwargs)

    def mma_one_n_block(self, *args, **kwargs):
        with self._region("n_block"):
            return self._step("mma_one_n_block", args, kwargs)

    def _step(self, method, args, kwargs):
        if not self.profile_spec.enabled or self._prof is None:
            return getattr(super(), method)(*args, **kwargs)
        replace = {}
        if "softmax" in self._on and "softmax" in inspect.signature(getattr(super(), method)).parameters:
            replace["softmax"] = lambda s: s if s is None else self._timed(s, {"online_softmax": "softmax"})
        return self._call_parent(method, args, kwargs, replace)

    def epilogue(self, *args, **kwargs):
        if not self.profile_spec.enabled or self._prof is None:
            return super().epilogue(*args, **kwargs)
        with self._region("epilogue"):
            return super().epilogue(*args, **kwargs)


# --- making FA4's host API build this class ----------------------------------------------------------

_caches: weakref.WeakKeyDictionary[ProfileSpec, dict] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def patched_interface(spec: ProfileSpec, detail: str = "iter", **options):
    """Inside the block, `flash_attn.cute.interface` (flash_attn_func, ...) runs the instrumented sm90
    forward recording into `spec`'s baked buffer. Compiled kernels are cached per (spec, detail,
    options), apart from FA4's own cache, and reused by later blocks with the same arguments.
    options: `roles`, `events`, `late_setup`, `recorder_class` of InstrumentedFlashAttentionForwardSm90
    (ablations)."""
    from flash_attn.cute import interface

    saved_cls = interface.FlashAttentionForwardSm90
    saved_cache = interface._flash_attn_fwd.compile_cache
    key = (
        detail,
        tuple(sorted((k, tuple(sorted(v)) if isinstance(v, (tuple, list, set)) else v) for k, v in options.items())),
    )
    cache = _caches.setdefault(spec, {}).setdefault(key, {})
    interface.FlashAttentionForwardSm90 = functools.partial(
        InstrumentedFlashAttentionForwardSm90, profile_spec=spec, detail=detail, **options
    )
    interface._flash_attn_fwd.compile_cache = cache
    try:
        yield
    finally:
        interface.FlashAttentionForwardSm90 = saved_cls
        interface._flash_attn_fwd.compile_cache = saved_cache
