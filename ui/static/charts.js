// trackstore ui: a panel of charts, one per metric key of a set of runs, M4-downsampled by the server.
// The panel has one legend for all its charts (a sidebar listing the runs, or the groups when runs
// are grouped into bands, with the values under the cursor), and keeps what is on screen (x axis,
// smoothing, log scale, key filter, grouping, pinned charts, zoom, hidden runs) in the URL.
"use strict";

const SYSTEM = "system/";
const PREFERRED = ["critic/score/mean", "critic/rewards/mean", "val-core/", "val/", "eval/", "actor/entropy", "actor/pg_loss", "loss", "reward", "score", "acc"];
const CHART_H = 220;

function ema(ys, w) {
  if (!w) return ys;
  const out = new Array(ys.length); let last = 0, n = 0;
  for (let i = 0; i < ys.length; i++) {
    const y = ys[i];
    if (y === null || y === undefined) { out[i] = y; continue; }
    last = last * w + (1 - w) * y; n++;
    out[i] = last / (1 - Math.pow(w, n));
  }
  return out;
}
// seconds as the relative-time axis shows them: 45s, 12m, 3.5h, 2.1d
function fmtSpan(s) {
  const a = Math.abs(s);
  if (a === 0) return "0s";
  if (a < 1) return +(s * 1000).toPrecision(3) + "ms";
  if (a < 120) return +s.toPrecision(3) + "s";
  if (a < 7200) return +(s / 60).toFixed(1) + "m";
  if (a < 172800) return +(s / 3600).toFixed(1) + "h";
  return +(s / 86400).toFixed(1) + "d";
}
function fileName(s) { return s.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^_+|_+$/g, "") || "chart"; }
function download(blob, name) {
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}
// how runs are grouped for bands: by a config key, by a name pattern (its first capture group, or
// the name with the match removed: "ppo-seed(\d+)" groups ppo-seed1 and ppo-seed2), or by a tag
function groupOf(run, group) {
  if (!run || !group) return null;
  const [kind, arg] = [group.slice(0, group.indexOf(":")), group.slice(group.indexOf(":") + 1)];
  if (kind === "config") {
    const c = run.config || {};
    const hit = Object.keys(c).find(k => k === arg || k.endsWith("." + arg));
    return hit === undefined ? "(no " + arg + ")" : arg + "=" + (typeof c[hit] === "number" ? String(c[hit]) : fmtVal(c[hit]));
  }
  if (kind === "name") {
    let re; try { re = new RegExp(arg); } catch (e) { return null; }
    const m = String(run.name).match(re);
    if (!m) return String(run.name);
    return m.length > 1 && m[1] !== undefined ? m[1] : String(run.name).replace(re, "*");
  }
  if (kind === "tag") return (run.tags || []).filter(t => !arg || t.includes(arg)).sort().join(",") || "(untagged)";
  return null;
}

class Chart {
  constructor(panel, key) {
    this.panel = panel; this.key = key; this.u = null; this.range = panel.zooms.get(key) || null;
    this.loaded = false; this.busy = false; this.ignore = 0; this.origins = new Map();
    this.info = el("span", { class: "info" });
    this.reset = el("button", { class: "mini", title: "show the whole curve (or double-click the chart)", onclick: () => this.unzoom(),
                                style: this.range ? "" : "display:none" }, "reset zoom");
    this.pinBtn = el("button", { class: "mini pin", title: "pin this chart to the top", onclick: () => panel.togglePin(key) }, "pin");
    const tools = el("span", { class: "tools" }, this.pinBtn,
      el("button", { class: "mini", title: "full screen (Esc to leave)", onclick: () => this.fullscreen() }, "⤢"),
      el("button", { class: "mini", title: "save the chart as a PNG image", onclick: () => this.png() }, "PNG"),
      el("button", { class: "mini", title: "download every stored point of this chart's range as CSV", onclick: () => this.csv() }, "CSV"));
    this.plot = el("div", { class: "plot" });
    this.box = el("div", { class: "chart", dataset: { key } },
      el("div", { class: "title" }, el("span", { class: "key", title: key }, key), this.reset, this.info, tools), this.plot);
  }
  // system metrics (keys under system/, sampled by the run's own thread) are read on wall time
  x() { return this.key.startsWith(SYSTEM) ? "time" : this.panel.opts.x; }
  serverX() { return this.x() === "step" ? "step" : "time"; }
  pinned(on) { this.pinBtn.textContent = on ? "unpin" : "pin"; this.box.classList.toggle("pinned", on); }
  // the range asked of the server: relative time is each run's seconds since its first point of
  // the key, so a relative zoom covers every run's own stretch of wall time
  serverRange() {
    if (!this.range) return [null, null];
    if (this.x() !== "relative") return this.range;
    const os = [...this.origins.values()];
    if (!os.length) return [null, null];
    return [Math.min(...os) + this.range[0], Math.max(...os) + this.range[1]];
  }
  async load() {
    if (this.busy) return;
    this.busy = true;
    const p = this.panel;
    try {
      const width = Math.max(100, Math.min(2000, Math.floor((this.plot.clientWidth || 600))));
      if (this.range && this.x() === "relative" && !this.origins.size) {  // a zoom from the URL: learn the origins first
        this.take(await api("series", { run: p.refs, key: this.key, x: "time", width: 16 }, true), true);
      }
      const [lo, hi] = this.serverRange();
      let d;
      if (p.opts.group) {
        const run = [], group = [];
        for (const [g, rs] of Object.entries(p.groupsPayload())) for (const r of rs) { run.push(r); group.push(g); }
        if (!run.length) { this.data = null; this.info.textContent = ""; return this.empty(); }
        d = await api("bands", { run, group, key: this.key, x: this.x(), band: p.opts.band, width: Math.min(width, 600),
                                 lo: this.range ? this.range[0] : null, hi: this.range ? this.range[1] : null }, true);
        d.bands = true;
      } else {
        d = await api("series", { run: p.refs, key: this.key, x: this.serverX(), width, lo, hi }, true);
        this.take(d, !this.range);
      }
      // a chart taken off the page meanwhile (another selection made a new panel, a filter hid
      // it) draws nothing: it would draw stale runs where the page's own chart is (and stays
      // unloaded, so it loads afresh if shown again)
      if (!this.box.isConnected) return;
      this.draw(d);
      this.loaded = true;
    } catch (e) {
      if (this.u) { this.u.destroy(); this.u = null; this.sig = null; }
      clear(this.plot).appendChild(el("div", { class: "err" }, "could not load: " + e.message));
    } finally { this.busy = false; }
  }
  // relative time: remember each run's first time from a whole curve, then subtract it
  take(d, whole) {
    if (this.x() !== "relative") return;
    for (const s of d.series) {
      const r = s.project + "/" + s.run_id;
      if (whole && s.x.length) this.origins.set(r, s.x[0]);
      const o = this.origins.get(r);
      if (o !== undefined) s.x = s.x.map(v => v - o);
    }
  }
  draw(d) {
    const p = this.panel;
    this.data = d;
    if (d.bands) return this.drawBands(d);
    const series = d.series.filter(s => s.x.length);
    let n = 0, shown = 0, max = -Infinity;
    for (const s of d.series) { n += s.n || 0; shown += s.x.length; if (s.max !== null && s.max > max) max = s.max; }
    this.info.textContent = n ? `${fmtNum(n)} pts${shown < n ? " · " + fmtNum(shown) + " drawn (M4)" : ""} · max ${fmtNum(max)}` : "";
    if (!series.length) return this.empty();
    const log = p.opts.log, w = p.opts.smooth, raw = w > 0 && p.opts.raw;
    const cols = [], specs = [];
    for (const s of series) {
      const r = s.project + "/" + s.run_id, info = p.runInfo(s), label = info ? info.name : s.run_id;
      const fix = ys => (log ? ys.map(v => (v > 0 ? v : null)) : ys);
      if (raw) {  // the stored curve, faint, under the smoothed one
        cols.push([s.x, fix(s.y)]);
        specs.push({ label, ref: r, raw: true, stroke: color(r) + "40", width: 1, show: !p.hidden.has(r) });
      }
      cols.push([s.x, fix(ema(s.y, w))]);
      specs.push({ label, ref: r, stroke: color(r), width: 1.25, show: !p.hidden.has(r) });
    }
    this.plotData(cols.length === 1 ? cols[0] : uPlot.join(cols), specs,
                  specs.map(s => s.ref).join("|") + "|" + raw + "|" + log + "|" + this.x());
  }
  drawBands(d) {
    // per group: the mean, and a band from lo to hi (min-max or mean ± std over the group's runs)
    const p = this.panel;
    const groups = d.groups.filter(g => g.x.length);
    this.info.textContent = groups.length ? `${plural(groups.length, "group")} · ${d.band === "std" ? "mean ± std" : "mean, min-max"}` : "";
    if (!groups.length) return this.empty();
    const cols = [], specs = [], bands = [];
    for (const g of groups) {
      const c = color("group:" + g.label), show = !p.hidden.has("group:" + g.label);
      const base = specs.length + 1;
      cols.push([g.x, g.mean], [g.x, g.lo], [g.x, g.hi]);
      specs.push({ label: g.label, ref: "group:" + g.label, stroke: c, width: 1.5, show, n: g.runs },
                 { label: g.label + " lo", ref: "group:" + g.label, band: true, stroke: c + "55", width: 0.5, show },
                 { label: g.label + " hi", ref: "group:" + g.label, band: true, stroke: c + "55", width: 0.5, show });
      bands.push({ series: [base + 2, base + 1], fill: c + "30" });
    }
    this.plotData(uPlot.join(cols), specs, "bands|" + specs.map(s => s.label).join("|") + "|" + this.x() + "|" + d.band, bands);
  }
  empty() {
    if (this.u) { this.u.destroy(); this.u = null; this.sig = null; }
    clear(this.plot).appendChild(el("div", { class: "empty" }, "no finite values"));
  }
  plotData(data, specs, sig, bands) {
    const p = this.panel;
    this.specs = specs;
    if (this.u && this.sig === sig) {
      this.ignore++;
      this.u.setData(data, !this.range || this.x() !== "relative");
      if (this.range && this.x() === "relative") this.u.setScale("x", { min: this.range[0], max: this.range[1] });
      if (this.u.select.width) this.u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      this.ignore--;
    } else {
      if (this.u) this.u.destroy();
      clear(this.plot);
      this.sig = sig;
      const self = this, x = this.x();
      const axis = cssVar("--axis") || "#555", grid = cssVar("--grid") || "#eee";
      const opts = {
        width: Math.max(200, this.plot.clientWidth || 420), height: this.box.classList.contains("full") ? this.fullHeight() : CHART_H,
        scales: { x: { time: x === "time" }, y: { distr: p.opts.log ? 3 : 1 } },
        series: [{ label: x === "time" ? "time" : x === "relative" ? "relative time" : "step" },
                 ...specs.map(s => ({ label: s.label, stroke: s.stroke, width: s.width, spanGaps: true, points: { show: false }, show: s.show,
                                      value: (u, v) => (v === null || v === undefined ? "—" : fmtNum(v)) }))],
        bands: bands || [],
        axes: [{ stroke: axis, grid: { stroke: grid }, ticks: { stroke: grid },
                 values: x === "relative" ? (u, vals) => vals.map(fmtSpan) : undefined },
               { stroke: axis, grid: { stroke: grid }, ticks: { stroke: grid }, size: 64, values: (u, vals) => vals.map(v => fmtNum(v)) }],
        cursor: { drag: { x: true, y: false }, sync: { key: "panel" + p.id }, bind: { dblclick: () => () => { self.unzoom(); return null; } } },
        // one legend for the panel (the sidebar) instead of one under every chart; a single run keeps its own
        legend: { show: p.refs.length === 1 && !p.opts.group, live: true },
        hooks: {
          // a drag selection zooms: fetch that range's detail (M4 again over [lo, hi])
          setSelect: [u => { if (u.select.width > 2 && !self.ignore) self.zoomed(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")); }],
          setCursor: [u => p.hover(self, u)],
        },
      };
      this.ignore++;
      this.u = new uPlot(opts, data, this.plot);
      if (this.range && x === "relative") this.u.setScale("x", { min: this.range[0], max: this.range[1] });
      this.ignore--;
    }
    window.__ts.charts[this.key] = { u: this.u, data: this.data, panel: p.id };
  }
  setShown(ref, show) {
    if (!this.u || !this.specs) return;
    this.specs.forEach((s, i) => { if (s.ref === ref && this.u.series[i + 1].show !== show) this.u.setSeries(i + 1, { show }); });
  }
  zoomed(lo, hi) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {  // fetch the detail of the new range: M4 again over [lo, hi]
      this.range = [lo, hi];
      this.reset.style.display = "";
      this.panel.saveZooms();
      this.load();
    }, 120);
  }
  unzoom() {
    this.range = null; this.reset.style.display = "none";
    if (this.u) { this.u.destroy(); this.u = null; this.sig = null; }
    this.panel.saveZooms();
    this.load();
  }
  fullHeight() { return Math.max(CHART_H, window.innerHeight - 160); }
  fullscreen(on) {
    const full = on === undefined ? !this.box.classList.contains("full") : on;
    this.box.classList.toggle("full", full);
    document.body.classList.toggle("has-full", full);
    if (full) { this.panel.full = this; this.box.focus(); } else if (this.panel.full === this) this.panel.full = null;
    requestAnimationFrame(() => this.resize());
  }
  resize() {
    if (this.u) this.u.setSize({ width: Math.max(200, this.plot.clientWidth), height: this.box.classList.contains("full") ? this.fullHeight() : CHART_H });
  }
  // the chart as drawn, with its title and a legend of what is shown, on the page's background
  png() {
    if (!this.u) return;
    const src = this.u.ctx.canvas, ratio = src.width / this.u.width;
    const shown = (this.specs || []).filter((s, i) => !s.raw && !s.band && this.u.series[i + 1].show);
    const lineH = 16 * ratio, pad = 8 * ratio, cols = Math.max(1, Math.floor(src.width / (220 * ratio)));
    const legendH = Math.ceil(shown.length / cols) * lineH;
    const c = el("canvas", { width: src.width + 2 * pad, height: src.height + 2 * pad + 22 * ratio + legendH });
    const ctx = c.getContext("2d");
    ctx.fillStyle = cssVar("--bg") || "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    ctx.fillStyle = cssVar("--fg") || "#000"; ctx.font = `600 ${13 * ratio}px sans-serif`;
    ctx.fillText(this.key, pad, pad + 13 * ratio);
    ctx.drawImage(src, pad, pad + 22 * ratio);
    ctx.font = `${11 * ratio}px sans-serif`;
    shown.forEach((s, i) => {
      const x = pad + (i % cols) * 220 * ratio, y = pad + 22 * ratio + src.height + Math.floor(i / cols) * lineH + 12 * ratio;
      ctx.fillStyle = s.stroke; ctx.fillRect(x, y - 9 * ratio, 10 * ratio, 10 * ratio);
      ctx.fillStyle = cssVar("--fg") || "#000"; ctx.fillText(s.label.slice(0, 30), x + 14 * ratio, y);
    });
    c.toBlob(b => download(b, fileName(this.key) + ".png"), "image/png");
  }
  // every stored point of the chart's runs in its range (not the downsampled curve), from the server
  async csv() {
    const p = this.panel, [lo, hi] = this.serverRange();
    const runs = p.refs.filter(r => !p.hidden.has(r));
    const r = await fetch("/api/csv", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify({ run: runs, key: this.key, x: this.serverX(), lo, hi }) });
    if (!r.ok) { let m; try { m = (await r.json()).error; } catch (e) { m = r.statusText; } this.info.textContent = "CSV: " + m; return; }
    download(await r.blob(), fileName(this.key) + ".csv");
  }
}

let panelIds = 0;
class ChartPanel {
  // every metric key of `refs` ("project/run_id"), grouped by prefix, one chart per key, with a
  // sidebar of the runs when there are several
  constructor(refs, runInfo) {
    this.id = ++panelIds;
    this.refs = refs; this.runInfo = runInfo || (s => state.byRef.get(s.project + "/" + s.run_id));
    const params = route().params, saved = JSON.parse(localStorage.getItem("ts.chartopts") || "{}");
    const pick = (name, fallback) => (params.has(name) ? params.get(name) : fallback);
    this.opts = {
      x: ["step", "relative", "time"].includes(pick("x", saved.x)) ? pick("x", saved.x) : "step",
      smooth: Math.min(0.99, Math.max(0, +pick("smooth", saved.smooth || 0) || 0)),
      log: pick("log", saved.log ? "1" : "") === "1",
      raw: pick("raw", "1") !== "0",
      filter: pick("keys", ""), runFilter: pick("runs_re", ""),
      group: pick("group", ""), band: pick("band", "minmax") === "std" ? "std" : "minmax",
    };
    this.pins = new Set(params.has("pin") ? params.getAll("pin") : JSON.parse(localStorage.getItem("ts.pins") || "[]"));
    this.hidden = new Set(params.getAll("hide"));
    this.zooms = new Map();
    for (const z of params.getAll("zoom")) {  // "lo,hi,key"
      const [lo, hi, ...key] = z.split(","); if (isFinite(+lo) && isFinite(+hi) && +hi > +lo) this.zooms.set(key.join(","), [+lo, +hi]);
    }
    this.charts = new Map(); this.keys = [];
    this.groups = el("div", { class: "chart-groups" });
    this.side = el("aside", { class: "runs-side" });
    const smoothOut = el("span", { class: "mono" }, String(this.opts.smooth));
    const groupArg = el("input", { type: "text", id: "opt-group-arg", placeholder: "key / pattern", style: "width:110px",
      value: this.opts.group.includes(":") ? this.opts.group.slice(this.opts.group.indexOf(":") + 1) : "",
      title: "config: a config key (seed runs differ by it); name: a regular expression (its first group names the group); tag: part of a tag",
      onchange: () => this.setGroup() });
    const groupKind = el("select", { id: "opt-group", onchange: () => this.setGroup() },
      ["", "config", "name", "tag"].map(k => el("option", { value: k, selected: this.opts.group.split(":")[0] === k }, k ? "by " + k : "no grouping")));
    this.groupKind = groupKind; this.groupArg = groupArg;
    const opt = (v, label, cur) => el("option", { value: v, selected: v === cur }, label);
    this.node = el("div", { class: "panel" },
      el("div", { class: "toolbar" },
        el("label", {}, "x ", el("select", { id: "opt-x", onchange: e => { this.opts.x = e.target.value; this.unzoomAll(); this.save(); this.redraw(true); } },
          opt("step", "step", this.opts.x), opt("relative", "relative time", this.opts.x), opt("time", "wall time", this.opts.x))),
        el("label", {}, "smoothing ", el("input", { type: "range", id: "opt-smooth", min: 0, max: 0.99, step: 0.01, value: this.opts.smooth,
          oninput: e => { this.opts.smooth = +e.target.value; smoothOut.textContent = e.target.value; },
          onchange: () => { this.save(); this.redraw(false); } }), " ", smoothOut),
        el("label", { title: "the stored curve, faint, under the smoothed one" }, el("input", { type: "checkbox", id: "opt-raw", checked: this.opts.raw,
          onchange: e => { this.opts.raw = e.target.checked; this.save(); this.redraw(false); } }), " raw"),
        el("label", {}, el("input", { type: "checkbox", id: "opt-log", checked: this.opts.log,
          onchange: e => { this.opts.log = e.target.checked; this.save(); this.redraw(true); } }), " log scale"),
        el("label", { title: "draw each group's mean with a band over its runs (seeds)" }, "bands ", groupKind, " ", groupArg, " ",
          el("select", { id: "opt-band", onchange: e => { this.opts.band = e.target.value; this.save(); if (this.opts.group) this.redraw(true); } },
            opt("minmax", "min-max", this.opts.band), opt("std", "± std", this.opts.band))),
        el("input", { type: "search", id: "opt-keys", placeholder: "filter keys", value: this.opts.filter,
          oninput: e => { this.opts.filter = e.target.value; this.save(); this.layout(); } }),
        el("span", { class: "muted" }, "drag to zoom (fetches detail) · double-click to reset")),
      el("div", { class: "panel-body" + (refs.length > 1 ? " with-side" : "") }, refs.length > 1 ? this.side : null, this.groups));
    this.observer = new IntersectionObserver(entries => {
      for (const en of entries) if (en.isIntersecting) { const c = en.target.__chart; if (c && !c.loaded) c.load(); }
    }, { rootMargin: "400px" });
    this.onKey = e => {
      if (!this.node.isConnected) { document.removeEventListener("keydown", this.onKey); return; }  // the page was left
      if (e.key === "Escape" && this.full) this.full.fullscreen(false);
    };
    document.addEventListener("keydown", this.onKey);
    window.__ts.charts = {};
    window.__ts.panel = this;
  }
  // the panel's options, in the URL (shareable) and the x/smoothing/log choice also in localStorage
  save() {
    localStorage.setItem("ts.chartopts", JSON.stringify({ x: this.opts.x, smooth: this.opts.smooth, log: this.opts.log }));
    localStorage.setItem("ts.pins", JSON.stringify([...this.pins]));
    setParams({ x: this.opts.x === "step" ? "" : this.opts.x, smooth: this.opts.smooth ? String(this.opts.smooth) : "",
                log: this.opts.log, raw: this.opts.raw ? "" : "0", keys: this.opts.filter, runs_re: this.opts.runFilter,
                group: this.opts.group, band: this.opts.group && this.opts.band === "std" ? "std" : "",
                pin: [...this.pins], hide: [...this.hidden] });
  }
  saveZooms() {
    const z = [];
    for (const c of this.charts.values()) if (c.range) z.push(`${c.range[0]},${c.range[1]},${c.key}`);
    setParams({ zoom: z });
  }
  unzoomAll() {  // a zoom is a range of the old x axis
    for (const c of this.charts.values()) { c.range = null; c.reset.style.display = "none"; }
    this.saveZooms();
  }
  setGroup() {
    const kind = this.groupKind.value, arg = this.groupArg.value.trim();
    this.opts.group = kind ? kind + ":" + arg : "";
    this.hidden = new Set([...this.hidden].filter(h => !h.startsWith("group:")));
    this.save(); this.renderSide(); this.redraw(true);
  }
  // the groups of the visible runs, for the bands: {label: ["project/run_id", ...]}
  groupsPayload() {
    const out = {};
    for (const r of this.refs) {
      if (this.hidden.has(r)) continue;
      const g = groupOf(this.runInfo({ project: r.slice(0, r.indexOf("/")), run_id: r.slice(r.indexOf("/") + 1) }), this.opts.group);
      if (g === null) continue;
      (out[g] = out[g] || []).push(r);
    }
    return out;
  }
  entries() {
    // what the sidebar lists: the runs, or the groups when bands are drawn
    if (this.opts.group) return Object.entries(this.groupsPayload()).map(([g, rs]) => ({ ref: "group:" + g, name: g, note: plural(rs.length, "run") }));
    return this.refs.map(r => {
      const info = this.runInfo({ project: r.slice(0, r.indexOf("/")), run_id: r.slice(r.indexOf("/") + 1) });
      return { ref: r, name: info ? info.name : r, note: "" };
    });
  }
  renderSide() {
    if (this.refs.length < 2) return;
    let re = null, bad = false;
    try { re = this.opts.runFilter ? new RegExp(this.opts.runFilter, "i") : null; } catch (e) { bad = true; }
    const all = this.entries(), matching = all.filter(e => !re || re.test(e.name) || re.test(e.ref));
    const filter = el("input", { type: "search", id: "side-filter", placeholder: "regex over run names", value: this.opts.runFilter, class: bad ? "bad" : "",
      title: bad ? "not a valid regular expression" : "a regular expression, case-insensitive",
      oninput: e => { this.opts.runFilter = e.target.value; this.save(); const pos = e.target.selectionStart; this.renderSide();
                      const f = document.getElementById("side-filter"); f.focus(); f.setSelectionRange(pos, pos); } });
    const setAll = show => { for (const e of matching) this.setShown(e.ref, show); this.save(); this.renderSide(); };
    this.hoverHead = el("div", { class: "side-x mono muted" }, "hover a chart for values");
    this.rows = new Map();
    const list = el("div", { class: "side-list" }, matching.slice(0, 500).map(e => {
      const val = el("span", { class: "side-val mono" });
      const row = el("label", { class: "side-run" + (this.hidden.has(e.ref) ? " off" : ""), dataset: { ref: e.ref }, title: e.ref },
        el("input", { type: "checkbox", checked: !this.hidden.has(e.ref), onchange: ev => { this.setShown(e.ref, ev.target.checked); this.save();
                                                                                              row.classList.toggle("off", !ev.target.checked); } }),
        el("span", { class: "swatch", style: `background:${color(e.ref)}` }), el("span", { class: "side-name" }, e.name),
        e.note ? el("span", { class: "muted" }, " " + e.note) : null, val);
      this.rows.set(e.ref, val);
      return row;
    }));
    const shownCount = all.filter(e => !this.hidden.has(e.ref)).length;
    clear(this.side).append(filter,
      el("div", { class: "side-tools" },
        el("button", { class: "mini", id: "side-show", onclick: () => setAll(true) }, "show all"),
        el("button", { class: "mini", id: "side-hide", onclick: () => setAll(false) }, "hide all"),
        el("span", { class: "muted" }, `${shownCount} of ${all.length} shown` + (matching.length < all.length ? ` · ${matching.length} match` : ""))),
      this.hoverHead, list, matching.length > 500 ? el("div", { class: "muted" }, `first 500 of ${matching.length}`) : "");
  }
  setShown(ref, show) {
    if (show) this.hidden.delete(ref); else this.hidden.add(ref);
    for (const c of this.charts.values()) c.setShown(ref, show);
    if (this.opts.group && !ref.startsWith("group:")) this.redraw(true);
  }
  // the shared legend follows the cursor of whichever chart it is over
  hover(chart, u) {
    if (!this.rows || !chart.specs) return;
    const i = u.cursor.idx;
    if (i === null || i === undefined) { for (const v of this.rows.values()) v.textContent = ""; this.hoverHead.textContent = "hover a chart for values"; return; }
    const xv = u.data[0][i], x = chart.x();
    this.hoverHead.textContent = chart.key + " @ " + (x === "time" ? new Date(xv * 1000).toISOString().replace("T", " ").slice(0, 19)
                                                                    : x === "relative" ? fmtSpan(xv) : "step " + fmtNum(xv));
    const seen = new Set();
    chart.specs.forEach((s, k) => {
      if (s.raw || s.band || seen.has(s.ref)) return;
      seen.add(s.ref);
      const ys = u.data[k + 1];
      let j = i; while (j >= 0 && (ys[j] === null || ys[j] === undefined)) j--;  // the run's last point at or before the cursor
      const v = this.rows.get(s.ref);
      if (v) v.textContent = j >= 0 ? fmtNum(ys[j]) : "";
    });
    for (const [ref, v] of this.rows) if (!seen.has(ref)) v.textContent = "";
  }
  togglePin(key) {
    if (this.pins.has(key)) this.pins.delete(key); else this.pins.add(key);
    this.save(); this.layout();
  }
  async start() {
    this.renderSide();
    if (!this.refs.length) { clear(this.groups).appendChild(el("div", { class: "empty" }, "select runs to chart them")); return; }
    await this.refreshKeys();
  }
  async refreshKeys() {
    const d = await api("keys", { run: this.refs }, true);
    const changed = d.keys.join("\n") !== this.keys.join("\n");
    this.keys = d.keys;
    if (changed) this.layout();
  }
  layout() {
    clear(this.groups);
    const f = this.opts.filter.toLowerCase();
    const keys = this.keys.filter(k => !f || k.toLowerCase().includes(f));
    if (!keys.length) { this.groups.appendChild(el("div", { class: "empty" }, this.keys.length ? "no key matches" : "these runs have no metrics yet")); return; }
    const groups = new Map();
    const pinned = keys.filter(k => this.pins.has(k));
    if (pinned.length) groups.set("pinned", pinned);
    for (const k of keys) {
      if (this.pins.has(k)) continue;
      const g = k.includes("/") ? k.slice(0, k.indexOf("/") + 1) : "(no prefix)";
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(k);
    }
    const names = [...groups.keys()].sort((a, b) => {
      const pa = PREFERRED.findIndex(p => a.startsWith(p.split("/")[0] + "/")), pb = PREFERRED.findIndex(p => b.startsWith(p.split("/")[0] + "/"));
      return (b === "pinned") - (a === "pinned") || (a === SYSTEM) - (b === SYSTEM) || (pa < 0 ? 99 : pa) - (pb < 0 ? 99 : pb) || a.localeCompare(b);
    });
    for (const g of names) {
      const grid = el("div", { class: "charts" });
      for (const k of groups.get(g)) {
        let c = this.charts.get(k);
        if (!c) { c = new Chart(this, k); this.charts.set(k, c); }
        c.box.__chart = c;
        c.pinned(this.pins.has(k));
        grid.appendChild(c.box);
        this.observer.observe(c.box);
        if (c.u) { window.__ts.charts[k] = { u: c.u, data: c.data, panel: this.id }; requestAnimationFrame(() => c.resize()); }
      }
      const n = groups.get(g).length;
      const title = g === "pinned" ? `pinned (${n})` : g === SYSTEM ? `system (${n}): the machine, on wall time` : `${g} (${n})`;
      this.groups.appendChild(el("details", { class: "group", open: true, dataset: { group: g } },
        el("summary", {}, title), grid));
    }
  }
  redraw(rebuild) {
    for (const c of this.charts.values()) {
      if (rebuild) { if (c.u) c.u.destroy(); c.u = null; c.sig = null; }
      if (c.loaded) { if (rebuild) c.load(); else if (c.data) c.draw(c.data); }
    }
  }
  async poll(live) {
    if (!live) return;
    await this.refreshKeys();
    for (const c of this.charts.values()) if (c.loaded && c.box.isConnected) c.load();
  }
  resize() { for (const c of this.charts.values()) c.resize(); }
}
// the axes and grid take the theme's colours when drawn: draw again when the theme changes
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => state.panel && state.panel.redraw(true));
window.addEventListener("resize", () => { clearTimeout(window.__rs); window.__rs = setTimeout(() => state.panel && state.panel.resize(), 150); });
