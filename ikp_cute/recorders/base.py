"""What every recorder implements: the ``Recorder`` protocol that ``Profiler`` (ikp_cute/profiler.py) calls,
and nothing else.

A recorder is one mode's way of getting a lane's records into the buffer. It is a frozen dataclass
built once per Profiler by its ``create`` classmethod (the one signature of every mode, lean's included:
a recorder that needs a ``Lane`` builds it there), holding its device state in typed fields; compile-time
choices are ``const_expr`` at the point of use. ``Profiler`` owns the misuse checks and the fence; the
recorder owns everything it emits, its trailer and, with a capture window, the lane's end
(``lane.end_window``).

Invariants a change could break, and the test that guards each (tests/unit/ikp_cute/test_recorders.py):
* Every recorder of the registry (ikp_cute/recorders/__init__.py RECORDERS, one per mode of
  ikp_cute.spec.MODES) implements every member of ``Recorder`` with its signature
  (test_every_registered_recorder_implements_the_protocol); ``protocol_problems`` finds a missing member
  or a changed signature (test_protocol_check_catches_a_missing_member, ..._a_changed_signature).
* ``Profiler.create(recorder_class=C)`` refuses a class that does not implement it, naming what is
  missing (test_profiler_refuses_a_recorder_class_off_the_protocol).
"""

from __future__ import annotations

import inspect
from typing import ClassVar, Protocol

from ..spec import ProfileSpec


class Recorder(Protocol):
    """The recorder of one Profiler: built once, then called for every begin, end, mark and finalize."""

    needs_token: ClassVar[bool]
    """end() needs begin()'s value (the token) and must sit at its begin's control-flow level."""

    spec: ProfileSpec

    @classmethod
    def create(cls, spec: ProfileSpec, buffer, group, leader, buffer_ok=None) -> Recorder:
        """The recorder of lane `group` of this block, emitting its setup. `buffer`: the session buffer
        tensor (the ring buffer with a capture window); `leader`: Profiler.create's leader= (None: the
        default leader); `buffer_ok`: a run-time Boolean, False when a buffer of dynamic size is too short
        (None: the size is known to fit). Refuses (ProfileUsageError) what the mode cannot do."""
        ...

    def begin(self, event_id: int, index) -> object:
        """Record the BEGIN of `event_id` (static mode: region `index`); returns the token's value."""
        ...

    def end(self, event_id: int, token_value, adjacent: bool) -> None:
        """Record the END of `event_id`. `token_value`: begin()'s value (None when end() got no token);
        `adjacent`: nothing was recorded since that begin, at the same control-flow level."""
        ...

    def mark(self, event_id: int, index) -> None:
        """Record an INSTANT of `event_id` (static mode: at region `index`'s begin slot)."""
        ...

    def finalize(self, leader) -> None:
        """Write the lane's trailer ([DROPPED] + FINALIZE) by its writer (`leader`: finalize's leader=,
        None: the lane's), count a stray thread's records, and end the lane's capture window."""
        ...


def protocol_members() -> dict[str, object]:
    """{name: what the protocol declares}: its methods, and its data members (annotations) as None."""
    members: dict[str, object] = {name: None for name in Recorder.__annotations__}
    for name, value in vars(Recorder).items():
        if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, classmethod)):
            members[name] = value
    return members


def _signature(function) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter, without `self` / `cls`."""
    parameters = list(inspect.signature(function).parameters.values())
    return [(p.name, p.kind, p.default) for p in parameters[1:]]


def protocol_problems(cls: type) -> list[str]:
    """What `cls` lacks to be a Recorder: each missing member, and each method whose parameters differ
    from the protocol's (names, kinds, defaults) or that is not a classmethod where the protocol's is.
    Empty when it is one."""
    problems = []
    annotations: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        annotations.update(getattr(klass, "__annotations__", {}))
    for name, declared in protocol_members().items():
        if declared is None:
            if not hasattr(cls, name) and name not in annotations:
                problems.append(f"{cls.__name__} has no {name!r}")
            continue
        value = inspect.getattr_static(cls, name, None)
        if value is None:
            problems.append(f"{cls.__name__} has no {name}()")
            continue
        wants_classmethod = isinstance(declared, classmethod)
        if wants_classmethod != isinstance(value, classmethod):
            kind = "a classmethod" if wants_classmethod else "an instance method"
            problems.append(f"{cls.__name__}.{name} must be {kind}")
            continue
        ours = _signature(declared.__func__ if wants_classmethod else declared)
        theirs = _signature(value.__func__ if wants_classmethod else value)
        if ours != theirs:
            names = ", ".join(p[0] for p in ours)
            problems.append(f"{cls.__name__}.{name} takes ({', '.join(p[0] for p in theirs)}); the protocol: ({names})")
    return problems
