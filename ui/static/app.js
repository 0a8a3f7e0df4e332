// trackstore ui: the router (the URL's hash names the page) and the poll that keeps a page live.
"use strict";

// ------------------------------------------------------------------ scroll per history entry
// The browser would keep the scroll offset of the page left behind (a click on Samples would land
// halfway down): a new page starts at the top, and Back/Forward returns to where the user was on
// that entry. Each history entry gets an id in history.state; its offset is saved when the user
// leaves it (and on reload) and restored once the page is drawn again.
history.scrollRestoration = "manual";
const SCROLL_KEY = "ts.scroll", SCROLL_KEEP = 200;
const scrolls = (() => { try { return JSON.parse(sessionStorage.getItem(SCROLL_KEY) || "{}") || {}; } catch (e) { return {}; } })();
let entry = null;
function saveScroll() {
  if (!entry) return;
  delete scrolls[entry]; scrolls[entry] = Math.round(window.scrollY);  // most recent last
  const ids = Object.keys(scrolls);
  for (const id of ids.slice(0, Math.max(0, ids.length - SCROLL_KEEP))) delete scrolls[id];
  try { sessionStorage.setItem(SCROLL_KEY, JSON.stringify(scrolls)); } catch (e) { /* storage full or off: memory only */ }
}
function entryOf() {
  // [this history entry's id, whether it is new (never shown before: starts at the top)]
  const st = history.state && typeof history.state === "object" ? history.state : {};
  if (st.tsEntry) return [st.tsEntry, false];
  const id = Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  history.replaceState({ ...st, tsEntry: id }, "");
  return [id, true];
}
let restoring = 0;  // the render whose offset is being restored; the user's own scrolling ends it
for (const ev of ["wheel", "touchstart", "keydown", "mousedown"]) window.addEventListener(ev, () => { restoring = 0; }, { passive: true });
function restoreScroll(y, gen) {
  // charts and lists may still be growing: retry for a while until the page is tall enough
  const t0 = performance.now();
  restoring = gen;
  const step = () => {
    if (restoring !== gen || gen !== state.gen) return;
    window.scrollTo(0, y);
    if (Math.abs(window.scrollY - y) > 1 && performance.now() - t0 < 3000) requestAnimationFrame(step);
  };
  step();
}

// ------------------------------------------------------------------ router and polling
async function render() {
  const { parts, params } = route();
  state.shown = location.hash;
  state.gen++;
  const [id, isNew] = entryOf();
  entry = id;
  const gen = state.gen;
  const target = isNew ? 0 : (scrolls[id] || 0);
  if (isNew) window.scrollTo(0, 0);
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
  if (gen === state.gen) restoreScroll(target, gen);
}
async function poll() {
  if (!document.hidden && state.view) {
    try { await state.view(); setLive(true); } catch (e) { if (!(e instanceof Stale)) setLive(false); }
    window.__ts.polls++;
  }
  setTimeout(poll, POLL_MS);
}
// the offset of the entry being left is read before anything of the next page is drawn
window.addEventListener("hashchange", () => { saveScroll(); render(); });
window.addEventListener("pagehide", saveScroll);
// not api(): the header belongs to no page, so no render makes this answer stale
fetch("/api/health", { credentials: "same-origin" }).then(r => r.json())
  .then(h => { document.getElementById("root").textContent = h.root; }).catch(() => setLive(false));
render();
setTimeout(poll, POLL_MS);
