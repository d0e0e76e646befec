"""The CUDA C++ example's program as a model (examples/cuda_cpp/ikp_example.cu), and the exact checks of
a decoded trace against it: what gpu/cuda_cross_check.py and gpu/twin_cross_check.py judge captures of
cuda_include/ikp.cuh (and of its CuTe DSL twin) with on the GPU, and what the CPU tests judge the
committed captures and a simulated buffer with.

Invariants a change could break:
* `expected` is what the program does, per lane: spans by (event, depth), instants, dropped records at
  every capacity, unmatched begins (tests/unit/cuda_include/test_cuda_include.py::
  test_cross_check_counts_overflow_exactly);
* `check_trace` accepts exactly what the header writes and flags a missing record or a wrong drop count
  (test_cuda_include.py::test_cross_check_accepts_what_the_header_writes,
  ::test_cross_check_catches_a_missing_record, ::test_cross_check_catches_a_wrong_drop_count);
* `v1_reference_decode`, a plain per-record v1 decoder, reads the structure and durations host_decode
  reads (test_cuda_include.py::test_reference_v1_decoder_agrees_on_a_plain_buffer,
  tests/unit/host_decode/load/test_real_captures.py on the committed H200 captures).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from host_decode.core import wire

OUTER, INNER, TICK = 0, 1, 2
BEGIN, END, INSTANT, FINALIZE = (int(t) for t in wire.EventType)
NUM_GROUPS = 2
GRID = (3, 2, 2)  # 3-D grid: lanes are flattened x + y*gx + z*gx*gy
WRITE_STRIDE = 32  # > 24 lanes, as for a persistent kernel
ITERS = 6


# --- the program, as a model -----------------------------------------------------------------------


def program_records(variant: str, group: int, iters: int) -> list[tuple[int, int]]:
    """(event, type) records one lane's leader issues, in program order (mirrors ikp_example.cu)."""
    if variant.startswith("flat"):
        return [(OUTER, BEGIN), (OUTER, END)] * iters
    if group == 0:
        return [(OUTER, BEGIN), (INNER, BEGIN), (INNER, END), (OUTER, END)] * iters
    return [(INNER, BEGIN), (INNER, END), (TICK, INSTANT)] * iters + [
        (OUTER, BEGIN),
        (OUTER, BEGIN),
        (OUTER, END),
        (OUTER, END),
    ]


def user_capacity(records_per_lane: int, extensions: bool) -> int:
    return wire.user_capacity(records_per_lane) if extensions else records_per_lane - 1


def spans_of(records: list[tuple[int, int]]) -> tuple[list[tuple[int, int, int, int]], list[int], int, int]:
    """Pair one lane's records in slot order with a stack per event id.

    -> (spans as (event, depth, begin_index, end_index), instant events, unmatched begins, unmatched ends);
    depth = regions of the lane open (any id) when the span began."""
    stacks: dict[int, list[tuple[int, int]]] = defaultdict(list)
    open_count = 0
    spans, instants, unmatched_end = [], [], 0
    for index, (event, kind) in enumerate(records):
        if kind == BEGIN:
            stacks[event].append((index, open_count))
            open_count += 1
        elif kind == END:
            if stacks[event]:
                begin, depth = stacks[event].pop()
                spans.append((event, depth, begin, index))
                open_count -= 1
            else:
                unmatched_end += 1
        elif kind == INSTANT:
            instants.append(event)
    unmatched_begin = sum(len(s) for s in stacks.values())
    return spans, instants, unmatched_begin, unmatched_end


def canonical(rows) -> tuple:
    """(lane, event, depth) rows (depth -1 for instants) -> sorted (lane, event, depth, count) tuples."""
    return tuple(sorted((lane, event, depth, count) for (lane, event, depth), count in Counter(rows).items()))


def expected(variant: str, records_per_lane: int, iters: int, grid=GRID, extensions: bool = True) -> dict:
    """What the decoded trace must hold: structure, per-lane drops, unmatched begins."""
    num_blocks = grid[0] * grid[1] * grid[2]
    capacity = user_capacity(records_per_lane, extensions)
    rows, dropped, unmatched = [], {}, 0
    for lane in range(num_blocks * NUM_GROUPS):
        issued = program_records(variant, lane % NUM_GROUPS, iters)
        spans, instants, unmatched_begin, _ = spans_of(issued[:capacity])
        rows += [(lane, event, depth) for event, depth, _, _ in spans] + [(lane, event, -1) for event in instants]
        dropped[lane] = max(0, len(issued) - capacity)
        unmatched += unmatched_begin
    return {"structure": canonical(rows), "dropped": dropped, "unmatched_begin": unmatched}


def expected_structure(variant: str, records_per_lane: int, iters: int, grid=GRID) -> tuple:
    return expected(variant, records_per_lane, iters, grid)["structure"]


# --- the decoded trace, canonical ------------------------------------------------------------------


def structure(trace) -> tuple:
    """Canonical comparable description of a decoded Trace: sorted (lane, event, depth, count), with
    depth -1 for user instants. Two buffers of one program (CUDA C++ / CuTe DSL) must give equal ones."""
    spans, inst = trace.spans, trace.instants
    rows = list(zip(spans["lane"].tolist(), spans["event"].tolist(), spans["depth"].tolist()))
    rows += [(lane, event, -1) for lane, event in zip(inst["lane"].tolist(), inst["event"].tolist())]
    return canonical(rows)


# --- an independent minimal v1 decoder (a per-record loop, as peers' decoders are) -------------------


def v1_reference_decode(buf: np.ndarray, write_stride: int, records_per_lane: int) -> dict:
    """Reads a buffer with nothing but the v1 rules: header, lane layout, tag fields, finalize ends a lane.
    Durations are (end - begin) mod 2**32. Refuses anything it does not understand."""
    words = [int(w) & 0xFFFF_FFFF_FFFF_FFFF for w in np.asarray(buf).ravel().tolist()]
    num_blocks, num_groups = words[0] & 0xFFFF_FFFF, words[0] >> 32
    rows, durations, finalizes = [], [], 0
    for lane in range(num_blocks * num_groups):
        records = []
        for k in range(records_per_lane):
            word = words[1 + lane + k * write_stride]
            if word == 0:
                continue
            tag, timer = word & 0xFFFF_FFFF, word >> 32
            kind, event, owner = tag & 3, (tag >> 2) & 0x3FF, tag >> 12
            if owner != lane:
                raise ValueError(f"slot {1 + lane + k * write_stride}: record of lane {owner} in lane {lane}")
            if kind == FINALIZE:
                finalizes += 1
                break
            records.append((event, kind, timer))
        spans, instants, unmatched_begin, unmatched_end = spans_of([(e, t) for e, t, _ in records])
        if unmatched_begin or unmatched_end:
            raise ValueError(f"lane {lane}: {unmatched_begin} unmatched begins, {unmatched_end} unmatched ends")
        rows += [(lane, event, depth) for event, depth, _, _ in spans] + [(lane, event, -1) for event in instants]
        durations += [(lane, records[b][2], (records[e][2] - records[b][2]) % (1 << 32)) for _, _, b, e in spans]
    return {"structure": canonical(rows), "durations": durations, "finalizes": finalizes,
            "num_blocks": num_blocks, "num_groups": num_groups}


def plain_v1_violations(buf: np.ndarray, write_stride: int, records_per_lane: int) -> list[str]:
    """Records a peer's v1 decoder could misread: reserved extension ids, finalize event ids != 0."""
    _, lane, event, kind = wire.unpack_records(np.asarray(buf).view(np.uint64)[1:])
    used = np.asarray(buf).view(np.uint64)[1:] != 0
    problems = []
    reserved = used & (kind != FINALIZE) & np.isin(event, wire.RESERVED_INSTANT_IDS)
    if reserved.any():
        problems.append(f"{int(reserved.sum())} records use reserved extension event ids")
    if (used & (kind == FINALIZE) & (event != 0)).any():
        problems.append("finalize records carry a non-zero event id (SM id extension)")
    return problems


# --- a simulated device (CPU tests of this script's logic) -----------------------------------------


def simulate_buffer(variant: str, records_per_lane: int, iters: int, grid=GRID, write_stride=WRITE_STRIDE,
                    extensions: bool = True, t0: int = (1 << 32) - 5_000, sm_count: int = 132) -> np.ndarray:
    """What ikp.cuh writes for the example program (times 32 ns apart, starting near a 32-bit wrap)."""
    num_blocks = grid[0] * grid[1] * grid[2]
    buf = np.zeros(wire.buffer_slots(write_stride, records_per_lane), np.uint64)
    buf[0] = wire.pack_header(num_blocks, NUM_GROUPS)
    capacity = user_capacity(records_per_lane, extensions)
    first = wire.ANCHOR_RECORDS if extensions else 0
    last = records_per_lane - 1

    def put(lane, k, timer, event, kind):
        buf[wire.slot_index(lane, k, write_stride)] = wire.pack_record(
            timer & 0xFFFF_FFFF, wire.make_tag(lane, event, kind)
        )

    for lane in range(num_blocks * NUM_GROUPS):
        now = t0 + 64 * lane
        if extensions:
            put(lane, 0, now, wire.ANCHOR_LO_EVENT_ID, INSTANT)
            put(lane, 1, now >> 32, wire.ANCHOR_HI_EVENT_ID, INSTANT)
        issued = program_records(variant, lane % NUM_GROUPS, iters)
        for k, (event, kind) in enumerate(issued[:capacity]):
            now += 32
            put(lane, first + k, now, event, kind)
        dropped = len(issued) - capacity
        if extensions and dropped > 0:
            put(lane, last - 1, dropped, wire.DROPPED_EVENT_ID, INSTANT)
        put(lane, last, now + 32, (lane // NUM_GROUPS) % sm_count if extensions else 0, FINALIZE)
    return buf


# --- checks on a decoded trace ---------------------------------------------------------------------


def check_trace(trace, variant: str, records_per_lane: int, iters: int, *, sm_count: int | None = None,
                extensions: bool = True) -> list[str]:
    """-> list of mismatches (empty = exact)."""
    want = expected(variant, records_per_lane, iters, extensions=extensions)
    problems = []
    num_blocks = GRID[0] * GRID[1] * GRID[2]
    if (trace.num_blocks, trace.num_groups) != (num_blocks, NUM_GROUPS):
        problems.append(f"header says {trace.num_blocks} blocks x {trace.num_groups} groups")
    got = structure(trace)
    if got != want["structure"]:
        missing = sorted(set(want["structure"]) - set(got))[:5]
        extra = sorted(set(got) - set(want["structure"]))[:5]
        problems.append(f"structure differs: missing {missing}, unexpected {extra}")
    lanes = trace.lanes
    if sorted(lanes["lane"].tolist()) != list(range(num_blocks * NUM_GROUPS)):
        problems.append(f"lanes present: {sorted(lanes['lane'].tolist())}")
    bad_block = lanes["block"] != lanes["lane"] // NUM_GROUPS
    if bad_block.any():
        problems.append(f"{int(bad_block.sum())} lanes with a wrong block")
    totals = trace.loss.totals
    if totals["unmatched_begin"] != want["unmatched_begin"]:
        problems.append(f"unmatched begins {totals['unmatched_begin']}, expected {want['unmatched_begin']}")
    for key in ("unmatched_end", "after_finalize", "malformed"):
        if totals[key]:
            problems.append(f"{key} = {totals[key]}")
    if totals["finalize"] != num_blocks * NUM_GROUPS:
        problems.append(f"{totals['finalize']} finalize records, expected one per lane")
    if extensions:
        dropped = dict(zip(lanes["lane"].tolist(), lanes["dropped"].tolist()))
        if dropped != want["dropped"]:
            problems.append(f"dropped per lane {dropped}, expected {want['dropped']}")
        if trace.loss.dropped_on_device != sum(want["dropped"].values()):
            problems.append(f"dropped_on_device {trace.loss.dropped_on_device}")
        if not (trace.absolute and lanes["anchored"].all()):
            problems.append("not every lane is anchored (absolute time)")
        # %smid is a virtual SM id: PTX does not promise it stays below the SM count, only that it is
        # a small non-negative number (it must fit the 10-bit event id field).
        if not ((lanes["sm"] >= 0) & (lanes["sm"] <= wire.MAX_EVENT_ID)).all():
            problems.append(f"SM ids out of range: {sorted(set(lanes['sm'].tolist()))}")
        if sm_count is not None and (lanes["sm"] >= sm_count).any():
            print(f"  note: SM ids up to {int(lanes['sm'].max())} with {sm_count} SMs (%smid is virtual)")
    problems += timing_problems(trace)
    return problems


def timing_problems(trace) -> list[str]:
    """Spans have end >= start; each nested span lies inside the span that was open one level up
    (spans come sorted by lane, then by begin in program order)."""
    spans = trace.spans
    problems = []
    backwards = int((spans["end_ns"] < spans["start_ns"]).sum())
    if backwards:
        problems.append(f"{backwards} spans end before they start")
    last_at_depth: dict[tuple[int, int], tuple[int, int]] = {}
    outside = 0
    for lane, depth, start, end in zip(spans["lane"].tolist(), spans["depth"].tolist(), spans["start_ns"].tolist(),
                                       spans["end_ns"].tolist()):
        last_at_depth[(lane, depth)] = (start, end)
        parent = last_at_depth.get((lane, depth - 1)) if depth > 0 else None
        if depth > 0 and not (parent and parent[0] <= start and end <= parent[1]):
            outside += 1
    if outside:
        problems.append(f"{outside} nested spans are not inside their parent span")
    return problems
