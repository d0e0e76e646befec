"""What a recording folder says first (summary.txt, index.html, summary.json): per kernel, in plain words,
what bounds it (the top items of the critical path of its recorded launches, with their shares:
host_decode.analysis.waits), what was recorded out of what was launched, and the exact commands to run
next; then what was launched but not traced and why, the pool's accounting, the caches set aside.

Critical path over several launches of a kernel: each launch's segments (`ikp waits`: "wg1 works",
"wg1 waits on k for wg0") summed by kind over the launches, shares of the summed path time.

Pool accounting, checked against the selection's reference (host_decode.load.launches): out of the `seen`
launches of a traced kernel, its selection selects E; recorded + lost must be E, else the summary says so.

Guarded by tests/unit/host_decode/reports/test_recording.py.
"""

from __future__ import annotations

import html
import shlex
from pathlib import Path

from host_decode.core.jsonable import dumps
from host_decode.load.launches import parse_selection
from host_decode.load.recording import format_size

TOP_SEGMENTS = 5


def pool_accounting(pool: dict | None, ids: dict) -> dict:
    """The pool's summary (ikp_cute.pool.Pool.summary) in the keys this report uses: bytes, used, lost,
    needed, kernels {name: {seen, recorded, lost}}; `ids`: kernel id -> name (pool summaries keyed by id)."""
    pool = pool or {}

    def pick(d, *names):
        return next((d[n] for n in names if d.get(n) is not None), None)

    out = {"bytes": pick(pool, "bytes", "size_bytes", "size"), "used": pick(pool, "used", "used_bytes"),
           "lost": pick(pool, "lost", "lost_launches", "launches_lost"),
           "needed": pick(pool, "needed", "needed_bytes", "size_needed", "would_hold_all")}
    kernels = pool.get("kernels") or {}
    if isinstance(kernels, list):
        kernels = {k.get("name") or k.get("kernel") or k.get("kernel_id"): k for k in kernels}
    per = {}
    for key, k in kernels.items():
        name = ids.get(int(key)) if str(key).isdigit() and int(key) in ids else key
        per[str(name)] = {"seen": pick(k, "launches_seen", "seen", "launches"),
                          "recorded": pick(k, "launches_recorded", "recorded"),
                          "lost": pick(k, "launches_lost", "lost")}
    out["kernels"] = per
    return out


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
    kernels: dict[str, dict] = {}
    untraced, caches, procs = [], [], []
    for p in processes:
        m = p.manifest
        ids = {k["kernel_id"]: k["name"] for k in m.get("kernels") or [] if k.get("kernel_id") is not None}
        acc = pool_accounting(m.get("pool"), ids)
        procs.append({"folder": p.folder, "pid": m.get("pid"), "rank": m.get("rank"), "status": m.get("status"),
                      "signal": m.get("signal"), "device": m.get("device"), "argv": m.get("argv") or [],
                      "errors": m.get("errors") or [], "pool": acc, "dry_run": m.get("dry_run")})
        for k in m.get("kernels") or []:
            entry = kernels.setdefault(k["name"], dict(k, processes=[], device_seen=0, recorded=0, lost=0,
                                                       host_launches=0, compiles=0, captures=[], expected=0))
            entry["processes"].append(p.folder)
            entry["dry_run"] = bool(m.get("dry_run"))
            entry["host_launches"] += int(k.get("host_launches") or 0)
            entry["compiles"] += int(k.get("compiles") or 0)
            dev = acc["kernels"].get(k["name"]) or {}
            seen = dev.get("seen")
            entry["device_seen"] += int(seen or 0)
            entry["recorded"] += int(dev.get("recorded") or 0)
            entry["lost"] += int(dev.get("lost") or 0)
            if seen is not None and k.get("selection"):
                entry["expected"] += len(parse_selection(k["selection"]).selected(int(seen)))
        untraced += [dict(u, process=p.folder) for u in m.get("untraced") or []]
        caches += [c for c in m.get("caches") or [] if c not in caches]
    for c in captures:
        entry = kernels.get(c.kernel)
        if entry is None:
            continue
        item = {"path": str(c.path), "launch_index": c.launch_index, "error": c.error or None,
                "waits_text": str(c.waits_text) if c.waits_text else None,
                "waits_json": str(c.waits_json) if c.waits_json else None}
        if c.trace is not None:
            item["lost_records"] = int(c.trace.loss.lost)
            item["records"] = int(c.trace.loss.nonzero_slots)
        entry["captures"].append(item)
    for name, entry in kernels.items():
        entry["captures"].sort(key=lambda x: x["launch_index"])
        mine = [c.waits for c in captures if c.kernel == name and c.waits]
        entry["bound"] = bound_of(mine)
        first = entry["captures"][0]["path"] if entry["captures"] else None
        entry["next"] = commands(display, first, entry.get("short") or "kernel")
        entry["accounting_note"] = accounting_note(entry)
    statuses = {p["status"] for p in procs}
    status = "complete" if statuses == {"complete"} else ", ".join(sorted(s or "?" for s in statuses)) or "nothing"
    return {"folder": display, "status": status, "processes": procs, "incomplete": incomplete,
            "kernels": sorted(kernels.values(), key=lambda e: (not e.get("traced"), -e["device_seen"], e["name"])),
            "kernels_by_name": kernels, "untraced": untraced, "caches": caches, "timeline": timeline,
            "torch": None, "next": [f"ikp view {shlex.quote(display)}"]}


def accounting_note(entry: dict) -> str | None:
    """A traced kernel whose recorded + lost launches differ from what its selection selects."""
    if not entry.get("traced") or not entry.get("selection") or not entry["device_seen"]:
        return None
    got = entry["recorded"] + entry["lost"]
    if got == entry["expected"]:
        return None
    return (f"the pool recorded {entry['recorded']} and lost {entry['lost']} launches, but selection "
            f"{entry['selection']!r} selects {entry['expected']} of the {entry['device_seen']} seen")


# --- text ------------------------------------------------------------------------------------------


def kernel_lines(e: dict) -> list[str]:
    lines = [f"{e.get('short') or e['name']}", f"  kernel: {e['name']}"]
    trace = e.get("trace") or {}
    if not e.get("traced"):
        lines.append(f"  not traced: {e.get('reason') or '?'}")
    elif trace.get("coverage_line"):
        lines.append(f"  traced: {trace['coverage_line'].split(': ', 1)[-1]}")
    if trace and (trace.get("pipelines") or trace.get("named_barriers") or trace.get("regions")):
        lines.append(f"  pipelines: {', '.join(trace.get('pipelines') or []) or 'none'}; named barriers: "
                     f"{', '.join(map(str, trace.get('named_barriers') or [])) or 'none'}; regions: "
                     f"{', '.join(trace.get('regions') or []) or 'none'}")
    for u in (trace.get("untraced_sites") or [])[:5]:
        lines.append(f"  untraced site {u.get('site')} ({u.get('op')}): {u.get('reason')}")
    if e.get("traced") and e.get("compiles", 0) > 1:
        lines.append(f"  {e['compiles']} builds share this kernel name (compiled with different compile-time "
                     "arguments, e.g. causal and not): one launch count and one selection for all of them")
    if trace.get("not_recorded"):
        lines.append(f"  not recorded at this level: {', '.join(trace['not_recorded'])}")
    choice = f"selection {e.get('selection')!r} ({e.get('selection_words')}, from {e.get('rule')})"
    if e.get("traced") and e.get("dry_run"):
        lines.append(f"  launches: {e['host_launches']} from Python, intercepted (dry run); {choice}")
    elif e.get("traced"):
        lines.append(f"  launches: {e['device_seen']} on the device ({e['host_launches']} from Python), {choice}: "
                     f"{e['recorded']} recorded, {e['lost']} lost")
    if e.get("accounting_note"):
        lines.append(f"  CHECK: {e['accounting_note']}")
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
        acc = p["pool"]
        if acc.get("bytes") is not None:
            need = acc.get("needed")
            tail = f"; a pool of {format_size(need)} would have held everything" if need else ""
            out.append(f"pool{' ' + p['folder'] if p['folder'] else ''}: {format_size(acc['bytes'])}, used "
                       f"{format_size(acc.get('used'))}, {acc.get('lost') or 0} launch(es) lost{tail}")
        for err in p["errors"]:
            out.append(f"error{' ' + p['folder'] if p['folder'] else ''}: {err}")
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
        else:
            out.append(f"torch.profiler trace {torch['torch_trace']}: not aligned: {'; '.join(torch['not_aligned'])}")
    return "\n".join(out).rstrip() + "\n"


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
        parts.append(f"<h2>{e_(e.get('short') or e['name'])}</h2><p class='muted'>{e_(e['name'])}</p>")
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
    data = {k: v for k, v in summary.items() if k != "kernels_by_name"}
    (root / "summary.json").write_text(dumps(data), encoding="utf-8")
    (root / "summary.txt").write_text(summary_text(summary), encoding="utf-8")
    (root / "index.html").write_text(summary_html(summary), encoding="utf-8")
