"""What a pipeline capture's tracing covered, read from its sidecar: the coverage audit of the traced compile
(``coverage``, ``barrier_sites``, ``hooks_replaced``; docs/pipelines.md, "Sidecar keys") in words, and, per
pipeline, the ops traced, their records, and each op left out with the sidecar's reason (``untraced`` of a
``pipelines`` entry, ``pipelines_untraced``).

* audit_lines: one line per kernel, the text ikp_cute.pipelines.audit.summary writes on the device side
  ("<kernel>: 42 of 42 barrier sites traced (13 not recorded by the level/options)"); the host reads the
  sidecar itself (host_decode never imports ikp_cute);
* pipeline_ops: every pipeline of the sidecar, traced or not, analysed as far as its ops go: the records of an
  op whose counterpart was not traced (commits nothing waits on, waits with nothing to match them to) are
  counted under "<counterpart>s not traced: <reason>", never dropped and never an error.

Invariants, and the tests that guard them (tests/unit/host_decode/analysis/test_pipeline_coverage.py): the
audit lines equal the device side's for the same sidecar (::test_audit_lines_are_the_device_sides); partial
and untraced pipelines are reported with their reasons and counts (::test_partial_pipelines_are_counted);
a malformed coverage entry is a ValueError naming it (::test_malformed_coverage_is_refused_by_name).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from host_decode.analysis.pipeline_match import OP, event_lookup
from host_decode.analysis.pipeline_meta import PIPELINE_OPS, Channel
from host_decode.core.model import Trace, is_json_int

COVERAGE_COUNTS = ("sites", "traced", "not_recorded", "untraced", "removed")
# what an op's records are matched with: waits with commits (else acquires), acquires with releases (else
# waits), commits with the waits they release, releases with the acquires they free
COUNTERPARTS = {"wait": ("commit", "acquire"), "acquire": ("release", "wait"), "commit": ("wait",),
                "release": ("acquire",)}
LEVEL_LEAVES_OUT = {"waits": ("commit", "release")}  # the device side's levels (docs/pipelines.md)


def audit_lines(meta: dict) -> list[str]:
    """One line per kernel of the sidecar's ``coverage``; [] without it. ValueError naming a malformed entry."""
    coverage = meta.get("coverage") or {}
    if not isinstance(coverage, dict):
        raise ValueError(f"sidecar 'coverage' must be an object {{kernel: counts}}, got {coverage!r:.80}")
    lines = []
    for kernel, c in coverage.items():
        bad = [k for k in COVERAGE_COUNTS if not (isinstance(c, dict) and is_json_int(c.get(k)))]
        if bad:
            raise ValueError(f"sidecar coverage[{kernel!r}]: {bad} must be integers, got {c!r:.120}")
        unattributed = c.get("unattributed") or {}
        recordable = c["traced"] + c["untraced"]
        extra = [f"{c['not_recorded']} not recorded by the level/options"] if c["not_recorded"] else []
        extra += [f"{c['untraced']} untraced"] if c["untraced"] else []
        extra += [f"{c['removed']} removed by the compiler"] if c["removed"] else []
        extra += [f"{sum(unattributed.values())} PTX instructions with no site"] if unattributed else []
        extra += [] if c.get("ptx_checked") else ["final PTX not read"]
        tail = f" ({'; '.join(extra)})" if extra else ""
        lines.append(f"{kernel}: {c['traced']} of {recordable} barrier sites traced{tail}")
    return lines


def coverage_summary(meta: dict) -> dict | None:
    """The audit for `ikp waits`: the sidecar's ``coverage`` as written, its lines, the reasons of the sites
    present in the final PTX and not traced ({reason: sites}), hooked attributes a kernel replaced; None
    when the sidecar carries no audit (traced with audit=False, or by a tracer without one)."""
    if not meta.get("coverage"):
        return None
    reasons: dict[str, int] = {}
    for site in meta.get("barrier_sites") or []:
        if isinstance(site, dict) and not site.get("traced") and site.get("ptx") != 0:
            why = str(site.get("reason") or "no reason given")
            reasons[why] = reasons.get(why, 0) + 1
    return {"kernels": meta["coverage"], "lines": audit_lines(meta),
            "not_traced": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
            "hooks_replaced": list(meta.get("hooks_replaced") or [])}


def untraced_reason(meta: dict, name: str, op: str) -> str:
    """Why `op` of pipeline `name` was not traced: the sidecar's reason, else what its level leaves out."""
    for entry in list(meta.get("pipelines") or []) + list(meta.get("pipelines_untraced") or []):
        if isinstance(entry, dict) and entry.get("name") == name:
            why = (entry.get("untraced") or {}).get(op)
            if why:
                return str(why)
    level = meta.get("pipeline_level")
    if op in LEVEL_LEAVES_OUT.get(level, ()):
        return f"level {level} does not record {op}"
    return "not in the sidecar (no reason given)"


def pipeline_ops(trace: Trace, channels: list[Channel]) -> list[dict]:
    """Per pipeline of the sidecar (traced ones first, then ``pipelines_untraced``): name, class, site, the ops
    traced, records per traced op, the ops not traced with their reasons (``missing``), and the records that
    have nothing to be matched with (``unmatched``: {op: {"records", "reason"}})."""
    meta = trace.meta or {}
    pipes = [(c, ch) for c, ch in enumerate(channels) if ch.kind == "pipeline"]
    ch_of, op_of, _ = event_lookup(channels)
    counts = np.zeros((len(channels), len(OP)), np.int64)
    for table in (trace.spans, trace.instants):
        c, op = ch_of[table["event"]], op_of[table["event"]]
        keep = c >= 0
        np.add.at(counts, (c[keep], op[keep]), 1)
    out = []
    for c, ch in pipes:
        missing = {op: untraced_reason(meta, ch.name, op) for op in PIPELINE_OPS if op not in ch.ids}
        records = {op: int(counts[c, OP[op]]) for op in PIPELINE_OPS if op in ch.ids}
        unmatched = {}
        for op, n in records.items():
            if n and not any(p in ch.ids for p in COUNTERPARTS[op]):
                gone = COUNTERPARTS[op][0]
                unmatched[op] = {"records": n, "reason": f"{gone}s not traced: {missing[gone]}"}
        out.append({"name": ch.name, "class": ch.cls, "site": ch.site, "traced": sorted(ch.ids),
                    "records": records, "missing": missing, "unmatched": unmatched})
    untraced = meta.get("pipelines_untraced") or []
    if not isinstance(untraced, list):
        raise ValueError(f"sidecar 'pipelines_untraced' must be a list, got {type(untraced).__name__}")
    for i, entry in enumerate(untraced):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"sidecar pipelines_untraced[{i}]: want an object with a 'name' string, got "
                             f"{entry!r:.120}")
        reasons: Any = entry.get("untraced") or {}
        out.append({"name": entry["name"], "class": str(entry.get("class", "")), "site": str(entry.get("site", "")),
                    "traced": [], "records": {},
                    "missing": {op: str(reasons.get(op) or untraced_reason(meta, entry["name"], op))
                                for op in PIPELINE_OPS if op in reasons or not reasons},
                    "unmatched": {}})
    return out
