// trackstore ui: the Trajectories page: each multi-turn trajectory as a conversation and a span tree.
"use strict";

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
