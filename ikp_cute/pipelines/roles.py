"""Which pipeline, which role: a call on an mbarrier array, or on a barrier address, classified.

A call on array X is classified by the pipeline object that owns X, found on the Python call stack at
trace time (a frame whose ``self``, or another local, or something one step from a local, has
``sync_object_full is X`` or ``sync_object_empty is X``): empty.wait = producer *acquire*, full.wait =
consumer *wait*, full.arrive = producer *commit*, empty.arrive = consumer *release*. An array no pipeline
owns is traced as its own pipeline (wait -> wait, arrive -> commit).

What is remembered, and on what (no ``id()``-keyed state):
* each MbarrierArray carries an ``ArrayTag`` as an attribute (creation site and name, and once a call
  classified it, its pipeline and role); copies made through loops and recasts share their tag;
* each pointer a pipeline hands out (``producer_get_barrier(state)``) carries its (array, stage, owner)
  as an attribute, and its MLIR value is kept in a list compared with ``==``: the IR pass
  (ir_pass.py) attributes a barrier operation the Python hooks did not see (a kernel's own wait, its
  inline PTX) to a pipeline by walking its address operand back, through casts, to such a value.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py guards them):
* a kernel that calls a pipeline's arrays directly, reached through a list element or an attribute, is
  still that pipeline's op (test_arrays_called_directly_belong_to_their_pipeline);
* a raw ``cute.arch.mbarrier_*`` call on a handed-out pointer is that pipeline's op on that stage
  (test_kernel_defined_subclass_and_names), also when the kernel replaced the hooked function
  (test_a_swapped_mbarrier_wait_is_still_traced);
* PipelineOrder's first waits pass on group 0's stages (test_pipeline_order_says_which_first_waits_pass).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types

from . import names
from .catalog import Catalog, Pipeline

TAG = "_ikp_array_tag"
HANDED = "_ikp_handed_out"


@dataclasses.dataclass(eq=False)
class ArrayTag:
    """What is known about one mbarrier array (shared by its copies). Compared by identity."""

    site: str = "?"
    name: str | None = None  # from the creation site (names.creation_name)
    pipeline: Pipeline | None = None  # once a classified call made it part of one
    role: str | None = None  # "full" | "empty"


@dataclasses.dataclass(frozen=True, eq=False)
class HandedOut:
    """A barrier pointer a pipeline handed out: its array, stage index (int or Int32), (owner, role)."""

    value: object  # the pointer's MLIR value
    mbar: object
    index: object
    owned: tuple


def tag_of(mbar) -> ArrayTag:
    tag = getattr(mbar, TAG, None)
    if tag is None:  # built before the trace started, or by a path not hooked: tag it now
        tag = ArrayTag()
        object.__setattr__(mbar, TAG, tag)
    return tag


def tag_new_array(mbar) -> None:
    """At an array's creation: its site and the name its creation site gives (names.py)."""
    frame = names.user_frame(names.SKIPPED_FUNCTIONS, depth=3)
    object.__setattr__(mbar, TAG, ArrayTag(names.site(frame), names.creation_name(frame)))


def share_tag(source, copy) -> None:
    tag = getattr(source, TAG, None)
    if tag is not None:
        object.__setattr__(copy, TAG, tag)


def pointer_value(pointer):
    """The MLIR value of a DSL pointer (or an ir.Value itself)."""
    value = getattr(pointer, "value", pointer)
    return value.ir_value() if hasattr(value, "ir_value") and not hasattr(value, "owner") else value


class Roles:
    """Classifies calls into (pipeline, op) and registers the pipelines in the catalog."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.cluster: list[int] | None = None  # the launch's cluster shape (hooks.launch)
        self.handed_out: list[HandedOut] = []  # in the kernel being traced; compared by MLIR value

    def owner(self, mbar) -> tuple:
        """(pipeline object, 'full'|'empty') owning `mbar`, from the call stack; (None, None) if none."""
        return on_stack(lambda obj: role_in(obj, mbar))

    def pipeline(self, mbar, owner, kernel) -> Pipeline:
        """The catalog entry of `owner`'s pipeline (or of the lone array `mbar`), made on first sight."""
        if owner is not None:
            full = getattr(owner, "sync_object_full", None)
            empty = getattr(owner, "sync_object_empty", None)
            key = tuple(tag_of(array) if array is not None else None for array in (full, empty))
            origin = tag_of(full if full is not None else mbar)
        else:
            full, empty = mbar, None
            key = (tag_of(mbar),)
            origin = tag_of(mbar)

        def make() -> Pipeline:
            given = (getattr(mbar, "name", "") or "").rsplit(".", 1)[0] if getattr(mbar, "name", "") else ""
            cls = type(owner).__name__ if owner is not None else "MbarrierArray"
            fallback = f"{cls}_{origin.site.replace('.py:', '_')}"
            return Pipeline(
                name=given or origin.name or fallback,
                cls=cls,
                site=origin.site,
                num_stages=int(getattr(owner, "num_stages", None) or getattr(mbar, "num_stages", 1)),
                producer_arrivals=int_or_none(getattr(full, "arrive_count", None)),
                consumer_arrivals=int_or_none(getattr(empty, "arrive_count", None)),
                tx_bytes=int_or_none(getattr(full, "tx_count", None)),
                op_type=getattr(getattr(full, "op_type", None), "name", None),  # none for a TMA-store fence
                cluster=self.scope(owner),
                released_by="tma_store" if tma_store_role(owner) else None,
                first_wait_passes=first_wait_passes(owner, cls),
            )

        return self.catalog.pipeline(key, make, kernel)

    def op(self, mbar, kind: str, kernel, owned=None) -> tuple[Pipeline, str]:
        """(pipeline, op name) of a call of `kind` ('wait'|'arrive'|'poll') on `mbar`; `owned`: its
        (owner, role) when already known. The array's tag remembers the pipeline and role."""
        owner, role = owned if owned is not None else self.owner(mbar)
        pipe = self.pipeline(mbar, owner, kernel)
        tag = tag_of(mbar)
        tag.pipeline, tag.role = pipe, role
        return pipe, op_of(kind, role)

    def scope(self, owner):
        """[x, y, z] when the pipeline's barriers are shared across the launch's cluster, "cta" when they
        are block-local, None when unknown. Known for cutlass.pipeline's classes, which keep the multicast
        destination rank of their consumers' releases in `consumer_mask` (None: the barriers are local)."""
        if self.cluster is None or owner is None or not hasattr(owner, "consumer_mask"):
            return None
        if math.prod(self.cluster) == 1 or getattr(owner, "consumer_mask") is None:
            return "cta"
        return list(self.cluster)

    # --- pointers handed out, and the IR pass's attribution by address ------------------------------------

    def hand_out(self, pointer, mbar, index, owned) -> None:
        record = HandedOut(pointer_value(pointer), mbar, index, owned)
        object.__setattr__(pointer, HANDED, record)
        self.handed_out.append(record)

    @staticmethod
    def handed(pointer) -> HandedOut | None:
        """The record of a pointer object a pipeline handed out (None for any other)."""
        return getattr(pointer, HANDED, None)

    def by_address(self, value) -> HandedOut | None:
        """The handed-out pointer an address operand comes from, through casts (`value` == a handed-out
        pointer's MLIR value at some step of its def chain); None when none does."""
        for step in def_chain(value):
            for record in self.handed_out:
                if record.value == step:
                    return record
        return None


def op_of(kind: str, role: str | None) -> str:
    """The pipeline op of a call of `kind` on the array of `role` (see the module docstring)."""
    if kind == "poll":
        return "poll"
    if role == "empty":
        return "acquire" if kind == "wait" else "release"
    return "wait" if kind == "wait" else "commit"


_CASTS = ("builtin.unrealized_conversion_cast", "cute.ptrtoint", "llvm.ptrtoint", "llvm.addrspacecast",
          "arith.trunci", "arith.extui", "arith.extsi", "arith.index_cast", "cute.recast_iter", "llvm.bitcast",
          "cute.assume", "cute_nvgpu.arch.make_warp_uniform", "nvvm.mapa")  # mapa: the same barrier in a peer CTA


def def_chain(value, steps: int = 8) -> list:
    """`value` and the values it is cast from (first operand of each cast-like defining op)."""
    out = []
    for _ in range(steps):
        value = pointer_value(value)
        out.append(value)
        owner = getattr(value, "owner", None)
        owner = getattr(owner, "operation", owner)
        if owner is None or not hasattr(owner, "name") or owner.name not in _CASTS or not len(owner.operands):
            break
        value = owner.operands[0]
    return out


def on_stack(role_of):
    """(object, role) of the first object of the call stack for which `role_of` gives a role: innermost
    frame first, each frame's locals in order (a method's `self` first: arguments lead); failing that,
    the same over what is one step from each local (members). (None, None) if none."""
    frames = []
    frame = sys._getframe(2)
    while frame is not None and len(frames) < 40:
        frames.append(frame)
        frame = frame.f_back
    for near in (False, True):
        for frame in frames:
            for local in frame.f_locals.values():
                for obj in members(local) if near else (local,):
                    role = role_of(obj)
                    if role is not None:
                        return obj, role
    return None, None


def tma_store_role(obj) -> str | None:
    """'full' for a TMA-store pipeline (its one sync object, a TmaStoreFence, is its `sync_object_full`)."""
    from cutlass.pipeline import PipelineTmaStore

    return "full" if isinstance(obj, PipelineTmaStore) else None


def role_in(obj, mbar) -> str | None:
    """'full' or 'empty' when `obj` is a pipeline holding `mbar` as that array, else None."""
    if obj is None or obj is mbar or isinstance(obj, (int, float, str, type)):
        return None
    try:
        if getattr(obj, "sync_object_full", None) is mbar:
            return "full"
        if getattr(obj, "sync_object_empty", None) is mbar:
            return "empty"
    except Exception:  # noqa: BLE001 (a kernel's own object whose attributes fail to build: not a pipeline)
        return None
    return None


def members(obj) -> list:
    """What is one step from `obj`: the elements of a list / tuple / dict, else its instance attributes
    (none for modules and classes, whose namespaces are not where a kernel keeps its pipelines)."""
    if isinstance(obj, (list, tuple)):
        return list(obj)
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (types.ModuleType, type)) or obj is None:
        return []
    try:
        return list(vars(obj).values())
    except TypeError:  # no __dict__ (slots, builtins)
        return []


def first_wait_passes(owner, cls: str) -> list[int] | None:
    """PipelineOrder: barrier `stage * length + group` is waited on by `group`, and group 0 starts at
    phase 1 (cutlass's PipelineOrder.create), so the first wait on each of its stages passes."""
    length = getattr(owner, "length", None)
    depth = getattr(owner, "depth", None)
    if cls != "PipelineOrder" or not isinstance(length, int) or not isinstance(depth, int) or length < 1:
        return None
    return [stage * length for stage in range(depth)]


def int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None
