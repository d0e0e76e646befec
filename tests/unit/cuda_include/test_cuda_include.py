"""cuda_include/ikp.cuh without a GPU: constants vs wire.py, nvcc/NVRTC compiles, PTX and SASS properties.

nvcc (and nvdisasm for the SASS checks) are optional: tests that need them skip cleanly when absent.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_include import include_dir
from host_decode.core import wire

REPO = Path(__file__).resolve().parents[3]
HEADER = Path(include_dir()) / "ikp.cuh"
HOST_HEADER = Path(include_dir()) / "ikp_host.cuh"
EXAMPLE = REPO / "examples" / "cuda_cpp" / "ikp_example.cu"
ARCH = "sm_90a"


# --- tools -----------------------------------------------------------------------------------------


def find_nvcc() -> str | None:
    for candidate in (
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
    ):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def find_nvdisasm() -> str | None:
    """PATH, the CUDA toolkit, or the nvidia-cuda-nvdisasm wheel (nvidia/<cuXX>/bin/nvdisasm)."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm")]
    try:
        import nvidia  # namespace package of the NVIDIA wheels

        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "nvdisasm")))
            candidates += sorted(glob.glob(os.path.join(root, "*", "*", "bin", "nvdisasm")))
    except ImportError:
        pass
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


NVCC = find_nvcc()
NVDISASM = find_nvdisasm()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, $CUDA_HOME/bin)")
needs_nvdisasm = pytest.mark.skipif(NVCC is None or NVDISASM is None, reason="nvcc or nvdisasm not found")


def nvcc(tmp: Path, source: str, *flags: str, output: str = "ptx") -> subprocess.CompletedProcess:
    src = tmp / "probe.cu"
    src.write_text(source)
    out = tmp / f"probe.{output}"
    mode = {"ptx": "-ptx", "cubin": "-cubin"}[output]
    cmd = [NVCC, "-std=c++17", "-O3", f"-arch={ARCH}", mode, f"-I{include_dir()}", *flags, "-o", str(out), str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def compile_ok(tmp: Path, source: str, *flags: str, output: str = "ptx") -> str | bytes:
    res = nvcc(tmp, source, *flags, output=output)
    assert res.returncode == 0, f"nvcc failed:\n{res.stderr}"
    path = tmp / f"probe.{output}"
    return path.read_text() if output == "ptx" else path.read_bytes()


def ptx_functions(ptx: str) -> dict[str, str]:
    """Entry name -> its PTX body (from `.entry NAME(` to the next entry)."""
    parts = re.split(r"(?m)^\.visible \.entry (\w+)\(", ptx)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def sass_functions(cubin: Path) -> dict[str, list[str]]:
    """Kernel symbol -> its SASS instructions (opcode + operands), NOPs excluded."""
    text = subprocess.run([NVDISASM, "-c", str(cubin)], capture_output=True, text=True, check=True, timeout=120).stdout
    functions: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^\.text\.(\S+):$", line.strip())
        if head:
            current = functions.setdefault(head.group(1), [])
            continue
        ins = re.match(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if ins and current is not None and not ins.group(1).startswith("NOP"):
            current.append(ins.group(1))
    return functions


def opcode(instruction: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]


def kernel_named(functions: dict, fragment: str):
    matches = [name for name in functions if fragment in name]
    assert len(matches) == 1, f"expected one kernel containing {fragment!r}, found {matches}"
    return functions[matches[0]]


# --- sources ---------------------------------------------------------------------------------------

# One kernel per mode. IKP_(...) statements vanish in the uninstrumented build, which must give the
# same PTX as the build with the profiler compiled out.
PROBE = r"""
#include "ikp.cuh"
#ifdef UNINSTRUMENTED
#define IKP_(...)
#else
#define IKP_(...) __VA_ARGS__
#endif

__global__ void cursor_kernel(void* buf, float* out, int ws, int rpl, int iters) {
  IKP_(ikp::Profiler<> prof(buf, 2, ikp::warp_id() / 4, ikp::group_leader(4), ws, rpl);)
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) {
    IKP_(ikp::Region outer(prof, 1);)
    x = fmaf(x, 1.0001f, 0.5f);
    if (ikp::warp_id() % 4 == 1) {
      IKP_(ikp::Region inner(prof, 2);)
      x = fmaf(x, 0.9999f, 0.25f);
    }
    IKP_(prof.instant(3);)
  }
  IKP_(prof.finalize();)
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void static_kernel(void* buf, float* out, int ws, int rpl, int iters) {
  IKP_(ikp::Profiler<> prof(buf, 1, 0, ikp::group_leader(8), ws, rpl);)
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) {
    IKP_(prof.begin_at(4, 2 * i);)
    x = fmaf(x, 1.0001f, 0.5f);
    IKP_(prof.end_at(4, 2 * i + 1);)
  }
  IKP_(prof.finalize();)
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void atomic_kernel(void* buf, unsigned* counters, float* out, int ws, int rpl, int iters) {
  IKP_(ikp::Profiler<> prof(buf, 1, 0, ikp::group_leader(8), ws, rpl, counters);)
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) {
    IKP_(ikp::AtomicRegion r(prof, 5, ikp::lane_id() == 0);)
    x = fmaf(x, 1.0001f, 0.5f);
  }
  __syncthreads();  // the kernel's own barrier; finalize reads the lane counter after it
  IKP_(prof.finalize();)
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void plain_kernel(void* buf, float* out, int ws, int rpl, int iters) {
  IKP_(ikp::Profiler<true, false> prof(buf, 1, 0, ikp::group_leader(8), ws, rpl);)
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) {
    IKP_(ikp::Region r(prof, 6);)
    x = fmaf(x, 1.0001f, 0.5f);
  }
  IKP_(prof.finalize();)
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""

# N regions in straight-line code (a compile-time cursor): the SASS growth from N to 2N regions,
# minus the uninstrumented growth, divided by the added events is the cost of one event.
STRAIGHT = r"""
#include "ikp.cuh"
__global__ void straight_kernel(void* buf, float* out, int ws, int rpl) {
  ikp::Profiler<> prof(buf, 2, ikp::warp_id() / 4, ikp::group_leader(4), ws, rpl);
  float x = threadIdx.x;
#pragma unroll
  for (int r = 0; r < NREGIONS; ++r) {
    ikp::Region reg(prof, r);
    x = fmaf(x, 1.0001f, 0.5f);
  }
  prof.finalize();
  out[threadIdx.x] = x;
}
"""

KERNELS = ("cursor_kernel", "static_kernel", "atomic_kernel", "plain_kernel")


def constants_source(wrong: bool = False) -> str:
    """static_asserts of every header constant against host_decode/core/wire.py (the one definition)."""
    pairs = {
        "kEventTypeBits": wire.EVENT_TYPE_BITS,
        "kEventIdBits": wire.EVENT_ID_BITS,
        "kLaneBits": wire.LANE_BITS,
        "kEventIdShift": wire.EVENT_ID_SHIFT,
        "kLaneShift": wire.LANE_SHIFT,
        "kMaxEventId": wire.MAX_EVENT_ID,
        "kMaxLanes": wire.MAX_LANES,
        "kAnchorHiEventId": wire.ANCHOR_HI_EVENT_ID,
        "kAnchorLoEventId": wire.ANCHOR_LO_EVENT_ID,
        "kDroppedEventId": wire.DROPPED_EVENT_ID,
        "kFlagAddrEventId": wire.FLAG_ADDR_EVENT_ID,
        "kFlagValueEventId": wire.FLAG_VALUE_EVENT_ID,
        "kMaxUserEventId": wire.MAX_USER_EVENT_ID,
        "kAnchorRecords": wire.ANCHOR_RECORDS,
        "kTrailerRecords": wire.TRAILER_RECORDS,
        "kBegin": int(wire.EventType.BEGIN),
        "kEnd": int(wire.EventType.END),
        "kInstant": int(wire.EventType.INSTANT),
        "kFinalize": int(wire.EventType.FINALIZE),
        "user_capacity(40)": wire.user_capacity(40),
        "event_bits(1021, 2)": int(wire.make_tag(0, 1021, 2)),
        "event_bits(7, 1)": int(wire.make_tag(0, 7, 1)),
    }
    if wrong:
        pairs["kLaneShift"] += 1
    lines = ['#include "ikp.cuh"']
    lines += [
        f'static_assert((long long)(ikp::{name}) == {value}LL, "ikp::{name} != {value} (wire.py)");'
        for name, value in pairs.items()
    ]
    return "\n".join(lines) + "\n"


# --- text checks (no tools needed) -----------------------------------------------------------------


def test_device_header_includes_nothing():
    """NVRTC-safe: the device header pulls in no header at all (no host-only includes)."""
    includes = re.findall(r"(?m)^\s*#\s*include\b.*$", HEADER.read_text())
    assert includes == [], includes


def test_include_dir_holds_the_headers():
    assert HEADER.is_file() and HOST_HEADER.is_file()


def test_python_m_ikp_cute_include_prints_the_dir():
    res = subprocess.run(
        [sys.executable, "-m", "ikp_cute", "--include"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert (Path(res.stdout.strip()) / "ikp.cuh").is_file(), res.stdout


def test_python_m_ikp_cute_include_needs_neither_cutlass_nor_torch():
    """C++ users may have neither: block both imports and run the module as `-m` does."""
    code = (
        "import runpy, sys; sys.modules['cutlass'] = None; sys.modules['torch'] = None; "
        "sys.argv = ['ikp_cute', '--include']; runpy.run_module('ikp_cute', run_name='__main__', alter_sys=True)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()) == Path(include_dir())


# --- nvcc ------------------------------------------------------------------------------------------


@needs_nvcc
def test_constants_match_wire(tmp_path):
    compile_ok(tmp_path, constants_source())


@needs_nvcc
def test_constants_check_can_fail(tmp_path):
    res = nvcc(tmp_path, constants_source(wrong=True))
    assert res.returncode != 0 and "kLaneShift" in res.stderr


@pytest.fixture(scope="module")
def probe_ptx(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found")
    builds = {"enabled": (), "disabled": ("-DIKP_ENABLED=0",), "uninstrumented": ("-DUNINSTRUMENTED",)}
    return {name: compile_ok(tmp_path_factory.mktemp(name), PROBE, *flags) for name, flags in builds.items()}


@needs_nvcc
def test_enabled_ptx_reads_the_timer_and_stores(probe_ptx):
    functions = ptx_functions(probe_ptx["enabled"])
    for kernel in KERNELS:
        body = functions[next(n for n in functions if kernel in n)]
        assert "%globaltimer_lo" in body, kernel
        assert "st.global.u64" in body, kernel
    cursor = functions[next(n for n in functions if "cursor_kernel" in n)]
    assert "%globaltimer;" in cursor and "%smid" in cursor  # anchor (64-bit read) and SM id
    plain = functions[next(n for n in functions if "plain_kernel" in n)]
    assert "%globaltimer;" not in plain and "%smid" not in plain  # plain v1: no extensions


@needs_nvcc
def test_disabled_ptx_has_no_profiler_code(probe_ptx):
    disabled = probe_ptx["disabled"]
    assert "globaltimer" not in disabled and "%smid" not in disabled
    assert "atom." not in disabled
    for kernel, body in ptx_functions(disabled).items():
        assert body.count("st.global") == 1, kernel  # only the kernel's own `out` store


def without_uncalled_funcs(ptx: str) -> str:
    """Drop `.func` definitions nothing calls: NVVM sometimes leaves an inlined helper's out-of-line copy
    (here ikp::thread_linear, evaluated for a disabled profiler's leader argument) that no code reaches
    and ptxas discards."""
    assert "call" not in re.sub(r"(?m)^\s*//.*$", "", ptx), "the disabled build calls a function"
    return re.sub(r"(?ms)^\.func\b.*?^}\n", "", ptx)


@needs_nvcc
def test_disabled_ptx_identical_to_uninstrumented(probe_ptx):
    disabled = without_uncalled_funcs(probe_ptx["disabled"])
    uninstrumented = without_uncalled_funcs(probe_ptx["uninstrumented"])
    assert ".entry" in disabled and disabled == uninstrumented


@needs_nvcc
def test_host_helper_sizes_like_wire(tmp_path):
    """ikp_host.cuh compiles as host code and sizes buffers exactly as wire.buffer_slots."""
    source = r"""
#include <cstdio>
#include "ikp_host.cuh"
int main() {
  ikp::host::Layout a = ikp::host::make_layout(dim3(3, 2, 2), 2, 40, 32);
  ikp::host::Layout b = ikp::host::make_layout(dim3(132), 4, ikp::host::records_per_lane_for(100));
  ikp::host::Layout bad = ikp::host::make_layout(dim3(8), 2, 40, 8);
  std::printf("%zu %zu %zu %d %u %zu %s\n", a.slots(), a.bytes(), a.counter_bytes(), a.user_capacity(),
              b.write_stride, b.slots(), ikp::host::check(bad) ? "refused" : "accepted");
  return ikp::host::check(a) == nullptr && ikp::host::check(b) == nullptr ? 0 : 1;
}
"""
    src = tmp_path / "host.cu"
    src.write_text(source)
    exe = tmp_path / "host"
    res = subprocess.run(
        [NVCC, "-std=c++17", f"-I{include_dir()}", "-o", str(exe), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    fields = run.stdout.split()
    assert [int(f) for f in fields[:6]] == [
        wire.buffer_slots(32, 40),
        8 * wire.buffer_slots(32, 40),
        4 * 32,
        wire.user_capacity(40),
        132 * 4,
        wire.buffer_slots(132 * 4, 104),
    ]
    assert fields[6] == "refused"


@needs_nvcc
def test_example_compiles(tmp_path):
    lib = tmp_path / "libikp_example.so"
    cmd = [NVCC, "-std=c++17", "-O3", f"-arch={ARCH}", "-shared", "-Xcompiler", "-fPIC", f"-I{include_dir()}",
           "-o", str(lib), str(EXAMPLE)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


# --- SASS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probe_sass(tmp_path_factory):
    if NVCC is None or NVDISASM is None:
        pytest.skip("nvcc or nvdisasm not found")
    tmp = tmp_path_factory.mktemp("sass")
    compile_ok(tmp, PROBE, output="cubin")
    return sass_functions(tmp / "probe.cubin")


ATOMICS = re.compile(r"^(ATOM|ATOMG|ATOMS|RED|REDG)\b")
LOCAL = re.compile(r"^(LDL|STL)\b")


@needs_nvdisasm
@pytest.mark.parametrize("kernel", ["cursor_kernel", "static_kernel", "plain_kernel"])
def test_non_atomic_modes_have_no_atomics_and_no_local_memory(probe_sass, kernel):
    ops = [opcode(i) for i in kernel_named(probe_sass, kernel)]
    assert ops, kernel
    assert not [o for o in ops if ATOMICS.match(o)], kernel
    assert not [o for o in ops if LOCAL.match(o)], kernel
    assert "CS2R.32" in ops or "S2UR" in ops  # the timer reads are there (the check sees SASS)


@needs_nvdisasm
def test_atomic_mode_has_its_atomics(probe_sass):
    """Control for the check above: the detector does find atomics where they are."""
    ops = [opcode(i) for i in kernel_named(probe_sass, "atomic_kernel")]
    assert any(ATOMICS.match(o) for o in ops)
    assert not [o for o in ops if LOCAL.match(o)]


def straight_count(tmp_path_factory, regions: int, enabled: bool) -> int:
    tmp = tmp_path_factory.mktemp(f"straight{regions}{int(enabled)}")
    compile_ok(tmp, STRAIGHT, f"-DNREGIONS={regions}", f"-DIKP_ENABLED={int(enabled)}", output="cubin")
    return len(kernel_named(sass_functions(tmp / "probe.cubin"), "straight_kernel"))


@needs_nvdisasm
def test_sass_instructions_per_event(tmp_path_factory, capsys):
    """Cursor mode, compile-time cursor: SASS instructions added per begin/end record (reported)."""
    n1, n2 = 4, 8
    grown = straight_count(tmp_path_factory, n2, True) - straight_count(tmp_path_factory, n1, True)
    base = straight_count(tmp_path_factory, n2, False) - straight_count(tmp_path_factory, n1, False)
    per_event = (grown - base) / (2 * (n2 - n1))
    with capsys.disabled():
        print(f"\n[ikp.cuh] cursor mode: {per_event:.2f} SASS instructions per event ({ARCH}, straight-line)")
    assert 3 <= per_event <= 7, per_event  # timer read, tag, predicate, store, cursor address (+ slack 1)


# --- NVRTC (cuda-python), for real -----------------------------------------------------------------


NVRTC_CHILD = r"""
import json, sys
req = json.loads(sys.stdin.read())
try:
    from cuda.bindings import nvrtc
except ImportError as exc:
    print(json.dumps({"skip": f"cuda.bindings.nvrtc not importable: {exc}"})); sys.exit(0)

def check(result):
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtc error {result[0]}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

try:
    prog = check(nvrtc.nvrtcCreateProgram(req["source"].encode(), b"probe.cu", 0, [], []))
except RuntimeError as exc:  # libnvrtc missing or unusable: not a failure of the header
    print(json.dumps({"skip": f"NVRTC unavailable: {exc}"})); sys.exit(0)
opts = [o.encode() for o in req["options"]]
err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
log = b" " * check(nvrtc.nvrtcGetProgramLogSize(prog))
check(nvrtc.nvrtcGetProgramLog(prog, log))
ptx = b""
if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
    ptx = b" " * check(nvrtc.nvrtcGetPTXSize(prog))
    check(nvrtc.nvrtcGetPTX(prog, ptx))
nvrtc.nvrtcDestroyProgram(prog)
print(json.dumps({"ok": err == nvrtc.nvrtcResult.NVRTC_SUCCESS, "log": log.decode(errors="replace"),
                  "ptx": ptx.decode(errors="replace")}))
"""


def nvrtc_compile(source: str, *options: str) -> tuple[bool, str, str]:
    """-> (ok, log, ptx) compiling `source` with NVRTC for ARCH. In a child process: loading libnvrtc
    into the test process corrupts later protobuf parsing there (seen: every Perfetto test after an NVRTC
    test failed with 'Wire format was corrupt')."""
    import json
    import subprocess
    import sys

    opts = [f"--gpu-architecture={ARCH}", "-std=c++17", f"-I{include_dir()}", *options]
    proc = subprocess.run([sys.executable, "-c", NVRTC_CHILD], input=json.dumps({"source": source, "options": opts}),
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"NVRTC child failed: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result["ok"], result["log"], result["ptx"]


def test_nvrtc_compiles_the_device_header():
    try:
        ok, log, ptx = nvrtc_compile(PROBE)
    except OSError as exc:
        pytest.skip(f"libnvrtc not loadable: {exc}")
    assert ok, log
    assert "%globaltimer_lo" in ptx and "st.global.u64" in ptx


def test_nvrtc_constants_match_wire():
    try:
        ok, log, _ = nvrtc_compile(constants_source())
    except OSError as exc:
        pytest.skip(f"libnvrtc not loadable: {exc}")
    assert ok, log


def test_nvrtc_refuses_the_host_header():
    try:
        ok, log, _ = nvrtc_compile('#include "ikp_host.cuh"\n')
    except OSError as exc:
        pytest.skip(f"libnvrtc not loadable: {exc}")
    assert not ok and "host code" in log


# --- gpu/cuda_cross_check.py's model and checks (ikp_cute/testing/cuda_program.py), on a simulated device
# buffer (no GPU)


@pytest.fixture(scope="module")
def cross_check():
    from ikp_cute.testing import cuda_program

    return cuda_program


@pytest.mark.parametrize("variant", ["nested", "flat_cursor", "flat_static", "flat_atomic"])
@pytest.mark.parametrize("records_per_lane", [32, 14, 5])
def test_cross_check_accepts_what_the_header_writes(cross_check, variant, records_per_lane):
    from host_decode.core.decoder import decode

    buf = cross_check.simulate_buffer(variant, records_per_lane, cross_check.ITERS)
    trace = decode(buf, write_stride=cross_check.WRITE_STRIDE)
    assert cross_check.check_trace(trace, variant, records_per_lane, cross_check.ITERS, sm_count=132) == []


def test_cross_check_counts_overflow_exactly(cross_check):
    want = cross_check.expected("nested", 14, 6)
    assert set(want["dropped"].values()) == {24 - 10, 22 - 10}
    assert want["unmatched_begin"] == 12 * (2 + 1)


def test_cross_check_catches_a_missing_record(cross_check):
    from host_decode.core.decoder import decode

    buf = cross_check.simulate_buffer("nested", 32, cross_check.ITERS)
    buf[wire.slot_index(5, 4, cross_check.WRITE_STRIDE)] = 0  # one record of lane 5 lost
    trace = decode(buf, write_stride=cross_check.WRITE_STRIDE)
    assert cross_check.check_trace(trace, "nested", 32, cross_check.ITERS)


def test_cross_check_catches_a_wrong_drop_count(cross_check):
    from host_decode.core.decoder import decode

    buf = cross_check.simulate_buffer("nested", 14, cross_check.ITERS)
    slot = wire.slot_index(3, 12, cross_check.WRITE_STRIDE)  # lane 3's DROPPED instant
    timer, lane, event, kind = wire.unpack_records(buf[slot : slot + 1])
    assert int(event[0]) == wire.DROPPED_EVENT_ID
    buf[slot] = wire.pack_record(int(timer[0]) + 1, wire.make_tag(3, wire.DROPPED_EVENT_ID, 2))
    trace = decode(buf, write_stride=cross_check.WRITE_STRIDE)
    assert any("dropped" in p for p in cross_check.check_trace(trace, "nested", 14, cross_check.ITERS))


def test_reference_v1_decoder_agrees_on_a_plain_buffer(cross_check):
    from host_decode.core.decoder import decode

    buf = cross_check.simulate_buffer("nested", 32, cross_check.ITERS, extensions=False)
    assert cross_check.plain_v1_violations(buf, cross_check.WRITE_STRIDE, 32) == []
    ref = cross_check.v1_reference_decode(buf, cross_check.WRITE_STRIDE, 32)
    trace = decode(buf, write_stride=cross_check.WRITE_STRIDE)
    assert (
        ref["structure"]
        == cross_check.structure(trace)
        == cross_check.expected_structure("nested", 32, cross_check.ITERS)
    )
    ours = sorted(
        zip(trace.spans["lane"].tolist(), (trace.spans["start_ns"] & 0xFFFF_FFFF).tolist(), trace.durations().tolist())
    )
    assert ours == sorted(ref["durations"])
    assert cross_check.check_trace(trace, "nested", 32, cross_check.ITERS, extensions=False) == []
    # the buffer with extensions is flagged as not plain
    assert cross_check.plain_v1_violations(
        cross_check.simulate_buffer("nested", 32, cross_check.ITERS), cross_check.WRITE_STRIDE, 32
    )


@needs_nvcc
def test_misuse_kernels_compile(tmp_path):
    """gpu/cuda_misuse.cu (run on the GPU by gpu/cuda_cross_check.py, part (e)) builds with the header."""
    res = subprocess.run([NVCC, "-O3", "-std=c++17", "-arch=sm_90a", "-cubin", f"-I{REPO / 'cuda_include'}",
                          "-o", str(tmp_path / "misuse.cubin"), str(REPO / "gpu" / "cuda_misuse.cu")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
