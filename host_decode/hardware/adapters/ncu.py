"""Nsight Compute source-page CSV -> PcTable.

Produced on the GPU machine by

    ncu --section SourceCounters --import-source yes -f -o rep <cmd>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv

Layout (ncu 2025.3; older versions differ only in column names, handled below): a line
``"Kernel Name","<name>"`` opens each profiled kernel, the next line is the header, then one row per SASS
instruction. ``Address`` is absolute, so PCs are rebased on the block's first row (the function's
first instruction). Counts may carry thousands separators ("1,024"); "-" means not applicable; a
nan, inf or negative count is an error naming its line and column (test_ncu_refuses_non_counts).
Several blocks of the same kernel (several launches) are summed.

Invariants (tests/unit/host_decode/cli/test_cli_errors.py): binary data or a broken CSV is a DecodeError naming the
file; a row with fewer cells than the header (a file cut short) is an error, never padded; a table that stops before
the kernel's last instruction is caught against the map by the caller (host_decode.cli.common).
"""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.hardware.adapters import PcTable, choose_kernel

# display name -> our counter name (first match wins; older ncu said "Cycles" where 2025.x says "Samples")
COUNTER_COLUMNS = {
    "Instructions Executed": "inst_executed",
    "Thread Instructions Executed": "thread_inst_executed",
    "Predicated-On Thread Instructions Executed": "pred_on_thread_inst_executed",
    "Divergent Branches": "divergent_branches",
    "Warp Stall Sampling (All Samples)": "samples",
    "Warp Stall Sampling (All Cycles)": "samples",
    "Warp Stall Sampling (Not-issued Samples)": "samples_not_issued",
    "Warp Stall Sampling (Not-issued Cycles)": "samples_not_issued",
}
# ncu spells a few reasons differently between the issued and not-issued column sets / versions
STALL_ALIASES = {
    "sleeping": "sleep",
    "no_instruction": "no_inst",
    "no_instructions": "no_inst",
    "long_scoreboard": "long_sb",
    "short_scoreboard": "short_sb",
    "lg_throttle": "lg",
    "mio_throttle": "mio",
    "tex_throttle": "tex",
    "math_pipe_throttle": "math",
}
_NOT_ISSUED = " (Not Issued)"
# memory / access counters that are plain counts (summable per region); "Avg." columns are not
_SUMMABLE_PREFIXES = ("L1 ", "L2 ")


def read_ncu_csv(path_or_text: str, kernel: str | None = None) -> PcTable:
    """Read an ncu source-page CSV (a path, or the CSV text itself when it contains a newline)."""
    if "\n" in path_or_text:
        text, source = path_or_text, "ncu csv"
    else:
        source = path_or_text
        with open(path_or_text, newline="", encoding="utf-8", errors="replace") as f:
            text = f.read()
    blocks = _blocks(text, source)
    if not blocks:
        raise DecodeError(
            "no source-page table found (want a 'Kernel Name' line then a header with 'Address' and 'Source')",
            source=source,
        )
    chosen = _choose(blocks, kernel, source)
    tables = [_block_table(name, header, rows, source, line) for name, header, rows, line in chosen]
    return _sum_launches(tables, source)


def _blocks(text: str, source: str) -> list[tuple[str | None, list[str], list[list[str]], int]]:
    if "\x00" in text or "\ufffd" in text:
        raise DecodeError("not an ncu CSV: binary data (NUL or invalid UTF-8 bytes)", source=source)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise DecodeError(f"not a CSV file: {e}", source=source) from None
    blocks = []
    i = 0
    while i < len(rows):
        row = rows[i]
        if row and row[0].strip() == "Kernel Name":
            name = row[1].strip() if len(row) > 1 else None
            if i + 1 >= len(rows):
                raise DecodeError(f"'Kernel Name' at line {i + 1} has no header line after it", source=source)
            header, body, j = rows[i + 1], [], i + 2
            while j < len(rows) and not (rows[j] and rows[j][0].strip() == "Kernel Name"):
                if rows[j] and any(c.strip() for c in rows[j]):
                    body.append(rows[j])
                j += 1
            blocks.append((name, header, body, i + 2))
            i = j
        elif row and "Address" in [c.strip() for c in row] and "Source" in [c.strip() for c in row]:
            body = [r for r in rows[i + 1 :] if r and any(c.strip() for c in r)]  # no kernel line at all
            blocks.append((None, row, body, i + 1))
            break
        else:
            i += 1  # ncu log lines (==PROF==) and blank lines before the table
    return blocks


def _choose(blocks, kernel, source):
    name = choose_kernel({b[0] for b in blocks if b[0]}, kernel, source, holder="the CSV")
    return [b for b in blocks if b[0] == name or name is None]


def _count(cell: str) -> float:
    """A count cell: "1,024" -> 1024.0; "", "-" and "N/A" (not applicable) -> 0. A value float() would
    also take but no count can be (nan, inf, negative) is a ValueError saying why."""
    cell = cell.strip().replace(",", "")
    if cell in ("", "-", "N/A", "n/a"):
        return 0.0
    try:
        value = float(cell)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value):
        raise ValueError("is not a finite number")
    if value < 0:
        raise ValueError("is negative (counts never are)")
    return value


def _block_table(name, header, rows, source, header_line) -> PcTable:
    header = [h.strip() for h in header]
    try:
        i_addr, i_src = header.index("Address"), header.index("Source")
    except ValueError:
        raise DecodeError(
            f"header at line {header_line} lacks 'Address' or 'Source': {header[:6]}...", source=source
        ) from None
    columns = _column_roles(header)
    n = len(rows)
    addr = np.empty(n, np.int64)
    values = {key: np.zeros(n) for key in columns.values()}
    opcodes: list[str] = []
    for r, row in enumerate(rows):
        line_no = header_line + 1 + r
        if len(row) < len(header):  # ncu writes every cell: a short row is a file cut short
            raise DecodeError(f"line {line_no}: {len(row)} of {len(header)} columns (the file is cut short or "
                              "edited; export it again with ncu -i ... --page source --csv)", source=source)
        try:
            addr[r] = int(row[i_addr].strip(), 16) if row[i_addr].strip().lower().startswith("0x") else int(row[i_addr])
        except ValueError:
            raise DecodeError(f"line {line_no}: Address {row[i_addr]!r} is not a number", source=source) from None
        opcodes.append(_opcode(row[i_src]))
        for col, key in columns.items():
            try:
                values[key][r] += _count(row[col])
            except ValueError as e:
                raise DecodeError(
                    f"line {line_no}: column {header[col]!r} value {row[col]!r} {e}", source=source
                ) from None
    if n == 0:
        raise DecodeError(f"kernel {name!r}: the table has no instruction rows", source=source)
    base = int(addr[0])
    pc = addr - base
    if np.any(pc % 16) or np.any(np.diff(pc) <= 0):
        raise DecodeError(
            f"kernel {name!r}: addresses are not ascending 16-byte steps from the first row ({base:#x})", source=source
        )
    counters = {k[1]: v for k, v in values.items() if k[0] == "counter"}
    stalls = {k[1]: v for k, v in values.items() if k[0] == "stall"}
    not_issued = {k[1]: v for k, v in values.items() if k[0] == "stall_ni"}
    extra = {k[1]: v for k, v in values.items() if k[0] == "extra"}
    counters.update(extra)
    if "samples" not in counters and "n_samples" in counters:
        counters["samples"] = counters.pop("n_samples")
    else:
        counters.pop("n_samples", None)
    return PcTable(
        "ncu",
        name,
        pc,
        counters,
        stalls,
        not_issued,
        opcodes,
        meta={"address_base": base, "rows": n, "launches": 1, "source": source},
    )


def _column_roles(header: list[str]) -> dict[int, tuple[str, str]]:
    """column index -> (role, name); the first column of a duplicated display name wins."""
    roles: dict[int, tuple[str, str]] = {}
    taken: set[tuple[str, str]] = set()
    for i, h in enumerate(header):
        role = None
        if h in COUNTER_COLUMNS:
            role = ("counter", COUNTER_COLUMNS[h])
        elif h == "# Samples":
            role = ("counter", "n_samples")
        elif h.startswith("stall_"):
            reason = h[len("stall_") :]
            kind = "stall"
            if reason.endswith(_NOT_ISSUED):
                reason, kind = reason[: -len(_NOT_ISSUED)], "stall_ni"
            role = (kind, STALL_ALIASES.get(reason, reason))
        elif h.startswith(_SUMMABLE_PREFIXES):
            role = ("extra", _snake(h))
        if role and role not in taken:
            taken.add(role)
            roles[i] = role
    return roles


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _opcode(src: str) -> str:
    tokens = src.strip().rstrip(";").split()
    if tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    return tokens[0].rstrip(";") if tokens else ""


def _sum_launches(tables: list[PcTable], source: str) -> PcTable:
    first = tables[0]
    for t in tables[1:]:
        if not np.array_equal(t.pc, first.pc) or t.opcode != first.opcode:
            raise DecodeError(
                f"kernel {first.kernel!r} appears several times with different code; profile one variant per CSV",
                source=source,
            )
        for group_a, group_b in (
            (first.counters, t.counters),
            (first.stalls, t.stalls),
            (first.stalls_not_issued, t.stalls_not_issued),
        ):
            for k, v in group_b.items():
                group_a[k] = group_a.get(k, 0) + v
    first.meta["launches"] = len(tables)
    return first
