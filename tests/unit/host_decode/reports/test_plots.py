"""PNG plots (host_decode.reports.plots): files are written with the Agg backend; layout helpers checked by hand."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from host_decode.analysis.launch import BLOCK_DTYPE
from host_decode.analysis.sessions import concat, parts_from_traces, trace_from_spans  # noqa: E402
from host_decode.cli import main  # noqa: E402
from host_decode.core.model import Names  # noqa: E402
from host_decode.reports import plots  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def two_group_trace(t0=0, sm=True):
    rows = []
    for b in range(6):
        for k in range(5):
            s = t0 + 1_000 * k + 37 * b
            rows += [(b, 0, 1, s, s + 400 + 10 * b), (b, 1, 2, s + 200, s + 900), (b, 1, 3, s + 300, s + 500, 1)]
    names = Names({1: "load", 2: "mma", 3: "inner"}, {0: "producer", 1: "consumer"})
    return trace_from_spans(rows, num_groups=2, names=names,
                            sm_of_block={b: b % 2 for b in range(6)} if sm else None, meta={"kernel": "toy"})


def test_residency_slots_by_hand():
    blocks = np.zeros(4, BLOCK_DTYPE)
    blocks["block"] = [0, 1, 2, 3]
    blocks["sm"] = [0, 0, 0, 1]
    blocks["start_ns"] = [0, 5, 10, 0]
    blocks["end_ns"] = [10, 15, 20, 5]
    # block 2 starts when block 0 ends: reuses its row; block 1 overlaps block 0: second row
    assert plots.residency_slots(blocks).tolist() == [0, 1, 0, 0]


@pytest.mark.parametrize("sm", [True, False])
def test_plot_all_writes_pngs(tmp_path, sm):
    paths = plots.plot_all(two_group_trace(sm=sm), tmp_path / "out")
    assert [p.name for p in paths] == ["histograms.png", "gantt.png", "overlap.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000


def test_gantt_of_one_launch_of_a_session(tmp_path):
    session = concat(parts_from_traces([two_group_trace(0), two_group_trace(50_000)]))
    spans, lanes = plots.launch_subset(session, 1)
    assert spans["block"].min() == 6 and spans.size == session.spans.size // 2
    with pytest.raises(ValueError, match="out of range"):
        plots.launch_subset(session, 2)
    assert plots.plot_gantt(session, tmp_path / "g.png", launch=1, max_spans=10).read_bytes().startswith(PNG)


def test_single_group_overlap_plot_says_so(tmp_path):
    t = trace_from_spans([(0, 0, 1, 0, 10)], num_groups=1)
    assert plots.plot_overlap(t, tmp_path / "o.png").exists()


def test_cli_plot(tmp_path):
    from host_decode.load.capture import save_capture
    from tests.support.buffers import B, BufferBuilder, E, F

    bb = BufferBuilder(num_blocks=2, num_groups=2, records_per_lane=8)
    for lane in range(4):
        bb.put(lane, 100, 1 + lane % 2, B).put(lane, 600 + 50 * lane, 1 + lane % 2, E)
        bb.put(lane, 700 + 50 * lane, lane // 2, F)
    cap = save_capture(tmp_path / "c.npy", bb.buf, {"events": {"1": "load", "2": "mma"}})
    assert main(["plot", str(cap), "-o", str(tmp_path / "png")]) == 0
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["gantt.png", "histograms.png", "overlap.png"]


def test_empty_trace_plots(tmp_path):
    t = trace_from_spans([], num_groups=2, num_blocks=1)
    assert all(p.read_bytes().startswith(PNG) for p in plots.plot_all(t, tmp_path))
