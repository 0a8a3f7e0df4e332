// trackstore ui: what every page shares: building elements as text, the API, formats, colours,
// the hash route and the runs table held between polls. Plain JavaScript, no build step, no network
// but this server. Everything that comes from the store (names, config values, outputs, tool results)
// is put into the document as text (el() makes text nodes; innerHTML is never used with data).
// The page's scripts are classic scripts loaded in order by index.html; they share one global scope.
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
// a colour of the page's theme (app.css sets them, dark mode included): canvases and charts draw with these
function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach(x => u.append(k, x));
    else if (v !== undefined && v !== null && v !== "") u.append(k, v);
  }
  return u.toString();
}
// a page whose answer arrives after the user moved on must not draw over the new page: every
// request remembers the render it was made for (state.gen, counted by the router) and throws
// Stale when another page has been rendered since; the router ignores Stale
class Stale extends Error {}
function fresh(gen) { if (gen !== state.gen) throw new Stale("the page changed"); }
async function api(path, params, post) {
  const gen = state.gen;
  // a chart of many runs POSTs its parameters as JSON: a thousand run ids do not fit in a URL
  const r = post ? await fetch("/api/" + path, { method: "POST", credentials: "same-origin",
                                                 headers: { "Content-Type": "application/json" }, body: JSON.stringify(params) })
                 : await fetch("/api/" + path + (params ? "?" + q(params) : ""), { credentials: "same-origin" });
  let body;
  try { body = await r.json(); } catch (e) { body = { error: r.status + " " + r.statusText }; }
  fresh(gen);
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
// what is on screen lives in the URL's query (after the hash's path), so a view can be shared or
// bookmarked: pages read it with route() and write it back with setParams(), which replaces the
// history entry without re-rendering the page (replaceState fires no hashchange). Not once the
// address has moved on (addressMoved): the next page reads it
function setParams(update) {
  if (addressMoved()) return;
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  const params = new URLSearchParams(query || "");
  for (const [k, v] of Object.entries(update)) {
    params.delete(k);
    if (Array.isArray(v)) v.forEach(x => params.append(k, x));
    else if (v !== undefined && v !== null && v !== "" && v !== false) params.set(k, v === true ? "1" : v);
  }
  const s = params.toString();
  history.replaceState(history.state, "", "#" + path + (s ? "?" + s : ""));
  state.shown = location.hash;
}
// the address is no longer the one the page on screen was drawn for (state.shown): a link or Back
// changed it, and the router has not drawn that page yet (hashchange comes as a task of its own).
// The page being left must then neither draw nor write its view over the address the next reads
function addressMoved() { return location.hash !== state.shown; }
function setLive(ok) { const l = document.getElementById("live"); l.className = ok ? "" : "off"; l.textContent = ok ? "live" : "offline"; }

// ------------------------------------------------------------------ state
const state = {
  gen: 0,  // which render of the router the page on screen is
  shown: null,  // the address (location.hash) that page was drawn for, with what setParams wrote since
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
  const gen = state.gen;
  // the table we hold is named by its ETag: the server answers 304 while it is unchanged, so a
  // poll of an unchanged store of thousands of runs downloads and parses nothing again
  const r = await fetch("/api/runs", { credentials: "same-origin",
                                       headers: state.runsEtag ? { "If-None-Match": state.runsEtag } : {} });
  fresh(gen);
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
// a run's alerts beside its status (runs table, run page header): NaN or infinite metric values, or
// a live run that stopped logging. The tooltip is the server's sentences ("NaN in actor/pg_loss since
// step 120", "no metric for 14 min, usually every 20 s"), set as an attribute: text, never markup.
function alertBadge(run) {
  const codes = (run && run.alerts) || [];
  if (!codes.length) return null;
  const keys = Object.values(run.nonfinite_keys || {});
  const nan = keys.some(k => k.nan), inf = keys.some(k => k.inf);
  const label = codes.map(c => c === "nonfinite" ? (nan && inf ? "NaN+inf" : nan ? "NaN" : "inf") : c).join(" · ");
  return el("span", { class: "alert-badge " + codes.join(" "), title: (run.alert_text || []).join("\n"),
                      "aria-label": (run.alert_text || []).join("; ") }, "⚠ " + label);
}
