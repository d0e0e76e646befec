"""Capture windows on a GPU (skipped without one): the device rule equals ring.decide, windows pick the
right launches, a full ring counts, a closed window writes nothing, every recorded launch decodes
exactly. The check_* functions (tests/support/ring_gpu.py) are also run by gpu/capture_suite.py (one GPU
sitting)."""

from __future__ import annotations

import os

import pytest

from tests.support.ring_gpu import (
    build,
    check_grid_smaller_than_spec,
    check_rule_matches_reference,
    check_strays_with_window,
    check_window_and_ring_full,
    check_window_branch_with_late_warps,
)

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _passes(check) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cutlass")
    result = check()
    assert result["ok"], result


@pytest.fixture(scope="module")
def built():
    pytest.importorskip("torch")
    pytest.importorskip("cutlass")
    return build(slots=4)[:2]


@pytest.mark.gpu
def test_window_rule_matches_reference(built):
    result = check_rule_matches_reference(*built)
    assert result["ok"], result["mismatches"][:3]


@pytest.mark.gpu
def test_window_picks_launches_and_ring_full_is_counted(built):
    result = check_window_and_ring_full(*built)
    assert result["ok"], result


@pytest.mark.gpu
def test_a_grid_smaller_than_the_spec_counts_whole_launches():
    _passes(check_grid_smaller_than_spec)


@pytest.mark.gpu
def test_window_branch_decides_once_per_launch_even_for_late_warps():
    _passes(check_window_branch_with_late_warps)


@pytest.mark.gpu
def test_strays_with_a_window_are_counted_in_the_ring():
    _passes(check_strays_with_window)
