"""Overlap between groups: how much of one group's region time ran while another group was in a region.

Definition: **overlap(A by B) of a block** = |U(A) ∩ U(B)| / |U(A)| where U(X) is the union of the spans
of all lanes of group X in that block. 1.0 means all of A's region time ran while B was in some region;
overlap_summary weighs the blocks by time.

Invariants, and the tests that guard them: hand-computed values (tests/unit/host_decode/analysis/test_analysis.py::
test_overlap_hand_computed) and a per-nanosecond model on random traces (::test_random_traces_match_per_ns_model);
runs of whole blocks change nothing (::test_runs_change_nothing).
"""

from __future__ import annotations

import numpy as np

from host_decode.analysis.intervals import block_runs, intersection_length, union_intervals
from host_decode.core.arrays import distinct_small
from host_decode.core.model import Trace

OVERLAP_DTYPE = np.dtype(
    [
        ("block", np.int64),
        ("group_a", np.int64),
        ("group_b", np.int64),
        ("a_ns", np.int64),  # |U(A)| in the block
        ("b_ns", np.int64),
        ("both_ns", np.int64),  # |U(A) ∩ U(B)|
        ("a_overlapped", np.float64),  # both / a  (NaN when a == 0)
        ("b_overlapped", np.float64),  # both / b
    ]
)


def group_overlap(trace: Trace, pairs: list[tuple[int, int]] | None = None) -> np.ndarray:
    """Per block and group pair (OVERLAP_DTYPE). `pairs` default: every (a, b) with a < b among the
    groups that have spans. Blocks where neither group has spans are left out."""
    sp = trace.spans
    group = sp["group"]
    groups = distinct_small(group) if group.size and int(group.min()) >= 0 else np.unique(group)
    if pairs is None:
        pairs = [(int(a), int(b)) for i, a in enumerate(groups) for b in groups[i + 1 :]]
    rows: list = [[] for _ in pairs]
    for chunk, _ in block_runs(trace):  # runs of whole blocks: a block's rows come from one run
        unions: dict = {}  # group -> its per-block union in this run, shared by the pairs
        for i, (a, b) in enumerate(pairs):  # few pairs: a Python loop over groups, never over spans
            rows[i].append(_overlap_pair(chunk, a, b, unions))
    flat = [r for per_pair in rows for r in per_pair]
    return np.concatenate(flat) if flat else np.zeros(0, OVERLAP_DTYPE)


def _block_union(sp: np.ndarray, group: int, unions: dict):
    if group not in unions:
        m = sp["group"] == group
        unions[group] = union_intervals(sp["block"][m], sp["start_ns"][m], sp["end_ns"][m])[:3]
    return unions[group]


def _union_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted distinct ids of a and b (each sorted): a presence table over their range (a run's blocks
    are nearby), else np.union1d."""
    if a.size == 0 or b.size == 0:
        return np.union1d(a, b)
    lo, hi = min(int(a[0]), int(b[0])), max(int(a[-1]), int(b[-1]))
    if hi - lo > 4 * (a.size + b.size) + (1 << 16):
        return np.union1d(a, b)
    present = np.zeros(hi - lo + 1, bool)
    present[a - lo] = True
    present[b - lo] = True
    return np.flatnonzero(present) + lo


def _overlap_pair(sp: np.ndarray, a: int, b: int, unions: dict | None = None) -> np.ndarray:
    unions = {} if unions is None else unions
    ka, loa, hia = _block_union(sp, a, unions)
    kb, lob, hib = _block_union(sp, b, unions)
    blocks = _union_ids(ka, kb)
    out = np.zeros(blocks.size, OVERLAP_DTYPE)
    out["block"], out["group_a"], out["group_b"] = blocks, a, b
    np.add.at(out["a_ns"], np.searchsorted(blocks, ka), hia - loa)
    np.add.at(out["b_ns"], np.searchsorted(blocks, kb), hib - lob)
    out["both_ns"] = intersection_length(ka, loa, hia, kb, lob, hib, blocks)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["a_overlapped"] = np.where(out["a_ns"] > 0, out["both_ns"] / out["a_ns"], np.nan)
        out["b_overlapped"] = np.where(out["b_ns"] > 0, out["both_ns"] / out["b_ns"], np.nan)
    return out


def overlap_summary(per_block: np.ndarray) -> list[dict]:
    """Per group pair: time-weighted overlap (sum both / sum a) and the spread of per-block fractions."""
    out = []
    for a, b in sorted({(int(r["group_a"]), int(r["group_b"])) for r in per_block[["group_a", "group_b"]]}):
        m = per_block[(per_block["group_a"] == a) & (per_block["group_b"] == b)]
        sa, sb, both = int(m["a_ns"].sum()), int(m["b_ns"].sum()), int(m["both_ns"].sum())
        fa = m["a_overlapped"][~np.isnan(m["a_overlapped"])]
        fb = m["b_overlapped"][~np.isnan(m["b_overlapped"])]
        out.append(
            {
                "group_a": a,
                "group_b": b,
                "blocks": int(m.size),
                "a_overlapped": both / sa if sa else float("nan"),
                "b_overlapped": both / sb if sb else float("nan"),
                "a_overlapped_min": float(fa.min()) if fa.size else float("nan"),
                "a_overlapped_p50": float(np.median(fa)) if fa.size else float("nan"),
                "b_overlapped_min": float(fb.min()) if fb.size else float("nan"),
                "b_overlapped_p50": float(np.median(fb)) if fb.size else float("nan"),
            }
        )
    return out


