// ikp report viewer: reads the embedded JSON (id "ikp-data"), lays out tables, draws SVG charts,
// follows clicks. Plain DOM, no libraries, no network. Every string from the data goes through
// textContent (never innerHTML), so names and source text cannot inject markup.
"use strict";
(function () {
  const IKP = (window.__ikp = { errors: [] });
  window.addEventListener("error", (e) => IKP.errors.push(String(e.message)));
  const D = JSON.parse(document.getElementById("ikp-data").textContent);
  IKP.data = D;
  const app = document.getElementById("app");
  const SVGNS = "http://www.w3.org/2000/svg";

  // ---------------------------------------------------------------- helpers
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") n.className = v;
      else if (k === "onclick") n.addEventListener("click", v);
      else if (k === "style") n.setAttribute("style", v);
      else n.setAttribute(k, v);
    }
    for (const c of kids.flat()) if (c !== null && c !== undefined && c !== false) n.append(c instanceof Node ? c : String(c));
    return n;
  }
  function svg(tag, attrs, ...kids) {
    const n = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) n.setAttribute(k, v);
    for (const c of kids.flat()) if (c !== null && c !== undefined) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return n;
  }
  function fmtNs(ns) {
    if (ns === null || ns === undefined) return "–";
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(2) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtNum(x) {
    if (x === null || x === undefined) return "–";
    const a = Math.abs(x);
    if (a >= 1e9) return (x / 1e9).toFixed(2) + "G";
    if (a >= 1e6) return (x / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
    return Number.isInteger(x) ? String(x) : x.toFixed(2);
  }
  function fix(x, digits) { return x === null || x === undefined ? "–" : x.toFixed(digits); }
  function pct(x, digits) {
    return x === null || x === undefined ? "–" : (100 * x).toFixed(digits === undefined ? 1 : digits) + "%";
  }
  function esc(x) {
    return String(x).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }
  function hex(pc) { return "0x" + pc.toString(16).padStart(4, "0"); }
  function table(headers, rows, opts) {
    opts = opts || {};
    const head = headers ? el("tr", {}, headers.map((h, i) => el("th", { class: i < (opts.left || 1) || (opts.lastLeft && i === headers.length - 1) ? "l" : null }, h))) : null;
    const body = rows.map((r) =>
      el("tr", { class: r.onclick ? "click" : null, onclick: r.onclick || null, "data-key": r.key || null },
        r.cells.map((c, i) => el("td", { class: i < (opts.left || 1) || (opts.lastLeft && i === r.cells.length - 1) ? "l" : null }, c))));
    return el("table", { class: opts.cls || null, id: opts.id || null }, head ? el("thead", {}, head) : null, el("tbody", {}, body));
  }
  function missingBox(key) {
    const text = D.missing[key];
    if (!text) return null;
    // `code` spans in the how-to text become <code>
    const box = el("div", { class: "missing", "data-missing": key });
    text.split("`").forEach((part, i) => box.append(i % 2 ? el("code", {}, part) : part));
    return box;
  }

  // ---------------------------------------------------------------- colours: one per event id
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#d37295", "#8cd17d", "#a0cbe8", "#ffbe7d", "#499894", "#f1ce63"];
  const eventIds = [...new Set(D.regions.map((r) => r.event).concat(
    D.paths.filter((p) => p.stack).flatMap((p) => p.stack)))].sort((a, b) => a - b);
  const eventColor = (e) => PALETTE[Math.max(0, eventIds.indexOf(e)) % PALETTE.length];
  const eventName = {};
  D.regions.forEach((r) => (eventName[r.event] = r.region));
  const pathColor = (i) => {
    const p = D.paths[i];
    return p && p.stack && p.stack.length ? eventColor(p.stack[p.stack.length - 1]) : "#c0c4cc";
  };
  const swatch = (c) => el("span", { class: "swatch", style: "background:" + c });

  // ---------------------------------------------------------------- charts (inline SVG)
  function histogram(r, color) {
    // bars by bin; geometric bins (r.hist_log) get equal slots, so the axis reads as a log axis.
    // y: counts (0 and the max); x: the range's ends, p50 / p99 ticks; labels never below 0 ns
    const counts = r.hist_counts, edges = r.hist_edges_ns;
    const W = 300, H = 84, L = 30, R = 6, B = 34;
    const n = counts.length, max = Math.max(1, ...counts);
    const bw = (W - L - R) / Math.max(1, n);
    const s = svg("svg", { width: W, height: H + B, viewBox: `0 0 ${W} ${H + B}`, class: "hist" });
    const lab = (x) => fmtNs(Math.max(0, x));
    counts.forEach((c, i) => {
      const h = (H - 4) * (c / max);
      s.append(svg("rect", { x: L + i * bw + 0.5, y: H - h, width: Math.max(1, bw - 1), height: h, fill: color },
        svg("title", {}, `${lab(edges[i])} – ${lab(edges[i + 1])}: ${c}`)));
    });
    // x position of a duration: its bin slot, linear inside the bin
    const xOf = (v) => {
      let i = 0;
      while (i < n - 1 && v >= edges[i + 1]) i++;
      const f = Math.min(1, Math.max(0, (v - edges[i]) / ((edges[i + 1] - edges[i]) || 1)));
      return L + (i + f) * bw;
    };
    s.append(svg("line", { x1: L, x2: W - R, y1: H, y2: H, stroke: "#999" }));
    s.append(svg("line", { x1: L, x2: L, y1: 2, y2: H, stroke: "#999" }));
    s.append(svg("text", { x: L - 3, y: 10, "text-anchor": "end" }, fmtNum(max)));
    s.append(svg("text", { x: L - 3, y: H, "text-anchor": "end" }, "0"));
    if (edges.length) {
      s.append(svg("text", { x: L, y: H + 11 }, lab(r.min_ns)));
      s.append(svg("text", { x: W - R, y: H + 11, "text-anchor": "end" }, lab(r.max_ns) + (r.hist_log ? " (log bins)" : "")));
      for (const [q, v] of [["p50", r.p50_ns], ["p99", r.p99_ns]]) {
        const x = xOf(v);
        s.append(svg("line", { x1: x, x2: x, y1: 2, y2: q === "p50" ? H + 14 : H + 24, stroke: q === "p50" ? "#1d2330" : "#b42318", "stroke-dasharray": q === "p50" ? null : "3 2", class: "tick-" + q }));
        const right = x > W - 70;  // near the right edge: the label ends at the tick
        s.append(svg("text", { x: right ? x - 2 : x + 2, y: q === "p50" ? H + 22 : H + 31, "text-anchor": right ? "end" : "start",
          fill: q === "p50" ? "#1d2330" : "#b42318", class: "q" }, `${q} ${lab(v)}`));
      }
    }
    return s;
  }
  function columnChart(items, opts) {
    // items: [{label, value, color, title}] -> vertical bars with a mean line
    const W = Math.max(320, Math.min(1100, items.length * 9 + 60)), H = 140, L = 46, B = 18;
    const max = Math.max(1, ...items.map((d) => d.value));
    const bw = (W - L - 4) / Math.max(1, items.length);
    const s = svg("svg", { width: W, height: H + B, viewBox: `0 0 ${W} ${H + B}`, id: opts.id || null });
    items.forEach((d, i) => {
      const h = (H - 6) * (d.value / max);
      s.append(svg("rect", { x: L + i * bw, y: H - h, width: Math.max(1, bw - 1), height: h, fill: d.color || "#4e79a7" },
        svg("title", {}, d.title || `${d.label}: ${d.value}`)));
    });
    const mean = items.reduce((a, d) => a + d.value, 0) / Math.max(1, items.length);
    const my = H - (H - 6) * (mean / max);
    s.append(svg("line", { x1: L, x2: W, y1: my, y2: my, stroke: "#b42318", "stroke-dasharray": "4 3" }));
    s.append(svg("text", { x: L - 4, y: my + 3, "text-anchor": "end" }, "mean"));
    s.append(svg("text", { x: L - 4, y: 10, "text-anchor": "end" }, opts.fmt ? opts.fmt(max) : fmtNum(max)));
    s.append(svg("line", { x1: L, x2: W, y1: H, y2: H, stroke: "#999" }));
    if (items.length) {
      s.append(svg("text", { x: L, y: H + 13 }, items[0].label));
      s.append(svg("text", { x: W - 2, y: H + 13, "text-anchor": "end" }, items[items.length - 1].label));
    }
    return s;
  }
  const STALL_COLORS = {};
  // stall reasons get hues of their own (the region palette has near-twins, e.g. two yellows)
  const STALL_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#17becf", "#8c564b", "#bcbd22", "#1f3a93", "#d62728", "#7f7f7f"];
  function stallColor(r, i) { return STALL_COLORS[r] || (STALL_COLORS[r] = STALL_PALETTE[i % STALL_PALETTE.length]); }
  function stackedBars(rows, reasons) {
    // rows: [{label, parts: {reason: value}}] -> horizontal 100% bars + legend
    const W = 640, RH = 18, L = 170, top = 4;
    const H = top + rows.length * RH + 8 + Math.ceil(reasons.length / 5) * 14;
    const s = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "stall-chart" });
    rows.forEach((r, j) => {
      const total = reasons.reduce((a, k) => a + (r.parts[k] || 0), 0) || 1;
      let x = L;
      const y = top + j * RH;
      s.append(svg("text", { x: L - 6, y: y + 12, "text-anchor": "end" }, r.label.length > 26 ? "…" + r.label.slice(-25) : r.label));
      reasons.forEach((k, i) => {
        const w = (W - L - 6) * ((r.parts[k] || 0) / total);
        if (w <= 0) return;
        s.append(svg("rect", { x, y: y + 2, width: w, height: RH - 4, fill: stallColor(k, i) },
          svg("title", {}, `${r.label}: ${k} ${pct((r.parts[k] || 0) / total)}`)));
        x += w;
      });
    });
    reasons.forEach((k, i) => {
      const x = 10 + (i % 5) * 125, y = top + rows.length * RH + 14 + Math.floor(i / 5) * 14;
      s.append(svg("rect", { x, y: y - 9, width: 10, height: 10, fill: stallColor(k, i) }));
      s.append(svg("text", { x: x + 14, y }, k));
    });
    return s;
  }

  // ---------------------------------------------------------------- header and routing
  // built-in tabs; more come from assets that call IKP.addView (html.py REPORT_VIEWS)
  const VIEWS = [["overview", "Overview"], ["regions", "Regions"], ["hardware", "Hardware"], ["code", "Code"]];
  const RENDER = {};
  const state = { view: "overview", sel: null };
  const K = D.kernel;
  const header = el("header", {},
    el("h1", {}, "ikp report: " + (K.name || "kernel")),
    el("span", { class: "sub" }, `${K.num_blocks} blocks × ${K.num_groups} groups · ${fmtNs(K.launch_ns)} · ${D.generated_utc}`),
    el("nav", { id: "tabs" }, VIEWS.map(([id, label]) => el("a", { href: "#" + id, id: "tab-" + id }, label))));
  const mainEl = el("main", {});
  app.replaceChildren(header, mainEl);
  const rendered = {};
  Object.assign(RENDER, { overview: renderOverview, regions: renderRegions, hardware: renderHardware, code: (root) => renderCode(root) });
  function show(view) {
    if (!VIEWS.some(([id]) => id === view)) view = "overview";
    state.view = view;
    for (const [id] of VIEWS) document.getElementById("tab-" + id).classList.toggle("active", id === view);
    if (!rendered[view]) {
      rendered[view] = el("section", { id: "view-" + view });
      RENDER[view](rendered[view]);
    }
    mainEl.replaceChildren(rendered[view]);
    if (view === "code") applySelection();
  }
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  // an extra tab, inserted before "Hardware"; shown at once when the URL asks for it
  IKP.addView = function (id, label, render) {
    if (VIEWS.some(([v]) => v === id)) return;
    const at = VIEWS.findIndex(([v]) => v === "hardware");
    VIEWS.splice(at, 0, [id, label]);
    RENDER[id] = (root) => { try { render(root, IKP); } catch (e) { IKP.errors.push(String(e && e.stack || e)); throw e; } };
    document.getElementById("tabs").insertBefore(el("a", { href: "#" + id, id: "tab-" + id }, label), document.getElementById("tab-hardware"));
    if (location.hash.slice(1) === id) show(id);
  };

  // ---------------------------------------------------------------- overview
  function treeOrder(regions) {
    // rows as a forest: each under the region it runs in most often (parent_key), children in data order
    const byKey = new Map(regions.map((r) => [r.key, r]));
    const kids = new Map();
    const roots = [];
    for (const r of regions) {
      if (r.parent_key && byKey.has(r.parent_key) && r.parent_key !== r.key) {
        if (!kids.has(r.parent_key)) kids.set(r.parent_key, []);
        kids.get(r.parent_key).push(r);
      } else roots.push(r);
    }
    const out = [], seen = new Set();
    const walk = (r, d) => { if (seen.has(r.key)) return; seen.add(r.key); out.push([r, d]); (kids.get(r.key) || []).forEach((k) => walk(k, d + 1)); };
    roots.forEach((r) => walk(r, 0));
    regions.forEach((r) => walk(r, 0)); // a parent cycle: still listed once
    return out;
  }
  function regionLabel(r) {
    return (D.kernel.num_groups > 1 || Object.keys(D.groups).length > 1) ? `${r.group_name} / ${r.region}` : r.region;
  }
  function gotoEvent(e) {
    state.sel = { kind: "event", event: e };
    if (location.hash === "#code") show("code"); else location.hash = "#code";
  }
  function renderOverview(root) {
    const L = D.loss;
    const facts = [["kernel", K.name || "(unknown: no sidecar)"], ["capture", K.capture || "–"],
      ["grid", `${K.num_blocks} blocks × ${K.num_groups} groups (${K.lanes_with_records} lanes wrote records)`],
      ["launch (first record → last)", fmtNs(K.launch_ns)], ["spans / instants", `${K.spans} / ${K.instants}`],
      ["regions", K.regions], ["SMs seen", K.sms_seen || "unknown"], ["timeline", K.absolute_time ? "absolute %globaltimer ns" : "relative (no anchors)"]];
    const shown = new Set(["num_blocks", "num_groups", "source", "write_stride"]);
    for (const [k, v] of Object.entries(K.meta || {})) if (!shown.has(k)) facts.push([k, String(v)]);
    const lossOk = L.lost === 0;
    root.append(
      el("div", { class: "grid" },
        el("div", { class: "card" }, el("h3", {}, "Kernel"), table(null, facts.map(([k, v]) => ({ cells: [k, v] })), { cls: "facts", left: 2 })),
        el("div", { class: "card", id: "loss" }, el("h3", {}, "Records (loss report) ",
          el("span", { class: lossOk ? "ok" : "bad" }, lossOk ? "nothing lost" : `${L.lost} lost`)),
          table(["bucket", "records"], [["non-zero slots", L.nonzero_slots], ["paired begin / end", `${L.paired_begin} / ${L.paired_end}`],
            ["instants", L.instant], ["finalize", L.finalize], ["unmatched begin / end", `${L.unmatched_begin} / ${L.unmatched_end}`],
            ["after finalize", L.after_finalize], ["malformed", L.malformed], ["dropped on device", L.dropped_on_device]]
            .map(([k, v]) => ({ cells: [k, v] })), { cls: "facts", left: 1 }),
          L.lanes_with_losses_count ? el("p", { class: "note" }, `${L.lanes_with_losses_count} lane(s) with losses (first ${L.lanes_with_losses.length} embedded).`) : null),
        el("div", { class: "card" }, el("h3", {}, "Data in this report"),
          el("ul", {}, [["timeline (capture)", true], ["bubbles / overlap / imbalance", !!D.analysis], ["pc2region map", D.paths.length > 0],
            ["per-PC hardware data", !!D.hardware], ["kernel source", !!D.source]].map(([k, ok]) =>
            el("li", {}, el("span", { class: ok ? "ok" : "warn" }, ok ? "✓ " : "✗ "), k))),
          Object.keys(D.missing).map(missingBox))));
    root.append(el("h2", {}, "Regions (click a row to see its code)"));
    const hasHw = D.regions.some((r) => r.hw);
    const heads = ["region", "count", "total", "share of group time", "exclusive", "excl. share", "mean", "p50", "p99", "cv", "what stands out"];
    if (hasHw) heads.splice(10, 0, "% samples (code path)");
    const shownShared = new Set();
    const rows = treeOrder(D.regions).map(([r, depth]) => {
      let samples = "–";
      if (r.hw && r.hw.shared_by && shownShared.has(r.event))
        samples = el("span", { class: "note", title: "per-PC samples belong to code, not to warp groups" }, `same code as ${r.hw.shared_by[0]}`);
      else if (r.hw) {
        shownShared.add(r.event);
        samples = el("span", {}, pct(r.hw.samples_share),
          r.hw.shared_by ? el("span", { class: "note" }, ` (code shared by ${r.hw.shared_by.join(", ")})`) : null);
      }
      const cells = [el("span", { class: "tree", style: `padding-left:${depth * 16}px` }, depth ? el("span", { class: "note" }, "└ ") : null,
          swatch(eventColor(r.event)), regionLabel(r)), r.count, fmtNs(r.total_ns), pct(r.share_of_group_time),
        fmtNs(r.exclusive_ns), pct(r.exclusive_share_of_group_time), fmtNs(r.mean_ns), fmtNs(r.p50_ns), fmtNs(r.p99_ns), fix(r.cv, 2),
        el("span", { class: r.stands_out.kind === "none" ? "note" : "warn" }, r.stands_out.text,
          (r.stands_out.also || []).length ? el("span", { class: "note" }, " · " + r.stands_out.also.join("; ")) : null)];
      if (hasHw) cells.splice(10, 0, samples);
      return { key: r.key, cells, onclick: () => gotoEvent(r.event), depth };
    });
    root.append(table(heads, rows, { id: "overview-regions", lastLeft: true }));
    root.append(el("p", { class: "note" }, "Nested regions are indented under the region they run in; \"exclusive\" is a region's time minus the regions directly inside it (shares of one group add up in that column, not in \"total\"). " +
      "What stands out: the region's top stall reason when per-PC data is joined; otherwise a long tail (p99/p50 ≥ 2) or an imbalance across blocks (max/mean of per-block time ≥ 1.5). These are leads, not proof of a bottleneck."));
  }

  // ---------------------------------------------------------------- regions
  function renderRegions(root) {
    root.append(el("h2", {}, "Duration per region and group"));
    root.append(el("div", { class: "grid" }, D.regions.map((r) => el("div", { class: "card", "data-key": r.key },
      el("h3", {}, swatch(eventColor(r.event)), regionLabel(r)),
      histogram(r, eventColor(r.event)),
      table(["count", "min", "p50", "p90"], [{ cells: [fmtNum(r.count), fmtNs(r.min_ns), fmtNs(r.p50_ns), fmtNs(r.p90_ns)] }], { left: 0, cls: "stats" }),
      table(["p95", "p99", "max", "mean"], [{ cells: [fmtNs(r.p95_ns), fmtNs(r.p99_ns), fmtNs(r.max_ns), fmtNs(r.mean_ns)] }], { left: 0, cls: "stats" }),
      el("p", { class: "note" }, `over ${r.blocks} blocks, max/mean per block ${fix(r.block_imbalance, 2)}` +
        (r.block_imbalance >= 1.5 ? " (imbalance)" : "") + `; p99/p50 ${fix(r.tail_ratio, 2)}`)))));
    const A = D.analysis;
    if (!A) { root.append(missingBox("analysis")); return; }
    root.append(el("h2", {}, "Overlap between groups"));
    if (!A.overlap.length) root.append(el("p", { class: "note" }, "One group only: nothing to overlap."));
    else root.append(table(["A", "B", "blocks", "A overlapped by B", "B overlapped by A", "A min / p50 per block", "B min / p50 per block"],
      A.overlap.map((o) => ({ cells: [o.group_a, o.group_b, o.blocks, pct(o.a_overlapped), pct(o.b_overlapped),
        `${pct(o.a_overlapped_min)} / ${pct(o.a_overlapped_p50)}`, `${pct(o.b_overlapped_min)} / ${pct(o.b_overlapped_p50)}`] })), { left: 2 }));
    const Bu = A.bubbles;
    root.append(el("h2", {}, "Bubbles (lane time in no region)"));
    root.append(el("p", {}, `All lanes: ${pct(Bu.bubble_frac)} of lane time is outside every region (${fmtNs(Bu.bubble_ns_total)} summed over ${Bu.lanes} lanes); per lane p50 ${pct(Bu.bubble_frac_p50)}, max ${pct(Bu.bubble_frac_max)}.`));
    root.append(table(["group", "lanes", "bubble share", "worst lane", "largest gap"],
      Bu.per_group.map((g) => ({ cells: [g.group, g.lanes, pct(g.bubble_frac), pct(g.bubble_frac_max), fmtNs(g.largest_gap_ns)] }))));
    if (Bu.largest_gaps.length) {
      root.append(el("h3", {}, "Largest gaps"));
      root.append(table(["after", "before", "duration", "at", "block", "group", "lane"],
        Bu.largest_gaps.map((g) => ({ cells: [g.after, g.before, fmtNs(g.dur_ns), fmtNs(g.start_ns), g.block, g.group, g.lane] })), { left: 2 }));
    }
    root.append(el("h2", {}, "Per-SM imbalance, waves and tail"));
    const La = A.launch;
    root.append(el("p", {}, `${La.blocks} blocks; launch ${fmtNs(La.launch_ns)}; block end p50 ${fmtNs(La.block_end_p50_ns)}, tail ${fmtNs(La.tail_ns)} (${pct(La.tail_frac)} of the launch)` +
      (La.sms ? `; ${La.sms} SMs, busy max/mean ${fix(La.imbalance_sm_busy, 3)}, waves ≤ ${La.waves_max}, ≤ ${La.max_resident} blocks resident per SM` : "") +
      (La.tail_sm_utilization !== undefined ? `; SMs busy ${pct(La.tail_sm_utilization)} of the tail` : "") + "."));
    if (D.sm.length) {
      root.append(columnChart(D.sm.map((s) => ({ label: "SM " + s.sm, value: s.busy_ns, title: `SM ${s.sm}: busy ${fmtNs(s.busy_ns)}, ${s.blocks} blocks, ${s.waves} wave(s)` })),
        { id: "sm-chart", fmt: fmtNs }));
      root.append(el("p", { class: "note" }, "Busy time per SM (union of its blocks' intervals); dashed line: mean."));
    } else root.append(missingBox("sm"));
    const C = A.critical;
    if (C && C.regions && C.regions.length) {
      root.append(el("h2", {}, "What the last-finishing lane of each block did"));
      root.append(table(["group", "region", "spans", "time", "share of those lanes' time"],
        C.regions.map((r) => ({ cells: [r.group, r.event, r.spans, fmtNs(r.total_ns), pct(r.share)] })), { left: 2 }));
    }
  }

  // ---------------------------------------------------------------- hardware
  function renderHardware(root) {
    const H = D.hardware;
    if (!H) {
      root.append(el("h2", {}, "Per-region hardware metrics"));
      root.append(missingBox("map"), missingBox("hardware"));
      if (D.paths.length) root.append(el("p", { class: "note" }, "The map alone still tells which instructions each region holds: see the Code view."));
      return;
    }
    const chk = H.check;
    root.append(el("h2", {}, `Per-region hardware metrics (${H.source})`));
    root.append(el("p", { id: "hw-check" }, el("span", { class: chk.ok ? "ok" : "bad" }, chk.ok ? "data matches the map" : "MISMATCH: " + chk.reasons.join("; ")),
      ` · ${chk.instructions_in_data} PCs in the data, ${chk.instructions_in_map} in the map · total samples ${fmtNum(H.totals.samples || 0)}` +
      (H.totals.inst_executed !== undefined ? ` · instructions executed ${fmtNum(H.totals.inst_executed)}` : "") +
      ` · samples moved to the previous PC (drain after EXIT / unexecuted PCs): ${fmtNum(H.moved_samples)}`));
    const instr = H.instrumentation || {};
    if (instr.marker_inst_executed !== undefined || instr.marker_samples !== undefined)
      root.append(el("p", { class: "note" }, `Instrumentation cost (the markers' own instructions): ${fmtNum(instr.marker_inst_executed || 0)} instructions executed` +
        (H.totals.inst_executed ? ` (${pct((instr.marker_inst_executed || 0) / H.totals.inst_executed)})` : "") + `, ${fmtNum(instr.marker_samples || 0)} samples.`));
    let inclusive = false;
    const holder = el("div", {});
    const draw = () => {
      const rows = (inclusive ? H.inclusive : H.exclusive).filter((r) => r.samples || r.inst_executed);
      const hasInst = H.totals.inst_executed !== undefined;
      const heads = ["region path", "samples", "% samples", "top stalls (share of region samples)"];
      if (hasInst) heads.splice(1, 0, "inst executed", "% inst", "pred-on");
      if (!inclusive) heads.push("marker inst / samples");
      holder.replaceChildren(table(heads, rows.map((r) => {
        const idx = D.paths.findIndex((p) => p.path === r.path);
        const cells = [el("span", {}, swatch(idx >= 0 ? pathColor(idx) : "#c0c4cc"), r.path), fmtNum(r.samples || 0), pct(r.samples_share),
          r.top_stalls.map(([k, f]) => `${k} ${pct(f, 0)}`).join(", ")];
        if (hasInst) cells.splice(1, 0, fmtNum(r.inst_executed || 0), pct(r.inst_share), pct(r.predicated_on_ratio, 0));
        if (!inclusive) cells.push(`${pct(r.marker_inst_executed_share || 0)} / ${pct(r.marker_samples_share || 0)}`);
        return { cells, key: r.path, onclick: idx >= 0 ? () => { state.sel = { kind: "path", path: idx }; location.hash = "#code"; } : null };
      }), { id: "hw-table" }));
      const top = rows.filter((r) => r.samples).sort((a, b) => b.samples - a.samples).slice(0, 14);
      const reasons = H.stall_reasons.filter((k) => top.some((r) => r["stall_" + k]));
      holder.append(el("h3", {}, "Stall reasons per region (share of each region's samples)"),
        top.length ? stackedBars(top.map((r) => ({ label: r.path, parts: Object.fromEntries(reasons.map((k) => [k, r["stall_" + k] || 0])) })), reasons)
          : el("p", { class: "note" }, "No samples in this data."));
    };
    root.append(el("label", { class: "toggle" }, (() => {
      const cb = el("input", { type: "checkbox", id: "hw-inclusive" });
      cb.addEventListener("change", () => { inclusive = cb.checked; draw(); });
      return cb;
    })(), " inclusive (a path includes the paths nested in it)"));
    root.append(holder);
    draw();
  }

  // ---------------------------------------------------------------- code
  const P = D.pcs;
  const S = D.source;
  const code = {};
  // PCs whose line info belongs to the source file shown (null: all of them)
  const inFile = S && S.pcs_of_file ? new Set(S.pcs_of_file) : null;
  const ofFile = (i) => !inFile || inFile.has(i);
  const baseName = (f) => f.split("/").pop();
  const lineLabel = (i) => P.line[i] < 0 ? "" : P.files && P.file[i] >= 0 ? `${baseName(P.files[P.file[i]])}:${P.line[i]}` : String(P.line[i]);
  function pcMatches(sel) {
    // -> Set of PC row indices shown for a selection
    const out = new Set();
    if (!P || !sel) return out;
    for (let i = 0; i < P.pc.length; i++) {
      const st = D.paths[P.path[i]].stack;
      if (sel.kind === "event" ? st && st.includes(sel.event)
        : sel.kind === "path" ? (P.path[i] === sel.path || (st && D.paths[sel.path].stack && prefix(D.paths[sel.path].stack, st)))
        : sel.kind === "line" ? P.line[i] === sel.line && ofFile(i)
        : sel.kind === "pc" ? i === sel.index : false) out.add(i);
    }
    return out;
  }
  function prefix(a, b) { return a.length <= b.length && a.every((x, i) => x === b[i]); }
  function lineEvents(line) {
    // event ids of the regions a source line belongs to
    if (!S) return [];
    if (S.origin === "map") return [...new Set((S.line_paths[line] || []).flatMap((p) => D.paths[p].stack || []))];
    return S.line_events[line] || [];
  }
  function lineColor(line) {
    if (!S) return null;
    if (S.origin === "map") {
      const ps = S.line_paths[line];
      if (!ps || !ps.length) return null;
      const real = ps.filter((p) => D.paths[p].stack && D.paths[p].stack.length);
      if (!real.length) return "#c0c4cc";
      real.sort((a, b) => D.paths[b].stack.length - D.paths[a].stack.length);
      return pathColor(real[0]);
    }
    const ev = S.line_events[line];
    return ev && ev.length ? eventColor(ev[ev.length - 1]) : null;
  }
  function markerStripe(no) {
    // nesting of the marker calls around a line: one thin bar per open region, outermost first
    const ev = (S.line_events || {})[no] || [];
    return el("span", { class: "rg", title: ev.map((e) => eventName[e] || "event_" + e).join(" / ") || null },
      ev.map((e) => el("i", { style: "background:" + eventColor(e) })));
  }
  function renderCode(root) {
    root.append(el("div", { id: "selection" }, "Click a region, a source line or an instruction."));
    const layout = el("div", { class: "code-layout" + (P ? "" : " nomap") });
    root.append(layout);
    // regions list: trace regions (by event) then map paths
    const list = el("div", { class: "reglist" });
    list.append(el("h4", {}, "timeline regions"));
    const seenEv = new Set();
    for (const r of D.regions) {
      if (seenEv.has(r.event)) continue;
      seenEv.add(r.event);
      list.append(el("div", { "data-event": r.event, onclick: () => select({ kind: "event", event: r.event }) }, swatch(eventColor(r.event)), r.region));
    }
    if (D.paths.length) list.append(el("h4", {}, "map paths (instructions)"));
    D.paths.forEach((p, i) => {
      if (!p.instructions) return;
      list.append(el("div", { "data-path": i, class: "path", onclick: () => select({ kind: "path", path: i }) },
        swatch(pathColor(i)), p.path, el("span", { class: "note" }, ` ${p.instructions}`)));
    });
    layout.append(el("div", { class: "pane" }, el("h3", {}, "Regions"), list));
    // source
    const srcPane = el("div", { class: "pane src", id: "source-pane" });
    if (!S) srcPane.append(el("h3", {}, "Source"), missingBox("source"));
    else {
      const maxCost = Math.max(0, ...Object.values(S.line_cost || {}));
      // without per-line cost (no map / no hardware data): the timeline total of the region each
      // marker line opens, so the source still says where the time went
      const LT = S.line_time || {};
      const useTime = !maxCost && Object.keys(LT).length > 0;
      const maxTime = Math.max(0, ...Object.values(LT).map((t) => t.total_ns));
      const DL = S.def_lines || {};
      srcPane.append(el("h3", {}, `Source: ${S.path || "(text)"}`, el("span", { class: "note" },
        S.origin === "map" ? ` · colours from the map's line info${S.cost_metric ? ", bar = " + (S.cost_metric === "inst_executed" ? "instructions executed" : "samples") : ""}` : " · colours from marker calls (no map)")),
        S.file_note ? el("div", { class: "note", id: "file-note" }, S.file_note) : "",
        useTime ? el("div", { class: "note" }, "No per-line cost (no map or no hardware data): each line that opens a region shows the region's total time on the timeline (all groups), bar scaled to the largest.") : "",
        Object.keys(DL).length ? el("div", { class: "note", id: "def-note" }, defLineNote(DL)) : "");
      code.lines = S.lines.map((t, i) => {
        const no = i + 1, c = lineColor(no), cost = (S.line_cost || {})[no], lt = useTime ? LT[no] : null;
        const bar = lt ? el("span", { class: "cost time", title: `${eventName[lt.event] || "event_" + lt.event}: ${lt.count} spans, ${fmtNs(lt.total_ns)} in all` },
            el("i", { style: `width:${Math.max(2, 52 * lt.total_ns / (maxTime || 1))}px` }), fmtNs(lt.total_ns))
          : el("span", { class: "cost", title: DL[no] ? "instructions the DSL gave this function's own line (see the note above)" : null },
            cost ? el("i", { style: `width:${Math.max(2, 52 * cost / (maxCost || 1))}px` }) : null, cost ? fmtNum(cost) : "", DL[no] ? " †" : "");
        return el("div", { class: "ln", "data-line": no, onclick: () => select({ kind: "line", line: no }) },
          el("span", { class: "no" }, no), markerStripe(no), bar,
          el("span", { class: "tx", style: c ? `border-left-color:${c};background:${c}22` : null }, t || " "));
      });
      srcPane.append(...code.lines);
    }
    layout.append(srcPane);
    // SASS
    const sassPane = el("div", { class: "pane sass", id: "sass-pane" });
    if (!P) sassPane.append(el("h3", {}, "SASS"), missingBox("map"));
    else {
      const M = P.metrics || {};
      const metricCols = ["inst_executed", M.samples_attributed ? "samples_attributed" : "samples"].filter((k) => M[k]);
      const stallKeys = Object.keys(P.stalls || {});
      sassPane.append(el("h3", {}, `SASS (${P.pc.length} instructions)`, D.missing.hardware ? el("span", { class: "note" }, " · no per-PC metrics") : null));
      // tens of thousands of rows: one HTML string (every value escaped), one delegated click handler,
      // and rows in chunks of 256 with `content-visibility: auto`, so the browser lays out and paints
      // only the chunks in view (a 20k-row <table> took seconds to lay out at every selection)
      // every column as wide as its longest value (7 px a character at 12 px monospace), so nothing is cut
      const longest = (xs) => xs.reduce((a, x) => Math.max(a, String(x).length), 0);
      const px = (chars) => Math.ceil(7.4 * chars) + 16;
      const pathW = Math.min(280, px(longest(D.paths.map((p) => p.path))));
      const lineW = Math.max(44, px(longest(P.pc.map((_, i) => lineLabel(i)))));
      const widths = [76, pathW, lineW].concat(metricCols.map(() => 70), stallKeys.length ? [px(longest(stallKeys))] : [], [460]);
      const heads = ["PC", "region", "line"].concat(metricCols.map((k) => k === "inst_executed" ? "exec" : "samples"))
        .concat(stallKeys.length ? ["top stall"] : [], ["instruction"]);
      const grid = `--cols:${widths.map((w) => w + "px").join(" ")}`;
      const html = [];
      const CHUNK = 256;
      for (let i = 0; i < P.pc.length; i++) {
        if (i % CHUNK === 0) html.push(`${i ? "</div>" : ""}<div class="chunk" style="contain-intrinsic-size:auto ${Math.min(CHUNK, P.pc.length - i) * 19}px">`);
        let top = "";
        if (stallKeys.length) {
          let bv = 0;
          for (const k of stallKeys) if (P.stalls[k][i] > bv) { bv = P.stalls[k][i]; top = k; }
        }
        html.push(`<div class="r${P.marker[i] ? " marker" : ""}" data-index="${i}" data-pc="${P.pc[i]}">` +
          `<span><i class="swatch" style="background:${esc(pathColor(P.path[i]))}"></i>${hex(P.pc[i])}</span>` +
          `<span>${esc(D.paths[P.path[i]].path)}</span><span class="n">${esc(lineLabel(i))}</span>` +
          metricCols.map((k) => `<span class="n">${M[k][i] ? esc(fmtNum(M[k][i])) : ""}</span>`).join("") +
          (stallKeys.length ? `<span>${esc(top)}</span>` : "") +
          `<span class="op">${esc(P.text ? P.text[i] : P.opcode[i])}</span></div>`);
      }
      if (P.pc.length) html.push("</div>");
      const rows = el("div", { class: "rows", style: grid });
      rows.innerHTML = html.join("");
      code.rows = Array.from(rows.querySelectorAll(".r"));
      code.table = rows;
      rows.addEventListener("click", (ev) => {
        const r = ev.target.closest(".r");
        if (r) select({ kind: "pc", index: +r.dataset.index });
      });
      sassPane.append(el("div", { class: "r head", style: grid }, heads.map((h) => el("span", {}, h))), rows);
    }
    layout.append(sassPane);
    code.list = list;
  }
  function defLineNote(DL) {
    // lines like `@cute.jit` / `def launch_tiles(...)` that own instructions: say why and where they belong
    const parts = Object.entries(DL).map(([line, d]) => {
      const byPath = Object.entries(d.by_path).sort((a, b) => (b[1][1] - a[1][1]) || (b[1][0] - a[1][0]));
      const what = byPath.slice(0, 3).map(([p, [n, c]]) => `${D.paths[+p].path} ${n} instr.` + (d.metric ? `, ${fmtNum(c)} ${d.metric === "inst_executed" ? "executed" : "samples"}` : "")).join("; ");
      return `line ${line}: ${what}`;
    });
    return "† Decorator / def lines with instructions: CuTe DSL gives code it inlines without a location of its own (argument unpacking, library helpers, the function's prologue) the jitted function's own line. " +
      "Their cost is real but not on that line; the map still knows their regions: " + parts.join(" · ") + ".";
  }
  function select(sel) { state.sel = sel; applySelection(true); }
  function applySelection(fromClick) {
    const sel = state.sel, box = document.getElementById("selection");
    if (!box) return;
    const pcs = pcMatches(sel);
    // source lines shown: lines of the selected PCs, or (no map) lines of the selected region
    const lines = new Set();
    if (sel && sel.kind === "line") lines.add(sel.line);
    pcs.forEach((i) => P.line[i] >= 1 && ofFile(i) && lines.add(P.line[i]));
    if (sel && !P && S && sel.kind === "event") for (const k of Object.keys(S.line_events)) if (S.line_events[k].includes(sel.event)) lines.add(+k);
    // touch only rows whose state changes; dimming is one class on the table (a class per row, or
    // opacity, costs seconds of style and paint work at 20k rows)
    if (code.rows) {
      (code.selRows || []).forEach((i) => pcs.has(i) || code.rows[i].classList.remove("sel"));
      pcs.forEach((i) => code.rows[i].classList.add("sel"));
      code.selRows = pcs;
      code.table.classList.toggle("has-sel", !!sel && pcs.size > 0);
    }
    if (code.lines) {
      (code.selLines || []).forEach((l) => lines.has(l) || code.lines[l - 1].classList.remove("sel"));
      lines.forEach((l) => code.lines[l - 1] && code.lines[l - 1].classList.add("sel"));
      code.selLines = lines;
    }
    code.list.querySelectorAll("div").forEach((d) => d.classList.toggle("sel",
      !!sel && ((sel.kind === "event" && +d.dataset.event === sel.event && d.dataset.event !== undefined) || (sel.kind === "path" && d.dataset.path !== undefined && +d.dataset.path === sel.path))));
    box.replaceChildren(...describe(sel, pcs, lines));
    if (fromClick !== false) {
      const first = [...pcs].sort((a, b) => a - b)[0];
      if (first !== undefined && code.rows) code.rows[first].scrollIntoView({ block: "center" });
      const fl = [...lines].sort((a, b) => a - b)[0];
      if (fl !== undefined && code.lines && code.lines[fl - 1] && sel.kind !== "line") code.lines[fl - 1].scrollIntoView({ block: "center" });
    }
  }
  function describe(sel, pcs, lines) {
    if (!sel) return ["Click a region, a source line or an instruction."];
    const M = P ? P.metrics || {} : {};
    const sum = (k) => [...pcs].reduce((a, i) => a + (M[k] ? M[k][i] : 0), 0);
    const lineList = [...lines].sort((a, b) => a - b);
    const lineText = lineList.length ? `line${lineList.length > 1 ? "s" : ""} ${lineList.length > 8 ? lineList.slice(0, 8).join(", ") + ", …" : lineList.join(", ")}` : "no source lines";
    const metrics = [];
    if (M.inst_executed) metrics.push(`${fmtNum(sum("inst_executed"))} instructions executed`);
    if (M.samples_attributed) metrics.push(`${fmtNum(sum("samples_attributed"))} samples`);
    let what;
    if (sel.kind === "event") what = `region ${eventName[sel.event] || "event_" + sel.event}`;
    else if (sel.kind === "path") what = `path ${D.paths[sel.path].path}`;
    else if (sel.kind === "line") {
      const evs = lineEvents(sel.line).map((e) => eventName[e] || "event_" + e);
      what = `line ${sel.line}` + (evs.length ? ` (in ${evs.join(", ")})` : " (in no region)");
    } else what = `instruction ${hex(P.pc[sel.index])} ${P.text ? P.text[sel.index] : P.opcode[sel.index]} in ${D.paths[P.path[sel.index]].path}`;
    const parts = [el("b", {}, what), `: ${P ? pcs.size + " instruction(s)" : "no SASS (no map)"}, ${lineText}`];
    if (metrics.length) parts.push(" · " + metrics.join(", "));
    return parts;
  }

  IKP.select = select; // for tests and the console
  IKP.show = show;
  Object.assign(IKP, { el, svg, fmtNs, fmtNum, pct, fix, table, missingBox, eventColor, eventName, swatch, regionLabel });
  show(location.hash.slice(1) || "overview");
  IKP.ready = true;
  document.body.setAttribute("data-ready", "1");
})();
