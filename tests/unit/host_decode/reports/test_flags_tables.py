"""The console tables of flags (host_decode/reports/tables/flags.py) show the numbers of `ikp waits --format
json`: who bounded each step, what it waited on and who released it, the head's lateness and its regions."""

import io

import pytest

from host_decode.analysis.flag_paths import flags_summary
from host_decode.analysis.sessions import load_trace
from host_decode.reports.tables.console import make_console
from host_decode.reports.tables.flags import print_flags, us
from tests.support.flag_scenarios import all_gather, megakernel


def shown(data: dict, width: int) -> str:
    out = io.StringIO()
    print_flags(data, make_console(file=out, width=width))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 120, 200])
def test_tables_show_the_json_numbers(tmp_path, width):
    all_gather(tmp_path, 4, blocks=2, delay=(2, 1, 20_000), seed=11)
    data = flags_summary(load_trace([tmp_path]))
    text = shown(data, width)
    prose = " ".join(text.split())  # sentences may wrap at the console's width
    step = data["steps"][0]
    assert f"critical path {us(step['path_ns'])} us" in prose
    head = step["head"]
    assert f"path starts on rank {head['rank']} block {head['block']}, {us(head['late_start_ns'])} us" in prose
    for c in step["chain"]:
        assert us(c["work_ns"]) in text
        for w in c.get("waits", []):
            assert w["flag"] in text and us(w["wait_ns"]) in text
            by = w["released_by"]
            assert f"rank {by['rank']} block {by['block']} warp {by['warp']}" in text
    for r in data["per_rank"]:
        assert us(r["wait_ns"]) in text
    for r in data["ranks"]:
        assert str(r["clock_offset_ns"]) in text
    assert f"within {data['clock']['error_bound_ns']} ns" in prose


def test_regions_that_made_the_path_late_are_listed(tmp_path):
    megakernel(tmp_path, delay_ns=15_000)
    data = flags_summary(load_trace([tmp_path / "megakernel.npy"]))
    text = shown(data, 120)
    late = [r for link in data["steps"][0]["links"] if link["kind"] == "work" for r in link["regions"]
            if r["excess_ns"] > 0]
    assert late and "regions on the path longer than their median" in text
    for r in late:
        assert us(r["excess_ns"]) in text and us(r["median_ns"]) in text
