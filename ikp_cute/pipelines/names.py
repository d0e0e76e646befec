"""Names users recognise: call sites (the kernel's own file:line) and pipeline names read from its source.

A *call site* is the innermost frame of kernel code on the Python call stack while a kernel is traced:
outside cutlass and this package, not a method of a pipeline or barrier object (FA4's and quack's own
pipeline modules included, whichever package defines the class), not a function the DSL generates from
a kernel's ``if`` / ``for`` bodies. A *pipeline name*, in this order:

1. the kernel's own ``name=`` (cutlass keeps it on the barrier arrays);
2. the variables its creation is assigned to: one (``pipeline_k = X.create(`` -> ``k``), or the common
   stem of the participants a tuple assignment unpacks (``load_q_producer, load_q_consumer =
   X.create(...).make_participants()`` -> ``load_q``);
3. for ``return X.create(...)`` in a maker, the same read at the maker's caller, else the maker's own name
   without its verbs and affixes (``make_and_init_load_q_pipeline`` -> ``load_q``);
4. ``<Class>_<file>_<line>`` (roles.py: the class and the creation site).

Assignments are read from the module's syntax tree (``ast``) at the exact position of the call, so a
creation spread over several lines, or unpacked into a tuple, names the pipeline as a one-line one does.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_names.py, test_pipelines_compile.py):
* sites are the kernel's lines (test_kernel_defined_subclass_and_names, test_names_from_participants_and_makers);
* stems: test_participant_stem, test_maker_stem, test_short_name;
* a tuple of participants with no common stem (``prod, cons = ...``) falls through to step 3 / 4, never
  to a name made of a role word (test_participant_stem).
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import re
import sys

# Frames of functions the DSL generates from a kernel's `if` / `for` / `while` bodies keep the kernel's
# file and line: they are call sites, but their names say nothing (never used as a barrier's name).
GENERATED = ("then_", "else_", "elif_", "if_region", "loop_", "while_", "for_body")
ANONYMOUS = ("<lambda>", "<genexpr>")
# Functions between the kernel's `X.create(...)` (or its call) and the barrier array: never a call site.
SKIPPED_FUNCTIONS = frozenset({"create", "_make_sync_object", "__init__", "__post_init__", "wrapper",
                                "_override_create"})
_ROLE_WORDS = ("producer", "consumer", "prod", "cons", "participants")
_MAKER_VERBS = ("make", "and", "init", "create", "build", "setup", "new", "get")
_ASSIGNED = re.compile(r"^\s*(?:self\.)?([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


@functools.lru_cache(maxsize=1)
def library_dirs() -> tuple[str, ...]:
    """Files that are never a call site: cutlass, this package, ikp_cute.flags, contextlib, functools."""
    import contextlib

    import cutlass

    here = os.path.dirname(os.path.abspath(__file__))
    flags = os.path.join(os.path.dirname(here), "flags.py")  # ikp_cute.flags: its calls are the kernel's
    return (os.path.dirname(os.path.abspath(cutlass.__file__)) + os.sep, here + os.sep, contextlib.__file__,
            os.path.dirname(os.path.abspath(functools.__file__)) + os.sep + "functools.py", flags)


def is_sync_object(obj) -> bool:
    """A pipeline (owns mbarrier arrays) or a barrier helper object: frames of its methods are library code
    for the purpose of naming a call site, whichever package defines the class."""
    return obj is not None and (
        hasattr(obj, "sync_object_full") or hasattr(obj, "sync_object_empty") or hasattr(obj, "barrier_storage")
        or (hasattr(obj, "barrier_id") and hasattr(obj, "num_threads"))
    )


def user_frame(skip_functions=frozenset(), depth: int = 2):
    """The innermost frame of kernel code (see the module docstring), from `depth` frames up; None if none."""
    dirs = library_dirs()
    frame = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        if not (code.co_filename.startswith(dirs) or code.co_name in skip_functions or code.co_name in ANONYMOUS
                or is_sync_object(frame.f_locals.get("self"))):
            return frame
        frame = frame.f_back
    return None


def site(frame) -> str:
    """`file.py:line` of a frame ("?" for none)."""
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def function_name(frame) -> str:
    """The kernel function a call sits in (`warp_scheduler_barrier_sync`), past DSL-generated bodies and the
    DSL's own frames; its file:line when that function is only the kernel's entry (`kernel`)."""
    dirs = library_dirs()
    named = frame
    while named is not None and (named.f_code.co_name.startswith(GENERATED + ANONYMOUS)
                                 or named.f_code.co_filename.startswith(dirs)):
        named = named.f_back
    name = named.f_code.co_name if named is not None else "?"
    return site(frame) if name in ("kernel", "__call__", "?") else name


# --- pipeline names ------------------------------------------------------------------------------------


def short_name(variable: str) -> str:
    """`pipeline_k` -> `k`, `ab_pipeline` -> `ab`, `mainloop_pipeline` -> `mainloop`; else unchanged."""
    for prefix in ("pipeline_", "pipe_"):
        if variable.startswith(prefix) and len(variable) > len(prefix):
            return variable[len(prefix):]
    for suffix in ("_pipeline", "_pipe"):
        if variable.endswith(suffix) and len(variable) > len(suffix):
            return variable[: -len(suffix)]
    return variable


def assigned_variable(source_line: str) -> str | None:
    """The variable a single source line assigns to (`pipeline_k = X.create(` -> `pipeline_k`), or None."""
    match = _ASSIGNED.match(source_line or "")
    return match.group(1) if match else None


def _strip_words(name: str, words, ends=("start", "end")) -> str:
    tokens = [t for t in name.split("_") if t]
    if "start" in ends:
        while tokens and tokens[0] in words:
            tokens.pop(0)
    if "end" in ends:
        while tokens and tokens[-1] in words:
            tokens.pop()
    return "_".join(tokens)


def participant_stem(names: list[str]) -> str | None:
    """The pipeline a tuple of participants belongs to: `load_q_producer, load_q_consumer` -> `load_q`,
    `q_prod, q_cons` -> `q`, `mma_producer, mma_consumer` -> `mma`; None for `prod, cons` (no stem)."""
    stripped = [short_name(_strip_words(n.lstrip("_"), _ROLE_WORDS)) for n in names]
    if stripped and all(s == stripped[0] for s in stripped) and stripped[0]:
        return stripped[0]
    token_lists = [[t for t in n.lstrip("_").split("_") if t] for n in names]
    common = []
    for column in zip(*token_lists):
        if any(t != column[0] for t in column):
            break
        common.append(column[0])
    stem = short_name(_strip_words("_".join(common), _ROLE_WORDS))
    return stem or None


def maker_stem(function: str) -> str | None:
    """A maker's name without its verbs and pipeline affixes: `make_and_init_load_q_pipeline` -> `load_q`,
    `make_ab_pipeline` -> `ab`; None when nothing is left."""
    stem = short_name(_strip_words(function.lstrip("_"), _MAKER_VERBS, ends=("start",)))
    stem = _strip_words(stem, ("pipeline", "pipe"), ends=("end",))
    return stem or None


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While,
             ast.With, ast.AsyncWith, ast.Try)


@functools.lru_cache(maxsize=64)
def _statements(filename: str, size: int) -> tuple:
    """The simple statements of a module as ((start line, col), (end line, col), node), in source order;
    `size` keys the cache to the file's text. Empty when the file does not parse."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return ()
    found = [((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0), n)
             for n in ast.walk(tree) if isinstance(n, ast.stmt) and not isinstance(n, _COMPOUND)]
    return tuple(sorted(found, key=lambda entry: entry[0]))


def _position(frame) -> tuple[int, int]:
    """(line, column) where the frame's current call begins."""
    lasti = frame.f_lasti
    if lasti >= 0 and hasattr(frame.f_code, "co_positions"):
        for i, (line, _, column, _) in enumerate(frame.f_code.co_positions()):
            if i == lasti // 2:
                if line is not None:
                    return line, column or 0
                break
    return frame.f_lineno, 0


def _statement_at(frame):
    """The innermost simple statement of the frame's source that contains its current call; None if unknown."""
    filename = frame.f_code.co_filename
    lines = linecache.getlines(filename, frame.f_globals)
    statements = _statements(filename, sum(len(line) for line in lines)) if lines else ()
    where = _position(frame)
    best = None
    for start, end, node in statements:
        if start > where:
            break
        if where <= end:
            best = node
    return best


def _target_names(target) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _target_names(element)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _assigned_name(statement) -> str | None:
    """The pipeline name an assignment gives: its one variable, or the stem of the participants it unpacks."""
    if isinstance(statement, ast.Assign):
        target = statement.targets[0]
    elif isinstance(statement, ast.AnnAssign):
        target = statement.target
    else:
        return None
    names = _target_names(target)
    if len(names) == 1 and not isinstance(target, (ast.Tuple, ast.List)):
        return short_name(names[0])
    return participant_stem(names) if names else None


def creation_name(frame) -> str | None:
    """The name a pipeline is known by where it is created (steps 2 and 3 of the module docstring)."""
    if frame is None:
        return None
    statement = _statement_at(frame)
    if statement is None:  # no source: the one-line reading
        variable = assigned_variable(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
        return short_name(variable) if variable else None
    name = _assigned_name(statement)
    if name is not None or not isinstance(statement, ast.Return):
        return name
    dirs = library_dirs()
    caller = frame.f_back
    while caller is not None and (caller.f_code.co_name.startswith(GENERATED + ANONYMOUS)
                                  or caller.f_code.co_filename.startswith(dirs)):
        caller = caller.f_back
    if caller is not None:
        outer = _statement_at(caller)
        name = _assigned_name(outer) if outer is not None else None
    return name or maker_stem(frame.f_code.co_name)


def _strip_pointer_words(name: str) -> str:
    stripped = _strip_words(name, ("mbar", "ptr", "mbarrier", "addr"), ends=("end",))
    return _strip_words(stripped, ("mbar", "mbarrier"), ends=("start",)) or name


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    return None


def call_subject(path: str, line: int) -> str | None:
    """What the barrier call at `path:line` is made on, for a barrier no pipeline owns: its first argument
    (`cute.arch.mbarrier_wait(dS_cluster_full_mbar_ptr, ...)` -> `dS_cluster_full`), else the object whose
    method it is (`tmem_alloc_barrier.arrive_and_wait()` -> `tmem_alloc_barrier`); None when unknown."""
    lines = linecache.getlines(path)
    if not lines:
        return None
    for start, end, node in _statements(path, sum(len(text) for text in lines)):
        if not start[0] <= line <= end[0]:
            continue
        calls = [n for n in ast.walk(node)
                 if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
        for call in calls:
            if call.args and _dotted(call.args[0]) is not None:
                return _strip_pointer_words(_dotted(call.args[0]))
            if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, (ast.Name, ast.Attribute)):
                subject = _dotted(call.func.value)
                if subject not in ("arch", "cute", "cutlass", "nvvm", "llvm", "self"):
                    return subject
    return None
