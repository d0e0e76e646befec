"""The async_units overlay (host_decode.writers.overlays.async_unit_overlay): per block and pipeline a row
"TMA in flight: <P>" whose slices are the analysis' intervals, the measured part apart from the doubt, written
by default into every Perfetto trace of a pipeline capture. Captures of tests/support/pipeline_capture.py's
K_SCHEDULE (ticks of 32 ns; its intervals are worked out in tests/unit/host_decode/analysis/test_async_units.py)."""

import pytest

import host_decode as hd
from host_decode.writers import TraceOptions
from host_decode.writers import perfetto as pf
from tests.support import perfetto_replay
from tests.support.pipeline_capture import K_IDS as IDS
from tests.support.pipeline_capture import K_SCHEDULE as SCHEDULE
from tests.support.pipeline_capture import TICK, k_capture, pipeline_entry

pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def rows(trace, **options):
    """(row name, slice name, start tick, end tick, args) of every slice on an in-flight row."""
    res = perfetto_replay.replay(pf.perfetto_bytes(trace, TraceOptions(**options)))
    origin = pf.trace_origin(trace)
    first = trace.start_ns - origin
    out = []
    for s in res["slices"]:
        d = res["tracks"][s["track"]]
        if "in flight" in d.name:
            out.append((d.name, s["name"], (s["ts"] - first) / TICK, (s["ts"] + s["dur"] - first) / TICK,
                        tuple(s["args"][a] // TICK if a != "stage" else s["args"][a]
                              for a in ("stage", "latency_min_ns", "latency_max_ns", "issue_doubt_ns",
                                        "ready_doubt_ns"))))
    return sorted(out), res


def test_rows_draw_the_intervals():
    """Level signals: exact uses are one slice issue -> ready, from the commit; a ready-bounded use is the doubt
    alone when nothing shows it was in flight past its issue. Args (ticks): stage, least and most latency, doubt
    of issue (up to the producer's next record, at most three ticks) and of ready."""
    trace = k_capture().trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    got, res = rows(trace)
    row = "TMA in flight: K"
    assert got == sorted([
        (row, "K[0]", 2, 20, (0, 16, 18, 1, 1)),
        (row, "K[0]", 27, 40, (0, 11, 13, 1, 1)),
        (row, "K[0]", 46, 60, (0, 12, 14, 1, 1)),
        (row, "K[1] (ready bounded)", 5, 31, (1, 0, 26, 1, 26)),
        (row, "K[1] (ready bounded)", 35, 52, (1, 0, 17, 1, 17)),
        (row, "K[1] (ready bounded)", 56, 71, (1, 0, 15, 3, 15)),
    ])
    tracks = [d for d in res["tracks"].values() if d.name == row]
    assert len(tracks) == 2  # one per stage, one row


def test_the_surely_in_flight_part_is_apart_from_the_doubt():
    """c1 blocked 35..44 but c2's wait passed at 41: the load was surely in flight until c1 began (35), and
    landed by 41: "K[0]" 27..35, "K[0] (ready bounded)" 35..41."""
    sched = [list(r) for r in SCHEDULE]
    sched[2][6], sched[2][8], sched[2][7] = (35, 44), (40, 41), 46
    got, _ = rows(k_capture(sched).trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")]))
    use = [g for g in got if g[2] >= 27 and g[3] <= 41 and g[1].startswith("K[0]")]
    assert use == [("TMA in flight: K", "K[0]", 27, 35, (0, 7, 14, 1, 6)),
                   ("TMA in flight: K", "K[0] (ready bounded)", 35, 41, (0, 7, 14, 1, 6))]


def test_waits_level_rows():
    """Level waits: ready measured, issue bounded: one slice from the earliest issue to ready; neither end
    measured: "(bounded)"; an open interval is not drawn."""
    ids = {"acquire": IDS["acquire"], "wait": IDS["wait"]}
    got, _ = rows(k_capture(signals=False).trace([pipeline_entry("K", ids, 2, op_type="TmaLoad")]))
    assert [(g[1], g[2], g[3]) for g in got] == sorted([
        ("K[0] (issue bounded)", 1, 20), ("K[0] (issue bounded)", 27, 40), ("K[0] (issue bounded)", 46, 60),
        ("K[1] (bounded)", 4, 34), ("K[1] (bounded)", 34, 52)])


def test_drawn_by_default_and_only_then():
    trace = k_capture().trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    assert "async_units" in TraceOptions().overlays
    assert rows(trace, overlays=("pipelines",))[0] == []
    assert pf.perfetto_bytes(trace) == pf.perfetto_bytes(trace, TraceOptions(overlays=("pipelines", "async_units")))


def test_the_writer_notes_what_it_drew(tmp_path):
    trace = k_capture().trace([pipeline_entry("K", IDS, 2, op_type="TmaLoad")])
    stats = hd.write_trace(trace, tmp_path / "t.pftrace")
    assert "6 async-unit intervals (3 exact) on 1 rows" in stats.notes
