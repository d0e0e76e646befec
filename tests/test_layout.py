"""The layout of host_decode (docs/layout.md), checked on the source with `ast`:

* every module lives in the folder of its stage, and none is over MAX_LINES lines;
* imports between the stages only run downstream of the data flow, by LAYERS:
  core <- interop / torch_traces <- load <- analysis / hardware <- writers <- reports <- cli (a stage imports
  its own folder and the stages of a lower rank; stages of one rank do not import each other; the
  package's facade, host_decode/__init__.py, names anything, lazily);
* no module imports another module's private (_underscore) names, nor reads them off an imported module;
* no `ikp` command imports another command (what commands share lives in one helper module of cli/).

Every import counts, also one inside a function. Violations known today are listed in KNOWN, each with
its owner and issue; the list is exact: a new violation fails, and so does a listed one that is gone
("stale allowlist entry": delete the line), so that KNOWN ends empty.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "host_decode"
MAX_LINES = 600
# stage -> rank (BRIEF / docs/layout.md): a stage imports its own folder and stages of a lower rank only
LAYERS = {"core": 0, "interop": 1, "torch_traces": 1, "load": 2, "analysis": 3, "hardware": 3, "writers": 4,
          "reports": 5, "cli": 6}
COMMANDS = f"{PACKAGE}.cli.commands"

# violation -> "owner, issue: what removes it". Empty it as the owners' branches land.
KNOWN = {
}


def find_modules(root: Path) -> dict[str, Path]:
    """{dotted name: path} of every module of the package under `root`."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def stage(module: str) -> str | None:
    """The stage folder of a host_decode module ('core', 'writers', ...); None for the facade."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `module`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(imported module, private name or None) for every host_decode import of `module`, anywhere in it,
    plus (module, name) for each _name read off an imported host_decode module (alias._name)."""
    path = modules[module]
    tree = ast.parse(path.read_text())
    found: list[tuple[str, str | None]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE:
                    found.append((a.name, None))
                    aliases[a.asname or a.name] = a.name  # `import host_decode.x.y` binds the dotted path
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, path.name == "__init__.py", node)
            if source.split(".")[0] != PACKAGE:
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                if sub in modules:  # `from pkg import module`
                    found.append((sub, None))
                    aliases[a.asname or a.name] = sub
                else:
                    found.append((source, a.name if a.name.startswith("_") else None))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = dotted(node.value)
            if owner in aliases:
                found.append((aliases[owner], node.attr))
    return found


def dotted(node: ast.expr) -> str | None:
    """'a.b.c' for a chain of attribute reads on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def is_private_module(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def violations(root: Path = ROOT) -> set[str]:
    """Every violation of the rules above in the package under `root`, one string each (KNOWN's keys)."""
    out = set()
    modules = find_modules(root)
    for module, path in modules.items():
        rel = path.relative_to(root).as_posix()
        if len(path.read_text().splitlines()) > MAX_LINES:
            out.add(f"lines: {rel}")
        here = stage(module)
        if here is None:
            if module != PACKAGE:
                out.add(f"folder: {rel}")
            continue
        if here not in LAYERS:
            out.add(f"folder: {rel}")
            continue
        for target, private in imports(module, modules):
            there = stage(target)
            if private:
                out.add(f"private: {module} -> {target}.{private}")
            elif is_private_module(target) and there != here:
                out.add(f"private: {module} -> {target}")
            if there == here:
                pass
            elif there is None or there not in LAYERS or LAYERS[there] >= LAYERS[here]:
                out.add(f"import: {module} -> {target}")
            if module.startswith(COMMANDS + ".") and target.startswith(COMMANDS + ".") and target != module:
                out.add(f"command: {module} -> {target}")
    return out


@functools.cache
def violations_here() -> frozenset[str]:
    return frozenset(violations(ROOT))


def check(kind: str) -> None:
    found = {v for v in violations_here() if v.split(":")[0] in kind.split("|")}
    known = {v for v in KNOWN if v.split(":")[0] in kind.split("|")}
    new, stale = sorted(found - known), sorted(known - found)
    assert not new, "layout violations:\n  " + "\n  ".join(new)
    assert not stale, "stale allowlist entry (fixed: delete it from KNOWN):\n  " + "\n  ".join(stale)


def test_modules_in_stage_folders_and_short():
    check("lines|folder")


def test_imports_run_downstream():
    check("import")


def test_no_private_names_across_modules():
    check("private")


def test_commands_are_independent():
    check("command")


def test_the_checks_see_violations(tmp_path):
    """The checker itself: an upstream import, a sibling import, a private name (imported and read off a
    module alias), a command importing a command, a module outside the stage folders and a long file are
    all found."""
    files = {
        "host_decode/__init__.py": "",
        "host_decode/core/__init__.py": "",
        "host_decode/core/model.py": "from host_decode.writers import perfetto\n",
        "host_decode/writers/__init__.py": "",
        "host_decode/writers/perfetto.py": "from host_decode.core.model import _hidden\n" + "x = 1\n" * (MAX_LINES + 1),
        "host_decode/analysis/__init__.py": "",
        "host_decode/analysis/regions.py": "from ..hardware import join as pf\n\ndef f():\n    return pf._lane_sm\n",
        "host_decode/hardware/__init__.py": "",
        "host_decode/hardware/join.py": "",
        "host_decode/cli/__init__.py": "",
        "host_decode/cli/commands/__init__.py": "",
        "host_decode/cli/commands/a.py": "from host_decode.cli.commands import b\nfrom ...reports import html\n",
        "host_decode/cli/commands/b.py": "",
        "host_decode/reports/__init__.py": "",
        "host_decode/reports/html.py": "import host_decode.core.model\n\nx = host_decode.core.model._cache\n",
        "host_decode/misc.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert violations(tmp_path) == {
        "import: host_decode.core.model -> host_decode.writers.perfetto",
        "lines: host_decode/writers/perfetto.py",
        "private: host_decode.writers.perfetto -> host_decode.core.model._hidden",
        "import: host_decode.analysis.regions -> host_decode.hardware.join",
        "private: host_decode.analysis.regions -> host_decode.hardware.join._lane_sm",
        "command: host_decode.cli.commands.a -> host_decode.cli.commands.b",
        "private: host_decode.reports.html -> host_decode.core.model._cache",
        "folder: host_decode/misc.py",
    }


def test_the_project_stands_alone():
    """Nothing shipped points outside the repository at the steering notes: the facts live in docs/."""
    # spelled in parts so that this file does not match itself: the notes, relative or absolute, and the
    # coordination folder of the sessions that built the project
    needles = ("../" + "shared", "/work/" + "shared", "/work/" + "coord")
    skip = {".git", ".venv", "build", "dist", "node_modules", "__pycache__", ".carry", ".gpu"}
    hits = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if (
            skip & set(rel.parts)
            or any(part.endswith(".egg-info") for part in rel.parts)
            or not path.is_file()
            or path.suffix in (".npy", ".npz", ".png", ".gz", ".cubin")
        ):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if any(x in line for x in needles)]
    assert not hits, "points at the steering notes (copy the facts into docs/ and cite that):\n  " + "\n  ".join(hits)
