"""The dashboard's Generations page: one prompt's outputs and scores across runs and steps, side by
side, with a word diff of the texts.

Over HTTP (the real ``trackstore ui`` in a subprocess): the prompt list and its search, the grid
aligned by prompt text or by sample index, filters, limits, errors, refused traversals. In the
system Chromium: picking a prompt, the grid, the diff (whose kept and inserted words give the
output back exactly), model-written markup shown as text, the links from a run and from Compare,
and the layout in a 1,400 px window. Screenshots go to test-artifacts/ui/generations-*.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.ui_support import (
    ARTIFACTS,
    XSS,
    chromium,
    open_page,
    require_chromium,
    serving,
    wait_for,
)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

# its tests share a module-scoped server/store: `make test` (--dist loadgroup) keeps them on one worker
pytestmark = pytest.mark.xdist_group("test_ui_generations")

QUESTIONS = ["What is 6 * 7?", "Name the capital of France.", "Write a haiku about gradient descent."]
ANSWERS = {  # (run, question) -> the answer at step 0; later steps append "(step N)"
    ("alpha", 0): "The answer is 42 because 6 times 7 is 42.",
    ("beta", 0): "The answer is 42 since 6 * 7 = 42.",
    ("gamma", 0): "42",
    ("alpha", 1): "The capital of France is Paris.",
    ("beta", 1): "Paris is the capital of France.",
    ("gamma", 1): "Paris.",
    ("alpha", 2): "Loss slopes downhill\nsmall steps along the gradient\nminima at dusk",
    ("beta", 2): "Loss flows down the hill\ntiny steps follow the slope\nrest at the minimum",
}
STEPS = {"alpha": (0, 10, 20), "beta": (0, 10, 20), "gamma": (10, 30)}
LONG = "\n".join(f"line {i}: thinking about the problem step by step" for i in range(300))
CUT = 20_000


def answer(name: str, step: int, i: int) -> str:
    if (name, step, i) == ("beta", 20, 1):
        return XSS
    if (name, step, i) == ("alpha", 20, 2):
        return LONG
    return ANSWERS[(name, i)] + ("" if step == 0 else f" (step {step})")


def write_generation_runs(root: Path) -> dict[str, str]:
    """Runs ``alpha`` and ``beta`` (val samples of the three QUESTIONS at steps 0, 10, 20) and
    ``gamma`` (steps 10 and 30; its sample index 2 is another prompt); at step 10 each holds a
    train prompt answered 20 times (GRPO rollouts), and beta one 25,000-character answer."""
    import trackstore

    ids = {}
    for name in ("alpha", "beta", "gamma"):
        with trackstore.init(project="gen", name=name, root=root) as run:
            ids[name] = run.run_id
            for step in STEPS[name]:
                rows = [{"input": q, "output": answer(name, step, i), "score": (i + step / 10) / 4, "ground_truth": str(i)}
                        for i, q in enumerate(QUESTIONS) if (name, i) in ANSWERS]
                if name == "gamma":
                    rows.append({"input": [{"role": "user", "content": "Translate 'bonjour'."}], "output": "hello",
                                 "score": 1.0, "sample_index": 2})
                run.log_samples(rows, step=step, split="val")
            run.log_samples([{"input": "Solve x + 1 = 3.", "output": f"{name} rollout {k}: x = {2 if k % 2 else 3}",
                              "score": float(k % 2)} for k in range(20)], step=10, split="train")
            if name == "beta":
                run.log_samples([{"input": "Say a lot.", "output": "y" * 25_000, "score": 0.0}], step=10, split="long")
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-generations")
    root = tmp / "store"
    root.mkdir()
    return root, write_generation_runs(root), tmp


@pytest.fixture(scope="module")
def server(store):
    root, _ids, tmp = store
    with serving(root, tmp) as s:
        yield s


def runs_q(ids, *names: str) -> str:
    return "&".join(f"run=gen/{ids[n]}" for n in names)


def prompt_of(server, ids, text: str, *names: str) -> str:
    listed = server.json(f"/api/generations?{runs_q(ids, *names)}&limit=1000")["prompts"]
    [p] = [p for p in listed if p["input"] == text]
    return p["prompt"]


# ---------------------------------------------------------------------- API
def test_the_prompt_list_shared_prompts_first_with_search_and_split(server, store):
    _root, ids, _tmp = store
    d = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}")
    assert [r["name"] for r in d["runs"]] == ["alpha", "beta", "gamma"]
    assert d["splits"] == ["long", "train", "val"]
    by_text = {json.dumps(p["input"]): p for p in d["prompts"]}
    assert d["total"] == len(d["prompts"]) == 6  # three questions, the chat prompt, the rollout prompt, the long one
    shared = by_text[json.dumps(QUESTIONS[0])]
    assert (shared["runs"], shared["steps"], shared["samples"], shared["splits"], shared["first_index"]) == (3, 4, 8, ["val"], 0)
    assert by_text[json.dumps(QUESTIONS[2])]["runs"] == 2  # gamma has another prompt at index 2
    chat = by_text[json.dumps([{"role": "user", "content": "Translate 'bonjour'."}])]  # decoded, as logged
    assert (chat["runs"], chat["first_index"]) == (1, 2)
    assert [p["runs"] for p in d["prompts"]] == sorted((p["runs"] for p in d["prompts"]), reverse=True)
    assert by_text[json.dumps("Solve x + 1 = 3.")]["samples"] == 60 and by_text[json.dumps("Solve x + 1 = 3.")]["indices"] == 20
    # search (case-insensitive substring of the input) and split
    found = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}&q=CAPITAL")
    assert [p["input"] for p in found["prompts"]] == [QUESTIONS[1]] and found["total"] == 1
    train = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'gamma')}&split=train")
    assert [p["input"] for p in train["prompts"]] == ["Solve x + 1 = 3."]
    assert server.json(f"/api/generations?{runs_q(ids, 'alpha')}&q=no%20such%20words") == {
        "runs": d["runs"][:1], "total": 0, "prompts": [], "splits": ["train", "val"]}
    assert len(server.json(f"/api/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}&limit=2")["prompts"]) == 2


def test_one_prompt_lines_up_across_runs_and_steps(server, store):
    _root, ids, _tmp = store
    h = prompt_of(server, ids, QUESTIONS[0], "alpha", "beta", "gamma")
    d = server.json(f"/api/generations?{runs_q(ids, 'gamma', 'alpha', 'beta')}&prompt={h}")  # columns in the order asked
    assert [r["name"] for r in d["runs"]] == ["gamma", "alpha", "beta"]
    assert d["prompt"] == {"prompt": h, "input": QUESTIONS[0], "splits": ["val"], "indices": [0]}
    assert d["distinct_prompts"] == 1 and d["steps"] == [0, 10, 20, 30]
    assert [row["step"] for row in d["rows"]] == [0, 10, 20, 30]
    for row in d["rows"]:
        for name, cell in zip(("gamma", "alpha", "beta"), row["cells"]):
            want = [answer(name, row["step"], 0)] if row["step"] in STEPS[name] else []
            assert [o["output"] for o in cell["outputs"]] == want and cell["n"] == len(want), (row["step"], name)
            for o in cell["outputs"]:
                assert o["score"] == row["step"] / 40 and o["extra"] == {"ground_truth": "0"} and o["same_prompt"]
                assert (o["split"], o["sample_index"], o["cut"]) == ("val", 0, False)
    # one chosen step across the runs; a step without it is an empty grid
    one = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}&prompt={h}&step=10")
    assert [[o["output"] for c in row["cells"] for o in c["outputs"]] for row in one["rows"]] == [
        [answer(n, 10, 0) for n in ("alpha", "beta", "gamma")]]
    assert one["steps"] == [0, 10, 20, 30]  # what the step picker offers
    assert server.json(f"/api/generations?{runs_q(ids, 'alpha')}&prompt={h}&step=5")["rows"] == []
    # the same prompt text found at another index in another run still lines up by text
    assert server.json(f"/api/generations?{runs_q(ids, 'alpha')}&prompt={'0' * 32}")["prompt"] is None


def test_aligned_by_sample_index_a_different_prompt_is_marked(server, store):
    _root, ids, _tmp = store
    d = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'gamma')}&index=2&split=val")
    assert d["distinct_prompts"] == 2 and d["prompt"]["input"] == QUESTIONS[2]  # the most common input is shown
    rows = {row["step"]: row["cells"] for row in d["rows"]}
    assert [o["same_prompt"] for o in rows[10][0]["outputs"]] == [True]
    assert [(o["output"], o["same_prompt"]) for o in rows[10][1]["outputs"]] == [("hello", False)]
    assert rows[20][0]["outputs"][0]["output"] == LONG


def test_a_cell_holds_every_rollout_up_to_a_bound_and_long_outputs_are_cut(server, store):
    _root, ids, _tmp = store
    h = prompt_of(server, ids, "Solve x + 1 = 3.", "alpha", "beta")
    d = server.json(f"/api/generations?{runs_q(ids, 'alpha', 'beta')}&prompt={h}")
    [row] = d["rows"]
    for name, cell in zip(("alpha", "beta"), row["cells"]):
        assert cell["n"] == 20 and len(cell["outputs"]) == d["per_cell"] == 16
        assert [o["sample_index"] for o in cell["outputs"]] == list(range(16))
        assert cell["outputs"][3]["output"] == f"{name} rollout 3: x = 2"
    h = prompt_of(server, ids, "Say a lot.", "beta")
    [row] = server.json(f"/api/generations?{runs_q(ids, 'beta')}&prompt={h}")["rows"]
    [o] = row["cells"][0]["outputs"]
    assert o["cut"] and o["chars"] == 25_000 and o["output"] == "y" * CUT


def test_markup_travels_as_json_text(server, store):
    _root, ids, _tmp = store
    status, headers, body = server.request(f"/api/generations?{runs_q(ids, 'alpha', 'beta')}&index=1&split=val&step=20")
    assert status == 200 and headers["content-type"] == "application/json"
    assert "script-src 'self'" in headers["content-security-policy"]
    [row] = json.loads(body)["rows"]
    assert row["cells"][1]["outputs"][0]["output"] == XSS


@pytest.mark.parametrize("query, status, message", [
    ("index=abc", 400, "index must be an integer"),
    ("index=1&step=1.5", 400, "step must be an integer"),
    ("prompt=not-a-digest", 400, "prompt must be 32 lower-case hex digits"),
    ("prompt=" + "A" * 32, 400, "prompt must be 32 lower-case hex digits"),
    ("prompt=" + "0" * 32 + "&index=1", 400, "give prompt= or index=, not both"),
    ("limit=0", 400, "limit must be at least 1"),
    ("limit=x", 400, "limit must be an integer"),
])
def test_bad_input_is_a_400_saying_what_is_wrong(server, store, query, status, message):
    _root, ids, _tmp = store
    got, _h, body = server.request(f"/api/generations?{runs_q(ids, 'alpha')}&{query}")
    assert got == status and json.loads(body)["error"].startswith(message), body


def test_no_run_unknown_runs_and_traversals_are_refused(server, store):
    _root, ids, _tmp = store
    status, _h, body = server.request("/api/generations")
    assert status == 400 and json.loads(body) == {"error": "give run=PROJECT/RUN_ID"}
    status, _h, body = server.request(f"/api/generations?{runs_q(ids, 'alpha')}&run=gen/nope&index=0")
    assert status == 404 and json.loads(body) == {"error": "no run 'nope'"}
    for path in ("/api/generations?run=../../etc/passwd", "/api/generations?run=gen/..%2f..%2fetc%2fpasswd&index=0",
                 "/api/generations?run=..%2F..%2Fetc&run=passwd&prompt=" + "0" * 32,
                 "/api/generations/../../etc/passwd", "/api/%2e%2e/%2e%2e/etc/passwd?run=gen/x"):
        status, _h, body = server.request(path)
        assert status in (400, 404), (path, status)
        assert b"root:" not in body and b"format_version" not in body, path


def test_the_route_writes_nothing(server, store):
    root, ids, _tmp = store

    def files():
        return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
                      if p.is_file() and p.relative_to(root).parts[0] != "_catalog")

    before = files()
    for q in ("", "&q=capital", "&index=0&split=val", "&index=0&step=10"):
        assert server.request(f"/api/generations?{runs_q(ids, 'alpha', 'beta')}{q}")[0] == 200
    assert files() == before


def test_at_most_twelve_runs_and_thousands_of_samples_answer_fast(tmp_path):
    """A store of 13 runs x 60 steps x 16 samples (12,480 samples): the list and a prompt's grid
    answer in well under a second here (bounds below are loose: the machine is shared), the
    grid spread over ``limit`` steps with the last one kept."""
    import trackstore
    from trackstore.errors import UsageError
    from trackstore.ui.data import Store

    root = tmp_path / "s"
    for r in range(13):
        with trackstore.init(project="many", name=f"r{r}", root=root) as run:
            for step in range(0, 600, 10):
                run.log_samples([{"input": f"question {i} " + "context " * 50, "output": f"run {r} step {step} " * 40,
                                  "score": i / 16} for i in range(16)], step=step, split="val")
    store = Store(root)
    runs = store.runs()
    with pytest.raises(UsageError, match="at most 12 runs"):
        store.generations(runs)
    t = time.perf_counter()
    listed = store.generations(runs[:12])
    t_list = time.perf_counter() - t
    assert listed["total"] == 16 and all(p["runs"] == 12 and p["steps"] == 60 for p in listed["prompts"])
    t = time.perf_counter()
    grid = store.generations(runs[:12], prompt=listed["prompts"][0]["prompt"], limit=7)
    t_grid = time.perf_counter() - t
    assert [row["step"] for row in grid["rows"]] == [0, 80, 170, 250, 340, 420, 590] and len(grid["steps"]) == 60
    assert all(len(row["cells"]) == 12 and all(c["n"] == 1 for c in row["cells"]) for row in grid["rows"])
    assert len(store.generations(runs[:12], sample_index=3)["rows"]) == 60  # 100 steps by default
    assert t_list < 5 and t_grid < 5, (t_list, t_grid)


# ---------------------------------------------------------------------- the page in Chromium
@pytest.fixture(scope="module")
def browser(server):
    require_chromium()
    with chromium() as d:
        yield d


def js(browser, code: str, *args):
    return browser.execute_script(code, *args)


def shot(browser, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"generations-{name}.png"))


CELLS_JS = """return [...document.querySelectorAll('#g-grid tbody tr')].map(tr => [tr.dataset.step,
  [...tr.querySelectorAll('td.gen-cell')].map(td => [...td.querySelectorAll('pre.gen-text')].map(p => ({
    text: p.textContent,
    kept: [...p.childNodes].filter(n => !(n.nodeName === 'DEL')).map(n => n.textContent).join(''),
    before: [...p.childNodes].filter(n => !(n.nodeName === 'INS')).map(n => n.textContent).join(''),
    ins: p.querySelectorAll('ins').length, del: p.querySelectorAll('del').length })))])"""


# diffs are worked out as their cells come near the screen: the grid's cells once none is still to
# do (null before), in one call: asked in two, the grid could be drawn between them, and a look
# finding no cell pending (no grid yet) then read a fresh grid whose diffs were still to come
SETTLED_CELLS_JS = "if (!document.querySelector('#g-grid') || document.querySelector('#g-grid pre[data-diff=pending]')) return null;\n" + CELLS_JS


def test_pick_a_prompt_and_see_it_across_runs_and_steps_with_a_diff(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}")
    items = wait_for(lambda: js(browser, "return [...document.querySelectorAll('#g-prompts li .gen-snippet')].map(s => s.textContent)"),
                     what="the prompt list")
    # those three runs share first (then by split and index), a chat prompt as text
    assert items == ["Solve x + 1 = 3.", *QUESTIONS, "Say a lot.", "[user] Translate 'bonjour'."]
    assert js(browser, "return document.querySelector('#g-grid')") is None
    assert js(browser, "return [...document.querySelectorAll('.gen-runs a')].map(a => a.textContent)") == ["alpha", "beta", "gamma"]
    shot(browser, "picker")
    js(browser, "const s = document.getElementById('g-q'); s.value = 'capital'; s.dispatchEvent(new Event('change'));")
    wait_for(lambda: js(browser, "return [...document.querySelectorAll('#g-prompts li .gen-snippet')].map(s => s.textContent)")
             == [QUESTIONS[1]], what="the search to keep one prompt")
    js(browser, "document.querySelector('#g-prompts li a').click();")
    rows = wait_for(lambda: js(browser, SETTLED_CELLS_JS), what="the grid and its diffs")
    assert js(browser, "return document.getElementById('g-prompt').textContent") == QUESTIONS[1]
    assert js(browser, "return document.querySelectorAll('#g-prompt').length") == 1  # the prompt once, at the top
    assert js(browser, "return [...document.querySelectorAll('#g-grid thead th')].map(th => th.textContent)") == [
        "step", "alpha", "beta", "gamma"]
    assert [step for step, _cells in rows] == ["0", "10", "20", "30"]
    # the default diff is against the first run: beta's and gamma's words kept and inserted give
    # their output back, kept and deleted give alpha's
    for step, cells in rows:
        s = int(step)
        for name, outs in zip(("alpha", "beta", "gamma"), cells):
            want = answer(name, s, 1) if s in STEPS[name] else None
            assert [o["kept"] for o in outs] == ([want] if want else []), (step, name)
            if name != "alpha" and want and s in STEPS["alpha"]:
                assert outs[0]["before"] == answer("alpha", s, 1) and outs[0]["ins"] + outs[0]["del"] > 0
    assert js(browser, "return document.querySelectorAll('#g-grid td.gen-base').length") == 4
    shot(browser, "grid")
    # against the previous step: alpha's step 10 differs from its step 0 by the appended "(step 10)"
    js(browser, "const s = document.getElementById('g-diff'); s.value = 'prev'; s.dispatchEvent(new Event('change'));")
    rows = wait_for(lambda: (r := js(browser, SETTLED_CELLS_JS)) and r[1][1][0][0]["ins"] == 1 and r,
                    what="the diff against the previous step")
    alpha10 = rows[1][1][0][0]
    assert alpha10["before"] == answer("alpha", 0, 1) and alpha10["kept"] == answer("alpha", 10, 1)
    assert js(browser, "return document.querySelector('#g-grid tr[data-step=\"10\"] td.gen-cell ins').textContent") == " (step 10)"
    assert "diff=prev" in browser.current_url
    gamma30 = rows[3][1][2][0]  # gamma has no step 20: its step 30 is read against its step 10
    assert gamma30["before"] == answer("gamma", 10, 1) and gamma30["kept"] == answer("gamma", 30, 1)
    shot(browser, "diff-previous-step")
    js(browser, "const s = document.getElementById('g-diff'); s.value = 'none'; s.dispatchEvent(new Event('change'));")
    rows = wait_for(lambda: (r := js(browser, CELLS_JS)) and all(o["ins"] == o["del"] == 0 for _s, c in r for os in c for o in os) and r,
                    what="no diff")
    assert rows[0][1][0][0]["text"] == answer("alpha", 0, 1)


def test_model_markup_in_an_output_is_shown_as_text(browser, server, store):
    _root, ids, _tmp = store
    for diff in ("none", "0"):
        open_page(browser, server, f"/generations?{runs_q(ids, 'alpha', 'beta')}&index=1&split=val&step=20&diff={diff}")
        [(_step, [_alpha, [beta]])] = wait_for(lambda: js(browser, SETTLED_CELLS_JS), what="the grid")
        assert beta["kept"] == XSS
        if diff == "none":
            assert beta["text"] == XSS
        assert js(browser, "return typeof window.__pwned") == "undefined"
        assert js(browser, "return document.querySelectorAll('#app img, #app script').length") == 0
    shot(browser, "markup-as-text")


def test_a_long_output_scrolls_in_its_cell_and_the_grid_fits_the_window(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/generations?{runs_q(ids, 'alpha', 'beta', 'gamma')}&index=2&split=val")
    wait_for(lambda: js(browser, CELLS_JS), what="the grid")
    assert js(browser, "return document.documentElement.scrollWidth") <= js(browser, "return window.innerWidth")
    box = js(browser, """const p = document.querySelector('#g-grid tr[data-step="20"] td.gen-cell pre');
                        return [p.clientHeight, p.scrollHeight, getComputedStyle(p).overflowY, p.getBoundingClientRect().width]""")
    assert box[0] <= 330 and box[1] > 3 * box[0] and box[2] == "auto" and box[3] > 300
    widths = js(browser, "return [...document.querySelectorAll('#g-grid thead th')].slice(1).map(th => Math.round(th.getBoundingClientRect().width))")
    assert max(widths) - min(widths) <= 2  # equal columns, one per run
    flags = js(browser, "return [...document.querySelectorAll('#g-grid .gen-flag')].map(f => f.textContent)")
    assert "other prompt" in flags  # gamma's sample index 2 is another question
    assert "different inputs" in js(browser, "return document.querySelector('.gen-where').textContent")
    js(browser, "document.querySelector('#g-grid tr[data-step=\"20\"] td.gen-cell pre').scrollTop = 2000;")
    shot(browser, "long-output")
    # many rollouts of one prompt in one cell
    open_page(browser, server, f"/generations?{runs_q(ids, 'alpha', 'beta')}&q=solve")
    wait_for(lambda: js(browser, "return document.querySelectorAll('#g-prompts li').length === 1"), what="the rollout prompt")
    js(browser, "document.querySelector('#g-prompts li a').click();")
    [(_step, cells)] = wait_for(lambda: js(browser, CELLS_JS), what="the rollouts")
    assert [len(outs) for outs in cells] == [16, 16]
    assert "first 16 of 20 samples" in js(browser, "return document.querySelector('#g-grid td.gen-cell').textContent")
    shot(browser, "rollouts")


def test_links_from_a_run_and_from_compare(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/run/gen/{ids['beta']}")
    wait_for(lambda: js(browser, "return document.querySelector('h1 .status')"), what="the run page")  # drawn: it will not draw over ours
    assert js(browser, "return [...document.querySelectorAll('#nav-context a')].map(a => a.textContent)")[-1] == "Generations"
    js(browser, "[...document.querySelectorAll('#nav-context a')].find(a => a.textContent === 'Generations').click();")
    wait_for(lambda: js(browser, "return document.querySelectorAll('#g-prompts li').length") == 5, what="beta's prompts")
    assert js(browser, "return [...document.querySelectorAll('.gen-runs a')].map(a => a.textContent)") == ["beta"]
    h = prompt_of(server, ids, QUESTIONS[0], "beta")
    js(browser, "document.querySelector(`#g-prompts li[data-prompt='${arguments[0]}'] a`).click();", h)
    rows = wait_for(lambda: js(browser, CELLS_JS), what="beta's grid")
    assert [s for s, _c in rows] == ["0", "10", "20"] and js(browser, "return document.getElementById('g-diff').value") == "prev"
    assert js(browser, "return [...document.querySelectorAll('#nav-context a')].find(a => a.textContent === 'Generations').style.fontWeight") == "600"
    shot(browser, "one-run")
    open_page(browser, server, f"/compare?{runs_q(ids, 'alpha', 'gamma')}")
    href = wait_for(lambda: js(browser, "return document.getElementById('compare-generations').getAttribute('href')"),
                    what="the compare page's link")
    shot(browser, "compare-link")
    assert href == f"#/generations?{runs_q(ids, 'alpha', 'gamma').replace('/', '%2F')}"
    js(browser, "document.getElementById('compare-generations').click();")
    wait_for(lambda: js(browser, "return [...document.querySelectorAll('.gen-runs a')].map(a => a.textContent)") == ["alpha", "gamma"],
             what="the generations of the compared runs")
