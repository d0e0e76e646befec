"""`ikp report` end to end in headless Chromium (Debian's chromium + chromium-driver, driven by Selenium):
the page opens from a file:// URL with no network, logs no console errors, and clicking a region or a
source line shows exactly the instructions the embedded data says. A screenshot of each view is saved.

Skips only when Chromium, its driver or Selenium cannot be found (.ci/browser.sh installs them).
Inputs: the committed real capture (examples/basic) when present, else the synthetic markers.cu set
of tests/unit/host_decode/reports/test_report.py; the full map + hardware + source set always runs on the markers.cu
cubin.
"""

from __future__ import annotations

import pytest

from tests.support.browser import console_errors, count, goto, open_page
from tests.support.report import (
    NAMES,
    REAL_CAPTURE,
    SOURCE,
    full_report,
    real_cli_args,
    synthetic_buffer,
)


def selection_text(driver) -> str:
    return driver.find_element("id", "selection").text


def selected(driver, css: str, attribute: str) -> list[int]:
    return sorted(int(e.get_attribute(attribute)) for e in driver.find_elements("css selector", css))


def selected_once_settled(driver, css: str, attribute: str, expected: list[int], timeout: float = 10) -> list[int]:
    """The selection after a click, waiting up to `timeout` s for it to equal `expected` (the page renders
    a view after its hash change, which a loaded 2-core CI machine can take a moment to do)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout).until(lambda d: selected(d, css, attribute) == expected)
    except TimeoutException:
        pass
    return selected(driver, css, attribute)


# --------------------------------------------------------------------------------------- the full page


def test_full_report_clicks(browser, inputs, shots, tmp_path):
    _, page, data = full_report(inputs)
    path = tmp_path / "report.html"
    path.write_text(page)
    open_page(browser, path)
    assert browser.title == "ikp report: markers"
    assert count(browser, "#overview-regions tbody tr") == len(data["regions"])
    browser.save_screenshot(str(shots / "overview.png"))

    # click the region "body" in the overview: the code view shows the PCs whose region path holds it
    body = next(r for r in data["regions"] if r["region"] == "body")
    browser.find_element("css selector", f'#overview-regions tr[data-key="{body["key"]}"]').click()
    assert browser.execute_script("return location.hash") == "#code"
    stacks = [data["paths"][p]["stack"] or [] for p in data["pcs"]["path"]]
    expected = [i for i, st in enumerate(stacks) if body["event"] in st]
    assert expected, "the map puts no instruction in body"
    assert selected_once_settled(browser, "#sass-pane .r.sel", "data-index", expected) == expected
    text = selection_text(browser)
    assert text.startswith("region body") and f"{len(expected)} instruction(s)" in text
    lines = sorted({data["pcs"]["line"][i] for i in expected if data["pcs"]["line"][i] >= 1})
    assert selected_once_settled(browser, "#source-pane .ln.sel", "data-line", lines) == lines
    browser.save_screenshot(str(shots / "code-region.png"))

    # click the source line of body's FMA: its instructions, and the region it is in
    fma = next(i + 1 for i, t in enumerate(SOURCE.read_text().splitlines()) if "acc = acc * 1.5f + in[i];" in t)
    line_el = browser.find_element("css selector", f'#source-pane .ln[data-line="{fma}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", line_el)
    line_el.click()
    on_line = [i for i, line in enumerate(data["pcs"]["line"]) if line == fma]
    assert on_line
    assert selected_once_settled(browser, "#sass-pane .r.sel", "data-index", on_line) == on_line
    text = selection_text(browser)
    assert text.startswith(f"line {fma} (in ") and "body" in text and f"{len(on_line)} instruction(s)" in text
    samples = sum(data["pcs"]["metrics"]["samples_attributed"][i] for i in on_line)
    assert f"{samples:g} samples" in text or "k samples" in text
    browser.save_screenshot(str(shots / "code-line.png"))

    # a region with nested regions selects its own instructions and those of the regions inside it
    outer = next(r for r in data["regions"] if r["region"] == "outer")
    browser.find_element("css selector", f'.reglist div[data-event="{outer["event"]}"]').click()
    inside = [i for i, st in enumerate(stacks) if outer["event"] in st]
    assert len(inside) > len([i for i, st in enumerate(stacks) if st[-1:] == [outer["event"]]])
    assert count(browser, "#sass-pane .r.sel") == len(inside)
    # a map path selects itself and the paths below it
    slow = next(p for p in data["paths"] if p["path"] == "outer/slow")
    browser.find_element("css selector", f'.reglist div[data-path="{slow["index"]}"]').click()
    assert count(browser, "#sass-pane .r.sel") == slow["instructions"]
    assert selection_text(browser).startswith("path outer/slow")

    # regions view: one histogram per region, one bar per SM
    goto(browser, "regions")
    assert count(browser, "svg.hist") == len(data["regions"])
    assert count(browser, "#sm-chart rect") == len(data["sm"]) == 4
    browser.save_screenshot(str(shots / "regions.png"))

    # hardware view: exclusive rows with samples, then inclusive ones
    goto(browser, "hardware")
    assert "data matches the map" in browser.find_element("id", "hw-check").text
    exclusive = [r for r in data["hardware"]["exclusive"] if r["samples"] or r.get("inst_executed")]
    assert count(browser, "#hw-table tbody tr") == len(exclusive)
    browser.find_element("id", "hw-inclusive").click()
    inclusive = [r for r in data["hardware"]["inclusive"] if r["samples"] or r.get("inst_executed")]
    assert count(browser, "#hw-table tbody tr") == len(inclusive)
    assert count(browser, "#stall-chart rect") > 0
    browser.save_screenshot(str(shots / "hardware.png"))

    assert console_errors(browser) == []


def test_real_or_synthetic_capture_without_map(browser, shots, tmp_path):
    """The committed real capture when present (else a synthetic one): timeline views work and the
    hardware / code views say what is missing and how to collect it."""
    from host_decode.load.capture import load_capture, save_capture
    from host_decode.reports.html import build_report_data, render_html

    capture = REAL_CAPTURE if REAL_CAPTURE.exists() else save_capture(tmp_path / "c.npy", synthetic_buffer(), NAMES)
    trace = load_capture(capture)
    data = build_report_data(trace, capture_path=str(capture))
    path = tmp_path / "report.html"
    path.write_text(render_html(data))
    open_page(browser, path)
    assert count(browser, "#overview-regions tbody tr") == len(data["regions"]) > 0
    assert count(browser, '[data-missing="hardware"]') == 1
    goto(browser, "hardware")
    assert count(browser, '[data-missing="map"]') == 1 and "ncu" in browser.find_element("id", "view-hardware").text
    goto(browser, "code")
    assert count(browser, '#view-code [data-missing="source"]') == 1
    assert count(browser, '#view-code [data-missing="map"]') == 1
    first = data["regions"][0]
    browser.find_element("css selector", f'.reglist div[data-event="{first["event"]}"]').click()
    assert selection_text(browser).startswith(f"region {first['region']}")
    goto(browser, "regions")
    assert count(browser, "svg.hist") == len(data["regions"])
    browser.save_screenshot(str(shots / ("real-regions.png" if REAL_CAPTURE.exists() else "trace-only-regions.png")))
    assert console_errors(browser) == []


def test_page_makes_no_network_requests(browser, inputs, tmp_path):
    """Everything is inline: the page loads no resource but itself."""
    _, page, _ = full_report(inputs)
    path = tmp_path / "report.html"
    path.write_text(page)
    open_page(browser, path)
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls == []
    assert not any(tag in page for tag in ("<link ", "src=\"http", "src='http", "@import", "url(http"))


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed yet")
def test_real_capture_clicks(browser, shots, tmp_path):
    """The committed H200 capture with its kernel's map and source (what docs/report.png shows)."""
    from host_decode.cli import main
    from host_decode.reports.html import extract_data

    path = tmp_path / "real.html"
    assert main(["report", *real_cli_args(tmp_path), "-o", str(path)]) == 0
    data = extract_data(path.read_text())
    open_page(browser, path, "code")
    compute = next(r for r in data["regions"] if r["region"] == "compute")
    browser.find_element("css selector", f'.reglist div[data-event="{compute["event"]}"]').click()
    pcs = data["pcs"]
    expected = [i for i, p in enumerate(pcs["path"]) if compute["event"] in (data["paths"][p]["stack"] or [])]
    assert expected and count(browser, "#sass-pane .r.sel") == len(expected)
    assert selection_text(browser).startswith(f"region compute: {len(expected)} instruction(s)")
    browser.save_screenshot(str(shots / "real-code-region.png"))
    # the FMA line of the consumer: its instructions are all in tile/compute
    fma = next(i + 1 for i, t in enumerate(data["source"]["lines"]) if "acc = acc * 0.999 + v" in t)
    browser.find_element("css selector", f'#source-pane .ln[data-line="{fma}"]').click()
    mine = set(data["source"]["pcs_of_file"] or range(len(pcs["pc"])))
    on_line = [i for i, line in enumerate(pcs["line"]) if line == fma and i in mine]
    assert on_line and count(browser, "#sass-pane .r.sel") == len(on_line)
    assert {data["paths"][pcs["path"][i]]["path"] for i in on_line} == {"tile/compute"}
    assert selection_text(browser).startswith(f"line {fma} (in tile, compute)")
    goto(browser, "overview")
    assert count(browser, "#overview-regions tbody tr") == len(data["regions"])
    assert "lost" in browser.find_element("id", "loss").text
    assert console_errors(browser) == []


@pytest.mark.parametrize("kind", ["cupti", "nvbit"])
def test_partial_hardware_data_renders(browser, inputs, tmp_path, kind):
    """Samples without execution counts (CUPTI) and counts without samples (NVBit) both render."""
    from tests.support.report import counts_only_table, sampling_only_table

    table = sampling_only_table(inputs["region_map"], inputs) if kind == "cupti" else counts_only_table(inputs)
    _, page, data = full_report(inputs, pc_table=table)
    path = tmp_path / f"{kind}.html"
    path.write_text(page)
    open_page(browser, path, "hardware")
    rows = [r for r in data["hardware"]["exclusive"] if r.get("samples") or r.get("inst_executed")]
    assert count(browser, "#hw-table tbody tr") == len(rows) > 0
    goto(browser, "code")
    browser.find_element("css selector", '.reglist div[data-event="2"]').click()
    assert "instruction(s)" in selection_text(browser)
    assert console_errors(browser) == []
