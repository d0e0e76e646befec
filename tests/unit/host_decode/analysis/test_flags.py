"""host_decode.analysis.flags on hand-built tables: every expected match, reason and path link is worked out
by hand in the comments; a random table is checked against a one-wait-at-a-time reference."""

from __future__ import annotations

import numpy as np
import pytest

from host_decode.analysis.flags import (
    ADD,
    GE,
    LINK_KINDS,
    OPS,
    REASONS,
    SIGNAL,
    UNKNOWN,
    WAIT,
    BlockSpans,
    FlagTable,
    critical_path,
    describe_path,
    match_waits,
)


def sig(t, block=0, rank=0, value=UNKNOWN, op="add", owner=0, offset=0, buffer=0, launch=0, warp=0):
    return dict(rank=rank, launch=launch, block=block, warp=warp, kind=SIGNAL, buffer=buffer, offset=offset,
                owner=owner, value=value, op=OPS.index(op), begin_ns=t, end_ns=t)


def wait(begin, end, value, op="ge", block=0, rank=0, owner=0, offset=0, buffer=0, launch=0, warp=0):
    return dict(rank=rank, launch=launch, block=block, warp=warp, kind=WAIT, buffer=buffer, offset=offset,
                owner=owner, value=value, op=OPS.index(op), begin_ns=begin, end_ns=end)


def build(*events, buffers=("ready", "done")) -> FlagTable:
    cols = {k: np.array([e[k] for e in events], np.int64) for k in events[0]}
    return FlagTable(**cols, buffers=buffers)


def matched(m, table) -> list[int]:
    """Releasing signal row per wait, in table order of the waits."""
    return m.signal.tolist()


def reasons(m) -> list[str]:
    return [REASONS[r] for r in m.reason]


# --- counters --------------------------------------------------------------------------------------------


def test_counter_increments_derived_from_time_order():
    # four unrecorded increments at 10, 20, 30, 40 (rows 0-3) make 1, 2, 3, 4
    t = build(sig(10, 1), sig(20, 2), sig(30, 3), sig(40, 4),
              wait(5, 25, 2),  # row 4: >= 2 -> the 2nd increment (row 1)
              wait(5, 45, 4),  # row 5: >= 4 -> row 3
              wait(25, 35, 3, "eq"),  # row 6: == 3 -> row 2
              wait(0, 100, 2))  # row 7: ended long after: still the increment that made 2 (row 1), not the latest
    m = match_waits(t)
    assert m.made[:4].tolist() == [1, 2, 3, 4] and m.derived[:4].all()
    assert m.wait_rows.tolist() == [4, 5, 6, 7]
    assert matched(m, t) == [1, 3, 2, 1]
    assert m.lag_ns.tolist() == [5, 5, 5, 80]
    c = m.counts()
    assert c["matched"] == 4 and c["derived_value"] == 4 and c["already_set"] == 0


def test_recorded_values_beat_time_order():
    # a race: the add that made 2 was recorded at 10, the one that made 1 at 12 (recorded after it acted)
    t = build(sig(10, 1, value=2), sig(12, 2, value=1), wait(0, 15, 2))
    assert matched(match_waits(t), t) == [0]
    # without the values, time order says the increment at 12 made 2
    t2 = build(sig(10, 1), sig(12, 2), wait(0, 15, 2))
    m2 = match_waits(t2)
    assert matched(m2, t2) == [1] and m2.made[:2].tolist() == [1, 2]


def test_equal_timestamps():
    # two increments at the same ns from blocks 3 and 1: ties go by (rank, block): block 1 makes 1, block 3 makes 2
    t = build(sig(50, 3), sig(50, 1), wait(40, 50, 2, block=7), wait(40, 50, 1, block=8))
    m = match_waits(t)
    assert m.made[:2].tolist() == [2, 1]
    assert matched(m, t) == [0, 1]  # a signal at exactly the wait's end releases it (lag 0)
    assert m.lag_ns.tolist() == [0, 0]


def test_store_resets_the_count_and_adds_follow_it():
    # adds make 1, 2; a store of 0 at 30 resets; the next add (40) makes 1 again; a store of 10 at 50, an add at
    # 60 makes 11
    t = build(sig(10, 1), sig(20, 1), sig(30, 1, value=0, op="store"), sig(40, 2), sig(50, 2, value=10, op="store"),
              sig(60, 3),
              wait(35, 45, 1, block=5),  # row 6: >= 1 after the reset: the add at 40 (row 3), not the one at 10
              wait(55, 65, 11, block=5))  # row 7: the add after the store of 10 (row 5)
    m = match_waits(t)
    assert m.made[:6].tolist() == [1, 2, 0, 1, 10, 11]
    assert matched(m, t) == [3, 5]


def test_launches_are_separate_flags():
    # launch 1's increments do not count toward launch 0's counter
    t = build(sig(10, 1, launch=0), sig(20, 1, launch=1), sig(30, 2, launch=1), wait(0, 100, 2, launch=0),
              wait(0, 100, 2, launch=1))
    m = match_waits(t)
    assert matched(m, t) == [-1, 2]
    assert reasons(m) == ["value_never_reached", "matched"]


# --- flags set by stores ---------------------------------------------------------------------------------


def test_store_flags_crossings():
    t = build(
        sig(10, 1, value=1, op="store"), sig(20, 1, value=0, op="store"), sig(30, 1, value=1, op="store"),
        sig(32, 2, value=1, op="store"),  # row 3: stores 1 again: no change, releases nothing
        wait(25, 35, 1, "eq", block=9),  # row 4: the store that changed 0 -> 1 at 30 (row 2), not the one at 10
        # offset 1: a flag moved by jumps (7 at 10, 2 at 20, 9 at 30)
        sig(10, 1, value=7, op="store", offset=1), sig(20, 1, value=2, op="store", offset=1),
        sig(30, 1, value=9, op="store", offset=1),
        wait(5, 12, 5, "ge", offset=1, block=9),  # row 8: 0 -> 7 crosses >= 5 (row 5)
        wait(15, 25, 3, "lt", offset=1, block=9),  # row 9: 7 -> 2 crosses < 3 (row 6)
        wait(22, 40, 8, "ge", offset=1, block=9),  # row 10: 2 -> 9 crosses >= 8 (row 7)
    )
    m = match_waits(t)
    assert matched(m, t) == [2, 5, 6, 7]
    assert m.made[[0, 1, 2, 3, 5, 6, 7]].tolist() == [1, 0, 1, 1, 7, 2, 9] and not m.derived.any()


# --- ranks and clocks ------------------------------------------------------------------------------------


def test_cross_rank_flag_with_a_clock_offset():
    # rank 1 signals a flag in rank 0's memory at 500 on its clock; rank 1's clock reads 1000 ns behind rank 0's.
    # rank 0 waited from 1200 to 1600 (its clock): on one clock the signal is at 1500, 100 ns before the end
    t = build(sig(500, 4, rank=1, owner=0), wait(1200, 1600, 1, rank=0, block=2, owner=0),
              sig(500, 4, rank=1, owner=1, offset=3), wait(0, 10, 1, rank=0, owner=1, offset=3))  # another flag
    m = match_waits(t, clock_offset_ns={0: 0, 1: 1000})
    assert matched(m, t)[0] == 0 and m.lag_ns[0] == 100
    assert m.blocked()[0]
    # without the offset the signal reads as 700 ns before the wait began: matched, but it blocked on nothing
    m0 = match_waits(t)
    assert matched(m0, t)[0] == 0 and not m0.blocked()[0] and m0.counts()["already_set"] == 1
    # the flag of the same name owned by rank 1 is another flag: rank 0's wait on it (row 3) ended at 10,
    # before the signal (1500 on rank 0's clock)
    assert reasons(m)[1] == "signal_after_wait"


def test_clock_error_tolerance():
    # the signal reads 50 ns after the wait ended: skew beyond an error of 0, within an error of 64
    t = build(sig(1500, 1, rank=1), wait(1000, 1450, 1, rank=0))
    assert reasons(match_waits(t)) == ["signal_after_wait"]
    m = match_waits(t, clock_error_ns=64)
    assert reasons(m) == ["matched"] and m.lag_ns.tolist() == [-50] and m.counts()["late_within_error"] == 1
    with pytest.raises(ValueError, match="rank"):
        match_waits(t, clock_offset_ns={0: 0})
    assert reasons(match_waits(t, clock_offset_ns=[0, -100])) == ["matched"]  # a sequence indexed by rank


def test_every_unmatched_reason():
    t = build(
        wait(0, 10, 1, offset=5),  # nobody signals offset 5 at all
        sig(10, 1), sig(20, 1), wait(0, 30, 3),  # two increments never make 3
        sig(100, 1, offset=2), wait(0, 50, 1, offset=2),  # the increment was recorded after the wait ended
        sig(10, 1, offset=6), wait(0, 50, 0, "lt", offset=6),  # a counter counting up from 0 never drops below 0
        wait(0, 10, 0, offset=8),  # >= 0 held for the initial value 0: nothing had to release it
    )
    m = match_waits(t)
    assert reasons(m) == ["no_signal", "value_never_reached", "signal_after_wait", "value_never_reached",
                          "initial_value"]
    assert m.counts() == {"matched": 0, "initial_value": 1, "no_signal": 1, "signal_after_wait": 1,
                          "value_never_reached": 2, "late_within_error": 0, "already_set": 0, "derived_value": 0}
    # counts that start at 4 (a flag counting across launches): the 5th increment of this launch makes 9
    t2 = build(*[sig(10 * i, 1) for i in range(1, 6)], wait(0, 100, 9), wait(0, 100, 3))
    m2 = match_waits(t2, initial=4)
    assert matched(m2, t2) == [4, -1] and reasons(m2) == ["matched", "initial_value"]


def test_matches_a_one_wait_at_a_time_reference():
    rng = np.random.default_rng(3)
    events = []
    for flag in range(6):
        times = np.sort(rng.integers(0, 400, 12))
        for k, ts in enumerate(times):
            if rng.random() < 0.2:
                events.append(sig(int(ts), int(rng.integers(4)), rank=int(rng.integers(2)), value=int(rng.integers(5)),
                                  op="store", offset=flag))
            else:
                events.append(sig(int(ts), int(rng.integers(4)), rank=int(rng.integers(2)), offset=flag))
        for _ in range(10):
            b = int(rng.integers(0, 400))
            events.append(wait(b, b + int(rng.integers(0, 200)), int(rng.integers(0, 8)), ("ge", "eq", "lt")[_ % 3],
                               block=9, offset=flag))
    t = build(*events)
    m = match_waits(t)
    # reference: walk each flag's signals in (time, rank, block, warp, row) order
    sig_rows = np.flatnonzero(t.kind == SIGNAL)
    expected = []
    for w in m.wait_rows.tolist():
        rows = sorted((r for r in sig_rows.tolist() if t.offset[r] == t.offset[w]),
                      key=lambda r: (t.end_ns[r], t.rank[r], t.block[r], t.warp[r], r))
        value, best, crossings = 0, -1, 0
        v = int(t.value[w])
        tests = {GE: lambda x: x >= v, OPS.index("eq"): lambda x: x == v, OPS.index("lt"): lambda x: x < v}
        holds = tests[int(t.op[w])]
        for r in rows:
            new = value + 1 if t.op[r] == ADD else int(t.value[r])
            if holds(new) and not holds(value):
                crossings += 1
                if t.end_ns[r] <= t.end_ns[w]:
                    best = r
            value = new
        expected.append((best, "matched" if best >= 0 else "initial_value" if holds(0) else "no_signal" if not rows
                         else "signal_after_wait" if crossings else "value_never_reached"))
    assert list(zip(m.signal.tolist(), reasons(m))) == expected
    assert {r for _, r in expected} == {"matched", "value_never_reached", "signal_after_wait", "initial_value"}


# --- the table -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, message", [
    (dict(kind=2), r"FlagTable.kind, row 0"),
    (dict(op=OPS.index("ge")), r"FlagTable.op, row 0 .*signal's op"),
    (dict(op=OPS.index("store")), r"FlagTable.value, row 0 .*add signal only"),
    (dict(end_ns=11), r"FlagTable.begin_ns, row 0"),
    (dict(offset=-1), r"FlagTable.offset, row 0 .*negative"),
    (dict(buffer=2), r"FlagTable.buffer, row 0 .*no name"),
    (dict(block=2**40), r"FlagTable.block: values out of range"),
])
def test_table_refuses_bad_rows_naming_column_and_row(change, message):
    row = sig(10)
    row.update(change)
    with pytest.raises(ValueError, match=message):
        build(row)


def test_table_shape_errors_and_helpers():
    cols = {k: np.array([v]) for k, v in sig(10).items()}
    cols["owner"] = np.array([0, 1])
    with pytest.raises(ValueError, match="FlagTable.owner has 2 rows, expected 1"):
        FlagTable(**cols)
    cols["owner"] = np.array([0.5])
    with pytest.raises(ValueError, match="FlagTable.owner: expected integers"):
        FlagTable(**cols)
    t = build(sig(10), wait(0, 20, 1, rank=1, owner=1, offset=4))
    assert t.flag_name(1) == "ready@rank1[4]"
    both = FlagTable.concat([t.select([0]), t.select(np.array([False, True]))])
    assert len(both) == 2 and both.columns()["rank"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="name their buffers differently"):
        FlagTable.concat([t, build(sig(1), buffers=("other",))])
    assert len(FlagTable.concat([])) == 0


# --- critical path ---------------------------------------------------------------------------------------


def chain_table():
    return build(
        sig(100, block=0, rank=0, buffer=0, offset=0),  # row 0: block (0,0) signals ready[0] at 100
        wait(10, 130, 1, block=1, rank=0, buffer=0, offset=0),  # row 1: (0,1) waits 10..130 on it
        sig(200, block=1, rank=0, buffer=1, owner=1, offset=0),  # row 2: (0,1) signals done@rank1[0] at 200
        wait(20, 240, 1, block=2, rank=1, buffer=1, owner=1),  # row 3: (1,2) waits 20..240 on it
        sig(5, block=0, rank=0, buffer=0, offset=9),  # row 4: a flag set at 5 ...
        wait(300, 310, 1, block=2, rank=1, buffer=0, offset=9),  # row 5: ... that (1,2) finds already set: skipped
        wait(320, 350, 1, block=2, rank=1, buffer=0, offset=7),  # row 6: nobody signals offset 7: unmatched
    )


def test_critical_path_by_hand():
    t = chain_table()
    m = match_waits(t)
    spans = BlockSpans(rank=[0, 0, 1], launch=[0, 0, 0], block=[0, 1, 2], start_ns=[0, 0, 0], end_ns=[100, 210, 400])
    links = critical_path(t, m, spans=spans)
    got = [(LINK_KINDS[k], r, b, a, z) for k, r, b, a, z in
           zip(links["kind"], links["rank"], links["block"], links["start_ns"], links["end_ns"])]
    # from (1,2)'s end at 400 back: its own work after the unmatched wait (350..400), the unmatched wait
    # (320..350), work back to the end of its wait on done (240..320; the wait at 300..310 found its flag
    # already set and is work), released by (0,1)'s signal at 200; (0,1) worked 130..200 after its wait on
    # ready, released at 100 by (0,0), which worked from its start at 0
    assert got == [
        ("work", 0, 0, 0, 100),
        ("released", 0, 1, 100, 130),
        ("work", 0, 1, 130, 200),
        ("released", 1, 2, 200, 240),
        ("work", 1, 2, 240, 320),
        ("unmatched", 1, 2, 320, 350),
        ("work", 1, 2, 350, 400),
    ]
    assert links["duration_ns"].sum() == 400  # the links tile the path from 0 to the end
    assert links["signal_row"].tolist() == [-1, 0, -1, 2, -1, -1, -1]
    assert links["wait_row"].tolist() == [-1, 1, -1, 3, -1, 6, -1]
    assert (links["from_rank"][1], links["from_block"][1]) == (0, 0)
    lines = describe_path(t, links)
    assert "waited on done@rank1[0], released by rank 0 block 1" in lines[3] and "unmatched" in lines[5]
    # from rank 0's last block (0,1 ends at 210): its work after the release, then (0,0)
    r0 = critical_path(t, m, spans=spans, rank=0)
    assert r0["end_ns"][-1] == 210 and r0["duration_ns"].sum() == 210 and r0["block"][0] == 0
    with pytest.raises(ValueError, match="rank 5 has no block"):
        critical_path(t, m, spans=spans, rank=5)


def test_critical_path_without_spans_and_with_clock_offsets():
    # without spans a block runs from its first to its last row: (1,2) ends at 350, (0,0) starts at 5
    t = chain_table()
    links = critical_path(t, match_waits(t))
    assert links["end_ns"][-1] == 350 and links["start_ns"][0] == 5 and links["duration_ns"].sum() == 345
    # rank 1's clock reads 1000 behind: its times move by +1000 in the match and the spans alike
    t1 = chain_table()
    t1.begin_ns[t1.rank == 1] -= 1000
    t1.end_ns[t1.rank == 1] -= 1000
    m1 = match_waits(t1, clock_offset_ns=[0, 1000])
    spans = BlockSpans(rank=[0, 0, 1], launch=[0] * 3, block=[0, 1, 2], start_ns=[0, 0, -1000], end_ns=[100, 210, -600])
    links1 = critical_path(t1, m1, spans=spans, clock_offset_ns=[0, 1000])
    assert links1["start_ns"].tolist() == [0, 100, 130, 200, 240, 320, 350]
    assert critical_path(t1, m1, launch=3).size == 0
