"""Region stacks of pc2region (host_decode.hardware.pc2region, step 3): a region stack propagated over the
control-flow graph to a fixed point.

BEGIN pushes, END pops (the innermost open region of that id, so overlapping async regions do not
mis-nest), reserved instants and FINALIZE change nothing. Predicated branches fall through and jump, EXIT /
RET end, CALL enters the subroutine with a return address (states carry a call stack, so a helper called
from two regions is seen in both and correctly returns to each caller), indirect branches go to every label
of the function. The timer reads bounding a region belong to it.

Invariants, and the tests that guard them (tests/unit/host_decode/hardware/test_pc2region.py): calls return to their own
call site (::test_calls_return_to_their_own_call_site, ::test_subroutines_after_exit_follow_their_call_site); two paths
with different regions are ambiguous (::test_two_paths_with_different_regions_are_ambiguous); a guard branch
over a lone marker does not split its region (::test_guard_branch_over_a_lone_marker_does_not_split_the_region);
correlated branches stay balanced (::test_correlated_branches_on_one_predicate_stay_balanced); a BEGIN without
END in a loop is detected, deep nesting is not (::test_begin_without_end_in_a_loop_is_detected_and_deep_nesting_is_not).
"""

from __future__ import annotations

from host_decode.core import wire
from host_decode.hardware import sass
from host_decode.hardware.cfg import Program
from host_decode.hardware.markers import Marker

# Regions nest to any depth the code has; a stack that grows around a loop (BEGIN without END in a
# loop body) is detected as such (_grows_around_a_loop). This cap only bounds pathological code.
MAX_REGION_DEPTH = 4096
MAX_CALL_DEPTH = 16  # recursion guard


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
