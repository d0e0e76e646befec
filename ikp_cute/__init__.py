"""ikp_cute: region-level timelines inside CuTe DSL kernels (v1 wire format, host_decode decodes them).

Usage (kernel code lives in a .py file; the DSL reads its source)::

    import cutlass, cutlass.cute as cute
    import ikp_cute
    from ikp_cute import Profiler

    @cute.kernel
    def kernel(x: cute.Tensor, prof_buf, spec: cutlass.Constexpr):
        warp = cute.arch.warp_idx()
        prof = Profiler.create(spec, prof_buf, group=warp // 4)   # leader: lane 0 of warp group*4
        with prof.region("load"):                                # any branch / cutlass.range loop, nested
            ...
        prof.mark("tile_done")                                    # instant
        prof.finalize()                                           # DROPPED (if any) + FINALIZE(SM id)

    @cute.jit
    def launch(x: cute.Tensor, prof_buf, spec: cutlass.Constexpr):
        kernel(x, prof_buf, spec).launch(grid=[528, 1, 1], block=[256, 1, 1])

    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=528, records_per_lane=1024)
    session = ikp_cute.Session(spec, groups=["producer", "consumer"])
    compiled = cute.compile(launch, x, session.kernel_arg(), session.spec)
    with session.zeroed_then_synced():                            # zero the buffer; synchronize on exit
        compiled(x, session.kernel_arg())
    trace = session.decode()                                      # host_decode Trace
    session.save("capture.npy")                                   # + capture.json sidecar

Modes (``ProfileSpec(mode=...)``, one recorder each): "cursor" (default), "deferred", "smem", "lean",
"atomic", "static"; see ProfileSpec and the README. Disabled (``ikp_cute.disabled()``): ``kernel_arg()``
is None and every profiling call compiles away (the PTX equals the uninstrumented kernel's).
``Session(spec, bake_address=True)`` compiles the buffer address into the kernel (no kernel argument:
pass None), which is how a third-party kernel is instrumented without changing its launch signature.
Misuse visible while tracing raises ``ikp_cute.ProfileUsageError`` naming the call site.
Test helpers (PTX/SASS analyses, kernels with a known record structure): ``ikp_cute.testing``.
Pipelines (no source change): ``with ikp_cute.trace_pipelines(session):`` around compiling any kernel
built on cutlass.pipeline records its waits and signals per stage (docs/pipelines.md), and the flags of
cutlass.utils.distributed's primitives and of ``ikp_cute.flags.signal / wait`` (``import ikp_cute.flags``;
docs/flags.md); ``ikp_cute.clock.measure_offset`` puts a GPU's clock on the host's. With a ``Pool``
(``ikp_cute.Pool.create()``) as the target instead, every kernel compiled inside records into one
process-wide buffer, in the launches its selection picks, with nothing sized in advance (docs/pool.md).
``with profile_region("name"):`` (no Profiler) records a region into whatever trace is active, and nothing
outside one.
A whole program (every kernel it compiles, no sizes): ``with ikp_cute.record(out="rec"):`` or
``ikp record -o rec -- python prog.py`` (docs/guides/recording.md).

This module imports neither torch nor cutlass until a name that needs them is used.
"""

from __future__ import annotations

from host_decode.core.lazy import lazy_exports

from .spec import MODES, EventRegistry, ProfileSpec, ProfileUsageError, disabled

__all__ = [
    "MODES",
    "EventRegistry",
    "GpuUnavailable",
    "ProfileSpec",
    "Pool",
    "ProfileUsageError",
    "Profiler",
    "Session",
    "disabled",
    "fake_buffer",
    "launch_records",
    "profile_region",
    "record",
    "require_gpu",
    "trace_pipelines",
    "window_branch",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Pool": ".pool:Pool",
        "Profiler": ".profiler:Profiler",
        "profile_region": ".profiler:profile_region",
        "launch_records": ".profiler:launch_records",
        "Session": ".session:Session",
        "GpuUnavailable": ".session:GpuUnavailable",
        "require_gpu": ".session:require_gpu",
        "fake_buffer": ".session:fake_buffer",
        "trace_pipelines": ".pipelines:trace_pipelines",
        "record": ".record:record",
        "window_branch": ".profiler:window_branch",
    },
)
