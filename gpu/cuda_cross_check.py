"""GPU cross-check of cuda_include/ikp.cuh: decoded buffers match what the program did, exactly.

    python gpu/cuda_cross_check.py            (repo root; needs a CUDA GPU, torch, nvcc; OUT=dir to keep captures)

(a) examples/cuda_cpp/ikp_example.cu runs with extensions on (ample capacity, then overflowing); the
    buffer decoded by host_decode.core.decoder.decode must give exactly the spans / instants / drops that a
    model of the program predicts, per lane (lanes, events, nesting depth, counts, dropped counts).
(b) the same program with extensions off (IKP_V1_PLAIN / Profiler<true, false>) must be a plain v1
    buffer: an independent minimal v1 decoder (a Python loop, as peers have) reads the same structure,
    and its durations equal host_decode's.
(c) `structure(trace)` is the canonical comparable description (sorted (lane, event, depth, count));
    the CuTe DSL twin comparison (gpu/twin_cross_check.py) uses it too.
(d) captures (buffer + sidecar) go under $OUT when it is set.
Also: the three index modes (cursor, static, atomic) give one structure; the disabled build writes
nothing and computes the same results.

The pure-Python parts (program model, reference decoder, structure, the checks) live in
ikp_cute/testing/cuda_program.py, tested on the CPU by tests/unit/cuda_include/test_cuda_include.py against a
simulated buffer and by tests/unit/host_decode/load/test_real_captures.py on the committed captures.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


from ikp_cute.testing.cuda_program import (  # noqa: E402  (the model and the checks, shared with the CPU tests)
    GRID,
    ITERS,
    NUM_GROUPS,
    WRITE_STRIDE,
    check_trace,
    expected_structure,
    plain_v1_violations,
    structure,
    v1_reference_decode,
)

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
