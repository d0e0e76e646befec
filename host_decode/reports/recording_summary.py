"""What a recording folder says first (summary.txt, index.html, summary.json): per compiled kernel, in plain
words, what bounds it (the top items of the critical path of its recorded launches, with their shares:
host_decode.analysis.waits), what was recorded out of what was launched, and the exact commands to run
next; then what was launched but not traced and why, the pool's accounting, the caches set aside.

A compiled kernel is one pool kernel id, and the pool gives one id per traced code: two compiles of one
kernel name to different code (FA4's causal and non-causal forward) are two kernels, labelled apart ("#1
(is_causal=False)", ikp_cute/record/builds.py), each with its own launch count, selection and captures;
compiles to the same code share the id and one entry (its ``builds``), their launches counted together.
Across processes (ranks), the k-th compile of a name is one kernel: its counts are summed.

Critical path over several launches of a kernel: each launch's segments (`ikp waits`: "wg1 works",
"wg1 waits on k for wg0") summed by kind over the launches, shares of the summed path time.

Accounting, per kernel id, from the pool's summary (host_decode.load.pool.read_pool): out of the launches the
device counted, the selection selects a set of launch indices (host_decode.load.launches, the device's
rule); the launches recorded must be that set, less launches whose every record the pool could not hold
(counted in its lost records). Anything else is a CHECK line. The launches the device counted are compared
with the launches the recorder saw from Python: launches Python does not see (CUDA graph replays) count on
the device only, and the summary says so.

Guarded by tests/unit/host_decode/reports/test_record_folder.py.
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path

from host_decode.core.jsonable import dumps
from host_decode.load.launches import parse_selection
from host_decode.load.recording import format_size

TOP_SEGMENTS = 5


def pool_accounting(pool: dict | None) -> dict:
    """The pool's summary (host_decode.load.pool.read_pool's) in the keys this report uses; its per-kernel rows
    by kernel id."""
    pool = pool or {}
    return {"bytes": pool.get("pool_bytes"), "used": pool.get("bytes_used"), "needed": pool.get("bytes_needed"),
            "exhausted": bool(pool.get("exhausted")), "records": pool.get("records"),
            "lost_records": pool.get("lost_records") or 0, "captures": pool.get("captures"),
            "loss": {k: v for k, v in (pool.get("loss") or {}).items() if v.get("units") or v.get("records")},
            "kernels": {int(r["id"]): r for r in pool.get("kernels") or []}}


def device_accounting(entry: dict, row: dict | None) -> dict:
    """One process's share of a kernel id's accounting: launches the device counted, recorded, what its
    selection selects out of them, records lost; `problem` when the recorded launches are not the selected
    ones less those the pool lost."""
    if row is None:
        return {}
    seen = int(row.get("launches_seen") or 0)
    recorded = sorted(int(i) for i in row.get("recorded_launches") or [])
    lost = int(row.get("lost_records") or 0)
    out = {"seen": seen, "recorded": recorded, "lost_records": lost, "expected": [], "problem": None}
    if entry.get("selection"):
        expected = parse_selection(entry["selection"]).selected(seen)
        out["expected"] = expected
        extra, missing = sorted(set(recorded) - set(expected)), sorted(set(expected) - set(recorded))
        if extra or (missing and not lost):
            out["problem"] = (f"selection {entry['selection']!r} selects launches {_indices(expected)} of the {seen} "
                              f"the device counted; the pool recorded {_indices(recorded)}"
                              + (f" and lost {lost} records" if lost else ""))
    return out


def _indices(values: list[int]) -> str:
    return "[" + ", ".join(map(str, values[:8])) + (", ...]" if len(values) > 8 else "]") if values else "none"


def segment_text(seg: dict) -> str:
    """As `ikp waits` names a critical-path item: "wg1 works", "wg1 waits on k for wg0"."""
    if seg["what"] == "work":
        return f"{seg['role']} works"
    return f"{seg['role']} waits on {seg['channel']} for {seg['on']}"


def segment_words(seg: dict) -> str:
    """The same item in a sentence: "wg1's own work", "wg1 waiting on k for wg0"."""
    if seg["what"] == "work":
        return f"{seg['role']}'s own work"
    return f"{seg['role']} waiting on {seg['channel']} for {seg['on']}"


def bound_of(waits: list[dict]) -> dict | None:
    """The critical path of several launches' `ikp waits` data, summed (see the module docstring)."""
    totals: dict = {}
    blocks = 0
    path_ns = 0.0
    for w in waits:
        cp = w.get("critical_path") or {}
        for seg in cp.get("segments") or []:
            key = (seg["what"], seg["role"], seg.get("channel"), seg.get("on"))
            totals[key] = totals.get(key, 0) + int(seg["ns"])
        blocks += int(cp.get("blocks") or 0)
        path_ns += float(cp.get("mean_path_ns") or 0) * int(cp.get("blocks") or 0)
    total = sum(totals.values())
    if not total:
        return None
    segments = [{"what": k[0], "role": k[1], "channel": k[2], "on": k[3], "ns": ns, "share": ns / total}
                for k, ns in sorted(totals.items(), key=lambda kv: -kv[1])]
    for s in segments:
        s["text"] = segment_text(s)
    work = sum(s["share"] for s in segments if s["what"] == "work")
    waits_only = [s for s in segments if s["what"] != "work"]
    top = segments[0]
    words = (f"{segment_words(top)} is the largest part of the critical path ({top['share']:.0%}); work "
             f"{work:.0%}, waiting {1 - work:.0%}")
    if waits_only:
        words += f"; the largest wait: {segment_words(waits_only[0])} ({waits_only[0]['share']:.1%})"
    return {"segments": segments[:TOP_SEGMENTS], "work_share": work, "blocks": blocks, "launches": len(waits),
            "mean_path_ns": path_ns / blocks if blocks else None, "words": words}


def commands(display: str, capture: str | None, short: str) -> list[str]:
    q = shlex.quote
    out = [f"ikp view {q(display)}"]
    if capture:
        path = str(Path(display) / capture)
        out += [f"ikp waits {q(path)}", f"ikp report {q(path)} -o {q(short + '.html')}"]
    return out


def build_summary(processes: list, captures: list, incomplete: list, timeline: dict | None, display: str) -> dict:
    """summary.json's data (see the module docstring) from the finished processes and decoded captures."""
    kernels: dict[tuple, dict] = {}
    by_id: dict[tuple, dict] = {}  # (process folder, kernel id) -> entry
    untraced, caches, procs = [], [], []
    for p in processes:
        m = p.manifest
        acc = pool_accounting(m.get("pool"))
        procs.append({"folder": p.folder, "pid": m.get("pid"), "rank": m.get("rank"), "status": m.get("status"),
                      "signal": m.get("signal"), "device": m.get("device"), "argv": m.get("argv") or [],
                      "errors": list(m.get("errors") or []), "pool": acc, "dry_run": m.get("dry_run"),
                      "unclaimed": []})
        mine = set()
        for k in m.get("kernels") or []:
            key = (k["name"], int(k.get("compile") or 1))
            entry = kernels.setdefault(key, dict(k, processes=[], device_seen=0, device_counted=False, recorded=0,
                                                 expected=0, lost_records=0, host_launches=0, captures=[],
                                                 problems=[], retraced=0))
            entry["processes"].append(p.folder)
            entry["dry_run"] = bool(m.get("dry_run"))
            entry["host_launches"] += int(k.get("host_launches") or 0)
            entry["retraced"] += int(k.get("retraced") or 0)
            entry["builds"] = max(int(entry.get("builds") or 1), int(k.get("builds") or 1))  # per process
            if k.get("kernel_id") is None:
                continue
            mine.add(int(k["kernel_id"]))
            by_id[(p.folder, int(k["kernel_id"]))] = entry
            dev = device_accounting(k, acc["kernels"].get(int(k["kernel_id"])))
            if dev:
                entry["device_counted"] = True
                entry["device_seen"] += dev["seen"]
                entry["recorded"] += len(dev["recorded"])
                entry["expected"] += len(dev["expected"])
                entry["lost_records"] += dev["lost_records"]
                if dev["problem"]:
                    entry["problems"].append(dev["problem"] + (f" ({p.folder})" if p.folder else ""))
        retraced = set(m.get("retraced_ids") or [])
        for kid, row in acc["kernels"].items():
            if kid not in mine and kid not in retraced and int(row.get("launches_seen") or 0):
                procs[-1]["unclaimed"].append(row)
        untraced += [dict(u, process=p.folder) for u in m.get("untraced") or []]
        caches += [c for c in m.get("caches") or [] if c not in caches]
    for c in captures:
        entry = by_id.get((c.process, c.kernel_id))
        if entry is None:
            continue
        item = {"path": str(c.path), "launch_index": c.launch_index, "error": c.error or None,
                "waits_text": str(c.waits_text) if c.waits_text else None,
                "waits_json": str(c.waits_json) if c.waits_json else None}
        if c.trace is not None:
            item["lost_records"] = int(c.trace.loss.lost)
            item["records"] = int(c.trace.loss.nonzero_slots)
        entry["captures"].append(item)
        entry.setdefault("waits", []).append(c.waits)
    alike: dict[tuple, int] = {}  # (name, function, compile-time arguments) -> kernels (ids) compiled with them
    for entry in kernels.values():
        key = (entry["name"], entry.get("function"), dumps(entry.get("arguments") or {}))
        alike[key] = alike.get(key, 0) + 1
    for entry in kernels.values():
        entry["compiled_alike"] = alike[(entry["name"], entry.get("function"), dumps(entry.get("arguments") or {}))]
    for entry in kernels.values():
        entry["captures"].sort(key=lambda x: x["launch_index"])
        entry["bound"] = bound_of([w for w in entry.pop("waits", []) if w])
        first = entry["captures"][0]["path"] if entry["captures"] else None
        entry["next"] = commands(display, first, entry.get("short") or "kernel")
        entry["launch_note"] = launch_note(entry)
    statuses = {p["status"] for p in procs}
    status = "complete" if statuses == {"complete"} else ", ".join(sorted(s or "?" for s in statuses)) or "nothing"
    ordered = sorted(kernels.values(), key=lambda e: (not e.get("traced"), -e["device_seen"], e["name"],
                                                       int(e.get("compile") or 1)))
    return {"folder": display, "status": status, "processes": procs, "incomplete": incomplete, "kernels": ordered,
            "untraced": untraced, "caches": caches, "timeline": timeline, "torch": None,
            "next": [f"ikp view {shlex.quote(display)}"]}


def launch_note(entry: dict) -> str | None:
    """The launches the device counted against those Python saw, when they differ (a recording on a GPU)."""
    if not entry.get("traced") or entry.get("dry_run") or not entry.get("device_counted"):
        return None
    device, host = entry["device_seen"], entry["host_launches"]
    if device == host:
        return None
    if device > host:
        return (f"the device counted {device} launches, Python saw {host}: {device - host} ran where Python does "
                "not see them (CUDA graph replays, a launch from C++), counted on the device only")
    return (f"Python saw {host} launches, the device counted {device}: {host - device} never reached the kernel "
            "(a launch that failed, or one the program made after the pool was read)")


# --- text ------------------------------------------------------------------------------------------


def kernel_lines(e: dict) -> list[str]:
    lines = [f"{e.get('label') or e.get('short') or e['name']}", f"  kernel: {e['name']}"]
    trace = e.get("trace") or {}
    if not e.get("traced"):
        lines.append(f"  not traced: {e.get('reason') or '?'}")
    elif trace.get("coverage_line"):
        lines.append(f"  traced: {trace['coverage_line'].split(': ', 1)[-1]}")
    if trace.get("pipelines") or trace.get("named_barriers"):
        lines.append(f"  pipelines: {', '.join(trace.get('pipelines') or []) or 'none'}; named barriers: "
                     f"{', '.join(map(str, trace.get('named_barriers') or [])) or 'none'}")
    for u in (trace.get("untraced_sites") or [])[:5]:
        lines.append(f"  untraced site {u.get('site')} ({u.get('op')}): {u.get('reason')}")
    if e.get("traced") and (e.get("builds") or 1) > 1:
        lines.append(f"  compiled {e['builds']} times alike (the same code): the compiles share kernel id "
                     f"{e.get('kernel_id')}, one kernel with one launch count and selection; the launches of all "
                     "of them are counted here")
    if " #" in e.get("label", ""):
        why = ("the compile-time arguments of another compile of this name, but other code (a value the arguments "
               "do not show)" if (e.get("compiled_alike") or 1) > 1 else "its compile-time arguments differ")
        lines.append(f"  compile {e.get('compile')} of this kernel name ({why}): a kernel of its own, with its own "
                     "launch count, selection and captures")
    if e.get("retraced"):
        lines.append(f"  traced again {e['retraced']} time(s) to the same code: the DSL's in-memory cache "
                     "returned this build, whose launches are counted here")
    if trace.get("not_recorded"):
        lines.append(f"  not recorded at this level: {', '.join(trace['not_recorded'])}")
    choice = (f"selection {e.get('selection')!r} ({e.get('selection_words')}, from {e.get('rule')}), kernel id "
              f"{e.get('kernel_id')}")
    if e.get("selection_error"):
        lines.append(f"  CHECK: the pool refused the selection: {e['selection_error']}")
    if e.get("traced") and e.get("dry_run"):
        lines.append(f"  launches: {e['host_launches']} from Python, intercepted (dry run); {choice}")
    elif e.get("traced") and e.get("device_counted"):
        lost = f", {e['lost_records']} records lost" if e["lost_records"] else ""
        lines.append(f"  launches: {e['device_seen']} on the device ({e['host_launches']} from Python), {choice}: "
                     f"{e['recorded']} recorded of {e['expected']} selected{lost}")
    elif e.get("traced"):
        lines.append(f"  launches: {e['host_launches']} from Python, none counted on the device (the pool was not "
                     f"read); {choice}")
    if e.get("launch_note"):
        lines.append(f"  note: {e['launch_note']}")
    lines += [f"  CHECK: {p}" for p in e.get("problems") or []]
    bound = e.get("bound")
    if bound:
        per = f", mean path {bound['mean_path_ns'] / 1000:.1f} us" if bound.get("mean_path_ns") else ""
        lines.append(f"  bounded by: {bound['words']}")
        lines.append(f"  critical path ({bound['launches']} launch(es), {bound['blocks']} blocks{per}):")
        lines += [f"    {s['share']:6.1%}  {s['text']}" for s in bound["segments"]]
    elif e.get("captures"):
        lines.append("  recorded, with no pipeline wait to weigh (no waits analysis)")
    elif e.get("traced") and e["device_seen"]:
        lines.append("  nothing recorded: its selection selected no launch it made, or the pool lost them")
    for c in e.get("captures") or []:
        if c.get("error"):
            lines.append(f"  capture {c['path']}: {c['error']}")
    lines += [f"  next: {cmd}" for cmd in e.get("next") or []][1:]
    return lines


def summary_text(s: dict) -> str:
    procs = s["processes"]
    devices = sorted({p["device"] for p in procs if p.get("device")})
    out = [f"ikp record: {s['folder']} ({s['status']}; {len(procs)} process(es)"
           + (f"; {', '.join(devices)}" if devices else "") + ")"]
    for p in procs:
        argv = " ".join(shlex.quote(a) for a in p["argv"])
        where = f"[{p['folder']}] " if p["folder"] else ""
        out.append(f"{where}{argv}" + (f"  (ended by {p['signal']})" if p.get("signal") else ""))
        if p.get("dry_run"):
            d = p["dry_run"]
            out.append(f"dry run for {d.get('arch')}: nothing launched ({d.get('launches_skipped', 0)} launches "
                       "intercepted and skipped); what would be traced is listed per kernel")
    if s["incomplete"]:
        out.append(f"left out, no manifest (killed before writing?): {', '.join(s['incomplete'])}")
    out.append("")
    if not s["kernels"]:
        out.append("no CuTe DSL kernel was compiled while recording")
    for e in s["kernels"]:
        out += kernel_lines(e) + [""]
    if s["untraced"]:
        out.append("launched but not traced:")
        for u in s["untraced"]:
            out.append(f"  {', '.join(u['kernels'])[:100]}: {u['launches']} launch(es): {u['reason']}")
        out.append("")
    for p in procs:
        out += pool_lines(p)
    if s["caches"]:
        out.append("compile caches set aside while recording:")
        out += [f"  {c['cache']}: {c['action']}" for c in s["caches"]]
    if s.get("timeline"):
        out.append(f"timeline: {s['timeline']['path']} ({s['timeline']['slices']} slices): {s['next'][0]}")
    torch = s.get("torch")
    if torch:
        if torch.get("path"):
            out.append(f"torch.profiler trace {torch['torch_trace']}: regions placed in {torch['path']} (aligned on "
                       f"{torch['aligned_on'][:60]}, +-{torch['accuracy_ns']:.0f} ns)")
            labels = {(p, e.get("kernel_id")): e.get("label") or e["name"] for e in s["kernels"]
                      for p in e.get("processes") or []}
            for a in torch.get("alignments") or []:
                which = ", ".join(f"launch {i} = slice {o}" for i, o in zip(a["launch_indices"], a["occurrences"]))
                out.append(f"  {labels.get((a['process'], a['kernel_id']), a['kernel'][:60])}: {which} of its name "
                           f"(by {a['by']}; offset {a['offset_ns']} ns +-{a['accuracy_ns']:.0f} ns"
                           + ("" if a["consistent"] else "; regions longer than the slice: CHECK") + ")")
            for why in torch.get("not_aligned") or []:
                out.append(f"  not aligned: {why}")
        else:
            out.append(f"torch.profiler trace {torch['torch_trace']}: not aligned: {'; '.join(torch['not_aligned'])}")
    return "\n".join(out).rstrip() + "\n"


def pool_lines(p: dict) -> list[str]:
    acc, where = p["pool"], f" {p['folder']}" if p["folder"] else ""
    out = []
    if acc.get("bytes") is not None:
        tail = (f"; EXHAUSTED: a pool of {format_size(acc['needed'])} would have held everything (--pool-size)"
                if acc["exhausted"] else "")
        out.append(f"pool{where}: {format_size(acc['bytes'])}, used {format_size(acc.get('used'))}, "
                   f"{acc.get('records') or 0} records in {acc.get('captures') or 0} captures, "
                   f"{acc['lost_records']} records lost{tail}")
        for bucket, v in acc["loss"].items():
            out.append(f"  pool loss bucket {bucket}: {v.get('units', 0)} units, {v.get('records', 0)} records")
    for row in p.get("unclaimed") or []:
        out.append(f"CHECK{where}: kernel id {row['id']} ({str(row.get('name'))[:60]}) counted "
                   f"{row['launches_seen']} launches on the device, but no compile of this recording has that id")
    out += [f"error{where}: {err}" for err in p["errors"]]
    return out


# --- HTML ------------------------------------------------------------------------------------------

_STYLE = ("body{font:14px system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}"
          "h2{margin-top:1.6em;border-bottom:1px solid #ddd}code,pre{font:13px ui-monospace,monospace}"
          "pre{background:#f5f5f7;padding:.6em;overflow-x:auto}table{border-collapse:collapse}"
          "td{padding:.15em .8em .15em 0}.bar{background:#5c6bc0;height:.8em;display:inline-block}"
          ".muted{color:#777}")


def summary_html(s: dict) -> str:
    e_ = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>ikp record: {e_(s['folder'])}</title>"
             f"<style>{_STYLE}</style></head><body><h1>ikp record: {e_(s['folder'])}</h1>",
             f"<p>{e_(s['status'])}; open the timeline: <code>{e_(s['next'][0])}</code>; the same in text: "
             "<a href='summary.txt'>summary.txt</a>, as data: <a href='summary.json'>summary.json</a></p>"]
    for e in s["kernels"]:
        parts.append(f"<h2>{e_(e.get('label') or e.get('short') or e['name'])}</h2>"
                     f"<p class='muted'>{e_(e['name'])}</p>")
        bound = e.get("bound")
        if bound:
            parts.append(f"<p><b>{e_(bound['words'])}</b></p><table>")
            for seg in bound["segments"]:
                parts.append(f"<tr><td>{seg['share']:.1%}</td><td><span class='bar' style='width:"
                             f"{max(1, int(seg['share'] * 300))}px'></span></td><td>{e_(seg['text'])}</td></tr>")
            parts.append("</table>")
        lines = [ln.strip() for ln in kernel_lines(e)[2:] if not ln.strip().startswith(("next:", "critical path",
                                                                                        "bounded by"))]
        lines = [ln for ln in lines if not ln[:1].isdigit() and "%" not in ln[:8]]
        parts.append("<ul>" + "".join(f"<li>{e_(ln)}</li>" for ln in lines) + "</ul>")
        if e.get("captures"):
            links = ", ".join(f"<a href='{e_(c['path'])}'>launch {c['launch_index']}</a>"
                              + (f" (<a href='{e_(c['waits_text'])}'>waits</a>)" if c.get("waits_text") else "")
                              for c in e["captures"][:20])
            parts.append(f"<p>captures: {links}</p>")
        if e.get("next"):
            parts.append("<p>next:</p><pre>" + e_("\n".join(e["next"])) + "</pre>")
    rest = summary_text(s).split("\n\n")
    tail = [block for block in rest if block.startswith(("launched but not traced", "pool", "compile caches",
                                                         "timeline", "torch", "error"))]
    if tail:
        parts.append("<h2>Recording</h2><pre>" + e_("\n\n".join(tail)) + "</pre>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_summary(root: Path, summary: dict) -> None:
    (root / "summary.json").write_text(dumps(summary), encoding="utf-8")
    (root / "summary.txt").write_text(summary_text(summary), encoding="utf-8")
    (root / "index.html").write_text(summary_html(summary), encoding="utf-8")
