// trackstore ui: the Compare page: config differences, summaries and charts of two or more runs.
"use strict";

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
    el("a", { id: "compare-generations", href: link(["generations"], { run: refs }) }, "Generations side by side: the same prompt's outputs across these runs"),
    el("div", {}, d.runs.map(r => el("span", { style: "margin-right:14px" }, el("span", { class: "swatch", style: `background:${color(ref(r))}` }),
      el("a", { href: link(["run", r.project, r.run_id]) }, r.name), " ", statusBadge(r.status)))),
    el("div", { class: "cols" },
      el("div", {}, el("h2", {}, "Config"), el("label", {}, el("input", { type: "checkbox", checked: true, onchange: e => { onlyDiff = e.target.checked; renderCfg(); } }), " only differences"), cfgBox),
      el("div", {}, el("h2", {}, "Summary"), sumFilter, sumBox)),
    el("h2", {}, "Charts"), panel.node);
  renderCfg(); renderSum(); panel.start();
  state.view = async () => { if (d.runs.some(r => r.status === "running")) await panel.poll(true); };
}
