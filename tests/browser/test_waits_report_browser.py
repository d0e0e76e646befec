"""The report's "Waits" view in headless Chromium when available (.ci/browser.sh): the tab, tables and
critical-path bar it draws, with no console error (its data: tests/unit/host_decode/reports/test_waits_report.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.waits import synthetic_page


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
