"""Slice sets (host_decode.writers.slice_sets): refused when they do not fit, stacked without overlap, written
as slices that replay exactly (the official protos, imported like trace processor)."""

import numpy as np
import pytest

from host_decode.core.model import Names
from host_decode.writers import Overlay
from host_decode.writers import perfetto as pf
from host_decode.writers.slice_sets import SLICE_DTYPE, SliceSet, stack
from tests.support import perfetto_replay

pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def slices(rows):
    out = np.zeros(len(rows), SLICE_DTYPE)
    for i, row in enumerate(rows):
        out[i] = row
    return out


def small_trace():
    r = perfetto_replay
    lanes = {0: [("B", 1, 0), ("E", 1, 100)], 2: [("B", 1, 10), ("E", 1, 50)]}
    return r.make_trace(lanes, names=Names({1: "work"})), r


def test_slice_set_replays():
    """Two tracks of one name under block 1 (one row), slices touching at 40 on one track, args shown."""
    trace, r = small_trace()
    o = r.ORIGIN
    ss = SliceSet(((1, "TMA in flight: a"), (1, "TMA in flight: a"), (0, "other")), ("a[0]", "a[1] (bounded)"),
                  slices([(0, 0, o + 10, o + 40), (0, 1, o + 40, o + 70), (1, 1, o + 20, o + 30),
                          (2, 0, o - 5, o + 5)]),
                  ("stage", "latency_max_ns"), np.array([[0, 30], [1, 30], [1, 10], [0, 10]]))
    res = r.replay(pf.perfetto_bytes(trace, overlay=Overlay(slice_sets=(ss,))))
    tracks = res["tracks"]
    got = sorted((tracks[s["track"]].name, tracks[tracks[s["track"]].parent_uuid].name, s["name"], s["ts"], s["dur"],
                  s["depth"], tuple(sorted(s["args"].items()))) for s in res["slices"] if "work" != s["name"])
    origin = o - 5  # the earliest slice moves the origin
    assert got == sorted([
        ("TMA in flight: a", "block 1", "a[0]", 15, 30, 0, (("latency_max_ns", 30), ("stage", 0))),
        ("TMA in flight: a", "block 1", "a[1] (bounded)", 45, 30, 0, (("latency_max_ns", 30), ("stage", 1))),
        ("TMA in flight: a", "block 1", "a[1] (bounded)", 25, 10, 0, (("latency_max_ns", 10), ("stage", 1))),
        ("other", "block 0", "a[0]", 0, 10, 0, (("latency_max_ns", 10), ("stage", 0))),
    ]) and origin == o - 5
    row = [d for d in tracks.values() if d.name == "TMA in flight: a"]
    assert len(row) == 2 and row[0].sibling_merge_key == row[1].sibling_merge_key == "slices TMA in flight: a"
    block1 = [u for u, d in tracks.items() if d.name == "block 1"][0]
    under = sorted((d.sibling_order_rank, d.name) for d in tracks.values() if d.parent_uuid == block1)
    assert under[0][1] == "TMA in flight: a"  # first in the block, before its lanes


@pytest.mark.parametrize(("change", "message"), [
    ({"rows": [(0, 0, 10, 40), (0, 0, 30, 50)]}, "overlap on track"),
    ({"rows": [(2, 0, 10, 40)]}, "track must index"),
    ({"rows": [(0, 5, 10, 40)]}, "name must index"),
    ({"rows": [(0, 0, 40, 10)]}, "ends before it starts"),
    ({"rows": [(0, 0, 40, 40)]}, "or where it starts"),
    ({"tracks": ((7, "x"),)}, "not a block of the trace"),
    ({"args": np.array([[-1]])}, "non-negative"),
    ({"args": np.zeros((2, 1), np.int64)}, "1 x 1"),
])
def test_bad_slice_sets_are_refused(change, message):
    trace, _ = small_trace()
    kw = {"tracks": ((0, "x"),), "names": ("n",), "slices": slices(change.get("rows", [(0, 0, 10, 40)])),
          "arg_names": ("a",), "args": change.get("args", np.zeros((len(change.get("rows", [1])), 1), np.int64))}
    kw["tracks"] = change.get("tracks", kw["tracks"])
    with pytest.raises(ValueError, match=message):
        pf.perfetto_bytes(trace, overlay=Overlay(slice_sets=(SliceSet(**kw),)))


@pytest.mark.parametrize("seed", range(10))
def test_stack_levels_never_overlap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    group = rng.integers(0, 5, n)
    start = rng.integers(0, 1000, n)
    end = start + rng.integers(1, 80, n)
    level = stack(group, start, end)
    assert (level >= 0).all()
    for g in np.unique(group):
        for lv in np.unique(level[group == g]):
            m = (group == g) & (level == lv)
            o = np.argsort(start[m], kind="stable")
            assert (start[m][o][1:] >= end[m][o][:-1]).all()
    # disjoint intervals of a group stay on one level
    assert (stack(np.zeros(5, np.int64), np.arange(5) * 10, np.arange(5) * 10 + 10) == 0).all()
