"""Headless Chromium for the browser tests (report pages, `ikp view`, the waits tab): one way to start it.

Needs Debian's chromium + chromium-driver and selenium (.ci/browser.sh); a test that cannot have them skips.
The flags keep Chromium off the network (the CI machine has none: background services would be refused).
"""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def start_chromium(tmp_path_factory, window: str = "1400,1000", timeout_s: int = 60):
    """A selenium driver for a fresh headless Chromium with browser console logging on (skips the test
    when Chromium, chromedriver or selenium is missing). The caller quits it."""
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("Chromium or chromedriver not found (apt-get install chromium chromium-driver; .ci/browser.sh)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (.ci/browser.sh)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--window-size={window}", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(timeout_s)
    driver.set_script_timeout(timeout_s)
    return driver


def screenshot_dir(tmp_path_factory) -> Path:
    """Where the browser tests save screenshots: $IKP_REPORT_SCREENSHOTS, else a temporary folder."""
    d = Path(os.environ.get("IKP_REPORT_SCREENSHOTS") or tmp_path_factory.mktemp("report-screenshots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_page(driver, path: Path, view: str = "overview"):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.resolve().as_uri() + "#" + view)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return !!(window.__ikp && window.__ikp.ready)"))
    driver.get_log("browser")  # start each page with an empty console


def goto(driver, view: str):
    driver.execute_script("location.hash = arguments[0]", "#" + view)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda d: d.find_elements("id", "view-" + view))


def console_errors(driver) -> list[str]:
    logs = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    return logs + list(driver.execute_script("return window.__ikp.errors"))


def count(driver, css: str) -> int:
    return len(driver.find_elements("css selector", css))
