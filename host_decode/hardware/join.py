"""Join per-PC hardware data (host_decode.hardware.adapters.PcTable) with a pc2region map: per-region
instruction counts, predication, stall samples by reason, instrumentation cost.

Rules (they held up on real H200 data, docs/pc2region.md):
* Check first that the data belongs to the mapped cubin: every PC must exist in the map, opcodes must
  agree where the source printed them, no executions at PCs the map calls unreachable, and the data's
  kernel must be the map's (same_kernel). A mismatch raises naming the data file (``force=True`` /
  ``--allow-mismatch`` joins anyway and reports it; PCs not in the map then go to ``<not in map>``).
* Samples at a PC with zero executions (or, without execution counts, right after an unpredicated
  EXIT/BRA/RET) belong to the previous executed PC: warps that finished sit "after" their EXIT
  (stall_drain) and would otherwise land in whatever region the next bytes belong to.
* Sum counts and samples per reason over a region's PCs, then divide (fractions are never averaged);
  ratios are recomputed from summed numerators and denominators.
* Every PC lands in exactly one bucket: a region path or ``<outside>`` / ``<ambiguous>`` /
  ``<unreachable>``; per-bucket sums equal the input totals (tests/unit/host_decode/hardware/test_join.py checks
  conservation). Inclusive rows sum a path and every path below it (``mainloop`` includes ``mainloop/mma``).
* Instructions that exist only for the markers are also summed separately (``marker_*`` columns), as
  the instrumentation's own cost inside each region.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from host_decode.core.errors import DecodeError
from host_decode.hardware.adapters import PcTable
from host_decode.hardware.pc2region import RegionMap

NOT_IN_MAP = "<not in map>"
JOIN_FORMAT = "ikp-regions-hw-v1"


@dataclasses.dataclass
class JoinResult:
    kernel: str
    source: str
    paths: list[str]  # bucket names (map paths, then NOT_IN_MAP)
    stacks: list[list[int] | None]
    columns: dict[str, np.ndarray]  # column -> per-path exclusive sums
    marker_columns: dict[str, np.ndarray]  # same, over marker instructions only
    stall_reasons: list[str]
    totals: dict[str, float]  # input totals (after nothing: moves do not change totals)
    check: dict[str, Any]
    moved_samples: float
    events: dict[int, str]

    # -- inclusive sums by path prefix --
    def inclusive(self) -> tuple[list[str], list[list[int]], dict[str, np.ndarray]]:
        """Rows for every path prefix that occurs (a parent with no PCs of its own included)."""
        prefixes: dict[tuple, None] = {}
        for st in self.stacks:
            if st:
                for k in range(1, len(st) + 1):
                    prefixes.setdefault(tuple(st[:k]), None)
        keys = sorted(prefixes, key=lambda t: (len(t), t))
        out = {c: np.zeros(len(keys)) for c in self.columns}
        for j, key in enumerate(keys):
            rows = [i for i, st in enumerate(self.stacks) if st and tuple(st[: len(key)]) == key]
            for c, col in self.columns.items():
                out[c][j] = col[rows].sum()
        names = ["/".join(self.events.get(e, f"event_{e}") for e in key) for key in keys]
        return names, [list(k) for k in keys], out

    # -- derived numbers --
    def rows(self, inclusive: bool = False) -> list[dict[str, Any]]:
        if inclusive:
            names, stacks, cols = self.inclusive()
            marker = None
        else:
            names, stacks, cols, marker = self.paths, self.stacks, self.columns, self.marker_columns
        total_samples = self.totals.get("samples", 0.0)
        total_inst = self.totals.get("inst_executed", 0.0)
        out = []
        for i, name in enumerate(names):
            row: dict[str, Any] = {"path": name, "stack": stacks[i]}
            for c, col in cols.items():
                row[c] = float(col[i])
            samples = row.get("samples", 0.0)
            row["samples_share"] = _ratio(samples, total_samples)
            if "inst_executed" in row:
                row["inst_share"] = _ratio(row["inst_executed"], total_inst)
            if "thread_inst_executed" in row and "pred_on_thread_inst_executed" in row:
                row["predicated_on_ratio"] = _ratio(row["pred_on_thread_inst_executed"], row["thread_inst_executed"])
            if "thread_inst_executed" in row and "inst_executed" in row:
                row["threads_per_inst"] = _ratio(row["thread_inst_executed"], row["inst_executed"])
            stalls = {r: row.get(f"stall_{r}", 0.0) for r in self.stall_reasons}
            stall_sum = sum(stalls.values())
            row["stall_fractions"] = {r: _ratio(v, stall_sum) for r, v in stalls.items() if v}
            row["top_stalls"] = sorted(row["stall_fractions"].items(), key=lambda kv: -kv[1])[:3]
            if marker is not None:
                for c in ("inst_executed", "samples"):
                    if c in marker:
                        row[f"marker_{c}"] = float(marker[c][i])
                        row[f"marker_{c}_share"] = _ratio(float(marker[c][i]), row.get(c, 0.0))
            out.append(row)
        return out

    def instrumentation(self) -> dict[str, float]:
        return {
            f"marker_{c}": float(v.sum()) for c, v in self.marker_columns.items() if c in ("inst_executed", "samples")
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": JOIN_FORMAT,
            "kernel": self.kernel,
            "source": self.source,
            "totals": self.totals,
            "check": self.check,
            "moved_samples": self.moved_samples,
            "instrumentation": self.instrumentation(),
            "stall_reasons": self.stall_reasons,
            "exclusive": self.rows(False),
            "inclusive": self.rows(True),
        }

    def renamed(self, events: dict[int, str]) -> JoinResult:
        """The same result with region paths named by `events` (e.g. a trace's Names.events)."""
        paths = [
            p if st is None else "/".join(events.get(e, f"event_{e}") for e in st)
            for p, st in zip(self.paths, self.stacks)
        ]
        return dataclasses.replace(self, paths=paths, events=dict(events))


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


# ================================================================================================


def join(region_map: RegionMap, table: PcTable, *, force: bool = False, move_samples: bool = True) -> JoinResult:
    """Per-region sums of `table` over the regions of `region_map` (see the module docstring)."""
    pos, in_map = _positions(region_map, table)
    check = check_match(region_map, table, pos, in_map)
    if not check["ok"] and not force:
        raise DecodeError(
            "per-PC data does not match the mapped cubin: "
            + "; ".join(check["reasons"])
            + " (--allow-mismatch, force=True in Python, joins anyway)",
            source=table.meta.get("source", table.source),
        )
    if table.regions is not None:
        check.update(_region_agreement(region_map, table, pos, in_map))
    cols = _columns(table)
    n_map = region_map.pc.size
    # scatter the table onto map positions (rows not in the map kept aside)
    on_map = {c: np.bincount(pos[in_map], weights=v[in_map], minlength=n_map) for c, v in cols.items()}
    off_map = {c: float(v[~in_map].sum()) for c, v in cols.items()}
    moved = _move_samples(region_map, on_map) if move_samples else 0.0
    paths = list(region_map.paths) + [NOT_IN_MAP]
    stacks = list(region_map.stacks) + [None]
    n_paths = len(paths)
    region = region_map.region
    marker = region_map.is_marker
    columns, marker_columns = {}, {}
    for c in cols:
        col = np.bincount(region, weights=on_map[c], minlength=n_paths).astype(np.float64)
        col[-1] = off_map[c]
        columns[c] = col
        marker_columns[c] = np.bincount(region[marker], weights=on_map[c][marker], minlength=n_paths).astype(np.float64)
    totals = {c: float(v.sum()) for c, v in cols.items()}
    if check.get("executed_unreachable_samples") is None and "samples" in cols:
        unreachable = region_map.paths.index("<unreachable>")
        check["samples_in_unreachable_after_moves"] = float(columns["samples"][unreachable])
    return JoinResult(
        kernel=region_map.kernel,
        source=table.source,
        paths=paths,
        stacks=stacks,
        columns=columns,
        marker_columns=marker_columns,
        stall_reasons=sorted({c[len("stall_") :] for c in cols if c.startswith("stall_")}),
        totals=totals,
        check=check,
        moved_samples=moved,
        events=dict(region_map.events),
    )


def _region_agreement(region_map: RegionMap, table: PcTable, pos, in_map) -> dict[str, Any]:
    """How often a tool's own per-PC region (NVBit-style data) names the same path as the map,
    weighted by executions when known."""
    ours = np.array(region_map.paths, dtype=object)[region_map.region[pos]]
    theirs = np.array(table.regions, dtype=object)
    weight = table.counters.get("inst_executed", np.ones(table.pc.size))
    sel = in_map & (weight > 0)
    agree = sel & (ours == theirs)
    pairs: dict[tuple[str, str], float] = {}
    for o, t, w in zip(ours[sel & ~agree], theirs[sel & ~agree], weight[sel & ~agree]):
        pairs[(o, t)] = pairs.get((o, t), 0.0) + float(w)
    top = sorted(pairs.items(), key=lambda kv: -kv[1])[:5]
    return {
        "external_region_agreement": _ratio(float(weight[agree].sum()), float(weight[sel].sum())),
        "external_region_disagreements": [{"map": o, "data": t, "weight": w} for (o, t), w in top],
    }


def _columns(table: PcTable) -> dict[str, np.ndarray]:
    cols = dict(table.counters)
    for r, v in table.stalls.items():
        cols[f"stall_{r}"] = v
    for r, v in table.stalls_not_issued.items():
        cols[f"stallni_{r}"] = v
    if "samples" not in cols and table.stalls:
        cols["samples"] = np.sum(list(table.stalls.values()), axis=0)
    return cols


def _positions(region_map: RegionMap, table: PcTable) -> tuple[np.ndarray, np.ndarray]:
    pos = np.searchsorted(region_map.pc, table.pc)
    clipped = np.minimum(pos, max(region_map.pc.size - 1, 0))
    in_map = (pos < region_map.pc.size) & (region_map.pc[clipped] == table.pc)
    return np.where(in_map, clipped, 0), in_map


def check_match(region_map: RegionMap, table: PcTable, pos=None, in_map=None) -> dict[str, Any]:
    """Does the per-PC data belong to the mapped cubin? -> {"ok": bool, "reasons": [...], counts...}"""
    if pos is None:
        pos, in_map = _positions(region_map, table)
    reasons = []
    missing = int((~in_map).sum())
    if missing:
        first = [hex(int(p)) for p in table.pc[~in_map][:5]]
        reasons.append(
            f"{missing} PC(s) not in the map (first: {', '.join(first)}; map code size {region_map.code_size:#x})"
        )
    mismatched = modifiers = 0
    if table.opcode is not None:
        # base opcodes decide (disassemblers of different CUDA versions may spell modifiers differently)
        ours = np.array(region_map.opcode, dtype=object)[pos]
        theirs = np.array([o.upper() for o in table.opcode], dtype=object)
        base = np.vectorize(lambda o: o.split(".", 1)[0], otypes=[object])
        known = in_map & (theirs != "")
        bad = known & (base(ours) != base(theirs)) if theirs.size else known
        mismatched = int(bad.sum())
        modifiers = int((known & ~bad & (ours != theirs)).sum())
        if mismatched:
            k = int(np.flatnonzero(bad)[0])
            reasons.append(
                f"{mismatched} opcode(s) differ (first at pc {int(table.pc[k]):#x}: map {ours[k]}, data {theirs[k]})"
            )
    executed_unreachable = None
    if "inst_executed" in table.counters:
        unreachable = region_map.paths.index("<unreachable>")
        hit = in_map & (region_map.region[pos] == unreachable) & (table.counters["inst_executed"] > 0)
        executed_unreachable = int(hit.sum())
        if executed_unreachable:
            reasons.append(f"{executed_unreachable} PC(s) the map calls unreachable were executed")
    name_match = None
    if table.kernel and region_map.kernel:
        name_match = same_kernel(table.kernel, region_map.kernel)
        if not name_match:
            reasons.append(f"the data is of kernel {table.kernel!r}, the map of {region_map.kernel!r}")
    return {
        "ok": not reasons,
        "reasons": reasons,
        "pcs_not_in_map": missing,
        "opcode_mismatches": mismatched,
        "opcode_modifier_differences": modifiers,
        "executed_unreachable": executed_unreachable,
        "instructions_in_data": int(table.pc.size),
        "instructions_in_map": int(region_map.pc.size),
        "kernel_name_match": name_match,
        "map_cubin_sha256": region_map.cubin_sha256,
    }


def same_kernel(a: str, b: str) -> bool:
    """Do two spellings name one kernel: equal, or equal base names once a mangled symbol
    (``_ZN2ns6kernelIiEEvPf``) or a demangled signature (``void ns::kernel<int>(float*)``) is reduced to
    its name (``kernel``), since tools print either. ``k`` and ``k_v2`` are different kernels."""
    return a == b or _base_name(a) == _base_name(b)


def _base_name(name: str) -> str:
    name = name.strip()
    if name.startswith("_Z"):  # Itanium mangling: [N] <length><identifier>... ; the last one is the name
        nested = name.startswith("_ZN")
        i, last = 3 if nested else 2, name
        while i < len(name) and name[i].isdigit():
            digits = len(name[i:]) - len(name[i:].lstrip("0123456789"))
            length = int(name[i : i + digits])
            last, i = name[i + digits : i + digits + length], i + digits + length
            if not nested:
                break
        return last
    depth = 0
    for k, ch in enumerate(name):  # cut the parameter list: "void ns::k<int>(float*)" -> "void ns::k<int>"
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            name = name[:k]
            break
    while name.endswith(">"):  # and the template arguments
        depth, k = 0, len(name) - 1
        while k >= 0:
            depth += (name[k] == ">") - (name[k] == "<")
            if depth == 0:
                break
            k -= 1
        name = name[:k].rstrip()
    return name.rsplit("::", 1)[-1].split()[-1] if name.split() else name


def _is_sample_column(c: str) -> bool:
    return c in ("samples", "samples_not_issued") or c.startswith(("stall_", "stallni_"))


# reasons a warp reports at the PC after the instruction it is really stalled on
_AFTER_END_REASONS = ("drain", "branch_resolving")


def _move_samples(region_map: RegionMap, on_map: dict[str, np.ndarray]) -> float:
    """Move samples to the PC they belong to (in place); returns the number of samples moved.

    1. PCs that never executed (by the data's execution counts; without counts: PCs the map calls
       unreachable) give all their samples to the nearest earlier live PC.
    2. At the PC right after an unpredicated EXIT/BRA/RET, `drain` and `branch_resolving` samples are
       the previous instruction's (finished warps drain there; a taken branch resolves there); other
       reasons stay, since that PC may be a live branch target or subroutine entry.
    """
    n = region_map.pc.size
    if n == 0:
        return 0.0
    idx = np.arange(n)
    executed = on_map.get("inst_executed")
    if executed is not None and executed.any():
        dead = executed <= 0
    else:
        dead = region_map.region == region_map.paths.index("<unreachable>")
    last_live = np.maximum.accumulate(np.where(~dead, idx, -1))
    target = np.where(dead & (last_live >= 0), last_live, idx)
    samples = on_map.get("samples")
    moved = float(samples[target != idx].sum()) if samples is not None else 0.0
    for c in [c for c in on_map if _is_sample_column(c)]:
        on_map[c] = np.bincount(target, weights=on_map[c], minlength=n)
    after_end = np.zeros(n, bool)
    after_end[1:] = region_map.ends_flow[:-1]
    after_end &= ~dead
    src = np.flatnonzero(after_end)
    for reason in _AFTER_END_REASONS:
        for stall_col, total_col in ((f"stall_{reason}", "samples"), (f"stallni_{reason}", "samples_not_issued")):
            if stall_col not in on_map:
                continue
            amount = on_map[stall_col][src].copy()
            for c in (stall_col, total_col):
                if c in on_map:
                    on_map[c][src] -= amount
                    np.add.at(on_map[c], src - 1, amount)
            if total_col == "samples":
                moved += float(amount.sum())
    return moved


# ================================================================================================
# Trace attachment
# ================================================================================================


def attach_to_trace(trace, result: JoinResult | dict | str, key: str = "regions_hw") -> dict:
    """Store the join in ``trace.meta[key]`` with region paths named by the trace's event names, and
    a per-event summary (``by_event``: event id -> inclusive samples, instructions and stall counts
    of the outermost paths ending in that event) that a Perfetto writer can show as args on the
    region's tracks. `result`: a JoinResult, or the JSON `ikp join --json` wrote (object or path)."""
    if isinstance(result, JoinResult):
        payload = result.renamed({**result.events, **trace.names.events}).to_json()
    else:
        payload = _load_join_json(result)
        for rows in (payload["exclusive"], payload["inclusive"]):
            for row in rows:
                if row.get("stack"):  # the trace's names first, the map's where the trace has none
                    own = row["path"].split("/")
                    row["path"] = "/".join(
                        trace.names.events.get(e, own[k] if k < len(own) else f"event_{e}")
                        for k, e in enumerate(row["stack"])
                    )
    by_event: dict[str, dict] = {}
    for row in payload["inclusive"]:
        if row["stack"][-1] in row["stack"][:-1]:
            continue  # a re-entered region: its outermost occurrence already counts these PCs
        eid = str(row["stack"][-1])
        agg = by_event.setdefault(eid, {"paths": [], "samples": 0.0, "inst_executed": 0.0, "stalls": {}})
        agg["paths"].append(row["path"])
        agg["samples"] += row.get("samples", 0.0)
        agg["inst_executed"] += row.get("inst_executed", 0.0)
        for r in payload["stall_reasons"]:
            agg["stalls"][r] = agg["stalls"].get(r, 0.0) + row.get(f"stall_{r}", 0.0)
    total = payload["totals"].get("samples", 0.0)
    for agg in by_event.values():
        agg["samples_share"] = _ratio(agg["samples"], total)
    payload["by_event"] = by_event
    trace.meta[key] = payload
    return payload


def _load_join_json(obj: dict | str) -> dict:
    import json

    source = "join json"
    if isinstance(obj, str):
        source = obj
        with open(obj) as f:
            obj = json.load(f)
    if not isinstance(obj, dict) or obj.get("format") != JOIN_FORMAT:
        raise DecodeError(f"not a per-region join result (format must be {JOIN_FORMAT!r})", source=source)
    return obj
