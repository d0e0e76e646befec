"""NVBit-style per-PC JSON -> PcTable.

NVBit is not on any package index reachable here, so this reads what NVBit tools write. Two shapes:

1. Ours (``format: "ikp-nvbit-pc-v1"``; what an NVBit counting tool should emit for ikp)::

       {"format": "ikp-nvbit-pc-v1", "kernel": "<symbol>",
        "pcs": [{"pc_offset": 0, "opcode": "LDC", "executed_count": 128,
                 "thread_executed_count": 4096, "pred_on_thread_count": 4096}, ...]}

   ``pc_offset`` is function-relative (int or "0x.." string); counts are warp-level executions
   (``executed_count``) and optional thread-level ones, never negative.

2. Per-PC records of region profilers built on NVBit (a list, or under "pcs" / "records")::

       {"function_name": "k", "pc_offset": 16, "dominant_region": "mma", "executed_count": 99,
        "ambiguity": 0.0}

   Their own region attribution is kept in ``PcTable.regions`` so a join can report how often it
   agrees with pc2region.

Records of one PC are summed (they must agree on the opcode); records of other functions are left out
(counted in ``meta``); the kernel is picked by adapters.choose_kernel (an exact name wins).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.hardware.adapters import PcTable, choose_kernel, json_int, merge_duplicate_pcs

FORMAT = "ikp-nvbit-pc-v1"
_COUNT_FIELDS = {
    "executed_count": "inst_executed",
    "thread_executed_count": "thread_inst_executed",
    "pred_on_thread_count": "pred_on_thread_inst_executed",
}


def read_nvbit_json(path_or_obj: Any, kernel: str | None = None) -> PcTable:
    source = "nvbit json"
    if isinstance(path_or_obj, str):
        source = path_or_obj
        try:
            with open(path_or_obj, "rb") as f:
                obj = json.loads(f.read().decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:  # binary data too: an error naming the file
            raise DecodeError(f"not JSON: {e}", source=source) from None
    else:
        obj = path_or_obj
    records, file_kernel = _records(obj, source)
    names = {str(r["function_name"]) for r in records if "function_name" in r}
    kernel = choose_kernel(names, kernel or file_kernel, source) if names else kernel or file_kernel
    used = [k for k, r in enumerate(records) if "function_name" not in r or str(r["function_name"]) == kernel]
    if not used:
        raise DecodeError("no per-PC records", source=source)
    chosen = [records[k] for k in used]
    pc = np.empty(len(used), np.int64)
    cols = {name: np.zeros(len(used)) for name in _COUNT_FIELDS.values()}
    present = set()
    opcode_at: dict[int, str] = {}
    for i, k in enumerate(used):
        r = records[k]
        pc[i] = json_int(r.get("pc_offset"), f"record {k}: pc_offset", source)
        for field, name in _COUNT_FIELDS.items():
            if field in r:
                cols[name][i] = json_int(r[field], f"record {k}: {field}", source)
                present.add(name)
        opcode = r.get("opcode")
        if opcode:  # every record's opcode counts: records of one PC naming two opcodes are two builds
            first = opcode_at.setdefault(int(pc[i]), str(opcode))
            if first != str(opcode):
                raise DecodeError(
                    f"record {k}: pc {int(pc[i]):#x} has opcode {opcode}, an earlier record {first}: "
                    "data of different builds in one file",
                    source=source,
                )
    cols = {k: v for k, v in cols.items() if k in present}
    uniq, summed, first_row = merge_duplicate_pcs(pc, cols)
    opcode = [opcode_at.get(int(p), "") for p in uniq] if opcode_at else None
    regions = None
    if any("dominant_region" in r or "region" in r for r in chosen):
        regions = [str(chosen[i].get("dominant_region", chosen[i].get("region", ""))) for i in first_row]
    return PcTable(
        "nvbit",
        kernel,
        uniq,
        summed,
        {},
        opcode=opcode,
        regions=regions,
        meta={
            "records": len(records),
            "records_used": len(chosen),
            "other_functions": len(records) - len(chosen),
            "source": source,
        },
    )


def _records(obj: Any, source: str) -> tuple[list[dict], str | None]:
    if isinstance(obj, list):
        return _check_list(obj, source), None
    if isinstance(obj, dict):
        for key in ("pcs", "records"):
            if key in obj:
                return _check_list(obj[key], source), obj.get("kernel")
    raise DecodeError("expected a list of per-PC records or an object with 'pcs' / 'records'", source=source)


def _check_list(items: Any, source: str) -> list[dict]:
    if not isinstance(items, list) or not all(isinstance(r, dict) for r in items):
        raise DecodeError("per-PC records must be a list of objects", source=source)
    for i, r in enumerate(items):
        if "pc_offset" not in r:
            raise DecodeError(f"record {i} has no pc_offset", source=source)
    return items
