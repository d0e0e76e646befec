"""The recorders, one per mode (``ProfileSpec(mode=...)``), behind one protocol (base.py ``Recorder``).

RECORDERS is the one place a mode is bound to its recorder; ``Profiler.create`` builds
``RECORDERS[spec.mode]`` (or the ``recorder_class`` it is given). The shared device pieces live in small
topic modules: records.py (a record's bits, the timer read, packing, the guarded store), lane.py (a lane's
leader, anchors, trailer and stray count, and the capture window's end).

Invariants (tests/unit/ikp_cute/test_recorders.py): RECORDERS has exactly the modes of ikp_cute.spec.MODES, and every
recorder implements the protocol (test_registry_covers_every_mode,
test_every_registered_recorder_implements_the_protocol).
"""

from __future__ import annotations

from .atomic import AtomicRecorder
from .base import Recorder, protocol_problems
from .cursor import CursorRecorder
from .deferred import DeferredRecorder
from .lean import LeanRecorder
from .smem import SmemRecorder
from .static import StaticRecorder

RECORDERS: dict[str, type[Recorder]] = {
    "cursor": CursorRecorder,
    "deferred": DeferredRecorder,
    "smem": SmemRecorder,
    "lean": LeanRecorder,
    "atomic": AtomicRecorder,
    "static": StaticRecorder,
}

__all__ = [
    "RECORDERS",
    "AtomicRecorder",
    "CursorRecorder",
    "DeferredRecorder",
    "LeanRecorder",
    "Recorder",
    "SmemRecorder",
    "StaticRecorder",
    "protocol_problems",
]
