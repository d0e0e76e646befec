"""What is hooked, as a table: each entry names an attribute of cutlass and the Tracer hook that wraps it.

The hooks (hooks.py) give a call its pipeline, role and name from the Python objects at hand; they are
the rich path. Attributes can be routed around (a kernel that replaces ``cute.arch.mbarrier_wait`` with
its own while it is traced, or that emits its own inline PTX), so they are not the only path: the IR pass
(ir_pass.py) instruments every barrier operation of the traced kernel that no hook built, and the audit
(audit.py) checks the final PTX. ``replaced()`` says which hooked attributes a kernel replaced while it
was traced (sidecar ``hooks_replaced``).

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* outside the context every attribute is cutlass's own (test_off_is_untouched; the FA4 / quack / sm100
  tests compile again after tracing and compare PTX);
* an attribute a kernel replaced while traced is left to the kernel, not overwritten with cutlass's
  original on exit, and is reported (test_a_swapped_mbarrier_wait_is_still_traced); a hook that outlives
  its context that way (the kernel put it back after the context ended) only calls the original
  (test_a_hook_left_behind_is_inert).
"""

from __future__ import annotations

import dataclasses
import importlib

MBARRIER_ARRAY = "cutlass.pipeline.helpers:MbarrierArray"
ARCH = "cutlass.cute.arch"
DISTRIBUTED = "cutlass.utils.distributed"
ARRIVES = ("arrive", "arrive_mbarrier", "arrive_and_expect_tx", "arrive_and_expect_tx_with_dst",
           "arrive_cp_async_mbarrier", "arrive_tcgen05mma")


@dataclasses.dataclass(frozen=True)
class Hook:
    owner: str  # "module" or "module:Class"
    attribute: str
    hook: str  # the Tracer method that wraps the original: hook_<hook>(original, *args)
    args: tuple = ()


TABLE = (
    Hook("cutlass.cutlass_dsl.cutlass:KernelLauncher", "launch", "launch"),  # the launch's cluster shape
    # every pipeline class (cutlass's, FA4's, quack's) is built on MbarrierArray: no list of class names
    Hook(MBARRIER_ARRAY, "__init__", "array_init"),
    Hook(MBARRIER_ARRAY, "__new_from_mlir_values__", "array_copy"),
    Hook(MBARRIER_ARRAY, "recast_to_new_op_type", "array_copy"),
    Hook(MBARRIER_ARRAY, "wait", "wait"),
    Hook(MBARRIER_ARRAY, "try_wait", "poll"),
    *(Hook(MBARRIER_ARRAY, name, "arrive") for name in ARRIVES),
    Hook(MBARRIER_ARRAY, "get_barrier", "get_barrier"),
    # raw calls on a pointer a pipeline handed out (quack's scheduler commits this way)
    Hook(ARCH, "mbarrier_arrive", "raw", ("arrive",)),
    Hook(ARCH, "mbarrier_arrive_and_expect_tx", "raw", ("arrive",)),
    Hook(ARCH, "mbarrier_wait", "raw", ("wait",)),
    Hook(ARCH, "mbarrier_try_wait", "raw", ("poll",)),
    # TMA-store pipelines: no mbarrier, bulk groups
    Hook("cutlass.pipeline.helpers:TmaStoreFence", "__init__", "array_init"),
    Hook(ARCH, "cp_async_bulk_wait_group", "bulk_group", ("acquire",)),
    Hook(ARCH, "cp_async_bulk_commit_group", "bulk_group", ("commit",)),
    # named barriers (NamedBarrier and kernels calling cute.arch directly, as FA4's warp scheduler does)
    Hook(ARCH, "barrier", "barrier", ("bar_sync",)),
    Hook(ARCH, "barrier_arrive", "barrier", ("bar_arrive",)),
    Hook(ARCH, "sync_threads", "barrier", ("sync_threads",)),
    # flags in global memory (docs/flags.md): the message-passing primitives of cutlass.utils.distributed
    Hook(DISTRIBUTED, "red_add1", "flag_signal"),
    Hook(DISTRIBUTED, "spin_lock_ld_lt_relaxed_wait", "flag_wait", ("ld", "relaxed")),
    Hook(DISTRIBUTED, "spin_lock_atom_cas_relaxed_wait", "flag_wait", ("cas", "relaxed")),
    Hook(DISTRIBUTED, "spin_lock_atom_cas_acquire_wait", "flag_wait", ("cas", "acquire")),
    # the end of a compile's passes: the audit reads the final PTX there
    Hook("cutlass.base_dsl.compiler:Compiler", "compile", "compile"),
)


def resolve(owner: str):
    module, _, cls = owner.partition(":")
    found = importlib.import_module(module)
    return getattr(found, cls) if cls else found


class Patches:
    """The table installed on a Tracer: originals kept, restored on exit where still ours."""

    def __init__(self, table=TABLE):
        self.table = table
        self.installed: list[tuple[Hook, object, object, object]] = []  # (hook, owner, original, ours)

    def install(self, tracer) -> None:
        for hook in self.table:
            owner = resolve(hook.owner)
            original = owner.__dict__[hook.attribute] if isinstance(owner, type) else getattr(owner, hook.attribute)
            ours = _gated(tracer, original, getattr(tracer, f"hook_{hook.hook}")(original, *hook.args))
            setattr(owner, hook.attribute, ours)
            self.installed.append((hook, owner, original, ours))

    def replaced(self) -> list[str]:
        """`owner.attribute` of each hooked attribute that no longer holds our hook (a kernel replaced it)."""
        return [f"{hook.owner.replace(':', '.')}.{hook.attribute}" for hook, owner, _, ours in self.installed
                if _current(owner, hook.attribute) is not ours]

    def uninstall(self) -> list[str]:
        """Restore every original still replaced by our hook; returns the attributes a kernel replaced
        (left as the kernel set them)."""
        replaced = self.replaced()
        while self.installed:
            hook, owner, original, ours = self.installed.pop()
            if _current(owner, hook.attribute) is ours:
                setattr(owner, hook.attribute, original)
        return replaced


def _gated(tracer, original, hook):
    """`hook` while `tracer` is installed, `original` after."""

    def gated(*args, **kwargs):
        return hook(*args, **kwargs) if tracer.active else original(*args, **kwargs)

    return gated


def _current(owner, attribute):
    return owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
