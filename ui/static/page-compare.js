// trackstore ui: the Compare page: config differences, summaries and charts of two or more runs.
"use strict";

// ------------------------------------------------------------------ compare
// Which cells of a row differ: those unlike the row's most common value when one value is held by
// more runs than any other (the odd ones out), else every cell (two runs that disagree, or no majority).
function differing(values) {
  const keys = values.map(v => (v === undefined ? "null" : JSON.stringify(v)));
  const counts = new Map();
  for (const k of keys) counts.set(k, (counts.get(k) || 0) + 1);
  if (counts.size < 2) return keys.map(() => false);
  const top = [...counts.values()].sort((a, b) => b - a);
  if (top[0] > 1 && top[0] > top[1]) {
    const mode = [...counts.entries()].find(([, n]) => n === top[0])[0];
    return keys.map(k => k !== mode);
  }
  return keys.map(() => true);
}
// one compared value: wrapped, at most a few lines (the whole value in the title)
function cmpCell(v, differs, num) {
  const text = fmtVal(v);
  return el("td", { class: (differs ? "differs" : "") + (num ? " num" : "") },
    el("div", { class: "clamp", title: text.length > 40 ? text : null }, text));
}
function cmpTable(id, runs, rows, num) {
  // key column + one column per run, fixed layout: long values wrap inside their column, and with
  // many runs the table scrolls inside its box instead of widening the page
  return el("table", { id, class: "cmp", style: `min-width:${200 + runs.length * 120}px` },
    el("colgroup", {}, el("col", { class: "key" }), runs.map(() => el("col", {}))),
    el("thead", {}, el("tr", {}, el("th", {}, "key"), runs.map(r => el("th", { title: r.name },
      el("span", { class: "swatch", style: `background:${color(ref(r))}` }), r.name)))),
    el("tbody", {}, rows.map(({ key, values }) => {
      const diff = differing(values);
      const any = diff.some(Boolean);
      return el("tr", { class: any ? "diff" : "same" }, el("td", { class: "mono", title: key }, key),
        values.map((v, i) => cmpCell(v, diff[i], num)));
    })));
}
async function pageCompare(params) {
  const refs = params.getAll("run");
  document.getElementById("nav-context").textContent = "";
  if (refs.length < 2) { clear($app).append(el("h1", {}, "Compare"), el("div", { class: "empty" }, "select two or more runs on the Runs page")); return; }
  const d = await api("compare", { run: refs });
  // config: differing keys by default, every key on request
  let onlyDiff = true;
  const cfgBox = el("div", { class: "tablebox" });
  const nDiff = d.config.filter(r => r.differs).length;
  const renderCfg = () => {
    const rows = d.config.filter(r => !onlyDiff || r.differs);
    clear(cfgBox).appendChild(rows.length ? cmpTable("config-diff", d.runs, rows, false)
      : el("div", { class: "empty" }, d.config.length ? "the configs are identical" : "no config"));
  };
  // summary: after the charts, folded when long, filterable; equal rows dimmed or hidden
  const sumKeys = [...new Set(d.runs.flatMap(r => Object.keys(r.summary || {})))].sort();
  const sumRows = sumKeys.map(k => ({ key: k, values: d.runs.map(r => (r.summary || {})[k]) }));
  const sumDiff = sumRows.filter(r => differing(r.values).some(Boolean)).length;
  let sumOnlyDiff = false;
  const sumFilter = el("input", { type: "search", id: "summary-filter", placeholder: "filter summary keys" });
  const sumCount = el("span", { class: "muted" });
  const sumBox = el("div", { class: "tablebox" });
  const renderSum = () => {
    const f = sumFilter.value.toLowerCase();
    const rows = sumRows.filter(r => (!f || r.key.toLowerCase().includes(f)) && (!sumOnlyDiff || differing(r.values).some(Boolean)));
    sumCount.textContent = `${fmtNum(rows.length)} of ${plural(sumRows.length, "key")}`;
    clear(sumBox).appendChild(rows.length ? cmpTable("summary-diff", d.runs, rows, true)
      : el("div", { class: "empty" }, sumRows.length ? "no summary key matches" : "no summary"));
  };
  sumFilter.addEventListener("input", renderSum);
  const runInfo = new Map(d.runs.map(r => [ref(r), r]));
  const panel = new ChartPanel(refs, s => runInfo.get(s.project + "/" + s.run_id));
  state.panel = panel;
  clear($app).append(el("h1", {}, `Compare ${d.runs.length} runs`),
    el("a", { id: "compare-generations", href: link(["generations"], { run: refs }) }, "Generations side by side: the same prompt's outputs across these runs"),
    el("div", {}, d.runs.map(r => el("span", { style: "margin-right:14px" }, el("span", { class: "swatch", style: `background:${color(ref(r))}` }),
      el("a", { href: link(["run", r.project, r.run_id]) }, r.name), " ", statusBadge(r.status)))),
    el("section", { id: "compare-config" }, el("h2", {}, "Config"),
      el("div", { class: "toolbar" },
        el("label", {}, el("input", { type: "checkbox", id: "config-only-diff", checked: true, onchange: e => { onlyDiff = e.target.checked; renderCfg(); } }), " only differences"),
        el("span", { class: "muted" }, `${plural(nDiff, "key")} of ${fmtNum(d.config.length)} differ`)),
      cfgBox),
    el("section", { id: "compare-charts" }, el("h2", {}, "Charts"), panel.node),
    el("details", { id: "compare-summary", class: "section", open: sumRows.length <= 30 },
      el("summary", {}, el("h2", {}, "Summary"), el("span", { class: "muted" }, ` ${plural(sumRows.length, "key")}, ${fmtNum(sumDiff)} differ`)),
      el("div", { class: "toolbar" }, sumFilter,
        el("label", {}, el("input", { type: "checkbox", id: "summary-only-diff", onchange: e => { sumOnlyDiff = e.target.checked; renderSum(); } }), " only differences"),
        sumCount),
      sumBox));
  renderCfg(); renderSum(); panel.start();
  state.view = async () => { if (d.runs.some(r => r.status === "running")) await panel.poll(true); };
}
