"""What a recording saw compiled and launched: every compiled CuTe DSL function (a *build*), the kernels it
compiled (one *entry* per compiled kernel: its pool kernel id when traced, or why not), and every launch
counted against its build (pure Python: no cutlass).

A build is identified by the compiled object (held weakly: a build the program dropped leaves the registry).
A launch of an object the registry does not know was compiled where the recorder could not see it (before
recording began, or loaded from a binary or a cache no compile of this recording made): it is counted in
``untraced`` under its kernel names with that reason, never dropped.

Compiles of one kernel name to different code (FA4 builds causal and non-causal under one name) are entries of
their own, each with its own kernel id, launch count and selection: ``name_compiles`` gives each a file-system
name and a label that sets it apart ("#2", and the compile-time arguments that differ: "is_causal=True").
Compiles to the same code share a kernel id (the pool settles a kernel by its code) and one entry, which each
of their builds lists (runtime.py).

Invariants (tests/unit/ikp_cute/test_record_runtime.py guards each): every launch is counted exactly once,
as a launch of a traced build or in ``untraced`` with a reason; a build registered by one recording is
"from an earlier recording" to the next; compiles of one name get distinct names and labels
(test_compiles_of_one_name_are_named_apart).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
import weakref

BEFORE = "compiled before recording started (its compile was not traced)"
EARLIER = "compiled by an earlier recording (its buffer is retired: it records nothing)"
NOT_MATCHED = "not matched by --kernels (compiled untouched)"
LOADED = "loaded from a compiled binary (cute.runtime.load_module): no compile to trace"
NOTHING_TO_RECORD = "matched, but it has no barrier site or region to record (compiled untouched, no kernel id)"
MANGLED = ("_tensor", "_object_at", "_Float", "_Int", "_Pointer")  # where the DSL's argument mangling starts
SCALARS = (bool, int, float, str, type(None))
SHOWN_ARGUMENTS = 3  # compile-time arguments a label shows at most
_recordings = itertools.count(1)


@dataclasses.dataclass
class Build:
    kernels: tuple  # kernel symbols of the compiled function
    function: str  # the host function's name
    traced: bool
    reason: str  # why not traced; "" when traced
    recording: int  # the recording that saw it compiled (0: none)
    launches: int = 0  # host-side launches seen by that recording
    entries: list = dataclasses.field(default_factory=list)  # its compiled kernels (manifest entries)


def compile_arguments(args, kwargs) -> dict:
    """The compile-time scalars of a compile (what sets two compiles of one kernel apart): scalar positional and
    keyword arguments, and the public scalar attributes of the first argument when it is an object (the kernel
    class of a bound ``__call__``: FA4's ``is_causal``, tile sizes, ...)."""
    out = {}
    for i, value in enumerate(args or ()):
        if isinstance(value, SCALARS):
            out[f"arg{i}"] = value
        elif i == 0 and hasattr(value, "__dict__") and not isinstance(value, type):
            out.update({k: v for k, v in vars(value).items() if isinstance(v, SCALARS) and not k.startswith("_")})
    out.update({k: v for k, v in (kwargs or {}).items() if isinstance(v, SCALARS)})
    return {k: v[:40] if isinstance(v, str) else v for k, v in out.items()}


def short_name(kernel: str, taken: dict) -> str:
    """A file-system name for a kernel (unique among `taken`: full name -> short)."""
    if kernel in taken:
        return taken[kernel]
    base = re.sub(r"^kernel_(cutlass_)?(kernel_)?", "", kernel)
    cut = min((i for i in (base.find(m) for m in MANGLED) if i >= 3), default=len(base))
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", base[:cut]).strip("._")[:64] or "kernel"
    name, n = base, 2
    while name in taken.values():
        name, n = f"{base}_{n}", n + 1
    taken[kernel] = name
    return name


def name_compiles(entries: list[dict]) -> None:
    """Set each entry's `short` (a file-system name, unique per compiled kernel: "<short>-<k>" when several
    compiles share the kernel's name) and `label` (for people: "<short> #k (is_causal=True)", the arguments
    that differ between the compiles of that name)."""
    taken: dict = {}
    groups = collections.defaultdict(list)
    for e in entries:
        groups[e["name"]].append(e)
    for e in entries:
        base = short_name(e["name"], taken)
        group = groups[e["name"]]
        if len(group) == 1:
            e["short"] = e["label"] = base
            continue
        args = [g.get("arguments") or {} for g in group]
        differ = [k for k in args[0] if any(a.get(k, "<absent>") != args[0][k] for a in args[1:])]
        mine = e.get("arguments") or {}
        apart = ", ".join(f"{k}={mine.get(k)}" for k in differ[:SHOWN_ARGUMENTS])
        e["short"] = f"{base}-{e['compile']}"
        e["label"] = f"{base} #{e['compile']}" + (f" ({apart})" if apart else "")


def compile_report(sites: list[dict], kernel: str) -> dict:
    """What one compile of `kernel` traced: its pipelines, named barriers and barrier-site coverage, from the
    barrier sites its trace added (PipelineTrace.metadata()'s `barrier_sites`, this compile's slice)."""
    from ikp_cute.pipelines.audit import summary

    mine = [s for s in sites if s.get("kernel") == kernel]
    present = [s for s in mine if s.get("ptx") != 0]
    chosen = [s for s in present if not s.get("traced") and by_choice(s)]
    coverage = {"sites": len(present), "traced": sum(bool(s.get("traced")) for s in present),
                "not_recorded": len(chosen), "untraced": sum(not s.get("traced") for s in present) - len(chosen),
                "removed": sum(s.get("ptx") == 0 for s in mine), "unattributed": {},
                "ptx_checked": bool(mine) and all(s.get("ptx") is not None for s in mine)}
    line = summary({"coverage": {kernel: coverage}})[0] if mine else f"{kernel}: no barrier site"
    return {"pipelines": sorted({s["pipeline"] for s in mine if s.get("pipeline")}),
            "named_barriers": sorted({s["barrier"] for s in mine if s.get("pipeline") is None
                                      and s.get("barrier") is not None}),
            "barrier_sites": len(mine), "traced_sites": coverage["traced"],
            "not_recorded": sorted({s.get("op") for s in chosen}),
            "untraced_sites": [{"site": s.get("site"), "op": s.get("op"), "reason": s.get("reason")}
                               for s in present if not s.get("traced") and not by_choice(s)],
            "coverage": coverage, "coverage_line": line}


BY_CHOICE = ("level ", "ops= ", "named_barriers=", "polls=")  # reasons the tracer gives for ops left out on purpose


def by_choice(site: dict) -> bool:
    """A barrier site left unrecorded by the level or options (not a site the tracer could not trace)."""
    return str(site.get("reason") or "").startswith(BY_CHOICE)


def kernel_names(compiled) -> tuple:
    """The kernel symbols of a compiled function (its kernel_info keys), else its function name."""
    info = getattr(compiled, "kernel_info", None) or {}
    names = tuple(str(k) for k in info)
    return names or (str(getattr(compiled, "function_name", None) or type(compiled).__name__),)


class Builds:
    """The builds of every recording of this process (one registry, shared by recordings in turn)."""

    def __init__(self):
        self._builds: dict[int, tuple] = {}  # id(object) -> (weakref or the object, Build)
        self._aliases: dict[int, int] = {}  # id(executor) -> id(the compiled function it runs)

    def new_recording(self) -> int:
        return next(_recordings)

    def add(self, compiled, build: Build) -> Build:
        key = id(compiled)
        try:
            ref = weakref.ref(compiled, lambda _, key=key: self._forget(key))
        except TypeError:  # not weak-referenceable: held (a cache holds it anyway)
            ref = (lambda obj: (lambda: obj))(compiled)
        self._builds[key] = (ref, build)
        return build

    def _forget(self, key: int) -> None:
        self._builds.pop(key, None)
        for alias in [a for a, k in self._aliases.items() if k == key]:
            self._aliases.pop(alias, None)

    def alias(self, executor, compiled) -> None:
        """`executor` (compiled.to(device)) runs `compiled`: its launches count as the build's."""
        if executor is not compiled and id(compiled) in self._builds:
            self._aliases[id(executor)] = id(compiled)

    def find(self, obj) -> Build | None:
        key = self._aliases.get(id(obj), id(obj))
        entry = self._builds.get(key)
        if entry is None:
            return None
        ref, build = entry
        target = ref()
        if target is None or (key == id(obj) and target is not obj):  # a recycled id
            return None
        return build

    def alive(self, recording: int, traced: bool = True) -> int:
        """Builds of `recording` (traced ones by default) still alive."""
        return sum(1 for ref, b in self._builds.values() if b.recording == recording and b.traced == traced
                   and ref() is not None)


@dataclasses.dataclass
class Untraced:
    """Launches the recorder did not trace, by (kernel names, reason)."""

    counts: dict = dataclasses.field(default_factory=dict)  # (kernels tuple, reason) -> launches

    def add(self, kernels: tuple, reason: str, n: int = 1) -> None:
        key = (tuple(kernels), reason)
        self.counts[key] = self.counts.get(key, 0) + n

    def as_json(self) -> list:
        return [{"kernels": list(k), "reason": r, "launches": n} for (k, r), n in self.counts.items()]
