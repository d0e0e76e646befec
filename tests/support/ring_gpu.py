"""Capture windows on a GPU, as checks that return a result dict ("ok" and what was seen): the device rule
equals ring.decide, windows pick the right launches, a full ring counts, a closed window writes nothing,
every recorded launch decodes exactly. Run by tests/gpu/test_ring_gpu.py and by gpu/capture_suite.py
(one GPU sitting).
"""

from __future__ import annotations

import os

import numpy as np

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

BLOCKS, TILES = 8, 4


def build(slots: int, options: str | None = None, spec_blocks: int = BLOCKS):
    """-> (session, launch(n=1), compiled) of examples/cuda_graph/kernel.py with a ring of `slots`,
    launched on BLOCKS blocks; `spec_blocks`: the session's num_blocks (more than BLOCKS: a launch of a
    smaller grid than the spec's, whose lane shares are divided at run time)."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from examples.cuda_graph.kernel import EVENTS, GROUPS, THREADS, launch_tiles

    x = torch.rand(BLOCKS * TILES * THREADS, device="cuda")
    y = torch.zeros(BLOCKS * THREADS, device="cuda")
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=spec_blocks, records_per_lane=4 * TILES + 8, events=EVENTS,
                                window_slots=slots)
    session = ikp_cute.Session(spec, groups=GROUPS, kernel="tiles_kernel")
    args = (from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16), Int32(TILES), session.kernel_arg())

    def stream():
        return cuda.CUstream(torch.cuda.current_stream().cuda_stream)

    extra = {"options": options} if options else {}
    compiled = cute.compile(launch_tiles, *args, session.spec, BLOCKS, stream(), **extra)

    def launch(n=1):
        for _ in range(n):
            compiled(*args, stream())

    return session, launch, compiled


def spans_expected() -> int:
    return BLOCKS * 2 * TILES * 2


def check_rule_matches_reference(session, launch, trials=24, seed=0, lanes=None) -> dict:
    """Random control blocks (epoch, filled, every, start, stop; some with a count error set, some with a
    count that is not a whole number of launches) written on the device, one launch each:
    the control block afterwards equals ring.run_launch's, and the slot holds records iff decide().
    `lanes`: the launch's lanes when its grid is not the spec's."""
    import torch

    from ikp_cute import ring

    rng = np.random.default_rng(seed)
    slots = session.spec.window_slots
    mismatches = []
    for trial in range(trials):
        session.ring.arm()
        c = np.zeros(ring.HEADER_WORDS32 + slots, np.int32)
        ticks = int(rng.integers(0, 50)) << ring.TICK_BITS
        if trial % 6 == 5:  # a count left off by an earlier miscounted launch: its last lane must flag it
            ticks += int(rng.integers(1, 1000))
        c[ring.TICKS], c[ring.TICKS + 1] = ring._i32(ticks), ring._i32(ticks >> 32)
        if trial % 6 == 4:  # a sticky count error: nothing records
            c[ring.DONE] = ring._i32(ring.COUNT_ERROR)
        c[ring.FILLED_EVERY] = int(rng.integers(0, slots + 1)) | (int(rng.integers(1, 4)) << 16)
        c[ring.START] = int(rng.integers(0, 50))
        c[ring.STOP] = ring._i32(int(rng.choice([c[ring.START] + int(rng.integers(0, 20)), ring.OPEN_ENDED])))
        session.ring.control[: c.size].copy_(torch.from_numpy(c))
        _, recording, slot = ring.decide(c, slots)
        launch()
        torch.cuda.synchronize()
        expected = c.copy()
        ring.run_launch(expected, slots, lanes or session.spec.num_lanes)
        got = session.ring.control.cpu().numpy()[: c.size]
        slots_written = session.ring.ring[slot, 1:] if recording else session.ring.ring[:, 1:]
        written = bool(slots_written.any().item())
        if not np.array_equal(got, expected) or written != recording:
            mismatches.append({"trial": trial, "control": c.tolist(), "got": got.tolist(),
                               "expected": expected.tolist(), "recording": recording, "written": written})
    return {"trials": trials, "mismatches": mismatches, "ok": not mismatches}


def check_window_and_ring_full(session, launch) -> dict:
    """window(start=2, count=3, every=2) over 12 launches -> launches +2, +4, +6, each decoded exactly;
    then a window of 6 launches into a ring of 4 -> 4 recorded, 2 counted lost, the first 4 kept."""
    import torch

    slots = session.spec.window_slots
    session.ring.arm()
    first = session.ring.state()["epoch"]
    session.window(2, 3, every=2, relative=True)
    launch(12)
    torch.cuda.synchronize()
    state = session.ring.state()
    traces = session.ring.decode()
    window_ok = (state["slot_launches"] == [first + 2, first + 4, first + 6]
                 and all(t.spans.size == spans_expected() and t.loss.lost == 0 for t in traces))
    session.ring.arm()
    first = session.ring.state()["epoch"]
    session.window(0, slots + 2, relative=True)
    launch(slots + 2)
    torch.cuda.synchronize()
    full = session.ring.state()
    full_ok = full["slot_launches"] == list(range(first, first + slots)) and full["lost_launches"] == 2
    session.ring.close()
    session.ring.arm()
    launch(3)
    torch.cuda.synchronize()
    closed_ok = not bool(session.ring.ring[:, 1:].any().item()) and session.ring.state()["filled"] == 0
    return {"window": state["slot_launches"], "window_ok": window_ok, "ring_full": full, "ring_full_ok": full_ok,
            "closed_writes_nothing": closed_ok, "ok": window_ok and full_ok and closed_ok}


def check_grid_smaller_than_spec() -> dict:
    """A session of 11 blocks (22 lanes: 2**24 % 22 != 0, the uneven shares) launched on 8 (16 lanes): the
    shares are divided at run time (the spec's constant share does not apply) and still sum to whole
    launches, with the rule equal to the reference's."""
    session, launch, _ = build(slots=4, spec_blocks=BLOCKS + 3)
    result = check_rule_matches_reference(session, launch, trials=12, seed=1, lanes=2 * BLOCKS)
    session.ring.arm(reset_epoch=True)
    launch(5)
    import torch
    torch.cuda.synchronize()
    state = session.ring.state()
    result["whole"] = state["epoch"] == 5 and state["ticks_pending"] == 0 and not state["count_error"]
    result["ok"] = result["ok"] and result["whole"]
    return result


def check_window_branch_with_late_warps(launches=12, spins=20) -> dict:
    """ikp_cute.window_branch in a kernel whose non-leading warps decide `spins` us after their lane's
    owner counted itself (ikp_cute/testing/kernels/window_branch_kernel.py), window on every second
    launch: every warp of a launch takes the same copy, the recorded launches are the window's, each
    decodes exactly, and the launch count stays whole, through the window (the closed copies count per
    warp) and after it (emptied: per block), counting at the copy's start and at its end, on the spec's
    grid (constant parts) and on a grid of 7 blocks (parts divided at run time, 2**24 % 7 != 0). Then: a
    window longer than the ring (the launches it cannot hold take the plain copy and count in LOST); a
    grid larger than the session (every block takes the recorded copy, the blocks past the session count
    as strays); a recording launch whose lanes are counted twice (the ring refuses, and says so)."""
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels.window_branch_kernel import EVENTS, GROUPS, WARPS, launch_branch

    blocks = 8
    taken = torch.zeros(blocks * WARPS, dtype=torch.int32, device="cuda")

    def compiled_for(twice, slots=8, spec_blocks=blocks, count_at="start", grid=blocks):
        spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=spec_blocks, records_per_lane=8, events=EVENTS,
                                    window_slots=slots)
        session = ikp_cute.Session(spec, groups=GROUPS, kernel="branch_kernel")
        args = (from_dlpack(taken), Int32(spins), session.kernel_arg())
        compiled = cute.compile(launch_branch, *args, spec, grid, twice, count_at)
        return session, lambda: compiled(*args)  # the default stream, torch's too

    def run(session, launch, count, start, length, every, grid=blocks):
        session.ring.arm()
        first = session.ring.state()["epoch"]
        session.window(start, length, every=every, relative=True)
        copies = []
        for _ in range(count):
            taken.zero_()
            launch()
            copies.append(sorted(set(taken[: grid * WARPS].cpu().tolist())))
        return first, copies, session.ring.state()

    ok, copies, state, expected = True, {}, {}, {}
    for count_at, grid in (("start", blocks), ("end", blocks), ("start", blocks - 1), ("end", blocks - 1)):
        key = f"{count_at}/{grid}"
        session, launch = compiled_for(False, count_at=count_at, grid=grid)
        # the window's last launch empties it: the 3 launches after it decide "empty" (counted per block)
        first, copies[key], state[key] = run(session, launch, launches + 3, 1, launches // 2, 2, grid)
        expected[key] = [first + k for k in range(1, launches, 2)]
        traces = session.ring.decode()
        uniform = all(len(c) == 1 for c in copies[key])
        pattern = [c[0] for c in copies[key]] == [2 if k % 2 else 1 for k in range(launches)] + [1, 1, 1]
        exact = all(t.spans.size == grid * 2 and t.loss.lost == 0 for t in traces)
        now = state[key]
        whole = now["ticks_pending"] == 0 and now["epoch"] == first + launches + 3 and not now["count_error"]
        emptied = now["window"]["start"] == now["window"]["stop"]
        ok = ok and uniform and pattern and now["slot_launches"] == expected[key] and exact and whole and emptied

    # launches 0..3 in the window, a ring of 2: launches 2 and 3 are NOT_RECORDED (plain copy, LOST)
    ring_full, full_copies, full_state = True, {}, {}
    for count_at in ("start", "end"):
        full_session, full_launch = compiled_for(False, slots=2, count_at=count_at)
        first, full_copies[count_at], now = run(full_session, full_launch, 5, 0, 4, 1)
        full_state[count_at] = now
        ring_full = ring_full and (
            full_copies[count_at] == [[2], [2], [1], [1], [1]] and now["lost_launches"] == 2
            and now["slot_launches"] == [first, first + 1] and now["ticks_pending"] == 0
            and now["epoch"] == first + 5 and not now["count_error"]
        )

    # a session of 5 blocks launched on 8: every launch runs the recorded copy; blocks 5-7 are strays
    wide_session, wide_launch = compiled_for(False, spec_blocks=blocks - 3)
    first, wide_copies, wide_state = run(wide_session, wide_launch, 4, 1, 2, 2)
    # (decode() refuses these slots by design, check_strays_with_window says why: the records are checked)
    wide_lanes = 2 * (blocks - 3)
    per_lane = [np.count_nonzero(records[1:].reshape(8, wide_lanes)[:, :wide_lanes], axis=0)
                for _, records, _ in wide_session.ring.launches()]
    grid_wider = (
        all(c == [2] for c in wide_copies) and wide_state["slot_launches"] == [first + 1, first + 3]
        and len(per_lane) == 2 and all((n == per_lane[0][0]).all() and n[0] > 0 for n in per_lane)
        and wide_state["stray_records"] == 4 * 3 * 2 * 2  # every launch: 3 blocks x 2 groups x 2 records
        and wide_state["ticks_pending"] == 0 and wide_state["epoch"] == first + 4 and not wide_state["count_error"]
    )

    twice_session, twice_launch = compiled_for(True)
    twice_session.ring.arm()
    twice_session.ring.open()
    twice_launch()
    torch.cuda.synchronize()
    from host_decode.core.errors import DecodeError

    try:
        twice_session.ring.launches()
        refused = ""
    except DecodeError as error:
        refused = str(error)
    counted_twice_refused = "counted" in refused
    return {"copies": copies, "slot_launches": {k: v["slot_launches"] for k, v in state.items()},
            "expected": expected, "windowed_ok": ok, "ring_full": ring_full,
            "full_copies": full_copies, "full_state": full_state, "grid_wider": grid_wider,
            "wide_copies": wide_copies, "wide_state": wide_state, "counted_twice_refused": counted_twice_refused,
            "refusal": refused[:160], "ok": ok and ring_full and grid_wider and counted_twice_refused}


def check_strays_with_window(launches=4) -> dict:
    """A grid of 12 blocks on a session of 8, window open: the 4 blocks outside the session never write
    (every session lane of every slot holds the same records) and their records are
    counted in the ring's STRAY word (with a window a stray thread's launch is not known): 2 records per
    stray lane (one region) x 2 groups x 4 blocks per launch."""
    import cutlass.cute as cute
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import ikp_cute
    from ikp_cute.testing.kernels.window_branch_kernel import EVENTS, GROUPS, WARPS, launch_branch

    blocks, grid = 8, 12
    taken = torch.zeros(grid * WARPS, dtype=torch.int32, device="cuda")
    spec = ikp_cute.ProfileSpec(num_groups=2, num_blocks=blocks, records_per_lane=8, events=EVENTS, window_slots=8)
    session = ikp_cute.Session(spec, groups=GROUPS, kernel="branch_kernel")
    args = (from_dlpack(taken), Int32(0), session.kernel_arg())
    compiled = cute.compile(launch_branch, *args, spec, grid, False)
    session.ring.arm()
    session.ring.open()
    for _ in range(launches):
        compiled(*args)
    torch.cuda.synchronize()
    state = session.ring.state()
    # (decode() refuses these slots by design: their header holds the launched grid, larger than the
    # session; the records themselves are checked: every session lane wrote the same number)
    slots = session.ring.launches()
    per_lane = [np.count_nonzero(records[1:].reshape(spec.records_per_lane, spec.write_stride)[:, : blocks * 2], axis=0)
                for _, records, _ in slots]
    exact = len(slots) == launches and all((n == per_lane[0][0]).all() and n[0] > 0 for n in per_lane)
    expected = launches * (grid - blocks) * 2 * 2
    return {"stray_records": state["stray_records"], "expected": expected, "slots": state["filled"],
            "exact": exact, "ok": exact and state["stray_records"] == expected}
