"""Control-flow graph of one SASS function (by instruction index) for pc2region.

Invariants (tests/test_pc2region.py): predicated branches both jump and fall through; EXIT / RET end a
path; a CALL has a summary edge to its return site and ``callees`` names the callee entries (one for a
direct call; every subroutine of the section for an indirect ``CALL.REL.NOINC R6``, reported in
``problems``: test_suite_indirect_call); a jump table's BRX goes to its ``BRANCH_TARGETS`` only
(test_suite_jump_table)
(test_subroutines_after_exit_follow_their_call_site); a conditional forward branch over a closed range of
code is a "skip" whose edge carries the range's marker effects (test_guard_branch_over_a_lone_marker_does_not_split_the_region).
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
    skips: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)  # see find_skips

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
                    + (f"assumed to be one of the section's subroutines {names}" if names else "no subroutine in the section, treated as a no-op")
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
    prog.skips = find_skips(prog)
    return prog



def find_skips(prog: Program) -> dict[int, tuple[int, int]]:
    """Conditional forward branches that jump over a closed range of code [b+1, t) (every edge of the
    range stays in it or falls into t, nothing else enters it, no EXIT/RET in it). Markers inside such
    a range are guarded by a run-time condition (a capacity check, a leader test); the region
    structure must not depend on it, so the skip edge carries the range's marker effects too."""
    ins = prog.instructions
    skips: dict[int, tuple[int, int]] = {}
    for b, x in enumerate(ins):
        if x.base != "BRA" or not sass.conditional(x) or len(prog.succ[b]) != 2:
            continue
        t = max(prog.succ[b])
        if t <= b + 1 or min(prog.succ[b]) != b + 1:
            continue
        closed = True
        for k in range(b + 1, t):
            y = ins[k]
            if y.base in ("EXIT", "RET", "BRX", "JMX", "KILL") or any(not (b < s <= t) for s in prog.succ[k]):
                closed = False
                break
            if k > b + 1 and any(not (b <= p < t) for p in prog.pred[k] if p not in prog.callees or p < b):
                closed = False
                break
        if closed:
            skips[b] = (b + 1, t)
    return skips
