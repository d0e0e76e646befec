"""The one conftest: GPU tests (@pytest.mark.gpu, tests/gpu/) skip without a CUDA device; no test leaves the
CuTe DSL's compile artifacts (cutlass_*.ptx / .cubin, written into the working directory by --keep-ptx /
--keep-cubin unless a dump folder is given: ikp_cute.testing.sass.dump_options) in the checkout or the
working directory; and the fixtures that tests of several folders share (their code lives in tests/support/)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def _compile_artifacts() -> set[tuple[str, int]]:
    """(name, modification time) of the DSL's artifact files in the checkout and the working directory."""
    return {(p.name, p.stat().st_mtime_ns) for folder in {ROOT, Path.cwd()} for p in folder.glob("cutlass_*")
            if p.suffix in (".ptx", ".cubin")}


@pytest.fixture(autouse=True)
def no_compile_artifacts_left():
    """A test that compiles with --keep-ptx / --keep-cubin and no dump folder fails, naming the files."""
    before = _compile_artifacts()
    yield
    left = sorted(name for name, _ in _compile_artifacts() - before)
    if left:
        pytest.fail(f"{len(left)} CuTe DSL compile artifact(s) written into the working directory ({left[0][:80]}...): "
                    "compile with options=ikp_cute.testing.sass.dump_options(...) (or keep_options)")


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
