"""The region analyses (host_decode.analysis: intervals, bubbles, overlap, launch, regions) against
hand-computed values on small traces, and against a brute-force per-nanosecond model on random ones."""

import json

import numpy as np
import pytest

from host_decode.analysis import bubbles as bub
from host_decode.analysis import histograms as hi
from host_decode.analysis import intervals as iv
from host_decode.analysis import launch as la
from host_decode.analysis import overlap as olap
from host_decode.analysis import regions as an
from host_decode.analysis.sessions import trace_from_spans
from host_decode.core.model import Names

EV1, EV2, EV3, EV4 = 1, 2, 3, 4


def small_trace():
    """2 groups. Block 0 on SM 3: lane 0 (g0) window [5,70], ev1 [10,20], ev2 [15,30] (overlapping, not
    nested), ev1 [40,50]; lane 1 (g1) ev3 [20,45] with ev4 [25,35] nested. Block 1 on SM 3: lane 2 (g0) ev1
    [100,130]; lane 3 (g1) window [100,140] and no region. Block 2 on SM 5: lane 4 (g0) ev1 [0,200]."""
    spans = [
        (0, 0, EV1, 10, 20),
        (0, 0, EV2, 15, 30),
        (0, 0, EV1, 40, 50),
        (0, 1, EV3, 20, 45),
        (0, 1, EV4, 25, 35, 1),
        (1, 0, EV1, 100, 130),
        (2, 0, EV1, 0, 200),
    ]
    t = trace_from_spans(
        spans,
        num_groups=2,
        num_blocks=3,
        names=Names({1: "load", 2: "mma", 3: "epi", 4: "st"}, {0: "producer", 1: "consumer"}),
    )
    # widen lane 0's window and add lane 3 (records but no region): what decode gives for anchors/finalize
    lanes = t.lanes
    lanes["first_ns"][lanes["lane"] == 0] = 5
    lanes["last_ns"][lanes["lane"] == 0] = 70
    extra = lanes[:1].copy()
    extra["lane"], extra["block"], extra["group"], extra["first_ns"], extra["last_ns"] = 3, 1, 1, 100, 140
    lanes = np.concatenate([lanes, extra])
    lanes = lanes[np.argsort(lanes["lane"])]
    lanes["sm"] = np.array([3, 3, 5])[lanes["block"]]
    t.lanes = lanes
    return t


def test_union_intervals_merges_overlaps_and_touching_per_key():
    k, lo, hi, member = iv.union_intervals([0, 0, 0, 1, 0], [10, 15, 30, 0, 40], [20, 30, 35, 5, 50])
    assert k.tolist() == [0, 0, 1]
    assert lo.tolist() == [10, 40, 0]
    assert hi.tolist() == [35, 50, 5]
    assert member.tolist() == [0, 0, 0, 2, 1]


def test_gaps_and_bubbles_hand_computed():
    t = small_trace()
    gaps = bub.lane_gaps(t)
    rows = [
        (int(g["lane"]), int(g["start_ns"]), int(g["end_ns"]), int(g["prev_event"]), int(g["next_event"])) for g in gaps
    ]
    assert rows == [
        (0, 5, 10, -1, EV1),  # lead-in
        (0, 30, 40, EV2, EV1),  # mma ended last (at 30) before the gap
        (0, 50, 70, EV1, -1),  # tail
        (3, 100, 140, -1, -1),  # lane without regions: all bubble
    ]
    b = bub.lane_bubbles(t, gaps)
    by_lane = {int(r["lane"]): r for r in b}
    assert by_lane[0]["window_ns"] == 65 and by_lane[0]["busy_ns"] == 30 and by_lane[0]["bubble_ns"] == 35
    assert by_lane[0]["gaps"] == 3 and by_lane[0]["largest_gap_ns"] == 20
    assert by_lane[0]["bubble_frac"] == pytest.approx(35 / 65)
    assert by_lane[1]["bubble_ns"] == 0 and by_lane[1]["busy_ns"] == 25  # nested ev4 counted once
    assert by_lane[3]["bubble_frac"] == 1.0
    top = bub.largest_gaps(gaps, 2)
    assert top["dur_ns"].tolist() == [40, 20]


def test_overlap_hand_computed():
    t = small_trace()
    ov = olap.group_overlap(t)
    b0 = ov[ov["block"] == 0][0]
    # U(producer) = [10,30]+[40,50] = 30; U(consumer) = [20,45] = 25; both = [20,30]+[40,45] = 15
    assert (b0["a_ns"], b0["b_ns"], b0["both_ns"]) == (30, 25, 15)
    assert b0["a_overlapped"] == pytest.approx(0.5) and b0["b_overlapped"] == pytest.approx(0.6)
    b1 = ov[ov["block"] == 1][0]
    assert b1["a_ns"] == 30 and b1["both_ns"] == 0 and np.isnan(b1["b_overlapped"])
    (s,) = olap.overlap_summary(ov)
    assert s["a_overlapped"] == pytest.approx(15 / 260)  # block 2's 200 ns of producer has no consumer
    assert s["b_overlapped"] == pytest.approx(15 / 25)


def test_sm_table_tail_imbalance_hand_computed():
    t = small_trace()
    blocks = la.block_intervals(t)
    assert blocks[["start_ns", "end_ns", "sm"]].tolist() == [(5, 70, 3), (100, 140, 3), (0, 200, 5)]
    sms, s = la.sm_table(t, blocks)
    assert sms["busy_ns"].tolist() == [105, 200]
    assert sms["blocks"].tolist() == [2, 1] and sms["waves"].tolist() == [2, 1]
    assert s["tail_ns"] == 60 and s["tail_frac"] == pytest.approx(0.3)
    assert s["imbalance_block_end"] == pytest.approx(200 / np.mean([70, 140, 200]))
    assert s["imbalance_sm_busy"] == pytest.approx(200 / 152.5)
    assert s["tail_sm_utilization"] == pytest.approx(60 / 120)


def test_concurrent_blocks_on_one_sm():
    spans = [(0, 0, 1, 0, 10), (1, 0, 1, 5, 15), (2, 0, 1, 15, 20)]  # touching at 15 is not concurrent
    t = trace_from_spans(spans, num_groups=1, sm_of_block={0: 0, 1: 0, 2: 0})
    sms, s = la.sm_table(t)
    assert sms["max_resident"].tolist() == [2]
    assert sms["waves"].tolist() == [2]
    assert sms["busy_ns"].tolist() == [20]


def test_critical_lanes_hand_computed():
    t = small_trace()
    c = la.critical_lanes(t)
    assert c[["block", "lane", "group", "slack_ns", "last_event", "last_event_end_ns"]].tolist() == [
        (0, 0, 0, 25, EV1, 50),
        (1, 3, 1, 10, -1, -1),
        (2, 4, 0, 0, EV1, 200),
    ]
    r = la.critical_regions(t, c)
    top = r[0]
    assert (top["group"], top["event"], top["spans"], top["total_ns"]) == (0, EV1, 3, 220)
    assert top["share"] == pytest.approx(220 / (65 + 40 + 200))


def test_analyze_is_json_ready():
    import json

    out = an.analyze(small_trace())
    text = json.dumps(out)
    assert '"producer"' in text and out["critical"]["blocks_by_group"] == {"producer": 2, "consumer": 1}
    assert out["bubbles"]["largest_gaps"][0]["dur_ns"] == 40


def test_histogram_counts_every_span():
    t = small_trace()
    counts, edges = hi.region_histogram(t, 0, EV1, bins=4)
    assert counts.sum() == 4 and edges[0] == 10 and edges[-1] == 200


def test_random_traces_match_per_ns_model():
    """Bubbles and overlap against a boolean per-ns coverage model."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        blocks = rng.integers(0, 3, n)
        groups = rng.integers(0, 2, n)
        start = rng.integers(0, 90, n)
        end = start + rng.integers(0, 15, n)
        t = trace_from_spans(list(zip(blocks, groups, rng.integers(0, 3, n), start, end)), num_groups=2, num_blocks=3)
        b = bub.lane_bubbles(t)
        for lane_row in b:
            m = t.spans["lane"] == lane_row["lane"]
            cov = np.zeros(120, bool)
            for s, e in zip(t.spans["start_ns"][m], t.spans["end_ns"][m]):
                cov[s:e] = True
            assert lane_row["busy_ns"] == cov.sum()
        ov = olap.group_overlap(t, pairs=[(0, 1)])
        for r in ov:
            cov = np.zeros((2, 120), bool)
            m = t.spans["block"] == r["block"]
            for g, s, e in zip(t.spans["group"][m], t.spans["start_ns"][m], t.spans["end_ns"][m]):
                cov[g, s:e] = True
            assert (r["a_ns"], r["b_ns"], r["both_ns"]) == (cov[0].sum(), cov[1].sum(), (cov[0] & cov[1]).sum())


def test_empty_trace_gives_empty_tables_not_errors():
    t = trace_from_spans([], num_groups=2, num_blocks=1)
    out = an.analyze(t)
    assert out["bubbles"]["lanes"] == 0 and out["overlap"] == [] and out["critical"]["regions"] == []
    assert bub.lane_gaps(t).size == 0 and la.critical_lanes(t).size == 0


def test_session_launch_numbers_are_per_launch_medians():
    from host_decode.analysis.sessions import concat, parts_from_traces

    # launch A: block ends 100, 200 (tail 50: median 150); launch B: ends 100, 400 (tail 150: median 250)
    a = trace_from_spans([(0, 0, 1, 0, 100), (1, 0, 1, 0, 200)], num_groups=1, sm_of_block={0: 0, 1: 1}, absolute=True)
    b = trace_from_spans(
        [(0, 0, 1, 10_000, 10_100), (1, 0, 1, 10_000, 10_400)], num_groups=1, sm_of_block={0: 0, 1: 1}, absolute=True
    )
    s = la.launch_summary(concat(parts_from_traces([a, b])))
    assert [d["tail_ns"] for d in s["per_launch"]] == [50, 150]
    assert s["tail_ns"] == 100 and s["launches"] == 2
    assert s["launch_ns"] == pytest.approx((200 + 400) / 2)


@pytest.mark.parametrize("seed", range(3))
def test_runs_change_nothing(monkeypatch, seed):
    # the analyses go run by run (whole blocks); runs of a few spans give the same tables as one run,
    # also for a span table not in lane order
    rng = np.random.default_rng(seed)
    rows = []
    for lane in range(24):
        if lane % 7 == 3:
            continue  # lanes without spans
        t = int(rng.integers(0, 500))
        for _ in range(int(rng.integers(1, 9))):
            d = int(rng.integers(1, 80))
            rows.append((lane // 3, lane % 3, int(rng.integers(0, 3)), t, t + d))
            t += d + int(rng.integers(-20, 60))  # overlaps and gaps
    trace = trace_from_spans(rows, num_groups=3)
    if seed == 2:
        trace.spans = trace.spans[rng.permutation(trace.spans.size)]
    whole = (bub.lane_gaps(trace), olap.group_overlap(trace), an.analyze(trace))
    monkeypatch.setattr(iv, "CHUNK_SPANS", 5)
    assert len(list(iv.block_runs(trace))) > 3
    runs = (bub.lane_gaps(trace), olap.group_overlap(trace), an.analyze(trace))
    assert whole[0].tobytes() == runs[0].tobytes()
    assert np.array_equal(whole[1], runs[1], equal_nan=False) or whole[1].tobytes() == runs[1].tobytes()
    assert json.dumps(whole[2], sort_keys=True, default=str) == json.dumps(runs[2], sort_keys=True, default=str)
