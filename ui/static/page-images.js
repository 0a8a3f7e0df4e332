// trackstore ui: the Images page: a step slider per image key.
"use strict";

// ------------------------------------------------------------------ images
function imageSlider(runRef, h) {
  // one key: a step slider over the steps that hold images, the step's images below it
  const steps = h.steps;
  const label = el("span", { class: "step-label mono" });
  const shown = el("div", { class: "images" });
  const show = i => {
    const s = steps[i];
    label.textContent = `step ${s.step}  (${i + 1} of ${steps.length})`;
    clear(shown).append(...s.images.map(img => imageFigure(runRef, img, "shot")));
  };
  const slider = el("input", { type: "range", class: "slider", min: 0, max: steps.length - 1, value: steps.length - 1, step: 1,
    oninput: e => show(Number(e.target.value)) });
  show(steps.length - 1);
  return el("div", { class: "image-key" }, el("div", { class: "toolbar" }, slider, label), shown);
}
async function pageImages(project, runId, params) {
  runNav(project, runId, "images");
  const id = project + "/" + runId;
  const d = await api("run", { run: id });
  const keys = d.image_keys || [];
  const box = el("div");
  clear($app).append(el("h1", {}, "Images"), el("div", { class: "muted" }, el("a", { href: link(["run", project, runId]) }, id)), box);
  if (!keys.length) { box.appendChild(el("div", { class: "empty" }, "this run has no images")); return; }
  for (const k of keys) {
    const h = await api("images", { run: id, key: k });
    if (!h.steps.length) continue;
    box.append(el("h2", {}, k), el("div", { class: "muted" }, plural(h.steps.length, "step") + " · drag the slider to move through them"),
               imageSlider(id, h));
  }
  state.view = null;
}
