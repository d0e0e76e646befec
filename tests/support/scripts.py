"""Files that are not modules of a package (an example's run.py, a docs hook, a test kernel), loaded by
path: each call executes the file afresh as a module of its own, not registered in sys.modules.

Tests load such scripts only through `load_script`; libraries (host_decode, ikp_cute, tests.support) are
imported by name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: str | Path, name: str | None = None) -> ModuleType:
    """The module that executing `path` makes, named `name` (default: ikp_script_<folder>_<stem>)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or f"ikp_script_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
