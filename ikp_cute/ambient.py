"""Regions a kernel's author placed with ``profile_region(name)`` (no Profiler): recorded by the tracer that is
active while the kernel is compiled, nothing otherwise.

``with profile_region("mma"):`` (ikp_cute/profiler.py) calls ``region_event(name, BEGIN)`` before its body
and ``region_event(name, END)`` after it, at trace time. With a ``trace_pipelines`` context entered (its
Tracer installs itself here with ``recording_with``), each becomes a record of the executing warp's lane
in that trace's buffer (a Session or a Pool), the name an event id of the trace's registry like a pipeline
op's. With none, the calls return at once and emit nothing: the kernel compiles to exactly the kernel
without them, and the kernel's source does not change between the two.

Invariant (tests/unit/ikp_cute/test_pool_compile.py::test_ambient_regions_record_only_inside_a_trace):
outside a trace, a kernel with ambient regions has the PTX of the same kernel without them.
"""

from __future__ import annotations

import contextlib

BEGIN, END = 0, 1  # host_decode.core.wire.EventType's

_recorder = None  # the active tracer's `(name, event_type) -> None`, or None


def region_event(name: str, event_type: int) -> None:
    """A BEGIN (0) or END (1) of region `name` at the current trace point: recorded by the active tracer."""
    if _recorder is not None:
        _recorder(name, event_type)


def active() -> bool:
    return _recorder is not None


@contextlib.contextmanager
def recording_with(recorder):
    """While entered, ambient regions go to `recorder(name, event_type)` (one tracer at a time)."""
    global _recorder
    if _recorder is not None:
        raise RuntimeError("ambient regions: a tracer is already recording them (contexts do not nest)")
    _recorder = recorder
    try:
        yield
    finally:
        _recorder = None
