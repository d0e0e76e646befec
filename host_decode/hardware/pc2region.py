"""pc2region: map every SASS PC of an instrumented kernel to the region path it executes in.

How (facts in docs/pc2region.md; modules: sass (listing, operand semantics), cfg (control flow),
known_bits (tag values), markers (steps 1-2), region_stacks (step 3), region_map (the map type), this one
(step 4 and the entry points)):

1. Disassemble (host_decode.hardware.sass) and find the markers: a 64-bit store (STG/ST/STS .64/.128) of a
   register pair in which one register derives from a ``%globaltimer`` read (``S2R``/``S2UR``/``CS2R``/
   ``CS2UR`` of ``SR_GLOBALTIMER*``: sass.reads_timer) and the other holds the tag
   ``(lane << 12) | (event_id << 2) | type``.
2. Recover each tag's low 12 bits with a known-bits data-flow evaluation over reaching definitions:
   the lane is a runtime value shifted by 12 (its low 12 bits are known zeros) and ptxas materializes
   the constant part with MOV / IMAD.MOV / IADD3 / VIADD / LEA / LOP3 / HFMA2.MMA (two fp16 halves).
   Unknown bits are resolved from a trace-time marker table when one is given, then from other markers
   on the same source line (unrolled copies), else the marker is reported unresolved.
3. Propagate a region stack over the control-flow graph to a fixed point: BEGIN pushes, END pops
   (the innermost open region of that id, so overlapping async regions do not mis-nest), reserved
   instants and FINALIZE change nothing. Predicated branches fall through and jump, EXIT / RET end,
   CALL enters the subroutine with a return address (states carry a call stack, so a helper called
   from two regions is seen in both and correctly returns to each caller), indirect branches go to
   every label of the function. The timer reads bounding a region belong to it.
4. Per PC: no state reached it -> ``<unreachable>``, one empty stack -> ``<outside>``, one stack ->
   its path (event names joined by "/"), several -> ``<ambiguous>``.

A linear scan between markers is wrong (unrolled loops duplicate markers, subroutines sit after EXIT,
loads move across markers); tests/unit/host_decode/hardware/test_pc2region.py checks maps of real cubins against the
known program structure.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.hardware import sass
from host_decode.hardware.cfg import Program, build_program, find_skips
from host_decode.hardware.known_bits import ValueAnalysis
from host_decode.hardware.markers import LOW12, NOT_V1, Marker, find_markers, marker_only_instructions, resolve_markers
from host_decode.hardware.region_map import (
    AMBIGUOUS,
    MAP_FORMAT,
    OUTSIDE,
    SPECIAL_PATHS,
    UNREACHABLE,
    RegionMap,
    load_map,
)
from host_decode.hardware.region_stacks import propagate
from host_decode.hardware.sass import Function

__all__ = [
    "AMBIGUOUS",
    "MAP_FORMAT",
    "OUTSIDE",
    "SPECIAL_PATHS",
    "UNREACHABLE",
    "RegionMap",
    "build_map",
    "load_map",
    "map_compiled",
    "map_function",
    "read_cubin",
]

def _event_name(events: dict[int, str], eid: int) -> str:
    return events.get(int(eid), f"event_{int(eid)}")


def _path_name(stack: tuple, events: dict[int, str]) -> str:
    return "/".join(_event_name(events, e) if e >= 0 else "?" for e in stack) if stack else OUTSIDE


def _str_keys(obj: Any) -> Any:
    return {str(k): v for k, v in obj.items()} if isinstance(obj, dict) else obj


def _events_and_table(names: Any, marker_table: Any) -> tuple[dict[int, str], set[tuple[int, int]] | None]:
    """names: Names | {id: name} | sidecar dict with 'events' | None;
    marker_table: iterable of (event_id, type) (program order is not needed) | None."""
    events: dict[int, str] = {}
    if names is not None:
        if hasattr(names, "events"):
            events = dict(names.events)
        elif isinstance(names, dict) and "events" in names:
            from host_decode.core.model import Names

            events = Names.from_json({"events": _str_keys(names["events"])}).events
        elif isinstance(names, dict):
            from host_decode.core.model import Names

            events = Names.from_json({"events": _str_keys(names)}).events
        else:
            raise ValueError("names must be a Names, an {id: name} dict or a capture sidecar dict")
    allowed = None
    if marker_table is not None:
        allowed = set()
        for item in marker_table:
            try:
                eid, etype = int(item[0]), int(item[1])
            except (TypeError, ValueError, IndexError):
                raise ValueError(f"marker table entries must be (event_id, event_type), got {item!r}") from None
            allowed.add((eid, etype))
    elif events:
        # a names table says which ids exist: each may begin, end or be an instant
        allowed = {(e, t) for e in events for t in (0, 1, 2)} | {(e, 2) for e in wire.RESERVED_INSTANT_IDS}
        allowed |= {(e, 3) for e in range(wire.MAX_EVENT_ID + 1)}
    return events, allowed


def build_map(
    cubin: bytes,
    kernel: str | None = None,
    names: Any = None,
    marker_table: Any = None,
    nvdisasm: str | None = None,
    listing: str | None = None,
    source: str | None = None,
) -> RegionMap:
    """pc2region map of one kernel of a cubin (bytes). `names`: event names (Names, {id: name} or a
    capture sidecar dict); `marker_table`: the (event_id, type) pairs the kernel can write (trace-time
    knowledge used to resolve tags whose bits ptxas computes at run time). `listing`: a precomputed
    `nvdisasm -c -g` text (for tests / tools that already ran it). `source`: the cubin's file name, named
    by errors. Without `kernel`, a cubin whose only instrumented kernel is one of several picks it; a
    named kernel is looked up among all (a kernel without markers maps to <outside>, and its map's
    `problems` say that it has no markers)."""
    text = listing if listing is not None else sass.disassemble(cubin, nvdisasm, source=source)
    functions = sass.parse_listing(text)
    candidates = functions if kernel is not None else _kernels_with_markers_first(functions)
    fn = sass.select_function(candidates, kernel, source)
    return map_function(fn, sass.cubin_sha256(cubin) if cubin else None, names, marker_table)


def _kernels_with_markers_first(functions: list[Function]) -> list[Function]:
    with_timer = [f for f in functions if any(sass.TIMER_SR_RE.search(x.text) for x in f.instructions)]
    return with_timer if len(with_timer) == 1 and len(functions) > 1 else functions


def map_function(fn: Function, sha: str | None, names: Any = None, marker_table: Any = None) -> RegionMap:
    if not fn.instructions:
        raise DecodeError(f"kernel {fn.name} has no instructions", source="cubin")
    events, allowed = _events_and_table(names, marker_table)
    prog = build_program(fn)
    va = ValueAnalysis(prog)
    unoptimized = sass.looks_unoptimized(fn)
    markers, problems, both_timer = find_markers(prog, va, unoptimized)
    resolve_markers(markers, prog, allowed)
    if not unoptimized and markers and not any(m.resolved or m.tag_mask & LOW12 for m in markers):
        for m in markers:  # no v1 record anywhere: a (timer, payload) pair of another tool
            problems.append(
                f"pc {fn.instructions[m.store_index].pc:#x}: a 64-bit store of a %globaltimer value next to a word "
                f"with no known tag bits (known {m.tag_mask & LOW12:#05x}) in a kernel without any ikp v1 "
                f"record: {NOT_V1}"
            )
        markers = []
    problems = prog.problems + problems
    if unoptimized:  # first, as it explains the rest; last when nothing maps (the CLI's error is the last)
        resolved = sum(m.resolved for m in markers)
        statement = _debug_build(fn.name, resolved, len(markers) - resolved + both_timer)
        problems = [statement, *problems] if markers else [*problems, statement]
    elif not markers:
        problems.append(
            f"kernel {fn.name} has no ikp v1 markers (no 64-bit store of a %globaltimer value with a tag): "
            "there are no regions to map"
        )
    for m in markers:
        if not m.resolved:
            why = (
                f"; the markers on its source line write {m.line_conflict} different event ids, "
                "so the line cannot decide"
                if m.line_conflict
                else ""
            )
            problems.append(
                f"pc {fn.instructions[m.timer_index].pc:#x}: marker tag not resolved "
                f"(known bits {m.tag_mask & LOW12:#05x} = {m.tag_value & LOW12:#05x}){why}"
            )
    boundary_timers = [m.timer_index for m in markers if m.is_boundary or not m.resolved]
    for t in sorted({t for t in boundary_timers if sum(m.timer_index == t for m in markers) > 1}):
        problems.append(f"pc {fn.instructions[t].pc:#x}: one timer read feeds several records; the first is used")
    prog.skips = find_skips(prog, {m.store_index for m in markers})
    entry = fn.index_of_pc().get(fn.symbols.get(fn.name, 0), 0)
    seen, prop_problems = propagate(prog, _unique_by_timer(markers), entry)
    problems += prop_problems
    cost = marker_only_instructions(prog, va, {i for m in markers for i in m.cost_indices})
    reasons, reason_problems = _ambiguity_reasons(prog, seen, events)
    return _assemble(fn, sha, events, markers, seen, problems + reason_problems, cost, reasons)


def _debug_build(kernel: str, resolved: int, unresolved: int) -> str:
    """What is true of an unoptimized kernel: how many record tags were resolved, and why not all."""
    if not resolved:
        outcome = "no ikp record's tag could be resolved, so there are no regions to map"
    elif unresolved:
        outcome = f"{unresolved} record tag(s) could not be resolved, so regions may be missing or ambiguous"
    else:
        outcome = "its record tags were resolved here, but nothing guarantees that for other debug builds"
    return (
        f"kernel {kernel} is a debug build (unoptimized code, as nvcc -G or -Xptxas -O0 emit): {outcome}; "
        "debug builds pass tags through local memory and calls, and pc2region does not support them: "
        "map an optimized build (add -lineinfo for source lines)"
    )


def _unique_by_timer(markers: list[Marker]) -> list[Marker]:
    """One marker per timer read: the first boundary record stored from it (else the first record)."""
    out: dict[int, Marker] = {}
    for m in markers:
        if m.timer_index not in out or (m.is_boundary and not out[m.timer_index].is_boundary):
            out[m.timer_index] = m
    return list(out.values())


def _ambiguity_reasons(prog: Program, seen: list[set], events: dict[int, str]) -> tuple[dict[int, str], list[str]]:
    """A reason for every PC that gets <ambiguous>: where its stacks come from. A cause is a PC after
    an unresolved marker, or where paths with different stacks meet (an unbalanced region, a boundary
    under a user condition, a subroutine called from different regions); every other ambiguous PC
    inherits the reason of the cause it is reached from. Causes are also reported in `problems`."""
    ins = prog.instructions
    ambiguous = [len(st) > 1 or any(e < 0 for s in st for e in s) for st in seen]
    entries = {e for es in prog.callees.values() for e in es}
    reason: dict[int, str] = {}
    problems: list[str] = []
    todo: list[int] = []
    for i, amb in enumerate(ambiguous):
        if not amb:
            continue
        unknown = sorted({-e - 1 for s in seen[i] for e in s if e < 0})
        names = sorted(_path_name(s, events) for s in seen[i])
        if unknown:
            reason[i] = (
                f"after the marker(s) at pc {', '.join(hex(ins[u].pc) for u in unknown)} whose tag is not resolved"
            )
        elif any(seen[p] != seen[i] for p in prog.pred[i]) and not any(ambiguous[p] for p in prog.pred[i]):
            origins = "; ".join(
                f"pc {ins[p].pc:#x}: {', '.join(sorted(_path_name(s, events) for s in seen[p]))}"
                for p in prog.pred[i]
                if seen[p]
            )
            what = (
                "a subroutine called from call sites in different regions"
                if i in entries
                else "a region begins or ends on one path only (an unbalanced region, or a boundary under a "
                "condition that is not a capacity guard)"
            )
            reason[i] = f"paths with different region stacks meet at pc {ins[i].pc:#x} ({origins}): {what}"
            problems.append(f"pc {ins[i].pc:#x}: reached with region stacks {names}: {what}")
        else:
            continue
        todo.append(i)
    while todo:  # ambiguous PCs reached from a cause inherit its reason
        i = todo.pop()
        for s in list(prog.succ[i]) + list(prog.callees.get(i, ())):
            if ambiguous[s] and s not in reason:
                reason[s] = reason[i]
                todo.append(s)
    for i, amb in enumerate(ambiguous):
        if amb and i not in reason:  # e.g. a return site whose callee changes the stack on some paths
            reason[i] = "reached with region stacks " + ", ".join(sorted(_path_name(s, events) for s in seen[i]))
    return {ins[i].pc: r for i, r in reason.items()}, problems


def _assemble(fn, sha, events, markers, seen, problems, cost: set[int], reasons: dict[int, str]) -> RegionMap:
    ins = fn.instructions
    paths = list(SPECIAL_PATHS)
    stacks: list = [None, None, None]
    index: dict[tuple, int] = {}
    region = np.empty(len(ins), np.int64)
    ambiguous: dict[int, list[str]] = {}
    for i, st in enumerate(seen):
        if not st:
            region[i] = paths.index(UNREACHABLE)
        elif len(st) > 1 or any(e < 0 for s in st for e in s):
            region[i] = paths.index(AMBIGUOUS)
            ambiguous[ins[i].pc] = sorted(_path_name(s, events) for s in st)
        else:
            (s,) = st
            if not s:
                region[i] = paths.index(OUTSIDE)
                continue
            if s not in index:
                index[s] = len(paths)
                paths.append(_path_name(s, events))
                stacks.append(list(s))
            region[i] = index[s]
    is_marker = np.zeros(len(ins), bool)
    is_marker[sorted(cost)] = True
    marker_rows = [
        {
            "pc": ins[m.timer_index].pc,
            "store_pc": ins[m.store_index].pc,
            "event_id": m.event_id,
            "event_type": m.event_type,
            "event": _event_name(events, m.event_id) if m.event_id is not None else None,
            "how": m.how,
            "tag_known_mask": m.tag_mask,
            "tag_known_value": m.tag_value,
            "line": ins[m.timer_index].line,
            "cost_instructions": len(m.cost_indices),
        }
        for m in sorted(markers, key=lambda m: m.timer_index)
    ]
    return RegionMap(
        kernel=fn.name,
        cubin_sha256=sha,
        pc=np.array([x.pc for x in ins], np.int64),
        opcode=[x.opcode for x in ins],
        region=region,
        is_marker=is_marker,
        line=np.array([x.line if x.line is not None else -1 for x in ins], np.int64),
        ends_flow=np.array([sass.ends_flow(x) for x in ins], bool),
        paths=paths,
        stacks=stacks,
        markers=marker_rows,
        events=dict(events),
        problems=problems,
        ambiguous_candidates=ambiguous,
        reasons=reasons,
    )


def map_compiled(compiled: Any, **kwargs) -> RegionMap:
    """Map a compiled CuTe DSL function (compiled with options="--keep-cubin"); no cutlass import."""
    cubin = getattr(compiled, "__cubin__", None)
    if cubin is None:
        artifacts = getattr(compiled, "artifacts", None)
        cubin = getattr(artifacts, "CUBIN", None) if artifacts is not None else None
    if not cubin:
        raise ValueError('the compiled function kept no cubin: compile with options="--keep-cubin"')
    return build_map(bytes(cubin), **kwargs)


def read_cubin(path: str) -> bytes:
    if os.path.isdir(path):
        raise DecodeError("a directory, not a cubin file", source=path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as f:
        return f.read()
