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
