"""The one conftest: GPU tests (@pytest.mark.gpu, tests/gpu/) skip without a CUDA device, and the fixtures
that tests of several folders share (their code lives in tests/support/)."""

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except Exception:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (runs on the GPU machine via gpu/ scripts)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """The full synthetic `ikp report` input set (tests/support/report.py; skips without nvdisasm)."""
    from tests.support.report import report_inputs

    return report_inputs(tmp_path_factory)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium driver (tests/support/browser.py; skips without Chromium)."""
    from tests.support.browser import start_chromium

    driver = start_chromium(tmp_path_factory)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """The folder the browser tests save screenshots to."""
    from tests.support.browser import screenshot_dir

    return screenshot_dir(tmp_path_factory)
