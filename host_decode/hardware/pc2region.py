"""pc2region: map every SASS PC of an instrumented kernel to the region path it executes in.

How (facts in docs/pc2region.md; modules: sass (listing, operand semantics), cfg (control flow),
known_bits (tag values), region_map (the map type), this one (markers, region stacks, the map)):

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
loads move across markers); tests/test_pc2region.py checks maps of real cubins against the known
program structure.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from host_decode.core import wire
from host_decode.core.errors import DecodeError
from host_decode.hardware import sass
from host_decode.hardware.cfg import Program, build_program, find_skips
from host_decode.hardware.known_bits import ValueAnalysis
from host_decode.hardware.region_map import (
    AMBIGUOUS,
    MAP_FORMAT,
    OUTSIDE,
    SPECIAL_PATHS,
    UNREACHABLE,
    RegionMap,
    load_map,
)
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

# Regions nest to any depth the code has; a stack that grows around a loop (BEGIN without END in a
# loop body) is detected as such (_grows_around_a_loop). This cap only bounds pathological code.
MAX_REGION_DEPTH = 4096
MAX_CALL_DEPTH = 16  # recursion guard

# ================================================================================================
# Markers
# ================================================================================================


@dataclasses.dataclass
class Marker:
    timer_index: int  # the %globaltimer read (region boundary)
    store_index: int  # the record store
    tag_mask: int  # known bits of tag32
    tag_value: int
    event_id: int | None = None
    event_type: int | None = None
    how: str = "unresolved"  # dataflow | table | line | unresolved
    cost_indices: tuple = ()  # instructions that exist only for this marker (lower bound)
    line_conflict: int = 0  # resolved markers on its source line write this many different events

    @property
    def resolved(self) -> bool:
        """Known enough to act on: BEGIN/END need the id; an INSTANT or FINALIZE changes no stack."""
        if self.event_type in (wire.EventType.INSTANT, wire.EventType.FINALIZE):
            return True
        return self.event_id is not None and self.event_type is not None

    @property
    def is_boundary(self) -> bool:
        return self.resolved and self.event_type in (wire.EventType.BEGIN, wire.EventType.END)


_LOW12 = (1 << wire.LANE_SHIFT) - 1


def find_markers(prog: Program, va: ValueAnalysis, unoptimized: bool = False) -> tuple[list[Marker], list[str], int]:
    """Records (64-bit stores of a tag word next to a timer word), problems naming the other stores of
    timer data, and how many 64-bit stores look timer-derived in both words. `unoptimized`: a debug
    build, where such a store is more likely a record whose tag could not be separated from its timer
    than a bare timestamp."""
    markers: list[Marker] = []
    both_timer = 0
    problems: list[str] = []
    ins = prog.instructions
    for s, x in enumerate(ins):
        if x.base not in sass.STORE_OPS or not x.operands:
            continue
        data = sass.reg_name(x.operands[-1])
        width = sass.reg_width(x.opcode)
        if data is None:
            continue
        values = [va.value(sass.reg_plus(data, k), s) for k in range(width)]
        if not any(v.timer for v in values):
            continue
        if width < 2:
            problems.append(f"pc {x.pc:#x}: {_foreign_32bit(values[0])} stored to {_space(x)}: {_NOT_V1}")
            continue
        for pair in range(width // 2):
            lo, hi = values[2 * pair], values[2 * pair + 1]
            both_timer += bool(lo.timer and hi.timer)
            if lo.timer and hi.timer and unoptimized:
                problems.append(
                    f"pc {x.pc:#x}: both words of a 64-bit store to {_space(x)} derive from %globaltimer as far as "
                    "the analysis can tell (unoptimized code builds a record's word through shifts, local memory "
                    "and calls, where its tag cannot be told apart from the timer): not used as a region boundary"
                )
                continue
            if lo.timer and hi.timer:
                problems.append(
                    f"pc {x.pc:#x}: a 64-bit %globaltimer timestamp without a tag stored to {_space(x)} "
                    f"(a bare timestamp, as hand-written or Proton-style timers write): {_NOT_V1}"
                )
                continue
            if not lo.timer and not hi.timer:
                continue  # not a record
            tag, timer = (lo, hi) if hi.timer else (hi, lo)
            tag_reg = sass.reg_plus(data, 2 * pair + (0 if hi.timer else 1))
            reads = sorted(timer.timer)
            if len(reads) > 1:
                problems.append(
                    f"pc {x.pc:#x}: record timer comes from several reads {[hex(ins[r].pc) for r in reads]}"
                )
            m = Marker(reads[-1], s, tag.mask, tag.value)
            m.cost_indices = tuple(
                sorted(_marker_cost(prog, va, m, sass.reg_plus(data, 2 * pair + (1 if hi.timer else 0)), tag_reg))
            )
            if m.tag_mask & _LOW12 == _LOW12:
                low = m.tag_value & _LOW12
                m.event_id, m.event_type, m.how = low >> wire.EVENT_ID_SHIFT, low & 3, "dataflow"
            elif m.tag_mask & 3 == 3 and m.tag_value & 3 in (wire.EventType.INSTANT, wire.EventType.FINALIZE):
                # e.g. FINALIZE carries the SM id in its event id: the id is a run-time value
                m.event_type, m.how = m.tag_value & 3, "dataflow (id computed at run time)"
            markers.append(m)
    return markers, problems, both_timer


_NOT_V1 = "a foreign marker, not an ikp v1 record; not used as a region boundary"


def _foreign_32bit(v) -> str:
    """Name a 32-bit store of timer data: IKET-style timer|tag (low bits replaced by a constant) or bare."""
    n = v.low_known()
    if n:
        return (
            f"a 32-bit timer|tag word (IKET style: %globaltimer_lo with its low {n} bits replaced by the tag "
            f"{v.value & ((1 << n) - 1):#x})"
        )
    return "a bare 32-bit %globaltimer value"


def _space(x) -> str:
    return {"STG": "global memory", "STS": "shared memory", "STAS": "shared memory"}.get(x.base, "memory")


def _marker_cost(prog: Program, va: ValueAnalysis, m: Marker, timer_reg: str, tag_reg: str) -> set[int]:
    """Instructions that exist only to write this record: the timer read (+ its NOP), copies of the
    timer into the stored register, register copies forming the pair, and the store. Address and tag
    arithmetic shared with other code is not counted (so this is a lower bound)."""
    ins = prog.instructions
    out = {m.timer_index, m.store_index}
    if m.timer_index + 1 < len(ins) and ins[m.timer_index + 1].base == "NOP":
        out.add(m.timer_index + 1)
    for reg in (timer_reg, tag_reg):
        at = m.store_index
        for _ in range(4):  # follow plain copies back
            defs = va.reaching_defs(reg, at)
            if len(defs) != 1 or defs[0] < 0:
                break
            d = ins[defs[0]]
            src = sass.copy_source(d)
            if src is None:
                break
            out.add(defs[0])
            reg, at = src, defs[0]
    return out


def marker_only_instructions(prog: Program, va: ValueAnalysis, base: set[int]) -> set[int]:
    """Grow the markers' own instructions by those whose results only feed marker instructions
    within their block (address arithmetic of the record, guard compares, tag copies, a reloaded
    buffer base). Results that may live past the block (a loop-carried cursor) are not claimed, so
    the instrumentation cost stays a lower bound."""
    ins = prog.instructions
    cost = set(base)
    uses = [None] * len(ins)
    changed = True
    while changed:
        changed = False
        for i, x in enumerate(ins):
            if i in cost or x.base in sass.SIDE_EFFECT_OPS or x.base in sass.MMA_OPS or x.never:
                continue
            written = sass.writes(x)
            if not written or not _only_feeds(i, written, cost, va, uses):
                continue
            cost.add(i)
            changed = True
    return cost


def _only_feeds(i: int, written: list[str], cost: set[int], va: ValueAnalysis, uses: list) -> bool:
    ins = va.ins
    end = i + 1
    while end < len(ins) and va.block_start[end] == va.block_start[i]:
        end += 1
    used = False
    for reg in written:
        for k in range(i + 1, end):
            if uses[k] is None:
                uses[k] = sass.uses(ins[k])
            if reg in uses[k] or sass.ALL_REGS in uses[k]:
                if k not in cost:
                    return False
                used = True
            if reg in sass.writes(ins[k]) and not ins[k].predicated:
                break  # redefined: later uses read another value
        else:
            last = ins[end - 1]
            if not (last.base == "EXIT" and not sass.conditional(last)):
                return False  # may be live past the block (nothing is live after an EXIT)
    return used


def resolve_markers(markers: list[Marker], prog: Program, allowed: set[tuple[int, int]] | None) -> None:
    """Fill in markers whose tag bits are partly unknown: first from the trace-time table of
    (event_id, type) pairs, then from resolved markers on the same source line."""
    if allowed:
        for m in markers:
            if m.event_id is not None and m.event_type is not None and (m.event_id, m.event_type) not in allowed:
                m.how = "dataflow (not in marker table)"
            if m.resolved:
                continue
            low_mask, low_val = m.tag_mask & _LOW12, m.tag_value & _LOW12
            cands = [(e, t) for e, t in allowed if ((e << wire.EVENT_ID_SHIFT) | t) & low_mask == low_val]
            if len(cands) == 1:
                m.event_id, m.event_type = cands[0]
                m.how = "table"
    ins = prog.instructions
    by_line: dict[tuple, set] = {}
    for m in markers:
        x = ins[m.timer_index]
        if m.event_id is not None and m.event_type is not None and x.line is not None:
            by_line.setdefault((x.file, x.line), set()).add((m.event_id, m.event_type))
    for m in markers:
        x = ins[m.timer_index]
        if m.resolved or x.line is None:
            continue
        on_line = by_line.get((x.file, x.line), set())
        # unrolled copies of one marker share its line (a one-line region may put its BEGIN and END
        # there too); an inlined helper's line (ikp.cuh's timer read) is shared by every marker: a
        # line whose markers write different event ids decides nothing
        ids = {e for e, _ in on_line}
        if len(ids) > 1:
            m.line_conflict = len(ids)
            continue
        low_mask, low_val = m.tag_mask & _LOW12, m.tag_value & _LOW12
        cands = {c for c in on_line if ((c[0] << wire.EVENT_ID_SHIFT) | c[1]) & low_mask == low_val}
        if len(cands) == 1:
            m.event_id, m.event_type = next(iter(cands))
            m.how = "line"


# ================================================================================================
# Region-stack propagation
# ================================================================================================


def _unknown_token(marker: Marker) -> int:
    """Stack element standing for an unresolved marker's unknown boundary (negative: no event id)."""
    return -(marker.timer_index + 1)


def _apply(stack: tuple, marker: Marker | None) -> tuple:
    if marker is None:
        return stack
    if not marker.resolved:  # its effect is unknown: what follows cannot be assigned (a reason says why)
        token = _unknown_token(marker)
        return stack if token in stack else stack + (token,)
    eid, etype = marker.event_id, marker.event_type
    if etype == wire.EventType.BEGIN:
        return stack + (eid,)
    if etype == wire.EventType.END:
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] == eid:
                return stack[:k] + stack[k + 1 :]
        return stack  # an END whose BEGIN is not open on this path: counted by the caller
    return stack  # INSTANT (reserved ones included) and FINALIZE are not boundaries


def propagate(prog: Program, markers: list[Marker], entry: int = 0) -> tuple[list[set], list[str]]:
    """Fixed point of region stacks over (instruction, region stack, call stack, assumptions) states.
    Returns per-instruction sets of region stacks (as seen by that instruction) and problems.

    Assumptions make branches around markers path-sensitive: `if blocked: begin(w)` ... `if blocked:
    end(w)` compiles to two branches on one predicate (`@P0 BRA` twice, P0 not rewritten between); the
    state remembers which way the first went, so the second follows the same way (an FA4 wait recorded
    only when it blocks). An assumption is forgotten at any instruction that names its predicate
    (test_correlated_branches_on_one_predicate_stay_balanced)."""
    ins = prog.instructions
    at_timer = {m.timer_index: m for m in markers}
    relevant = _branches_around_markers(prog, at_timer)
    seen_stacks: list[set] = [set() for _ in ins]
    visited: set = set()
    stacks_at: dict[tuple[int, tuple], set[tuple]] = {}
    problems: set[str] = set()
    todo = [(entry, (), (), frozenset())]
    while todo:
        i, rstack, cstack, assume = todo.pop()
        while True:  # walk straight-line code without touching the worklist
            if (i, rstack, cstack, assume) in visited:
                break
            visited.add((i, rstack, cstack, assume))
            x = ins[i]
            here = stacks_at.setdefault((i, cstack), set())
            here.add(rstack)
            if _grows_around_a_loop(rstack, here):
                problems.add(
                    f"pc {x.pc:#x}: the region stack grows each time around a loop (a BEGIN without END in the loop "
                    "body?): not followed further"
                )
                break
            marker = at_timer.get(i)
            after = _apply(rstack, marker)
            if marker is not None and marker.resolved and marker.event_type == wire.EventType.END and after == rstack:
                problems.add(f"pc {x.pc:#x}: END of event {marker.event_id} with no open BEGIN on some path")
            # the timer reads bounding a region belong to it: a BEGIN read sees the new stack, an END read the old
            seen_stacks[i].add(after if marker is not None and marker.event_type == wire.EventType.BEGIN else rstack)
            if len(after) > MAX_REGION_DEPTH:
                problems.add(f"pc {x.pc:#x}: region stack deeper than {MAX_REGION_DEPTH}: not followed further")
                break
            if assume and x.base not in ("BRA", "JMP"):
                assume = frozenset(a for a in assume if not sass.mentions_pred(x, a[0]))
            nxt = _successors(prog, i, after, cstack, problems, at_timer, assume, i in relevant)
            if not nxt:
                break
            (i, rstack, cstack, assume), rest = nxt[0], nxt[1:]
            todo.extend(rest)
    return seen_stacks, sorted(problems)


def _branches_around_markers(prog: Program, at_timer: dict[int, Marker]) -> set[int]:
    """Guarded branches (not capacity guards) with a marker between them and their target: the ones
    whose direction decides a region boundary, so worth remembering."""
    timers = sorted(at_timer)
    out = set()
    for b, x in enumerate(prog.instructions):
        if x.base != "BRA" or not x.predicated or x.never or b in prog.skips:
            continue
        for t in prog.succ[b]:
            lo, hi = min(b, t), max(b, t)
            if any(lo < k < hi for k in timers):
                out.add(b)
    return out


def _grows_around_a_loop(stack: tuple, seen_here: set[tuple]) -> bool:
    """The same PC (same call stack) was reached with s and s + t, and now with s + t + t: only a cycle
    pushes the same t again (two different paths merging give s and s + t, never a third copy)."""
    for k in range(1, len(stack) // 2 + 1):
        t = stack[-k:]
        if stack[-2 * k : -k] == t and stack[:-k] in seen_here and stack[: -2 * k] in seen_here:
            return True
    return False


def _successors(
    prog: Program,
    i: int,
    rstack: tuple,
    cstack: tuple,
    problems: set,
    skip_effects: dict[int, Marker],
    assume: frozenset = frozenset(),
    remember: bool = False,
) -> list[tuple]:
    x = prog.instructions[i]
    if x.base == "RET" and not x.never:
        out = []
        if cstack:
            out.append((cstack[-1], rstack, cstack[:-1], assume))
        if sass.conditional(x) and i + 1 < len(prog.instructions):
            out.append((i + 1, rstack, cstack, assume))
        return out
    if i in prog.callees and not x.never:
        if len(cstack) >= MAX_CALL_DEPTH:
            problems.add(f"pc {x.pc:#x}: call depth above {MAX_CALL_DEPTH} (recursion), not followed")
            return []
        out = [(entry, rstack, cstack + (i + 1,), frozenset()) for entry in prog.callees[i]]
        if sass.conditional(x):
            out.append((i + 1, rstack, cstack, frozenset()))
        return out
    if remember:  # @P0 BRA t: the jump means P0 holds (guard "P0") or not (guard "!P0")
        pred, taken_value = x.guard.lstrip("!"), not x.guard.startswith("!")
        known = dict(assume).get(pred)
        out = []
        for s in prog.succ[i]:
            jump = s != i + 1 or prog.succ[i] == [i + 1]
            value = taken_value if jump else not taken_value
            if known is None or known == value:
                out.append((s, rstack, cstack, assume | {(pred, value)}))
        return out
    out = []
    for s in prog.succ[i]:
        guarded = prog.skips.get(i)
        if guarded is not None and s == guarded[2] and sass.conditional(x):
            out.append((s, _apply_range(rstack, guarded[:2], skip_effects), cstack, assume))
        else:
            out.append((s, rstack, cstack, assume))
    return out


def _apply_range(rstack: tuple, rng: tuple[int, int], effects: dict[int, Marker]) -> tuple:
    for k in range(rng[0], rng[1]):
        if k in effects:
            rstack = _apply(rstack, effects[k])
    return rstack


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
    if not unoptimized and markers and not any(m.resolved or m.tag_mask & _LOW12 for m in markers):
        for m in markers:  # no v1 record anywhere: a (timer, payload) pair of another tool
            problems.append(
                f"pc {fn.instructions[m.store_index].pc:#x}: a 64-bit store of a %globaltimer value next to a word "
                f"with no known tag bits (known {m.tag_mask & _LOW12:#05x}) in a kernel without any ikp v1 "
                f"record: {_NOT_V1}"
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
                f"(known bits {m.tag_mask & _LOW12:#05x} = {m.tag_value & _LOW12:#05x}){why}"
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
