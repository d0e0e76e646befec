"""mkdocs hook: API pages generated from the public facades, rendered by mkdocstrings at build time.

Two directives, each on a line of its own in a page:

* ``<!-- ikp:api PACKAGE -->``: one mkdocstrings block per name of ``PACKAGE.__all__``, in that order.
  Each name is resolved by importing the package and reading the object's ``__module__``, so a page
  follows a definition wherever the package's lazy table points (files can move; the page does not
  change). Names without a module of their own (constants) are documented through the package.
* ``<!-- ikp:api-find PACKAGE NAME... -->``: the classes or functions NAME, found by their definition
  anywhere inside PACKAGE (static analysis with griffe, nothing imported); a name defined twice, or not
  at all, fails the build naming it.

tests/docs/test_docs.py::test_api_directives_resolve guards both.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache
from pathlib import Path

DIRECTIVE = re.compile(r"^<!-- ikp:(api|api-find) ([\w.]+)((?: [\w.]+)*) -->$", re.MULTILINE)
ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, page, config, files) -> str:
    return DIRECTIVE.sub(lambda m: render(m.group(1), m.group(2), m.group(3).split()), markdown)


def render(kind: str, package: str, names: list[str]) -> str:
    paths = public_paths(package) if kind == "api" else [(n, find_definition(package, n)) for n in names]
    return "\n\n".join(f"::: {path}\n    options:\n      heading_level: 2\n      show_root_full_path: false"
                       for _, path in paths)


def public_paths(package: str) -> list[tuple[str, str]]:
    """[(name, dotted path of its definition)] for every name of package.__all__."""
    module = importlib.import_module(package)
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        where = getattr(obj, "__module__", None) if callable(obj) else None
        qual = getattr(obj, "__qualname__", name)
        out.append((name, f"{where}.{qual}" if where else f"{package}.{name}"))
    return out


@lru_cache(maxsize=None)
def _definitions(package: str) -> dict[str, list[str]]:
    import griffe

    loaded = griffe.load(package, search_paths=[str(ROOT)], resolve_aliases=False)
    found: dict[str, list[str]] = {}

    def walk(obj) -> None:
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.is_module:
                walk(member)
            elif member.is_class or member.is_function:
                found.setdefault(member.name, []).append(member.path)

    walk(loaded)
    return found


def find_definition(package: str, name: str) -> str:
    paths = _definitions(package).get(name, [])
    if len(paths) != 1:
        raise ValueError(f"ikp:api-find {package} {name}: {len(paths)} definitions ({', '.join(paths) or 'none'})")
    return paths[0]
