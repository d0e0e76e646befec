"""analysis.stats.summarize against numpy computed per (group, event) by brute force."""

import numpy as np
import pytest

from host_decode.analysis.stats import PERCENTILES, summarize


@pytest.mark.parametrize("seed", range(4))
def test_summary_matches_numpy_per_group(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    group = rng.integers(-1, 3, n) if seed % 2 else rng.integers(0, 200_000, n)  # sparse keys: np.unique path
    event = rng.integers(0, 5, n)
    dur = rng.integers(0, 10**9 if seed == 3 else 50, n)  # many ties when small
    out = summarize(group, event, dur)
    keys = sorted(set(zip(group.tolist(), event.tolist())))
    assert [(int(r["group"]), int(r["event"])) for r in out] == keys
    for r, (g, e) in zip(out, keys):
        d = dur[(group == g) & (event == e)]
        assert r["count"] == d.size and r["total_ns"] == d.sum()
        assert r["min_ns"] == d.min() and r["max_ns"] == d.max()
        assert r["mean_ns"] == pytest.approx(d.mean(), rel=1e-12)
        assert r["cv"] == pytest.approx(d.std() / d.mean() if d.mean() > 0 else 0.0, rel=1e-9, abs=1e-12)
        for p in PERCENTILES:
            assert r[f"p{p}_ns"] == pytest.approx(np.percentile(d, p), rel=1e-12, abs=1e-9)


def test_empty_and_single():
    assert summarize(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)).size == 0
    (r,) = summarize(np.array([2]), np.array([7]), np.array([40]))
    assert (r["group"], r["event"], r["count"], r["p50_ns"], r["p99_ns"], r["cv"]) == (2, 7, 1, 40.0, 40.0, 0.0)


@pytest.mark.parametrize("gmin, emin", [(0, 0), (-3, -2), (-1, 7), (5, 900)])
def test_pair_ids_are_exact_when_the_key_arithmetic_wraps(gmin, emin):
    """The (group, event) key is built in place in the narrowest unsigned type, offsets wrapping: the ids
    must still be the pairs' ranks in (group, event) order, whatever the signs of the minimums."""
    from host_decode.analysis.stats import pair_ids

    rng = np.random.default_rng([gmin + 10, emin + 10])
    group = rng.integers(gmin, gmin + 9, 50_000).astype(np.int32)
    event = rng.integers(emin, emin + 3000, 50_000).astype(np.int16)
    ids, key_group, key_event = pair_ids(group, event)
    pairs, expected = np.unique(np.stack([group, event], 1), axis=0, return_inverse=True)
    assert (key_group == pairs[:, 0]).all() and (key_event == pairs[:, 1]).all()
    assert (ids == expected.ravel()).all()


def test_positions_in_a_strided_sorted_column_match_searchsorted():
    from host_decode.core.arrays import positions_in_sorted

    table = np.zeros(100_000, [("event", np.int16), ("lane", np.int32)])
    table["lane"] = np.sort(np.random.default_rng(3).integers(0, 5000, table.size))
    keys = np.array([-7, 0, 1, 2500, 4999, 5000, 10**12], np.int64)
    assert (positions_in_sorted(table["lane"], keys) == np.searchsorted(table["lane"].copy(), keys)).all()


def test_distinct_small_values_match_unique():
    from host_decode.core.arrays import distinct_small

    for n, top in ((0, 1), (1, 1), (17, 5), (2_500_001, 300)):
        column = np.random.default_rng(n).integers(0, top, n).astype(np.int32)
        assert distinct_small(column, chunk=1 << 16).tolist() == np.unique(column).tolist()


def test_chunked_positions_and_durations_match_whole_column_ones():
    from host_decode.core.arrays import positions_of, span_durations
    from host_decode.core.model import SPAN_DTYPE

    rng = np.random.default_rng(5)
    spans = np.zeros(10_001, SPAN_DTYPE)
    spans["event"] = rng.integers(0, 4, spans.size)
    spans["start_ns"] = rng.integers(0, 1 << 40, spans.size)
    spans["end_ns"] = spans["start_ns"] + rng.integers(0, 1 << 20, spans.size)
    for value in (0, 3, 9):  # 9: in no row
        want = np.flatnonzero(spans["event"] == value)
        got = positions_of(spans["event"], value, chunk=7)
        assert got.dtype == np.int32 and got.tolist() == want.tolist()
        mask = spans["event"] == value
        whole = spans["end_ns"][mask] - spans["start_ns"][mask]
        assert span_durations(spans, mask, chunk=7).tolist() == whole.tolist()
        assert span_durations(spans, got, chunk=7).tolist() == whole.tolist()
