"""CUPTI PC sampling: a ctypes collector for kernels this process launches, and a reader of what it
writes -> PcTable.

`cupti-python` exposes no PC sampling, so the collector calls ``libcupti.so`` (from the
`nvidia-cuda-cupti` wheel, the CUDA toolkit, or the copy torch already loaded) through ctypes, with the
struct layouts of ``cupti_pcsampling.h`` (CUDA 13; sizes checked in tests/unit/host_decode/hardware/test_adapters.py).

    from host_decode.hardware.adapters.cupti import PcSampler
    with PcSampler() as sampler:          # needs a current CUDA context (e.g. after torch.zeros(1, device="cuda"))
        for _ in range(n):
            launch_my_kernel(); sampler.flush()   # kernel-serialized: collect each launch's range
    sampler.save("pcsamp.json")           # then read_cupti_json("pcsamp.json", kernel="...")

Enable before the kernel's module is loaded where possible (CUPTI attributes samples per module).

File format (``format: "ikp-cupti-pcsampling-v1"``)::

    {"format": ..., "stall_reasons": {"<index>": "smsp__pcsamp_warps_issue_stalled_long_scoreboard", ...},
     "mapped_cubin_crc": int | null, "total_samples": N, "dropped_samples": N, "non_user_kernel_samples": N,
     "hardware_buffer_full": false,
     "records": [{"cubin_crc": int, "function_name": str, "function_index": int, "pc_offset": int,
                  "stalls": {"<index>": samples, ...}}, ...]}

``pc_offset`` is function-relative (an int, or a "0x.." string as NVBit files may hold); sample counts,
CRCs and indices are non-negative integers; anything else is a DecodeError naming the record and field.
The kernel is picked by adapters.choose_kernel (an exact name wins). ``mapped_cubin_crc`` (optional,
from ``PcSampler.cubin_crc``) is CUPTI's CRC of the cubin that was mapped: the reader then keeps only
that cubin's records. Stall names map onto Nsight Compute's short names (``long_sb``,
...); ``*_not_issued`` reasons go to ``stalls_not_issued``. Samples of a PC = sum of its (issued +
not-issued) reasons, i.e. of the reasons without the ``_not_issued`` suffix.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import glob
import json
import os
from typing import Any

import numpy as np

from host_decode.core.compressed import read_input
from host_decode.core.errors import DecodeError
from host_decode.core.jsonable import dumps
from host_decode.hardware.adapters import PcTable, choose_kernel, json_int, merge_duplicate_pcs

FORMAT = "ikp-cupti-pcsampling-v1"
_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
_NOT_ISSUED = "_not_issued"
CUPTI_ALIASES = {
    "imc_miss": "imc",
    "lg_throttle": "lg",
    "long_scoreboard": "long_sb",
    "math_pipe_throttle": "math",
    "mio_throttle": "mio",
    "no_instructions": "no_inst",
    "short_scoreboard": "short_sb",
    "sleeping": "sleep",
    "tex_throttle": "tex",
    "dispatch_stall": "dispatch",
}


def stall_name(cupti_name: str) -> tuple[str, bool]:
    """'smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued' -> ('long_sb', True)."""
    name = cupti_name.removeprefix(_PREFIX)
    not_issued = name.endswith(_NOT_ISSUED)
    if not_issued:
        name = name[: -len(_NOT_ISSUED)]
    return CUPTI_ALIASES.get(name, name), not_issued


# ================================================================================================
# Reader
# ================================================================================================


def read_cupti_json(path_or_obj: Any, kernel: str | None = None, cubin_crc: int | None = None) -> PcTable:
    source = "cupti json"
    if isinstance(path_or_obj, (str, os.PathLike)):
        source = str(path_or_obj)
        try:
            obj = json.loads(read_input(path_or_obj))  # .json or .json.gz (core.compressed: bounded)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DecodeError(f"not JSON (or gzipped JSON): {e}", source=source) from None
    else:
        obj = path_or_obj
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise DecodeError(f"not a CUPTI PC sampling file (format must be {FORMAT!r})", source=source)
    reasons = _stall_reasons(obj.get("stall_reasons"), source)
    records = [_record(k, r, source) for k, r in enumerate(_record_list(obj.get("records"), source))]
    if cubin_crc is None and obj.get("mapped_cubin_crc") is not None:
        cubin_crc = json_int(obj["mapped_cubin_crc"], "mapped_cubin_crc", source)  # the collector knew the cubin
    if cubin_crc is not None:
        records = [r for r in records if r.cubin_crc == cubin_crc]
    name = choose_kernel({r.function for r in records}, kernel, source)
    chosen = [r for r in records if r.function == name]
    crcs = {r.cubin_crc for r in chosen}
    if len(crcs) > 1:
        raise DecodeError(
            f"function {name!r} comes from {len(crcs)} different cubins (CRCs {sorted(crcs)}); pass cubin_crc=",
            source=source,
        )
    if not chosen:
        raise DecodeError(f"no samples for kernel {kernel!r}", source=source)
    n = len(chosen)
    pc = np.array([r.pc_offset for r in chosen], np.int64)
    issued: dict[str, np.ndarray] = {}
    not_issued: dict[str, np.ndarray] = {}
    unknown_reasons = 0
    for i, r in enumerate(chosen):
        for idx, count in r.stalls.items():
            reason = reasons.get(idx)
            if reason is None:
                unknown_reasons += 1
                reason = f"reason_{idx}"
            short, ni = stall_name(reason)
            group = not_issued if ni else issued
            group.setdefault(short, np.zeros(n))[i] += count
    cols = {f"s:{k}": v for k, v in issued.items()}
    cols.update({f"n:{k}": v for k, v in not_issued.items()})
    uniq, summed, _ = merge_duplicate_pcs(pc, cols)
    stalls = {k[2:]: v for k, v in summed.items() if k.startswith("s:")}
    stalls_ni = {k[2:]: v for k, v in summed.items() if k.startswith("n:")}
    counters = {"samples": np.sum(list(stalls.values()), axis=0) if stalls else np.zeros(uniq.size)}
    if stalls_ni:
        counters["samples_not_issued"] = np.sum(list(stalls_ni.values()), axis=0)
    meta = {
        k: obj.get(k)
        for k in (
            "total_samples",
            "dropped_samples",
            "non_user_kernel_samples",
            "hardware_buffer_full",
            "sampling_period",
        )
    }
    meta.update(
        {
            "records": len(records),
            "records_used": n,
            "cubin_crc": next(iter(crcs)),
            "unknown_reason_indices": unknown_reasons,
            "source": source,
        }
    )
    return PcTable("cupti", name, uniq, counters, stalls, stalls_ni, meta=meta)


@dataclasses.dataclass(frozen=True)
class _Record:
    function: str
    cubin_crc: int
    pc_offset: int
    stalls: dict[int, int]  # stall-reason index -> samples


def _stall_reasons(reasons: Any, source: str) -> dict[int, str]:
    if not isinstance(reasons, dict):
        raise DecodeError("'stall_reasons' must be an object {index: CUPTI stall name}", source=source)
    return {json_int(k, "stall_reasons key", source): str(v) for k, v in reasons.items()}


def _record_list(records: Any, source: str) -> list[dict]:
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DecodeError("'records' must be a list of objects", source=source)
    return records


def _record(k: int, r: dict, source: str) -> _Record:
    """One record, checked: every error names the record and the field."""
    if "pc_offset" not in r:
        raise DecodeError(f"record {k} has no pc_offset", source=source)
    stalls = r.get("stalls", {})
    if not isinstance(stalls, dict):
        raise DecodeError(f"record {k}: stalls must be an object {{reason index: samples}}", source=source)
    return _Record(
        function=str(r.get("function_name")),
        cubin_crc=json_int(r.get("cubin_crc", 0), f"record {k}: cubin_crc", source),
        pc_offset=json_int(r["pc_offset"], f"record {k}: pc_offset", source),
        stalls={
            json_int(idx, f"record {k}: stalls key", source): json_int(
                count, f"record {k}: stalls[{idx!r}] count", source
            )
            for idx, count in stalls.items()
        },
    )


# ================================================================================================
# Collector (ctypes on libcupti; runs only on a machine with a GPU)
# ================================================================================================


class _StallReason(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("pcSamplingStallReasonIndex", ctypes.c_uint32), ("samples", ctypes.c_uint32)]


class _PCData(ctypes.Structure):  # packed, aligned(8): 60 bytes of fields + 4 of tail padding
    _pack_ = 1
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubinCrc", ctypes.c_uint64),
        ("pcOffset", ctypes.c_uint64),
        ("functionIndex", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("functionName", ctypes.c_void_p),
        ("stallReasonCount", ctypes.c_size_t),
        ("stallReason", ctypes.POINTER(_StallReason)),
        ("correlationId", ctypes.c_uint32),
        ("_tail", ctypes.c_uint32),
    ]


class _SamplingData(ctypes.Structure):  # packed, aligned(8): 73 bytes of fields + 7 of tail padding
    _pack_ = 1
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("collectNumPcs", ctypes.c_size_t),
        ("totalSamples", ctypes.c_uint64),
        ("droppedSamples", ctypes.c_uint64),
        ("totalNumPcs", ctypes.c_size_t),
        ("remainingNumPcs", ctypes.c_size_t),
        ("rangeId", ctypes.c_uint64),
        ("pPcData", ctypes.POINTER(_PCData)),
        ("nonUsrKernelsTotalSamples", ctypes.c_uint64),
        ("hardwareBufferFull", ctypes.c_uint8),
        ("_tail", ctypes.c_uint8 * 7),
    ]


class _ConfigInfo(ctypes.Structure):  # enum, CUptiResult, then a 24-byte union (uint64 data[3])
    _fields_ = [("attributeType", ctypes.c_uint32), ("attributeStatus", ctypes.c_int32), ("data", ctypes.c_uint64 * 3)]


class _ConfigParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numAttributes", ctypes.c_size_t),
        ("pPCSamplingConfigurationInfo", ctypes.POINTER(_ConfigInfo)),
    ]


class _CtxParams(ctypes.Structure):  # Enable / Disable / Start / Stop
    _fields_ = [("size", ctypes.c_size_t), ("pPriv", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class _GetDataParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("pcSamplingData", ctypes.c_void_p),
    ]


class _NumReasonsParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numStallReasons", ctypes.POINTER(ctypes.c_size_t)),
    ]


class _ReasonsParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numStallReasons", ctypes.c_size_t),
        ("stallReasonIndex", ctypes.POINTER(ctypes.c_uint32)),
        ("stallReasons", ctypes.POINTER(ctypes.c_char_p)),
    ]


class _CrcParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubinSize", ctypes.c_size_t),
        ("cubin", ctypes.c_void_p),
        ("cubinCrc", ctypes.c_uint64),
    ]


# sizes the C header gives (x86-64): the ctypes mirrors above must agree
STRUCT_SIZES = {
    "_StallReason": 8, "_PCData": 64, "_SamplingData": 80, "_ConfigInfo": 32, "_ConfigParams": 40,
    "_CtxParams": 24, "_GetDataParams": 32, "_NumReasonsParams": 32, "_ReasonsParams": 48, "_CrcParams": 32,
}  # fmt: skip

ATTR_SAMPLING_PERIOD = 1
ATTR_STALL_REASON = 2
ATTR_SCRATCH_BUFFER_SIZE = 3
ATTR_COLLECTION_MODE = 5
ATTR_ENABLE_START_STOP_CONTROL = 6
ATTR_OUTPUT_DATA_FORMAT = 7
ATTR_SAMPLING_DATA_BUFFER = 8
MODE_CONTINUOUS, MODE_KERNEL_SERIALIZED = 1, 2
OUTPUT_PARSED = 1
STALL_REASON_STRING_SIZE = 128


class CuptiError(RuntimeError):
    pass


def find_libcupti() -> str:
    """$IKP_LIBCUPTI, a libcupti this process already loaded (torch's), the nvidia-cuda-cupti wheel,
    the CUDA toolkit, then the loader's search path."""
    env = os.environ.get("IKP_LIBCUPTI")
    if env:
        return env
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcupti.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    candidates = []
    try:
        import nvidia

        for base in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "*", "lib", "libcupti.so*")), reverse=True)
    except ImportError:
        pass
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates += sorted(
                glob.glob(os.path.join(root, "extras", "CUPTI", "lib64", "libcupti.so*")), reverse=True
            )
    for c in candidates:
        if os.path.exists(c):
            return c
    found = ctypes.util.find_library("cupti")
    if found:
        return found
    raise CuptiError("libcupti not found: pip install nvidia-cuda-cupti, or set IKP_LIBCUPTI")


class PcSampler:
    """CUPTI PC sampling of the current CUDA context, as a context manager (see the module doc)."""

    def __init__(
        self,
        sampling_period: int | None = None,
        max_pcs: int = 32768,
        collection_mode: int = MODE_KERNEL_SERIALIZED,
        libcupti: str | None = None,
    ):
        if sampling_period is not None and not 5 <= sampling_period <= 31:
            raise ValueError("sampling_period must be 5..31 (2**period cycles)")
        self.sampling_period = sampling_period
        self.max_pcs = max_pcs
        self.collection_mode = collection_mode
        self.lib_path = libcupti or find_libcupti()
        try:
            self.lib = ctypes.CDLL(self.lib_path)
        except OSError as e:
            raise CuptiError(f"cannot load {self.lib_path}: {e}") from None
        self.ctx = _current_context()
        self.reasons: dict[int, str] = {}
        self.records: list[dict] = []
        self.totals = {
            "total_samples": 0,
            "dropped_samples": 0,
            "non_user_kernel_samples": 0,
            "hardware_buffer_full": False,
        }
        self._enabled = False

    # -- CUPTI calls --
    def _call(self, name: str, params) -> None:
        fn = getattr(self.lib, name)
        fn.restype = ctypes.c_int
        rc = fn(ctypes.byref(params))
        if rc != 0:
            raise CuptiError(f"{name} failed: {self._error_string(rc)} ({rc})")

    def _error_string(self, rc: int) -> str:
        s = ctypes.c_char_p()
        try:
            self.lib.cuptiGetResultString(ctypes.c_int(rc), ctypes.byref(s))
            return s.value.decode() if s.value else "?"
        except Exception:
            return "?"

    def _ctx_params(self) -> _CtxParams:
        return _CtxParams(ctypes.sizeof(_CtxParams), None, self.ctx)

    def start(self) -> PcSampler:
        self._call("cuptiPCSamplingEnable", self._ctx_params())
        self._enabled = True
        self._read_stall_reasons()
        self._data = self._alloc_buffer()
        self._index_array = (ctypes.c_uint32 * len(self.reasons))(*sorted(self.reasons))
        attrs = [
            (ATTR_STALL_REASON, [len(self.reasons), ctypes.addressof(self._index_array)]),
            (ATTR_COLLECTION_MODE, [self.collection_mode]),
            (ATTR_OUTPUT_DATA_FORMAT, [OUTPUT_PARSED]),
            (ATTR_SAMPLING_DATA_BUFFER, [ctypes.addressof(self._data[0])]),
            (ATTR_ENABLE_START_STOP_CONTROL, [0]),
        ]
        if self.sampling_period is not None:
            attrs.append((ATTR_SAMPLING_PERIOD, [self.sampling_period]))
        infos = (_ConfigInfo * len(attrs))()
        for info, (kind, words) in zip(infos, attrs):
            info.attributeType = kind
            for k, w in enumerate(words):
                info.data[k] = w
        params = _ConfigParams(ctypes.sizeof(_ConfigParams), None, self.ctx, len(attrs), infos)
        self._call("cuptiPCSamplingSetConfigurationAttribute", params)
        return self

    def _read_stall_reasons(self) -> None:
        n = ctypes.c_size_t(0)
        self._call(
            "cuptiPCSamplingGetNumStallReasons",
            _NumReasonsParams(ctypes.sizeof(_NumReasonsParams), None, self.ctx, ctypes.pointer(n)),
        )
        idx = (ctypes.c_uint32 * n.value)()
        bufs = [ctypes.create_string_buffer(STALL_REASON_STRING_SIZE) for _ in range(n.value)]
        names = (ctypes.c_char_p * n.value)(*[ctypes.cast(b, ctypes.c_char_p) for b in bufs])
        self._call(
            "cuptiPCSamplingGetStallReasons",
            _ReasonsParams(ctypes.sizeof(_ReasonsParams), None, self.ctx, n.value, idx, names),
        )
        self.reasons = {int(idx[i]): bufs[i].value.decode() for i in range(n.value)}

    def _alloc_buffer(self):
        """A CUpti_PCSamplingData with room for max_pcs PCs, each with every stall reason."""
        nr = max(len(self.reasons), 1)
        pcs = (_PCData * self.max_pcs)()
        reasons = (_StallReason * (nr * self.max_pcs))()
        base = ctypes.addressof(reasons)
        for i in range(self.max_pcs):
            pcs[i].size = ctypes.sizeof(_PCData)
            pcs[i].stallReason = ctypes.cast(base + i * nr * ctypes.sizeof(_StallReason), ctypes.POINTER(_StallReason))
        data = (_SamplingData * 1)()
        data[0].size = ctypes.sizeof(_SamplingData)
        data[0].collectNumPcs = self.max_pcs
        data[0].pPcData = pcs
        self._keep = getattr(self, "_keep", []) + [pcs, reasons]  # the buffers must outlive CUPTI's use
        return data

    def _drain(self, data) -> int:
        d = data[0]
        self.totals["total_samples"] += int(d.totalSamples)
        self.totals["dropped_samples"] += int(d.droppedSamples)
        self.totals["non_user_kernel_samples"] += int(d.nonUsrKernelsTotalSamples)
        self.totals["hardware_buffer_full"] |= bool(d.hardwareBufferFull)
        n = int(d.totalNumPcs)
        for i in range(min(n, self.max_pcs)):
            p = d.pPcData[i]
            name = ctypes.cast(p.functionName, ctypes.c_char_p).value if p.functionName else b""
            stalls = {}
            for j in range(int(p.stallReasonCount)):
                r = p.stallReason[j]
                if r.samples:
                    stalls[str(int(r.pcSamplingStallReasonIndex))] = int(r.samples)
            self.records.append(
                {
                    "cubin_crc": int(p.cubinCrc),
                    "function_name": name.decode(errors="replace"),
                    "function_index": int(p.functionIndex),
                    "pc_offset": int(p.pcOffset),
                    "stalls": stalls,
                }
            )
        d.totalNumPcs = 0
        return n

    def flush(self) -> int:
        """Synchronize and move every record CUPTI holds into this sampler; returns how many.
        In kernel-serialized mode each kernel is one range whose records CUPTI stages in the
        configured buffer, so call this after each launch of interest (before other kernels run)."""
        if not self._enabled:
            raise CuptiError("PcSampler.flush() outside start()/stop()")
        _synchronize()
        if getattr(self, "_get_buffer", None) is None:
            self._get_buffer = self._alloc_buffer()
        data, total = self._get_buffer, 0
        for _ in range(10_000):  # GetData hands out at most collectNumPcs PCs per call
            _clear(data)
            params = _GetDataParams(ctypes.sizeof(_GetDataParams), None, self.ctx, ctypes.addressof(data[0]))
            self._call("cuptiPCSamplingGetData", params)
            got = self._drain(data)
            total += got
            if got == 0 and data[0].remainingNumPcs == 0:
                break
        return total

    def stop(self) -> dict:
        """Flush, disable sampling (CUPTI then copies what it still held into the configured
        buffer, which is read too); returns the file's JSON object."""
        if not self._enabled:
            raise CuptiError("PcSampler.stop() before start()")
        self.flush()
        _clear(self._data)  # only what Disable writes from here on is new
        self._call("cuptiPCSamplingDisable", self._ctx_params())
        self._enabled = False
        self._drain(self._data)
        return self.result()

    def cubin_crc(self, cubin: bytes) -> int:
        """CUPTI's CRC of a cubin (what its PC records carry as cubin_crc); remembered as the
        mapped cubin's CRC, so that read_cupti_json keeps only that cubin's samples."""
        buf = ctypes.create_string_buffer(bytes(cubin), len(cubin))
        params = _CrcParams(ctypes.sizeof(_CrcParams), len(cubin), ctypes.cast(buf, ctypes.c_void_p), 0)
        self._call("cuptiGetCubinCrc", params)
        self.mapped_cubin_crc = int(params.cubinCrc)
        return self.mapped_cubin_crc

    def result(self) -> dict:
        return {
            "format": FORMAT,
            "library": self.lib_path,
            "sampling_period": self.sampling_period,
            "mapped_cubin_crc": getattr(self, "mapped_cubin_crc", None),
            "stall_reasons": {str(k): v for k, v in sorted(self.reasons.items())},
            **self.totals,
            "records": self.records,
        }

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(dumps(self.result(), indent=None))

    def __enter__(self) -> PcSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._enabled:
            self.stop()


def _clear(data) -> None:
    """Reset a reused CUpti_PCSamplingData's output fields, so nothing is counted twice."""
    d = data[0]
    d.totalNumPcs = d.remainingNumPcs = 0
    d.totalSamples = d.droppedSamples = d.nonUsrKernelsTotalSamples = 0
    d.hardwareBufferFull = 0


def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise CuptiError(f"no CUDA driver: {e}") from None


def _current_context() -> int:
    cuda = _libcuda()
    ctx = ctypes.c_void_p()
    rc = cuda.cuCtxGetCurrent(ctypes.byref(ctx))
    if rc != 0 or not ctx.value:
        raise CuptiError("no current CUDA context: create one first (e.g. torch.zeros(1, device='cuda'))")
    return ctx.value


def _synchronize() -> None:
    rc = _libcuda().cuCtxSynchronize()
    if rc != 0:
        raise CuptiError(f"cuCtxSynchronize failed ({rc})")
