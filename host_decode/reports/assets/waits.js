// ikp report, "Waits" view: who waited on whom in the kernel's pipelines (data: D.waits, written by
// host_decode.analysis.waits.view_data). Runs after report.js; adds its own tab only when the capture
// carries pipeline metadata. Every string goes through textContent (never innerHTML).
"use strict";
(function () {
  const IKP = window.__ikp;
  if (!IKP || !IKP.data || !IKP.data.waits) return;
  const W = IKP.data.waits;
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2f5fd0", "#f79009", "#12b76a", "#7a5af8", "#f04438", "#0ba5ec", "#ee46bc", "#667085"];
  const nav = document.querySelector("header nav");
  const mainEl = document.querySelector("main");
  if (!nav || !mainEl) return;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
    for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids.flat()) if (k) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  function ns(x) {
    if (x === null || x === undefined) return "–";
    if (Math.abs(x) >= 1e6) return (x / 1e6).toFixed(2) + " ms";
    if (Math.abs(x) >= 1e3) return (x / 1e3).toFixed(2) + " µs";
    return Math.round(x) + " ns";
  }
  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"; }
  function table(heads, rows, id) {
    const left = new Set(heads.map((h, i) => (/^(pipeline|op|role|waited on|segment|reason|meaning)$/.test(h) ? i : -1)));
    return el("table", { id },
      el("thead", {}, el("tr", {}, heads.map((h, i) => el("th", { class: left.has(i) ? "l" : null }, h)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c, i) => el("td", { class: left.has(i) ? "l" : null }, c))))));
  }
  function shareBar(share, color) {
    const w = 80, f = Math.max(0, Math.min(1, share || 0));
    return svg("svg", { width: w, height: 10, class: "bar" },
      svg("rect", { x: 0, y: 1, width: w, height: 8, fill: "#eef0f4" }),
      svg("rect", { x: 0, y: 1, width: (w * f).toFixed(1), height: 8, fill: color }));
  }
  function segmentLabel(s) {
    return s.what === "work" ? `${s.role} works` : `${s.role} waits on ${s.channel} for ${s.on}`;
  }
  function stackedPath(segments) {
    const w = 900, h = 22;
    let x = 0;
    const parts = segments.map((s, i) => {
      const width = w * (s.share || 0);
      const r = svg("rect", { x: x.toFixed(1), y: 0, width: Math.max(width, 0).toFixed(1), height: h, fill: COLORS[i % COLORS.length] },
        svg("title", {}, `${segmentLabel(s)}: ${pct(s.share)}`));
      x += width;
      return r;
    });
    return svg("svg", { width: w, height: h, id: "waits-critical-bar" }, parts);
  }
  function counterChart(c, t1) {
    const w = 900, h = 46, n = c.t.length, vmax = Math.max(1, ...c.v);
    let d = `M0,${h}`;
    for (let i = 0; i < n; i++) {
      const x = (w * c.t[i]) / t1, y = h - (h - 4) * (c.v[i] / vmax);
      d += ` H${x.toFixed(1)} V${y.toFixed(1)}`;
    }
    return svg("svg", { width: w, height: h + 12, class: "counter" },
      svg("path", { d: d + ` H${w}`, fill: "none", stroke: "#2f5fd0", "stroke-width": 1.2 }),
      svg("text", { x: 2, y: h + 10 }, `${c.name} · block ${c.block} · max ${vmax}`));
  }

  function render(root) {
    if (W.error) {
      root.append(el("h2", {}, "Pipeline waits"), el("div", { class: "missing", id: "waits-error" }, "The capture's pipeline metadata cannot be read: " + W.error));
      return;
    }
    const st = W.status;
    const matched = st.matched + st.inferred + st.self + st.first_use;
    root.append(el("h2", {}, "Pipeline waits"),
      el("p", { class: "note", id: "waits-summary" },
        `${W.waits} waits, ${matched} matched (${st.matched} to a recorded signal, ${st.inferred} inferred from program order, ` +
        `${st.self} self-released barriers, ${st.first_use} first uses), ${W.flows} flows. A wait blocked when it lasted ` +
        `longer than ${W.blocked_above_ns} ns (timer step ${W.timer_step_ns} ns, ${W.timer_step_source}; a first acquire, which ` +
        `cannot block, takes ${W.pass_through_ns === null ? "?" : W.pass_through_ns + " ns"}). Level ${W.level || "?"}; ` +
        `a role is a ${W.roles_by === "warp_group" ? "warp group (lanes are warps)" : "lane group"}. Uses: releases (consumers) / ` +
        "commits (producers), one per use of a stage; no record: uses whose wait left no record (a try_wait found the stage ready)."));
    const opt = (x) => (x === null || x === undefined ? "–" : x);
    root.append(table(["pipeline", "op", "role", "lanes", "uses", "waits", "blocked", "passed", "no record", "total", "p50", "p99", "max", "of role time", "", "waited on"],
      W.rows.map((r, i) => [r.channel, r.op, r.role, r.lanes, opt(r.uses), r.waits, r.blocked, r.passed, opt(r.not_recorded), ns(r.total_ns), ns(r.p50_ns), ns(r.p99_ns),
        ns(r.max_ns), pct(r.share_of_role_time), shareBar(r.share_of_role_time, COLORS[i % COLORS.length]),
        Object.entries(r.waited_on).map(([k, v]) => `${k} ${v}`).join(", ") || "–"]), "waits-rows"));
    root.append(el("h3", {}, "Roles"), table(["role", "lanes", "time", "in waits", "blocked", "blocked share"],
      W.roles.map((r) => [r.role, r.lanes, ns(r.time_ns), ns(r.wait_ns), ns(r.blocked_ns), pct(r.share_blocked)]), "waits-roles"));
    const cp = W.critical_path;
    root.append(el("h3", {}, "Critical path"),
      el("p", { class: "note" }, `${cp.blocks} of ${cp.blocks_total} blocks, mean ${ns(cp.mean_path_ns)}: walked back from the lane ` +
        "that finished last, through each blocking wait to the lane whose signal released it" +
        (cp.partial ? " (every block has an overflowed lane: paths end at the last record, not at the block's end)."
          : cp.blocks_overflowed ? ` (${cp.blocks_overflowed} blocks with an overflowed lane left out: their tail is missing).` : ".")),
      stackedPath(cp.segments),
      table(["", "segment", "share", "total"], cp.segments.map((s, i) => [
        el("span", { class: "swatch", style: `background:${COLORS[i % COLORS.length]}` }), segmentLabel(s), pct(s.share), ns(s.ns)]), "waits-critical"));
    if (W.counters_shown && W.counters_shown.length) {
      const t1 = Math.max(1, ...W.counters_shown.map((c) => c.t[c.t.length - 1] || 1));
      root.append(el("h3", {}, `Stages full (${W.counters_shown.length} of ${W.counters_total} counters; all of them are in the Perfetto trace)`),
        ...W.counters_shown.map((c) => counterChart(c, t1)));
    }
    const un = Object.entries(W.unmatched);
    root.append(el("h3", {}, "Not matched"), un.length
      ? table(["reason", "waits"], un.map(([k, v]) => [k, v]), "waits-unmatched")
      : el("p", { class: "ok", id: "waits-unmatched" }, "Every wait matched (or passed through as a stage's first use)."));
  }

  if (IKP.addView) {  // the page's registry of extra tabs (reports/html.py REPORT_VIEWS), when it has one
    IKP.addView("waits", "Waits", (root) => render(root));
    return;
  }
  // a page without the registry: the tab manages itself
  const tab = el("a", { href: "#waits", id: "tab-waits" }, "Waits");
  nav.append(tab);
  let section = null;
  function showWaits() {
    for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", a === tab);
    if (!section) {
      section = el("section", { id: "view-waits" });
      render(section);
    }
    mainEl.replaceChildren(section);
  }
  // report.js answers an unknown hash with its overview first; this listener runs after it
  window.addEventListener("hashchange", () => { if (location.hash === "#waits") showWaits(); });
  if (location.hash === "#waits") showWaits();
  IKP.showWaits = showWaits;
})();
