// trackstore ui: the Histograms page: one heat map per key, steps left to right.
"use strict";

// ------------------------------------------------------------------ histograms
function heatmap(rows, canvas) {
  // steps left to right, values bottom to top, darker = more of the step's mass in that bin
  const W = canvas.width, H = canvas.height, padL = 60, padB = 20, plotW = W - padL - 8, plotH = H - padB - 8;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
  let lo = Infinity, hi = -Infinity;
  for (const r of rows) { if (r.edges.length) { lo = Math.min(lo, r.edges[0]); hi = Math.max(hi, r.edges[r.edges.length - 1]); } }
  if (!(hi > lo)) { hi = lo + 1; }
  const NB = Math.min(120, plotH);
  const colW = plotW / Math.max(1, rows.length);
  rows.forEach((r, i) => {
    const bins = new Float64Array(NB); let total = 0;
    for (let j = 0; j < r.counts.length; j++) {  // spread each bin's count over the rows it covers
      const c = typeof r.counts[j] === "number" ? r.counts[j] : 0;
      const b0 = Math.min(NB - 1, Math.max(0, Math.floor((r.edges[j] - lo) / (hi - lo) * NB)));
      const b1 = Math.min(NB - 1, Math.max(b0, Math.ceil((r.edges[j + 1] - lo) / (hi - lo) * NB) - 1));
      for (let b = b0; b <= b1; b++) bins[b] += c / (b1 - b0 + 1);
      total += c;
    }
    const peak = Math.max(...bins) || 1;
    for (let b = 0; b < NB; b++) {
      if (!bins[b]) continue;
      const a = bins[b] / peak;
      ctx.fillStyle = `rgba(37, 99, 235, ${0.08 + 0.92 * a})`;
      ctx.fillRect(padL + i * colW, 8 + plotH - (b + 1) * plotH / NB, Math.ceil(colW), Math.ceil(plotH / NB));
    }
  });
  ctx.fillStyle = "#333"; ctx.font = "11px sans-serif";
  ctx.fillText(fmtNum(hi), 2, 16); ctx.fillText(fmtNum(lo), 2, 8 + plotH);
  if (rows.length) { ctx.fillText("step " + rows[0].step, padL, H - 5); const t = "step " + rows[rows.length - 1].step; ctx.fillText(t, W - 8 - ctx.measureText(t).width, H - 5); }
}
async function pageHistograms(project, runId, params) {
  runNav(project, runId, "histograms");
  const id = project + "/" + runId;
  const d = await api("run", { run: id });
  const keys = d.histogram_keys || [];
  const box = el("div");
  clear($app).append(el("h1", {}, "Histograms"), el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)), box);
  if (!keys.length) { box.appendChild(el("div", { class: "empty" }, "this run has no histograms")); return; }
  for (const k of keys) {
    const h = await api("histograms", { run: id, key: k });
    const canvas = el("canvas", { class: "heat", width: 900, height: 240 });
    box.append(el("h2", {}, k), el("div", { class: "muted" }, `${h.rows.length} steps · each column is one step's distribution`), canvas);
    heatmap(h.rows, canvas);
  }
  state.view = null;
}
