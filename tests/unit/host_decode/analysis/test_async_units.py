"""Async-unit intervals (host_decode.analysis.async_units) on hand-built captures whose issue and ready times
are known: every bound below was worked out by hand from the schedule drawn in
tests/support/pipeline_capture.py's K_SCHEDULE (ticks of 32 ns)."""

import numpy as np
import pytest

from host_decode.analysis import async_units as au
from tests.support.pipeline_capture import K_IDS, K_SCHEDULE, TICK, PipelineCapture, k_capture, pipeline_entry

IDS = K_IDS
ACQ, WAIT, COMMIT, RELEASE = (IDS[op] for op in ("acquire", "wait", "commit", "release"))
PRODUCER, C1, C2 = 0, 1, 2
SCHEDULE = K_SCHEDULE  # tests/support/pipeline_capture.py draws it


def capture(signals=True, base_ns=1_000_000 * TICK):
    return k_capture(SCHEDULE, signals, base_ns)


def capture_of(schedule, signals=True):
    return k_capture(schedule, signals)


def intervals(trace, side="full"):
    units = au.analyze_async_units(trace)
    c = [i for i, ch in enumerate(units.channels) if ch.name == "K"][0]
    iv = units.of(c, side)

    def tick(x):
        return None if x < 0 else (int(x) - trace.start_ns) // TICK if (int(x) - trace.start_ns) % TICK == 0 else \
            (int(x) - trace.start_ns) / TICK

    return units, sorted((int(r["stage"]), int(r["phase"]), tick(r["issue_lo"]), tick(r["issue_hi"]),
                          tick(r["ready_lo"]), tick(r["ready_hi"]), au.CLASSES[r["cls"]]) for r in iv)


def test_signals_level_by_hand():
    """Level signals: the issue is the commit, or up to three ticks (SIGNAL_RECORD_LEAD_NS) later but before the
    producer's next record (the acquire that follows it) and not after ready; ready is exact where a consumer
    wait blocked (its earliest end, one tick of doubt, not before the latest blocked begin), else bounded by the
    earliest release or wait end of that use or a later one, and by the next commit of the stage."""
    cap = capture()
    trace = cap.trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    units, got = intervals(trace)
    assert got == [
        # stage, k, issue_lo, issue_hi, ready_lo, ready_hi, class
        (0, 0, 2, 3, 19, 20, "exact"),  # c1 blocked 3..20: ready in (19, 20]; the next acquire began at 3
        (0, 1, 27, 28, 39, 40, "exact"),  # c2 32..40 and c1 35..41 blocked: earliest end 40
        (0, 2, 46, 47, 59, 60, "exact"),  # c1 56..60, c2 54..61
        (1, 0, 5, 6, 5, 31, "ready_bounded"),  # no wait: c2's release at 31 came after the data
        (1, 1, 35, 36, 35, 52, "ready_bounded"),  # c1's wait 51..52 passed: ready by its end
        (1, 2, 56, 59, 56, 71, "ready_bounded"),  # releases 72, 71; no later commit, no later producer record
    ]
    (src,) = units.sources
    assert src["issue"] == "commit (measured: within 96 ns after it)" and src["by"] == "phase"
    assert src["not_used"] == {}
    # the truth lies inside every interval
    for stage, k, ilo, ihi, rlo, rhi, _ in got:
        row = SCHEDULE[k * 2 + stage]
        assert ilo <= row[4] <= ihi and rlo <= row[5] <= rhi


def test_umma_releases_are_the_empty_side():
    """A PipelineTmaUmma's consumer release is the MMA warp's tcgen05.commit: the empty side's interval runs
    from the latest release of a use (the issue: up to three ticks later, before that lane's next record and not
    after ready) to the producer's next acquire of the stage ending (exact: it blocked)."""
    trace = capture().trace([pipeline_entry("K", IDS, 2, cls="PipelineTmaUmma", op_type="TmaLoad")])
    units, got = intervals(trace, "empty")
    assert [s["unit"] for s in units.sources] == ["TMA", "UMMA"]
    assert got == [
        (0, 0, 26, 27, 26, 27, "exact"),  # releases 25, 26; acquire 6..27 blocked
        (0, 1, 45, 46, 45, 46, "exact"),
        (0, 2, 63, 66, 63, None, "ready_bounded"),  # nothing acquires stage 0 again: no upper bound
        (1, 0, 33, 34, 33, 34, "exact"),
        (1, 1, 55, 56, 55, 56, "exact"),
        (1, 2, 72, 75, 72, None, "ready_bounded"),
    ]


def test_waits_level_by_hand():
    """No commit traced (level waits with every wait recorded): blocked consumer waits of one stage that began
    before the first of them ended are one use, its ready exact; its issue lies after the latest producer
    acquire of the stage that ended before, and before ready. Acquires no such group claims are uses of their
    own, bounded by the next consumer wait end and the next acquire of the stage."""
    ids = {"acquire": ACQ, "wait": WAIT}
    trace = capture(signals=False).trace([pipeline_entry("K", ids, 2, op_type="TmaLoad")], pipeline_level="waits")
    units, got = intervals(trace)
    assert got == [
        (0, -1, 1, 20, 19, 20, "issue_bounded"),  # c1 3..20; acquire ended at 1
        (0, -1, 27, 40, 39, 40, "issue_bounded"),  # c2 32..40 and c1 35..41 (began before 40): one use
        (0, -1, 46, 60, 59, 60, "issue_bounded"),  # c1 56..60 and c2 54..61
        (1, -1, 4, 34, 4, 34, "unbounded"),  # acquire ending 4: next acquire ends 34, first wait after ends 52
        (1, -1, 34, 52, 34, 52, "unbounded"),  # c1's wait 51..52 ends after it
        (1, -1, 56, None, 56, None, "unbounded"),  # nothing after it: open
    ]
    (src,) = units.sources
    assert src["by"] == "waits" and "level waits does not record commit" in src["issue"]
    for stage, _, ilo, ihi, rlo, rhi, _ in got:  # some use of the stage lies inside each interval
        assert any(ilo <= row[4] <= (ihi or 1 << 40) and rlo <= row[5] <= (rhi or 1 << 40)
                   for row in SCHEDULE if row[1] == stage)


@pytest.mark.parametrize("signals", [True, False])
def test_timer_wrap_gives_the_same_intervals(signals):
    """The 32-bit timer wraps in the middle of the schedule: the decoder unwraps it, the intervals are the same;
    so they are with absolute times (anchored lanes, a %globaltimer of 2025), whose wrap is there too."""
    near_wrap = (1 << 32) - 30 * TICK
    ids = IDS if signals else {"acquire": ACQ, "wait": WAIT}
    pipes = [pipeline_entry("K", ids, 2, op_type="TmaLoad")]
    plain = intervals(capture(signals).trace(pipes))[1]
    assert intervals(capture(signals, near_wrap).trace(pipes))[1] == plain
    absolute = (1_750_000_000_000_000_000 // (1 << 32) + 1) * (1 << 32) - 30 * TICK
    trace = k_capture(SCHEDULE, signals, absolute, anchored=True).trace(pipes)
    assert trace.start_ns > 1 << 60 and intervals(trace)[1] == plain


@pytest.mark.parametrize(("entry", "sides"), [
    ({"class": "PipelineTmaAsync", "op_type": "TmaLoad"}, [("full", "TMA")]),
    ({"class": "PipelineTmaUmma", "op_type": "TmaLoad"}, [("full", "TMA"), ("empty", "UMMA")]),
    ({"class": "PipelineUmmaAsync", "op_type": "TCGen05Mma"}, [("full", "UMMA")]),
    ({"class": "PipelineAsyncUmma", "op_type": "AsyncThread"}, [("empty", "UMMA")]),
    ({"class": "PipelineUmmaAsync"}, [("full", "UMMA")]),  # no op_type: the class name says it
    ({"class": "PipelineAsync", "op_type": "AsyncThread"}, []),
    ({"class": "PipelineTmaStore", "released_by": "tma_store"}, []),
    ({"class": "mbarrier"}, []),
])
def test_which_pipelines_are_async_units(entry, sides):
    from host_decode.analysis.pipeline_meta import channels_of

    (ch,) = channels_of({"pipelines": [{"name": "P", "num_stages": 2, "ids": {"wait": 0}, **entry}]})
    assert au.async_sides(ch) == sides


def test_no_async_unit_no_interval():
    trace = capture().trace([pipeline_entry("K", IDS, 2, cls="PipelineAsync", op_type="AsyncThread")])
    units = au.analyze_async_units(trace)
    assert units.intervals.size == 0 and units.sources == []


def test_chain_from_first_visits_the_chain():
    nxt = np.array([2, 3, 5, 4, 5])  # 0 -> 2 -> 5 (end)
    assert au._chain_from_first(nxt).tolist() == [True, False, True, False, False]
    assert au._chain_from_first(np.zeros(0, np.int64)).size == 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        nxt = np.arange(n) + 1 + rng.integers(0, 4, n)
        nxt = np.minimum(nxt, n)
        want, i = np.zeros(n, bool), 0
        while i < n:
            want[i], i = True, nxt[i]
        assert (au._chain_from_first(nxt) == want).all()


def test_a_waiter_that_woke_late_leaves_ready_bounded():
    """c1 blocked 35..44 (it woke 4 ticks after the data), c2's wait passed 40..41: the earliest end is no
    blocked one's, so ready is only bounded: after c1 began, by c2's end."""
    rows = [list(r) for r in SCHEDULE]
    rows[2][6], rows[2][8] = (35, 44), (40, 41)
    rows[2][7] = 46
    trace = capture_of(rows).trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    got = dict(((s, k), rest) for s, k, *rest in intervals(trace)[1])
    assert got[(0, 1)] == [27, 28, 35, 41, "ready_bounded"]


def test_a_release_at_the_tick_of_the_next_commit_bounds_its_own_use():
    """c1 releases stage 1's first use at tick 33 and the producer's next commit of that stage is at 33 too:
    the release belongs to the use before that commit, so it bounds use (1, 0), never use (1, 1)."""
    rows = [list(r) for r in SCHEDULE]
    rows[3][3], rows[3][4] = (28, 33), 33
    trace = capture_of(rows).trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    got = dict(((s, k), rest) for s, k, *rest in intervals(trace)[1])
    assert got[(1, 0)] == [5, 6, 5, 31, "ready_bounded"] and got[(1, 1)] == [33, 36, 33, 52, "ready_bounded"]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("level", ["signals", "waits"])
def test_bounds_contain_the_truth_on_random_pipelines(seed, level):
    """Pipelines run by the protocol with random latencies, skipped and blocked-only waits: the true issue and
    ready of every use lie inside its interval's bounds (exact ready: the waiter woke within a tick)."""
    from tests.support.pipeline_capture import simulate_pipeline

    rng = np.random.default_rng(seed)
    stages, consumers = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    cap, truth, ids = simulate_pipeline(rng, stages, 40, consumers, blocked_only=level == "waits")
    if level == "waits":
        ids = {"acquire": ids["acquire"], "wait": ids["wait"]}
    trace = cap.trace([pipeline_entry("K", ids, stages, op_type="TmaLoad")])
    units = au.analyze_async_units(trace)
    iv = units.intervals
    assert iv.size
    rel = {key: (cap.ns(i), cap.ns(r)) for key, (i, r) in truth.items()}
    big = np.iinfo(np.int64).max

    def inside(row, issue, ready):
        hi = lambda x: big if x < 0 else x  # noqa: E731
        return (row["issue_lo"] <= issue <= hi(row["issue_hi"])) and (row["ready_lo"] <= ready <= hi(row["ready_hi"]))

    for row in iv:
        s = int(row["stage"])
        if row["phase"] >= 0:
            assert inside(row, *rel[(s, int(row["phase"]))]), row
        else:  # some use of the stage lies inside
            assert any(inside(row, *v) for (st, _), v in rel.items() if st == s), row
    if level == "signals":
        assert iv.size == len(truth) and (iv["phase"] >= 0).all()


def test_a_region_ending_at_the_next_signals_tick_only_bounds():
    """One stage, one consumer. Use 1's data is ready at the tick of its commit (22), and the consumer's blocked
    wait 16..22 ends right there: by time alone it could be use 0's, so it only bounds use 0 from above; it
    never makes use 0's ready exact (use 0's data was ready at 10)."""
    cap = PipelineCapture(1, 2)
    cap.region(0, PRODUCER, ACQ, 0, 1).instant(0, PRODUCER, COMMIT, 2)
    cap.region(0, PRODUCER, ACQ, 5, 16).instant(0, PRODUCER, COMMIT, 22)
    cap.instant(0, C1, RELEASE, 15).region(0, C1, WAIT, 16, 22).instant(0, C1, RELEASE, 30)
    units = au.analyze_async_units(cap.trace([pipeline_entry("K", IDS, 1, op_type="TmaLoad")]))
    iv = units.intervals
    assert [au.CLASSES[c] for c in iv["cls"]] == ["ready_bounded", "ready_bounded"]
    assert ((iv["ready_hi"] - cap.ns(0)) // TICK).tolist() == [15, 30]  # use 0: its release; use 1: the next
    assert cap.ns(10) <= iv["ready_hi"][0] and iv["ready_lo"][1] == cap.ns(22)


def test_after_a_producer_overflow_later_regions_only_bound():
    """The producer lane overflowed after use 2's commit (tick 27): commits of uses 3.. are lost. A wait that
    ends after that may be a later use's, so it bounds from above and measures nothing: use (0, 1) stays
    bounded by c2's end at 40, not made exact by c1's wait 56..60 (which is use (0, 2)'s)."""
    cap = capture().overflow(0, PRODUCER, keep=9, dropped=9)
    trace = cap.trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    units, got = intervals(trace)
    assert got == [
        (0, 0, 2, 3, 19, 20, "exact"),
        (0, 1, 27, 30, 27, 40, "ready_bounded"),  # the producer's records after 27 were lost: the lead alone
        (1, 0, 5, 6, 5, 31, "ready_bounded"),
    ]
    assert units.sources[0]["not_used"] == {}


def test_the_issue_lies_within_the_record_path_or_before_the_lanes_next_record():
    """The commit instant reads the timer before its record block and the arrive.expect_tx, and the copy follows:
    the issue lies up to SIGNAL_RECORD_LEAD_NS (3 ticks) after the commit, and never after the committing lane's
    next record. One stage; the TMA issues two ticks after each commit, as on the H200 probe:
        use  producer acquire  commit  true issue  next producer record  ready  consumer wait  release
        0    (0, 1)            2       4           5 (acquire)           12     (3, 12)       13
        1    (5, 14)           15      16          16 (acquire)          30     (14, 30)      31
        2    (16, 32)          33      35          none                  50     (32, 50)      51"""
    cap = PipelineCapture(1, 2)
    for acq, commit in (((0, 1), 2), ((5, 14), 15), ((16, 32), 33)):
        cap.region(0, PRODUCER, ACQ, *acq).instant(0, PRODUCER, COMMIT, commit)
    for wait, rel in (((3, 12), 13), ((14, 30), 31), ((32, 50), 51)):
        cap.region(0, C1, WAIT, *wait).instant(0, C1, RELEASE, rel)
    units = au.analyze_async_units(cap.trace([pipeline_entry("K", IDS, 1, op_type="TmaLoad")]))
    iv = units.intervals
    ticks = [((int(r["issue_lo"]) - cap.ns(0)) // TICK, (int(r["issue_hi"]) - cap.ns(0)) // TICK) for r in iv]
    assert ticks == [(2, 5), (15, 16), (33, 36)]
    assert au.SIGNAL_RECORD_LEAD_NS == 3 * TICK
    assert all(lo <= issue <= hi for (lo, hi), issue in zip(ticks, (4, 16, 35)))
    assert [au.CLASSES[c] for c in iv["cls"]] == ["exact"] * 3


def test_a_wait_as_short_as_a_pass_does_not_measure_ready():
    """Every wait recorded (passing_waits): a consumer wait of two ticks may be a pass (on the H200 a passing
    wait lasts up to 96 ns when recorded), so its end bounds ready from above and measures nothing. Use 0's data
    landed at tick 10, the consumer looked at 20..22; use 1's wait blocked 26..41 (ready at 40): exact."""
    cap = PipelineCapture(1, 2)
    cap.region(0, PRODUCER, ACQ, 0, 1).instant(0, PRODUCER, COMMIT, 2)
    cap.region(0, PRODUCER, ACQ, 3, 24).instant(0, PRODUCER, COMMIT, 25)
    cap.region(0, C1, WAIT, 20, 22).instant(0, C1, RELEASE, 23)
    cap.region(0, C1, WAIT, 26, 41).instant(0, C1, RELEASE, 42)
    units = au.analyze_async_units(cap.trace([pipeline_entry("K", IDS, 1, op_type="TmaLoad")]))
    iv = units.intervals
    assert [au.CLASSES[c] for c in iv["cls"]] == ["ready_bounded", "exact"]
    ready = [((int(r["ready_lo"]) - cap.ns(0)) // TICK, (int(r["ready_hi"]) - cap.ns(0)) // TICK) for r in iv]
    assert ready == [(2, 22), (40, 41)]
