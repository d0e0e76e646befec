"""Pipeline matching on hand-built captures whose dependencies are known: every flow endpoint, status and
waits number below was worked out by hand (the timelines are drawn in the comments, in ticks of 32 ns)."""

import json

import numpy as np
import pytest

from host_decode.analysis import pipeline_match as pm
from host_decode.analysis import pipeline_meta as meta
from host_decode.analysis import pipelines as pl
from host_decode.analysis import waits as ws
from host_decode.core.decoder import decode
from host_decode.core.model import FLOW_DTYPE
from host_decode.load.capture import save_capture
from tests.support.waits import (
    ACQ,
    COMMIT,
    GROUPS,
    MMA0,
    MMA1,
    PRODUCER,
    RELEASE,
    TICK,
    WAIT,
    Capture,
    fa_like,
    k_pipeline,
)


def table(trace, pa):
    """(group, op, stage, k, start, end, status, src group, src tick, kind) in ticks from the trace start."""
    w = pa.waits
    t0 = trace.start_ns
    tick = lambda x: None if x < 0 else (x - t0) // TICK  # noqa: E731
    return sorted(
        (
            int(r["group"]),
            pm.WAIT_OPS[r["op"]],
            int(r["stage"]),
            int(r["occurrence"]),
            tick(r["start_ns"]),
            tick(r["end_ns"]),
            pm.STATUSES[r["status"]],
            None if r["src_lane"] < 0 else int(r["src_lane"]) % trace.num_groups,
            tick(r["src_ns"]),
            None if r["kind"] < 0 else pm.FLOW_KINDS[r["kind"]],
        )
        for r in w
    )


EXPECTED_SIGNALS = sorted(
    [
        (0, "acquire", 0, 0, 0, 1, "first_use", None, None, None),
        (0, "acquire", 1, 0, 3, 4, "first_use", None, None, None),
        (0, "acquire", 0, 1, 6, 20, "matched", MMA1, 20, "release->acquire"),
        (0, "acquire", 1, 1, 22, 30, "matched", MMA1, 30, "release->acquire"),
        (1, "wait", 0, 0, 1, 3, "matched", PRODUCER, 2, "commit->wait"),
        (1, "wait", 1, 0, 11, 12, "matched", PRODUCER, 5, "commit->wait"),
        (1, "wait", 0, 1, 19, 22, "matched", PRODUCER, 21, "commit->wait"),
        (1, "wait", 1, 1, 26, 35, "matched", PRODUCER, 34, "commit->wait"),
        (2, "wait", 0, 0, 0, 3, "matched", PRODUCER, 2, "commit->wait"),
        (2, "wait", 1, 0, 21, 22, "matched", PRODUCER, 5, "commit->wait"),
        (2, "wait", 0, 1, 31, 32, "matched", PRODUCER, 21, "commit->wait"),
        (2, "wait", 1, 1, 33, 35, "matched", PRODUCER, 34, "commit->wait"),
    ]
)


def test_signals_every_wait_matched_by_hand():
    trace = fa_like().trace([k_pipeline()])
    pa = pl.analyze_pipelines(trace)
    assert table(trace, pa) == EXPECTED_SIGNALS
    assert pa.timer_step_ns == 32 and pa.timer_step_source == "data"
    assert pa.unmatched() == {}
    flows = pa.flows()
    assert flows.dtype == FLOW_DTYPE and flows.size == 10
    t0 = trace.start_ns
    got = sorted(
        (
            (
                int(f["src_lane"]),
                (int(f["src_ns"]) - t0) // TICK,
                int(f["dst_lane"]),
                (int(f["dst_ns"]) - t0) // TICK,
                pa.flow_kinds[f["kind"]],
            )
            for f in flows
        )
    )
    want = sorted(
        [(2, 20, 0, 20, "release->acquire"), (2, 30, 0, 30, "release->acquire")]
        + [
            (0, s, g, e, "commit->wait")
            for g, s, e in [
                (1, 2, 3),
                (1, 5, 12),
                (1, 21, 22),
                (1, 34, 35),
                (2, 2, 3),
                (2, 5, 22),
                (2, 21, 32),
                (2, 34, 35),
            ]
        ]
    )
    assert got == want
    assert pa.flows(blocked_only=True).size == 7  # waits longer than one tick: acq 14, 8; mma0 2, 3, 9; mma1 3, 2


def test_stage_counter_by_hand():
    trace = fa_like().trace([k_pipeline()])
    (c,) = pl.analyze_pipelines(trace).counters
    assert (c.name, c.unit, c.block) == ("K stages full", "stages", 0)
    # fills: s0k0@2 s1k0@5 s0k1@21 s1k1@34; frees (last consumer): s0k0@20 s1k0@30 s0k1@33 s1k1@45
    assert ((c.times_ns - trace.start_ns) // TICK).tolist() == [2, 5, 20, 21, 30, 33, 34, 45]
    assert c.values.tolist() == [1, 2, 1, 2, 1, 0, 1, 0]


def test_waits_numbers_by_hand():
    trace = fa_like().trace([k_pipeline()])
    s = ws.waits_summary(trace)
    rows = {(r["role"], r["op"]): r for r in s["rows"]}
    prod = rows[("producer", "acquire")]  # durations 1, 1, 14, 8 ticks
    assert (prod["waits"], prod["blocked"], prod["passed"], prod["total_ns"]) == (4, 2, 2, 24 * TICK)
    assert (prod["uses"], prod["not_recorded"]) == (4, 0)  # 4 commits
    assert prod["p50_ns"] == pytest.approx(4.5 * TICK) and prod["p99_ns"] == pytest.approx((8 + 0.97 * 6) * TICK)
    assert prod["max_ns"] == 14 * TICK and prod["share_of_role_time"] == pytest.approx(24 / 34)
    assert prod["waited_on"] == {"mma1": 2} and prod["status"] == {"first_use": 2, "matched": 2}
    m0 = rows[("mma0", "wait")]  # 2, 1, 3, 9
    assert (m0["waits"], m0["blocked"], m0["total_ns"], m0["waited_on"]) == (4, 3, 15 * TICK, {"producer": 3})
    assert m0["share_of_role_time"] == pytest.approx(15 / 39)
    m1 = rows[("mma1", "wait")]  # 3, 1, 1, 2
    assert (m1["waits"], m1["blocked"], m1["total_ns"], m1["waited_on"]) == (4, 2, 7 * TICK, {"producer": 2})
    assert m1["share_of_role_time"] == pytest.approx(7 / 45) and m1["channel"] == "K"
    roles = {r["role"]: r for r in s["roles"]}
    assert roles["producer"]["blocked_ns"] == 22 * TICK and roles["mma0"]["blocked_ns"] == 14 * TICK
    assert s["status"]["matched"] == 10 and s["status"]["first_use"] == 2 and s["flows"] == 10


def test_critical_path_by_hand():
    """mma1 ends last (45). Its last blocked wait w1 33-35 was released by the producer's c1@34: mma1 works
    35..45 (10), waits on K 34..35 (1); producer at 34: acq1 22-30 freed by mma1's r1@30: producer works
    30..34 (4); mma1 at 30: its earlier blocked wait w0 0-3 (c0@2): works 3..30 (27), waits 2..3 (1);
    producer at 2: no earlier blocked wait: works 0..2 (2). 10+1+4+27+1+2 = 45."""
    trace = fa_like().trace([k_pipeline()])
    pa = pl.analyze_pipelines(trace)
    (path,) = ws.critical_paths(trace, pa)
    t0 = trace.start_ns
    segs = [(w, lane, (a - t0) // TICK, (z - t0) // TICK, c, src, st) for w, lane, a, z, c, src, st in path["segments"]]
    matched = pm.STATUSES.index("matched")
    assert segs == [
        ("work", 0, 0, 2, -1, -1, -1),
        ("wait", 2, 2, 3, 0, 0, matched),
        ("work", 2, 3, 30, -1, -1, -1),
        ("work", 0, 30, 34, -1, -1, -1),
        ("wait", 2, 34, 35, 0, 0, matched),
        ("work", 2, 35, 45, -1, -1, -1),
    ]
    summary = ws.critical_path_summary(trace, pa)
    shares = {(r["what"], r["role"], r["channel"], r["on"]): r["ns"] for r in summary["segments"]}
    assert shares == {
        ("work", "mma1", None, None): 37 * TICK,
        ("work", "producer", None, None): 6 * TICK,
        ("wait", "mma1", "K", "producer"): 2 * TICK,
    }
    assert summary["blocks"] == 1 and summary["mean_path_ns"] == 45 * TICK


def test_wrap_gives_the_same_story():
    """The same capture placed so that the 32-bit timer wraps in the middle (at tick 16)."""
    plain = fa_like().trace([k_pipeline()])
    wrapped = fa_like(base_ns=2**32 - 16 * TICK).trace([k_pipeline()])
    raw = (fa_like(base_ns=2**32 - 16 * TICK).buffer()[1:] >> np.uint64(32)) & np.uint64(0xFFFF_FFFF)
    assert raw[raw > 0].min() < 64 * TICK  # records before and after the wrap
    pa = pl.analyze_pipelines(wrapped)
    assert table(wrapped, pa) == EXPECTED_SIGNALS
    assert pl.analyze_pipelines(plain).counters[0].values.tolist() == pa.counters[0].values.tolist()


def test_level_waits_inferred_from_program_order():
    """No commit / release instants: a consumer's k-th wait is bounded by the producer's k-th acquire end,
    the producer's (k+1)-th acquire by the consumers' latest k-th wait end."""
    trace = fa_like(signals=False).trace([k_pipeline(("acquire", "wait"))])
    pa = pl.analyze_pipelines(trace)
    rows = table(trace, pa)
    acq = [r for r in rows if r[1] == "acquire"]
    assert [r[6:] for r in acq if r[6] == "first_use"] == [("first_use", None, None, None)] * 2
    # acq0 k1 <- latest end of both consumers' w0 k0: both end at 3 (either lane); acq1 k1 <- mma1's w1 k0 end 22
    s0 = [r for r in acq if r[2] == 0 and r[3] == 1][0]
    assert s0[6:] in [
        ("inferred", MMA0, 3, "wait->acquire (inferred)"),
        ("inferred", MMA1, 3, "wait->acquire (inferred)"),
    ]
    assert [r for r in acq if r[2] == 1 and r[3] == 1][0][6:] == ("inferred", MMA1, 22, "wait->acquire (inferred)")
    acq_end = {(0, 0): 1, (1, 0): 4, (0, 1): 20, (1, 1): 30}
    for g, op, s, k, a, z, status, src, t, kind in rows:
        if op == "wait":
            assert (status, src, t, kind) == ("inferred", PRODUCER, acq_end[(s, k)], "acquire->wait (inferred)")
    assert pa.counters == []  # stages full needs commit and release instants
    assert pa.unmatched() == {}


def test_skipped_wait_records_matched_by_time():
    """mma0's wait w1 11-12 left no record (a try_wait found the data ready, so the wait never ran): its
    next stage-1 wait (26-35) is mma0's 0th recorded one, but two stage-1 commits (@5, @34) completed by its
    end: it is matched to the 2nd (@34), and the disagreement is counted."""
    c = fa_like()
    lane = c.lane(0, MMA0)
    c.lanes[MMA0] = [r for r in lane if not (r[1] == WAIT + 1 and r[0] in (11, 12))]
    trace = c.trace([k_pipeline()])
    pa = pl.analyze_pipelines(trace)
    mine = [r for r in table(trace, pa) if r[0] == MMA0]
    assert (1, "wait", 1, 0, 26, 35, "matched", PRODUCER, 34, "commit->wait") in mine
    s = ws.waits_summary(trace, pa)
    assert s["occurrence_checks"] == {"time_ahead_of_count": 1, "count_ahead_of_time": 0}
    m0 = [r for r in s["rows"] if r["role"] == "mma0"][0]
    assert (m0["uses"], m0["waits"], m0["not_recorded"]) == (4, 3, 1)  # 4 releases, 3 wait records
    assert pa.unmatched() == {}


def test_inferred_without_a_bound_is_bound_not_recorded():
    """Level "waits": the producer's first acquire of stage 1 was skipped by a successful try_acquire (no
    record), so mma0's first stage-1 wait has no acquire end before it to be bounded by."""
    c = fa_like(signals=False)
    c.lanes[PRODUCER] = [r for r in c.lane(0, PRODUCER) if not (r[1] == ACQ + 1 and r[0] in (3, 4))]
    pa = pl.analyze_pipelines(c.trace([k_pipeline(("acquire", "wait"))]))
    w = pa.waits
    first_s1 = w[(w["op"] == 1) & (w["stage"] == 1) & (w["occurrence"] == 0)]
    assert [pm.STATUSES[x] for x in first_s1["status"]] == ["bound_not_recorded"] * 2
    assert pa.unmatched() == {"bound_not_recorded": 2}


def test_wait_only_pipeline_is_no_signal_recorded():
    trace = fa_like(signals=False).trace([k_pipeline(("wait",))])
    pa = pl.analyze_pipelines(trace)
    assert pa.status_counts()["no_signal_recorded"] == 8 and pa.flows().size == 0


def test_consumer_overflow_and_missing_lane():
    """Block 0: mma1 overflowed after its first wait+release (records 0..2 kept: w0 0-3, r0@20) ->
    the producer's acq1 k1 (needs r1 k0 of both consumers) is consumer_dropped, acq0 k1 is matched (both
    r0 k0 recorded). Block 1: the producer lane wrote nothing -> every consumer wait is lane_missing and
    nothing releases acquires there (no producer acquires to match). Block 2: the producer commits stage 1
    once, but a consumer waits on stage 1 twice with nobody dropped -> occurrence_beyond_signal."""
    c = fa_like()
    c.num_blocks = 3
    c.overflow(0, MMA1, keep=3, dropped=5)
    for g, waits in [(MMA0, [(1, 3, 0), (5, 8, 1)]), (MMA1, [(1, 4, 0)])]:
        for a, z, s in waits:
            c.region(1, g, WAIT + s, a, z)
    c.region(2, PRODUCER, ACQ + 1, 0, 1).instant(2, PRODUCER, COMMIT + 1, 2)
    c.region(2, MMA0, WAIT + 1, 1, 3).instant(2, MMA0, RELEASE + 1, 4).region(2, MMA0, WAIT + 1, 5, 9)
    c.region(2, MMA1, WAIT + 1, 1, 3).instant(2, MMA1, RELEASE + 1, 4)
    trace = c.trace([k_pipeline()])
    assert int(trace.lanes["dropped"].sum()) == 5
    pa = pl.analyze_pipelines(trace)
    w = pa.waits
    status = {
        (int(r["block"]), int(r["group"]), pm.WAIT_OPS[r["op"]], int(r["stage"]), int(r["occurrence"])): pm.STATUSES[
            r["status"]
        ]
        for r in w
    }
    assert status[(0, PRODUCER, "acquire", 0, 1)] == "matched"
    assert status[(0, PRODUCER, "acquire", 1, 1)] == "consumer_dropped"
    assert [k for k in status if k[0] == 0 and k[1] == MMA1] == [(0, MMA1, "wait", 0, 0)]  # the kept prefix
    assert {v for k, v in status.items() if k[0] == 1} == {"lane_missing"} and len(
        [k for k in status if k[0] == 1]
    ) == 3
    assert (
        status[(2, MMA0, "wait", 1, 0)] == "matched" and status[(2, MMA0, "wait", 1, 1)] == "occurrence_beyond_signal"
    )
    assert status[(2, PRODUCER, "acquire", 1, 0)] == "first_use"
    assert pa.unmatched() == {"consumer_dropped": 1, "lane_missing": 3, "occurrence_beyond_signal": 1}
    s = ws.waits_summary(trace, pa)
    prod = [r for r in s["rows"] if r["role"] == "producer"][
        0
    ]  # blocked: acq0 k1 (mma1), acq1 k1 (dropped), block 2 none
    assert prod["waited_on"] == {"mma1": 1, "consumer_dropped": 1}
    assert (s["lanes_overflowed"], s["records_dropped"], s["late_signals"]) == (1, 5, 0)
    cp = s["critical_path"]  # block 0 (mma1 overflowed) is left out; blocks 1 and 2 are walked
    assert (cp["blocks"], cp["blocks_total"], cp["blocks_overflowed"]) == (2, 3, 1)
    assert [p["block"] for p in ws.critical_paths(trace, pa)] == [1, 2]
    assert [p["block"] for p in ws.critical_paths(trace, pa, overflowed=True)] == [0, 1, 2]
    assert not cp["partial"]
    total = sum(pa.status_counts().values())
    assert total == w.size == int(np.isin(trace.spans["event"], [ACQ, ACQ + 1, WAIT, WAIT + 1]).sum())


def test_many_stages_reused_many_times():
    """4 stages, 60 iterations (each stage used 15 times), two consumers: a generated producer/consumer
    schedule whose every dependency is written down as it is generated, then compared wait by wait."""
    rng = np.random.default_rng(7)
    stages, iters = 4, 60
    c = Capture(1, 3)
    want = {}  # (group, op, stage, k) -> (src group, src tick)
    t_prod, t_cons = 0, {MMA0: 0, MMA1: 0}
    commit_at, release_at = {}, {}
    for i in range(iters):
        s, k = i % stages, i // stages
        a = t_prod
        free = max(release_at[(s, k - 1, g)] for g in (MMA0, MMA1)) if k else a
        z = max(a + 1, free)
        c.region(0, PRODUCER, ACQ + s, a, z)
        if k:
            last = max((MMA0, MMA1), key=lambda g: (release_at[(s, k - 1, g)], g))
            want[(PRODUCER, "acquire", s, k)] = (last, release_at[(s, k - 1, last)])
        commit_at[(s, k)] = z + 1 + int(rng.integers(0, 3))
        c.instant(0, PRODUCER, COMMIT + s, commit_at[(s, k)])
        t_prod = commit_at[(s, k)] + 1
        for g in (MMA0, MMA1):
            a = t_cons[g]
            z = max(a + 1, commit_at[(s, k)] + 1)
            c.region(0, g, WAIT + s, a, z)
            want[(g, "wait", s, k)] = (PRODUCER, commit_at[(s, k)])
            release_at[(s, k, g)] = z + 1 + int(rng.integers(1, 9))
            c.instant(0, g, RELEASE + s, release_at[(s, k, g)])
            t_cons[g] = release_at[(s, k, g)] + 1
    trace = c.trace([k_pipeline(stages=stages)])
    pa = pl.analyze_pipelines(trace)
    got = {}
    for g, op, s, k, a, z, status, src, t, kind in table(trace, pa):
        if status != "first_use":
            got[(g, op, s, k)] = (src, t)
    # releases at the same tick by both consumers: either lane completed the phase
    ties = {
        key
        for key in want
        if key[1] == "acquire" and release_at[(key[2], key[3] - 1, MMA0)] == release_at[(key[2], key[3] - 1, MMA1)]
    }
    assert {k: v for k, v in got.items() if k not in ties} == {k: v for k, v in want.items() if k not in ties}
    assert all(got[k][1] == want[k][1] for k in ties)
    assert len(got) == len(want) == iters * 3 - stages
    assert pa.pass_through_ns == TICK and pa.blocked_above_ns == TICK  # 4 first acquires of 1 tick each
    values = pa.counters[0].values
    assert values.min() >= 0 and values.max() <= stages and values[-1] == 0


def test_late_signal_is_counted():
    """A commit recorded 3 ticks after the wait it released ended (a record placed after its arrive): matched,
    counted as a late signal, and the critical path does not run backwards (the wait segment is clamped)."""
    c = Capture(1, 2)
    c.region(0, PRODUCER, ACQ, 0, 1).instant(0, PRODUCER, COMMIT, 9)
    c.region(0, MMA0, WAIT, 1, 6).instant(0, MMA0, 99, 12)
    trace = c.trace([k_pipeline(stages=1)])
    pa = pl.analyze_pipelines(trace)
    s = ws.waits_summary(trace, pa)
    assert s["late_signals"] == 1 and s["status"]["matched"] == 1
    assert s["occurrence_checks"] == {"time_ahead_of_count": 0, "count_ahead_of_time": 1}
    (path,) = ws.critical_paths(trace, pa)
    t0 = trace.start_ns
    # mma0 ends last (12); its wait 1-6 was released "at 9" -> clamped to 6: the producer works 0..6, mma0 6..12
    assert [(w, lane, (a - t0) // TICK, (z - t0) // TICK) for w, lane, a, z, _, _, _ in path["segments"]] == [
        ("work", 0, 0, 6),
        ("work", 1, 6, 12),
    ]


def test_two_cta_cluster():
    """Blocks 0 and 1 form a cluster of 2. Each CTA's producer commits its half of a multicast load; the
    stage is full in both CTAs only when both halves arrived: block 0's consumer waits on block 1's
    later commit (@6) when the pipeline is cluster-scoped, on its own block's commit (@2) when not.
    Releases: the producer of block 1 waits for block 0's consumer release @12 (later than block 1's @9)."""
    c = Capture(2, 3)
    c.region(0, PRODUCER, ACQ, 0, 1).instant(0, PRODUCER, COMMIT, 2).region(0, PRODUCER, ACQ, 3, 13)
    c.region(1, PRODUCER, ACQ, 0, 1).instant(1, PRODUCER, COMMIT, 6).region(1, PRODUCER, ACQ, 7, 13)
    c.region(0, MMA0, WAIT, 1, 7).instant(0, MMA0, RELEASE, 12)
    c.region(1, MMA0, WAIT, 1, 7).instant(1, MMA0, RELEASE, 9)
    clustered = c.trace([k_pipeline(stages=1, cluster=[2, 1, 1])], grid=[2, 1, 1])
    pa = pl.analyze_pipelines(clustered)
    rows = table(clustered, pa)

    def sources(trace, pa):
        """(block, op, occurrence) -> (the releasing lane, its time in ticks); lanes: block * 3 + group."""
        return {(int(r["block"]), pm.WAIT_OPS[r["op"]], int(r["occurrence"])):
                (int(r["src_lane"]), (int(r["src_ns"]) - trace.start_ns) // TICK)
                for r in pa.waits if r["src_lane"] >= 0}

    assert sources(clustered, pa) == {
        (0, "wait", 0): (3, 6),
        (1, "wait", 0): (3, 6),
        (0, "acquire", 1): (1, 12),
        (1, "acquire", 1): (1, 12),
    }
    local = c.trace([k_pipeline(stages=1)])
    assert sources(local, pl.analyze_pipelines(local)) == {
        (0, "wait", 0): (0, 2),
        (1, "wait", 0): (3, 6),
        (0, "acquire", 1): (1, 12),
        (1, "acquire", 1): (4, 9),
    }
    # without grid, a cluster of 2 is two consecutive blocks: the same answer
    plain = c.trace([k_pipeline(stages=1, cluster=2)])
    assert table(plain, pl.analyze_pipelines(plain)) == rows
    # a cluster-scoped pipeline whose partner CTA overflowed: its missing commit -> producer_dropped
    c.overflow(1, PRODUCER, keep=2, dropped=1)
    pa = pl.analyze_pipelines(c.trace([k_pipeline(stages=1, cluster=2)]))
    w0 = [r for r in pa.waits if r["block"] == 0 and r["op"] == 1][0]
    assert pm.STATUSES[w0["status"]] == "producer_dropped"


def test_warp_lanes_grouped_into_warp_groups():
    """Lanes are warps (sidecar pipeline_lanes "warp", as the device side writes them): warp 0 produces, the 8
    warps of warp groups 1 and 2 each wait and release. The stage is free when the last of the 8 releases
    arrived (warp 11 @19); rows aggregate the warps of each warp group.

    wg0.w0: acq 0-1 | c@2 | acq 3-20 (freed by w11 @19) | c@21
    warp g of 4..11: w 1-3 (c@2) | r@(8+g) | w 20-22 (c@21) | r@23 (+ poll instants, ignored)"""
    c = Capture(1, 12)
    c.region(0, 0, ACQ, 0, 1).instant(0, 0, COMMIT, 2).region(0, 0, ACQ, 3, 20).instant(0, 0, COMMIT, 21)
    for g in range(4, 12):
        c.region(0, g, WAIT, 1, 3).instant(0, g, RELEASE, 8 + g).instant(0, g, 60, 19).region(
            0, g, WAIT, 20, 22
        ).instant(0, g, RELEASE, 23)
    trace = c.trace(
        [
            {
                **k_pipeline(stages=1),
                "ids": {"acquire": ACQ, "wait": WAIT, "commit": COMMIT, "release": RELEASE, "poll": 60},
            }
        ],
        pipeline_lanes="warp",
        warps_per_group=1,
        pipeline_level="all",
    )
    pa = pl.analyze_pipelines(trace)
    acq = [r for r in table(trace, pa) if r[1] == "acquire"]
    assert acq == [
        (0, "acquire", 0, 0, 0, 1, "first_use", None, None, None),
        (0, "acquire", 0, 1, 3, 20, "matched", 11, 19, "release->acquire"),
    ]
    s = ws.waits_summary(trace, pa)
    assert s["roles_by"] == "warp_group" and s["level"] == "all"
    rows = {r["role"]: r for r in s["rows"]}
    assert set(rows) == {"wg0", "wg1", "wg2"}
    assert (rows["wg0"]["waits"], rows["wg0"]["blocked"], rows["wg0"]["waited_on"]) == (2, 1, {"wg2": 1})
    for wg in ("wg1", "wg2"):
        assert (rows[wg]["lanes"], rows[wg]["waits"], rows[wg]["blocked"], rows[wg]["waited_on"]) == (
            4,
            8,
            8,
            {"wg0": 8},
        )
        assert rows[wg]["total_ns"] == 4 * 4 * TICK
    roles = {r["role"]: r for r in s["roles"]}
    assert (roles["wg1"]["lanes"], roles["wg1"]["time_ns"]) == (4, 4 * 22 * TICK)  # each warp: 1..23
    per_warp = ws.waits_summary(trace, pa, roles="group")
    assert per_warp["roles_by"] == "group" and len(per_warp["rows"]) == 9


def test_signals_from_another_cta_without_cluster_metadata():
    """Only block 0's producer commits (for both CTAs of a 2-CTA cluster, as quack's tile scheduler does);
    block 1's consumer waits too. Without cluster metadata block 1's wait is signal_in_other_cta; with
    analyze_pipelines(cluster=2) it is matched to block 0's commit."""
    c = Capture(2, 3)
    c.region(0, PRODUCER, ACQ, 0, 1).instant(0, PRODUCER, COMMIT, 2)
    c.region(0, MMA0, WAIT, 1, 3).region(1, MMA0, WAIT, 1, 4)
    c.instant(1, PRODUCER, 99, 0)  # block 1's producer warp is there (else: lane_missing), it just never commits
    trace = c.trace([k_pipeline(("acquire", "wait", "commit"), stages=1)])
    pa = pl.analyze_pipelines(trace)
    status = {int(r["block"]): pm.STATUSES[r["status"]] for r in pa.waits if r["op"] == 1}
    assert status == {0: "matched", 1: "signal_in_other_cta"}
    pa = pl.analyze_pipelines(trace, cluster=2)
    t0 = trace.start_ns
    src = {int(r["block"]): (int(r["src_lane"]), (int(r["src_ns"]) - t0) // TICK) for r in pa.waits if r["op"] == 1}
    assert src == {0: (0, 2), 1: (0, 2)} and pa.unmatched() == {}
    assert ws.waits_summary(trace, cluster=2)["unmatched"] == {}


def test_named_barriers():
    """mma0 syncs on barrier 3, mma1 arrives on it: 1st phase mma1 arrives @5 while mma0 waits 2-6 -> matched
    to the arrive; 2nd phase mma0 comes last (sync 10-11 after the arrive @8) -> self."""
    c = Capture(1, 3)
    c.region(0, MMA0, 100 + 3, 2, 6).region(0, MMA0, 100 + 3, 10, 11)
    c.instant(0, MMA1, 200 + 3, 5).instant(0, MMA1, 200 + 3, 8)
    c.region(0, PRODUCER, ACQ, 0, 1)
    trace = c.trace([k_pipeline(stages=1)], barriers={"base_sync": 100, "base_arrive": 200, "names": {"3": "softmax"}})
    pa = pl.analyze_pipelines(trace)
    syncs = [r for r in table(trace, pa) if r[1] == "bar_sync"]
    assert syncs == [
        (MMA0, "bar_sync", 3, 0, 2, 6, "matched", MMA1, 5, "bar_arrive->bar_sync"),
        (MMA0, "bar_sync", 3, 1, 10, 11, "self", MMA0, 10, "bar_sync->bar_sync"),
    ]
    s = ws.waits_summary(trace, pa)
    assert {r["channel"] for r in s["rows"]} == {"K", "bar_sync[3] softmax"}
    assert pa.flows().size == 1  # the self-released sync draws no arrow


def test_warp_scheduler_barrier_matched_by_time():
    """FA4's warp scheduler on barrier 2 (256 threads = 2 warp groups): warp group 1 pre-arrives on it once
    (mma_init), then syncs on it each iteration; warp group 2 arrives on it each iteration. Phase 0 is wg1's
    arrive + wg1's first sync (self), phase k >= 1 wg1's (k+1)-th sync + wg2's k-th arrive: lanes do not
    take part once per phase, so the match is by time (the latest arrival before the sync ended).

    mma0 (wg1): arrive@1 | sync 2-3 | sync 10-15 (mma1 arrives @14) | sync 20-23 (mma1 arrived @18: self)
    mma1 (wg2): arrive@14 | arrive@18
    mma1 also overflowed after its records (dropped 1): syncs that ended after its last record (@18) are
    participant_dropped (its next arrive could be the one that released them)."""
    c = Capture(1, 3)
    c.instant(0, MMA0, 200 + 2, 1).region(0, MMA0, 100 + 2, 2, 3).region(0, MMA0, 100 + 2, 10, 15).region(
        0, MMA0, 100 + 2, 20, 23
    )
    c.instant(0, MMA1, 200 + 2, 14).instant(0, MMA1, 200 + 2, 18)
    c.region(0, PRODUCER, ACQ, 0, 1)
    bars = {"base_sync": 100, "base_arrive": 200}
    trace = c.trace([k_pipeline(stages=1)], barriers=bars)
    pa = pl.analyze_pipelines(trace)
    assert [r[3:] for r in table(trace, pa) if r[1] == "bar_sync"] == [
        (0, 2, 3, "self", MMA0, 2, "bar_sync->bar_sync"),  # mma0's own begin @2 came after its arrive @1
        (1, 10, 15, "matched", MMA1, 14, "bar_arrive->bar_sync"),
        (2, 20, 23, "self", MMA0, 20, "bar_sync->bar_sync"),
    ]
    s = ws.waits_summary(trace, pa)
    assert s["late_signals"] == 0
    # critical path: mma0 ends last (23); its self-released sync 20-23 waited on nobody known, then it
    # worked 15..20 after the sync that mma1's arrive @14 released; mma1 starts at 14
    shares = {(r["what"], r["role"], r["channel"], r["on"]): r["ns"] for r in s["critical_path"]["segments"]}
    assert shares == {
        ("wait", "mma0", "bar_sync[2]", "itself"): 3 * TICK,
        ("work", "mma0", None, None): 5 * TICK,
        ("wait", "mma0", "bar_sync[2]", "mma1"): 1 * TICK,
    }
    c.overflow(0, MMA1, keep=2, dropped=1)
    trace = c.trace([k_pipeline(stages=1)], barriers=bars)
    pa = pl.analyze_pipelines(trace)
    cp = ws.waits_summary(trace, pa)["critical_path"]  # the only block overflowed: walked anyway, said so
    assert (cp["blocks"], cp["blocks_overflowed"], cp["partial"]) == (1, 1, True)
    assert [pm.STATUSES[x] for x in pa.waits["status"][pa.waits["op"] == 2]] == [
        "self",
        "matched",
        "participant_dropped",
    ]


def test_bad_metadata_names_the_entry():
    trace = fa_like().trace([k_pipeline()])
    for bad, msg in [
        ([{"name": "K", "num_stages": 0, "ids": {"wait": 1}}], "num_stages"),
        ([{"name": "K", "num_stages": 2, "ids": {"pop": 1}}], "ids must map"),
        ([{"name": "K", "num_stages": 2, "ids": {"wait": 1020}}], "ids.wait=1020"),
        ([k_pipeline(), {**k_pipeline(), "name": "V"}], "both K.acquire"),
        ([k_pipeline(cluster="two")], "cluster"),
    ]:
        trace.meta["pipelines"] = bad
        with pytest.raises(ValueError, match=msg):
            pl.analyze_pipelines(trace)
    trace.meta["pipelines"] = []
    with pytest.raises(ValueError, match="declares no"):
        pl.analyze_pipelines(trace)


def test_sidecar_round_trip(tmp_path):
    """The contract's sidecar keys reach trace.meta through save_capture / load_capture unchanged."""
    from host_decode.load.capture import load_capture

    c = fa_like()
    path = save_capture(tmp_path / "cap.npy", c.buffer(), names={"groups": GROUPS}, pipelines=[k_pipeline()])
    assert json.loads(path.with_suffix(".json").read_text())["pipelines"][0]["ids"]["commit"] == COMMIT
    trace = load_capture(path)
    assert table(trace, pl.analyze_pipelines(trace)) == EXPECTED_SIGNALS


def test_ikp_waits_command(tmp_path, capsys):
    from host_decode.cli import main

    path = save_capture(
        tmp_path / "cap.npy", fa_like().buffer(), names={"groups": GROUPS}, pipelines=[k_pipeline()], kernel="synthetic"
    )
    assert main(["waits", str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["role"], r["op"]): r for r in data["rows"]}
    assert rows[("producer", "acquire")]["total_ns"] == 24 * TICK and rows[("mma0", "wait")]["waited_on"] == {
        "producer": 3
    }
    assert data["flows"] == 10 and data["unmatched"] == {}
    assert main(["waits", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mma1 waits on K for producer" in out and "70.6%" in out and "every wait matched" in out
    plain = save_capture(tmp_path / "plain.npy", fa_like().buffer())
    assert main(["waits", str(plain)]) == 2
    assert "no 'pipelines' or 'barriers' metadata" in capsys.readouterr().err


def test_the_writer_draws_the_pipeline_overlay(tmp_path):
    """The writer's pipelines overlay holds the analysis' flows and counters when the capture has pipeline
    metadata, and nothing otherwise."""
    from host_decode.writers.overlays import pipeline_overlay

    trace = fa_like().trace([k_pipeline()])
    drawn = pipeline_overlay(trace)
    assert drawn.flows.size == 10 and drawn.flow_kinds == pm.FLOW_KINDS and len(drawn.counters) == 1
    assert drawn.notes == ("10 pipeline flows, 1 stages-full counters",)
    plain = decode(fa_like().buffer())
    assert pipeline_overlay(plain) is None


def test_ikp_decode_writes_the_flows(tmp_path):
    """End to end through the real Perfetto writer: each flow leaves the signalling lane's track at the signal and
    ends on the waiting lane's track."""
    from host_decode.cli import main

    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    path = save_capture(tmp_path / "cap.npy", fa_like().buffer(), names={"groups": GROUPS}, pipelines=[k_pipeline()])
    assert main(["decode", str(path), "-o", str(tmp_path / "cap.pftrace"), "-q"]) == 0
    t = pb.Trace()
    t.ParseFromString((tmp_path / "cap.pftrace").read_bytes())
    names, src, dst = {}, {}, {}
    for p in t.packet:
        if p.HasField("track_descriptor"):
            names[p.track_descriptor.uuid] = p.track_descriptor.name or p.track_descriptor.static_name
        if p.HasField("track_event"):
            for f in p.track_event.flow_ids:
                src[f] = (names.get(p.track_event.track_uuid), p.timestamp // TICK)
            for f in p.track_event.terminating_flow_ids:
                dst[f] = (names.get(p.track_event.track_uuid), p.timestamp // TICK)
    assert set(src) == set(dst) and len(src) == 10
    arrows = sorted(src[f] + dst[f] for f in src)
    want = sorted(
        [("mma1", 20, "producer", 20), ("mma1", 30, "producer", 30)]
        + [
            ("producer", s, GROUPS[g], e)
            for g, s, e in [
                (1, 2, 3),
                (1, 5, 12),
                (1, 21, 22),
                (1, 34, 35),
                (2, 2, 3),
                (2, 5, 22),
                (2, 21, 32),
                (2, 34, 35),
            ]
        ]
    )
    assert arrows == want
    assert any(v == "K stages full" for v in names.values())


def test_waits_tables_fit_80_columns():
    import io

    from host_decode.reports.tables.console import make_console
    from host_decode.reports.tables.waits import print_waits

    data = ws.waits_summary(fa_like().trace([k_pipeline()]))
    out = io.StringIO()
    print_waits(data, make_console(out, width=80))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "producer" in text and "mma1 waits on K for producer" in text and "70.6%" in text


def test_tma_store_acquires_waited_on_the_tma_unit():
    """A TMA-store pipeline (sidecar `released_by: tma_store`, ops acquire and commit only): no lane frees
    its stages, the TMA unit does once a bulk store has read them. Its acquires get status tma_store (a
    match: nothing is lost or unexplained), no flow, and `ikp waits` says they waited on the TMA unit.
    The consumer pipeline beside it is matched as before.

    epilogue warp (group 0): acq 0-1 | c@2 | acq 3-12 (blocked 9 ticks) | c@13 | acq 14-15 | c@16
    """
    EPI_ACQ, EPI_COMMIT = 60, 70
    c = fa_like()
    for a, z, commit in [(0, 1, 2), (3, 12, 13), (14, 15, 16)]:
        c.region(0, PRODUCER, EPI_ACQ, 40 + a, 40 + z)
        c.instant(0, PRODUCER, EPI_COMMIT, 40 + commit)
    store = {"name": "epi_store", "class": "PipelineTmaStore", "site": "epi.py:1", "num_stages": 1,
             "ids": {"acquire": EPI_ACQ, "commit": EPI_COMMIT}, "released_by": "tma_store"}
    trace = c.trace([k_pipeline(), store])
    pa = pl.analyze_pipelines(trace)
    assert pa.unmatched() == {}
    epi = [i for i, ch in enumerate(pa.channels) if ch.name == "epi_store"][0]
    rows = pa.waits[pa.waits["channel"] == epi]
    assert [pm.STATUSES[s] for s in rows["status"]] == ["tma_store"] * 3
    assert (rows["src_lane"] == -1).all() and (rows["kind"] == -1).all()
    assert not (pa.flows()["dst_ns"] == rows["end_ns"][1]).any()
    k_rows = pa.waits[pa.waits["channel"] != epi]
    assert pa.status_counts()["matched"] == int((k_rows["status"] == pm.STATUSES.index("matched")).sum()) > 0
    summary = ws.waits_summary(trace, pa)
    (row,) = [r for r in summary["rows"] if r["channel"] == "epi_store"]
    # one blocked (9 ticks); the two 1-tick acquires are not longer than the timer step
    assert row["op"] == "acquire" and row["blocked"] == 1 and row["waited_on"] == {"tma_store": 1}
    # a sidecar naming an unknown releaser is refused, naming the entry
    with pytest.raises(ValueError, match=r"pipelines\[1\] \(epi_store\): released_by"):
        meta.channels_of({"pipelines": [k_pipeline(), {**store, "released_by": "dma"}]})


@pytest.mark.parametrize("barriers, match", [
    ({"base_sync": 10, "names": ["a"]}, "barriers.names must be an object"),
    ({"base_sync": 10, "names": {"a": "b"}}, "key 'a' is not a barrier id"),
    ({"base_sync": 10, "names": {"16": "b"}}, "key '16' is not a barrier id"),
    ({"base_sync": 1020}, "does not leave 16 barrier ids"),
])
def test_malformed_barrier_metadata_is_refused_by_name(barriers, match):
    from host_decode.analysis.pipeline_meta import channels_of

    with pytest.raises(ValueError, match=match):
        channels_of({"barriers": barriers})


def test_pipeline_order_group_zero_first_waits_pass():
    # cutlass's PipelineOrder: group g waits on stage*length + g; group 0 starts at phase 1, so its
    # first wait on each of its stages passes and its n-th is released by group 1's (n-1)-th arrive.
    # The device side says so in the sidecar (first_wait_passes); without it every wait of group 0
    # was matched one arrive late, at level all
    wait, commit = 0, 8
    meta = {"name": "turns", "class": "PipelineOrder", "site": "k.py:1", "num_stages": 4, "producer_arrivals": 128,
            "consumer_arrivals": None, "tx_bytes": 0, "ids": {"wait": wait, "commit": commit},
            "op_type": "AsyncThread", "first_wait_passes": [0, 2]}
    c = Capture(1, 8)
    g0, g1 = 0, 4
    for a, z, s, com in [(0, 1, 0, 2), (3, 4, 2, 5), (6, 21, 0, 22)]:
        c.region(0, g0, wait + s, a, z)
        c.instant(0, g0, commit + s + 1, com)
    for a, z, s, com in [(0, 3, 1, 20), (21, 22, 3, 23), (24, 25, 1, 26)]:
        c.region(0, g1, wait + s, a, z)
        c.instant(0, g1, commit + s - 1, com)
    trace = c.trace([meta], pipeline_level="signals")
    rows = {(r[0], r[2], r[3]): (r[6], r[8]) for r in table(trace, pl.analyze_pipelines(trace))}
    assert rows[(g0, 0, 0)][0] == "first_use" and rows[(g0, 2, 0)][0] == "first_use"
    assert rows[(g0, 0, 1)] == ("matched", 20)  # group 1's first arrive on stage 0 (tick 20), not its second
    assert rows[(g1, 1, 0)] == ("matched", 2)


def test_an_inferred_bound_never_ends_after_the_wait_it_released():
    """Level waits (acquire and wait only), waits recorded only when they blocked (lanes' counts of their
    records then differ from the uses): every bound is the latest record of the other side that ended before the
    wait did (pipeline_match.match_inferred), never one that ended after it. By hand (one stage; use n of the
    producer and the consumers; unrecorded calls in brackets):
        producer  [0-1] n0, 3-10 n1, 12-20 n2, 22-30 n3
        mma0      [1-3] n0, 6-12 n1, 15-22 n2, 26-31 n3
        mma1      [0-2] n0, [11-13] n1, [21-23] n2, 25-32 n3
    mma0's 6-12 <- the acquire ending 10; 15-22 <- 20; 26-31 and mma1's 25-32 <- 30. The acquire 12-20 (n2, freed
    by the releases of n1) <- mma0's 6-12; 22-30 <- mma0's 15-22; 3-10 (n1) has no consumer wait before it: the
    waits of n0 passed."""
    schedule = {PRODUCER: [(0, 1), (3, 10), (12, 20), (22, 30)],
                MMA0: [(1, 3), (6, 12), (15, 22), (26, 31)],
                MMA1: [(0, 2), (11, 13), (21, 23), (25, 32)]}
    c = Capture(1, 3)
    for group, spans in schedule.items():
        event = ACQ if group == PRODUCER else WAIT
        for a, z in spans:
            if z - a >= 3:  # only the waits that blocked are recorded
                c.region(0, group, event, a, z)
            else:
                c.instant(0, group, 99, a)
    trace = c.trace([k_pipeline(("acquire", "wait"), stages=1)], pipeline_level="waits",
                    pipeline_options={"passing_waits": False})
    rows = {(r[0], r[4]): r[6:9] for r in table(trace, pl.analyze_pipelines(trace))}
    assert rows == {
        (PRODUCER, 3): ("bound_not_recorded", None, None),
        (PRODUCER, 12): ("inferred", MMA0, 12),
        (PRODUCER, 22): ("inferred", MMA0, 22),
        (MMA0, 6): ("inferred", PRODUCER, 10),
        (MMA0, 15): ("inferred", PRODUCER, 20),
        (MMA0, 26): ("inferred", PRODUCER, 30),
        (MMA1, 25): ("inferred", PRODUCER, 30),
    }


@pytest.mark.parametrize("change, match", [
    ({"num_stages": True}, "num_stages must be an integer"),
    ({"cluster": True}, "cluster must be a positive integer"),
    ({"scope": "grid"}, "scope must be 'cluster' or 'cta'"),
    ({"ids": {"wait": 20.0}}, "ids.wait must be an integer event id"),
])
def test_malformed_pipeline_metadata_is_refused_by_name(change, match):
    with pytest.raises(ValueError, match=match):
        meta.channels_of({"pipelines": [k_pipeline(**change) if "ids" not in change else {**k_pipeline(), **change}]})


def test_two_pipelines_of_one_name_are_refused():
    with pytest.raises(ValueError, match="a second pipeline named 'K'"):
        meta.channels_of({"pipelines": [k_pipeline(), k_pipeline()]})
