"""Per-PC hardware data from Nsight Compute, CUPTI PC sampling and NVBit-style tools, read into one
table keyed by function-relative PC offset (the key pc2region maps use).

Every adapter returns a :class:`PcTable`; host_decode.hardware.join joins it with a pc2region map. Adapters
import with numpy alone (CUPTI's collector loads libcupti with ctypes only when called).

Shared rules (tests/unit/host_decode/hardware/test_adapters.py): a kernel is picked by choose_kernel (an exact name wins
over a substring: test_exact_kernel_name_wins_over_a_longer_one); JSON integer fields go through json_int
(PCs as ints or "0x.." strings, counts never negative: test_cupti_refuses_malformed_records).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from host_decode.core.errors import DecodeError

# Canonical stall-reason names (Nsight Compute's `stall_*` suffixes); CUPTI names map onto them.
STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch", "drain", "imc", "lg", "long_sb", "math", "membar", "mio",
    "misc", "no_inst", "not_selected", "selected", "short_sb", "sleep", "tex", "wait",
)  # fmt: skip

# Counters an adapter may fill (absent ones are simply missing from `counters`).
COUNTERS = (
    "inst_executed",  # warp-level instructions executed
    "thread_inst_executed",
    "pred_on_thread_inst_executed",  # thread instructions whose predicate was true
    "divergent_branches",
    "samples",  # all warp-state samples at this PC (sum over reasons)
    "samples_not_issued",
)


@dataclasses.dataclass
class PcTable:
    """Columnar per-PC data of one kernel. `pc`: int64 function-relative byte offsets (unique,
    ascending). `counters` / `stalls` / `stalls_not_issued`: name -> float64 array aligned with `pc`.
    `opcode`: the SASS opcode per PC when the source printed it (used for the cubin-mismatch check)."""

    source: str  # "ncu" | "cupti" | "nvbit" | ...
    kernel: str | None
    pc: np.ndarray
    counters: dict[str, np.ndarray]
    stalls: dict[str, np.ndarray]
    stalls_not_issued: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    opcode: list[str] | None = None
    meta: dict = dataclasses.field(default_factory=dict)
    regions: list[str] | None = None  # NVBit-style tools may carry their own region per PC

    def __post_init__(self) -> None:
        self.pc = np.asarray(self.pc, np.int64)
        n = self.pc.size
        for group in (self.counters, self.stalls, self.stalls_not_issued):
            for name, col in list(group.items()):
                col = np.asarray(col, np.float64)
                if col.shape != (n,):
                    raise ValueError(f"column {name!r} has shape {col.shape}, expected ({n},)")
                group[name] = col
        if n and np.any(np.diff(self.pc) <= 0):
            raise ValueError("PcTable.pc must be strictly increasing (merge duplicate PCs first)")
        if self.opcode is not None and len(self.opcode) != n:
            raise ValueError("PcTable.opcode must have one entry per PC")

    @property
    def total_samples(self) -> float:
        if "samples" in self.counters:
            return float(self.counters["samples"].sum())
        return float(sum(c.sum() for c in self.stalls.values()))

    def totals(self) -> dict[str, float]:
        out = {k: float(v.sum()) for k, v in self.counters.items()}
        out.update({f"stall_{k}": float(v.sum()) for k, v in self.stalls.items()})
        return out


def merge_duplicate_pcs(
    pc: np.ndarray, columns: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Sum rows that share a PC (several records per PC in CUPTI output) -> (unique pcs, summed
    columns, index of the first row of each unique pc)."""
    pc = np.asarray(pc, np.int64)
    order = np.argsort(pc, kind="stable")
    uniq, first, inverse = np.unique(pc[order], return_index=True, return_inverse=True)
    out = {}
    for name, col in columns.items():
        out[name] = np.bincount(inverse, weights=np.asarray(col, np.float64)[order], minlength=uniq.size)
    return uniq, out, order[first]


def choose_kernel(names: Iterable[str], kernel: str | None, source: str, holder: str = "the file") -> str | None:
    """The kernel whose data to read: `kernel` itself when `names` has it (``k`` never also takes
    ``k_v2``), else the only name containing it; without `kernel`, the only name (None when the data
    names none). Otherwise a DecodeError naming the file and listing the kernels."""
    names = sorted(set(names))
    if kernel is None:
        if len(names) > 1:
            raise DecodeError(
                f"{holder} holds several kernels; choose one with --kernel (kernel= in Python): " + ", ".join(names),
                source=source,
            )
        return names[0] if names else None
    if kernel in names:
        return kernel
    partial = [name for name in names if kernel in name]
    if len(partial) == 1:
        return partial[0]
    raise DecodeError(
        f"kernel {kernel!r} {'is ambiguous' if partial else f'not in {holder}'}; kernels: " + ", ".join(names),
        source=source,
    )


def json_int(value: Any, what: str, source: str) -> int:
    """A non-negative integer field of a JSON record (PC offset, count, index): an int, an integral
    float, or a decimal / "0x.." string (tools print PCs either way). Errors name the file and field."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, str):
            out = int(value.strip(), 0)
        elif isinstance(value, float):
            if not (math.isfinite(value) and value.is_integer()):
                raise ValueError
            out = int(value)
        else:
            out = int(value)
    except (TypeError, ValueError):
        raise DecodeError(f"{what} {value!r} is not an integer", source=source) from None
    if out < 0:
        raise DecodeError(f"{what} {value!r} is negative", source=source)
    return out
