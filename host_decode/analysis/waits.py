"""Waits statistics over matched pipeline waits (host_decode.analysis.pipelines): who waited on whom,
for how long, and which chain of waits and work bounded each block.

Statistics (waits_summary): a wait *blocked* when it lasted longer than the timer step (derived from
the data: the gcd of the recorded times, if between 2 and 4096 ns; else wire.TIMER_STEP_NS) or than a
wait that cannot block takes to record (the median of >= 4 first acquires), else it *passed through*.
Uses (level "signals"): releases / commits of the role, one per use of a stage even when a successful
try_wait skipped the wait (which then left no record). Per channel x op x role (role: see Roles):
count, blocked, passed, total / p50 / p99 / max ns, share of the role's time blocked (total wait ns
over the sum of the role's lanes' first-to-last record spans), and whom the blocked waits waited on
(signalling role -> count).

Critical path of a block: start at the block's lane whose last record is latest, at that time t. On
lane L at t, take the latest wait of L that blocked, ended at or before t, and was not used before;
the time from its end to t is L's *work*. If that wait was matched (or inferred) to a signal on
another lane M at time s, the time from min(s, wait end) to the wait end is *waiting on* M through
the channel, and the walk continues on M at min(s, wait end). An unmatched or self-released blocked
wait is waiting on nobody known: the walk continues on L at the wait's start. Without a further
blocked wait, the time from L's first record to t is L's work and the walk ends. The segments tile
the path from its start to the block's end exactly; each wait is used at most once, so the walk ends.
Summary over blocks: each (work, role) and (waiter, channel, signaller) segment's share of the summed
path time; blocks with an overflowed lane are left out (their tail is missing) unless every block has one.
Guarded by test_waits.py::test_critical_path_by_hand.

Also in the summary: the coverage audit of the traced compile (``coverage``: analysis.pipeline_coverage), every
pipeline's traced ops and what the others leave unmatched (``pipeline_ops``; a partly traced pipeline is
analysed as far as its ops go: tests/unit/host_decode/analysis/test_pipeline_coverage.py), and the async-unit
latencies (``async_units``: analysis.async_units.async_unit_stats).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from host_decode.analysis.async_units import analyze_async_units, async_unit_stats
from host_decode.analysis.pipeline_coverage import coverage_summary, pipeline_ops
from host_decode.analysis.pipeline_match import CHECKS, STATUSES, WAIT_OPS
from host_decode.analysis.pipeline_meta import has_pipelines
from host_decode.analysis.pipelines import PipelineAnalysis, analyze_pipelines
from host_decode.core.model import Trace

SELF = STATUSES.index("self")

WARPS_PER_WARP_GROUP = 4


@dataclasses.dataclass(frozen=True)
class Roles:
    """Role of every group (lane within a block) and the roles' names. Lanes that are warps (sidecar
    ``pipeline_lanes: "warp"``, the device side's pipeline lanes) are grouped into warp groups ``wg<i>``
    (4 warps each); otherwise a role is a group, named by the capture's group names."""

    of_group: np.ndarray  # role index per group
    names: list
    by: str  # "warp_group" | "group"

    @classmethod
    def of(cls, trace: Trace, by: str = "auto") -> "Roles":
        if by not in ("auto", "group", "warp_group"):
            raise ValueError(f"roles by {by!r}: expected auto, group or warp_group")
        groups = np.arange(trace.num_groups)
        warps = (trace.meta or {}).get("pipeline_lanes") == "warp"
        if by == "warp_group" or (by == "auto" and warps):
            of = groups // WARPS_PER_WARP_GROUP
            return cls(of, [f"wg{i}" for i in range(int(of.max()) + 1)], "warp_group")
        return cls(groups, [trace.names.group(g) for g in groups.tolist()], "group")

    def of_lane(self, lane: np.ndarray, num_groups: int) -> np.ndarray:
        return self.of_group[np.asarray(lane) % num_groups]


def waits_summary(
    trace: Trace,
    analysis: PipelineAnalysis | None = None,
    max_blocks: int = 4096,
    roles: str = "auto",
    cluster=None,
) -> dict:
    """Everything `ikp waits` prints, JSON-ready: per channel x op x role rows, per role, critical path,
    status counts. roles: "auto" (warp groups when the lanes are warps, else groups), "group", "warp_group".
    cluster: for pipelines whose metadata has no cluster (analysis.pipelines.channels_of)."""
    pa = analysis or analyze_pipelines(trace, cluster)
    rl = Roles.of(trace, roles)
    w = pa.waits
    ng = trace.num_groups
    dur = w["end_ns"] - w["start_ns"]
    blocked = pa.blocked()
    role = rl.of_lane(w["lane"], ng)
    role_time, role_lanes = _role_time(trace, rl)
    # whom a blocked wait waited on: the signalling lane's role, else -1 - status (self, unmatched reason)
    on_code = np.where(
        (w["src_lane"] >= 0) & (w["status"] != SELF),
        rl.of_lane(np.maximum(w["src_lane"], 0), ng),
        -1 - w["status"].astype(np.int64),
    )
    late = (w["src_lane"] >= 0) & (w["src_ns"] > w["end_ns"] + pa.timer_step_ns)
    nr = len(rl.names) + 1
    key = (w["channel"].astype(np.int64) * len(WAIT_OPS) + w["op"]) * nr + role
    order = np.argsort(key, kind="stable")
    key_s = key[order]
    uses: dict[int, int] = {}
    for (c, op, g), n in pa.uses.items():
        k = (c * len(WAIT_OPS) + op) * nr + int(rl.of_group[g])
        uses[k] = uses.get(k, 0) + n
    rows = []
    for k in sorted(set(np.unique(key_s).tolist()) | set(uses)):
        m = order[np.searchsorted(key_s, k) : np.searchsorted(key_s, k, side="right")]
        c, op, r = k // nr // len(WAIT_OPS), k // nr % len(WAIT_OPS), k % nr
        d, bm = dur[m], blocked[m]
        codes, counts = np.unique(on_code[m][bm], return_counts=True)
        on = {
            ("itself" if x == -1 - SELF else rl.names[x] if x >= 0 else STATUSES[-1 - x]): int(n)
            for x, n in zip(codes.tolist(), counts.tolist())
        }
        st_counts = np.bincount(w["status"][m], minlength=len(STATUSES))
        u = uses.get(k)
        rows.append(
            {
                "channel": pa.channels[c].name,
                "op": WAIT_OPS[op],
                "role": rl.names[r],
                "lanes": int(np.unique(w["lane"][m]).size),
                "waits": int(m.size),
                "blocked": int(bm.sum()),
                "passed": int((~bm).sum()),
                "uses": u,
                "not_recorded": None if u is None else max(u - int(m.size), 0),
                "total_ns": int(d.sum()),
                "p50_ns": float(np.percentile(d, 50)) if m.size else None,
                "p99_ns": float(np.percentile(d, 99)) if m.size else None,
                "max_ns": int(d.max()) if m.size else None,
                "share_of_role_time": float(d.sum() / role_time[r]) if role_time.get(r) else None,
                "waited_on": dict(sorted(on.items(), key=lambda kv: -kv[1])),
                "status": {STATUSES[i]: int(n) for i, n in enumerate(st_counts) if n},
                "late_signals": int(late[m].sum()),
            }
        )
    roles_out = []
    for r in sorted(role_time):
        m = role == r
        roles_out.append(
            {
                "role": rl.names[r],
                "lanes": role_lanes[r],
                "time_ns": int(role_time[r]),
                "wait_ns": int(dur[m].sum()),
                "blocked_ns": int(dur[m & blocked].sum()),
                "share_blocked": float(dur[m & blocked].sum() / role_time[r]) if role_time[r] else None,
            }
        )
    return {
        "kernel": (trace.meta or {}).get("kernel"),
        "level": (trace.meta or {}).get("pipeline_level"),
        "roles_by": rl.by,
        "timer_step_ns": pa.timer_step_ns,
        "pass_through_ns": pa.pass_through_ns,
        "blocked_above_ns": pa.blocked_above_ns,
        "timer_step_source": pa.timer_step_source,
        "channels": [
            {
                "name": ch.name,
                "kind": ch.kind,
                "num_stages": ch.num_stages,
                "ops": sorted(ch.ids),
                "cluster_size": ch.cluster_size,
                "class": ch.cls,
                "site": ch.site,
            }
            for c, ch in enumerate(pa.channels)
            if ch.kind == "pipeline" or (w["channel"] == c).any()
        ],
        "waits": int(w.size),
        "status": pa.status_counts(),
        "unmatched": pa.unmatched(),
        "flows": int(pa.flows().size),
        # matched signals recorded more than a timer step after the end of the wait they released: a
        # record placed after its arrive, or a dependency the metadata describes wrongly
        "late_signals": int(late.sum()),
        # the lane's own count of waits and the signal times named different phases; the larger won:
        # time ahead = earlier waits of the lane left no record (a try_wait that found the data ready)
        "occurrence_checks": {name: int((w["check"] == i).sum()) for i, name in enumerate(CHECKS) if i},
        "lanes_overflowed": int((trace.lanes["dropped"] > 0).sum()),
        "records_dropped": int(trace.lanes["dropped"].sum()),
        "rows": rows,
        "roles": roles_out,
        "critical_path": critical_path_summary(trace, pa, max_blocks, rl),
        "coverage": coverage_summary(trace.meta or {}),
        "pipeline_ops": pipeline_ops(trace, pa.channels),
        "async_units": async_unit_stats(trace, analyze_async_units(trace, pa)),
    }


def _role_time(trace: Trace, rl: Roles) -> tuple[dict[int, int], dict[int, int]]:
    """Per role: the summed first-to-last record span of its lanes, and how many lanes it has."""
    ln = trace.lanes
    span = np.where(ln["first_ns"] >= 0, ln["last_ns"] - ln["first_ns"], 0)
    role = rl.of_lane(ln["lane"], trace.num_groups)
    time, lanes = {}, {}
    for r in np.unique(role).tolist():
        m = role == r
        time[r], lanes[r] = int(span[m].sum()), int(m.sum())
    return time, lanes


def critical_paths(
    trace: Trace, pa: PipelineAnalysis, max_blocks: int = 4096, overflowed: bool = False
) -> list[dict]:
    """Per block (the first max_blocks that have lanes; without a lane that overflowed unless `overflowed`:
    such a block's tail is missing, so its last lane and last waits are not known): the path's segments,
    see the module docstring. A segment: (what, lane, start_ns, end_ns, channel, signal_lane, status);
    what = "work" | "wait"; channel, signal_lane and status (index into STATUSES) are -1 where they do
    not apply."""
    w = pa.waits
    blk = w[pa.blocked()]
    blk = blk[np.lexsort((blk["end_ns"], blk["lane"]))]
    lane_lo = np.searchsorted(blk["lane"], np.arange(trace.num_lanes + 1))
    ln = trace.lanes[trace.lanes["first_ns"] >= 0]
    first = dict(zip(ln["lane"].tolist(), ln["first_ns"].tolist()))
    out = []
    blocks = np.unique(ln["block"])
    if not overflowed:
        blocks = np.setdiff1d(blocks, ln["block"][ln["dropped"] > 0])
    blocks = blocks[:max_blocks]
    by_block = np.searchsorted(ln["block"], blocks), np.searchsorted(ln["block"], blocks, side="right")
    for b, lo, hi in zip(blocks.tolist(), *by_block):
        bl = ln[lo:hi]
        i = int(np.argmax(bl["last_ns"]))
        lane, t = int(bl["lane"][i]), int(bl["last_ns"][i])
        end = t
        used = {}  # lane -> exclusive upper index of its waits still usable
        segs = []
        while True:
            a, z = lane_lo[lane], lane_lo[lane + 1]
            ends = blk["end_ns"][a:z]
            j = min(int(np.searchsorted(ends, t, side="right")), used.get(lane, z - a)) - 1
            if j < 0:
                segs.append(("work", lane, first[lane], t, -1, -1, -1))
                break
            used[lane] = j
            r = blk[a + j]
            segs.append(("work", lane, int(r["end_ns"]), t, -1, -1, -1))
            src = int(r["src_lane"])
            if src >= 0 and src != lane and src in first:
                s = min(int(r["src_ns"]), int(r["end_ns"]))
                s = max(s, first[src])
                segs.append(("wait", lane, s, int(r["end_ns"]), int(r["channel"]), src, int(r["status"])))
                lane, t = src, s
            else:
                segs.append(
                    ("wait", lane, int(r["start_ns"]), int(r["end_ns"]), int(r["channel"]), -1, int(r["status"]))
                )
                t = int(r["start_ns"])
        segs = [s for s in reversed(segs) if s[3] > s[2]]
        out.append({"block": b, "start_ns": segs[0][2] if segs else end, "end_ns": end, "segments": segs})
    return out


def critical_path_summary(
    trace: Trace, pa: PipelineAnalysis, max_blocks: int = 4096, roles: Roles | None = None
) -> dict:
    overflowed_blocks = int(np.unique(trace.lanes["block"][trace.lanes["dropped"] > 0]).size)
    paths = critical_paths(trace, pa, max_blocks)
    partial = not paths and overflowed_blocks > 0  # every block overflowed: walk what was recorded
    if partial:
        paths = critical_paths(trace, pa, max_blocks, overflowed=True)
    rl = roles or Roles.of(trace)
    ng = trace.num_groups

    def role(lane: int) -> str:
        return rl.names[int(rl.of_group[lane % ng])]

    shares: dict[tuple, int] = {}
    total = 0
    for p in paths:
        total += p["end_ns"] - p["start_ns"]
        for what, lane, a, z, c, src, status in p["segments"]:
            if what == "work":
                key = ("work", role(lane), None, None)
            else:  # whom: the signalling role; "itself" (it arrived last, or signalled itself); "first use"
                # or the unmatched reason
                itself = STATUSES[status] in ("self", "matched", "inferred")  # src -1 with a match: its own lane
                whom = role(src) if src >= 0 else "itself" if itself else STATUSES[status].replace("_", " ")
                key = ("wait", role(lane), pa.channels[c].name, whom)
            shares[key] = shares.get(key, 0) + (z - a)
    rows = [
        {"what": k[0], "role": k[1], "channel": k[2], "on": k[3], "ns": v, "share": v / total if total else None}
        for k, v in sorted(shares.items(), key=lambda kv: -kv[1])
    ]
    return {
        "blocks": len(paths),
        "blocks_total": int(np.unique(trace.lanes["block"]).size),
        "blocks_overflowed": overflowed_blocks,  # left out: a lane of theirs lost its tail
        "partial": partial,  # every block overflowed: the paths end at the last record, not the block's end
        "mean_path_ns": total / len(paths) if paths else None,
        "segments": rows,
    }


def view_data(trace: Trace) -> dict | None:
    """The report's "waits" view data (reports/assets/waits.js draws it); None without pipeline metadata;
    {"error": why} when the metadata cannot be read (the rest of the report is still worth having)."""
    if not has_pipelines(trace):
        return None
    try:
        pa = analyze_pipelines(trace)
    except ValueError as e:
        return {"error": str(e)}
    summary = waits_summary(trace, pa)
    counters = [
        {"name": c.name, "block": c.block, "t": (c.times_ns - trace.start_ns).tolist(), "v": c.values.tolist()}
        for c in pa.counters[:8]
    ]
    summary["counters_shown"] = counters
    summary["counters_total"] = len(pa.counters)
    return summary
