"""Control-flow graph of one SASS function (by instruction index) for pc2region.

Invariants (tests/unit/host_decode/hardware/test_pc2region.py): predicated branches both jump and fall through; EXIT /
RET end a path; a CALL has a summary edge to its return site and ``callees`` names the callee entries (one for a
direct call; every subroutine of the section for an indirect ``CALL.REL.NOINC R6``, reported in
``problems``: test_suite_indirect_call); a jump table's BRX goes to its ``BRANCH_TARGETS`` only
(test_suite_jump_table)
(test_subroutines_after_exit_follow_their_call_site); a conditional forward branch over a closed range of
code is a "skip" whose edge carries the range's marker effects
(test_guard_branch_over_a_lone_marker_does_not_split_the_region).
"""

from __future__ import annotations

import dataclasses

from host_decode.hardware import sass
from host_decode.hardware.sass import Function, Instruction

# ================================================================================================
# Control flow
# ================================================================================================


@dataclasses.dataclass
class Program:
    """A function's instructions with intra-procedural successor / predecessor lists (by index)."""

    fn: Function
    succ: list[list[int]]  # fall-through and branch edges (CALL -> return site summary edge too)
    pred: list[list[int]]
    callees: dict[int, list[int]]  # CALL index -> callee entry indices (several: an indirect call)
    problems: list[str]
    skips: dict[int, tuple[int, int, int]] = dataclasses.field(default_factory=dict)  # b -> (start, end, target)

    @property
    def instructions(self) -> list[Instruction]:
        return self.fn.instructions


def build_program(fn: Function) -> Program:
    ins = fn.instructions
    index = fn.index_of_pc()
    label_index = {name: index[pc] for name, pc in fn.labels.items() if pc in index}
    entries = {index[pc] for pc in fn.symbols.values() if pc in index}
    # an indirect branch without a target list may reach any label, but not a function's entry
    all_labels = sorted(set(label_index.values()) - entries)
    subroutines = sorted(index[pc] for name, pc in fn.symbols.items() if name != fn.name and pc in index)
    succ: list[list[int]] = [[] for _ in ins]
    callees: dict[int, list[int]] = {}
    problems: list[str] = []
    n = len(ins)
    for i, x in enumerate(ins):
        base = x.base
        falls = i + 1 < n and (sass.conditional(x) or x.never)
        if x.never:
            succ[i] = [i + 1] if i + 1 < n else []
            continue
        if base in ("BRA", "JMP") and x.targets:
            succ[i] = [label_index[t] for t in x.targets if t in label_index] + ([i + 1] if falls else [])
            missing = [t for t in x.targets if t not in label_index]
            if missing:
                problems.append(f"pc {x.pc:#x}: branch target(s) {missing} not in the listing")
            if ".DIV" in x.opcode and i + 1 < n and i + 1 not in succ[i]:
                succ[i].append(i + 1)
        elif base in ("BRX", "JMX", "BRA", "JMP"):  # indirect: its jump table, else every label
            named = [label_index[t] for t in x.targets if t in label_index]
            if not named:
                problems.append(
                    f"pc {x.pc:#x}: indirect branch {x.opcode} without a target list: assumed to reach every label"
                )
            succ[i] = (named or all_labels) + ([i + 1] if falls else [])
        elif base in ("EXIT", "RET", "KILL") or (base == "BPT" and "TRAP" in x.opcode):
            succ[i] = [i + 1] if falls else []
        elif base == "CALL":
            callee = [label_index[t] for t in x.targets if t in label_index]
            if any(sass.reg_name(o) for o in x.operands):  # CALL.REL.NOINC R6: through a register
                names = sorted(n for n, pc in fn.symbols.items() if n != fn.name)
                if subroutines:
                    callees[i] = subroutines
                problems.append(
                    f"pc {x.pc:#x}: indirect call through {x.operands[0]}: the callee is unknown; "
                    + (
                        f"assumed to be one of the section's subroutines {names}"
                        if names
                        else "no subroutine in the section, treated as a no-op"
                    )
                )
            elif callee:
                callees[i] = callee[:1]
            else:
                problems.append(f"pc {x.pc:#x}: call target {x.targets or x.operands} not resolved (treated as no-op)")
            succ[i] = [i + 1] if i + 1 < n else []  # summary edge: the call returns to the next instruction
        else:
            succ[i] = [i + 1] if i + 1 < n else []
    pred: list[list[int]] = [[] for _ in ins]
    for i, ss in enumerate(succ):
        for s in ss:
            pred[s].append(i)
    for c, entry_list in callees.items():
        for entry in entry_list:
            pred[entry].append(c)  # registers reaching the callee were defined before the call
    prog = Program(fn, succ, pred, callees, problems)
    return prog



def find_skips(prog: Program, record_stores: set[int]) -> dict[int, tuple[int, int, int]]:
    """Capacity guards: conditional branches at b to t that jump over a closed range of code [b+1, end)
    (see _guard_range_end; every edge of the range stays in it or goes to t, nothing else enters it,
    no EXIT/RET in it)
    whose range only writes records: no store but the record stores (`record_stores`), no load,
    atomic, barrier or call, and no register written in it is read after t before being rewritten.
    Markers in such a range are guarded by a run-time condition (a capacity check, a leader test)
    that the region structure must not depend on, so the skip edge carries the range's marker
    effects too. A user branch around a marker changes program state (a cursor-mode record always
    advances the cursor register), so it is no guard: an END on one path only leaves the region
    open on the other (test_suite_unbalanced_region)."""
    ins = prog.instructions
    skips: dict[int, tuple[int, int, int]] = {}
    live = _Liveness(prog)
    for b, x in enumerate(ins):
        if x.base != "BRA" or not sass.conditional(x) or len(prog.succ[b]) != 2 or min(prog.succ[b]) != b + 1:
            continue
        t = max(prog.succ[b])
        end = _guard_range_end(prog, b, t)
        if end is None:
            continue
        closed = True
        written: set[str] = set()
        for k in range(b + 1, end):
            y = ins[k]
            leaves = any(not (b < s < end or s == t) for s in prog.succ[k])
            if y.base in ("EXIT", "RET", "BRX", "JMX", "KILL") or leaves:
                closed = False
                break
            if k > b + 1 and any(not (b <= p < end) for p in prog.pred[k] if p not in prog.callees or p < b):
                closed = False
                break
            if (y.base in sass.STORE_OPS and k not in record_stores) or y.base in _NOT_IN_A_GUARD:
                closed = False
                break
            written.update(r for r in sass.writes(y) if not sass.is_pred(r))
        if closed and not live.any_live(t, written):
            skips[b] = (b + 1, end, t)
    return skips


MAX_GUARD_RANGE = 64  # instructions a capacity guard may jump over (a record is ~6-12 of them)


def _guard_range_end(prog: Program, b: int, t: int) -> int | None:
    """End (exclusive) of the code a conditional branch at b to t jumps over: the range falls into t
    (`@P0 BRA t; <record>; t:`), or ends with an unconditional branch to t, which is how ptxas
    tail-merges a guard at the end of an if/else arm (`@P0 BRA t; <record>; BRA t`)."""
    ins = prog.instructions
    for k in range(b + 1, min(len(ins), b + 1 + MAX_GUARD_RANGE)):
        if k == t:
            return k
        y = ins[k]
        if y.base == "BRA" and not sass.conditional(y) and not y.never and prog.succ[k] == [t]:
            return k + 1
    return None


# what a capacity guard's range never holds (besides stores other than the records)
_NOT_IN_A_GUARD = {
    "LDG", "LD", "LDS", "LDL", "LDSM", "LDGSTS", "ATOM", "ATOMG", "ATOMS", "RED", "REDG", "REDAS",
    "BAR", "CALL", "STL", "SYNCS", "ARRIVES", "UTMALDG", "UTMASTG", "UBLKCP", "WARPSYNC", "MEMBAR",
}  # fmt: skip


class _Liveness:
    """Is a register read after an instruction before it is rewritten (on some path)?"""

    MAX_VISITS = 20000  # per query; past it the answer is "live" (no guard: never silently merged)

    def __init__(self, prog: Program):
        self.prog = prog
        self._uses: list[set[str] | None] = [None] * len(prog.instructions)

    def _uses_of(self, i: int) -> set[str]:
        if self._uses[i] is None:
            self._uses[i] = sass.uses(self.prog.instructions[i])
        return self._uses[i]

    def any_live(self, start: int, regs: set[str]) -> bool:
        """A state is (instruction, register, guards under which the register was already rewritten):
        `@!P0 CS2R R9` then `@!P0 STG ..., R8` does not read the old R9 (ptxas if-converts records
        into such same-guard sequences); rewriting the predicate forgets those guards."""
        if not regs:
            return False
        ins = self.prog.instructions
        explored: set[tuple[int, str, frozenset]] = set()
        todo = [(start, r, frozenset()) for r in regs]
        while todo:
            i, reg, killed = todo.pop()
            if (i, reg, killed) in explored:
                continue
            explored.add((i, reg, killed))
            if len(explored) > self.MAX_VISITS:
                return True
            x = ins[i]
            used = self._uses_of(i)
            if sass.ALL_REGS in used or (reg in used and not (x.predicated and x.guard in killed)):
                return True
            written = sass.writes(x)
            if reg in written:
                if not x.predicated:
                    continue
                killed = killed | {x.guard}
            if killed and any(sass.is_pred(w) for w in written) or x.base in ("R2P", "UR2UP", "CALL"):
                killed = frozenset(g for g in killed if g.lstrip("!") not in written)
                if x.base in ("R2P", "UR2UP", "CALL"):
                    killed = frozenset()
            for s in list(self.prog.succ[i]) + list(self.prog.callees.get(i, ())):
                todo.append((s, reg, killed))
        return False
