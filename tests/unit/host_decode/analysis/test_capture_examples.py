"""The committed real captures of issue 21 (H100, gpu/capture_suite.py), decoded in CI without a GPU:

* examples/cuda_graph/captures/{own,fa4}: a kernel captured in a torch.cuda.CUDAGraph, 100 replays,
  window on replays 50-59: ten launches, each its own capture, consecutive launch indices, nothing lost;
* examples/serving_loop/captures: 1,000 steps of 2 FA4 layers, steps 500-509 recorded (20 launches),
  merged with the torch.profiler trace of the same steps (every launch matched to its own kernel slice).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[4]
GRAPH = ROOT / "examples" / "cuda_graph" / "captures"
SERVING = ROOT / "examples" / "serving_loop"


def sidecars(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("launch_*.json"))]


@pytest.mark.parametrize("kernel, spans_per_launch, lanes", [("own", 512, 32), ("fa4", 192, 48)])
def test_graph_replays_decode_as_one_session(kernel, spans_per_launch, lanes):
    from host_decode.analysis.sessions import load_parts

    directory = GRAPH / kernel
    sides = sidecars(directory)
    indices = [s["launch_index"] for s in sides]
    first_replay = indices[0] - 50  # window on replays 50-59 of 100
    assert indices == list(range(first_replay + 50, first_replay + 60))
    ring = sides[0]["ring"]
    assert ring["slots"] == 10 and ring["filled"] == 10 and ring["lost_launches"] == 0
    assert ring["launches_seen"] == first_replay + 100
    parts = load_parts([directory])
    assert [p.launch_index for p in parts] == indices
    for part in parts:
        trace = part.trace
        assert trace.loss.lost == 0 and trace.spans.size == spans_per_launch
        assert trace.num_lanes == lanes and (trace.lanes["finalize_ns"] >= 0).all()


def test_graph_replays_are_distinct_launches_in_time():
    """Each slot holds its own replay: launch start times strictly increase with the launch index."""
    from host_decode.analysis.sessions import load_parts

    starts = [int(p.trace.spans["start_ns"].min()) for p in load_parts([GRAPH / "fa4"])]
    assert all(b > a for a, b in zip(starts, starts[1:]))


def test_ikp_stats_reads_the_serving_session_with_nothing_lost(capsys):
    from host_decode.cli import main

    assert main(["stats", str(SERVING / "captures"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["launches"] == 20 and out["records_lost"] == 0
    result = json.loads((SERVING / "result.json").read_text())
    assert result["steps"] == 1000 and result["recorded_steps"] == [500, 510] and result["ok"]
    assert [s["launch_index"] for s in sidecars(SERVING / "captures")] == result["expected"]


def test_serving_session_merges_into_the_torch_trace(tmp_path):
    from host_decode.cli import main

    out = tmp_path / "merged.json.gz"
    rc = main(["merge", str(SERVING / "captures"), "--torch", str(SERVING / "torch_trace.json.gz"),
               "--kernel", "InstrumentedFlashAttentionForwardSm90", "-o", str(out)])
    assert rc == 0 and out.exists()
    import gzip

    merged = json.loads(gzip.open(out).read())
    alignment = merged["ikp_alignment"]
    assert alignment["consistent"] and alignment["absolute"]
    assert alignment["occurrences"] == list(range(20))  # each launch on its own FA4 slice, in order
    assert np.isfinite(alignment["accuracy_ns"]) and alignment["accuracy_ns"] < 5_000
