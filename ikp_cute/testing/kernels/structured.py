"""Kernels with a known record structure, used by the CPU compile tests and the GPU tests.

structured_kernel: every lane (block, warp group) runs `iters` iterations of a dynamic loop holding
region "outer" with nested region "inner" and a mark "tick"; warp group 1 (if any) additionally
records "producer" inside an `if warp_idx == ...` branch. Expected records per lane:
2 anchors + iters * (2 + 2 + 1) [+ 2 for group 1 per iteration] + finalize.
"""

import dataclasses

import cutlass
from cutlass import Int32, cute

from ikp_cute import Profiler, profile_region


@cute.kernel
def structured_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    group = warp // 4
    prof = Profiler.create(spec, prof_buf, group=group)
    acc = x[bidx * 256 + tidx]
    for i in cutlass.range(iters):
        with profile_region(prof, "outer", index=2 * i):
            acc = acc * 1.0001 + 0.5
            with profile_region(prof, "inner", index=2 * i + 1):
                acc = acc * 0.9999 + 0.25
            if warp == 4:
                with profile_region(prof, "producer", index=2 * iters + i):
                    acc = acc + 1.0
    prof.mark("tick", index=3 * iters)
    x[bidx * 256 + tidx] = acc
    prof.finalize()


@cute.jit
def launch_structured(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    structured_kernel(x, iters, prof_buf, spec).launch(grid=list(grid), block=[256, 1, 1])


@cute.kernel
def warp_specialized_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    """Producer/consumer roles as in FA4: regions inside `if warp < 4` / else, a dynamic loop, a runtime
    `if` inside the loop, and two nesting levels."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4)
    acc = x[bidx * 256 + tidx]
    if warp < 4:
        for i in cutlass.range(iters):
            with profile_region(prof, "load", index=i):
                acc = acc + 1.0
                if i % 2 == 0:
                    with profile_region(prof, "load_even", index=iters + i):
                        acc = acc * 2.0
    else:
        for i in cutlass.range(iters):
            with profile_region(prof, "mma", index=i):
                for j in cutlass.range(2):
                    with profile_region(prof, "mma_half", index=iters + 2 * i + j):
                        acc = acc * 0.5 + 1.0
            prof.mark("mma_done", index=3 * iters + i)
    x[bidx * 256 + tidx] = acc
    prof.finalize()


@cute.jit
def launch_warp_specialized(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    warp_specialized_kernel(x, iters, prof_buf, spec).launch(grid=list(grid), block=[256, 1, 1])


@cute.kernel
def carried_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    """Positive twin of rebuilt_profiler_kernel: one handle before the loop, cursor carried through it.
    The loop is not unrolled, so in the PTX every record store inside the loop must use an address
    computed inside the loop (it advances per iteration); a cursor that is not carried gives
    loop-invariant (hoisted) addresses."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    acc = x[bidx * 256 + tidx]
    prof = Profiler.create(spec, prof_buf, group=cute.arch.warp_idx() // 4)
    for i in cutlass.range(iters, unroll=1):
        with profile_region(prof, "outer"):
            acc = acc * 1.0001 + 0.5
            with profile_region(prof, "inner"):
                acc = acc * 0.9999 + 0.25
    x[bidx * 256 + tidx] = acc


@cute.jit
def launch_carried(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    carried_kernel(x, iters, prof_buf, spec).launch(grid=list(grid), block=[256, 1, 1])


def _with_fresh_cursor(prof, start):
    """A copy of `prof` whose cursor starts from `start` in a new register tensor: used inside a loop
    body it models a cursor that is not carried (each iteration starts from the pre-loop value)."""
    room = cute.make_rmem_tensor(cute.make_layout(1), Int32)
    room[0] = start
    recorder = dataclasses.replace(prof.recorder, room=room)
    return dataclasses.replace(prof, recorder=recorder)


@cute.kernel
def stale_cursor_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    """Negative control for the carry check: each iteration restarts from the cursor value before
    the loop (the silent failure of a cursor the DSL does not carry), so every iteration writes the
    same slots. tests/unit/ikp_cute/test_device_compile.py must flag it."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    acc = x[bidx * 256 + tidx]
    prof = Profiler.create(spec, prof_buf, group=cute.arch.warp_idx() // 4)
    start = prof.recorder.room[0]
    for i in cutlass.range(iters, unroll=1):
        stale = _with_fresh_cursor(prof, start)
        with profile_region(stale, "outer"):
            acc = acc * 1.0001 + 0.5
            with profile_region(stale, "inner"):
                acc = acc * 0.9999 + 0.25
    x[bidx * 256 + tidx] = acc


@cute.jit
def launch_stale(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    stale_cursor_kernel(x, iters, prof_buf, spec).launch(grid=list(grid), block=[256, 1, 1])


# --- what the structured kernel must record (used by tests/gpu/test_device_gpu.py) ------------------------


def structured_program(iters: int, group: int) -> list[tuple[str, str, int | None]]:
    """The records of one lane of structured_kernel in program order: (kind, event, static index)."""
    records = []
    for i in range(iters):
        records += [
            ("begin", "outer", 2 * i),
            ("begin", "inner", 2 * i + 1),
            ("end", "inner", 2 * i + 1),
        ]
        if group == 1:  # the leader of group 1 is warp 4, which takes the `warp == 4` branch
            records += [
                ("begin", "producer", 2 * iters + i),
                ("end", "producer", 2 * iters + i),
            ]
        records += [("end", "outer", 2 * i)]
    records.append(("instant", "tick", 3 * iters))
    return records


def expected_dropped(iters: int, group: int, mode: str, records_per_lane: int) -> int:
    """Records of one lane that do not fit, worked out from the program and each mode's rule:
    cursor/deferred/smem/lean: records take slots 2.. in program order (a deferred begin takes its slot
    at the begin), the ones past the capacity are dropped; atomic: a region reserves two slots at its
    begin and a mark one, every reserved slot up to the capacity is used (a region whose BEGIN takes the
    last slot loses only its END), so the same count; static: record (index i) at slot 2+2i (+1 for an
    end), dropped at or past records_per_lane - 2."""
    program = structured_program(iters, group)
    trailer = records_per_lane - 2
    if mode in ("cursor", "deferred", "smem", "lean", "atomic"):
        return max(0, len(program) - (trailer - 2))
    slots = [2 + 2 * index + (kind == "end") for kind, _, index in program]
    return sum(slot >= trailer for slot in slots)


@cute.kernel
def multi_writer_kernel(x: cute.Tensor, iters: Int32, prof_buf, spec: cutlass.Constexpr):
    """Atomic mode's case: every warp of a warp group writes into the group's lane (lane 0 of each
    warp leads), so regions of 4 warps interleave in one lane. Per lane: 4 * iters "work" spans."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    lane_id = cute.arch.lane_idx()
    prof = Profiler.create(spec, prof_buf, group=warp // 4, leader=lane_id == 0)
    acc = x[bidx * 256 + tidx]
    for i in cutlass.range(iters):
        with profile_region(prof, "work"):
            acc = acc * 1.0001 + 0.5
    x[bidx * 256 + tidx] = acc
    cute.arch.sync_threads()
    prof.finalize(leader=(warp % 4) == 0)


@cute.jit
def launch_multi_writer(
    x: cute.Tensor,
    iters: Int32,
    prof_buf,
    spec: cutlass.Constexpr,
    grid: cutlass.Constexpr,
):
    multi_writer_kernel(x, iters, prof_buf, spec).launch(grid=list(grid), block=[256, 1, 1])
