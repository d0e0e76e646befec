"""ikp_cute: region-level timelines inside CuTe DSL kernels (v1 wire format, host_decode decodes them).

Usage (kernel code lives in a .py file; the DSL reads its source)::

    import cutlass, cutlass.cute as cute
    import ikp_cute
    from ikp_cute import Profiler, profile_region

    @cute.kernel
    def kernel(x: cute.Tensor, prof_buf, spec: cutlass.Constexpr):
        warp = cute.arch.warp_idx()
        prof = Profiler(spec, prof_buf, group=warp // 4)   # leader: lane 0 of warp group*4
        with profile_region(prof, "load"):                 # any branch / cutlass.range loop, nested
            ...
        prof.mark("tile_done")                              # instant
        prof.finalize()                                     # DROPPED (if any) + FINALIZE(SM id)

    @cute.jit
    def launch(x: cute.Tensor, prof_buf, spec: cutlass.Constexpr):
        kernel(x, prof_buf, spec).launch(grid=[528, 1, 1], block=[256, 1, 1])

    session = ikp_cute.Session(groups=["producer", "consumer"], num_blocks=528, records_per_lane=1024)
    compiled = cute.compile(launch, x, session.kernel_arg(), session.spec)
    with session:                                           # zeroes the buffer; synchronizes on exit
        compiled(x, session.kernel_arg())
    trace = session.decode()                                # host_decode Trace
    session.save("capture.npy")                             # + capture.json sidecar (names, geometry)

Disabled (``Session(enabled=False)`` or ``ikp_cute.disabled()``): ``kernel_arg()`` is None and every
profiling call compiles away: the PTX equals the uninstrumented kernel's. ``bake_address=True``
compiles the buffer address into the kernel instead (no kernel argument: pass None), which is how a
third-party kernel is instrumented without changing its launch signature.
Modes: "cursor" (default, register cursor; 3-4 SASS instructions per event), "atomic" (one
shared-memory atomic per region; several writers per lane allowed; every thread of the block must
build the Profiler, which holds a block barrier), "static" (``profile_region(prof, name, index=i)``).
``Session(stage="smem")`` stages cursor records in shared memory (finalize() copies them out).
See the README ("Recording regions inside CuTe DSL kernels") for the modes, limits and measured costs.

This module imports neither torch nor cutlass until a name that needs them is used.
"""

from __future__ import annotations

from host_decode.core.lazy import lazy_exports

from .spec import MODES, EventRegistry, ProfileSpec, disabled

__all__ = [
    "MODES",
    "EventRegistry",
    "ProfileSpec",
    "Profiler",
    "Session",
    "disabled",
    "fake_buffer",
    "profile_region",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Profiler": ".device:Profiler",
        "profile_region": ".device:profile_region",
        "Session": ".session:Session",
        "fake_buffer": ".session:fake_buffer",
    },
)
