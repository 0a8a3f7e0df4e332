// trackstore ui: one run's page: metadata, status history, sync state, config, summary, artifacts, charts.
"use strict";

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
  nav.appendChild(el("a", { href: link(["generations"], { run: project + "/" + runId }), style: here === "generations" ? "font-weight:600" : "" }, "Generations"));
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
    el("h1", {}, el("span", { class: "swatch", style: `background:${color(id)}` }), d.name, " ", statusBadge(d.status), alertBadge(d)),
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
      d.replica ? el("div", { id: "replica" }, `replicated from ${d.replica.host || "?"}:${d.replica.root || "?"} (store ${(d.replica.store_id || "?").slice(0, 12)}), ${fmtTime(d.replica.replicated_at)}`) : null,
      sync.length ? el("table", { id: "sync" }, el("thead", {}, el("tr", {}, ["destination", "rows", "status", "last sync", "last error"].map(h => el("th", {}, h)))), el("tbody", {}, sync))
        : d.replica ? null : el("div", { class: "empty" }, "never synced")),
      el("div", {}, el("h2", {}, "Config"), cfgFilter, cfgBox, el("h2", {}, "Summary"), sumFilter, sumBox)),
    el("h2", {}, "Artifacts"),
    arts.length ? el("table", { id: "artifacts" }, el("thead", {}, el("tr", {}, ["name", "version", "type", "file", "bytes", "sha256", "aliases"].map(h => el("th", {}, h)))), el("tbody", {}, arts))
      : el("div", { class: "empty" }, "no artifacts"),
    el("h2", {}, "Charts"), panel.node);
  renderSummary();
  panel.start();
  state.view = async () => { if (d.status === "running") await panel.poll(true); };
}
