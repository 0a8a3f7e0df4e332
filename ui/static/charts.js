// trackstore ui: a panel of charts, one per metric key of a set of runs, M4-downsampled by the server.
"use strict";

// ------------------------------------------------------------------ charts
const SYSTEM = "system/";
const PREFERRED = ["critic/score/mean", "critic/rewards/mean", "val-core/", "val/", "eval/", "actor/entropy", "actor/pg_loss", "loss", "reward", "score", "acc"];

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

class Chart {
  constructor(panel, key) {
    this.panel = panel; this.key = key; this.u = null; this.range = null; this.loaded = false; this.busy = false; this.ignore = 0;
    this.info = el("span", { class: "info" });
    this.reset = el("button", { title: "show the whole curve (or double-click the chart)", onclick: () => this.unzoom(), style: "display:none" }, "reset zoom");
    this.plot = el("div", { class: "plot" });
    this.box = el("div", { class: "chart", dataset: { key } },
      el("div", { class: "title" }, el("span", { class: "key", title: key }, key), this.reset, this.info), this.plot);
  }
  // system metrics (keys under system/, sampled by the run's own thread) are read on wall time
  x() { return this.key.startsWith(SYSTEM) ? "time" : this.panel.opts.x; }
  async load() {
    if (this.busy) return;
    this.busy = true;
    const p = this.panel;
    try {
      const width = Math.max(100, Math.min(2000, Math.floor((this.plot.clientWidth || 600))));
      const d = await api("series", { run: p.refs, key: this.key, x: this.x(), width,
                                      lo: this.range ? this.range[0] : null, hi: this.range ? this.range[1] : null }, true);
      this.draw(d);
      this.loaded = true;
    } catch (e) {
      clear(this.plot).appendChild(el("div", { class: "err" }, "could not load: " + e.message));
    } finally { this.busy = false; }
  }
  draw(d) {
    const p = this.panel;
    const series = d.series.filter(s => s.x.length);
    this.data = d;
    let n = 0, shown = 0, max = -Infinity;
    for (const s of d.series) { n += s.n || 0; shown += s.x.length; if (s.max !== null && s.max > max) max = s.max; }
    this.info.textContent = n ? `${fmtNum(n)} pts${shown < n ? " · " + fmtNum(shown) + " drawn (M4)" : ""} · max ${fmtNum(max)}` : "";
    if (!series.length) {
      if (this.u) { this.u.destroy(); this.u = null; }
      clear(this.plot).appendChild(el("div", { class: "empty" }, "no finite values"));
      return;
    }
    const log = p.opts.log, w = p.opts.smooth;
    const tables = series.map(s => {
      let ys = ema(s.y, w);
      if (log) ys = ys.map(v => (v > 0 ? v : null));
      return [s.x, ys];
    });
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    const labels = series.map(s => { const r = p.runInfo(s); return r ? r.name : s.run_id; });
    const sig = series.map(s => s.project + "/" + s.run_id).join("|") + "|" + log + "|" + this.x();
    if (this.u && this.sig === sig) {
      this.ignore++;
      this.u.setData(data, true);  // the data covers exactly the range asked (zoomed or whole)
      if (this.u.select.width) this.u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      this.ignore--;
    } else {
      if (this.u) this.u.destroy();
      clear(this.plot);
      this.sig = sig;
      const self = this;
      const opts = {
        width: Math.max(200, this.plot.clientWidth || 420), height: 220,
        scales: { x: { time: this.x() === "time" }, y: { distr: log ? 3 : 1 } },
        series: [{ label: this.x() === "time" ? "time" : "step" },
                 ...series.map((s, i) => ({ label: labels[i], stroke: color(s.project + "/" + s.run_id), width: 1.25,
                                            spanGaps: true, points: { show: false },
                                            value: (u, v) => (v === null || v === undefined ? "—" : fmtNum(v)) }))],
        axes: [{ stroke: "#555", grid: { stroke: "#eee" } }, { stroke: "#555", grid: { stroke: "#eee" }, size: 64,
                 values: (u, vals) => vals.map(v => fmtNum(v)) }],
        cursor: { drag: { x: true, y: false }, bind: { dblclick: () => () => { self.unzoom(); return null; } } },
        legend: { show: true, live: true },
        // a drag selection zooms: fetch that range's detail (M4 again over [lo, hi])
        hooks: { setSelect: [u => { if (u.select.width > 2 && !self.ignore) self.zoomed(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")); }] },
      };
      this.ignore++;
      this.u = new uPlot(opts, data, this.plot);
      this.ignore--;
    }
    window.__ts.charts[this.key] = { u: this.u, data: d, panel: p.id };
  }
  zoomed(lo, hi) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {  // fetch the detail of the new range: M4 again over [lo, hi]
      this.range = [lo, hi];
      this.reset.style.display = "";
      this.load();
    }, 120);
  }
  unzoom() {
    this.range = null; this.reset.style.display = "none";
    if (this.u) { this.u.destroy(); this.u = null; this.sig = null; }
    this.load();
  }
  resize() { if (this.u) this.u.setSize({ width: Math.max(200, this.plot.clientWidth), height: 220 }); }
}

let panelIds = 0;
class ChartPanel {
  // every metric key of `refs` ("project/run_id"), grouped by prefix, one chart per key
  constructor(refs, runInfo) {
    this.id = ++panelIds;
    this.refs = refs; this.runInfo = runInfo || (s => state.byRef.get(s.project + "/" + s.run_id));
    this.opts = Object.assign({ x: "step", smooth: 0, log: false, filter: "" }, JSON.parse(localStorage.getItem("ts.chartopts") || "{}"));
    this.charts = new Map(); this.keys = [];
    this.groups = el("div");
    const save = () => localStorage.setItem("ts.chartopts", JSON.stringify({ x: this.opts.x, smooth: this.opts.smooth, log: this.opts.log }));
    const smoothOut = el("span", { class: "mono" }, String(this.opts.smooth));
    this.node = el("div", { class: "panel" },
      el("div", { class: "toolbar" },
        el("label", {}, "x ", el("select", { id: "opt-x", onchange: e => { this.opts.x = e.target.value; save(); this.redraw(true); } },
          el("option", { value: "step", selected: this.opts.x === "step" }, "step"),
          el("option", { value: "time", selected: this.opts.x === "time" }, "wall time"))),
        el("label", {}, "smoothing ", el("input", { type: "range", min: 0, max: 0.99, step: 0.01, value: this.opts.smooth,
          oninput: e => { this.opts.smooth = +e.target.value; smoothOut.textContent = e.target.value; },
          onchange: () => { save(); this.redraw(false); } }), " ", smoothOut),
        el("label", {}, el("input", { type: "checkbox", id: "opt-log", checked: this.opts.log,
          onchange: e => { this.opts.log = e.target.checked; save(); this.redraw(true); } }), " log scale"),
        el("input", { type: "search", placeholder: "filter keys", value: this.opts.filter,
          oninput: e => { this.opts.filter = e.target.value; this.layout(); } }),
        el("span", { class: "muted" }, "drag to zoom (fetches detail) · double-click to reset")),
      this.groups);
    this.observer = new IntersectionObserver(entries => {
      for (const en of entries) if (en.isIntersecting) { const c = en.target.__chart; if (c && !c.loaded) c.load(); }
    }, { rootMargin: "400px" });
    window.__ts.charts = {};
  }
  async start() {
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
    for (const k of keys) {
      const g = k.includes("/") ? k.slice(0, k.indexOf("/") + 1) : "(no prefix)";
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(k);
    }
    const names = [...groups.keys()].sort((a, b) => {
      const pa = PREFERRED.findIndex(p => a.startsWith(p.split("/")[0] + "/")), pb = PREFERRED.findIndex(p => b.startsWith(p.split("/")[0] + "/"));
      return (a === SYSTEM) - (b === SYSTEM) || (pa < 0 ? 99 : pa) - (pb < 0 ? 99 : pb) || a.localeCompare(b);
    });
    for (const g of names) {
      const grid = el("div", { class: "charts" });
      for (const k of groups.get(g)) {
        let c = this.charts.get(k);
        if (!c) { c = new Chart(this, k); this.charts.set(k, c); }
        c.box.__chart = c;
        grid.appendChild(c.box);
        this.observer.observe(c.box);
        if (c.u) window.__ts.charts[k] = { u: c.u, data: c.data, panel: this.id };
      }
      const title = g === SYSTEM ? `system (${groups.get(g).length}): the machine, on wall time` : `${g} (${groups.get(g).length})`;
      this.groups.appendChild(el("details", { class: "group", open: true, dataset: { group: g } },
        el("summary", {}, title), grid));
    }
  }
  redraw(rebuild) {
    for (const c of this.charts.values()) {
      if (rebuild) { if (c.u) c.u.destroy(); c.u = null; c.sig = null; c.range = null; c.reset.style.display = "none"; }
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
window.addEventListener("resize", () => { clearTimeout(window.__rs); window.__rs = setTimeout(() => state.panel && state.panel.resize(), 150); });
