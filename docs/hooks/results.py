"""mkdocs hook: tables rendered from the committed result JSON at build time (never copied by hand).

A line ``<!-- ikp:results KIND PATH -->`` in a page becomes the table of the JSON file PATH (relative
to the repository root), rendered by the renderer registered for KIND. The page's prose says when,
on what and with which command the file was measured; the numbers come only from the file. A missing
file, an unknown kind or a file of another shape fails the build, naming the page line's PATH.
tests/docs/test_docs.py::test_results_render guards every directive of the site.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(r"^<!-- ikp:results ([\w-]+) (\S+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:
    where = posixpath.dirname(page.file.src_uri) if page is not None else ""
    return DIRECTIVE.sub(lambda m: render(m.group(1), m.group(2), where), markdown)


def render(kind: str, path: str, page_dir: str | None = None) -> str:
    """The table of `path` by the renderer of `kind`, then a source line; files under docs/ are linked
    (relative to `page_dir`, the page's folder inside docs/) so the site serves the raw JSON too."""
    if kind not in RENDERERS:
        raise ValueError(f"ikp:results {kind} {path}: unknown kind (known: {', '.join(sorted(RENDERERS))})")
    try:
        data = json.loads((ROOT / path).read_text())
        table = RENDERERS[kind](data)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"ikp:results {kind} {path}: {type(e).__name__}: {e}") from e
    device = data.get("device") if isinstance(data, dict) else None
    shown = f"`{path}`"
    if page_dir is not None and path.startswith("docs/"):
        shown = f"[{shown}]({posixpath.relpath(path.removeprefix('docs/'), page_dir or '.')})"
    source = f"Source: {shown}" + (f" ({device})" if device else "")
    return table + "\n\n" + source + "\n"


def markdown_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(fraction: float | None, digits: int = 2) -> str:
    if fraction is None or (isinstance(fraction, float) and math.isnan(fraction)):
        return ""
    return f"{100 * fraction:+.{digits}f}%"


def num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def opcodes(by_opcode: dict | None) -> str:
    if not by_opcode:
        return ""
    return ", ".join(f"{op} {n:g}" for op, n in sorted(by_opcode.items(), key=lambda kv: (-kv[1], kv[0])) if n)


def overhead(data: dict) -> str:
    """benchmarks/device_overhead.py (also gpu/device_suite.py): ns per event per warp, per mode."""
    rows = {r["variant"]: r for r in data["throughput"]}
    latency = {r["variant"]: r for r in data.get("latency_single_warp", [])}
    cursor = rows["cursor"]["ns_per_event_per_warp"]
    iket = rows.get("iket", {}).get("ns_per_event_per_warp")
    header = ["variant", "ns / event / warp", "x cursor"] + (["x IKET"] if iket else [])
    header += ["SASS / event", "spread of rounds (us)", "1 warp: ns / event"]
    out = []
    for name, r in rows.items():
        if name == "uninstrumented":
            continue
        ns = r["ns_per_event_per_warp"]
        row = [f"`{name}`", num(ns), f"{ns / cursor:.2f}x"] + ([f"{ns / iket:.2f}x"] if iket else [])
        lat = latency.get(name, {}).get("ns_per_event_per_warp")
        row += [num(r.get("sass_per_event")), num(1000 * r["spread_ms"], 2), num(lat)]
        out.append(row)
    base = rows["uninstrumented"]
    caption = (f"Uninstrumented kernel: {1000 * base['ms']:.1f} us; {data['config']['blocks']} blocks x "
               f"{data['config']['warps']} warps, {data['config']['regions']} regions per warp.")
    return caption + "\n\n" + markdown_table(header, out, right=set(range(1, len(header))))


def record_ablation(data: dict) -> str:
    """benchmarks/record_ablation.py: the cursor record with one part taken out at a time."""
    ns = data["ns_per_event_per_warp"]
    iket = ns.get("iket")
    sass = data.get("sass_per_event_by_opcode", {})
    header = ["variant", "ns / event / warp"] + (["x IKET"] if iket else []) + ["SASS per record"]
    out = []
    for name, value in ns.items():
        if name == "uninstrumented":
            continue
        row = [f"`{name}`", num(value)] + ([f"{value / iket:.2f}x" if iket else ""] if iket else [])
        out.append(row + [opcodes(sass.get(name))])
    return markdown_table(header, out, right={1, 2} if iket else {1})


def fa4_levels(data: list) -> str:
    """gpu/examples_suite.py --only fa4: FA4's slowdown per detail level, both masks side by side."""
    masks = list(dict.fromkeys(r["mask"] for r in data))
    details = list(dict.fromkeys(r["detail"] for r in data))
    by = {(r["mask"], r["detail"]): r for r in data}
    header = ["detail"] + [f"{m}: slowdown" for m in masks] + ["spans", "lost", "output bit-identical"]
    out = []
    for d in details:
        cells = [pct(by[(m, d)]["slowdown"]) if (m, d) in by else "" for m in masks]
        first = next(by[(m, d)] for m in masks if (m, d) in by)
        equal = all(by[(m, d)].get("bitwise_equal", False) for m in masks if (m, d) in by)
        out.append([f"`{d}`", *cells, first["spans"], sum(by[(m, d)]["lost"] for m in masks if (m, d) in by),
                    "yes" if equal else "no"])
    noise = [pct(next(r["noise"] for r in data if r["mask"] == m)) for m in masks]
    out.append(["FA4 vs FA4 (noise)", *noise, "", "", ""])
    base = ", ".join(f"{m} {next(r['fa4_ms'] for r in data if r['mask'] == m):.4f} ms" for m in masks)
    return f"FA4 alone: {base}.\n\n" + markdown_table(header, out, right=set(range(1, len(masks) + 3)))


def fa4_ablation(data: list) -> str:
    """gpu/examples_suite.py --fa4-ablation: one variant per row, both masks side by side."""
    masks = list(dict.fromkeys(r["note"] for r in data))
    variants = list(dict.fromkeys(r["variant"] for r in data))
    by = {(r["note"], r["variant"]): r for r in data}
    header = ["variant"] + [f"{m}: slowdown" for m in masks]
    out = [[f"`{v.removeprefix('ablation ')}`"] + [pct(by[(m, v)]["slowdown"]) if (m, v) in by else "" for m in masks]
           for v in variants]
    return markdown_table(header, out, right=set(range(1, len(masks) + 1)))


def capture_cost(data: dict) -> str:
    """gpu/capture_suite.py, stage cost: FA4 with a capture window closed, ahead, open, and no ring."""
    cost = data["cost"]
    equal = cost.get("outputs_equal_fa4", {})
    header = ["variant", "median ms", "vs FA4", "p10 ms", "p90 ms", "launches", "output equal to FA4's"]
    out = []
    for name, r in cost["rows"].items():
        same = "" if name.startswith("fa4") else ("yes" if equal.get(name) else "no")
        out.append([f"`{name}`", f"{r['median_ms']:.4f}", pct(r["vs_fa4"]), f"{r['p10_ms']:.4f}",
                    f"{r['p90_ms']:.4f}", r["n"], same])
    return f"FA4 {cost['shape']}.\n\n" + markdown_table(header, out, right={1, 2, 3, 4, 5})


def capture_stages(data: dict) -> str:
    """gpu/capture_suite.py: whether each stage passed, what it checked, and how long it took."""
    out = []
    for stage, r in data.items():
        if not isinstance(r, dict):
            continue
        if "skipped" in r:
            out.append([stage, "skipped", "", ""])
            continue
        oks = [r.get("ok")] + [v.get("ok") for v in r.values() if isinstance(v, dict)]
        result = "FAILED" if False in oks else ("passed" if True in oks else "ran")
        out.append([stage, result, STAGE_FACTS.get(stage, lambda r: "")(r), num(r.get("stage_s"))])
    return markdown_table(["stage", "result", "what it measured", "seconds"], out, right={3})


def _graph_facts(r: dict) -> str:
    parts = []
    for name, g in r.items():
        if isinstance(g, dict) and "slot_launches" in g:
            lost = sum(g.get("records_lost", []))
            parts.append(f"{name}: launches {g['slot_launches'][0]}..{g['slot_launches'][-1]} recorded, "
                         f"{lost} records lost")
    return "; ".join(parts)


STAGE_FACTS = {
    "graph": _graph_facts,
    "serving": lambda r: (f"{r['steps']} steps, launches {r['slot_launches'][0]}..{r['slot_launches'][-1]} "
                          f"recorded, {r['lost_launches']} launches lost"),
    "compile": lambda r: (f"graph breaks: FA4 called directly {r['graph_breaks_fa4_direct']}, through a custom op "
                          f"{r['graph_breaks_custom_op']}; launches {r['slot_launches']} recorded"),
    "cupti": lambda r: (f"kernel time with CUPTI PC sampling x{r['kernel_extent_ns']['ratio']:.2f}; "
                        f"join conserved: {r['join']['conserved']}"),
    "ncu": lambda r: (f"kernel time under ncu SourceCounters x{r['kernel_extent_ns']['ratio']:.2f}; "
                      f"join conserved: {r['join']['conserved']}"),
    "cost": lambda r: f"FA4 {r['shape']}: {len(r['rows'])} variants",
    "window": lambda r: "the device's window rule against the host's; ring full; a closed window writes nothing",
}


def window_ablation(data: dict) -> str:
    """A closed window's cost, one variant per row, one column per round of the same run."""
    rounds = data["results"]
    variants = list(dict.fromkeys(v for r in rounds.values() for v in r))
    header = ["variant"] + list(rounds)
    out = [[f"`{v}`"] + [pct(rounds[r].get(v)) for r in rounds] for v in variants]
    return markdown_table(header, out, right=set(range(1, len(rounds) + 1)))


def pipelines_cost(data: dict) -> str:
    """examples/pipelines/gpu_proof.py: trace_pipelines' cost per level, on FA4 and quack."""
    kernels = {"FA4 non-causal": "fa4_noncausal_cost", "FA4 causal": "fa4_causal_cost", "quack GEMM": "quack_cost"}
    # each kernel's first row is the untouched kernel (the base) and its "<kernel>_noise" row the base again
    kernels = {k: data[v] for k, v in kernels.items() if v in data}
    base = {k: next(iter(rows.values()))["ms"] for k, rows in kernels.items()}
    rows_of = {k: {("noise" if v.endswith("_noise") else v): r for v, r in list(rows.items())[1:]}
               for k, rows in kernels.items()}
    variants = list(dict.fromkeys(v for rows in rows_of.values() for v in rows))
    header = ["variant"] + [f"{k} ({base[k]:.4f} ms)" for k in kernels]
    out = []
    for v in variants:
        label = "untouched vs itself (noise)" if v == "noise" else f"`{v}`"
        out.append([label] + [pct(rows[v]["vs_base"]) if v in rows else "" for rows in rows_of.values()])
    return markdown_table(header, out, right=set(range(1, len(kernels) + 1)))


def trace_cost(data: dict) -> str:
    """gpu/pipelines_cost.py, one or more runs of it (same card, same day): each kernel's variants against
    its untouched kernel (median of alternating launches); '!' marks an output that differs."""
    columns = {}
    for run in data["runs"]:
        for kernel, r in run["results"].items():
            if isinstance(r, dict) and "cost" in r:
                columns[kernel] = r["cost"]
    variants = list(dict.fromkeys(v for rows in columns.values() for v in rows if v != "base"))
    header = ["variant"] + [f"{k} ({rows['base']['ms']:.4f} ms)" for k, rows in columns.items()]
    out = []
    for v in variants:
        label = "untouched vs itself (noise)" if v == "noise" else f"`{v}`"
        cells = []
        for rows in columns.values():
            row = rows.get(v)
            cells.append("" if row is None else pct(row["cost"]) + ("!" if row.get("identical") is False else ""))
        out.append([label] + cells)
    return markdown_table(header, out, right=set(range(1, len(columns) + 1)))


def pool_cost(data: dict) -> str:
    """gpu/pool_suite.py: each kernel traced into a pool, against its untouched kernel, and the checks."""
    r = data["results"]
    rows = []
    for kernel in ("fa4_noncausal", "fa4_causal", "quack"):
        if kernel in r and "cost" in r[kernel]:
            c = r[kernel]["cost"]
            rows.append([kernel] + [pct(c[v]["cost"]) if v in c else "" for v in POOL_ROWS])
    checks = [c for stage in r.get("checks", {}).values() for c in stage.values()]
    passed = sum(1 for c in checks if c.get("ok"))
    table = markdown_table(["kernel"] + list(POOL_ROWS), rows, right=set(range(1, len(POOL_ROWS) + 1)))
    return f"{table}\n\nChecks passed: {passed} of {len(checks)}."


POOL_ROWS = ("noise", "recorded", "closed", "ahead", "default")

def bigcap(data: dict) -> str:
    """benchmarks/bigcap_bench.py --json-out, one or more runs side by side: {"runs": [run, ...]}, each with its
    label, date, machine, command and sizes."""
    header = ["code measured", "records", "`ikp decode X -o X.pftrace` / decoder", "with -q / decoder",
              "CPU s: decoder, -o, -q", "warpscope loop / `--loss-json`", "peak RSS / buffer: decode (-q)",
              "-o .pftrace", "report"]
    out = []
    for run in data["runs"]:
        for s in run["sizes"]:
            rss, cpu = s["rss_over_raw"], s.get("cpu_s") or {}
            cpus = ", ".join(f"{cpu[k]:.2f}" for k in ("decoder", "pftrace", "pftrace_quiet") if k in cpu)
            out.append([run["label"], f"{s['records']:,}", f"{s['pftrace_over_decoder']:.2f}x",
                        f"{s['pftrace_quiet_over_decoder']:.2f}x", cpus,
                        "" if s["warpscope_over_loss_json"] is None else f"{s['warpscope_over_loss_json']:.1f}x",
                        f"{rss['decode_q']:.2f}", f"{rss['pftrace']:.2f}", f"{rss['report']:.2f}"])
    runs = "; ".join(f"{r['label']}: {r['date']}, {r['machine']}, `{r['command']}`" for r in data["runs"])
    return markdown_table(header, out, right=set(range(1, 9))) + f"\n\nRuns: {runs}."


RENDERERS = {
    "overhead": overhead,
    "record-ablation": record_ablation,
    "fa4-levels": fa4_levels,
    "fa4-ablation": fa4_ablation,
    "capture-cost": capture_cost,
    "capture-stages": capture_stages,
    "window-ablation": window_ablation,
    "pipelines-cost": pipelines_cost,
    "trace-cost": trace_cost,
    "pool-cost": pool_cost,
    "bigcap": bigcap,
}
