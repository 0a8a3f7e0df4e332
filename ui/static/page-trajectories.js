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
function byStart(nodes) {
  // siblings in the order they started (a span still open has a start; one without sorts last)
  return [...(nodes || [])].sort((a, b) => (a.start_ns === null || a.start_ns === undefined ? Infinity : a.start_ns)
                                         - (b.start_ns === null || b.start_ns === undefined ? Infinity : b.start_ns));
}
function modelInput(text) {
  // what the model was given, when it is not a turn of its own (the prompt as the model saw it)
  return el("details", { class: "model-input" }, el("summary", {}, "model input"), pre(text));
}
function conversation(node, out) {
  // the trajectory as turns in the order they happened: user, assistant, tool calls with arguments
  // and results, rewards, errors. Siblings go by start time; a span's own output comes after what
  // ran inside it (a final answer follows the tool calls it waited for), except a model reply that
  // asks for tool calls, which comes before the calls it asked for.
  const r = node;
  const ins = r.inputs, outs = r.outputs;
  const has = v => v !== null && v !== undefined;
  const chat = v => Array.isArray(v) && v.length && v.every(m => m && typeof m === "object" && "role" in m);
  // a model call's input is the whole conversation so far: each message is shown once, where it
  // first appears (a user span, a tool result, an earlier call), not again under every later call
  const shown = out.shown || (out.shown = new Set());
  const fresh = text => { if (shown.has(text)) return false; shown.add(text); return true; };
  // a user turn stays open (unanswered) until an assistant turn: tool turns in between do not close it
  const push = (cls, role, body) => {
    out.push(turn(cls, role, body));
    if (cls === "user") out.open = true; else if (cls === "assistant") out.open = false;
  };
  const children = () => { for (const ch of byStart(r.children)) conversation(ch, out); };
  if (r.kind === "llm") {
    // the model's input: messages not shown yet are turns of their own, except a user message
    // while the user's question is still unanswered (the model's wording of it, with whatever
    // context was added: not a second user turn) and an input that is not a chat once the
    // conversation has begun
    const extra = [];
    if (chat(ins)) {
      ins.forEach(m => {
        const empty = !has(m.content) || m.content === "";
        if (m.role === "assistant" && Array.isArray(m.tool_calls) && m.tool_calls.length) {
          // an earlier reply asking for tools: shown where it was the output, else here
          if (!fresh(JSON.stringify(m.tool_calls))) return;
          if (!empty && fresh(contentText(m.content))) push("assistant", "assistant", pre(contentText(m.content)));
          toolCallTurns(m).forEach(c => out.push(c));
          return;
        }
        if (empty) return;
        const t = contentText(m.content);
        if (!fresh(t)) return;
        if (m.role === "user" && out.open) extra.push(m.role + ": " + t);
        else push(m.role === "tool" ? "tool" : m.role, m.role, pre(t));
      });
    } else if (has(ins)) {
      const t = contentText(ins);
      if (out.length) extra.push(t);
      else { shown.add(t); push("user", "prompt", pre(t)); }
    }
    const reply = outs && typeof outs === "object" && !Array.isArray(outs) && ("content" in outs || "tool_calls" in outs);
    const calls = reply ? toolCallTurns(outs) : [];
    const text = reply ? (has(outs.content) && outs.content !== "" ? contentText(outs.content) : null) : (has(outs) ? contentText(outs) : null);
    const answer = () => {
      if (text !== null || extra.length) {
        if (text !== null) shown.add(text);
        push("assistant", "assistant", el("div", {}, extra.length ? modelInput(extra.join("\n\n")) : null, text !== null ? pre(text) : null));
      }
    };
    if (calls.length) { shown.add(JSON.stringify(outs.tool_calls)); answer(); calls.forEach(c => out.push(c)); children(); }
    else { children(); answer(); }
  } else if (r.kind === "tool") {
    if (has(outs)) shown.add(contentText(outs));
    push("tool", "tool " + r.name, el("div", {}, el("div", { class: "muted" }, "arguments"), pre(contentText(ins === undefined ? null : ins)),
      el("div", { class: "muted" }, "result"), pre(contentText(outs === undefined ? null : outs))));
    children();
  } else if (r.kind === "reward") {
    children();
    push("reward", "reward" + (has(r.reward) ? " " + fmtNum(r.reward) : ""), pre(contentText(has(outs) ? outs : ins)));
  } else if (node !== out.root) {
    if (chat(ins)) ins.forEach(m => { const t = contentText(m.content); if (fresh(t)) push(m.role, m.role, pre(t)); });
    else if (ins && typeof ins === "object" && Object.keys(ins).length === 1 && "content" in ins) {
      shown.add(contentText(ins.content)); push(r.name === "user" ? "user" : "", r.name, pre(contentText(ins.content)));
    } else if (has(ins)) push("", r.name + " inputs", pre(contentText(ins)));
    children();
    if (has(outs)) push("", r.name + " outputs", pre(contentText(outs)));
  } else children();
  if (r.error) push("error", "error in " + r.name, pre(r.error));
  return out;
}
function spanTree(n) {
  return el("div", { class: "span" }, el("span", {}, el("b", {}, n.name), ` [${n.kind}] `, el("span", { class: "muted" }, fmtDur(n.duration_s)),
    n.status !== "ok" ? el("span", { class: "err" }, " " + n.status) : null, n.reward !== null && n.reward !== undefined ? ` reward ${fmtNum(n.reward)}` : null),
    byStart(n.children).map(spanTree));
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
