"""Headless Chromium for the browser tests (report pages, `ikp view`, the waits tab): one way to start it.

Needs Debian's chromium + chromium-driver and selenium (.ci/browser.sh); a test that cannot have them skips.
The flags keep Chromium off the network (the CI machine has none: background services would be refused).
"""

import shutil

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
