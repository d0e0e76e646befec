"""The region summary counted as a writer streams the spans (analysis.stats.RunSummary through
write_trace's spans_seen) is region_summary's, bit for bit: Perfetto one pass, one pass started over as
two (regions that cross), Chrome JSON; and `ikp decode -o` prints what `ikp decode` alone prints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from host_decode.analysis.stats import RunSummary, pair_histograms, region_summary
from host_decode.cli import main
from host_decode.writers import lanes as ln
from host_decode.writers import write_trace
from host_decode.writers.order import trace_origin
from tests.support.perfetto_replay import random_trace

CAPTURE = Path(__file__).resolve().parents[4] / "examples" / "basic" / "capture.npy"


class Counting(RunSummary):
    restarts = 0

    def restart(self) -> None:
        self.restarts += 1
        super().restart()


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
@pytest.mark.parametrize("seed, regions, overlap", [(1, 30, 0.0), (2, 30, 0.3), (3, 15, 0.6), (4, 60, 0.3)])
def test_streamed_summary_is_region_summary(tmp_path, monkeypatch, suffix, seed, regions, overlap):
    monkeypatch.setattr(ln, "CHUNK_SPANS", 7)  # runs of a few lanes: a crossing lane comes late
    trace = random_trace(seed, regions=regions, overlap=overlap)
    seen = Counting(trace.spans.size)
    write_trace(trace, tmp_path / f"t{suffix}", spans_seen=seen)
    want = region_summary(trace)
    s = trace.spans
    if pair_histograms(s["group"], s["event"], (s["start_ns"], s["end_ns"])) is None:  # 60 regions: spread
        assert regions == 60 and seen.result() is None  # the caller runs region_summary
        return
    assert want.size and seen.result().tobytes() == want.tobytes()
    # made, then each stream's start: a one-pass stream that met crossing regions started over as two passes
    crossing = bool(ln.lane_table(ln.lane_chunks(s, trace.instants), trace_origin(trace)).subs)
    assert seen.restarts == (3 if suffix == ".pftrace" and crossing else 2)


@pytest.mark.parametrize("output", ["t.pftrace", "t.json", None])
def test_decode_prints_the_same_summary_with_a_trace_output(tmp_path, capsys, output):
    assert main(["decode", str(CAPTURE), "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    if output is None:  # the table too
        assert main(["decode", str(CAPTURE)]) == 0
        table = capsys.readouterr().out
        assert main(["decode", str(CAPTURE), "-o", str(tmp_path / "t.pftrace")]) == 0
        with_trace = capsys.readouterr().out
        assert with_trace.startswith(table.split("next:")[0].rstrip("\n"))
        return
    assert main(["decode", str(CAPTURE), "--format", "json", "-o", str(tmp_path / output)]) == 0
    assert json.loads(capsys.readouterr().out) == alone
    assert alone["regions"] and np.all([r["count"] > 0 for r in alone["regions"]])
