// trackstore ui: the Runs page: the table of every run, filters, selection and their charts.
"use strict";

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
    (!f.project || r.project === f.project) && (!f.status || r.status === f.status || (f.status === "alerts" && (r.alerts || []).length > 0)) &&
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

async function pageRuns(params) {
  // a link names its selection and filters (run=, q=, project=, status=, tag=, config=); without them,
  // the last ones used in this browser
  if (params.has("run")) { state.selected = new Set(params.getAll("run")); saveSelection(); }
  for (const [k, name] of [["text", "q"], ["project", "project"], ["status", "status"], ["tag", "tag"], ["config", "config"]])
    if (params.has(name)) state.filter[k] = params.get(name);
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
      ["running", "finished", "failed", "crashed"].map(s => opt(s, s, f.status)), opt("alerts", "with alerts", f.status)),
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
    setParams({ run: [...state.selected], q: f.text, project: f.project, status: f.status, tag: f.tag, config: f.config });
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
        el("td", { class: "status-cell" }, statusBadge(r.status), alertBadge(r)),
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
