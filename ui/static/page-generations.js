// trackstore ui: the Generations page: one prompt's outputs and scores across runs and steps, side
// by side, with a word-level diff of the texts. Outputs are model-written: every piece of them goes
// into the document as a text node (el() children), the diff's marks included; never as HTML.
"use strict";

// ------------------------------------------------------------------ word diff
// each word with the whitespace before it (and any trailing whitespace alone): joined, the text
// again; an answer that only grew at its end differs by one insertion
function diffTokens(text) { return text.match(/\s*\S+|\s+/g) || []; }
// [[op, text], ...] turning a into b: "=" kept, "-" only in a, "+" only in b. A longest common
// subsequence of tokens, after the common head and tail are cut off; a middle too long for the
// table (cells > limit) is one deletion and one insertion, and `whole` says so.
function wordDiff(a, b, limit) {
  const x = diffTokens(a), y = diffTokens(b);
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail), ys = y.slice(head, y.length - tail);
  const n = xs.length, m = ys.length, ops = [];
  const push = (op, t) => { if (ops.length && ops[ops.length - 1][0] === op) ops[ops.length - 1][1] += t; else ops.push([op, t]); };
  if (head) push("=", x.slice(0, head).join(""));
  let whole = false;
  if ((n + 1) * (m + 1) > (limit || 4e6)) {
    whole = true;
    if (n) push("-", xs.join(""));
    if (m) push("+", ys.join(""));
  } else {
    const w = m + 1, L = new Uint32Array((n + 1) * w);  // L[i][j]: LCS length of xs[i:] and ys[j:]
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        L[i * w + j] = xs[i] === ys[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]);
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && xs[i] === ys[j]) { push("=", xs[i]); i++; j++; }
      else if (i < n && (j === m || L[(i + 1) * w + j] >= L[i * w + j + 1])) { push("-", xs[i]); i++; }
      else { push("+", ys[j]); j++; }
    }
  }
  if (tail) push("=", x.slice(x.length - tail).join(""));
  return { ops, whole };
}
function diffNodes(ops) {
  return ops.map(([op, t]) => op === "=" ? t : el(op === "+" ? "ins" : "del", { class: op === "+" ? "gen-ins" : "gen-del" }, t));
}

// ------------------------------------------------------------------ page
async function pageGenerations(params) {
  const refs = params.getAll("run");
  const slash = refs.length === 1 ? refs[0].lastIndexOf("/") : -1;
  if (slash > 0) runNav(refs[0].slice(0, slash), refs[0].slice(slash + 1), "generations");
  else document.getElementById("nav-context").textContent = "";
  if (!refs.length) { clear($app).append(el("h1", {}, "Generations"), el("div", { class: "empty" }, "select runs on the Runs page, or open a run's Generations")); return; }
  const f = { prompt: params.get("prompt") || "", index: params.get("index") || "", split: params.get("split") || "",
              step: params.get("step") || "", q: params.get("q") || "", diff: params.get("diff") || "" };
  const chosen = !!(f.prompt || f.index);
  const go = () => { location.hash = link(["generations"], { run: refs, ...f }); };
  const [list, g] = await Promise.all([api("generations", { run: refs, split: f.split, q: f.q, limit: 200 }),
                                       chosen ? api("generations", { run: refs, prompt: f.prompt, index: f.index, split: f.split, step: f.step }) : null]);
  if (addressMoved()) return;  // the user went elsewhere meanwhile: that page draws, not this one
  const runs = list.runs;
  if (!f.diff) f.diff = runs.length > 1 ? "0" : "prev";
  const opt = (v, label, cur) => el("option", { value: v, selected: String(v) === String(cur) }, label);
  const current = g && g.prompt ? g.prompt.prompt : f.prompt;
  const snippet = v => { const t = textOf(v); return t.length > 240 ? t.slice(0, 240) + "…" : t; };
  const prompts = el("ol", { id: "g-prompts", class: "gen-prompts" + (chosen ? " chosen" : "") }, list.prompts.map(p =>
    el("li", { class: p.prompt === current ? "current" : "", dataset: { prompt: p.prompt } },
      el("a", { href: link(["generations"], { run: refs, prompt: p.prompt, split: f.split, q: f.q, diff: f.diff }) },
        el("span", { class: "gen-snippet" }, snippet(p.input) || "(empty input)"),
        el("span", { class: "gen-meta" }, [p.splits.join(", "), "#" + p.first_index + (p.indices > 1 ? ` (+${p.indices - 1} more)` : ""),
          `${p.runs}/${runs.length} runs`, plural(p.steps, "step"), plural(p.samples, "sample")].filter(Boolean).join(" · "))))));
  clear($app).append(el("h1", {}, "Generations"),
    el("div", { class: "gen-runs" }, runs.map(r => el("span", {}, el("span", { class: "swatch", style: `background:${color(ref(r))}` }),
      el("a", { href: link(["run", r.project, r.run_id]) }, r.name || r.run_id)))),
    el("div", { class: "toolbar" },
      el("label", {}, "split ", el("select", { id: "g-split", onchange: e => { f.split = e.target.value; go(); } }, opt("", "all", f.split), list.splits.map(s => opt(s, s, f.split)))),
      el("input", { type: "search", id: "g-q", placeholder: "search prompts", value: f.q, style: "width:260px", onchange: e => { f.q = e.target.value; go(); } }),
      el("span", { class: "muted", id: "g-count" }, plural(list.total, "prompt") + (list.total > list.prompts.length ? ` (first ${list.prompts.length})` : "") +
        (runs.length > 1 ? ", those most runs share first" : ""))),
    list.prompts.length ? prompts : el("div", { class: "empty" }, "no prompt matches"));
  state.view = null;
  if (!chosen) { if (list.prompts.length) $app.appendChild(el("div", { class: "empty" }, "pick a prompt to see its outputs across runs and steps")); return; }
  if (!g.prompt) { $app.appendChild(el("div", { class: "empty" }, "no samples of that prompt in these runs")); return; }
  const cur = prompts.querySelector("li.current");
  if (cur) requestAnimationFrame(() => { cur.scrollIntoView({ block: "nearest" }); window.scrollTo(0, 0); });
  const gridBox = el("div");
  $app.append(el("h2", {}, "Prompt"),
    el("div", { class: "muted gen-where" }, `${g.prompt.splits.join(", ")} · sample index ${g.prompt.indices.slice(0, 12).join(", ")}` +
      (g.prompt.indices.length > 12 ? ` and ${g.prompt.indices.length - 12} more` : "") +
      (g.distinct_prompts > 1 ? ` · aligned by sample index: ${g.distinct_prompts} different inputs; the most common is shown, cells marked "other prompt" answered another` : "")),
    el("pre", { class: "text", id: "g-prompt" }, textOf(g.prompt.input)),
    el("div", { class: "toolbar" },
      el("label", {}, "step ", el("select", { id: "g-step", onchange: e => { f.step = e.target.value; go(); } }, opt("", `all (${g.steps.length})`, f.step), g.steps.map(s => opt(s, String(s), f.step)))),
      el("label", {}, "diff ", el("select", { id: "g-diff", onchange: e => { f.diff = e.target.value; setParams({ run: refs, ...f }); renderGrid(); } },
        opt("none", "none", f.diff), opt("prev", "against the previous step", f.diff), runs.length > 1 ? runs.map((r, i) => opt(String(i), "against " + (r.name || r.run_id), f.diff)) : null)),
      el("span", { class: "muted" }, g.rows.length < g.steps.length && !f.step ? `${g.rows.length} of ${g.steps.length} steps, evenly spread` : plural(g.rows.length, "step"))),
    gridBox);
  const outText = o => textOf(o.output);
  // a diff is worked out when its cell comes near the screen: a grid of 12 runs x 100 steps of long
  // outputs would otherwise cost seconds of LCS tables before anything is drawn
  let watcher = null;
  const work = new Map();
  function renderGrid() {
    if (watcher) watcher.disconnect();
    work.clear();
    watcher = new IntersectionObserver(entries => {
      for (const e of entries) if (e.isIntersecting && work.has(e.target)) { watcher.unobserve(e.target); work.get(e.target)(); work.delete(e.target); }
    }, { rootMargin: "600px 0px" });
    const base = f.diff === "none" ? null : f.diff === "prev" ? "prev" : Number(f.diff);
    const rows = g.rows.map((row, ri) => el("tr", { dataset: { step: row.step } }, el("td", { class: "num gen-step" }, fmtNum(row.step)),
      row.cells.map((cell, ci) => {
        // the cell this one is read against: the same run at its previous step shown, or the chosen run at this step
        let against = null;
        if (base === "prev") { for (let pi = ri - 1; pi >= 0 && !against; pi--) if (g.rows[pi].cells[ci].outputs.length) against = g.rows[pi].cells[ci]; }
        else if (base !== null && base !== ci) against = row.cells[base];
        const isBase = typeof base === "number" && base === ci;
        return el("td", { class: "gen-cell" + (isBase ? " gen-base" : ""), dataset: { run: ref(runs[ci]) } },
          cell.outputs.length ? cell.outputs.map((o, k) => {
            const text = outText(o);
            // the k-th output against the k-th there (the same rollout, when both hold several), else its first
            const b = against && against.outputs.length ? (against.outputs[k] || against.outputs[0]) : null;
            const extra = Object.entries(o.extra || {}).map(([key, v]) => { const t = key + ": " + fmtVal(v); return t.length > 80 ? t.slice(0, 80) + "…" : t; });
            const head = el("div", { class: "gen-head" }, el("span", { class: "gen-score" }, "score " + (o.score === null ? "—" : fmtVal(o.score))),
              el("span", { class: "muted" }, `${o.split || ""} #${o.sample_index}`),
              o.same_prompt ? null : el("span", { class: "gen-flag", title: "this sample's input is not the prompt shown above" }, "other prompt"),
              o.cut ? el("span", { class: "gen-flag", title: "outputs are cut at " + fmtNum(g.cut) + " characters here" }, `first ${fmtNum(g.cut)} of ${fmtNum(o.chars)} chars`) : null,
              isBase ? el("span", { class: "gen-flag" }, "baseline") : null);
            const body = el("pre", { class: "text gen-text" }, text);
            if (b) {
              body.dataset.diff = "pending";
              work.set(body, () => {
                const d = wordDiff(outText(b), text);
                clear(body).append(...diffNodes(d.ops));
                body.classList.add("gen-diff");
                body.dataset.diff = "done";
                if (d.whole) head.appendChild(el("span", { class: "gen-flag", title: "too long for a word diff: shown as replaced whole" }, "replaced whole"));
              });
              watcher.observe(body);
            }
            return el("div", { class: "gen-out" }, head, body, extra.length ? el("div", { class: "gen-extra muted" }, extra.join(" · ")) : null);
          }).concat(cell.n > cell.outputs.length ? [el("div", { class: "muted" }, `first ${cell.outputs.length} of ${cell.n} samples`)] : [])
            : el("span", { class: "muted" }, "no sample"));
      })));
    clear(gridBox).appendChild(g.rows.length ? el("table", { id: "g-grid", class: "gen-grid" },
      el("colgroup", {}, el("col", { class: "gen-stepcol" }), runs.map(() => el("col", {}))),
      el("thead", {}, el("tr", {}, el("th", {}, "step"), runs.map(r => el("th", {}, el("span", { class: "swatch", style: `background:${color(ref(r))}` }), r.name || r.run_id)))),
      el("tbody", {}, rows)) : el("div", { class: "empty" }, "no samples of that prompt at this step"));
  }
  renderGrid();
}
