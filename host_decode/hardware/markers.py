"""Markers of pc2region (host_decode.hardware.pc2region, steps 1-2): the record stores of an instrumented
kernel in its SASS, their tags recovered, and the instructions that only serve them.

* A marker is a 64-bit store (STG/ST/STS .64/.128) of a register pair in which one register derives from
  a ``%globaltimer`` read (``S2R``/``S2UR``/``CS2R``/``CS2UR`` of ``SR_GLOBALTIMER*``: sass.reads_timer) and
  the other holds the tag ``(lane << 12) | (event_id << 2) | type``.
* Each tag's low 12 bits come from a known-bits data-flow evaluation over reaching definitions
  (host_decode.hardware.known_bits); unknown bits are resolved from a trace-time marker table when one is
  given, then from other markers on the same source line (unrolled copies), else the marker is unresolved.
* The instrumentation's cost: the instructions that only feed markers (timer reads, tag arithmetic,
  address math used by nothing else).

Invariants, and the tests that guard them (tests/unit/host_decode/hardware/test_pc2region.py): exact markers and cost on
real cubins (::test_markers_cubin_markers_and_cost, ::test_instrumentation_cost_claims_only_marker_feeding_code); every
tag shape ptxas emits (::test_tag_shapes_hfma2_lop3_iadd3_lea, ::test_timer_in_low_register_and_cs2r,
::test_sm120_cs2ur_timer_reads_are_markers); guarded tag definitions
(::test_predicated_tag_definitions_under_the_same_guard, ::test_guard_rewritten_between_def_and_store_is_not_trusted);
unknown bits resolved by table or line (::test_marker_table_and_line_fallback_resolve_unknown_bits).
"""

from __future__ import annotations

import dataclasses

from host_decode.core import wire
from host_decode.hardware import sass
from host_decode.hardware.cfg import Program
from host_decode.hardware.known_bits import ValueAnalysis


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


LOW12 = (1 << wire.LANE_SHIFT) - 1  # the tag bits below the lane: event id and type


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
            problems.append(f"pc {x.pc:#x}: {_foreign_32bit(values[0])} stored to {_space(x)}: {NOT_V1}")
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
                    f"(a bare timestamp, as hand-written or Proton-style timers write): {NOT_V1}"
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
            if m.tag_mask & LOW12 == LOW12:
                low = m.tag_value & LOW12
                m.event_id, m.event_type, m.how = low >> wire.EVENT_ID_SHIFT, low & 3, "dataflow"
            elif m.tag_mask & 3 == 3 and m.tag_value & 3 in (wire.EventType.INSTANT, wire.EventType.FINALIZE):
                # e.g. FINALIZE carries the SM id in its event id: the id is a run-time value
                m.event_type, m.how = m.tag_value & 3, "dataflow (id computed at run time)"
            markers.append(m)
    return markers, problems, both_timer


NOT_V1 = "a foreign marker, not an ikp v1 record; not used as a region boundary"


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
            low_mask, low_val = m.tag_mask & LOW12, m.tag_value & LOW12
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
        low_mask, low_val = m.tag_mask & LOW12, m.tag_value & LOW12
        cands = {c for c in on_line if ((c[0] << wire.EVENT_ID_SHIFT) | c[1]) & low_mask == low_val}
        if len(cands) == 1:
            m.event_id, m.event_type = next(iter(cands))
            m.how = "line"
