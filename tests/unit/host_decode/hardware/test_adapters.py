"""Per-PC data adapters: Nsight Compute CSV, CUPTI PC sampling JSON (+ the ctypes collector's struct
layouts), NVBit-style JSON. Fixtures: tests/fixtures/pc/ (synthetic ones written by make_synthetic.py;
real captures from gpu/pc_profile.py are named *_real.*)."""

from __future__ import annotations

import csv
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from host_decode.core.errors import DecodeError
from host_decode.hardware.adapters import (
    STALL_REASONS,
    PcTable,
    cupti,
    merge_duplicate_pcs,
    ncu,
    nvbit,
)

FIX = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "pc"))
NCU_CSV = os.path.join(FIX, "markers_synthetic_ncu.csv")
CUPTI_JSON = os.path.join(FIX, "markers_synthetic_cupti.json")
NVBIT_JSON = os.path.join(FIX, "markers_synthetic_nvbit.json")


def _csv_column_sum(path: str, column: str) -> float:
    """Independent reading: first column of that name, thousands separators, '-' as 0."""
    rows = list(csv.reader(open(path)))
    header = rows[1]
    k = header.index(column)
    return sum(float(r[k].replace(",", "")) for r in rows[2:] if r and r[k] not in ("", "-"))


# ================================================================================================
# Nsight Compute
# ================================================================================================


def test_ncu_synthetic_fixture():
    t = ncu.read_ncu_csv(NCU_CSV)
    assert t.source == "ncu" and t.kernel == "markers"
    assert t.pc[0] == 0 and np.all(np.diff(t.pc) == 16) and t.pc.size == 400
    assert t.meta["address_base"] == 0x7F3A_1C00_0000
    assert set(t.stalls) == set(STALL_REASONS)
    assert set(t.stalls_not_issued) == set(STALL_REASONS)  # "stall_sleeping (Not Issued)" -> sleep
    for col, name in [
        ("inst_executed", "Instructions Executed"),
        ("thread_inst_executed", "Thread Instructions Executed"),
        ("pred_on_thread_inst_executed", "Predicated-On Thread Instructions Executed"),
        ("samples", "Warp Stall Sampling (All Samples)"),
    ]:
        assert t.counters[col].sum() == _csv_column_sum(NCU_CSV, name), col
    assert sum(v.sum() for v in t.stalls.values()) == t.counters["samples"].sum()
    assert t.opcode[0] == "LDC" and "STG.E.64" in t.opcode
    assert "l2_theoretical_sectors_global" in t.counters


HEADER = (
    '"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)","Instructions Executed",'
    '"stall_wait","stall_long_sb (Not Issued)"\n'
)


def _csv(kernel: str, rows: list[str], base=0x7000) -> str:
    body = "".join(f'"{base + 16 * i:#x}","  {r}"\n' for i, r in enumerate(rows))
    return f'"Kernel Name","{kernel}",\n' + HEADER + body


def test_ncu_inline_shapes():
    text = "==PROF== Connected\n" + _csv(
        "k", ['@P0 BRA `(.L_x_1) ","3","5","999","5","1', 'EXIT ","1,024","2","7","2","0']
    )
    t = ncu.read_ncu_csv(text)
    assert t.pc.tolist() == [0, 16]
    assert t.opcode == ["BRA", "EXIT"]
    assert t.counters["inst_executed"].tolist() == [3, 1024]  # the first "Instructions Executed" column wins
    assert t.stalls["wait"].tolist() == [5, 2] and t.stalls_not_issued["long_sb"].tolist() == [1, 0]


def test_ncu_several_kernels_and_launches():
    a = _csv("ka", ['NOP ","1","1","1","1","0'])
    b = _csv("kb", ['NOP ","2","2","2","2","0'], base=0x9000)
    with pytest.raises(DecodeError, match="several kernels"):
        ncu.read_ncu_csv(a + b)
    assert ncu.read_ncu_csv(a + b, kernel="kb").counters["inst_executed"].tolist() == [2]
    two = ncu.read_ncu_csv(a + a)  # the same kernel launched twice: summed
    assert two.counters["inst_executed"].tolist() == [2] and two.meta["launches"] == 2
    with pytest.raises(DecodeError, match="not in the CSV"):
        ncu.read_ncu_csv(a, kernel="zz")


def test_ncu_refuses_garbage():
    with pytest.raises(DecodeError, match="line 3: Address"):
        ncu.read_ncu_csv('"Kernel Name","k",\n' + HEADER + '"zz","NOP","1","1","1","1","0"\n')
    with pytest.raises(DecodeError, match="is not a number"):
        ncu.read_ncu_csv(_csv("k", ['NOP ","x","1","1","1","0']))
    with pytest.raises(DecodeError, match="16-byte steps"):
        ncu.read_ncu_csv(
            '"Kernel Name","k",\n' + HEADER + '"0x10","NOP","1","1","1","1","0"\n"0x18","NOP","1","1","1","1","0"\n'
        )
    with pytest.raises(DecodeError, match="no source-page table"):
        ncu.read_ncu_csv("just some\ntext\n")


@pytest.mark.parametrize(
    "cells, column, why",
    [
        ('NOP ","1","nan","1","1","0', "Warp Stall Sampling (All Samples)", "not a finite number"),
        ('NOP ","inf","1","1","1","0', "Instructions Executed", "not a finite number"),
        ('NOP ","-5","1","1","1","0', "Instructions Executed", "negative"),
        ('NOP ","1","1","1","-2","0', "stall_wait", "negative"),
    ],
)
def test_ncu_refuses_non_counts(cells, column, why):
    """float() takes nan and inf, and a negative count reads as a number: each would skew or drop a
    column silently; refused with the line and column instead."""
    text = _csv("k", ['NOP ","1","1","1","1","0', cells])
    with pytest.raises(DecodeError, match=rf"line 4: column '{re.escape(column)}' value .* {why}"):
        ncu.read_ncu_csv(text)


# ================================================================================================
# CUPTI
# ================================================================================================


def test_cupti_synthetic_fixture():
    obj = json.load(open(CUPTI_JSON))
    t = cupti.read_cupti_json(CUPTI_JSON, kernel="markers")
    assert t.source == "cupti" and t.meta["cubin_crc"] == 0x5EED
    assert np.all(np.diff(t.pc) > 0)  # split records of one PC were merged
    issued = {k for k, v in obj["stall_reasons"].items() if not v.endswith("_not_issued")}
    want = sum(
        c for r in obj["records"] if r["function_name"] == "markers" for k, c in r["stalls"].items() if k in issued
    )
    assert t.counters["samples"].sum() == want
    assert "long_sb" in t.stalls and "no_inst" not in t.stalls  # names mapped, zero-only reasons absent
    assert t.stalls_not_issued and "samples_not_issued" in t.counters
    with pytest.raises(DecodeError, match="several kernels"):
        cupti.read_cupti_json(CUPTI_JSON)
    with pytest.raises(DecodeError, match="'absent' not in the file"):
        cupti.read_cupti_json(CUPTI_JSON, kernel="absent")


def test_cupti_stall_names():
    assert cupti.stall_name("smsp__pcsamp_warps_issue_stalled_long_scoreboard") == ("long_sb", False)
    assert cupti.stall_name("smsp__pcsamp_warps_issue_stalled_sleeping_not_issued") == ("sleep", True)
    assert cupti.stall_name("smsp__pcsamp_warps_issue_stalled_wait") == ("wait", False)


def test_cupti_refuses_other_formats():
    with pytest.raises(DecodeError, match="not a CUPTI PC sampling file"):
        cupti.read_cupti_json({"format": "x"})
    base = {"format": cupti.FORMAT, "stall_reasons": {"0": "smsp__pcsamp_warps_issue_stalled_wait"}}
    recs = [
        {"cubin_crc": 1, "function_name": "k", "pc_offset": 0, "stalls": {"0": 1}},
        {"cubin_crc": 2, "function_name": "k", "pc_offset": 0, "stalls": {"0": 1}},
    ]
    with pytest.raises(DecodeError, match="different cubins"):
        cupti.read_cupti_json({**base, "records": recs}, kernel="k")
    assert cupti.read_cupti_json({**base, "records": recs}, kernel="k", cubin_crc=2).counters["samples"].tolist() == [1]


# offsets / sizes read from cupti_pcsampling.h (CUDA 13, x86-64) with a C compiler
C_OFFSETS = {
    ("_PCData", "stallReason"): 48,
    ("_PCData", "correlationId"): 56,
    ("_SamplingData", "pPcData"): 56,
    ("_SamplingData", "hardwareBufferFull"): 72,
    ("_ConfigInfo", "data"): 8,
}


def test_cupti_ctypes_layouts_match_the_header():
    for name, size in cupti.STRUCT_SIZES.items():
        assert ctypes.sizeof(getattr(cupti, name)) == size, name
    for (struct, field), off in C_OFFSETS.items():
        assert getattr(getattr(cupti, struct), field).offset == off, (struct, field)


def _cupti_header_dir():
    try:
        import nvidia

        for base in nvidia.__path__:
            for d in glob.glob(os.path.join(base, "*", "include")):
                if os.path.exists(os.path.join(d, "cupti_pcsampling.h")):
                    return d
    except ImportError:
        pass
    d = "/usr/local/cuda/extras/CUPTI/include"
    return d if os.path.exists(os.path.join(d, "cupti_pcsampling.h")) else None


@pytest.mark.skipif(
    _cupti_header_dir() is None or shutil.which("cc") is None or not os.path.exists("/usr/local/cuda/include/cuda.h"),
    reason="needs cupti_pcsampling.h, cuda.h and a C compiler",
)
def test_cupti_sizes_against_the_real_header(tmp_path):
    names = {
        "_StallReason": "CUpti_PCSamplingStallReason",
        "_PCData": "CUpti_PCSamplingPCData",
        "_SamplingData": "CUpti_PCSamplingData",
        "_ConfigInfo": "CUpti_PCSamplingConfigurationInfo",
        "_ConfigParams": "CUpti_PCSamplingConfigurationInfoParams",
        "_CtxParams": "CUpti_PCSamplingEnableParams",
        "_GetDataParams": "CUpti_PCSamplingGetDataParams",
        "_NumReasonsParams": "CUpti_PCSamplingGetNumStallReasonsParams",
        "_ReasonsParams": "CUpti_PCSamplingGetStallReasonsParams",
        "_CrcParams": "CUpti_GetCubinCrcParams",
    }
    src = "#include <stdio.h>\n#include <cupti_pcsampling.h>\nint main(){\n"
    src += "".join(f'printf("{k} %zu\\n", sizeof({v}));\n' for k, v in names.items()) + "}\n"
    (tmp_path / "s.c").write_text(src)
    subprocess.run(
        [
            "cc",
            f"-I{_cupti_header_dir()}",
            "-I/usr/local/cuda/include",
            str(tmp_path / "s.c"),
            "-o",
            str(tmp_path / "s"),
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(tmp_path / "s")], check=True, capture_output=True, text=True).stdout.split()
    got = dict(zip(out[::2], map(int, out[1::2])))
    assert got == {k: ctypes.sizeof(getattr(cupti, k)) for k in names}


def test_cupti_collector_without_gpu_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("IKP_LIBCUPTI", str(tmp_path / "missing_libcupti.so"))
    with pytest.raises(cupti.CuptiError, match="cannot load"):
        cupti.PcSampler()


# ================================================================================================
# NVBit-style
# ================================================================================================


def test_nvbit_synthetic_fixture():
    t = nvbit.read_nvbit_json(NVBIT_JSON)
    obj = json.load(open(NVBIT_JSON))
    assert t.kernel == "markers" and t.regions is not None
    assert t.counters["inst_executed"].sum() == sum(r["executed_count"] for r in obj["pcs"])
    assert t.pc.tolist() == sorted(int(r["pc_offset"], 16) for r in obj["pcs"])


def test_nvbit_shapes_and_errors():
    recs = [
        {"function_name": "k", "pc_offset": 16, "executed_count": 2, "dominant_region": "a"},
        {"function_name": "k", "pc_offset": "0x10", "executed_count": 3, "dominant_region": "a"},
        {"function_name": "other", "pc_offset": 0, "executed_count": 9},
    ]
    with pytest.raises(DecodeError, match="several kernels"):
        nvbit.read_nvbit_json(recs)
    t = nvbit.read_nvbit_json(recs, kernel="k")
    assert t.pc.tolist() == [16] and t.counters["inst_executed"].tolist() == [5] and t.regions == ["a"]
    assert t.meta["other_functions"] == 1
    ours = {
        "format": nvbit.FORMAT,
        "kernel": "k",
        "pcs": [{"pc_offset": 0, "executed_count": 4, "opcode": "NOP", "thread_executed_count": 128}],
    }
    t = nvbit.read_nvbit_json(ours)
    assert t.counters["thread_inst_executed"].tolist() == [128] and t.opcode == ["NOP"]
    with pytest.raises(DecodeError, match="not an integer"):
        nvbit.read_nvbit_json([{"pc_offset": "zz"}])
    with pytest.raises(DecodeError, match="no pc_offset"):
        nvbit.read_nvbit_json([{"executed_count": 1}])


def _cupti_file(records, **fields) -> dict:
    obj = {"format": cupti.FORMAT, "stall_reasons": {"0": "smsp__pcsamp_warps_issue_stalled_wait"}}
    obj.update(records=records, **fields)
    return obj


def _cupti_record(function="k", pc=0, stalls=None) -> dict:
    return {"cubin_crc": 7, "function_name": function, "pc_offset": pc, "stalls": stalls or {"0": 2}}


def test_exact_kernel_name_wins_over_a_longer_one():
    """`k` must not also take `k_v2` (another function of the same cubin): its data would join with
    the map of `k` and pass every check. A unique part of a name still picks it."""
    records = [_cupti_record("k", 0), _cupti_record("k_v2", 0, {"0": 1000}), _cupti_record("k_v2", 16)]
    t = cupti.read_cupti_json(_cupti_file(records), kernel="k")
    assert t.kernel == "k" and t.pc.tolist() == [0] and t.counters["samples"].tolist() == [2]
    assert cupti.read_cupti_json(_cupti_file(records), kernel="v2").kernel == "k_v2"
    pcs = [
        {"function_name": "k", "pc_offset": 0, "opcode": "LDC", "executed_count": 4},
        {"function_name": "k_v2", "pc_offset": 0, "opcode": "FOO", "executed_count": 999},
    ]
    t = nvbit.read_nvbit_json(pcs, kernel="k")
    assert t.kernel == "k" and t.counters["inst_executed"].tolist() == [4] and t.opcode == ["LDC"]


def test_nvbit_records_of_one_pc_must_agree_on_the_opcode():
    """Only the first record's opcode reached the cubin check: a later record of the same PC naming
    another instruction (another build) went unseen."""
    pcs = [
        {"function_name": "k", "pc_offset": 0, "opcode": "LDC", "executed_count": 4},
        {"function_name": "k", "pc_offset": 0, "opcode": "FFMA", "executed_count": 4},
    ]
    with pytest.raises(DecodeError, match="pc 0x0 has opcode FFMA, an earlier record LDC"):
        nvbit.read_nvbit_json(pcs)


@pytest.mark.parametrize(
    "mutate, what",
    [
        (lambda o: o["records"][1].pop("pc_offset"), "record 1 has no pc_offset"),
        (lambda o: o["records"][1].update(pc_offset=-16), "record 1: pc_offset -16 is negative"),
        (lambda o: o["records"][1].update(pc_offset=3.5), "record 1: pc_offset 3.5 is not an integer"),
        (lambda o: o["records"][1].update(stalls=[1, 2]), "record 1: stalls must be an object"),
        (lambda o: o["records"][1].update(stalls={"x": 3}), "record 1: stalls key 'x' is not an integer"),
        (lambda o: o["records"][1].update(stalls={"0": "lots"}), r"record 1: stalls\['0'\] count 'lots'"),
        (lambda o: o["records"][1].update(stalls={"0": -3}), r"record 1: stalls\['0'\] count -3 is negative"),
        (lambda o: o.update(records={"a": 1}), "'records' must be a list of objects"),
        (lambda o: o.update(records=[1, 2, 3]), "'records' must be a list of objects"),
        (lambda o: o.update(stall_reasons=[1, 2]), "'stall_reasons' must be an object"),
    ],
    ids=[
        "no_pc",
        "negative_pc",
        "fractional_pc",
        "stalls_list",
        "stall_index",
        "stall_count",
        "negative_count",
        "records_dict",
        "records_ints",
        "reasons_list",
    ],
)
def test_cupti_refuses_malformed_records(tmp_path, mutate, what):
    """A malformed file is a DecodeError naming the file and the field, never a KeyError or
    AttributeError traceback."""
    obj = _cupti_file([_cupti_record(pc=0), _cupti_record(pc=16)])
    mutate(obj)
    path = tmp_path / "pcsamp.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(DecodeError, match=what) as e:
        cupti.read_cupti_json(str(path))
    assert e.value.source == str(path)


def test_pc_offsets_as_hex_strings_and_negative_counts_alike_in_cupti_and_nvbit():
    t = cupti.read_cupti_json(_cupti_file([_cupti_record(pc="0x30")]))
    assert t.pc.tolist() == [0x30]
    assert nvbit.read_nvbit_json([{"pc_offset": "0x30", "executed_count": 1}]).pc.tolist() == [0x30]
    with pytest.raises(DecodeError, match="record 0: executed_count -50 is negative"):
        nvbit.read_nvbit_json([{"pc_offset": 0, "executed_count": -50}])


def test_pctable_validates_and_merges():
    with pytest.raises(ValueError, match="strictly increasing"):
        PcTable("x", None, [16, 0], {}, {})
    with pytest.raises(ValueError, match="shape"):
        PcTable("x", None, [0, 16], {"inst_executed": [1]}, {})
    pc, cols, first = merge_duplicate_pcs(np.array([32, 0, 32]), {"a": np.array([1.0, 2.0, 3.0])})
    assert pc.tolist() == [0, 32] and cols["a"].tolist() == [2.0, 4.0] and first.tolist() == [1, 0]


# A stand-in libcupti with the PC sampling entry points, written against struct mirrors of
# cupti_pcsampling.h (packed, aligned 8), so the ctypes collector's calls, buffers and loops run in CI.
FAKE_CUPTI_C = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#define PACKED __attribute__((__packed__)) __attribute__((aligned(8)))
typedef struct PACKED { uint32_t idx; uint32_t samples; } SR;
typedef struct PACKED { size_t size; uint64_t crc; uint64_t pc; uint32_t fi; uint32_t pad; char* fn; size_t n;
                        SR* sr; uint32_t corr; } PCD;
typedef struct PACKED { size_t size; size_t collect; uint64_t total; uint64_t dropped; size_t npcs; size_t remaining;
                        uint64_t range; PCD* pcs; uint64_t nonusr; uint8_t full; } DATA;
typedef struct { uint32_t type; int32_t status; uint64_t data[3]; } CFG;
typedef struct { size_t size; void* priv; void* ctx; size_t n; CFG* cfg; } CFGP;
typedef struct { size_t size; void* priv; void* ctx; } CTXP;
typedef struct { size_t size; void* priv; void* ctx; void* data; } GETP;
typedef struct { size_t size; void* priv; void* ctx; size_t* n; } NUMP;
typedef struct { size_t size; void* priv; void* ctx; size_t n; uint32_t* idx; char** names; } RSNP;
static DATA* configured; static int calls; static char name[] = "k";
int cuptiGetResultString(int rc, const char** s) { *s = "fake error"; return 0; }
int cuptiPCSamplingEnable(CTXP* p) { return (p->size == 24 && p->ctx == (void*)1234) ? 0 : 99; }
int cuptiPCSamplingGetNumStallReasons(NUMP* p) { if (p->size != 32) return 98; *p->n = 3; return 0; }
int cuptiPCSamplingGetStallReasons(RSNP* p) {
  if (p->size != 48 || p->n != 3) return 97;
  const char* names[3] = {"smsp__pcsamp_warps_issue_stalled_long_scoreboard",
                          "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued",
                          "smsp__pcsamp_warps_issue_stalled_wait"};
  for (int i = 0; i < 3; ++i) { p->idx[i] = 10 + i; strcpy(p->names[i], names[i]); }
  return 0;
}
int cuptiPCSamplingSetConfigurationAttribute(CFGP* p) {
  if (p->size != 40) return 96;
  for (size_t i = 0; i < p->n; ++i) {
    CFG* c = &p->cfg[i];
    if (c->type == 2 && (c->data[0] != 3 || ((uint32_t*)c->data[1])[2] != 12)) return 95;
    if (c->type == 5 && (uint32_t)c->data[0] != 2) return 94;
    if (c->type == 8) configured = (DATA*)c->data[0];
  }
  return configured && configured->size == 80 ? 0 : 93;
}
static void put(DATA* d, size_t k, uint64_t pc, uint32_t i0, uint32_t s0, uint32_t i1, uint32_t s1) {
  PCD* r = &d->pcs[k]; r->pc = pc; r->crc = 99; r->fn = name; r->fi = 1; r->n = 2;
  r->sr[0].idx = i0; r->sr[0].samples = s0; r->sr[1].idx = i1; r->sr[1].samples = s1;
}
int cuptiPCSamplingGetData(GETP* p) {
  DATA* d = (DATA*)p->data;
  if (p->size != 32 || d->size != 80 || d->collect < 2 || d->pcs[0].size != 64) return 92;
  if (calls++ == 0) { put(d, 0, 0x10, 10, 5, 11, 2); put(d, 1, 0x20, 12, 7, 10, 0); d->npcs = 2; d->total = 14; }
  else d->npcs = 0;
  d->remaining = 0;
  return 0;
}
typedef struct { size_t size; size_t n; const void* cubin; uint64_t crc; } CRCP;
int cuptiGetCubinCrc(CRCP* p) {
  if (p->size != 32 || p->n != 4 || memcmp(p->cubin, "\x7f" "ELF", 4)) return 91;
  p->crc = 99; return 0;
}
int cuptiPCSamplingDisable(CTXP* p) {
  put(configured, 0, 0x10, 12, 1, 10, 0); configured->npcs = 1; configured->total = 1; return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_cupti_collector_against_a_fake_libcupti(tmp_path, monkeypatch):
    (tmp_path / "fake.c").write_text(FAKE_CUPTI_C)
    lib = tmp_path / "libfakecupti.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "fake.c")], check=True, capture_output=True
    )
    monkeypatch.setattr(cupti, "_current_context", lambda: 1234)
    monkeypatch.setattr(cupti, "_synchronize", lambda: None)
    with cupti.PcSampler(libcupti=str(lib), max_pcs=8) as sampler:
        assert sampler.cubin_crc(b"\x7fELF") == 99
        assert sampler.flush() == 2  # the two PCs of the first range
        assert sampler.flush() == 0  # nothing new: no double counting from the reused buffer
    result = sampler.result()
    assert result["mapped_cubin_crc"] == 99
    assert result["total_samples"] == 15 and len(result["records"]) == 3
    t = cupti.read_cupti_json(result, kernel="k")
    assert t.pc.tolist() == [0x10, 0x20]
    assert t.stalls["long_sb"].tolist() == [5, 0] and t.stalls["wait"].tolist() == [1, 7]
    assert t.stalls_not_issued["long_sb"].tolist() == [2, 0]
    assert t.counters["samples"].tolist() == [6, 7]
    result["records"].append({"cubin_crc": 5, "function_name": "k", "pc_offset": 0, "stalls": {"12": 4}})
    assert cupti.read_cupti_json(result, kernel="k").pc.tolist() == [0x10, 0x20]  # other cubins' "k": left out
    result["records"].pop()
    path = tmp_path / "s.json"
    sampler.save(str(path))
    assert cupti.read_cupti_json(str(path), kernel="k").counters["samples"].sum() == 13
