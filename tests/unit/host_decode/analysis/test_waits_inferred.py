"""Level "waits" (no commit, no release traced; only waits that blocked are recorded): each wait's bound is
a record of the signalling side that provably precedes the signal in program order. Expected values worked out
by hand in the comments (ticks of 32 ns); the random rings check every bound against the protocol's truth."""

import numpy as np
import pytest

from host_decode.analysis import pipeline_match as pm
from host_decode.analysis import pipelines as pl
from tests.support.pipeline_capture import TICK, PipelineCapture, pipeline_entry, simulate_pipeline

IDS = {"acquire": 10, "wait": 20}
PRODUCER, C1, C2 = 0, 1, 2


def rows(trace):
    """{(group, op, stage, start tick): (status, src group, src tick)} of every wait region."""
    pa = pl.analyze_pipelines(trace)
    t0 = PipelineCapture(1, 1).ns(0)

    def tick(x):
        return None if x < 0 else (int(x) - t0) // TICK

    return pa, {(int(r["group"]), pm.WAIT_OPS[r["op"]], int(r["stage"]), tick(r["start_ns"])):
                (pm.STATUSES[r["status"]], None if r["src_lane"] < 0 else int(r["src_lane"]) % trace.num_groups,
                 tick(r["src_ns"])) for r in pa.waits}


def gemm_like(anchored=True):
    """Two stages, a producer and two consumers, as a persistent GEMM at level waits: the producer's first
    acquires of each stage pass (uses 0 and 1, not recorded), the consumers block on the first fill of stage 0
    and on use 4, every other consumer wait passes (not recorded). Every lane starts at tick 0 (its anchors).
        use n  stage  producer acquire  commit  data lands  releases (c1, c2)
        0      0      (1, 1) passes     2       12          19, 20     c1 waits 1..12, c2 2..12 (blocked)
        1      1      (3, 3) passes     4       14          29, 30
        2      0      (5, 20)           21      33          39, 38     freed by the releases of use 0
        3      1      (22, 30)          31      36          45, 44     freed by the releases of use 1
        4      0      (32, 39)          40      50          55, 56     c1 waits 46..50, c2 44..50 (blocked)
    """
    cap = PipelineCapture(1, 3, anchored=anchored, anchor_tick=0 if anchored else None)
    for s, a, z in ((0, 5, 20), (1, 22, 30), (0, 32, 39)):
        cap.region(0, PRODUCER, IDS["acquire"] + s, a, z)
    for group, spans in ((C1, ((1, 12), (46, 50))), (C2, ((2, 12), (44, 50)))):
        for a, z in spans:
            cap.region(0, group, IDS["wait"], a, z)
    return cap.trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")], pipeline_level="waits")


def test_level_waits_bounds_by_time_and_stage_rotation():
    """Consumer waits: the latest producer acquire of the stage that ended before the wait ended (an acquire of
    a later use of the stage needs this consumer's release first); the first fill of a stage, whose acquire
    passed unrecorded, is bounded by the producer's anchor (written at the kernel's entry, before any call).
    Producer acquires: the latest consumer wait that provably came before the releases that freed the stage:
    of the acquire's own stage ending before it ended, or of another stage ending before the producer's latest
    acquire of that stage (itself no later than this acquire) ended, which makes the wait at least a whole
    rotation older than this acquire's use."""
    pa, got = rows(gemm_like())
    assert got[(C1, "wait", 0, 1)] == ("inferred", PRODUCER, 0)  # first fill: the producer's anchor
    assert got[(C2, "wait", 0, 2)] == ("inferred", PRODUCER, 0)
    assert got[(C1, "wait", 0, 46)] == ("inferred", PRODUCER, 39)  # use 4's own acquire (32, 39)
    assert got[(C2, "wait", 0, 44)] == ("inferred", PRODUCER, 39)
    # use 2 (stage 0): the consumers' waits of use 0 ended at 12, before this acquire ended (20)
    assert got[(PRODUCER, "acquire", 0, 5)][0::2] == ("inferred", 12)
    # use 3 (stage 1): no consumer wait of stage 1 was recorded; the stage-0 waits ended (12) before the
    # producer's stage-0 acquire (5, 20) ended, so they belong to use 0 or earlier: they precede the releases of
    # use 1 that this acquire waited for
    assert got[(PRODUCER, "acquire", 1, 22)][0::2] == ("inferred", 12)
    # use 4 (stage 0): the stage-0 waits ending before 39 are use 0's (the waits of use 4 end at 50)
    assert got[(PRODUCER, "acquire", 0, 32)][0::2] == ("inferred", 12)
    assert {got[k][1] for k in got if k[1] == "acquire"} <= {C1, C2}
    assert pa.unmatched() == {}
    flows = pa.flows()
    assert flows.size == 7 and (flows["src_ns"] <= flows["dst_ns"]).all()


def test_without_anchors_a_first_fill_has_no_bound():
    """The same capture without anchor records: nothing of the producer is known to precede its first commits."""
    pa, got = rows(gemm_like(anchored=False))
    assert got[(C1, "wait", 0, 1)] == ("bound_not_recorded", None, None)
    assert got[(C1, "wait", 0, 46)] == ("inferred", PRODUCER, 39)
    assert pa.unmatched() == {"bound_not_recorded": 2}


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("blocked_only", [True, False])
def test_inferred_bounds_precede_their_signals_on_random_rings(seed, blocked_only):
    """Rings run by the protocol (tests/support/pipeline_capture.py), every lane anchored at tick 0: each
    consumer wait is inferred from the producer, no later than its use's commit; each producer acquire is a first
    use exactly when its use is a stage's first, else inferred from a consumer no later than the latest release
    that freed its stage (the rule's bound, computed one acquire at a time below), or bound_not_recorded when the
    rule finds none (with only blocked calls recorded, the sidecar's passing_waits false, a recorded acquire is
    never a first use)."""
    rng = np.random.default_rng(seed)
    stages, consumers = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    cap, truth, ids, known = simulate_pipeline(rng, stages, 48, consumers, blocked_only=blocked_only, anchor_tick=0,
                                               details=True)
    trace = cap.trace([pipeline_entry("K", {op: ids[op] for op in IDS}, stages, op_type="TmaLoad")],
                      pipeline_level="waits", pipeline_options={"passing_waits": not blocked_only})
    pa = pl.analyze_pipelines(trace)
    assert pa.waits.size == len(known["use"])
    t0 = cap.ns(0)
    waits, acquires = pa.waits[pa.waits["op"] == pm.WAIT], pa.waits[pa.waits["op"] == pm.ACQ]

    def rotation_bound(a):
        """The rule, one acquire at a time: the latest consumer wait of a stage s' that ended before the latest
        acquire of s' at or before `a` ended."""
        best = -1
        for s2 in range(stages):
            mine = acquires[(acquires["stage"] == s2) & (acquires["end_ns"] <= a["end_ns"])]
            if mine.size:
                ends = waits["end_ns"][(waits["stage"] == s2) & (waits["end_ns"] < mine["end_ns"].max())]
                best = max(best, int(ends.max(initial=-1)))
        return best

    for r in pa.waits:
        status = pm.STATUSES[r["status"]]
        s, k = known["use"][(int(r["group"]), int(r["stage"]), (int(r["start_ns"]) - t0) // TICK)]
        if r["op"] == pm.WAIT:
            assert status == "inferred" and r["src_lane"] % trace.num_groups == PRODUCER, r
            assert r["src_ns"] <= cap.ns(truth[(s, k)][0]), r  # no later than the commit that released it
        elif k == 0:
            assert status == "first_use", r
        elif status == "inferred":
            assert r["src_lane"] % trace.num_groups != PRODUCER, r
            assert r["src_ns"] <= cap.ns(known["release"][(s, k - 1)]), r
            assert r["src_ns"] == rotation_bound(r)
        else:
            assert status == "bound_not_recorded" and rotation_bound(r) < 0, r
