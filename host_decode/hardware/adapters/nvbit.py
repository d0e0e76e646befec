"""NVBit-style per-PC JSON -> PcTable.

NVBit is not on any package index reachable here, so this reads what NVBit tools write. Two shapes:

1. Ours (``format: "ikp-nvbit-pc-v1"``; what an NVBit counting tool should emit for ikp)::

       {"format": "ikp-nvbit-pc-v1", "kernel": "<symbol>",
        "pcs": [{"pc_offset": 0, "opcode": "LDC", "executed_count": 128,
                 "thread_executed_count": 4096, "pred_on_thread_count": 4096}, ...]}

   ``pc_offset`` is function-relative (int or "0x.." string); counts are warp-level executions
   (``executed_count``) and optional thread-level ones.

2. Per-PC records of region profilers built on NVBit (a list, or under "pcs" / "records")::

       {"function_name": "k", "pc_offset": 16, "dominant_region": "mma", "executed_count": 99,
        "ambiguity": 0.0}

   Their own region attribution is kept in ``PcTable.regions`` so a join can report how often it
   agrees with pc2region.

Records of one PC are summed; records of other functions are left out (counted in ``meta``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.hardware.adapters import PcTable, merge_duplicate_pcs

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
    kernel = kernel or file_kernel
    names = sorted({str(r["function_name"]) for r in records if "function_name" in r})
    if kernel is None and len(names) > 1:
        raise DecodeError("records of several functions; choose one: " + ", ".join(names), source=source)
    chosen = [
        r for r in records if kernel is None or "function_name" not in r or _name_match(r["function_name"], kernel)
    ]
    if not chosen:
        raise DecodeError(f"no records for kernel {kernel!r}; functions: {', '.join(names)}", source=source)
    pc = np.empty(len(chosen), np.int64)
    cols = {name: np.zeros(len(chosen)) for name in _COUNT_FIELDS.values()}
    present = set()
    for i, r in enumerate(chosen):
        pc[i] = _int(r.get("pc_offset"), f"record {i}: pc_offset", source)
        for field, name in _COUNT_FIELDS.items():
            if field in r:
                cols[name][i] = _int(r[field], f"record {i}: {field}", source)
                present.add(name)
    if np.any(pc < 0):
        raise DecodeError("negative pc_offset", source=source)
    cols = {k: v for k, v in cols.items() if k in present}
    uniq, summed, first = merge_duplicate_pcs(pc, cols)
    opcode = [str(chosen[i].get("opcode", "")) for i in first] if any("opcode" in r for r in chosen) else None
    regions = None
    if any("dominant_region" in r or "region" in r for r in chosen):
        regions = [str(chosen[i].get("dominant_region", chosen[i].get("region", ""))) for i in first]
    return PcTable(
        "nvbit",
        kernel or (names[0] if names else None),
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


def _int(value: Any, what: str, source: str) -> int:
    try:
        if isinstance(value, str):
            return int(value, 0)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise DecodeError(f"{what} = {value!r} is not an integer", source=source) from None


def _name_match(name: str, kernel: str) -> bool:
    return name == kernel or kernel in name
