// trackstore ui: the Histograms page: per key a heat map (steps left to right), an overlay (a few
// steps' distributions as lines over each other) or an offset view (each step's distribution
// shifted down, the latest in front), with the hovered bin's step, value range, count and density.
"use strict";

// ------------------------------------------------------------------ histograms
const HIST_MODES = [["heat", "heat map"], ["overlay", "overlay"], ["offset", "offset"]];
const HIST_OVERLAY = 8, HIST_OFFSET = 32;  // steps drawn in those views, evenly spread, the last one kept

function histTheme() {
  return { bg: cssVar("--bg") || "#fff", fg: cssVar("--fg") || "#1d2127", muted: cssVar("--muted") || "#6b7280",
           grid: cssVar("--grid") || "#eee", axis: cssVar("--axis") || "#555", ink: cssVar("--heat") || "37, 99, 235" };
}
function spread(rows, n) {
  // at most n rows, evenly spread over the steps, first and last included
  if (rows.length <= n) return rows.slice();
  const out = [];
  for (let i = 0; i < n; i++) out.push(rows[Math.round(i * (rows.length - 1) / (n - 1))]);
  return out;
}
function histRow(r) {
  // a step's bins with their counts and densities (count / (total count × bin width))
  const counts = r.counts.map(c => (typeof c === "number" && isFinite(c) ? c : 0));
  const total = counts.reduce((a, b) => a + b, 0);
  const dens = counts.map((c, j) => { const w = r.edges[j + 1] - r.edges[j]; return total && w > 0 ? c / (total * w) : 0; });
  return { step: r.step, edges: r.edges, counts, total, dens };
}
function binAt(h, v) {
  // the index of h's bin holding value v, or -1
  const e = h.edges;
  if (!e.length || v < e[0] || v > e[e.length - 1]) return -1;
  let lo = 0, hi = e.length - 2;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (e[m] <= v) lo = m; else hi = m - 1; }
  return lo;
}
function describeBin(h, j) {
  if (j < 0) return `step ${fmtNum(h.step)} · no values here`;
  const last = j === h.counts.length - 1 ? "]" : ")";
  return `step ${fmtNum(h.step)} · value [${fmtNum(h.edges[j])}, ${fmtNum(h.edges[j + 1])}${last} · count ${fmtNum(h.counts[j])}` +
         ` of ${fmtNum(h.total)} · density ${fmtNum(h.dens[j])}`;
}

class HistView {
  constructor(key, rows) {
    this.key = key;
    this.rows = rows.filter(r => r.edges && r.edges.length > 1).map(histRow);
    const modes = JSON.parse(localStorage.getItem("ts.histmode") || "{}");
    this.mode = HIST_MODES.some(([m]) => m === modes[key]) ? modes[key] : "heat";
    this.hover = null;
    this.canvas = el("canvas", { class: "heat", dataset: { key } });
    this.readout = el("div", { class: "readout muted" }, "hover the chart for values");
    this.buttons = HIST_MODES.map(([m, label]) => el("button", { dataset: { mode: m }, onclick: () => this.setMode(m) }, label));
    this.node = el("div", { class: "hist", dataset: { key } },
      el("div", { class: "toolbar" }, el("span", { class: "seg" }, this.buttons),
        el("span", { class: "muted" }, `${plural(this.rows.length, "step")}`)),
      el("div", { class: "plotbox" }, this.canvas), this.readout);
    this.canvas.addEventListener("mousemove", e => { const b = this.canvas.getBoundingClientRect(); this.hover = [e.clientX - b.left, e.clientY - b.top]; this.draw(); });
    this.canvas.addEventListener("mouseleave", () => { this.hover = null; this.readout.textContent = "hover the chart for values"; this.draw(); });
    let lo = Infinity, hi = -Infinity;
    for (const r of this.rows) { lo = Math.min(lo, r.edges[0]); hi = Math.max(hi, r.edges[r.edges.length - 1]); }
    if (!(hi > lo)) { lo = isFinite(lo) ? lo - 0.5 : 0; hi = lo + 1; }
    this.lo = lo; this.hi = hi;
  }
  setMode(m) {
    this.mode = m;
    const modes = JSON.parse(localStorage.getItem("ts.histmode") || "{}");
    modes[this.key] = m; localStorage.setItem("ts.histmode", JSON.stringify(modes));
    this.hover = null; this.readout.textContent = "hover the chart for values";
    this.draw();
  }
  size() {
    const W = Math.max(360, Math.min(1100, (this.node.parentNode && this.node.parentNode.clientWidth) || 900));
    const H = this.mode === "offset" ? 340 : 260;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(W * dpr) || this.canvas.height !== Math.round(H * dpr)) {
      this.canvas.width = Math.round(W * dpr); this.canvas.height = Math.round(H * dpr);
      this.canvas.style.width = W + "px"; this.canvas.style.height = H + "px";
    }
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, W, H };
  }
  draw() {
    for (const b of this.buttons) b.className = b.dataset.mode === this.mode ? "on" : "";
    const { ctx, W, H } = this.size();
    const t = histTheme();
    ctx.fillStyle = t.bg; ctx.fillRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "alphabetic";
    this.canvas.dataset.mode = this.mode;
    if (!this.rows.length) { ctx.fillStyle = t.muted; ctx.fillText("no bins", 10, 20); this.canvas.dataset.lines = "0"; return; }
    const p = { l: 64, r: this.mode === "offset" ? 70 : 12, t: 10, b: 24 };
    p.w = W - p.l - p.r; p.h = H - p.t - p.b;
    if (this.mode === "heat") this.drawHeat(ctx, t, p, W, H);
    else this.drawLines(ctx, t, p, W, H);
  }
  valueAxisX(ctx, t, p, H) {
    // values along x (overlay and offset): five labelled ticks
    ctx.strokeStyle = t.grid; ctx.fillStyle = t.axis; ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const x = p.l + i * p.w / 4, v = this.lo + i * (this.hi - this.lo) / 4, s = fmtNum(v);
      ctx.beginPath(); ctx.moveTo(Math.round(x) + 0.5, p.t); ctx.lineTo(Math.round(x) + 0.5, p.t + p.h); ctx.stroke();
      const w = ctx.measureText(s).width;
      ctx.fillText(s, Math.min(Math.max(x - w / 2, 2), p.l + p.w - w), H - 7);
    }
  }
  drawHeat(ctx, t, p, W, H) {
    // steps left to right, values bottom to top, darker = more of the step's mass in that bin
    const rows = this.rows, lo = this.lo, hi = this.hi;
    const NB = Math.max(1, Math.min(120, Math.floor(p.h)));
    const colW = p.w / rows.length;
    rows.forEach((r, i) => {
      const bins = new Float64Array(NB);
      for (let j = 0; j < r.counts.length; j++) {  // spread each bin's count over the rows it covers
        const b0 = Math.min(NB - 1, Math.max(0, Math.floor((r.edges[j] - lo) / (hi - lo) * NB)));
        const b1 = Math.min(NB - 1, Math.max(b0, Math.ceil((r.edges[j + 1] - lo) / (hi - lo) * NB) - 1));
        for (let b = b0; b <= b1; b++) bins[b] += r.counts[j] / (b1 - b0 + 1);
      }
      let peak = 0; for (const v of bins) if (v > peak) peak = v;
      for (let b = 0; b < NB; b++) {
        if (!bins[b]) continue;
        ctx.fillStyle = `rgba(${t.ink}, ${0.08 + 0.92 * bins[b] / (peak || 1)})`;
        ctx.fillRect(p.l + i * colW, p.t + p.h - (b + 1) * p.h / NB, Math.ceil(colW), Math.ceil(p.h / NB));
      }
    });
    ctx.fillStyle = t.axis;
    ctx.fillText(fmtNum(hi), 4, p.t + 9); ctx.fillText(fmtNum(lo), 4, p.t + p.h);
    ctx.fillText(fmtNum((lo + hi) / 2), 4, p.t + p.h / 2 + 4);
    const first = "step " + fmtNum(rows[0].step), last = "step " + fmtNum(rows[rows.length - 1].step);
    ctx.fillText(first, p.l, H - 7); ctx.fillText(last, W - p.r - ctx.measureText(last).width, H - 7);
    this.canvas.dataset.lines = String(rows.length);
    if (!this.hover) return;
    const [x, y] = this.hover;
    const i = Math.floor((x - p.l) / colW);
    if (i < 0 || i >= rows.length || y < p.t || y > p.t + p.h) { this.readout.textContent = "hover the chart for values"; return; }
    const v = lo + (p.t + p.h - y) / p.h * (hi - lo);
    const r = rows[i], j = binAt(r, v);
    ctx.strokeStyle = t.fg; ctx.lineWidth = 1;
    if (j >= 0) {
      const y0 = p.t + p.h - (r.edges[j + 1] - lo) / (hi - lo) * p.h, y1 = p.t + p.h - (r.edges[j] - lo) / (hi - lo) * p.h;
      ctx.strokeRect(p.l + i * colW + 0.5, y0 + 0.5, Math.max(2, colW - 1), Math.max(2, y1 - y0 - 1));
    } else ctx.strokeRect(p.l + i * colW + 0.5, p.t + 0.5, Math.max(2, colW - 1), p.h - 1);
    this.readout.textContent = describeBin(r, j);
  }
  drawLines(ctx, t, p, W, H) {
    // overlay: a few steps' densities over one another, older lighter; offset: each step on its own
    // baseline, the oldest at the top (behind), the latest at the bottom (in front)
    const offset = this.mode === "offset";
    const rows = spread(this.rows, offset ? HIST_OFFSET : HIST_OVERLAY);
    const lo = this.lo, hi = this.hi, n = rows.length;
    let peak = 0; for (const r of rows) for (const d of r.dens) if (d > peak) peak = d;
    peak = peak || 1;
    const X = v => p.l + (v - lo) / (hi - lo) * p.w;
    const gap = offset ? (n > 1 ? p.h * 0.75 / (n - 1) : 0) : 0;
    const amp = offset ? Math.min(p.h * 0.6, Math.max(gap * 3, p.h * 0.25)) : p.h;
    const base = i => (offset ? p.t + p.h - (n - 1 - i) * gap : p.t + p.h);
    const Y = (i, d) => base(i) - d / peak * amp;
    this.valueAxisX(ctx, t, p, H);
    if (!offset) {  // a density scale for the overlay
      ctx.fillStyle = t.axis;
      ctx.fillText(fmtNum(peak), 4, p.t + 9); ctx.fillText("0", 4, p.t + p.h);
      ctx.save(); ctx.translate(12, p.t + p.h / 2 + 20); ctx.rotate(-Math.PI / 2); ctx.fillText("density", 0, 0); ctx.restore();
    }
    const path = (r, i) => {
      ctx.beginPath(); ctx.moveTo(X(r.edges[0]), base(i));
      for (let j = 0; j < r.dens.length; j++) { const y = Y(i, r.dens[j]); ctx.lineTo(X(r.edges[j]), y); ctx.lineTo(X(r.edges[j + 1]), y); }
      ctx.lineTo(X(r.edges[r.edges.length - 1]), base(i));
    };
    // which line the pointer is on: the nearest at its x (overlay), the ridge whose baseline is nearest below it (offset)
    let hot = -1, hotBin = -1;
    if (this.hover) {
      const [x, y] = this.hover;
      const v = lo + (x - p.l) / p.w * (hi - lo);
      if (x >= p.l && x <= p.l + p.w && y >= p.t - (offset ? amp : 0) && y <= p.t + p.h + 4) {
        let best = Infinity;
        rows.forEach((r, i) => {
          const j = binAt(r, v);
          const dist = offset ? (y <= base(i) + 2 ? base(i) - y : Infinity) : Math.abs(y - Y(i, j >= 0 ? r.dens[j] : 0));
          if (dist < best || (offset && dist === best)) { best = dist; hot = i; hotBin = j; }
        });
      }
    }
    rows.forEach((r, i) => {
      const age = n > 1 ? i / (n - 1) : 1;  // 0 oldest .. 1 latest
      path(r, i);
      if (offset) { ctx.fillStyle = t.bg; ctx.fill(); ctx.fillStyle = `rgba(${t.ink}, ${0.15 + 0.35 * age})`; ctx.fill(); }
      ctx.strokeStyle = `rgba(${t.ink}, ${offset ? 0.55 + 0.45 * age : 0.25 + 0.75 * age})`;
      ctx.lineWidth = i === hot ? 2.5 : (offset ? 1 : 1.5);
      ctx.stroke();
      if (offset && (i === n - 1 || i === 0 || i % Math.max(1, Math.ceil(n / 8)) === 0)) {
        ctx.fillStyle = t.axis; ctx.fillText("step " + fmtNum(r.step), W - p.r + 6, base(i));
      }
    });
    if (!offset && n) {  // which shade is which step
      const a = "step " + fmtNum(rows[0].step), b = "→ step " + fmtNum(rows[n - 1].step);
      ctx.fillStyle = `rgba(${t.ink}, 0.35)`; ctx.fillText(a, W - p.r - ctx.measureText(a + "  " + b).width, p.t + 9);
      ctx.fillStyle = `rgba(${t.ink}, 1)`; ctx.fillText(b, W - p.r - ctx.measureText(b).width, p.t + 9);
    }
    this.canvas.dataset.lines = String(n);
    if (hot >= 0) {
      const r = rows[hot];
      if (hotBin >= 0) {  // the hovered bin, outlined on its line
        const y = Y(hot, r.dens[hotBin]);
        ctx.strokeStyle = t.fg; ctx.lineWidth = 1;
        ctx.strokeRect(X(r.edges[hotBin]) + 0.5, y - 3.5, Math.max(2, X(r.edges[hotBin + 1]) - X(r.edges[hotBin]) - 1), 7);
      }
      this.readout.textContent = describeBin(r, hotBin);
    } else if (this.hover) this.readout.textContent = "hover the chart for values";
  }
}

async function pageHistograms(project, runId, params) {
  runNav(project, runId, "histograms");
  const id = project + "/" + runId;
  const d = await api("run", { run: id });
  const keys = d.histogram_keys || [];
  const box = el("div");
  clear($app).append(el("h1", {}, "Histograms"), el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)), box);
  if (!keys.length) { box.appendChild(el("div", { class: "empty" }, "this run has no histograms")); return; }
  const views = [];
  for (const k of keys) {
    const h = await api("histograms", { run: id, key: k });
    const v = new HistView(k, h.rows);
    box.append(el("h2", {}, k), v.node);
    v.draw();
    views.push(v);
  }
  histViews = views;
  state.view = null;
}
// canvases are drawn in the theme's colours and at the page's width: draw again when either changes
let histViews = [];
function redrawHistograms() {
  if (histViews.length && histViews[0].node.isConnected) histViews.forEach(v => v.draw()); else histViews = [];
}
window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redrawHistograms);
window.addEventListener("resize", () => { clearTimeout(window.__hrs); window.__hrs = setTimeout(redrawHistograms, 150); });
