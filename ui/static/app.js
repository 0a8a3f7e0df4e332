// trackstore ui: the dashboard page. Plain JavaScript, no build step, no network but this server.
// Everything that comes from the store (names, config values, outputs, tool results) is put into
// the document as text (el() makes text nodes; innerHTML is never used with data).
"use strict";

const $app = document.getElementById("app");
const POLL_MS = 3000;
window.__ts = { charts: {}, polls: 0 };

// ------------------------------------------------------------------ small helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "value") e.value = v;
    else if (k === "checked") e.checked = !!v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach(x => u.append(k, x));
    else if (v !== undefined && v !== null && v !== "") u.append(k, v);
  }
  return u.toString();
}
async function api(path, params, post) {
  // a chart of many runs POSTs its parameters as JSON: a thousand run ids do not fit in a URL
  const r = post ? await fetch("/api/" + path, { method: "POST", credentials: "same-origin",
                                                 headers: { "Content-Type": "application/json" }, body: JSON.stringify(params) })
                 : await fetch("/api/" + path + (params ? "?" + q(params) : ""), { credentials: "same-origin" });
  let body;
  try { body = await r.json(); } catch (e) { body = { error: r.status + " " + r.statusText }; }
  if (!r.ok) throw new Error(body.error || (r.status + " " + r.statusText));
  return body;
}
function fmtNum(v) {
  if (v === null || v === undefined) return "";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  const a = Math.abs(v);
  return (a !== 0 && (a < 1e-3 || a >= 1e6)) ? v.toExponential(3) : String(+v.toPrecision(5));
}
function fmtVal(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return fmtNum(v);
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
function fmtTime(s) { return s ? String(s).replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z") : ""; }
function fmtDur(sec) {
  if (sec === null || sec === undefined) return "";
  if (sec < 1e-3) return (sec * 1e6).toFixed(0) + " µs";
  if (sec < 1) return (sec * 1e3).toFixed(1) + " ms";
  if (sec < 120) return sec.toFixed(2) + " s";
  if (sec < 7200) return (sec / 60).toFixed(1) + " min";
  return (sec / 3600).toFixed(1) + " h";
}
function plural(n, word, words) { return fmtNum(n) + " " + (n === 1 ? word : (words || word + "s")); }
function ref(r) { return r.project + "/" + r.run_id; }
function hash32(s) { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
// a run's colour depends on its id only: the same run has the same colour on every page
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                 "#3949ab", "#f4511e", "#00897b", "#c2185b", "#6d4c41", "#7cb342", "#5e35b1", "#fb8c00", "#039be5", "#546e7a"];
function color(runRef) { return PALETTE[hash32(runRef) % PALETTE.length]; }
function statusBadge(s) { return el("span", { class: "status " + (s || "") }, s || "?"); }
function pre(text) { return el("pre", { class: "text" }, typeof text === "string" ? text : JSON.stringify(text, null, 2)); }
function route() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}
function link(parts, params) {
  return "#/" + parts.map(encodeURIComponent).join("/") + (params ? "?" + q(params) : "");
}
function setLive(ok) { const l = document.getElementById("live"); l.className = ok ? "" : "off"; l.textContent = ok ? "live" : "offline"; }

// ------------------------------------------------------------------ state
const state = {
  runs: [], byRef: new Map(),
  selected: new Set(JSON.parse(localStorage.getItem("ts.selected") || "[]")),
  filter: { text: "", project: "", status: "", tag: "", config: "" },
  sort: { col: "created_at", asc: false },
  summaryCols: null, configCols: null,
  runsEtag: null,  // the ETag of the runs table held in runs
  view: null,   // the page's refresh(): called on every poll
};
function saveSelection() { localStorage.setItem("ts.selected", JSON.stringify([...state.selected])); }
async function loadRuns() {
  // the table we hold is named by its ETag: the server answers 304 while it is unchanged, so a
  // poll of an unchanged store of thousands of runs downloads and parses nothing again
  const r = await fetch("/api/runs", { credentials: "same-origin",
                                       headers: state.runsEtag ? { "If-None-Match": state.runsEtag } : {} });
  if (r.status === 304) return state.runs;
  const etag = r.headers.get("ETag");
  let d;
  try { d = await r.json(); } catch (e) { d = { error: r.status + " " + r.statusText }; }
  if (!r.ok) throw new Error(d.error || (r.status + " " + r.statusText));
  state.runs = d.runs;
  state.runsEtag = etag;
  state.byRef = new Map(d.runs.map(r => [ref(r), r]));
  for (const s of [...state.selected]) if (!state.byRef.has(s)) state.selected.delete(s);
  return d.runs;
}

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

// ------------------------------------------------------------------ runs page
function configMatch(r, expr) {
  // "key=value" (value as text, exact) or "key~text" (substring), or text in any key or value
  const m = expr.match(/^([^=~]+)([=~])(.*)$/);
  const entries = Object.entries(r.config || {});
  if (!m) return entries.some(([k, v]) => k.toLowerCase().includes(expr) || fmtVal(v).toLowerCase().includes(expr));
  const [, key, op, raw] = m, val = raw.trim();
  const same = v => (typeof v === "number" && val !== "" && !isNaN(Number(val))) ? v === Number(val)
    : (typeof v === "string" ? v.toLowerCase() : JSON.stringify(v)) === val;
  return entries.some(([k, v]) => (k === key.trim() || k.endsWith("." + key.trim())) &&
    (op === "=" ? same(v) : fmtVal(v).toLowerCase().includes(val)));
}
function filteredRuns() {
  const f = state.filter, t = f.text.toLowerCase(), c = f.config.toLowerCase().trim();
  let rows = state.runs.filter(r =>
    (!f.project || r.project === f.project) && (!f.status || r.status === f.status) &&
    (!f.tag || (r.tags || []).includes(f.tag)) &&
    (!t || [r.name, r.run_id, r.project, r.host, r.notes, ...(r.tags || [])].some(s => s && String(s).toLowerCase().includes(t))) &&
    (!c || configMatch(r, c)));
  const { col, asc } = state.sort;
  const val = r => col.startsWith("summary:") ? r.summary[col.slice(8)] : col.startsWith("config:") ? r.config[col.slice(7)] : r[col];
  rows = rows.slice().sort((a, b) => {
    const x = val(a), y = val(b);
    if (x === y) return 0; if (x === undefined || x === null) return 1; if (y === undefined || y === null) return -1;
    const o = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
    return asc ? o : -o;
  });
  return rows;
}
function defaultColumns() {
  if (state.summaryCols === null) {
    const keys = new Set(); state.runs.slice(-200).forEach(r => Object.keys(r.summary || {}).forEach(k => keys.add(k)));
    const chosen = [];
    for (const p of PREFERRED) for (const k of [...keys].sort()) if (chosen.length < 3 && !chosen.includes(k) && (k === p || k.startsWith(p) || (!p.includes("/") && k.endsWith(p)))) chosen.push(k);
    state.summaryCols = chosen;
  }
  if (state.configCols === null) {
    const vals = new Map(); state.runs.slice(-200).forEach(r => Object.entries(r.config || {}).forEach(([k, v]) => { if (!vals.has(k)) vals.set(k, new Set()); vals.get(k).add(JSON.stringify(v)); }));
    state.configCols = [...vals.entries()].filter(([k, s]) => s.size > 1 && !/name|seed|dir|path/i.test(k)).map(([k]) => k).slice(0, 2);
  }
}

async function pageRuns() {
  await loadRuns();
  defaultColumns();
  const projects = [...new Set(state.runs.map(r => r.project))].sort();
  const tags = [...new Set(state.runs.flatMap(r => r.tags || []))].sort();
  const f = state.filter;
  const count = el("span", { class: "muted", id: "runs-count" });
  const tableBox = el("div", { class: "tablebox" });
  const selInfo = el("span", { class: "muted" });
  const compareBtn = el("button", { id: "compare", onclick: () => { location.hash = link(["compare"], { run: [...state.selected] }); } }, "compare selected");
  const chartsBox = el("div", { id: "charts" });
  const opt = (v, label, cur) => el("option", { value: v, selected: v === cur }, label);
  const rerender = () => renderTable();
  const toolbar = el("div", { class: "toolbar" },
    el("input", { type: "search", id: "filter-text", placeholder: "search name, id, tag, host", value: f.text, oninput: e => { f.text = e.target.value; rerender(); } }),
    el("select", { id: "filter-project", onchange: e => { f.project = e.target.value; rerender(); } }, opt("", "all projects", f.project), projects.map(p => opt(p, p, f.project))),
    el("select", { id: "filter-status", onchange: e => { f.status = e.target.value; rerender(); } }, opt("", "any status", f.status),
      ["running", "finished", "failed", "crashed"].map(s => opt(s, s, f.status))),
    el("select", { id: "filter-tag", onchange: e => { f.tag = e.target.value; rerender(); } }, opt("", "any tag", f.tag), tags.map(t => opt(t, t, f.tag))),
    el("input", { type: "search", id: "filter-config", placeholder: "config: key=value or key~text", value: f.config, oninput: e => { f.config = e.target.value; rerender(); } }),
    el("input", { type: "text", placeholder: "summary columns (comma-separated keys)", value: state.summaryCols.join(", "), title: "summary metric columns",
      onchange: e => { state.summaryCols = e.target.value.split(",").map(s => s.trim()).filter(Boolean); rerender(); } }),
    el("input", { type: "text", placeholder: "config columns", value: state.configCols.join(", "), title: "config columns",
      onchange: e => { state.configCols = e.target.value.split(",").map(s => s.trim()).filter(Boolean); rerender(); } }),
    count);
  clear($app).append(el("h1", {}, "Runs"), toolbar, tableBox,
    el("div", { class: "toolbar" }, selInfo, compareBtn,
      el("button", { onclick: () => { state.selected.clear(); saveSelection(); rerender(); refreshCharts(); } }, "clear selection")),
    el("h2", {}, "Charts"), chartsBox);

  function renderTable() {
    const rows = filteredRuns();
    const LIMIT = 2000;
    count.textContent = `${rows.length} of ${state.runs.length} runs` + (rows.length > LIMIT ? ` (first ${LIMIT} shown)` : "");
    const cols = [["", null], ["project", "project"], ["name", "name"], ["status", "status"], ["tags", null], ["created", "created_at"],
      ["last step", "last_step"], ...state.summaryCols.map(k => [k, "summary:" + k]), ...state.configCols.map(k => [k, "config:" + k])];
    const head = el("tr", {}, cols.map(([label, key]) => el("th", {
      class: key && state.sort.col === key ? "sorted" + (state.sort.asc ? " asc" : "") : "",
      onclick: key ? () => { state.sort = { col: key, asc: state.sort.col === key ? !state.sort.asc : false }; renderTable(); } : null,
    }, label)));
    const body = el("tbody");
    for (const r of rows.slice(0, LIMIT)) {
      const id = ref(r), sel = state.selected.has(id);
      body.appendChild(el("tr", { class: sel ? "selected" : "", dataset: { run: id } },
        el("td", {}, el("input", { type: "checkbox", class: "pick", checked: sel, onchange: e => {
          if (e.target.checked) state.selected.add(id); else state.selected.delete(id);
          saveSelection(); renderTable(); refreshCharts(); } }),
          el("span", { class: "swatch", style: `background:${color(id)}` })),
        el("td", {}, r.project),
        el("td", {}, el("a", { href: link(["run", r.project, r.run_id]), title: r.run_id }, r.name)),
        el("td", { class: "status-cell" }, statusBadge(r.status)),
        el("td", {}, (r.tags || []).map(t => el("span", { class: "tag" }, t))),
        el("td", { class: "mono" }, fmtTime(r.created_at)),
        el("td", { class: "num last-step" }, fmtNum(r.last_step)),
        state.summaryCols.map(k => el("td", { class: "num" }, fmtVal(r.summary[k]))),
        state.configCols.map(k => el("td", {}, fmtVal(r.config[k])))));
    }
    clear(tableBox).appendChild(el("table", { id: "runs" }, el("thead", {}, head), body));
    selInfo.textContent = `${state.selected.size} selected`;
    compareBtn.disabled = state.selected.size < 2;
  }
  let chartsFor = null;
  function refreshCharts() {
    const refs = [...state.selected].filter(s => state.byRef.has(s));
    const sig = refs.join("|");
    if (sig === chartsFor) return;
    chartsFor = sig;
    state.panel = new ChartPanel(refs);
    clear(chartsBox).appendChild(state.panel.node);
    state.panel.start();
  }
  renderTable();
  refreshCharts();
  state.view = async () => {
    await loadRuns();
    renderTable();
    const live = [...state.selected].some(s => (state.byRef.get(s) || {}).status === "running");
    if (state.panel) await state.panel.poll(live || state.panel.wasLive);
    if (state.panel) state.panel.wasLive = live;
  };
}

// ------------------------------------------------------------------ run page
function kvTable(rows) {
  return el("table", { class: "kv" }, el("tbody", {}, rows.filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {}, v instanceof Node ? v : fmtVal(v))))));
}
function configTree(obj, filter) {
  // nested config as a tree; with a filter, the matching leaves with their full keys
  const f = (filter || "").toLowerCase();
  if (f) {
    const rows = [];
    const walk = (o, p) => { for (const [k, v] of Object.entries(o)) { const key = p ? p + "." + k : k;
      if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length) walk(v, key);
      else if (key.toLowerCase().includes(f) || fmtVal(v).toLowerCase().includes(f)) rows.push([key, v]); } };
    walk(obj || {}, "");
    return rows.length ? kvTable(rows) : el("div", { class: "empty" }, "no config key or value matches");
  }
  const node = (o) => el("div", { class: "tree" }, Object.entries(o).map(([k, v]) =>
    v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length
      ? el("details", { open: true }, el("summary", {}, k), node(v))
      : el("div", { class: "leaf" }, el("span", { class: "muted" }, k + ": "), el("span", { class: "mono" }, fmtVal(v)))));
  return Object.keys(obj || {}).length ? node(obj) : el("div", { class: "empty" }, "no config");
}
function runNav(project, runId, here) {
  const nav = document.getElementById("nav-context");
  clear(nav);
  for (const [label, page] of [["Run", "run"], ["Samples", "samples"], ["Trajectories", "trajectories"], ["Histograms", "histograms"], ["Images", "images"]])
    nav.appendChild(el("a", { href: link([page, project, runId]), style: page === here ? "font-weight:600" : "" }, label));
}

async function pageRun(project, runId) {
  runNav(project, runId, "run");
  const d = await api("run", { run: project + "/" + runId });
  const id = project + "/" + runId;
  const dur = d.created_at && (d.ended_at || d.status === "running") ?
    ((d.ended_at ? Date.parse(d.ended_at) : Date.now()) - Date.parse(d.created_at)) / 1000 : null;
  const cfgBox = el("div");
  const sumFilter = el("input", { type: "search", placeholder: "filter summary" });
  const sumBox = el("div", { class: "tablebox" });
  const renderSummary = () => {
    const f = sumFilter.value.toLowerCase();
    const rows = Object.entries(d.summary || {}).filter(([k]) => !f || k.toLowerCase().includes(f)).sort(([a], [b]) => a.localeCompare(b));
    clear(sumBox).appendChild(rows.length ? kvTable(rows) : el("div", { class: "empty" }, "no summary"));
  };
  sumFilter.addEventListener("input", renderSummary);
  const cfgFilter = el("input", { type: "search", id: "config-search", placeholder: "search config", oninput: e => { clear(cfgBox).appendChild(configTree(d.config, e.target.value)); } });
  cfgBox.appendChild(configTree(d.config, ""));
  const git = d.git || {};
  const c = d.counts || {};
  const attempts = (d.attempts || []).map((a, i) => {
    const w = (d.writers || []).find(x => x.writer_id === a.writer_id) || {};
    return el("tr", {}, el("td", {}, String(i + 1)), el("td", { class: "mono" }, fmtTime(a.started_at)),
      el("td", {}, statusBadge(w.status || "")), el("td", { class: "mono" }, fmtTime(w.ended_at || w.heartbeat_at)),
      el("td", {}, (a.host || "") + " pid " + (a.pid || "")), el("td", { class: "err" }, w.error || ""));
  });
  const arts = (d.artifacts || []).map(a => el("tr", {}, el("td", {}, a.name), el("td", { class: "num" }, "v" + a.version), el("td", {}, a.type),
    el("td", {}, el("a", { href: "/api/artifact?" + q({ run: id, name: a.name, version: a.version, path: a.logical_path }), download: "" }, a.logical_path)),
    el("td", { class: "num" }, fmtNum(a.size)), el("td", { class: "mono" }, (a.sha256 || "").slice(0, 12)), el("td", {}, (a.aliases || []).join(", "))));
  const byDest = new Map();
  for (const s of d.sync || []) { const k = s.target + " → " + s.destination; if (!byDest.has(k)) byDest.set(k, []); byDest.get(k).push(s); }
  const sync = [...byDest.entries()].map(([dest, rows]) => el("tr", {}, el("td", {}, dest),
    el("td", {}, rows.filter(r => r.acked_rows || r.pending_rows).map(r => `${r.kind}: ${fmtNum(r.acked_rows)} sent, ${fmtNum(r.pending_rows)} pending`).join(" · ") || "nothing to send"),
    el("td", {}, rows[0].synced_status || ""), el("td", { class: "mono" }, fmtTime(rows[0].last_sync_at)), el("td", { class: "err" }, rows[0].last_error || "")));
  const panel = new ChartPanel([id], () => ({ name: d.name }));
  state.panel = panel;
  clear($app).append(
    el("h1", {}, el("span", { class: "swatch", style: `background:${color(id)}` }), d.name, " ", statusBadge(d.status)),
    el("div", { class: "cols" },
      el("div", {}, el("h2", {}, "Run"), kvTable([
        ["project", d.project], ["run id", el("span", { class: "mono" }, d.run_id)], ["status", statusBadge(d.status)],
        ["created", fmtTime(d.created_at)], ["ended", fmtTime(d.ended_at)], ["duration", fmtDur(dur)], ["last step", fmtNum(d.last_step)],
        ["tags", (d.tags || []).length ? el("span", {}, d.tags.map(t => el("span", { class: "tag" }, t))) : null],
        ["notes", d.notes], ["group", d.group], ["job type", d.job_type], ["host", d.host], ["user", d.user], ["pid", d.pid === null || d.pid === undefined ? null : String(d.pid)],
        ["command", d.command ? el("span", { class: "mono" }, d.command.join(" ")) : null], ["cwd", d.cwd],
        ["git commit", git.commit ? el("span", { class: "mono" }, git.commit + (git.branch ? " (" + git.branch + ")" : "") + (git.dirty ? " dirty" : "")) : null],
        ["python", d.python], ["trackstore", d.trackstore_version], ["exit code", d.exit_code],
        ["error", d.error ? pre(d.error) : null], ["write errors", d.write_errors ? pre(d.write_errors) : null],
        ["records", [plural(d.keys.length, "metric key"), plural((c.samples || {}).rows || 0, "sample"), plural((c.spans || {}).trajectories || 0, "trajectory", "trajectories"),
                      plural((c.histograms || {}).rows || 0, "histogram"), plural((c.images || {}).rows || 0, "image"), plural((c.artifacts || {}).files || 0, "artifact file")].join(" · ")],
      ]),
      el("h2", {}, "Status history"),
      attempts.length ? el("table", {}, el("thead", {}, el("tr", {}, ["#", "started", "status", "ended / last seen", "where", "error"].map(h => el("th", {}, h)))), el("tbody", {}, attempts))
        : el("div", { class: "empty" }, "no attempts recorded"),
      el("h2", {}, "Sync"),
      sync.length ? el("table", { id: "sync" }, el("thead", {}, el("tr", {}, ["destination", "rows", "status", "last sync", "last error"].map(h => el("th", {}, h)))), el("tbody", {}, sync))
        : el("div", { class: "empty" }, "never synced")),
      el("div", {}, el("h2", {}, "Config"), cfgFilter, cfgBox, el("h2", {}, "Summary"), sumFilter, sumBox)),
    el("h2", {}, "Artifacts"),
    arts.length ? el("table", { id: "artifacts" }, el("thead", {}, el("tr", {}, ["name", "version", "type", "file", "bytes", "sha256", "aliases"].map(h => el("th", {}, h)))), el("tbody", {}, arts))
      : el("div", { class: "empty" }, "no artifacts"),
    el("h2", {}, "Charts"), panel.node);
  renderSummary();
  panel.start();
  state.view = async () => { if (d.status === "running") await panel.poll(true); };
}

// ------------------------------------------------------------------ compare
async function pageCompare(params) {
  const refs = params.getAll("run");
  document.getElementById("nav-context").textContent = "";
  if (refs.length < 2) { clear($app).append(el("h1", {}, "Compare"), el("div", { class: "empty" }, "select two or more runs on the Runs page")); return; }
  const d = await api("compare", { run: refs });
  let onlyDiff = true;
  const cfgBox = el("div");
  const head = el("tr", {}, el("th", {}, "key"), d.runs.map(r => el("th", {}, el("span", { class: "swatch", style: `background:${color(ref(r))}` }), r.name)));
  const renderCfg = () => {
    const rows = d.config.filter(r => !onlyDiff || r.differs);
    clear(cfgBox).appendChild(rows.length ? el("table", { id: "config-diff" }, el("thead", {}, head.cloneNode(true)), el("tbody", {},
      rows.map(r => el("tr", { class: r.differs ? "diff" : "" }, el("td", { class: "mono" }, r.key), r.values.map(v => el("td", {}, fmtVal(v)))))))
      : el("div", { class: "empty" }, "the configs are identical"));
  };
  const sumKeys = [...new Set(d.runs.flatMap(r => Object.keys(r.summary || {})))].sort();
  const sumFilter = el("input", { type: "search", placeholder: "filter summary keys" });
  const sumBox = el("div");
  const renderSum = () => {
    const f = sumFilter.value.toLowerCase();
    clear(sumBox).appendChild(el("table", {}, el("thead", {}, head.cloneNode(true)), el("tbody", {}, sumKeys.filter(k => !f || k.toLowerCase().includes(f)).map(k =>
      el("tr", {}, el("td", { class: "mono" }, k), d.runs.map(r => el("td", { class: "num" }, fmtVal((r.summary || {})[k]))))))));
  };
  sumFilter.addEventListener("input", renderSum);
  const runInfo = new Map(d.runs.map(r => [ref(r), r]));
  const panel = new ChartPanel(refs, s => runInfo.get(s.project + "/" + s.run_id));
  state.panel = panel;
  clear($app).append(el("h1", {}, `Compare ${d.runs.length} runs`),
    el("div", {}, d.runs.map(r => el("span", { style: "margin-right:14px" }, el("span", { class: "swatch", style: `background:${color(ref(r))}` }),
      el("a", { href: link(["run", r.project, r.run_id]) }, r.name), " ", statusBadge(r.status)))),
    el("div", { class: "cols" },
      el("div", {}, el("h2", {}, "Config"), el("label", {}, el("input", { type: "checkbox", checked: true, onchange: e => { onlyDiff = e.target.checked; renderCfg(); } }), " only differences"), cfgBox),
      el("div", {}, el("h2", {}, "Summary"), sumFilter, sumBox)),
    el("h2", {}, "Charts"), panel.node);
  renderCfg(); renderSum(); panel.start();
  state.view = async () => { if (d.runs.some(r => r.status === "running")) await panel.poll(true); };
}

// ------------------------------------------------------------------ samples
function textOf(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (Array.isArray(v) && v.every(m => m && typeof m === "object" && "role" in m))
    return v.map(m => `[${m.role}] ${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("\n\n");
  return JSON.stringify(v, null, 2);
}
// an image a sample row refers to ({"_type": "image", "sha256", ...}): shown from /api/image, caption as text
function isImageRef(v) { return v && typeof v === "object" && v._type === "image" && /^[0-9a-f]{64}$/.test(String(v.sha256)); }
function imageRefs(v, out) {
  if (isImageRef(v)) out.push(v);
  else if (Array.isArray(v)) v.forEach(x => imageRefs(x, out));
  else if (v && typeof v === "object") Object.values(v).forEach(x => imageRefs(x, out));
  return out;
}
function withoutImages(v) {
  if (isImageRef(v)) return "[image " + v.width + "×" + v.height + "]";
  if (Array.isArray(v)) return v.map(withoutImages);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withoutImages(x)]));
  return v;
}
function imageFigure(runRef, img, cls) {
  return el("figure", { class: cls || "thumb" },
    el("img", { src: "/api/image?" + q({ run: runRef, sha256: img.sha256 }), alt: img.caption || "", title: `${img.width}×${img.height} ${img.format || ""}`, loading: "lazy" }),
    img.caption ? el("figcaption", {}, img.caption) : null);
}
function cellWithImages(runRef, v, textNode) {
  const refs = imageRefs(v, []);
  if (!refs.length) return textNode(v);
  if (isImageRef(v)) return imageFigure(runRef, v);
  return el("div", {}, refs.map(r => imageFigure(runRef, r)), textNode(withoutImages(v)));
}
async function pageSamples(project, runId, params) {
  runNav(project, runId, "samples");
  const id = project + "/" + runId;
  const f = { step: params.get("step") || "", split: params.get("split") || "", q: params.get("q") || "", min: params.get("min") || "",
              max: params.get("max") || "", index: params.get("index") || "" };
  const go = () => { location.hash = link(["samples", project, runId], f); };
  const d = await api("samples", { run: id, ...f, limit: 200 });
  const opt = (v, label, cur) => el("option", { value: v, selected: String(v) === String(cur) }, label);
  const input = (name, ph, type) => el("input", { type: type || "search", id: "s-" + name, placeholder: ph, value: f[name], style: "width:110px",
    onchange: e => { f[name] = e.target.value; go(); } });
  const extraKeys = [...new Set(d.rows.flatMap(r => Object.keys(r).filter(k => !["step", "split", "sample_index", "input", "output", "score", "json_fields"].includes(k))))];
  clear($app).append(el("h1", {}, "Samples"),
    el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)),
    el("div", { class: "toolbar" },
      el("label", {}, "step ", el("select", { id: "s-step", onchange: e => { f.step = e.target.value; go(); } }, opt("", "all", f.step), d.steps.map(s => opt(s, String(s), f.step)))),
      el("label", {}, "split ", el("select", { id: "s-split", onchange: e => { f.split = e.target.value; go(); } }, opt("", "all", f.split), d.splits.map(s => opt(s, s, f.split)))),
      input("q", "search input and output"), el("label", {}, "score ≥ ", input("min", "min", "number")), el("label", {}, "≤ ", input("max", "max", "number")),
      el("label", {}, "sample index ", input("index", "any", "number")),
      el("button", { onclick: () => { for (const k in f) f[k] = ""; go(); } }, "clear"),
      el("span", { class: "muted", id: "s-count" }, `${fmtNum(d.total)} samples` + (d.total > d.rows.length ? ` (first ${d.rows.length})` : ""))),
    d.rows.length ? el("table", { id: "samples" }, el("thead", {}, el("tr", {}, ["step", "split", "index", "score", "input", "output", ...extraKeys].map(h => el("th", {}, h)))),
      el("tbody", {}, d.rows.map(r => el("tr", {},
        el("td", { class: "num" }, fmtNum(r.step)), el("td", {}, r.split),
        el("td", { class: "num" }, el("a", { href: link(["samples", project, runId], { index: r.sample_index, split: r.split }), title: "this sample index at every step" }, String(r.sample_index))),
        el("td", { class: "num" }, fmtVal(r.score)),
        el("td", { style: "width:38%" }, cellWithImages(id, r.input, v => pre(textOf(v)))),
        el("td", { class: "output", style: "width:38%" }, cellWithImages(id, r.output, v => pre(textOf(v)))),
        extraKeys.map(k => el("td", {}, cellWithImages(id, r[k], fmtVal)))))))
      : el("div", { class: "empty" }, "no samples match"));
  state.view = null;
}

// ------------------------------------------------------------------ trajectories
function contentText(c) { return typeof c === "string" ? c : JSON.stringify(c, null, 2); }
function turn(cls, role, body) { return el("div", { class: "turn " + cls }, el("div", { class: "role" }, role), body); }
function toolCallTurns(out) {
  const calls = (out && out.tool_calls) || [];
  return calls.map(c => {
    const fn = c && typeof c.function === "object" ? c.function : c || {};
    let args = fn.arguments; if (typeof args === "string") { try { args = JSON.parse(args); } catch (e) { /* text */ } }
    return turn("tool", "tool call " + (fn.name || "?"), pre(contentText(args === undefined ? {} : args)));
  });
}
function conversation(node, out) {
  // the trajectory as turns: user, assistant, tool calls with arguments and results, rewards, errors
  const r = node;
  const ins = r.inputs, outs = r.outputs;
  const chat = v => Array.isArray(v) && v.length && v.every(m => m && typeof m === "object" && "role" in m);
  // a model call's input is the whole conversation so far: each message is shown once, where it
  // first appears (a user span, a tool result, an earlier call), not again under every later call
  const shown = out.shown || (out.shown = new Set());
  const fresh = text => { if (shown.has(text)) return false; shown.add(text); return true; };
  if (r.kind === "llm") {
    if (chat(ins)) ins.forEach(m => { const t = contentText(m.content); if (fresh(t)) out.push(turn(m.role === "tool" ? "tool" : m.role, m.role, pre(t))); });
    else if (ins !== null && ins !== undefined) out.push(turn("user", "prompt", pre(contentText(ins))));
    if (outs && typeof outs === "object" && !Array.isArray(outs) && ("content" in outs || "tool_calls" in outs)) {
      if (outs.content !== null && outs.content !== undefined && outs.content !== "") { shown.add(contentText(outs.content)); out.push(turn("assistant", "assistant", pre(contentText(outs.content)))); }
      out.push(...toolCallTurns(outs));
    } else if (outs !== null && outs !== undefined) out.push(turn("assistant", "assistant", pre(contentText(outs))));
  } else if (r.kind === "tool") {
    if (outs !== null && outs !== undefined) shown.add(contentText(outs));
    out.push(turn("tool", "tool " + r.name, el("div", {}, el("div", { class: "muted" }, "arguments"), pre(contentText(ins === undefined ? null : ins)),
      el("div", { class: "muted" }, "result"), pre(contentText(outs === undefined ? null : outs)))));
  } else if (r.kind === "reward") {
    out.push(turn("reward", "reward " + (r.reward !== null && r.reward !== undefined ? fmtNum(r.reward) : ""), pre(contentText(outs !== null && outs !== undefined ? outs : ins))));
  } else if (node !== out.root) {
    if (chat(ins)) ins.forEach(m => { const t = contentText(m.content); if (fresh(t)) out.push(turn(m.role, m.role, pre(t))); });
    else if (ins && typeof ins === "object" && Object.keys(ins).length === 1 && "content" in ins) { shown.add(contentText(ins.content)); out.push(turn(r.name === "user" ? "user" : "", r.name, pre(contentText(ins.content)))); }
    else if (ins !== null && ins !== undefined) out.push(turn("", r.name + " inputs", pre(contentText(ins))));
    if (outs !== null && outs !== undefined) out.push(turn("", r.name + " outputs", pre(contentText(outs))));
  }
  if (r.error) out.push(turn("error", "error in " + r.name, pre(r.error)));
  for (const ch of r.children || []) conversation(ch, out);
  return out;
}
function spanTree(n) {
  return el("div", { class: "span" }, el("span", {}, el("b", {}, n.name), ` [${n.kind}] `, el("span", { class: "muted" }, fmtDur(n.duration_s)),
    n.status !== "ok" ? el("span", { class: "err" }, " " + n.status) : null, n.reward !== null && n.reward !== undefined ? ` reward ${fmtNum(n.reward)}` : null),
    (n.children || []).map(spanTree));
}
async function pageTrajectories(project, runId, params) {
  runNav(project, runId, "trajectories");
  const id = project + "/" + runId;
  const f = { step: params.get("step") || "", index: params.get("index") || "" };
  const go = () => { location.hash = link(["trajectories", project, runId], f); };
  const d = await api("trajectories", { run: id, ...f, limit: 50 });
  const opt = (v, label, cur) => el("option", { value: v, selected: String(v) === String(cur) }, label);
  clear($app).append(el("h1", {}, "Trajectories"),
    el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)),
    el("div", { class: "toolbar" },
      el("label", {}, "step ", el("select", { id: "t-step", onchange: e => { f.step = e.target.value; go(); } }, opt("", "all", f.step), d.steps.map(s => opt(s, String(s), f.step)))),
      el("label", {}, "sample index ", el("input", { type: "number", id: "t-index", value: f.index, style: "width:90px", onchange: e => { f.index = e.target.value; go(); } })),
      el("button", { onclick: () => { f.step = ""; f.index = ""; go(); } }, "clear"),
      el("span", { class: "muted", id: "t-count" }, `${fmtNum(d.total)} trajectories` + (d.total > d.trees.length ? ` (first ${d.trees.length})` : ""))),
    ...(d.trees.length ? d.trees.map(t => {
      const turns = []; turns.root = t; conversation(t, turns);
      const bits = [`step ${t.step}`];
      if (t.sample_index !== null) bits.push(`sample ${t.sample_index}`);
      if (t.rollout_n !== null) bits.push(`rollout ${t.rollout_n}`);
      if (t.validate) bits.push("validation");
      if (t.reward !== null && t.reward !== undefined) bits.push(`reward ${fmtNum(t.reward)}`);
      bits.push(fmtDur(t.duration_s));
      if (t.status !== "ok") bits.push(t.status);
      return el("div", { class: "traj", dataset: { step: t.step, index: t.sample_index } },
        el("div", { class: "head" }, t.name + " · " + bits.join(" · ")),
        el("div", { class: "cols" }, el("div", { class: "conversation" }, turns.length ? turns : el("div", { class: "empty" }, "no turns")),
          el("div", {}, el("h3", {}, "spans and timings"), el("div", { class: "spantree" }, spanTree(t)),
            Object.keys(t.attributes || {}).length ? el("div", {}, el("h3", {}, "attributes"), pre(t.attributes)) : null)));
    }) : [el("div", { class: "empty" }, "no trajectories match")]));
  state.view = null;
}

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

// ------------------------------------------------------------------ images
function imageSlider(runRef, h) {
  // one key: a step slider over the steps that hold images, the step's images below it
  const steps = h.steps;
  const label = el("span", { class: "step-label mono" });
  const shown = el("div", { class: "images" });
  const show = i => {
    const s = steps[i];
    label.textContent = `step ${s.step}  (${i + 1} of ${steps.length})`;
    clear(shown).append(...s.images.map(img => imageFigure(runRef, img, "shot")));
  };
  const slider = el("input", { type: "range", class: "slider", min: 0, max: steps.length - 1, value: steps.length - 1, step: 1,
    oninput: e => show(Number(e.target.value)) });
  show(steps.length - 1);
  return el("div", { class: "image-key" }, el("div", { class: "toolbar" }, slider, label), shown);
}
async function pageImages(project, runId, params) {
  runNav(project, runId, "images");
  const id = project + "/" + runId;
  const d = await api("run", { run: id });
  const keys = d.image_keys || [];
  const box = el("div");
  clear($app).append(el("h1", {}, "Images"), el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)), box);
  if (!keys.length) { box.appendChild(el("div", { class: "empty" }, "this run has no images")); return; }
  for (const k of keys) {
    const h = await api("images", { run: id, key: k });
    if (!h.steps.length) continue;
    box.append(el("h2", {}, k), el("div", { class: "muted" }, plural(h.steps.length, "step") + " · drag the slider to move through them"),
               imageSlider(id, h));
  }
  state.view = null;
}

// ------------------------------------------------------------------ router and polling
async function render() {
  const { parts, params } = route();
  state.view = null; state.panel = null;
  document.getElementById("nav-context").textContent = "";
  try {
    if (!parts.length) await pageRuns();
    else if (parts[0] === "run" && parts.length === 3) await pageRun(parts[1], parts[2]);
    else if (parts[0] === "compare") await pageCompare(params);
    else if (parts[0] === "samples" && parts.length === 3) await pageSamples(parts[1], parts[2], params);
    else if (parts[0] === "trajectories" && parts.length === 3) await pageTrajectories(parts[1], parts[2], params);
    else if (parts[0] === "histograms" && parts.length === 3) await pageHistograms(parts[1], parts[2], params);
    else if (parts[0] === "images" && parts.length === 3) await pageImages(parts[1], parts[2], params);
    else clear($app).appendChild(el("div", { class: "empty" }, "no such page"));
  } catch (e) {
    clear($app).appendChild(el("div", { class: "err" }, "error: " + e.message));
  }
}
async function poll() {
  if (!document.hidden && state.view) {
    try { await state.view(); setLive(true); } catch (e) { setLive(false); }
    window.__ts.polls++;
  }
  setTimeout(poll, POLL_MS);
}
window.addEventListener("hashchange", render);
api("health").then(h => { document.getElementById("root").textContent = h.root; }).catch(() => setLive(false));
render();
setTimeout(poll, POLL_MS);
