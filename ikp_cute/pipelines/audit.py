"""The coverage audit of every traced compile: each barrier instruction of the final PTX is traced, or listed
untraced with a reason; call sites the compiler removed are marked removed.

How. The IR pass numbers every barrier op of the traced MLIR (sites.py: the number is the ``.loc``
column of the op's location). For the compile that follows, ``prepare`` turns on line info (and keeps
the PTX, in the process's private temporary directory when the caller did not ask for it: a fixed path, so
that the compile options, which the DSL hashes with the module, repeat) and gives every op left
without a location a neutral one (line 0), so that no instruction inherits a site's ``.loc``. After the
passes (``Compiler.compile`` returns: patches.TABLE wraps it; the DSL's own single post-compile hook slot
is taken by its TVM-FFI path), ``read_ptx`` counts the barrier instructions (sites.PTX_KINDS)
naming each site. A site of the traced IR with no instruction in the final PTX was removed by the
compiler (a zero-trip loop, dead code); an instruction naming no site is "unattributed". The compile
options are restored right after the passes (the caller's compiled object reports PTX only if asked).
All of this is compile-time only: line info adds ``.loc`` directives and a line table, no instruction
(tests/unit/ikp_cute/test_pipelines_ir.py::test_the_audit_changes_no_sass compares the SASS).

Sidecar keys (``metadata``; docs/pipelines.md, "Sidecar keys"):
* ``barrier_sites``: one entry per barrier op of each traced kernel: kernel, kind, site, instruction,
  pipeline, op, traced, via ("hooks" | "ir"), reason, ptx (its instructions in the final PTX; 0 =
  removed by the compiler; null = PTX not read), barrier (a static named-barrier id);
* ``coverage``: per kernel {sites, traced, not_recorded, untraced, removed, ptx_instructions,
  unattributed, ptx_checked} of its barrier sites, and, when it has flag sites, ``flags``: {sites, traced,
  not_recorded, untraced, removed, unattributed (release instructions naming no site), reasons (why the
  untraced ones are not traced)}.

Invariants a change could break (tests/unit/ikp_cute/test_pipelines_compile.py, test_pipelines_ir.py guard them):
* every barrier instruction of FA4's / quack's final PTX names a site, traced or with a reason
  (test_fa4_sm90_coverage, test_quack_sm90_coverage);
* a call site in a zero-trip loop is reported removed, not present (test_removed_call_sites);
* the compile options and the caller's artifacts are as the caller set them (test_off_is_untouched,
  test_the_audit_leaves_artifacts_as_asked).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import glob
import os
import re
import shutil
import tempfile

from .sites import FLAG_KINDS, SITE_COLUMN, Ledger, ptx_kind, walk

_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_FILE = re.compile(r"^\s*\.file\s+(\d+)\s+\"([^\"]+)\"", re.MULTILINE)
_COMMENTS = re.compile(r"/\*.*?\*/|//.*$")


@dataclasses.dataclass
class _Pending:
    options: object  # the DSL's CompileOptions of the compile under way
    saved: tuple  # (line info, keep ptx, dump path, full ptx path) as the caller had them
    private: str | None  # our temporary directory, when the caller did not keep the PTX
    ptx_path: str  # where the caller's kept PTX goes
    kernels: list[str]


class Audit:
    """Prepares each traced compile (trace-finalize time) and reads its final PTX (after its passes)."""

    def __init__(self, ledger: Ledger, catalog):
        self.ledger = ledger
        self.catalog = catalog
        self.pending: _Pending | None = None
        self.unattributed: dict[str, collections.Counter] = {}
        self.checked: set[str] = set()

    def prepare(self, dsl, module, kernels: list[str]) -> None:
        """At trace-finalize time: line info and kept PTX for this compile, neutral locations."""
        from cutlass._mlir import ir
        from cutlass.base_dsl.compiler import GenerateLineInfo, KeepPTX

        self.restore()  # an earlier compile that failed before its passes ended
        options = dsl.compile_options
        line_info, keep = options.options[GenerateLineInfo], options.options[KeepPTX]
        saved = (line_info.value, keep.value, keep.dump_path, keep.full_ptx_path)
        private = None
        if not keep.value:
            private = _private_directory()  # one per process: the compile options (hashed by the DSL) repeat
            for stale in glob.glob(os.path.join(private, "*")):
                os.remove(stale)
            keep.value = True
            keep.dump_path = os.path.join(private, "kernel")
            keep.full_ptx_path = os.path.join(private, "kernel.ptx")
        line_info.value = True
        self.pending = _Pending(options, saved, private, keep.full_ptx_path, kernels)
        unknown = ir.Location.unknown()
        neutral = ir.Location.file("<unknown>", 0, 0)
        for op in walk(module.operation):
            if op.location == unknown:
                op.location = neutral

    def restore(self) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        from cutlass.base_dsl.compiler import GenerateLineInfo, KeepPTX

        line_info, keep = pending.options.options[GenerateLineInfo], pending.options.options[KeepPTX]
        line_info.value, keep.value, keep.dump_path, keep.full_ptx_path = pending.saved
        if pending.private is not None:
            for path in glob.glob(os.path.join(pending.private, "*")):
                os.remove(path)

    def after_compile(self) -> None:
        """After a compile's passes: read the final PTX of the compile prepared (a compile of a clone for an
        IR dump, which writes no PTX, leaves it pending)."""
        pending = self.pending
        if pending is None:
            return
        paths = sorted(glob.glob(os.path.join(pending.private, "*.ptx"))) if pending.private else [pending.ptx_path]
        paths = [p for p in paths if os.path.exists(p)]
        if not paths:
            return
        with open(paths[0]) as f:
            ptx = f.read()
        self.restore()
        self.read_ptx(ptx, pending.kernels)

    def read_ptx(self, ptx: str, kernels: list[str]) -> None:
        """Count the barrier instructions naming each site of `kernels`; mark the removed call sites."""
        counts: collections.Counter = collections.Counter()
        unattributed = {name: collections.Counter() for name in kernels}
        sites = [s for s in self.ledger.sites if s.kernel in kernels]
        by_line = flag_sites_by_line(sites)
        loose_probes: collections.Counter = collections.Counter()  # probe instructions naming no site, per kernel
        for function, number, kind, where in barrier_instructions(ptx):
            numbers = [number] if number is not None else []
            if number is None and kind in FLAG_KINDS:  # a scoped load's lowering may keep its line, not its column
                numbers = by_line.get((function, kind, where), [])
            for n in numbers:
                counts[n] += 1
            if not numbers and kind == "flag_wait":  # a load outside a spin loop, or one whose location LLVM merged
                loose_probes[function] += 1
            elif not numbers:
                unattributed.setdefault(function, collections.Counter())[kind] += 1
        for site in sites:
            site.ptx = counts.get(site.number, 0)
            if not site.ptx and site.kind == "flag_wait" and loose_probes[site.kernel]:
                site.ptx = None  # not found by its location, yet probes remain: not known to be removed
        self.unattributed.update(unattributed)
        self.checked.update(kernels)
        self.catalog.mark_removed(removed_call_sites(sites))


_PRIVATE: list[str] = []


def _private_directory() -> str:
    """The process's directory for the PTX of traced compiles whose caller did not keep it (removed at exit)."""
    if not _PRIVATE or not os.path.isdir(_PRIVATE[0]):
        _PRIVATE[:] = [tempfile.mkdtemp(prefix="ikp_audit_")]
        atexit.register(shutil.rmtree, _PRIVATE[0], True)
    return _PRIVATE[0]


def barrier_instructions(ptx: str) -> list[tuple[str, int | None, str, str]]:
    """(function, site number or None, PTX kind, "file.py:line" of the last `.loc`) of each audited instruction
    of `ptx`, in order; the site is the one the last `.loc` column before it names."""
    out = []
    function, column, where = "?", None, "?"
    files = {number: os.path.basename(path) for number, path in _FILE.findall(ptx)}
    for raw in ptx.splitlines():
        line = _COMMENTS.sub("", raw)
        entry = _ENTRY.match(line)
        if entry is not None:
            function, column, where = entry.group(1), None, "?"
            continue
        loc = _LOC.match(line)
        if loc is not None:
            column = int(loc.group(3))
            where = f"{files.get(loc.group(1), '?')}:{loc.group(2)}"
            continue
        kind = ptx_kind(line)
        if kind is not None:
            number = column - SITE_COLUMN if column is not None and column >= SITE_COLUMN else None
            out.append((function, number, kind, where))
    return out


def flag_sites_by_line(sites) -> dict:
    """{(kernel, kind, "file.py:line"): [site numbers]} of the flag sites: the lowering of a scoped load
    (nvvm.load.ext) keeps its line in the final PTX but not the site's column, so a flag instruction naming no
    site counts for the flag sites of its kind on its line (one call site, called from several places)."""
    found: dict = collections.defaultdict(list)
    for site in sites:
        if site.kind in FLAG_KINDS:
            found[(site.kernel, site.kind, site.site)].append(site.number)
    return found


def removed_call_sites(sites) -> list[tuple]:
    """(pipeline or None, op, site) of the traced call sites whose every op is absent from the final PTX."""
    by_call = collections.defaultdict(list)
    for site in sites:
        if site.traced and site.op is not None and site.kind not in FLAG_KINDS:
            op = site.op if site.pipeline is not None else ("bar_arrive" if site.op == "bar_arrive" else "bar_sync")
            by_call[(site.pipeline, op, site.site)].append(site)
    return [key for key, group in by_call.items() if all(s.ptx == 0 for s in group)]


def counts(sites: list) -> dict:
    """sites, traced, not_recorded, untraced, removed of a kernel's sites (one kind of them)."""
    present = [s for s in sites if s.ptx != 0]
    return {"sites": len(present), "traced": sum(s.traced for s in present),
            "not_recorded": sum(not s.traced and s.by_choice for s in present),
            "untraced": sum(not s.traced and not s.by_choice for s in present),
            "removed": sum(s.ptx == 0 for s in sites)}


def metadata(ledger: Ledger, audit: Audit | None) -> dict:
    """`barrier_sites` and `coverage` (see the module docstring); flag sites count apart, in `flags`."""
    sites = [s for s in ledger.sites if s.kernel]
    coverage = {}
    for kernel in dict.fromkeys(s.kernel for s in sites):
        mine = [s for s in sites if s.kernel == kernel]
        barriers = [s for s in mine if s.kind not in FLAG_KINDS]
        unattributed = dict(audit.unattributed.get(kernel, {})) if audit is not None else {}
        flag_unattributed = {k: v for k, v in unattributed.items() if k in FLAG_KINDS}
        unattributed = {k: v for k, v in unattributed.items() if k not in FLAG_KINDS}
        coverage[kernel] = dict(counts(barriers), **{
            "ptx_instructions": sum(s.ptx or 0 for s in barriers) + sum(unattributed.values()),
            "unattributed": unattributed,
            "ptx_checked": audit is not None and kernel in audit.checked,
        })
        flags = [s for s in mine if s.kind in FLAG_KINDS]
        if flags or flag_unattributed:
            coverage[kernel]["flags"] = dict(counts(flags), unattributed=flag_unattributed,
                                             reasons=sorted({s.reason for s in flags if s.reason and s.ptx != 0}))
    return {"barrier_sites": [s.as_json() for s in sites], "coverage": coverage}


def summary(meta: dict) -> list[str]:
    """One line per kernel: "<kernel>: 30 of 30 barrier sites traced (4 not recorded at this level, ...)"."""
    lines = []
    for kernel, c in (meta.get("coverage") or {}).items():
        recordable = c["traced"] + c["untraced"]
        extra = [f"{c['not_recorded']} not recorded by the level/options"] if c["not_recorded"] else []
        extra += [f"{c['untraced']} untraced"] if c["untraced"] else []
        extra += [f"{c['removed']} removed by the compiler"] if c["removed"] else []
        extra += [f"{sum(c['unattributed'].values())} PTX instructions with no site"] if c["unattributed"] else []
        extra += [] if c["ptx_checked"] else ["final PTX not read"]
        tail = f" ({'; '.join(extra)})" if extra else ""
        line = f"{kernel}: {c['traced']} of {recordable} barrier sites traced{tail}"
        f = c.get("flags")
        if f:
            more = [f"{f['not_recorded']} not recorded by the level/options"] if f["not_recorded"] else []
            more += [f"{f['untraced']} untraced: {', '.join(f['reasons'])}"] if f["untraced"] else []
            more += [f"{f['removed']} removed by the compiler"] if f["removed"] else []
            loose = sum(f["unattributed"].values())
            more += [f"{loose} release PTX instructions with no site"] if loose else []
            line += (f"; {f['traced']} of {f['traced'] + f['untraced']} flag sites traced"
                     + (f" ({'; '.join(more)})" if more else ""))
        lines.append(line)
    return lines
