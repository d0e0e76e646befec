"""Public names that load on first use (PEP 562): the one lazy-import mechanism of this project.

A package lists ``{public name: "module:attribute"}`` and binds what :func:`lazy_exports` returns to its
module-level ``__getattr__`` and ``__dir__``. Importing the package then costs nothing but the table;
the first access of a name imports its module and stores the value in the package's namespace, so
later accesses are plain attribute lookups.

Invariants a change could break:
* Every name of the table resolves to the object its module defines (identity, not a copy), and an
  unknown name raises AttributeError, never RecursionError (tests/unit/host_decode/test_public_api.py).
* ``from package import *`` works: every name in ``__all__`` is in the table
  (tests/unit/host_decode/test_public_api.py).
* ``import host_decode`` imports no numpy, and ``import ikp_cute`` neither torch nor cutlass
  (tests/unit/host_decode/test_public_api.py, tests/unit/ikp_cute/test_device_compile.py::test_lazy_names_resolve).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """-> (__getattr__, __dir__) for `package` (its __name__) whose names in `table` load on first use.
    Module paths may be relative to the package (".session:Session")."""
    for name, target in table.items():
        module, sep, attr = target.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"{package}: lazy name {name!r} -> {target!r} is not 'module:attribute'")

    def __getattr__(name: str) -> object:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module, package), attr)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
