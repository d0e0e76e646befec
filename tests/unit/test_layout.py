"""The layout of host_decode and ikp_cute (docs/layout.md), checked on the source with `ast`:

* no module of either package is over MAX_LINES lines;
* host_decode: every module lives in the folder of its stage, and imports between the stages only run
  downstream of the data flow, by LAYERS: core <- interop / torch_traces <- load <- analysis / hardware <-
  writers <- reports <- cli (a stage imports its own folder and the stages of a lower rank; stages of one rank do not
  import each other; the package's facade, host_decode/__init__.py, names anything, lazily); host_decode
  never imports ikp_cute;
* ikp_cute: every module belongs to one of IKP_LAYERS, and imports none of a higher rank (a layer imports
  itself and the layers below it; names taken from the facade, ``from ikp_cute import Profiler``, count as
  imports of the module the facade loads them from); ikp_cute may import host_decode;
* no module imports another module's private (_underscore) names, nor reads them off an imported module,
  in or across the two packages;
* no `ikp` command imports another command (what commands share lives in one helper module of cli/).
* tests/ is laid out like the code: every folder of test modules is a package (unique module names), no
  test module sits at the top of tests/ or in tests/support; a test imports no other test module and no
  module of the repository outside tests.support, tests.fixtures and the packages (host_decode, ikp_cute,
  cuda_include, the examples and benchmarks it tests), loads no gpu/ script, and loads scripts by path only
  through tests/support/scripts.py; @pytest.mark.gpu tests live in tests/gpu/, and every test there is one.

Every import counts, also one inside a function. Violations known today are listed in KNOWN, each with
what removes it; the list is exact: a new violation fails, and so does a listed one that is gone
("stale allowlist entry": delete the line), so that KNOWN ends empty.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "host_decode"
DEVICE = "ikp_cute"
PACKAGES = (PACKAGE, DEVICE)
MAX_LINES = 600
# stage -> rank (docs/layout.md): a stage imports its own folder and stages of a lower rank only
LAYERS = {"core": 0, "interop": 1, "torch_traces": 1, "load": 2, "analysis": 3, "hardware": 3, "writers": 4,
          "reports": 5, "cli": 6}
COMMANDS = f"{PACKAGE}.cli.commands"

# ikp_cute's layers, lowest first: the rank of each top-level module or subpackage of ikp_cute. A module
# imports its own layer and lower ranks only. The facade (ikp_cute/__init__.py) names anything, lazily.
IKP_LAYERS = {
    "spec": 0, "ring": 0, "checks": 0,  # pure Python: the spec, the ring's layout and reader, trace-time checks
    "ambient": 0,  # pure Python: where profile_region(name) finds the active tracer
    "inline_ptx": 1,  # inline PTX with side effects, where the tracer emits
    "window": 2,  # the capture window's device protocol (a lane opens and ends its window)
    "recorders": 3,  # one recorder per mode, the Recorder protocol, records and lanes
    "profiler": 4,  # Profiler, profile_region, launch_records, window_branch
    "session": 5, "pool": 5,  # the host buffers (torch): a session's, decode and save; the recording pool
    "clock": 5,  # a GPU's %globaltimer against the host clock (a probe kernel launched through torch)
    "pipelines": 6,  # trace_pipelines (builds Sessions for pipeline lanes)
    "flags": 6,  # flag signal / wait helpers (emitted by the pipelines tracer) and the buffers flags lie in
    "testing": 7, "__main__": 7,  # test helpers and kernels written as user code; the include-path entry point
    "record": 7,  # a whole program recorded: the pool trace, compile/launch accounting, caches, the child process
}

# violation -> what removes it. Empty it as the owners' branches land.
KNOWN = {
}


def find_modules(root: Path) -> dict[str, Path]:
    """{dotted name: path} of every module of the two packages under `root`."""
    out = {}
    for path in sorted(p for package in PACKAGES for p in (root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def stage(module: str) -> str | None:
    """The stage folder of a host_decode module ('core', 'writers', ...), the layer of an ikp_cute one
    ('recorders', 'profiler', ...); None for a package's facade."""
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


def facade_exports(root: Path) -> dict[str, str]:
    """{name: module} of what ikp_cute's facade names: its lazy exports (``"Profiler": ".profiler:Profiler"``)
    and its own ``from .x import name``."""
    path = root / DEVICE / "__init__.py"
    if not path.exists():
        return {}
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.update({a.asname or a.name: f"{DEVICE}.{node.module}" for a in node.names})
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and ":" in str(value.value):
                    where = str(value.value).split(":")[0]
                    out[key.value] = DEVICE + where if where.startswith(".") else where
    return out


def imports(
    module: str, modules: dict[str, Path], facade: dict[str, str] | None = None
) -> list[tuple[str, str | None]]:
    """(imported module, private name or None) for every import of either package by `module`, anywhere in
    it, plus (module, name) for each _name read off an imported module (alias._name). A name imported from
    ikp_cute's facade counts as an import of the module the facade loads it from (`facade`)."""
    path = modules[module]
    tree = ast.parse(path.read_text())
    found: list[tuple[str, str | None]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    found.append((a.name, None))
                    aliases[a.asname or a.name] = a.name  # `import host_decode.x.y` binds the dotted path
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, path.name == "__init__.py", node)
            if source.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                if sub in modules:  # `from pkg import module`
                    found.append((sub, None))
                    aliases[a.asname or a.name] = sub
                elif source == DEVICE and facade and a.name in facade:
                    found.append((facade[a.name], None))
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
    """Every violation of the rules above in the packages under `root`, one string each (KNOWN's keys)."""
    out = set()
    modules = find_modules(root)
    facade = facade_exports(root)
    for module, path in modules.items():
        rel = path.relative_to(root).as_posix()
        if len(path.read_text().splitlines()) > MAX_LINES:
            out.add(f"lines: {rel}")
        check_module = host_decode_module if module.split(".")[0] == PACKAGE else ikp_cute_module
        out |= check_module(module, rel, imports(module, modules, facade))
    return out


def _private(module: str, target: str, private: str | None) -> set[str]:
    """A private name taken from another module, or a private module taken from another folder."""
    if private:
        return {f"private: {module} -> {target}.{private}"}
    if is_private_module(target) and stage(target) != stage(module):
        return {f"private: {module} -> {target}"}
    return set()


def host_decode_module(module: str, rel: str, found: list[tuple[str, str | None]]) -> set[str]:
    here = stage(module)
    if here is None:
        return set() if module == PACKAGE else {f"folder: {rel}"}
    if here not in LAYERS:
        return {f"folder: {rel}"}
    out = set()
    for target, private in found:
        there = stage(target)
        out |= _private(module, target, private)
        if target.split(".")[0] != PACKAGE:  # host_decode never imports ikp_cute
            out.add(f"import: {module} -> {target}")
        elif there == here:
            pass
        elif there is None or there not in LAYERS or LAYERS[there] >= LAYERS[here]:
            out.add(f"import: {module} -> {target}")
        if module.startswith(COMMANDS + ".") and target.startswith(COMMANDS + ".") and target != module:
            out.add(f"command: {module} -> {target}")
    return out


def ikp_cute_module(module: str, rel: str, found: list[tuple[str, str | None]]) -> set[str]:
    here = stage(module)
    if here is None:
        return set()  # the facade
    if here not in IKP_LAYERS:
        return {f"folder: {rel}"}
    out = set()
    for target, private in found:
        out |= _private(module, target, private)
        if target.split(".")[0] != DEVICE:  # ikp_cute may import host_decode
            continue
        there = stage(target)
        # the facade itself (`import ikp_cute`, a name it does not export) may load anything: the top rank
        rank = max(IKP_LAYERS.values()) if there is None else IKP_LAYERS.get(there, -1)
        if rank > IKP_LAYERS[here]:
            out.add(f"import: {module} -> {target}")
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
    all found, in host_decode and in ikp_cute (an upward import between ikp_cute's layers, also through its
    facade, host_decode importing ikp_cute, a private name across the packages); what is allowed (a lower
    layer, a name the facade loads from a lower layer, ikp_cute importing host_decode) is not flagged."""
    long = "x = 1\n" * (MAX_LINES + 1)
    files = {
        "host_decode/__init__.py": "",
        "host_decode/core/__init__.py": "",
        "host_decode/core/model.py": "from host_decode.writers import perfetto\n",
        "host_decode/core/errors.py": "def f():\n    import ikp_cute.spec\n",
        "host_decode/writers/__init__.py": "",
        "host_decode/writers/perfetto.py": "from host_decode.core.model import _hidden\n" + long,
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
        "ikp_cute/__init__.py": (
            "from .spec import ProfileSpec\n"
            "__getattr__, __dir__ = lazy_exports(__name__, {'Profiler': '.profiler:Profiler', "
            "'Session': '.session:Session'})\n"
        ),
        "ikp_cute/spec.py": "from . import ring\n",
        "ikp_cute/ring.py": "from host_decode.core.model import Names\n",
        "ikp_cute/inline_ptx.py": "",
        "ikp_cute/recorders/__init__.py": "from .lane import Lane\n",
        "ikp_cute/recorders/lane.py": (
            "from .. import inline_ptx\nfrom ..spec import ProfileSpec\nfrom ..profiler import buffer\n"
        ),
        "ikp_cute/recorders/cursor.py": "from .lane import _lane\nfrom ikp_cute import ProfileSpec, Session\n",
        "ikp_cute/profiler.py": "from .recorders import lane\n\nx = lane._count_stray\n" + long,
        "ikp_cute/session.py": "from host_decode.core.model import _hidden\nimport ikp_cute\n",
        "ikp_cute/testing/__init__.py": (
            "import ikp_cute\nfrom ikp_cute import Profiler, inline_ptx\nfrom ikp_cute.recorders import lane\n"
        ),
        "ikp_cute/extra.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert violations(tmp_path) == {
        "import: host_decode.core.model -> host_decode.writers.perfetto",
        "import: host_decode.core.errors -> ikp_cute.spec",
        "lines: host_decode/writers/perfetto.py",
        "private: host_decode.writers.perfetto -> host_decode.core.model._hidden",
        "import: host_decode.analysis.regions -> host_decode.hardware.join",
        "private: host_decode.analysis.regions -> host_decode.hardware.join._lane_sm",
        "command: host_decode.cli.commands.a -> host_decode.cli.commands.b",
        "private: host_decode.reports.html -> host_decode.core.model._cache",
        "folder: host_decode/misc.py",
        "import: ikp_cute.recorders.lane -> ikp_cute.profiler",
        "private: ikp_cute.recorders.cursor -> ikp_cute.recorders.lane._lane",
        "import: ikp_cute.recorders.cursor -> ikp_cute.session",
        "lines: ikp_cute/profiler.py",
        "private: ikp_cute.profiler -> ikp_cute.recorders.lane._count_stray",
        "private: ikp_cute.session -> host_decode.core.model._hidden",
        "import: ikp_cute.session -> ikp_cute",
        "folder: ikp_cute/extra.py",
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


# --- the tests' own layout (TESTS_ALLOWED: what a test may import of the repository) ---------------------

TESTS_ALLOWED = ("tests.support", "tests.fixtures", "host_decode", "ikp_cute", "cuda_include", "examples")
DATA_FOLDERS = ("fixtures", "kernels_pc2region")  # data and the scripts that made it, not tests


def source_files_of_tests(root: Path) -> dict[str, Path]:
    """{path relative to root: path} of every Python file of tests/ outside its data folders."""
    tests = root / "tests"
    return {p.relative_to(root).as_posix(): p for p in sorted(tests.rglob("*.py"))
            if p.relative_to(tests).parts[0] not in DATA_FOLDERS and "__pycache__" not in p.parts}


def local_names(root: Path) -> set[str]:
    """Names a bare import would reach in tests/ through a sys.path entry a test added (the files and folders
    at the top of tests/ and tests/support), and the top-level tests and gpu (a gpu/ folder put on sys.path
    is caught where it is added)."""
    found = {"tests", "gpu", "conftest"}
    for folder in (root / "tests", root / "tests" / "support"):
        found |= {p.stem for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()} if folder.is_dir() else set()
    return found - {"__init__", "__pycache__"}


def import_violations_in_tests(root: Path = ROOT) -> set[str]:
    """Every import of a test module or of a repository module outside TESTS_ALLOWED by a file of tests/,
    every gpu/ script loaded by path, every by-path load outside tests/support/scripts.py."""
    out = set()
    local = local_names(root)
    for rel, path in source_files_of_tests(root).items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against the file's package under tests/
                    package = rel.removesuffix(".py").split("/")[: -node.level]
                    base = ".".join(package + ([base] if base else []))
                names = [f"{base}.{a.name}" if base else a.name for a in node.names]
            elif isinstance(node, ast.Call) and (dotted(node.func) or "").split(".")[-1] in (
                    "spec_from_file_location", "load_script", "insert", "append"):
                kind = dotted(node.func).split(".")[-1]
                if kind in ("insert", "append") and not (dotted(node.func) or "").startswith("sys.path."):
                    continue
                if kind == "spec_from_file_location" and rel != "tests/support/scripts.py":
                    out.add(f"by path: {rel} (tests/support/scripts.py load_script)")
                strings = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                if any(v == "gpu" or v.startswith("gpu/") for v in strings):
                    out.add(f"gpu script: {rel} ({kind})")
                continue
            else:
                continue
            for name in names:
                parts = name.split(".")
                if any(part.startswith("test_") for part in parts):
                    out.add(f"test module: {rel} -> {name}")
                elif parts[0] in local and not any(name == a or name.startswith(a + ".") for a in TESTS_ALLOWED):
                    out.add(f"outside support: {rel} -> {name}")
    return out


def folder_violations_in_tests(root: Path = ROOT) -> set[str]:
    """Test folders that are not packages, test modules out of place, gpu tests outside tests/gpu/ and
    tests in tests/gpu/ that are not marked gpu."""
    out = set()
    tests = root / "tests"
    for rel, path in source_files_of_tests(root).items():
        parts = path.relative_to(tests).parts
        if not path.name.startswith("test_"):
            continue
        if len(parts) == 1 or parts[0] == "support":
            out.add(f"place: {rel}")
        for depth in range(len(parts)):
            if not (tests.joinpath(*parts[:depth]) / "__init__.py").is_file():
                out.add(f"package: {tests.joinpath(*parts[:depth]).relative_to(root).as_posix()}")
        tree = ast.parse(path.read_text())
        marks = {dotted(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        if parts[0] != "gpu" and "pytest.mark.gpu" in marks:
            out.add(f"gpu outside tests/gpu: {rel}")
        if parts[0] == "gpu":
            module_marked = any(
                isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                and "pytest.mark.gpu" in {dotted(x) for x in ast.walk(n.value)} for n in tree.body)
            for n in tree.body:
                if isinstance(n, ast.FunctionDef) and n.name.startswith("test_") and not module_marked and \
                        "pytest.mark.gpu" not in {dotted(d) for d in n.decorator_list}:
                    out.add(f"not gpu: {rel}::{n.name}")
    return out


def test_tests_import_only_support_and_the_packages():
    found = sorted(import_violations_in_tests(ROOT))
    assert not found, "tests that import tests or scripts (move what they share to tests/support):\n  " + \
        "\n  ".join(found)


def test_test_folders_are_packages():
    found = sorted(folder_violations_in_tests(ROOT))
    assert not found, "tests out of the layout (docs/layout.md):\n  " + "\n  ".join(found)


def test_the_test_checks_see_violations(tmp_path):
    """The two checks above on a small tree: each kind of violation is found, what is allowed is not."""
    top = "tests/" + "test_top.py"  # a test module at the top of tests/ (in parts: no flat test path in the tree)
    files = {
        "tests/__init__.py": "",
        "tests/conftest.py": "",
        top: "",
        "tests/support/__init__.py": "",
        "tests/support/helpers.py": "from tests.unit import test_a\n",
        "tests/support/scripts.py": "import importlib.util\nimportlib.util.spec_from_file_location('x', 'y')\n",
        "tests/fixtures/make.py": "import test_anything\n",
        "tests/unit/__init__.py": "",
        "tests/unit/test_a.py": (
            "import pytest\nimport numpy\nfrom host_decode.core import wire\nfrom tests.support.helpers import x\n"
            "from examples.basic.kernel import k\n\n@pytest.mark.gpu\ndef test_x():\n    import helpers\n"
        ),
        "tests/unit/nopkg/test_b.py": (
            "from tests.unit.test_a import y\nfrom .. import test_a\nfrom tests import conftest\n"
            "import importlib.util\nimportlib.util.spec_from_file_location('c', 'gpu/c.py')\n"
            "from tests.support.scripts import load_script\nload_script(ROOT / 'gpu' / 'c.py')\n"
            "load_script(ROOT / 'examples' / 'run.py')\nimport gpu.c\nsys.path.insert(0, str(ROOT / 'gpu'))\n"
        ),
        "tests/gpu/__init__.py": "",
        "tests/gpu/test_g.py": (
            "import pytest\n\n@pytest.mark.gpu\ndef test_marked():\n    pass\n\ndef test_bare():\n    pass\n"
        ),
        "tests/gpu/test_m.py": "import pytest\npytestmark = pytest.mark.gpu\n\ndef test_y():\n    pass\n",
        "gpu/c.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert import_violations_in_tests(tmp_path) == {
        "test module: tests/support/helpers.py -> tests.unit.test_a",
        "outside support: tests/unit/test_a.py -> helpers",
        "test module: tests/unit/nopkg/test_b.py -> tests.unit.test_a.y",
        "test module: tests/unit/nopkg/test_b.py -> tests.unit.test_a",
        "outside support: tests/unit/nopkg/test_b.py -> tests.conftest",
        "by path: tests/unit/nopkg/test_b.py (tests/support/scripts.py load_script)",
        "gpu script: tests/unit/nopkg/test_b.py (spec_from_file_location)",
        "gpu script: tests/unit/nopkg/test_b.py (load_script)",
        "gpu script: tests/unit/nopkg/test_b.py (insert)",
        "outside support: tests/unit/nopkg/test_b.py -> gpu.c",
    }
    assert folder_violations_in_tests(tmp_path) == {
        f"place: {top}",
        "package: tests/unit/nopkg",
        "gpu outside tests/gpu: tests/unit/test_a.py",
        "not gpu: tests/gpu/test_g.py::test_bare",
    }

