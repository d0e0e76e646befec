"""GPU cross-check of cuda_include/ikp.cuh: decoded buffers match what the program did, exactly.

    python gpu/cuda_cross_check.py            (repo root; needs a CUDA GPU, torch, nvcc; OUT=dir to keep captures)

(a) examples/cuda_cpp/ikp_example.cu runs with extensions on (ample capacity, then overflowing); the
    buffer decoded by host_decode.core.decoder.decode must give exactly the spans / instants / drops that a
    model of the program predicts, per lane (lanes, events, nesting depth, counts, dropped counts).
(b) the same program with extensions off (IKP_V1_PLAIN / Profiler<true, false>) must be a plain v1
    buffer: an independent minimal v1 decoder (a Python loop, as peers have) reads the same structure,
    and its durations equal host_decode's.
(c) `structure(trace)` is the canonical comparable description (sorted (lane, event, depth, count));
    the CuTe DSL twin comparison imports it (and `expected_structure`) from here.
(d) captures (buffer + sidecar) go under $OUT when it is set.
Also: the three index modes (cursor, static, atomic) give one structure; the disabled build writes
nothing and computes the same results.

The pure-Python parts (program model, reference decoder, structure) are tested on the CPU by
tests/test_cuda_include.py against a simulated buffer.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from host_decode.core import wire  # noqa: E402

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


# --- the GPU run -----------------------------------------------------------------------------------


def _example_module():
    spec = importlib.util.spec_from_file_location("ikp_cuda_example_run", REPO / "examples" / "cuda_cpp" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    import torch

    from host_decode.core.decoder import decode

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    example = _example_module()
    dll = example.build_library()  # a temporary directory: only captures go to $OUT
    props = torch.cuda.get_device_properties(0)
    from host_decode.core.model import Names

    names = Names(events=dict(example.EVENTS), groups=dict(example.GROUPS))
    ample = 4 * ITERS + 8  # every record fits
    tight = 14  # capacity 10: both groups overflow
    rows, failures = [], 0

    def capture(tag: str, buf: np.ndarray, records_per_lane: int, variant: str) -> None:
        out = os.environ.get("OUT")
        if not out:
            return
        try:
            from host_decode.load.capture import save_capture
        except ImportError:
            np.save(os.path.join(out, f"cuda_{tag}.npy"), buf)
            return
        save_capture(os.path.join(out, f"cuda_{tag}.npy"), buf, names, write_stride=WRITE_STRIDE,
                     records_per_lane=records_per_lane, kernel=f"ikp_example {variant}", device=props.name,
                     sm_count=props.multi_processor_count, source="cuda_include/ikp.cuh")

    def record(tag: str, problems: list[str], detail: str) -> None:
        nonlocal failures
        failures += bool(problems)
        rows.append((tag, "OK" if not problems else "FAIL", detail))
        for p in problems:
            print(f"  {tag}: {p}")

    # (a) the program, decoded by ours, exactly as modelled; with and without overflow
    structures = {}
    for tag, variant, rpl in (("nested", "nested", ample), ("nested_overflow", "nested", tight),
                              ("flat_cursor", "flat_cursor", ample), ("flat_static", "flat_static", ample),
                              ("flat_atomic", "flat_atomic", ample), ("flat_atomic_overflow", "flat_atomic", tight),
                              ("flat_static_overflow", "flat_static", tight)):
        buf_t, out_t = example.launch(dll, variant, GRID, WRITE_STRIDE, rpl, ITERS)
        buf = buf_t.cpu().numpy()
        trace = decode(buf, names=names, write_stride=WRITE_STRIDE)
        problems = check_trace(trace, variant, rpl, ITERS, sm_count=props.multi_processor_count)
        structures[tag] = structure(trace)
        capture(tag, buf, rpl, variant)
        record(tag, problems, f"{trace.spans.size} spans, {trace.instants.size} instants, "
                              f"dropped {trace.loss.dropped_on_device}, on {len(set(trace.lanes['sm'].tolist()))} SMs")
        if tag == "nested":
            nested_out = out_t.cpu().numpy()

    # every index mode gives one structure
    same = structures["flat_cursor"] == structures["flat_static"] == structures["flat_atomic"]
    record("modes_agree", [] if same else ["cursor / static / atomic structures differ"], "cursor == static == atomic")
    same = structures["flat_static_overflow"] == structures["flat_atomic_overflow"]
    record("modes_agree_overflow", [] if same else ["static / atomic overflow structures differ"], "static == atomic")

    # (b) extensions off: a plain v1 buffer that a minimal v1 decoder reads like ours
    buf_t, _ = example.launch(dll, "nested_plain", GRID, WRITE_STRIDE, ample, ITERS)
    buf = buf_t.cpu().numpy()
    capture("nested_plain", buf, ample, "nested_plain")
    problems = plain_v1_violations(buf, WRITE_STRIDE, ample)
    try:
        ref = v1_reference_decode(buf, WRITE_STRIDE, ample)
    except ValueError as exc:
        ref = None
        problems.append(f"reference v1 decoder refused the buffer: {exc}")
    trace = decode(buf, names=names, write_stride=WRITE_STRIDE)
    problems += check_trace(trace, "nested", ample, ITERS, extensions=False)
    if ref is not None:
        if ref["structure"] != expected_structure("nested", ample, ITERS):
            problems.append("reference decoder's structure differs from the program")
        if ref["structure"] != structure(trace):
            problems.append("reference decoder and host_decode disagree on the structure")
        ours = sorted(zip(trace.spans["lane"].tolist(), (trace.spans["start_ns"] & 0xFFFF_FFFF).tolist(),
                          trace.durations().tolist()))
        if ours != sorted(ref["durations"]):
            problems.append("durations differ between the reference decoder and host_decode")
    record(
        "plain_v1",
        problems,
        f"reference decoder: {len(ref['durations']) if ref else 0} spans, {ref['finalizes'] if ref else 0} finalizes",
    )

    # profiler compiled out: nothing written, same results
    buf_t, out_t = example.launch(dll, "nested_off", GRID, WRITE_STRIDE, ample, ITERS)
    problems = [] if not buf_t.any().item() else [f"{int((buf_t != 0).sum())} non-zero slots"]
    if not np.array_equal(out_t.cpu().numpy(), nested_out):
        problems.append("kernel results differ from the instrumented build")
    record("disabled", problems, "buffer all zero, same kernel output")

    # (e) misuse never writes outside its lane nor forges a record (gpu/cuda_misuse.cu)
    for tag, problems, detail in misuse_checks(example):
        record(tag, problems, detail)

    print_table(f"{props.name}, {GRID} grid x {NUM_GROUPS} groups, write_stride {WRITE_STRIDE}, iters {ITERS}", rows)
    return 1 if failures else 0


MISUSE_BLOCKS, MISUSE_RECORDS = 4, 12
BAD_GROUP, STATIC_INDEX, EVENT_ID, BAD_STRIDE, ATOMIC_EVENT_ID = range(5)
VALID_EVENT = 6


def misuse_checks(example) -> list[tuple[str, list[str], str]]:
    """(check, problems, detail) for each misuse of gpu/cuda_misuse.cu, run on the GPU."""
    import ctypes
    import subprocess
    import tempfile

    import torch

    from cuda_include import include_dir
    from host_decode.core.decoder import decode

    lib = Path(tempfile.mkdtemp(prefix="ikp_misuse_")) / "libikp_misuse.so"
    cmd = [example.find_nvcc(), "-O3", "-std=c++17", f"-arch={example.device_arch()}", "-shared", "-Xcompiler",
           "-fPIC", f"-I{include_dir()}", "-o", str(lib), str(REPO / "gpu" / "cuda_misuse.cu")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return [("misuse_build", [res.stderr[-2000:]], " ".join(cmd))]
    dll = ctypes.CDLL(str(lib))
    dll.ikp_misuse_launch.restype = ctypes.c_int
    dll.ikp_misuse_launch.argtypes = [ctypes.c_int] * 1 + [ctypes.c_void_p] + [ctypes.c_int] * 4 + [ctypes.c_void_p]

    def run(kase: int, arg: int, num_groups: int, write_stride: int | None = None) -> np.ndarray:
        stride = MISUSE_BLOCKS * num_groups
        buf = torch.zeros(1 + stride * MISUSE_RECORDS, dtype=torch.int64, device="cuda")
        err = dll.ikp_misuse_launch(kase, buf.data_ptr(), stride if write_stride is None else write_stride,
                                    MISUSE_RECORDS, arg, MISUSE_BLOCKS, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        if err:
            raise RuntimeError(f"misuse case {kase} failed to launch: cudaError {err}")
        return buf.cpu().numpy()

    def valid_only(buf: np.ndarray, lanes: list[int], dropped: int) -> list[str]:
        """Only `lanes` hold records: each its anchors, one VALID_EVENT instant, its FINALIZE, `dropped`."""
        problems = []
        trace = decode(buf, write_stride=(buf.size - 1) // MISUSE_RECORDS)
        if trace.loss.lost - trace.loss.dropped_on_device or trace.spans.size:
            problems.append(f"unexpected records: {trace.loss.totals}")
        if sorted(trace.lanes["lane"].tolist()) != lanes:
            problems.append(f"lanes written {sorted(trace.lanes['lane'].tolist())}, expected {lanes}")
        if sorted(trace.instants["event"].tolist()) != [VALID_EVENT] * len(lanes):
            problems.append(f"instants {sorted(trace.instants['event'].tolist())}")
        if not trace.lanes["anchored"].all() or (trace.lanes["finalize_ns"] < 0).any():
            problems.append("a lane lost its anchors or its FINALIZE")
        if trace.lanes["dropped"].tolist() != [dropped] * len(lanes):
            problems.append(f"dropped per lane {trace.lanes['dropped'].tolist()}, expected {dropped}")
        return problems

    out = []
    for group in (-1, 2, 1 << 30):  # -1 would be block b-1's group 1; 2 would be block b+1's group 0
        problems = valid_only(run(BAD_GROUP, group, 2), [2 * b for b in range(MISUSE_BLOCKS)], 0)
        out.append((f"misuse_group_{group}", problems, "only the valid group-0 lanes written"))
    for k in (-1, -2, -(1 << 31)):
        problems = valid_only(run(STATIC_INDEX, k, 1), list(range(MISUSE_BLOCKS)), 1)
        out.append((f"misuse_static_index_{k}", problems, "anchors intact, the record dropped and counted"))
    for ev in (1019, 1020, 1021, 1022, 1023, 1024, 5000):
        problems = valid_only(run(EVENT_ID, ev, 1), list(range(MISUSE_BLOCKS)), 4)
        out.append((f"misuse_event_{ev}", problems, "no forged record, 4 dropped and counted"))
    for ev in (1019, 1021, 1024):  # atomic mode, from a writer that is not the lane's leader: a region and an instant
        problems = valid_only(run(ATOMIC_EVENT_ID, ev, 1), list(range(MISUSE_BLOCKS)), 3)
        out.append((f"misuse_atomic_event_{ev}", problems, "no forged record, 3 dropped and counted"))
    for stride in (-8, -1, 0, 1 << 29, (1 << 31) - 1):
        buf = run(BAD_STRIDE, stride, 1, write_stride=stride)
        problems = [] if not buf.any() else [f"{int((buf != 0).sum())} slots written"]
        out.append((f"misuse_stride_{stride}", problems, "nothing written"))
    return out


def print_table(title: str, rows: list[tuple[str, str, str]]) -> None:
    """The short (check, result, detail) table the GPU scripts print last."""
    width = max([len("check")] + [len(tag) for tag, _, _ in rows]) + 2
    print(f"\n{title}")
    print(f"{'check':<{width}} {'result':<6} detail")
    for tag, result, detail in rows:
        print(f"{tag:<{width}} {result:<6} {detail}")


if __name__ == "__main__":
    sys.exit(main())
