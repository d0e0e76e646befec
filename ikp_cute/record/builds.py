"""What a recording saw compiled and launched: every compiled CuTe DSL function (a *build*), whether the
recorder traced it and why not, and every launch counted against its build (pure Python: no cutlass).

A build is identified by the compiled object (held weakly: a build the program dropped leaves the registry).
A launch of an object the registry does not know was compiled where the recorder could not see it (before
recording began, or loaded from a binary or a cache no compile of this recording made): it is counted in
``untraced`` under its kernel names with that reason, never dropped.

Invariants (tests/unit/ikp_cute/test_record_runtime.py guards each): every launch is counted exactly once,
as a launch of a traced build or in ``untraced`` with a reason; a build registered by one recording is
"from an earlier recording" to the next.
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref

BEFORE = "compiled before recording started (its compile was not traced)"
EARLIER = "compiled by an earlier recording (its buffer is retired: it records nothing)"
NOT_MATCHED = "not matched by --kernels (compiled untouched)"
LOADED = "loaded from a compiled binary (cute.runtime.load_module): no compile to trace"
_recordings = itertools.count(1)


@dataclasses.dataclass
class Build:
    kernels: tuple  # kernel symbols of the compiled function
    function: str  # the host function's name
    traced: bool
    reason: str  # why not traced; "" when traced
    recording: int  # the recording that saw it compiled (0: none)
    launches: int = 0  # host-side launches seen by that recording


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
