"""What bounded a step (host_decode/analysis/flag_paths.py), checked through `ikp waits --format json` on
synthetic captures whose answer is known: rank clocks with known offsets (and estimates off by less than their
stated error), a delay injected on one rank's block or one megakernel task."""

import json

import numpy as np
import pytest

from host_decode.analysis.flag_paths import analyze_flags, flags_summary
from host_decode.analysis.sessions import load_trace
from host_decode.cli import main
from tests.support.flag_captures import RankCapture, signal_site, wait_site
from tests.support.flag_scenarios import T0, all_gather, megakernel


def waits_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["waits", *map(str, args), "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("world", [2, 8])
@pytest.mark.parametrize("delay", [(1, 2, 20_000), (0, 0, 7_500)])
def test_all_gather_delay_is_found(tmp_path, capsys, world, delay):
    truth = all_gather(tmp_path, world, blocks=4, delay=delay, seed=world)
    assert len({int(x) for x in truth["true_offset"]}) == world  # every rank on a clock of its own
    data = waits_json(capsys, tmp_path)
    assert [r["rank"] for r in data["ranks"]] == list(range(world))
    assert data["match"]["matched"] == data["events"]["waits"] > 0
    assert data["clock"]["error_bound_ns"] == 100 + 100 + 32 and data["clock"]["clock_residual"] == 0
    step = data["steps"][0]
    head = step["head"]
    assert (head["rank"], head["block"]) == (truth["rank"], truth["block"])
    assert abs(head["late_start_ns"] - truth["delay_ns"]) < 1000
    # the path crosses ranks: the block that ended last waited on the delayed block's flag
    last = step["chain"][0]
    assert last["rank"] != truth["rank"]
    released = last["waits"][0]["released_by"]
    assert (released["rank"], released["block"]) == (truth["rank"], truth["block"])
    assert last["waits"][0]["flag"] == f"flags@rank{last['rank']}[{truth['rank'] * 4 + truth['block']}]"
    # the links tile the path in time order
    links = step["links"]
    assert all(a["end_ns"] == b["start_ns"] for a, b in zip(links, links[1:]))
    assert step["path_ns"] == links[-1]["end_ns"] - links[0]["start_ns"]


def test_without_the_offsets_the_delay_is_not_recovered(tmp_path, capsys):
    """The offsets matter: the same captures with their clock keys removed put the ranks 10s of ms apart."""
    all_gather(tmp_path, 2, blocks=4, delay=(1, 2, 20_000), seed=2)
    for side in tmp_path.glob("*.json"):
        d = json.loads(side.read_text())
        d.pop("clock_offset_ns")
        side.write_text(json.dumps(d))
    data = waits_json(capsys, tmp_path)
    head = data["steps"][0]["head"]
    assert abs(head["late_start_ns"] - 20_000) > 1000 or data["match"]["matched"] < data["events"]["waits"]


@pytest.mark.parametrize("offset", [0, -3_000_000])
def test_megakernel_delayed_task_is_found(tmp_path, capsys, offset):
    truth = megakernel(tmp_path, delay_ns=15_000, clock_offset_ns=offset)
    data = waits_json(capsys, tmp_path / "megakernel.npy", "--rank", 0)
    step = data["steps"][0]
    assert step["rank"] == 0 and data["match"]["matched"] == data["events"]["waits"]
    work = [x for x in step["links"] if x["kind"] == "work" and x["regions"]]
    region, link = max(((r, x) for x in work for r in x["regions"]), key=lambda rx: rx[0]["excess_ns"])
    assert region["region"] == "l1_task" and link["block"] == truth["block"]
    assert abs(region["excess_ns"] - truth["delay_ns"]) < 1000
    # the delayed task's block released the wait the path took
    released = [x for x in step["links"] if x["kind"] == "released"]
    assert any(x["released_by"]["block"] == truth["block"] for x in released)
    assert released[0]["flag"] == f"ready@rank0[{truth['row_block']}]"


def residual_captures(tmp_path, skew_ns: int, error_ns: int):
    """Rank 0 signals at true time T0 + 1000; rank 1's wait ends 50 ns later. Rank 1's clock estimate is off by
    `skew_ns` (stated error `error_ns`): on the common clock its wait ends before the signal."""
    sites = [signal_site(1, "p.py:1", scope="sys"), wait_site(2, "p.py:2", expected=1, scope="sys")]
    buffers = [{"name": "f", "owner_rank": 1, "base": 0x7000_0000_0000, "bytes": 4, "elem_bytes": 4}]
    a = RankCapture(rank=0, num_blocks=1, sites=sites, flag_buffers=buffers, clock_error_ns=error_ns)
    a.signal(0, 0, 1, T0 + 1000, 0x7000_0000_0000)
    a.save(tmp_path / "r0.npy")
    b = RankCapture(rank=1, num_blocks=1, sites=sites, flag_buffers=buffers, clock_offset_ns=-skew_ns,
                    clock_error_ns=error_ns)
    b.wait(0, 0, 2, T0, T0 + 1050, 0x7000_0000_0000)
    b.region(0, 0, 5, T0 + 1050, T0 + 3000)  # then works: its block ends last
    b.save(tmp_path / "r1.npy")


def test_clock_residual_is_clamped_and_counted(tmp_path, capsys):
    residual_captures(tmp_path, skew_ns=150, error_ns=200)
    trace = load_trace([tmp_path])
    fa = analyze_flags(trace)
    assert fa.error_bound_ns == 200 + 200 + 32
    flows = fa.flows()
    assert flows.size == 1 and flows["kind"][0] == 1  # drawn as a clock-residual release
    assert flows["src_ns"][0] == flows["dst_ns"][0] == T0 + 1050 - 150
    data = flags_summary(trace)
    assert data["clock"]["clock_residual"] == 1 and data["match"]["late_within_error"] == 1
    released = [x for x in data["steps"][0]["links"] if x["kind"] == "released"][0]
    assert released["clock_residual"] and released["start_ns"] <= released["end_ns"]


def test_a_residual_beyond_the_bound_is_not_matched(tmp_path):
    residual_captures(tmp_path, skew_ns=900, error_ns=200)
    data = flags_summary(load_trace([tmp_path]))
    assert data["match"]["signal_after_wait"] == 1 and data["match"]["matched"] == 0
    assert data["clock"]["clock_residual"] == 0


def test_no_flow_starts_after_its_wait(tmp_path):
    all_gather(tmp_path, 8, blocks=4, seed=3, error_ns=400)
    fa = analyze_flags(load_trace([tmp_path]))
    flows = fa.flows()
    assert flows.size and (flows["src_ns"] <= flows["dst_ns"]).all()
    assert np.unique(flows["src_lane"] // 2 // 4).size > 1  # flows leave several ranks (8 lanes a rank)
