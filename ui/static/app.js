// trackstore ui: the router (the URL's hash names the page) and the poll that keeps a page live.
"use strict";

// ------------------------------------------------------------------ router and polling
async function render() {
  const { parts, params } = route();
  state.gen++;
  state.view = null; state.panel = null;
  document.getElementById("nav-context").textContent = "";
  try {
    if (!parts.length) await pageRuns(params);
    else if (parts[0] === "run" && parts.length === 3) await pageRun(parts[1], parts[2]);
    else if (parts[0] === "compare") await pageCompare(params);
    else if (parts[0] === "samples" && parts.length === 3) await pageSamples(parts[1], parts[2], params);
    else if (parts[0] === "trajectories" && parts.length === 3) await pageTrajectories(parts[1], parts[2], params);
    else if (parts[0] === "histograms" && parts.length === 3) await pageHistograms(parts[1], parts[2], params);
    else if (parts[0] === "images" && parts.length === 3) await pageImages(parts[1], parts[2], params);
    else if (parts[0] === "generations") await pageGenerations(params);
    else clear($app).appendChild(el("div", { class: "empty" }, "no such page"));
  } catch (e) {
    if (e instanceof Stale) return;  // the user moved on: the page now on screen is another render's
    clear($app).appendChild(el("div", { class: "err" }, "error: " + e.message));
  }
}
async function poll() {
  if (!document.hidden && state.view) {
    try { await state.view(); setLive(true); } catch (e) { if (!(e instanceof Stale)) setLive(false); }
    window.__ts.polls++;
  }
  setTimeout(poll, POLL_MS);
}
window.addEventListener("hashchange", render);
// not api(): the header belongs to no page, so no render makes this answer stale
fetch("/api/health", { credentials: "same-origin" }).then(r => r.json())
  .then(h => { document.getElementById("root").textContent = h.root; }).catch(() => setLive(false));
render();
setTimeout(poll, POLL_MS);
