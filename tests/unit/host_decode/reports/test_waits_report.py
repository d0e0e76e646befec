"""The report's "Waits" view: its data (analysis.pipelines.view_data) and, in headless Chromium when
available (.ci/browser.sh), the tab, tables and critical-path bar it draws, with no console error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.browser import start_chromium
from test_waits import GROUPS, TICK, fa_like, k_pipeline

from host_decode.reports.html import build_report_data, render_html


def synthetic_page(tmp_path: Path) -> tuple[Path, dict]:
    trace = fa_like().trace([k_pipeline()], kernel="synthetic_fa")
    data = build_report_data(trace)
    path = tmp_path / "report.html"
    path.write_text(render_html(data))
    return path, data


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




@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory)
    yield driver
    driver.quit()


def test_waits_view_in_chromium(browser, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    path, data = synthetic_page(tmp_path)
    browser.get(path.resolve().as_uri() + "#overview")
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return !!(window.__ikp && window.__ikp.ready)"))
    browser.find_element("id", "tab-waits").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements("id", "view-waits"))
    rows = [
        [td.text for td in tr.find_elements("css selector", "td")]
        for tr in browser.find_elements("css selector", "#waits-rows tbody tr")
    ]
    # pipeline, op, role, lanes, uses, waits, blocked, passed, no record, ...
    assert [r[:9] for r in rows] == [
        ["K", "acquire", "producer", "1", "4", "4", "2", "2", "0"],
        ["K", "wait", "mma0", "1", "4", "4", "3", "1", "0"],
        ["K", "wait", "mma1", "1", "4", "4", "2", "2", "0"],
    ]
    assert rows[0][13] == "70.6%" and rows[0][15] == "mma1 2"
    segs = browser.find_elements("css selector", "#waits-critical-bar rect")
    assert len(segs) == len(data["waits"]["critical_path"]["segments"]) == 3
    assert len(browser.find_elements("css selector", "#view-waits svg.counter path")) == 1
    assert "[object" not in browser.find_element("id", "view-waits").text
    assert "Every wait matched" in browser.find_element("id", "waits-unmatched").text
    assert browser.find_element("id", "tab-waits").get_attribute("class") == "active"
    # back and forth through report.js's own tabs: the view comes back intact
    browser.find_element("id", "tab-regions").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements("id", "view-regions"))
    browser.execute_script("location.hash = '#waits'")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements("id", "view-waits"))
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors + list(browser.execute_script("return window.__ikp.errors")) == []
    shots = os.environ.get("IKP_REPORT_SCREENSHOTS")
    if shots:
        browser.save_screenshot(str(Path(shots) / "waits.png"))
