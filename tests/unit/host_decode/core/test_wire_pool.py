"""The recording pool's layout (host_decode/core/wire.py, second half): offsets, the unit header, selections."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.core import wire


@pytest.mark.parametrize("kernels", [1, 7, wire.POOL_DEFAULT_KERNELS, wire.POOL_MAX_KERNELS])
def test_control_block_fields_are_disjoint_and_inside(kernels):
    """Every kernel's window words and counters lie inside the control block, never overlap each other or the
    header / NEXT lines, and every counter is >= 512 bytes from every window word (loads of the window words
    must not wait behind the atomics landing on the counters: ikp_cute/ring.py)."""
    spans = [(0, 128, "header"), (wire.POOL_NEXT, wire.POOL_NEXT + 8, "next")]
    for k in sorted({0, kernels // 2, kernels - 1}):
        spans.append((wire.pool_window(k), wire.pool_window(k) + 16, f"window {k}"))
        spans.append((wire.pool_counter(kernels, k), wire.pool_counter(kernels, k) + wire.POOL_SETS, f"ticks {k}"))
        for s in range(3):
            lo = wire.pool_set(kernels, k, s)
            spans.append((lo, lo + wire.POOL_SET_BYTES, f"set {s} of {k}"))
    spans.sort()
    for (a0, a1, a), (b0, b1, b) in zip(spans, spans[1:]):
        assert a1 <= b0, (a, b)
    assert spans[-1][1] <= wire.pool_control_bytes(kernels)
    assert wire.pool_set(kernels, kernels - 1, 2) + wire.POOL_SET_BYTES <= wire.pool_counter(kernels, kernels - 1) + \
        wire.POOL_COUNTER_BYTES
    assert wire.pool_counters(kernels) - wire.pool_windows_end(kernels) >= 512
    assert wire.pool_control_bytes(kernels) % wire.POOL_UNIT_BYTES == 0 and wire.pool_counters(kernels) % 128 == 0


def test_default_pool_fits_the_budget():
    """32 MiB: under 1% of the 5.67 GB IKET sized for quack's GEMM; the control block is under 1% of it."""
    size = 32 << 20
    assert size <= 0.01 * 5.67e9
    assert wire.pool_control_bytes(wire.POOL_DEFAULT_KERNELS) < 0.01 * size
    assert wire.pool_units(size, wire.POOL_DEFAULT_KERNELS) * wire.POOL_UNIT_BYTES > 0.99 * size


def test_unit_header_round_trips_every_field_at_its_limits():
    kernel = np.array([0, 5, 0xFFFF])
    launch = np.array([0, 123456, 0xFFFFFFFF])
    time64 = np.array([0, (1 << 40) + 17, (1 << 64) - 1], dtype=np.uint64)
    lane = np.array([0, 77, wire.MAX_LANES - 1])
    wpb = np.array([1, 12, 32])
    seq = np.array([0, 3, 0xFFFF])
    sm = np.array([0, 131, 0xFFFF])
    lost = np.array([0, 9, 1 << 40])
    h = wire.pack_unit_header(kernel, launch, time64, lane, wpb, seq, sm, lost)
    assert h.shape == (3, 4) and h.dtype == np.uint64
    got = wire.unpack_unit_headers(h)
    assert got["written"].all() and not got["reserved"].any()
    for name, want in (("kernel", kernel), ("launch", launch), ("lane", lane), ("warps_per_block", wpb),
                       ("seq", seq), ("sm", sm), ("lost", lost)):
        assert (got[name] == want).all(), name
    assert (got["time64"] == time64).all()
    assert int(h[1, 0]) >> 48 == wire.POOL_UNIT_MAGIC
    assert not wire.unpack_unit_headers(np.zeros((2, 4), np.uint64))["written"].any()


@pytest.mark.parametrize("text, words", [
    ("1", (1, 2, 1, wire.POOL_WINDOW)), ("0", (0, 1, 1, wire.POOL_WINDOW)), ("3:6", (3, 6, 1, wire.POOL_WINDOW)),
    ("5:", (5, wire.POOL_OPEN_ENDED, 1, wire.POOL_WINDOW)), ("every=100", (0, wire.POOL_OPEN_ENDED, 100, 0)),
    ("last", (0, wire.POOL_OPEN_ENDED, 1, wire.POOL_LAST)), ("none", (0, 0, 1, 0)),
    ("all", (0, wire.POOL_OPEN_ENDED, 1, 0)), (" 2 : 4 ", (2, 4, 1, 0)),
])
def test_selections(text, words):
    assert wire.pool_selection(text) == words


@pytest.mark.parametrize("bad", ["", "-1", "6:3", "every=0", "every=x", "first", "1:2:3", "4294967295"])
def test_bad_selections_name_what_is_allowed(bad):
    with pytest.raises(ValueError, match="launch selection .*expected 'N'"):
        wire.pool_selection(bad)


def test_decision_rule():
    def chosen(selection, launches=12):
        words = wire.pool_selection(selection)
        return [e for e in range(launches) if wire.pool_decide(*words, e)[0]]

    assert chosen("1") == [1]
    assert chosen("3:6") == [3, 4, 5]
    assert chosen("every=5") == [0, 5, 10]
    assert chosen("last") == list(range(12)) and chosen("all") == list(range(12))
    assert chosen("none") == [] and chosen("4:4") == []
    # a window is emptied by the first launch past it (later launches then decide without TICKS)
    assert [e for e in range(5) if wire.pool_decide(*wire.pool_selection("1"), e)[1]] == [2, 3, 4]
    assert not wire.pool_decide(*wire.pool_selection("every=3"), 10**6)[1]


@pytest.mark.parametrize("warps", [1, 2, 3, 12, 1000, 12288, 132 * 12, 2**20 + 7, 2**24])
def test_warp_parts_sum_to_one_launch_and_are_never_zero(warps):
    parts = [wire.pool_warp_part(w, warps) for w in (0, 1, warps - 1)]
    rest = wire.pool_warp_part(1, warps) if warps > 1 else 0
    assert parts[0] + rest * (warps - 1) == 1 << wire.POOL_TICK_BITS
    assert min(parts) >= 1


def test_geometry_is_checked():
    with pytest.raises(ValueError, match="max_kernels"):
        wire.check_pool_geometry(1 << 20, 0)
    with pytest.raises(ValueError, match="control block"):
        wire.check_pool_geometry(wire.pool_control_bytes(8), 8)
    wire.check_pool_geometry(wire.pool_control_bytes(8) + wire.POOL_UNIT_BYTES, 8)
