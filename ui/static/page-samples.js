// trackstore ui: the Samples page, and the images that sample rows refer to.
"use strict";

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
