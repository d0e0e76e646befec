"""analysis.stats.summarize against numpy on each pair's durations, for both ways it reads percentiles (a
histogram of a narrow range, np.partition of a wide one), few and many pairs, chunk boundaries inside pairs,
and the (start, end) columns of a span table."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.analysis import stats


def expected(group, event, dur):
    rows = []
    for g, e in sorted(set(zip(group.tolist(), event.tolist()))):
        d = dur[(group == g) & (event == e)]
        rows.append((g, e, d.size, int(d.sum()), d.min(), d.max(), *np.percentile(d, stats.PERCENTILES),
                     d.std() / d.mean() if d.mean() > 0 else 0.0))
    return rows


@pytest.mark.parametrize("pairs, spread, n, histograms", [
    (3, 50, 10_000, True), (3, 10**12, 10_000, False), (300, 1000, 50_000, False), (300, 50, 50_000, True),
    (2, 5, 1, True), (1, 10**9, 3, False)])
def test_summary_equals_numpy(pairs, spread, n, histograms):
    rng = np.random.default_rng(pairs + n)
    group = rng.integers(0, pairs, n).astype(np.int32)
    event = rng.integers(0, 2, n).astype(np.int32)
    dur = rng.integers(0, spread, n).astype(np.int64) + 7
    start = rng.integers(0, 1 << 40, n).astype(np.int64)
    assert (stats.pair_histograms(group, event, dur) is not None) == histograms  # the path this case takes
    for given in (dur, (start, start + dur)):
        out = stats.summarize(group, event, given)
        rows = expected(group, event, dur)
        assert out.size == len(rows)
        for r, (g, e, count, total, lo, hi, p50, p90, p95, p99, cv) in zip(out, rows):
            assert (r["group"], r["event"], r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) == (
                g, e, count, total, lo, hi)
            assert r["p50_ns"] == p50 and r["p90_ns"] == p90 and r["p95_ns"] == p95 and r["p99_ns"] == p99
            assert r["cv"] == pytest.approx(cv, rel=1e-9, abs=1e-12)


def test_grouping_crosses_chunks_in_order():
    ids = np.array([2, 0, 1, 0, 2, 2, 1, 0, 0], np.uint8)
    dur = np.arange(ids.size, dtype=np.int64) * 10
    grouped, first = stats.grouped_durations(ids, 3, dur, chunk=2)
    assert first.tolist() == [0, 4, 6, 9]
    assert grouped.tolist() == [10, 30, 70, 80, 20, 60, 0, 40, 50]  # stable within each pair


def _runs(n, rng):
    """Random cut points: runs of rows of every size, some empty."""
    cuts = np.sort(rng.integers(0, n + 1, 6))
    return [slice(a, b) for a, b in zip(np.r_[0, cuts], np.r_[cuts, n])]


@pytest.mark.parametrize("groups, spread, n", [(3, 50, 10_000), (4, 3000, 20_000), (1, 2, 5), (5, 10**9, 2_000),
                                               (2, 20, 0)])
def test_run_summary_equals_summarize_bit_for_bit(groups, spread, n):
    """The writer's runs, in any order, give summarize's rows exactly (every float); a restart forgets what
    came before; where summarize would not take histograms, the result is None (the caller's cue)."""
    rng = np.random.default_rng(groups * 7 + n)
    group = rng.integers(0, groups, n).astype(np.int32)
    event = rng.integers(3, 6, n).astype(np.int64)
    dur = rng.integers(0, spread, n).astype(np.int64) + 11
    seen = stats.RunSummary(n)
    seen.add(group[: n // 2], event[: n // 2] + 1, dur[: n // 2])  # a stream given up part way
    seen.restart()
    runs = _runs(n, rng)
    for rows in reversed(runs):  # any order of runs: the box grows both ways
        seen.add(group[rows], event[rows], dur[rows])
    got = seen.result()
    if n and stats.pair_histograms(group, event, dur) is None:
        assert got is None
        return
    want = stats.summarize(group, event, dur)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_run_summary_is_none_unless_every_span_was_seen_or_a_run_is_spread():
    group, event = np.zeros(1000, np.int32), np.ones(1000, np.int64)
    seen = stats.RunSummary(1000)
    seen.add(group[:999], event[:999], np.arange(999, dtype=np.int64) % 7)
    assert seen.result() is None  # a span missing
    seen.add(group[999:], event[999:], np.array([3], np.int64))
    assert seen.result() is not None
    wide = stats.RunSummary(4)  # one run whose box is large against its rows: counted the other way
    wide.add(np.zeros(4, np.int32), np.ones(4, np.int64), np.array([0, 1, 2, 10**6], np.int64))
    assert wide.result() is None
