"""Every `from host_decode... import name` / `from ikp_cute... import name` anywhere in the repository (inside
functions too: GPU-only tests, gpu/ scripts and examples import lazily, and no CPU run executes those
lines) names a module or attribute that exists, so a moved name cannot hide until a GPU run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("host_decode", "ikp_cute")
SKIP = {".git", ".venv", "build", "dist", "site", ".gpu", "__pycache__", "node_modules"}


def project_imports():
    """(file:line, module, name) of every `from <package>... import name` of the repository."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if SKIP & set(rel.parts):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.split(".")[0] in PACKAGES:
                    for alias in node.names:
                        yield f"{rel}:{node.lineno}", node.module, alias.name


def unresolved() -> list[str]:
    missing = []
    for where, module, name in project_imports():
        try:
            owner = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing.append(f"{where}: no module {module} ({exc})")
            continue
        except ImportError:
            continue  # a module that needs what this machine lacks (cutlass, torch, a GPU) is not judged here
        if name == "*" or hasattr(owner, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ModuleNotFoundError:
            missing.append(f"{where}: {module} has no {name}")
        except ImportError:
            continue
    return missing


def test_every_project_import_resolves():
    pytest.importorskip("numpy")
    missing = unresolved()
    assert not missing, "imports of names that do not exist:\n  " + "\n  ".join(missing)
