// ikp report, Timeline tab (data: html.py timeline_data). A few blocks span by span, one row per warp
// group with nested regions stacked by depth, and the launch's lanes-in-region curves. Wheel zooms at
// the pointer, drag pans, double-click resets. Strings go through textContent only.
"use strict";
(function () {
  const IKP = window.__ikp;
  if (!IKP || !IKP.addView) return;
  const D = IKP.data, T = D.timeline;
  const { el, svg, fmtNs, eventColor, eventName, swatch } = IKP;
  const ROW = 13, LABEL = 130, W = 1320;
  const groupName = (g) => D.groups[String(g)] || "group " + g;

  function niceStep(span, target) {
    const raw = span / Math.max(1, target), p = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
  }
  function axis(g, t0, t1, x, y, h) {
    const step = niceStep(t1 - t0, 8);
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const px = x(t);
      g.append(svg("line", { x1: px, x2: px, y1: y, y2: y + h, stroke: "#eceef2" }));
      if (px < W - 48) g.append(svg("text", { x: px + 2, y: y + 9 }, fmtNs(t)));  // no label cut at the edge
    }
  }
  // wheel = zoom at the pointer, drag = pan, double-click = reset; calls redraw(t0, t1)
  function zoomable(node, range, full, redraw) {
    const toT = (clientX) => {
      const r = node.getBoundingClientRect();
      return range[0] + (range[1] - range[0]) * Math.min(1, Math.max(0, (clientX - r.left - LABEL) / (r.width - LABEL)));
    };
    node.addEventListener("wheel", (e) => {
      e.preventDefault();
      const t = toT(e.clientX), f = Math.exp(e.deltaY * 0.0015);
      const span = Math.max(32, (range[1] - range[0]) * f);
      const a = Math.max(full[0], t - (t - range[0]) * span / (range[1] - range[0]));
      range[0] = a; range[1] = Math.min(full[1], a + span);
      redraw();
    }, { passive: false });
    let drag = null;
    node.addEventListener("mousedown", (e) => { drag = { x: e.clientX, r: range.slice() }; e.preventDefault(); });
    window.addEventListener("mouseup", () => (drag = null));
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const w = node.getBoundingClientRect().width - LABEL;
      let d = -(e.clientX - drag.x) / w * (drag.r[1] - drag.r[0]);
      d = Math.max(full[0] - drag.r[0], Math.min(full[1] - drag.r[1], d));
      range[0] = drag.r[0] + d; range[1] = drag.r[1] + d;
      redraw();
    });
    node.addEventListener("dblclick", () => { range[0] = full[0]; range[1] = full[1]; redraw(); });
  }

  function blockPanel(B) {
    const S = B.spans, n = S.start.length;
    const maxDepth = {};
    for (let i = 0; i < n; i++) maxDepth[S.group[i]] = Math.max(maxDepth[S.group[i]] || 0, S.depth[i]);
    const rows = B.groups.map((g) => ({ g, h: ((maxDepth[g] || 0) + 1) * ROW + 6 }));
    let y = 16;
    const top = {};
    rows.forEach((r) => { top[r.g] = y; y += r.h; });
    const H = y + 4;
    const full = [B.start_ns, B.end_ns], range = full.slice();
    const node = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "tl", "data-block": B.block });
    const draw = () => {
      const [t0, t1] = range, k = (W - LABEL - 4) / Math.max(1, t1 - t0);
      const x = (t) => LABEL + (t - t0) * k;
      const g = svg("g", {});
      axis(g, t0 - B.start_ns, t1 - B.start_ns, (t) => x(t + B.start_ns), 0, H);
      rows.forEach((r, j) => {
        g.append(svg("rect", { x: 0, y: top[r.g] - 2, width: W, height: r.h, fill: j % 2 ? "#fafbfc" : "#fff", opacity: 0.6 }));
        g.append(svg("text", { x: 4, y: top[r.g] + 10, class: "tl-group" }, groupName(r.g)));
      });
      for (let i = 0; i < n; i++) {
        const a = S.start[i], b = a + S.dur[i];
        if (b < t0 || a > t1) continue;
        const x0 = Math.max(LABEL, x(a)), x1 = Math.min(W - 4, x(b)), w = Math.max(1, x1 - x0);
        const yy = top[S.group[i]] + S.depth[i] * ROW, name = eventName[S.event[i]] || "event_" + S.event[i];
        const rect = svg("rect", { x: x0, y: yy, width: w, height: ROW - 1, fill: eventColor(S.event[i]), class: "span", "data-event": S.event[i] },
          svg("title", {}, `${groupName(S.group[i])} / ${name}: ${fmtNs(S.dur[i])} from ${fmtNs(a - B.start_ns)} (depth ${S.depth[i]})`));
        g.append(rect);
        if (w > 7 * name.length + 6) g.append(svg("text", { x: x0 + 3, y: yy + 10, fill: "#fff", class: "tl-label" }, name));
      }
      node.replaceChildren(g);
    };
    draw();
    zoomable(node, range, full, draw);
    return el("div", { class: "tl-block", "data-block": B.block },
      el("h3", {}, `${B.label} block: block ${B.block}` + (B.sm >= 0 ? ` on SM ${B.sm}` : "") + ` · ${fmtNs(B.end_ns - B.start_ns)} first begin → last end` +
        ` · starts ${fmtNs(B.start_ns)} after the launch`, B.left_out ? el("span", { class: "warn" }, ` · ${B.left_out} shortest spans left out`) : null),
      node);
  }

  function curvesPanel() {
    const C = T.curves, series = C.series, H = 34;
    const total = series.length * (H + 6) + 18;
    const full = [0, T.launch_ns], range = full.slice();
    const node = svg("svg", { width: W, height: total, viewBox: `0 0 ${W} ${total}`, id: "tl-curve-svg" });
    const draw = () => {
      const [t0, t1] = range, k = (W - LABEL - 4) / Math.max(1, t1 - t0);
      const x = (t) => LABEL + (t - t0) * k;
      const g = svg("g", {});
      axis(g, t0, t1, x, 0, total);
      for (const B of T.blocks.filter((b) => b.shown)) {  // where the blocks first shown ran
        const a = Math.max(LABEL, x(B.start_ns)), b = Math.min(W - 4, x(B.end_ns));
        if (b > a) g.append(svg("rect", { x: a, y: 12, width: b - a, height: total - 12, fill: "#2f5fd0", opacity: 0.07 },
          svg("title", {}, `${B.label} block ${B.block}`)));
      }
      series.forEach((s, j) => {
        const y0 = 14 + j * (H + 6), max = Math.max(1, s.max);
        let d = "";
        C.t.forEach((t, i) => {
          const t2 = t + C.bin_ns;
          if (t2 < t0 || t > t1) return;
          const yy = y0 + H - H * s.lanes[i] / max;
          d += `${d ? "L" : "M"}${Math.max(LABEL, x(t)).toFixed(1)},${yy.toFixed(1)}L${Math.min(W - 4, x(t2)).toFixed(1)},${yy.toFixed(1)}`;
        });
        g.append(svg("text", { x: 4, y: y0 + 12 }, `lanes in ${s.name}`));
        g.append(svg("text", { x: 4, y: y0 + 24, class: "q" }, `max ${s.max}`));
        if (d) g.append(svg("path", { d, fill: "none", stroke: eventColor(s.event), "stroke-width": 1.5, class: "curve", "data-event": s.event }));
        g.append(svg("line", { x1: LABEL, x2: W - 4, y1: y0 + H, y2: y0 + H, stroke: "#ccc" }));
      });
      node.replaceChildren(g);
    };
    draw();
    zoomable(node, range, full, draw);
    return el("div", { id: "tl-curves", class: "tl-block" }, el("h3", {}, "Lanes inside each region over the launch (max per bin; shaded: the fastest, median and slowest blocks)"), node);
  }

  function render(root) {
    root.append(el("h2", {}, "Timeline: who ran what, when"));
    if (!T) { root.append(el("p", { class: "note" }, "No regions recorded: nothing to draw.")); return; }
    const legend = el("div", { class: "tl-controls" },
      Object.keys(eventName).map((e) => el("span", {}, swatch(eventColor(+e)), eventName[e])),
      el("span", { class: "note" }, "wheel: zoom · drag: pan · double-click: reset · hover a span for its times"));
    const holder = el("div", { id: "tl-panels" });
    const panels = {};
    const byBlock = new Map(T.blocks.map((B) => [B.block, B]));
    const describe = (B) => `${B.label ? B.label + " " : ""}block ${B.block}${B.sm >= 0 ? " (SM " + B.sm + ")" : ""}, ${fmtNs(B.end_ns - B.start_ns)}`;
    const toggles = el("span", { id: "tl-toggles" });
    function addPanel(B) {
      if (panels[B.block]) { panels[B.block].style.display = ""; return; }
      panels[B.block] = blockPanel(B);
      holder.append(panels[B.block]);
      const cb = el("input", { type: "checkbox", checked: "checked", "data-block": B.block });
      cb.addEventListener("change", () => { panels[B.block].style.display = cb.checked ? "" : "none"; });
      toggles.append(el("label", {}, cb, " " + describe(B)));
    }
    // any embedded block can be added; sorted by length so the outliers are at the ends of the list
    const choices = T.blocks.slice().sort((a, b) => (a.end_ns - a.start_ns) - (b.end_ns - b.start_ns));
    const select = el("select", { id: "tl-add" }, el("option", { value: "" }, `add a block (${T.blocks.length} embedded, by length)…`),
      choices.map((B) => el("option", { value: B.block }, describe(B))));
    select.addEventListener("change", () => {
      const B = byBlock.get(+select.value);
      if (B) addPanel(B);
      select.value = "";
    });
    const pick = el("div", { class: "tl-controls", id: "tl-pick" }, el("b", {}, "blocks:"), toggles, select,
      T.all_blocks ? null : el("span", { class: "note" }, `${T.blocks.length} of ${T.num_blocks} blocks embedded (a large trace); others: build_report_data(..., timeline_blocks=[...])`));
    root.append(legend, pick, holder);
    T.blocks.filter((B) => B.shown).forEach(addPanel);
    root.append(curvesPanel());
    root.append(el("p", { class: "note" }, "One row per warp group; a region drawn below another began while that one was open (nesting depth). " +
      "Times are from the block's first begin (block rows) or the launch's first record (curves)."));
  }

  IKP.addView("timeline", "Timeline", render);
})();
