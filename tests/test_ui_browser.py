"""``trackstore ui`` in a real headless Chromium (the system's package, driven by Selenium),
against the real command on a real store: the runs table, charts whose series equal the store,
a live run's chart growing while a writer process logs, a one-step spike in a 1M-point run kept
by the downsampling (zoomed out and zoomed in), samples and trajectories filtered by step and
sample index, model-written markup shown as text, the run page and compare.

One browser and one server for the module; screenshots go to test-artifacts/ui/ (git-ignored).
Skipped, with the reason, only when chromium or chromedriver is not installed (`make
install-browser` installs them from the system's packages).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.ui_support import (
    ARTIFACTS,
    BIG_RUN,
    LIVE_RUN,
    SPIKE_STEP,
    SPIKE_VALUE,
    XSS,
    UiServer,
    chromium,
    env_for,
    open_page,
    require_chromium,
    serving,
    wait_for,
    write_small_runs,
)

require_chromium()


# its tests share a server/store (session-scoped: a module fixture is set up again whenever another
# module's test ran in between on that worker): `make test` (--dist loadgroup) keeps them on one
# worker, so it is set up once, not once per worker
pytestmark = pytest.mark.xdist_group("test_ui_browser")


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-browser")
    root = tmp / "store"
    root.mkdir()
    big = subprocess.Popen([sys.executable, "-c", BIG_RUN.format(root=str(root))], env=env_for(tmp),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids = write_small_runs(root)  # while the 1M-point run is being written
    out, err = big.communicate(timeout=300)
    assert big.returncode == 0, err
    ids["spiky"] = out.split()[-1]
    return root, ids, tmp


@pytest.fixture(scope="session")
def server(store):
    root, _ids, tmp = store
    with serving(root, tmp) as s:
        yield s


@pytest.fixture(scope="session")
def browser(server):
    with chromium() as d:
        yield d


def shot(browser, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def js(browser, code: str, *args):
    return browser.execute_script(code, *args)


# chart series as the browser holds them: [[label, [[x, y], ...]], ...] for the chart of `key`
SERIES_JS = """
const c = window.__ts.charts[arguments[0]];
if (!c || !c.u) return null;
const u = c.u, out = [];
for (let i = 1; i < u.series.length; i++) {
  const pts = [];
  for (let j = 0; j < u.data[0].length; j++) { const y = u.data[i][j]; if (y !== null && y !== undefined) pts.push([u.data[0][j], y]); }
  out.push([u.series[i].label, pts]);
}
return out;
"""


def stored_points(root, run_id: str, key: str) -> list[list[float]]:
    import trackstore

    t = trackstore.query("SELECT step, value FROM metrics WHERE run_id = $r AND key = $k ORDER BY step",
                         {"r": run_id, "k": key}, root=root)
    return [[float(s), v] for s, v in zip(t.column("step").to_pylist(), t.column("value").to_pylist())]


def test_runs_table_lists_every_run(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server)
    rows = wait_for(lambda: js(browser, "return [...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)"),
                    what="the runs table")
    assert sorted(r.split("/", 1)[1] for r in rows) == sorted(ids.values())
    names = js(browser, "return [...document.querySelectorAll('#runs tbody tr td:nth-child(3)')].map(td => td.textContent)")
    assert sorted(names) == ["alpha", "beta", "spiky"]
    # filter by project, then by a config value
    js(browser, "const s = document.getElementById('filter-project'); s.value = 'rl'; s.dispatchEvent(new Event('change'));")
    assert len(js(browser, "return document.querySelectorAll('#runs tbody tr')")) == 2
    js(browser, "const s = document.getElementById('filter-config'); s.value = 'lr=3e-06'; s.dispatchEvent(new Event('input'));")
    assert js(browser, "return [...document.querySelectorAll('#runs tbody tr td:nth-child(3)')].map(td => td.textContent)") == ["beta"]
    js(browser, "const s = document.getElementById('filter-config'); s.value = ''; s.dispatchEvent(new Event('input'));")
    shot(browser, "runs")


def test_two_selected_runs_draw_one_chart_per_key_with_the_stored_values(browser, server, store):
    root, ids, _tmp = store
    open_page(browser, server)
    wait_for(lambda: js(browser, "return document.querySelectorAll('#runs tbody tr').length === 3"), what="runs")
    for name in ("alpha", "beta"):
        js(browser, "document.querySelector(`#runs tr[data-run='rl/${arguments[0]}'] input.pick`).click();", ids[name])
    keys = ["actor/entropy", "critic/score/mean", "timing_s/step"]
    # each chart is drawn as soon as the first run's points come: wait for both runs' series
    wait_for(lambda: all(len(js(browser, SERIES_JS, k) or ()) == 2 for k in keys), what="three charts of two runs")
    assert sorted(js(browser, "return [...document.querySelectorAll('.chart')].map(c => c.dataset.key)")) == keys
    for key in keys:
        series = js(browser, SERIES_JS, key)
        assert [label for label, _pts in series] == ["alpha", "beta"]
        for (_label, pts), name in zip(series, ("alpha", "beta")):
            assert pts == stored_points(root, ids[name], key)
    js(browser, "document.getElementById('charts').scrollIntoView();")
    shot(browser, "charts")


def test_a_one_step_spike_in_a_million_points_is_drawn_at_any_zoom(browser, server, store):
    root, ids, _tmp = store
    open_page(browser, server, f"/run/big/{ids['spiky']}")
    series = wait_for(lambda: js(browser, SERIES_JS, "loss"), what="the loss chart", timeout=30)
    [(_label, pts)] = series
    import trackstore

    stored_max = trackstore.query("SELECT max(value) AS m, count(*) AS n FROM metrics WHERE run_id = $r",
                                  {"r": ids["spiky"]}, root=root).to_pylist()[0]
    assert stored_max["n"] == 1_000_000 and len(pts) < 10_000
    assert max(y for _x, y in pts) == stored_max["m"] == pytest.approx(1.0 + (SPIKE_STEP % 1000) / 1e4 + SPIKE_VALUE)
    assert [x for x, y in pts if y == stored_max["m"]] == [SPIKE_STEP]
    js(browser, "document.querySelector('.chart').scrollIntoView();")
    shot(browser, "spike")
    # zoom to 1% around the spike, as a drag does: the chart fetches that range in detail
    js(browser, """const u = window.__ts.charts['loss'].u;
        const l = u.valToPos(arguments[0], 'x'), r = u.valToPos(arguments[1], 'x');
        u.setSelect({left: l, width: r - l, top: 0, height: u.bbox.height / devicePixelRatio});""",
       SPIKE_STEP - 5_000, SPIKE_STEP + 5_000)
    zoomed = wait_for(lambda: (s := js(browser, SERIES_JS, "loss")) and s[0][1][0][0] >= SPIKE_STEP - 5_001 and s[0][1],
                      what="the zoomed curve")
    assert max(y for _x, y in zoomed) == stored_max["m"]
    assert min(x for x, _y in zoomed) >= SPIKE_STEP - 5_001 and max(x for x, _y in zoomed) <= SPIKE_STEP + 5_001
    assert len([p for p in pts if SPIKE_STEP - 5_000 <= p[0] <= SPIKE_STEP + 5_000]) < len(zoomed)  # more detail
    js(browser, "document.querySelector('.chart').scrollIntoView();")
    shot(browser, "zoomed-spike")


def test_a_live_run_grows_without_reloading(browser, server, store):
    root, _ids, tmp = store
    stop = tmp / "stop-live"
    writer = subprocess.Popen([sys.executable, "-c", LIVE_RUN.format(root=str(root), stop=str(stop))], env=env_for(tmp),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = writer.stdout.readline().strip()
        open_page(browser, server)
        row = f"live/{run_id}"
        wait_for(lambda: js(browser, "return !!document.querySelector(`#runs tr[data-run='${arguments[0]}']`)", row),
                 what="the live run in the table")
        js(browser, "document.querySelector(`#runs tr[data-run='${arguments[0]}'] input.pick`).click();", row)
        first = wait_for(lambda: js(browser, SERIES_JS, "live/value"), what="the live chart")
        n0 = len(first[0][1])
        assert js(browser, "return document.querySelector(`#runs tr[data-run='${arguments[0]}'] .status`).textContent", row) == "running"
        grown = wait_for(lambda: (s := js(browser, SERIES_JS, "live/value")) and len(s[0][1]) >= n0 + 20 and s,
                         what="the chart to grow", timeout=30)
        assert grown[0][1][:n0] == first[0][1]  # the same points, and more
        js(browser, "window.__marker = 1;")  # no reload happened: the page's state is still there
        stop.touch()
        assert writer.wait(30) == 0
        wait_for(lambda: js(browser, "return document.querySelector(`#runs tr[data-run='${arguments[0]}'] .status`).textContent",
                            row) == "finished", what="the status to turn finished", timeout=20)
        assert js(browser, "return window.__marker") == 1
        final = wait_for(lambda: (s := js(browser, SERIES_JS, "live/value")) and s, what="the chart")
        assert len(final[0][1]) >= len(grown[0][1])
        shot(browser, "live")
    finally:
        stop.touch()
        if writer.poll() is None:
            writer.kill()
        writer.wait()
        writer.stdout.close()
        writer.stderr.close()


def test_samples_filter_by_step_and_index_and_show_markup_as_text(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/samples/rl/{ids['alpha']}?step=20")
    rows = wait_for(lambda: js(browser, "return [...document.querySelectorAll('#samples tbody tr')].map(r => [...r.cells].map(c => c.textContent))"),
                    what="the samples table")
    assert [(r[0], r[2]) for r in rows] == [("20", "0"), ("20", "1"), ("20", "2")]
    outputs = [r[5] for r in rows]
    assert outputs[1] == XSS and outputs[0] == "answer 0 at step 20"
    assert js(browser, "return typeof window.__pwned") == "undefined"
    assert js(browser, "return document.querySelectorAll('#samples img, #samples script').length") == 0
    shot(browser, "samples")
    # the same sample index across steps
    js(browser, "document.querySelector('#samples tbody tr:nth-child(2) td:nth-child(3) a').click();")
    rows = wait_for(lambda: (r := js(browser, "return [...document.querySelectorAll('#samples tbody tr')].map(r => [r.cells[0].textContent, r.cells[2].textContent])"))
                    and len(r) == 2 and r, what="sample 1 at every step")
    assert rows == [["20", "1"], ["10", "1"]]
    # text search
    open_page(browser, server, f"/samples/rl/{ids['alpha']}?q=question%202")
    wait_for(lambda: sorted(js(browser, "return [...document.querySelectorAll('#samples tbody tr')].map(r => r.cells[4].textContent)"))
             == ["question 2 at 10", "question 2 at 20"], what="the two samples whose input holds 'question 2'")
    assert js(browser, "return typeof window.__pwned") == "undefined"


def test_trajectories_filter_by_step_and_sample_index(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/trajectories/rl/{ids['alpha']}?step=20&index=1")
    trajs = wait_for(lambda: js(browser, "return [...document.querySelectorAll('.traj')].map(t => [t.dataset.step, t.dataset.index])"),
                     what="the trajectories")
    assert trajs == [["20", "1"]]
    turns = js(browser, "return [...document.querySelectorAll('.traj .turn')].map(t => [t.querySelector('.role').textContent, t.querySelector('pre') ? t.querySelector('pre').textContent : ''])")
    roles = [r for r, _t in turns]
    assert roles[:3] == ["user", "assistant", "tool call calculator"] and "tool calculator" in roles
    # the model call's input repeats the conversation so far: each message is shown once
    assert turns.count(["user", "what is 1 + 20?"]) == 1 and ["assistant", "let me call the calculator"] in turns
    tool = js(browser, "return [...document.querySelectorAll('.traj .turn.tool pre')].map(p => p.textContent)")
    assert XSS in tool  # the tool's result, as text
    assert js(browser, "return typeof window.__pwned") == "undefined"
    assert js(browser, "return document.querySelectorAll('.traj img, .traj script').length") == 0
    shot(browser, "trajectory")
    open_page(browser, server, f"/trajectories/rl/{ids['alpha']}?index=0")
    trajs = wait_for(lambda: (t := js(browser, "return [...document.querySelectorAll('.traj')].map(t => [t.dataset.step, t.dataset.index])"))
                     and len(t) == 2 and t, what="sample 0 at both steps")
    assert trajs == [["10", "0"], ["20", "0"]]


def test_run_page_compare_and_histograms(browser, server, store):
    _root, ids, _tmp = store
    open_page(browser, server, f"/compare?run=rl/{ids['alpha']}&run=rl/{ids['beta']}")
    diff = wait_for(lambda: js(browser, "return [...document.querySelectorAll('#config-diff tbody tr')].map(r => [...r.cells].map(c => c.textContent))"),
                    what="the config differences")
    assert diff == [["actor.optim.lr", "1.000e-6", "3.000e-6"], ["seed", "0", "1"]]
    assert js(browser, "return document.querySelectorAll('#config-diff tr.diff').length") == 2
    wait_for(lambda: js(browser, SERIES_JS, "critic/score/mean"), what="the overlaid curves")
    shot(browser, "compare")
    open_page(browser, server, f"/run/rl/{ids['alpha']}")
    wait_for(lambda: js(browser, "return document.querySelector('#artifacts td a')"), what="the run page")
    assert js(browser, "return document.querySelector('#artifacts td a').textContent") == "weights.bin"
    js(browser, "const s = document.getElementById('config-search'); s.value = 'lr'; s.dispatchEvent(new Event('input'));")
    assert "actor.optim.lr" in js(browser, "return document.body.textContent")
    shot(browser, "run-page")
    open_page(browser, server, f"/histograms/rl/{ids['alpha']}")
    wait_for(lambda: js(browser, "return document.querySelector('canvas.heat')"), what="the heatmap")
    shot(browser, "histograms")


SYSTEM_RUN = r"""
import time, trackstore
run = trackstore.init(project="sys", root={root!r}, name="sampled", system_metrics_interval=0.2)
for step in range(5):
    run.log({{"loss": 1.0 / (step + 1)}}, step=step)
    time.sleep(0.25)
run.finish()
print(run.id)
"""


def test_system_metrics_have_their_own_section_on_wall_time(browser, tmp_path):
    root = tmp_path / "sys-store"
    env = {**env_for(tmp_path), "TRACKSTORE_SYSTEM_METRICS": "1"}
    made = subprocess.run([sys.executable, "-c", SYSTEM_RUN.format(root=str(root))], env=env, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.split()[-1]
    server = UiServer(root, tmp_path)
    try:
        open_page(browser, server)
        wait_for(lambda: js(browser, "return document.querySelectorAll('#runs tbody tr').length === 1"), what="the run")
        js(browser, "document.querySelector(`#runs tr[data-run='sys/${arguments[0]}'] input.pick`).click();", run_id)
        key = "system/cpu_utilization_percentage"
        wait_for(lambda: js(browser, SERIES_JS, key) and js(browser, SERIES_JS, "loss"), what="the charts")
        groups = js(browser, "return [...document.querySelectorAll('details.group')].map(d => d.dataset.group)")
        assert groups[-1] == "system/" and "system/" not in groups[:-1]  # its own section, after the training's
        title = js(browser, "return document.querySelector(\"details.group[data-group='system/'] summary\").textContent")
        assert "wall time" in title
        # the machine's charts are on wall time (x in seconds since the epoch), the training's on steps
        assert js(browser, "return window.__ts.charts[arguments[0]].u.scales.x.time", key) is True
        assert js(browser, "return window.__ts.charts['loss'].u.scales.x.time") is False
        import trackstore

        stored = trackstore.query("SELECT epoch(ts) AS t, value FROM metrics WHERE key = $k ORDER BY ts", {"k": key},
                                  root=root)
        (_label, pts), = js(browser, SERIES_JS, key)
        assert [round(x, 3) for x, _ in pts] == [round(t, 3) for t in stored.column("t").to_pylist()]
        js(browser, "document.querySelector(\"details.group[data-group='system/']\").scrollIntoView();")
        shot(browser, "system-metrics")
    finally:
        server.stop()
