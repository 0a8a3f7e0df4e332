"""``trackstore ui`` pages in a real headless Chromium (the system's package, driven by Selenium),
against the real command on a real store: Compare fits the window with ten runs and long config
values, puts its charts before the long summary and highlights only the cells that differ; a new
page starts at the top and Back returns to where the user was; dark mode (emulated by Chromium)
gives every page a dark background and readable text; histograms answer hovering with the bin's
step, range, count and density and draw an overlay and an offset view; a trajectory's turns come
in the order they happened.

One browser and one server for the module; screenshots go to test-artifacts/ui/pages-*.png
(git-ignored). Skipped, with the reason, only when chromium or chromedriver is not installed.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.ui_support import (
    ARTIFACTS,
    chromium,
    require_chromium,
    serving,
    wait_for,
    write_small_runs,
)

require_chromium()

pytestmark = pytest.mark.xdist_group("test_ui_pages")

CMP_RUNS = 10
LONG_VALUE = "You are a careful assistant. " * 12 + "/" + "x" * 180  # spaces, then a long unbroken run
SUMMARY_KEYS = 100
SHARED_SEED = 7  # runs 0..8 share it, run 9 is the odd one out


def write_compare_runs(root) -> list[str]:
    """Ten runs in project ``cmp``: long config values, 100 summary keys of which some are equal
    across runs, two metric keys, and (in the first run) 60 samples at one step. Their ids."""
    import trackstore

    ids = []
    for n in range(CMP_RUNS):
        config = {"prompt": {"template": LONG_VALUE + str(n % 2)}, "data": {"path": "/datasets/" + "very-long-dir-name/" * 8},
                  "seed": SHARED_SEED if n < CMP_RUNS - 1 else 99, "lr": 1e-6 * (n + 1)}
        with trackstore.init(project="cmp", name=f"run-{n}-with-a-rather-long-name", config=config, root=root) as run:
            ids.append(run.run_id)
            for step in range(30):
                run.log({"loss": 1.0 / (step + 1) + n * 0.01, "reward/mean": step / 30 + n * 0.02}, step=step)
            run.summary.update({f"eval/metric_{k:03d}": (float(k) if k % 4 == 0 else k + n / 10) for k in range(SUMMARY_KEYS)})
            if n == 0:
                run.log_samples([{"input": f"question {i}", "output": f"answer {i}\n" * 3, "score": i % 2} for i in range(60)],
                                step=10)
    return ids


def write_agent_run(root) -> str:
    """A run with two trajectories as agents log them: a model turn whose tool call is a child span
    and whose final answer is its output (step 1), and the docs' pattern: a model turn asking for a
    tool, the tool as a sibling, a second model turn given the tool's result (step 2)."""
    import trackstore

    with trackstore.init(project="agent", name="calc", root=root) as run:
        with run.trace(step=1, sample_index=0) as tr:
            with tr.span("user", kind="other", inputs={"content": "What is 6 * 7? Use the calculator."}):
                pass
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "6 * 7"}]) as turn:
                with tr.span("calculator", kind="tool", inputs={"expression": "6 * 7"}) as tool:
                    tool.set_outputs(42)
                turn.set_outputs("The answer is 42.")
            with tr.span("reward", kind="reward", inputs={"answer": 42}) as rw:
                rw.set_outputs(1.0)
            tr.set_reward(1.0)
        with run.trace(step=2, sample_index=0) as tr:
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "6*7?"}]) as s:
                s.set_outputs({"tool_calls": [{"name": "calculator", "arguments": {"expr": "6*7"}}]})
            with tr.span("calculator", kind="tool", inputs={"expr": "6*7"}, outputs="42"):
                pass
            with tr.span("assistant", kind="llm", inputs={"tool_result": "42"}, outputs="It is 42."):
                pass
            tr.set_reward(1.0)
        # step 3: a chat API's calls, each given the whole conversation so far (the assistant's
        # tool-call message has no content)
        system, user = {"role": "system", "content": "Use tools."}, {"role": "user", "content": "6*7?"}
        call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expr": "6*7"}'}}
        with run.trace(step=3, sample_index=0) as tr:
            with tr.span("chat", kind="llm", inputs=[system, user], outputs={"content": None, "tool_calls": [call]}):
                pass
            with tr.span("calculator", kind="tool", inputs={"expr": "6*7"}, outputs="42"):
                pass
            with tr.span("chat", kind="llm", inputs=[system, user, {"role": "assistant", "content": None, "tool_calls": [call]},
                                                     {"role": "tool", "tool_call_id": "c1", "content": "42"}],
                         outputs={"content": "6*7 is 42."}):
                pass
        # step 4: a retrieval tool between the user's question and the model, given both
        with run.trace(step=4, sample_index=0) as tr:
            with tr.span("user", kind="other", inputs={"content": "Who wrote Dune?"}):
                pass
            with tr.span("search", kind="tool", inputs={"q": "Dune author"}, outputs="Frank Herbert wrote Dune."):
                pass
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "Context: Frank Herbert wrote Dune. "
                                                                                    "Question: Who wrote Dune?"}],
                         outputs="Frank Herbert."):
                pass
        return run.run_id


@pytest.fixture(scope="module")
def pages_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-pages")
    root = tmp / "store"
    root.mkdir()
    ids = write_small_runs(root)
    ids["cmp"] = write_compare_runs(root)
    ids["agent"] = write_agent_run(root)
    return root, ids, tmp


@pytest.fixture(scope="module")
def server(pages_store):
    root, _ids, tmp = pages_store
    with serving(root, tmp) as s:
        yield s


@pytest.fixture(scope="module")
def browser(server):
    with chromium() as d:
        yield d


@pytest.fixture
def light(browser):
    """The page in the light scheme at 1,400 x 1,000 again after the test, whatever it emulated."""
    yield browser
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    browser.set_window_size(1400, 1000)


def shot(browser, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"pages-{name}.png"))


def js(browser, code: str, *args):
    return browser.execute_script(code, *args)


def open_page(browser, server, fragment: str = "") -> None:
    """A fresh load of the page at ``fragment`` (a new document: nothing kept from the last test)."""
    browser.get("about:blank")
    browser.get(server.url + ("#" + fragment if fragment else ""))
    js(browser, "localStorage.clear();")


def compare_url(project: str, run_ids) -> str:
    return "/compare?" + "&".join(f"run={project}/{r}" for r in run_ids)


# ------------------------------------------------------------------ compare

def cells(browser, table: str):
    """[[key, [(text, highlighted), ...], row class], ...] of a compare table."""
    return js(browser, """return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)].map(r =>
        [r.cells[0].textContent, [...r.cells].slice(1).map(c => [c.textContent, c.classList.contains('differs')]), r.className])""", table)


def test_compare_fits_the_window_and_highlights_only_what_differs(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    runs = ids["cmp"]
    for width in (1400, 1024):
        browser.set_window_size(width, 1000)
        for n in (CMP_RUNS, 3, 2):
            open_page(browser, server, compare_url("cmp", runs[:n]))
            wait_for(lambda: js(browser, "return document.querySelector('#config-diff tbody tr')"), what="the config table")
            wait_for(lambda: js(browser, "return window.__ts.charts['loss'] && window.__ts.charts['loss'].u"), what="the charts")
            sizes = js(browser, "return [document.documentElement.scrollWidth, window.innerWidth]")
            assert sizes[0] <= sizes[1], (width, n, sizes)
            # the tables scroll inside their boxes: none reaches past the window's right edge
            right = js(browser, "return Math.max(...[...document.querySelectorAll('.tablebox')].map(b => b.getBoundingClientRect().right))")
            assert right <= sizes[1], (width, n, right)
            if n == CMP_RUNS:
                shot(browser, f"compare-{width}")
                # charts come before the long summary, which is folded
                order = js(browser, """const y = s => document.querySelector(s).getBoundingClientRect().top;
                    return [y('#compare-config'), y('#compare-charts'), y('#compare-summary')]""")
                assert order == sorted(order), order
                assert js(browser, "return document.getElementById('compare-summary').open") is False
    # the long config value wraps inside its cell and keeps the whole value in its title
    browser.set_window_size(1400, 1000)
    open_page(browser, server, compare_url("cmp", runs[:3]))
    wait_for(lambda: js(browser, "return document.querySelector('#config-diff tbody tr')"), what="the config table")
    rows = cells(browser, "config-diff")
    by_key = {k: v for k, v, _cls in rows}
    assert set(by_key) == {"lr", "prompt.template"}  # only what differs; seed and data.path are equal
    assert [hl for _t, hl in by_key["lr"]] == [True, True, True]  # three values, no majority
    # run 0 and run 2 share the template, run 1 is the odd one out: only its cell is highlighted
    assert [hl for _t, hl in by_key["prompt.template"]] == [False, True, False]
    title = js(browser, "return document.querySelector('#config-diff tbody tr:nth-child(2) td:nth-child(2) .clamp').title")
    assert title == LONG_VALUE + "0"
    # every key on request: equal rows are not highlighted at all
    js(browser, "document.getElementById('config-only-diff').click()")
    rows = cells(browser, "config-diff")
    assert {k for k, _v, _c in rows} == {"data.path", "lr", "prompt.template", "seed"}
    for key, vals, cls in rows:
        assert (cls == "same") == (key in ("data.path", "seed")) and (cls == "same") == (not any(hl for _t, hl in vals))
    # ten runs: the seed differs in the last run only, and only that cell is highlighted
    open_page(browser, server, compare_url("cmp", runs))
    wait_for(lambda: js(browser, "return document.querySelector('#config-diff tbody tr')"), what="the config table")
    seed = {k: v for k, v, _c in cells(browser, "config-diff")}["seed"]
    assert [hl for _t, hl in seed] == [False] * (CMP_RUNS - 1) + [True]
    # the summary: equal values dimmed and not highlighted, differing ones highlighted; a filter and
    # an "only differences" toggle
    js(browser, "document.getElementById('compare-summary').open = true")
    summary = cells(browser, "summary-diff")
    assert [k for k, _v, _c in summary if not k.startswith("eval/")] == ["loss", "reward/mean"]  # the last values logged
    summary = [row for row in summary if row[0].startswith("eval/")]
    assert len(summary) == SUMMARY_KEYS
    for key, vals, cls in summary:
        equal = int(key.rsplit("_", 1)[1]) % 4 == 0
        assert (cls == "same") == equal, key
        assert [hl for _t, hl in vals] == [not equal] * CMP_RUNS, key
    js(browser, "document.getElementById('summary-only-diff').click()")
    assert len(cells(browser, "summary-diff")) == 2 + SUMMARY_KEYS - SUMMARY_KEYS // 4
    js(browser, "const s = document.getElementById('summary-filter'); s.value = 'metric_00'; s.dispatchEvent(new Event('input'));")
    assert [k for k, _v, _c in cells(browser, "summary-diff")] == [f"eval/metric_00{k}" for k in range(10) if k % 4]
    assert js(browser, "return document.documentElement.scrollWidth <= window.innerWidth")


def test_compare_of_the_shared_runs_keeps_its_table(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    open_page(browser, server, compare_url("rl", [ids["alpha"], ids["beta"]]))
    wait_for(lambda: js(browser, "return document.querySelector('#config-diff tbody tr')"), what="the config table")
    assert [[k, [t for t, _h in v]] for k, v, _c in cells(browser, "config-diff")] == [
        ["actor.optim.lr", ["1.000e-6", "3.000e-6"]], ["seed", ["0", "1"]]]
    # two runs that disagree: both cells are highlighted
    assert all(h for _k, v, _c in cells(browser, "config-diff") for _t, h in v)


# ------------------------------------------------------------------ scroll

def test_a_new_page_starts_at_the_top_and_back_returns_to_where_the_user_was(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    run = ids["cmp"][0]
    browser.set_window_size(1400, 700)
    open_page(browser, server, f"/run/cmp/{run}")
    wait_for(lambda: js(browser, "return document.querySelector('.chart')"), what="the run page's charts")
    wait_for(lambda: js(browser, "return document.documentElement.scrollHeight > window.innerHeight + 450"), what="a long run page")
    js(browser, "window.scrollTo(0, 400)")
    assert js(browser, "return window.scrollY") == 400
    # a link to another page: that page starts at the top (it is long enough to keep an offset)
    js(browser, "[...document.querySelectorAll('#nav-context a')].find(a => a.textContent === 'Samples').click()")
    wait_for(lambda: js(browser, "return document.querySelectorAll('#samples tbody tr').length === 60"), what="the samples")
    assert js(browser, "return document.documentElement.scrollHeight > window.innerHeight + 600")
    wait_for(lambda: js(browser, "return window.scrollY === 0"), what="the samples page at the top")
    js(browser, "window.scrollTo(0, 350)")
    # Back: the run page where the user left it
    browser.back()
    wait_for(lambda: js(browser, "return location.hash.startsWith('#/run/')"), what="the run page again")
    wait_for(lambda: js(browser, "return window.scrollY === 400"), what="the run page at 400 px")
    # Forward: the samples page where the user left it
    browser.forward()
    wait_for(lambda: js(browser, "return document.querySelectorAll('#samples tbody tr').length === 60"), what="the samples")
    wait_for(lambda: js(browser, "return window.scrollY === 350"), what="the samples page at 350 px")
    # the same page opened anew (not through history): at the top
    js(browser, "location.hash = arguments[0]", f"#/run/cmp/{run}")
    wait_for(lambda: js(browser, "return document.querySelector('.chart')"), what="the run page")
    assert js(browser, "return window.scrollY") == 0
    # a reload keeps the offset of the entry shown
    js(browser, "window.scrollTo(0, 420)")
    browser.refresh()
    wait_for(lambda: js(browser, "return window.scrollY === 420"), what="the offset kept over a reload")


# ------------------------------------------------------------------ dark mode

LUMA_JS = """
const rgb = s => (s.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
const lin = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
const luma = s => { const [r, g, b] = rgb(s); return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b); };
const contrast = (a, b) => { const x = luma(a), y = luma(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
const bgOf = e => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (!/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') return c; } return getComputedStyle(document.body).backgroundColor; };
const body = getComputedStyle(document.body).backgroundColor;
const worst = [...document.querySelectorAll(arguments[0])].filter(e => e.offsetParent && e.textContent.trim()).slice(0, 200)
  .map(e => [contrast(getComputedStyle(e).color, bgOf(e)), e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 40)])
  .sort((a, b) => a[0] - b[0])[0];
return [luma(body), worst];
"""
TEXT = "h1, h2, td, th, a, .muted, .turn .role, pre, label, button, .status, .tag, summary, .readout"


def test_dark_mode_gives_every_page_a_dark_background_and_readable_text(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    alpha = ids["alpha"]
    pages = {
        "runs": ("", "#runs tbody tr"),
        "run": (f"/run/rl/{alpha}", "#artifacts td a"),
        "compare": (compare_url("cmp", ids["cmp"][:3]), "#config-diff td.differs"),
        "samples": (f"/samples/rl/{alpha}", "#samples tbody tr"),
        "trajectories": (f"/trajectories/agent/{ids['agent']}", ".traj .turn"),
        "histograms": (f"/histograms/rl/{alpha}", "canvas.heat[data-lines]"),
    }
    for name, (fragment, ready) in pages.items():
        open_page(browser, server, fragment)
        wait_for(lambda sel=ready: js(browser, "return document.querySelector(arguments[0])", sel), what=f"the {name} page")
        if name in ("run", "compare"):
            wait_for(lambda: js(browser, "return Object.values(window.__ts.charts).some(c => c.u)"), what="a chart")
        body_luma, (ratio, where) = js(browser, LUMA_JS, TEXT)
        assert body_luma < 0.03, (name, body_luma)  # a dark background (white is 1, #111417 about 0.007)
        assert ratio >= 4.5, (name, ratio, where)  # WCAG AA for text, for the least readable text shown
        shot(browser, f"dark-{name}")
    # the histogram canvas is drawn on the dark background, not on white
    corner = js(browser, "return [...document.querySelector('canvas.heat').getContext('2d').getImageData(1, 1, 1, 1).data]")
    assert sum(corner[:3]) < 3 * 60, corner
    # the differing cell's highlight is a dark fill too
    open_page(browser, server, compare_url("cmp", ids["cmp"][:3]))
    wait_for(lambda: js(browser, "return document.querySelector('#config-diff td.differs')"), what="a highlighted cell")
    fill = js(browser, "return getComputedStyle(document.querySelector('#config-diff td.differs')).backgroundColor")
    assert sum(int(c) for c in re.findall(r"\d+", fill)[:3]) < 3 * 90, fill


# ------------------------------------------------------------------ histograms

def histogram_rows(server, run_id: str):
    return server.json(f"/api/histograms?run=rl/{run_id}&key=grad/hist")["rows"]


INKED_JS = """
// pixels of the canvas that are neither its background nor near it, inside the plot area
const c = document.querySelector('canvas.heat'), x = c.getContext('2d');
const d = x.getImageData(0, 0, c.width, c.height).data, bg = [d[0], d[1], d[2]];
let n = 0;
for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1]) + Math.abs(d[i + 2] - bg[2]) > 40) n++;
return n;
"""


def hover(browser, dx: int, dy: int) -> str:
    """Move the mouse to (dx, dy) px from the canvas's top-left corner; the read-out's text."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("css selector", "canvas.heat")
    rect = js(browser, "const r = arguments[0].getBoundingClientRect(); return [r.width, r.height]", canvas)
    ActionChains(browser).move_to_element_with_offset(canvas, int(dx - rect[0] / 2), int(dy - rect[1] / 2)).perform()
    return js(browser, "return document.querySelector('.hist .readout').textContent")


def test_histograms_answer_hovering_and_draw_overlay_and_offset_views(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    rows = histogram_rows(server, ids["alpha"])
    assert len(rows) == 10
    open_page(browser, server, f"/histograms/rl/{ids['alpha']}")
    wait_for(lambda: js(browser, "return document.querySelector('canvas.heat[data-lines]')"), what="the heat map")
    assert js(browser, "return document.querySelector('canvas.heat').dataset.mode") == "heat"
    heat_ink = js(browser, INKED_JS)
    assert heat_ink > 5000, heat_ink
    # the heat map: 10 columns over the plot; the last column, halfway up
    width = js(browser, "return document.querySelector('canvas.heat').getBoundingClientRect().width")
    plot_l, plot_r = 64, width - 12
    col = (plot_r - plot_l) / len(rows)
    text = hover(browser, int(plot_l + col * 9.5), 10 + (260 - 34) // 2)
    m = re.fullmatch(r"step (\d+) · value \[(\S+), (\S+)[)\]] · count (\d+) of (\d+) · density (\S+)", text)
    assert m, text
    last = rows[-1]
    assert int(m.group(1)) == last["step"] == 180
    j = next(i for i, e in enumerate(last["edges"][:-1]) if abs(e - float(m.group(2))) <= 1e-4 * max(1, abs(e)))
    assert int(m.group(4)) == last["counts"][j] and int(m.group(5)) == sum(last["counts"]) == 500
    width_j = last["edges"][j + 1] - last["edges"][j]
    assert float(m.group(6)) == pytest.approx(last["counts"][j] / (500 * width_j), rel=1e-3)
    shot(browser, "histograms-heat")
    # off the plot: no values
    assert hover(browser, 5, 5) == "hover the chart for values"
    # overlay: eight of the ten steps as lines
    js(browser, "document.querySelector('.hist button[data-mode=overlay]').click()")
    assert js(browser, "return document.querySelector('canvas.heat').dataset.mode") == "overlay"
    assert js(browser, "return document.querySelector('canvas.heat').dataset.lines") == "8"
    assert js(browser, INKED_JS) > 1500
    text = hover(browser, int(plot_l + (plot_r - plot_l) * 0.6), 250 - 24)
    assert re.fullmatch(r"step \d+ · (value \[\S+, \S+[)\]] · count \d+ of 500 · density \S+|no values here)", text), text
    shot(browser, "histograms-overlay")
    # offset: every step on its own baseline, the latest at the bottom in front
    js(browser, "document.querySelector('.hist button[data-mode=offset]').click()")
    assert js(browser, "return document.querySelector('canvas.heat').dataset.lines") == "10"
    assert js(browser, "return document.querySelector('canvas.heat').getBoundingClientRect().height") == 340
    assert js(browser, INKED_JS) > 3000
    # just above the bottom baseline, in the middle of the values: the latest step
    text = hover(browser, int(plot_l + (plot_r - 70 + 12 - plot_l) * 0.5), 340 - 24 - 3)
    assert text.startswith("step 180 · "), text
    shot(browser, "histograms-offset")
    # the choice is kept per key
    browser.refresh()
    wait_for(lambda: js(browser, "return document.querySelector('canvas.heat[data-lines]')"), what="the histogram again")
    assert js(browser, "return document.querySelector('canvas.heat').dataset.mode") == "offset"
    assert json.loads(js(browser, "return localStorage.getItem('ts.histmode')")) == {"grad/hist": "offset"}
    # a narrower window: the canvas is drawn again at the page's width (not squeezed)
    browser.set_window_size(800, 1000)
    wait_for(lambda: js(browser, """const c = document.querySelector('canvas.heat'), r = c.getBoundingClientRect();
                                    return r.right <= window.innerWidth && Math.abs(c.width / devicePixelRatio - r.width) < 1"""),
             what="the canvas drawn again within the narrower window")
    assert js(browser, "return document.documentElement.scrollWidth <= window.innerWidth")


# ------------------------------------------------------------------ trajectories

TURNS_JS = """return [...document.querySelectorAll('.traj')].map(t => [...t.querySelectorAll('.conversation > .turn')].map(x =>
  [x.querySelector('.role').textContent, [...x.querySelectorAll(':scope > div > pre, :scope > pre')].map(p => p.textContent).join(' | ')]))"""


def test_trajectory_turns_come_in_the_order_they_happened(light, server, pages_store):
    browser = light
    _root, ids, _tmp = pages_store
    open_page(browser, server, f"/trajectories/agent/{ids['agent']}")
    trajs = wait_for(lambda: (t := js(browser, TURNS_JS)) and len(t) == 4 and t, what="four trajectories")
    # a tool call nested in the model's turn comes before the answer that waited for it, and the
    # model's wording of the user's question is not a second user turn (it is folded in the answer)
    assert [r for r, _t in trajs[0]] == ["user", "tool calculator", "assistant", "reward"]
    assert trajs[0][0][1] == "What is 6 * 7? Use the calculator."
    assert "42" in trajs[0][1][1] and trajs[0][2][1] == "The answer is 42."
    folded = js(browser, "return [...document.querySelectorAll('.traj')][0].querySelector('.turn.assistant details.model-input pre').textContent")
    assert folded == "user: 6 * 7"
    # the model asks for the tool, the tool answers, the model is given the result (not a user
    # turn) and answers
    assert [r for r, _t in trajs[1]] == ["user", "tool call calculator", "tool calculator", "assistant"]
    assert trajs[1][3][1] == "It is 42."
    assert js(browser, "return [...document.querySelectorAll('.traj')][1].querySelectorAll('.turn.user').length") == 1
    # the span tree lists siblings in start order too
    names = js(browser, "return [...[...document.querySelectorAll('.traj')][1].querySelectorAll('.spantree .span > span > b')].map(b => b.textContent)")
    assert names == ["episode", "assistant", "calculator", "assistant"]
    # a chat API: each message once, in the model's order; the tool-call message of the second
    # call's input is the call already shown, not an empty assistant turn
    assert trajs[2] == [["system", "Use tools."], ["user", "6*7?"], ["tool call calculator", '{\n  "expr": "6*7"\n}'],
                        ["tool calculator", '{\n  "expr": "6*7"\n} | 42'], ["assistant", "6*7 is 42."]]
    # the question is still open after the retrieval: the model's prompt is folded, not a user turn
    assert [r for r, _t in trajs[3]] == ["user", "tool search", "assistant"]
    shot(browser, "trajectory")
    js(browser, "document.querySelectorAll('.traj')[2].scrollIntoView()")
    shot(browser, "trajectory-chat")
    open_page(browser, server, f"/trajectories/agent/{ids['agent']}?step=1")
    wait_for(lambda: js(browser, "return document.querySelectorAll('.traj').length === 1"), what="one trajectory")
    js(browser, "document.querySelector('details.model-input').open = true")
    shot(browser, "trajectory-model-input")
