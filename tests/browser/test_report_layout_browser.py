"""`ikp report` at 1600x1000 in headless Chromium, on shipped captures: no view is wider than the
window, no card's content spills out of it, SASS cells are not cut, the Timeline tab draws every
embedded span and zooms, nesting is indented, per-PC samples are shown once per code path, the Code
view without a map shows line totals and a clicked region's lines are centred. No console errors.
Screenshots of every view go to $IKP_REPORT_SCREENSHOTS (else a temporary folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.browser import console_errors, count, goto, open_page
from tests.support.report import REAL_CAPTURE, real_cli_args

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ("overview", "regions", "timeline", "hardware", "code")

OVERFLOW_JS = """
const out = [];
if (document.documentElement.scrollWidth > innerWidth) out.push('page ' + document.documentElement.scrollWidth);
for (const c of document.querySelectorAll('#app main .card'))
  if (c.scrollWidth > c.clientWidth + 1) out.push('card ' + (c.querySelector('h3') || c).textContent.slice(0, 40));
for (const m of document.querySelectorAll('#app main .missing'))
  if (m.scrollWidth > m.clientWidth + 1) out.push('missing box ' + m.dataset.missing);
const rows = Array.from(document.querySelectorAll('#sass-pane .rows .r')).slice(0, 400);
for (const r of rows) for (const c of r.children)
  if (c.scrollWidth > c.clientWidth + 1 && !c.classList.contains('op')) out.push('sass cell ' + c.textContent);
return out;
"""


def build(tmp_path, name):
    from host_decode.cli import main
    from host_decode.reports.html import extract_data

    out = tmp_path / f"{name}.html"
    if name == "basic":
        args = real_cli_args(tmp_path)
    else:
        ex = ROOT / "examples" / name
        source = next(p for p in sorted(ex.glob("*.py")) if p.name != "run.py")
        args = [str(ex / "capture.npy"), "--source", str(source)]
    assert main(["report", *args, "-o", str(out)]) == 0
    return out, extract_data(out.read_text())


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed")
@pytest.mark.parametrize("name", ["basic", "fa4_sm90", "pipeline", "megakernel"])
def test_views_fit_1600x1000(browser, shots, tmp_path, name):
    browser.set_window_size(1600, 1000)
    path, _ = build(tmp_path, name)
    assert path.stat().st_size < 400_000  # small pages
    open_page(browser, path)
    for view in VIEWS:
        goto(browser, view)
        assert browser.execute_script(OVERFLOW_JS) == [], view
        browser.save_screenshot(str(shots / f"{name}-{view}.png"))
    assert console_errors(browser) == []


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed")
def test_timeline_tab_draws_and_zooms(browser, tmp_path):
    browser.set_window_size(1600, 1000)
    path, data = build(tmp_path, "fa4_sm90")
    open_page(browser, path, "timeline")
    T = data["timeline"]
    shown = [b for b in T["blocks"] if b["shown"]]
    assert [b["label"] for b in shown] == ["fastest", "median", "slowest"]
    for B in shown:
        sel = f'.tl-block[data-block="{B["block"]}"] rect.span'
        assert count(browser, sel) == len(B["spans"]["start"])
        names = browser.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent)",
            f'.tl-block[data-block="{B["block"]}"] text.tl-group')
        assert names == [data["groups"][str(g)] for g in B["groups"]]
    assert count(browser, "#tl-curves path.curve") == len(T["curves"]["series"])
    slow = shown[-1]
    svg_sel = f'svg[data-block="{slow["block"]}"]'
    before = count(browser, f"{svg_sel} rect.span")
    browser.execute_script("""const s = document.querySelector(arguments[0]); const r = s.getBoundingClientRect();
      const at = {deltaY: -400, clientX: r.left + 200, clientY: r.top + 20, bubbles: true, cancelable: true};
      for (let i = 0; i < 6; i++) s.dispatchEvent(new WheelEvent('wheel', at));""", svg_sel)
    zoomed = count(browser, f"{svg_sel} rect.span")
    assert 0 < zoomed < before  # zoomed in: spans outside the window are not drawn
    browser.execute_script(
        "document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))", svg_sel)
    assert count(browser, f"{svg_sel} rect.span") == before
    browser.find_element("css selector", f'#tl-pick input[data-block="{slow["block"]}"]').click()
    assert not browser.find_element("css selector", f'.tl-block[data-block="{slow["block"]}"]').is_displayed()
    # any other block can be added from the picker
    other = next(b for b in T["blocks"] if not b["shown"])
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "tl-add")).select_by_value(str(other["block"]))
    assert count(browser, f'.tl-block[data-block="{other["block"]}"] rect.span') == len(other["spans"]["start"])
    assert console_errors(browser) == []


@pytest.mark.skipif(not REAL_CAPTURE.exists(), reason="examples/basic/capture.npy not committed")
def test_nesting_shared_code_and_code_view(browser, tmp_path):
    browser.set_window_size(1600, 1000)
    path, data = build(tmp_path, "basic")
    open_page(browser, path)
    pads = browser.execute_script("""return Array.from(document.querySelectorAll('#overview-regions tbody tr')).map(
      (tr) => [tr.dataset.key, parseFloat(tr.querySelector('.tree').style.paddingLeft) || 0])""")
    parent = {r["key"]: r["parent_key"] for r in data["regions"]}
    for key, pad in pads:
        assert (pad > 0) == (parent[key] is not None), key
    # tile runs in both groups: one code path, so its share of samples appears once
    shared = [r for r in data["regions"] if r.get("hw") and r["hw"]["shared_by"]]
    text = browser.find_element("id", "overview-regions").text
    if shared:
        assert text.count("same code as") == len(shared) - len({r["event"] for r in shared})
    assert "bottleneck" not in text.lower()
    # a clicked region's first source line ends up near the middle of the source pane
    goto(browser, "code")
    compute = next(r for r in data["regions"] if r["region"] == "compute")
    browser.find_element("css selector", f'.reglist div[data-event="{compute["event"]}"]').click()
    pos = browser.execute_script("""const p = document.getElementById('source-pane').getBoundingClientRect();
      const l = document.querySelector('#source-pane .ln.sel').getBoundingClientRect();
      return [(l.top + l.bottom) / 2 - p.top, p.height, document.getElementById('source-pane').scrollTop];""")
    mid, height, scrolled = pos
    assert scrolled == 0 or abs(mid - height / 2) < height * 0.2, pos
    if data["source"].get("def_lines"):
        assert "Decorator / def lines" in browser.find_element("id", "def-note").text
    assert console_errors(browser) == []


def test_code_view_without_map_shows_line_totals(browser, tmp_path):
    browser.set_window_size(1600, 1000)
    path, data = build(tmp_path, "pipeline")
    open_page(browser, path, "code")
    lt = data["source"]["line_time"]
    assert lt and count(browser, "#source-pane .cost.time") == len(lt)
    widths = browser.execute_script(
        "return ['source-pane', 'sass-pane'].map((id) => document.getElementById(id).clientWidth)")
    assert widths[0] > 2 * widths[1]  # the source takes the width
    assert console_errors(browser) == []
