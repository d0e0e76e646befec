"""The recorder protocol (ikp_cute/recorders/base.py): every recorder of the registry, and every variant of
ikp_cute/testing/record_variants.py, implements each member of ``Recorder`` with its signature; the check
finds a class that does not (a missing member, a changed signature, a classmethod turned into a method),
and ``Profiler.create(recorder_class=...)`` refuses such a class at trace time."""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
pytest.importorskip("cutlass")

from ikp_cute.recorders import RECORDERS, CursorRecorder, protocol_problems  # noqa: E402
from ikp_cute.recorders.base import protocol_members  # noqa: E402
from ikp_cute.spec import MODES  # noqa: E402

MEMBERS = {"needs_token", "spec", "create", "begin", "end", "mark", "finalize"}


def test_registry_covers_every_mode():
    assert list(RECORDERS) == list(MODES)


def test_the_protocol_declares_what_profiler_calls():
    """The protocol itself: emptying it would make every conformance check pass vacuously."""
    assert set(protocol_members()) == MEMBERS


@pytest.mark.parametrize("mode", MODES)
def test_every_registered_recorder_implements_the_protocol(mode):
    assert protocol_problems(RECORDERS[mode]) == []
    assert dataclasses.is_dataclass(RECORDERS[mode]) and RECORDERS[mode].__dataclass_params__.frozen


def test_every_record_variant_implements_the_protocol():
    from ikp_cute.testing import record_variants

    classes = [getattr(record_variants, n) for n in dir(record_variants) if not n.startswith("_")]
    variants = [c for c in classes if isinstance(c, type) and any(issubclass(c, r) for r in RECORDERS.values())]
    assert len(variants) >= 8, variants
    for cls in variants:
        assert protocol_problems(cls) == [], cls


class _Complete:
    """Every member, as plain Python: the baseline each broken class below differs from by one thing."""

    needs_token = False
    spec: object

    @classmethod
    def create(cls, spec, buffer, group, leader, buffer_ok=None):
        return cls()

    def begin(self, event_id: int, index):
        return None

    def end(self, event_id: int, token_value, adjacent: bool):
        pass

    def mark(self, event_id: int, index):
        pass

    def finalize(self, leader):
        pass


def test_protocol_check_accepts_a_complete_class():
    assert protocol_problems(_Complete) == []


def _without(name: str, member: str) -> type:
    """_Complete less `member` (a class built without it: a subclass would inherit it)."""
    namespace = {k: v for k, v in vars(_Complete).items() if k not in (member, "__dict__", "__weakref__")}
    return type(name, (), namespace)


def test_protocol_check_catches_a_missing_member():
    assert protocol_problems(_without("NoMark", "mark")) == ["NoMark has no mark()"]
    assert protocol_problems(_without("NoFlag", "needs_token")) == ["NoFlag has no 'needs_token'"]
    assert protocol_problems(_without("NoCreate", "create")) == ["NoCreate has no create()"]


def test_protocol_check_catches_a_changed_signature():
    class LeanStyleCreate(_Complete):  # lean's create with its own signature, as before the protocol
        @classmethod
        def create(cls, spec, lane):
            return cls()

    class StaticCreate(_Complete):
        @staticmethod
        def create(spec, buffer, group, leader, buffer_ok=None):
            return None

    class EndWithoutAdjacent(_Complete):
        def end(self, event_id: int, token_value):
            pass

    class FinalizeLeaderRequired(CursorRecorder):
        def finalize(self, leader, extra):
            pass

    assert protocol_problems(LeanStyleCreate) == [
        "LeanStyleCreate.create takes (spec, lane); the protocol: (spec, buffer, group, leader, buffer_ok)"
    ]
    assert protocol_problems(StaticCreate) == ["StaticCreate.create must be a classmethod"]
    assert protocol_problems(EndWithoutAdjacent) == [
        "EndWithoutAdjacent.end takes (event_id, token_value); the protocol: (event_id, token_value, adjacent)"
    ]
    assert protocol_problems(FinalizeLeaderRequired) == [
        "FinalizeLeaderRequired.finalize takes (leader, extra); the protocol: (leader)"
    ]


def test_profiler_refuses_a_recorder_class_off_the_protocol():
    from cutlass import Float32, Int32, cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ikp_cute import fake_buffer
    from ikp_cute.testing.kernels.overhead import launch_overhead, overhead_spec

    @dataclasses.dataclass(frozen=True)
    class MarkWithoutIndex(CursorRecorder):
        def mark(self, event_id: int):
            pass

    spec = overhead_spec("cursor")
    x = make_fake_compact_tensor(Float32, (528 * 256,))
    with pytest.raises(TypeError, match=r"recorder_class=MarkWithoutIndex.*MarkWithoutIndex\.mark takes \(event_id\)"):
        cute.compile(launch_overhead, x, Int32(2), fake_buffer(spec), spec, 2, 1, 528, 256, MarkWithoutIndex)
