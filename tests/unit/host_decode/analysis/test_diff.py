"""host_decode.analysis.diff: statistics checked against hand-computed / reference values, verdicts, and the
`ikp diff --fail-above` exit code on real decoded captures."""

import math

import numpy as np
import pytest

from host_decode.analysis import diff
from host_decode.analysis.sessions import trace_from_spans
from host_decode.cli import main
from host_decode.core.model import Names


def test_welch_matches_reference_values():
    # reference values: Welch's t test (unequal variances) computed independently (scipy.stats.ttest_ind)
    w = diff.welch(np.array([1, 2, 3, 4.0]), np.array([3, 4, 5, 6, 7.0]))
    assert w["t"] == pytest.approx(2.6111648393354674, rel=1e-12)
    assert w["df"] == pytest.approx(6.980769230769231, rel=1e-12)
    assert w["p"] == pytest.approx(0.03493878235996401, rel=1e-9)
    assert w["ci"] == pytest.approx((0.23477971824647392, 4.7652202817535265), rel=1e-9)


def test_t_distribution_helpers():
    assert diff.t_two_sided_p(2.0, 10) == pytest.approx(0.07338803477074037, rel=1e-10)
    assert diff.t_quantile(0.975, 10) == pytest.approx(2.228138851986274, rel=1e-9)
    assert diff.t_two_sided_p(1.959963984540054, 1e7) == pytest.approx(0.05, rel=1e-5)  # ~normal
    assert diff.t_two_sided_p(0.0, 5) == pytest.approx(1.0)


def test_mann_whitney_reference_values():
    # hand: U_a = 0, n = 6, var = 3*3/12*7 = 5.25, z = (4.5 - 0.5)/sqrt(5.25), p = erfc(z/sqrt 2)
    p = diff.mann_whitney_p(np.array([1, 2, 3.0]), np.array([4, 5, 6.0]))
    assert p == pytest.approx(math.erfc(4 / math.sqrt(5.25) / math.sqrt(2)), rel=1e-12)
    # with ties (scipy.stats.mannwhitneyu, asymptotic, continuity correction)
    p = diff.mann_whitney_p(np.array([1, 1, 2, 2, 3, 5.0]), np.array([2, 3, 3, 4, 4, 6, 7.0]))
    assert p == pytest.approx(0.07017791923360657, rel=1e-9)


def _trace(durations_by_region: dict, seed=0):
    rows = []
    names = Names({1: "load", 2: "mma", 3: "epi"}, {0: "producer", 1: "consumer"})
    for (group, event), durs in durations_by_region.items():
        t = 0
        for i, d in enumerate(durs):
            rows.append((i % 8, group, event, t, t + int(d)))
            t += int(d) + 10
    return trace_from_spans(rows, num_groups=2, num_blocks=8, names=names)


def test_compare_verdicts():
    rng = np.random.default_rng(1)
    base = rng.normal(100, 2, 400).round() * 10  # x1.1 stays integral
    a = _trace({(0, 1): base, (1, 2): base, (1, 3): base[:50]})
    b = _trace({(0, 1): base * 1.10, (1, 2): rng.permutation(base), (0, 3): base[:50]})
    rows = {(r["group"], r["event"]): r for r in diff.compare(a, b)}
    load = rows[("producer", "load")]
    assert load["status"] == "slower" and load["delta_pct"] == pytest.approx(10.0, abs=0.01)
    assert load["ci_low_pct"] < 10 < load["ci_high_pct"]
    assert rows[("consumer", "mma")]["status"] == "same" and rows[("consumer", "mma")]["delta_pct"] == pytest.approx(0)
    assert rows[("consumer", "epi")]["status"] == "only_a"
    assert rows[("producer", "epi")]["status"] == "only_b"
    bad = diff.regressions(list(rows.values()), 5.0)
    assert [(r["group"], r["event"]) for r in bad] == [("producer", "load")]
    assert diff.regressions(list(rows.values()), 15.0) == []


def test_small_noisy_delta_is_not_significant():
    a = _trace({(0, 1): [100, 300, 120, 280]})
    b = _trace({(0, 1): [110, 310, 130, 290]})
    (r,) = diff.compare(a, b)
    assert r["status"] == "same" and r["delta_pct"] == pytest.approx(5.0)


def test_lane_unit_averages_per_lane():
    a = _trace({(0, 1): [100] * 16})
    s = diff.region_samples(a, unit="lane")
    assert s[("producer", "load")].tolist() == [100.0] * 8  # 8 lanes of group 0, each mean 100


def _save(tmp_path, name, scale):
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E, F

    rng = np.random.default_rng(3)
    bb = BufferBuilder(num_blocks=8, num_groups=1, records_per_lane=130)
    for lane in range(8):
        t = 5000
        for _ in range(64):
            d = int(rng.integers(900, 1100) * scale)
            bb.put(lane, t, 1, B).put(lane, t + d, 1, E)
            t += d + 50
        bb.put(lane, t, lane, F)
    return str(save_capture(tmp_path / name, bb.buf, {"events": {"1": "mma"}}, kernel="toy"))


def test_cli_fail_above_exit_code(tmp_path, capsys):
    a = _save(tmp_path, "a.npy", 1.0)
    b = _save(tmp_path, "b.npy", 1.2)
    assert main(["diff", a, b, "--fail-above", "10", "--format", "json"]) == 1
    out = capsys.readouterr()
    assert '"slower"' in out.out and "slower than +10.0%" in out.err
    assert main(["diff", a, b, "--fail-above", "25"]) == 0
    assert main(["diff", a, a, "--fail-above", "0"]) == 0
    assert main(["diff", a]) == 2  # one path: a clear usage error


def test_regions_whose_names_repeat_are_compared_apart():
    # events 1 and 2 both named "x": each keeps its own samples (before, the last id replaced the first)
    names = Names({1: "x", 2: "x"}, {0: "producer"})
    rows = [(0, 0, 1, 0, 100), (0, 0, 2, 200, 1200), (1, 0, 1, 0, 110), (1, 0, 2, 200, 1210)]
    t = trace_from_spans(rows, num_groups=1, num_blocks=2, names=names)
    samples = diff.region_samples(t)
    assert {k: v.tolist() for k, v in samples.items()} == {
        ("producer", "x (event 1)"): [100.0, 110.0],
        ("producer", "x (event 2)"): [1000.0, 1010.0],
    }
    got = {r["event"]: (r["n_a"], r["mean_a"]) for r in diff.compare(t, t)}
    assert got == {"x (event 1)": (2, 105.0), "x (event 2)": (2, 1005.0)}
    # an unnamed id whose default name ("event_2") another id already has
    clash = trace_from_spans(rows, num_groups=1, num_blocks=2, names=Names({1: "event_2"}))
    assert sorted(diff.region_samples(clash)) == [("group_0", "event_2 (event 1)"), ("group_0", "event_2 (event 2)")]
