"""The report's "Waits" view: its data (analysis.pipelines.view_data); tests/browser/test_waits_report_browser.py
opens the page in headless Chromium."""

from __future__ import annotations

from host_decode.reports.html import build_report_data
from tests.support.waits import GROUPS, TICK, fa_like, synthetic_page


def test_waits_view_data(tmp_path):
    _, data = synthetic_page(tmp_path)
    w = data["waits"]
    assert [(r["role"], r["op"], r["waits"], r["blocked"], r["total_ns"]) for r in w["rows"]] == [
        ("producer", "acquire", 4, 2, 24 * TICK),
        ("mma0", "wait", 4, 3, 15 * TICK),
        ("mma1", "wait", 4, 2, 7 * TICK),
    ]
    (c,) = w["counters_shown"]
    assert c["v"] == [1, 2, 1, 2, 1, 0, 1, 0] and [t // TICK for t in c["t"]] == [2, 5, 20, 21, 30, 33, 34, 45]
    assert w["critical_path"]["segments"][0]["role"] == "mma1"


def test_waits_view_with_unreadable_metadata_keeps_the_report(tmp_path):
    trace = fa_like().trace([{"name": "K", "num_stages": 0, "ids": {"wait": 20}}])
    data = build_report_data(trace)
    assert "num_stages must be an integer >= 1" in data["waits"]["error"] and data["regions"]


def test_no_waits_view_without_pipeline_metadata(tmp_path):
    from host_decode.core.decoder import decode

    data = build_report_data(decode(fa_like().buffer(), names={"groups": GROUPS}))
    assert data["waits"] is None
