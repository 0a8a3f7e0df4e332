"""The dashboard's chart panel in a real headless Chromium, against ``trackstore ui`` on a real
store of seeds: one sidebar legend for every chart (regex filter, show/hide all, values under the
cursor), seeds grouped into bands whose mean and spread equal the stored values, the raw curve
faint under the smoothed one, relative time on x, what is on screen kept in the URL (a link
opened in a fresh browser shows the same view), pinning and full screen, and a chart exported
as PNG and as CSV of every stored point. Screenshots go to test-artifacts/ui/charts-*.png.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import time
import urllib.parse

import pytest

from tests.ui_support import ARTIFACTS, chromium, require_chromium, serving, wait_for

require_chromium()

pytestmark = pytest.mark.xdist_group("test_ui_charts")

LRS = (1e-06, 3e-06)
LABEL = {1e-06: "lr=0.000001", 3e-06: "lr=0.000003"}  # a group's label: the key and the value as JavaScript writes it
SEEDS = (0, 1, 2)
STEPS = 40


def reward(lr: float, seed: int, step: int) -> float:
    return round(lr * 1e5 + seed * 0.25 + step * 0.01 + (0.5 if step % 7 == seed else 0.0), 6)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    import trackstore

    tmp = tmp_path_factory.mktemp("ui-charts")
    root = tmp / "store"
    root.mkdir()
    ids: dict[str, str] = {}
    for lr in LRS:
        for seed in SEEDS:
            name = f"ppo-lr{lr:g}-seed{seed}"
            run = trackstore.init(project="seeds", name=name, config={"optim": {"lr": lr}, "seed": seed}, root=root)
            for step in range(STEPS):
                run.log({"reward": reward(lr, seed, step), "loss": 1.0 / (step + 1) + seed}, step=step)
            run.finish()
            ids[name] = run.id
            time.sleep(0.05)  # runs start at different times: relative time lines them up
    downloads = tmp / "downloads"
    downloads.mkdir()
    with serving(root, tmp) as server, chromium() as driver:
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        yield root, ids, server, driver, downloads


def js(driver, code: str, *args):
    return driver.execute_script(code, *args)


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"charts-{name}.png"))


def runs_link(server, ids, names, **params) -> str:
    q = [("run", f"seeds/{ids[n]}") for n in names] + [(k, v) for k, v in params.items()]
    return server.url + "#/?" + urllib.parse.urlencode(q)


def open_fresh(driver, url: str) -> None:
    """The page at ``url`` as a first visit: nothing remembered in this browser."""
    driver.get("about:blank")
    driver.get(url.split("#")[0])
    js(driver, "localStorage.clear();")
    driver.get(url)
    driver.refresh()


def chart_series(driver, key: str):
    """[(label, show, raw, [[x, y], ...]), ...] of the chart of ``key`` as the browser holds it."""
    return js(driver, """
        const c = window.__ts.charts[arguments[0]];
        if (!c || !c.u) return null;
        const u = c.u, specs = window.__ts.panel.charts.get(arguments[0]).specs, out = [];
        for (let i = 1; i < u.series.length; i++) {
          const pts = [];
          for (let j = 0; j < u.data[0].length; j++) { const y = u.data[i][j]; if (y !== null && y !== undefined) pts.push([u.data[0][j], y]); }
          out.push([u.series[i].label, u.series[i].show, !!specs[i - 1].raw, pts]);
        }
        return out;""", key)


def wait_chart(driver, key: str, pred=lambda s: True, what: str = "the chart"):
    return wait_for(lambda: (s := chart_series(driver, key)) and pred(s) and s, what=f"{what} of {key}", timeout=30)


ALL = [f"ppo-lr{lr:g}-seed{s}" for lr in LRS for s in SEEDS]


def test_one_sidebar_legend_filters_toggles_and_follows_the_cursor(site):
    _root, ids, server, driver, _dl = site
    open_fresh(driver, runs_link(server, ids, ALL))
    wait_chart(driver, "reward", lambda s: len(s) == 6, "six runs")
    rows = js(driver, "return [...document.querySelectorAll('.runs-side .side-run .side-name')].map(e => e.textContent)")
    assert sorted(rows) == sorted(ALL)
    # no legend under each chart: the sidebar is the legend
    assert js(driver, "return [...document.querySelectorAll('.chart .u-legend')].filter(e => e.offsetParent).length") == 0
    # a regex picks runs; "hide all" hides only those, in every chart
    js(driver, "const f = document.getElementById('side-filter'); f.value = 'lr3e-06-seed[01]$'; f.dispatchEvent(new Event('input'));")
    wait_for(lambda: len(js(driver, "return document.querySelectorAll('.runs-side .side-run')")) == 2, what="two matching runs")
    js(driver, "document.getElementById('side-hide').click();")
    for key in ("reward", "loss"):
        shown = {label: show for label, show, _raw, _pts in wait_chart(driver, key)}
        assert {k for k, v in shown.items() if not v} == {"ppo-lr3e-06-seed0", "ppo-lr3e-06-seed1"}, key
    assert "hide=" in js(driver, "return location.hash")
    # an invalid regex is marked, not thrown
    js(driver, "const f = document.getElementById('side-filter'); f.value = 'seed[('; f.dispatchEvent(new Event('input'));")
    assert js(driver, "return document.getElementById('side-filter').classList.contains('bad')")
    js(driver, "const f = document.getElementById('side-filter'); f.value = ''; f.dispatchEvent(new Event('input'));")
    js(driver, "document.getElementById('side-show').click();")
    wait_chart(driver, "reward", lambda s: all(show for _l, show, _r, _p in s), "every run shown again")
    # the cursor over step 10 of one chart puts each run's value there beside its name
    js(driver, """const u = window.__ts.charts['reward'].u; u.setCursor({left: u.valToPos(10, 'x'), top: 20});""")
    values = wait_for(lambda: (v := js(driver, """return Object.fromEntries([...document.querySelectorAll('.runs-side .side-run')].map(
                                  r => [r.querySelector('.side-name').textContent, r.querySelector('.side-val').textContent]))"""))
                      and all(v.values()) and v, what="values under the cursor")
    for lr in LRS:
        for seed in SEEDS:
            assert values[f"ppo-lr{lr:g}-seed{seed}"] == f"{reward(lr, seed, 10):g}"
    assert "step 10" in js(driver, "return document.querySelector('.side-x').textContent")
    js(driver, "document.getElementById('charts').scrollIntoView();")
    shot(driver, "sidebar")


def test_seeds_grouped_by_a_config_key_draw_mean_and_band_of_the_stored_values(site):
    _root, ids, server, driver, _dl = site
    open_fresh(driver, runs_link(server, ids, ALL, group="config:lr"))
    series = wait_chart(driver, "reward", lambda s: len(s) == 6, "two groups (mean, lo, hi)")
    by = {label: pts for label, _show, _raw, pts in series}
    assert set(by) == {g + end for g in LABEL.values() for end in ("", " lo", " hi")}
    for lr in LRS:
        g = LABEL[lr]
        vals = {step: [reward(lr, s, step) for s in SEEDS] for step in range(STEPS)}
        assert [x for x, _y in by[g]] == list(range(STEPS))
        assert by[g] == [[float(st), pytest.approx(statistics.fmean(v))] for st, v in vals.items()]
        assert by[g + " lo"] == [[float(st), min(v)] for st, v in vals.items()]
        assert by[g + " hi"] == [[float(st), max(v)] for st, v in vals.items()]
    # the sidebar lists the groups, with how many runs each holds
    assert sorted(js(driver, "return [...document.querySelectorAll('.runs-side .side-run')].map(r => r.textContent)")) == \
        [LABEL[1e-06] + " 3 runs", LABEL[3e-06] + " 3 runs"]
    js(driver, "document.getElementById('charts').scrollIntoView();")
    shot(driver, "bands-minmax")
    # mean ± standard deviation over the seeds
    js(driver, "const s = document.getElementById('opt-band'); s.value = 'std'; s.dispatchEvent(new Event('change'));")
    g = LABEL[3e-06]
    vals = {step: [reward(3e-06, s, step) for s in SEEDS] for step in range(STEPS)}
    std = wait_chart(driver, "reward", lambda s: dict((lab, p) for lab, _a, _b, p in s)[g + " hi"][5][1]
                     == pytest.approx(statistics.fmean(vals[5]) + statistics.pstdev(vals[5])), "the std band")
    by = {label: pts for label, _show, _raw, pts in std}
    assert by[g + " lo"][5][1] == pytest.approx(statistics.fmean(vals[5]) - statistics.pstdev(vals[5]))
    assert "band=std" in js(driver, "return location.hash")
    shot(driver, "bands-std")
    # grouping by a name pattern: the capture group names the group
    js(driver, """document.getElementById('opt-group').value = 'name';
                  const a = document.getElementById('opt-group-arg'); a.value = '-(seed\\\\d)$'; a.dispatchEvent(new Event('change'));""")
    named = wait_chart(driver, "reward", lambda s: {lab for lab, *_ in s} >= {"seed0", "seed1", "seed2"}, "groups by name")
    assert sorted(lab for lab, *_ in named if not lab.endswith((" lo", " hi"))) == ["seed0", "seed1", "seed2"]


def test_smoothing_draws_the_raw_curve_faint_and_relative_time_starts_each_run_at_zero(site):
    root, ids, server, driver, _dl = site
    names = ["ppo-lr1e-06-seed0", "ppo-lr3e-06-seed2"]
    open_fresh(driver, runs_link(server, ids, names, smooth="0.8"))
    series = wait_chart(driver, "reward", lambda s: len(s) == 4, "raw and smoothed")
    raw = {label: pts for label, _show, is_raw, pts in series if is_raw}
    smooth = {label: pts for label, _show, is_raw, pts in series if not is_raw}
    for name in names:
        lr, seed = (1e-06, 0) if name.endswith("seed0") else (3e-06, 2)
        assert raw[name] == [[float(s), reward(lr, seed, s)] for s in range(STEPS)]  # the stored values, exactly
        assert smooth[name] != raw[name] and len(smooth[name]) == STEPS
    colours = js(driver, "return window.__ts.charts['reward'].u.series.slice(1).map(s => s._stroke || s.stroke)")
    assert colours[0].endswith("40") and len(colours[1]) == 7  # a faint stroke under the run's own colour
    js(driver, "document.getElementById('charts').scrollIntoView();")
    shot(driver, "raw-under-smoothed")
    js(driver, "const c = document.getElementById('opt-raw'); c.click();")
    wait_chart(driver, "reward", lambda s: len(s) == 2, "smoothed only")
    # relative time: every run starts at 0 s whatever its start; wall time keeps them apart
    js(driver, "const s = document.getElementById('opt-x'); s.value = 'time'; s.dispatchEvent(new Event('change'));")
    wall = wait_chart(driver, "reward", lambda s: s[0][3][0][0] > 1e9, "wall time")
    assert wall[0][3][0][0] != wall[1][3][0][0]
    js(driver, "const s = document.getElementById('opt-x'); s.value = 'relative'; s.dispatchEvent(new Event('change'));")
    rel = wait_chart(driver, "reward", lambda s: s[0][3][0][0] < 1e9, "relative time")
    assert [pts[0][0] for _l, _s, _r, pts in rel] == [0.0, 0.0]
    assert all(0 <= pts[-1][0] < 60 for _l, _s, _r, pts in rel)
    assert "x=relative" in js(driver, "return location.hash")
    shot(driver, "relative-time")


def test_a_link_reopens_the_same_view_in_a_fresh_browser(site):
    _root, ids, server, driver, _dl = site
    names = ["ppo-lr1e-06-seed1", "ppo-lr3e-06-seed1"]
    open_fresh(driver, runs_link(server, ids, names))
    wait_chart(driver, "reward", lambda s: len(s) == 2)
    js(driver, "const s = document.getElementById('opt-log'); s.click();")
    js(driver, "const k = document.getElementById('opt-keys'); k.value = 'rew'; k.dispatchEvent(new Event('input'));")
    js(driver, "const t = document.getElementById('filter-text'); t.value = 'seed1'; t.dispatchEvent(new Event('input'));")
    wait_for(lambda: js(driver, "return document.querySelectorAll('.chart').length") == 1, what="the key filter")
    js(driver, """const u = window.__ts.charts['reward'].u;
        const l = u.valToPos(10, 'x'), r = u.valToPos(20, 'x');
        u.setSelect({left: l, width: r - l, top: 0, height: u.bbox.height / devicePixelRatio});""")
    wait_chart(driver, "reward", lambda s: min(p[0] for p in s[0][3]) >= 10, "the zoom")
    js(driver, "window.__ts.panel.togglePin('reward');")
    url = wait_for(lambda: (h := js(driver, "return location.href")) and "zoom=" in h and "pin=" in h and h, what="the URL")
    q = urllib.parse.parse_qs(url.split("#/?", 1)[1])
    assert q["log"] == ["1"] and q["keys"] == ["rew"] and q["q"] == ["seed1"] and q["pin"] == ["reward"]
    assert sorted(q["run"]) == sorted(f"seeds/{ids[n]}" for n in names)
    lo, hi, key = q["zoom"][0].split(",", 2)
    assert key == "reward" and 9 <= float(lo) <= 11 and 19 <= float(hi) <= 21
    # the link in a browser that remembers nothing
    open_fresh(driver, url)
    zoomed = wait_chart(driver, "reward", lambda s: len(s) == 2, "the shared view")
    assert all(10 <= x <= 20 for _l, _s, _r, pts in zoomed for x, _y in pts)
    assert js(driver, "return document.getElementById('opt-log').checked") is True
    assert js(driver, "return document.getElementById('opt-keys').value") == "rew"
    assert js(driver, "return [...document.querySelectorAll('.chart')].map(c => c.dataset.key)") == ["reward"]
    assert js(driver, "return document.querySelector('details.group').dataset.group") == "pinned"
    assert js(driver, "return document.getElementById('filter-text').value") == "seed1"
    assert len(js(driver, "return document.querySelectorAll('#runs tbody tr')")) == 2
    assert js(driver, "return window.__ts.charts['reward'].u.scales.y.distr") == 3
    shot(driver, "shared-link")


def test_a_link_followed_while_the_page_redraws_is_not_overwritten(site):
    """The page being left may still write its view into the URL (a table redrawn, a fetch that
    answers late) after the address changed but before the browser announced it: the link's
    runs must be what the next page shows, never the old page's."""
    _root, ids, server, driver, _dl = site
    open_fresh(driver, runs_link(server, ids, ["ppo-lr1e-06-seed0", "ppo-lr1e-06-seed2"]))
    wait_chart(driver, "reward", lambda s: len(s) == 2)
    link = runs_link(server, ids, ["ppo-lr3e-06-seed1"])
    # one script: the address changes (hashchange is queued), then the old page redraws its table
    js(driver, """location.hash = arguments[0];
        const t = document.getElementById('filter-text'); t.value = ''; t.dispatchEvent(new Event('input'));""",
       "#" + link.split("#", 1)[1])
    wait_chart(driver, "reward", lambda s: len(s) == 1, "the link's one run")
    q = urllib.parse.parse_qs(js(driver, "return location.hash").split("?", 1)[1])
    assert q["run"] == [f"seeds/{ids['ppo-lr3e-06-seed1']}"]
    assert js(driver, "return [...document.querySelectorAll('#runs tbody tr.selected')].length") == 1


def test_full_screen_and_export_as_png_and_csv(site):
    root, ids, server, driver, downloads = site
    names = ["ppo-lr1e-06-seed0", "ppo-lr1e-06-seed2"]
    open_fresh(driver, runs_link(server, ids, names, keys="reward"))
    wait_chart(driver, "reward", lambda s: len(s) == 2)
    js(driver, "document.querySelector('.chart[data-key=\"reward\"] button[title^=\"full screen\"]').click();")
    wait_for(lambda: js(driver, "return window.__ts.charts['reward'].u.width") > 0.8 * js(driver, "return innerWidth"),
             what="the full-screen chart")
    shot(driver, "full-screen")
    from selenium.webdriver.common.keys import Keys
    driver.find_element("tag name", "body").send_keys(Keys.ESCAPE)
    wait_for(lambda: not js(driver, "return document.querySelector('.chart.full')"), what="Esc to leave full screen")
    # PNG: an image with the chart in it
    js(driver, "document.querySelector('.chart[data-key=\"reward\"] button[title^=\"save the chart\"]').click();")
    png = wait_for(lambda: (p := downloads / "reward.png").exists() and p.stat().st_size > 1000 and p, what="reward.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # CSV: every stored point of the shown runs, not the downsampled curve
    js(driver, "document.querySelector('.chart[data-key=\"reward\"] button[title^=\"download every\"]').click();")
    path = wait_for(lambda: (p := downloads / "reward.csv").exists() and p.stat().st_size > 100 and p, what="reward.csv")
    time.sleep(0.5)  # the download is renamed into place when complete; let it settle
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    got = sorted((r["run_name"], int(r["step"]), float(r["value"])) for r in rows)
    want = sorted((n, s, reward(1e-06, int(n[-1]), s)) for n in names for s in range(STEPS))
    assert got == want
    assert {r["run_id"] for r in rows} == {ids[n] for n in names}


def test_bands_and_csv_routes_refuse_bad_input(site):
    _root, ids, server, _driver, _dl = site
    run = f"seeds/{ids['ppo-lr1e-06-seed0']}"
    status, _h, body = server.request("/api/bands?" + urllib.parse.urlencode({"run": run, "key": "reward"}))
    assert status == 400 and "group=" in json.loads(body)["error"]
    status, _h, body = server.request("/api/bands?" + urllib.parse.urlencode({"run": run, "group": "g", "key": "reward", "x": "nope"}))
    assert status == 400 and "x must be" in json.loads(body)["error"]
    status, _h, body = server.request("/api/csv?" + urllib.parse.urlencode({"run": "seeds/no-such-run", "key": "reward"}))
    assert status == 404
    status, _h, body = server.request("/api/csv?" + urllib.parse.urlencode({"run": run, "key": "reward", "lo": "abc"}))
    assert status == 400 and "lo must be a number" in json.loads(body)["error"]
    status, headers, body = server.request("/api/csv?" + urllib.parse.urlencode({"run": run, "key": "<b>x</b>/../k"}))
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert body.decode().splitlines() == ["project,run_id,run_name,step,time,value"]  # no such key: the header only
    disposition = headers["content-disposition"]
    assert disposition.startswith("attachment;") and "/" not in disposition and "<" not in disposition


def test_a_late_answer_does_not_draw_over_the_page_the_user_moved_to(site):
    _root, ids, server, driver, _dl = site
    run = ids["ppo-lr1e-06-seed0"]
    open_fresh(driver, server.url + "#/")
    wait_for(lambda: len(js(driver, "return document.querySelectorAll('#runs tbody tr')")) == 6, what="the runs table")
    # the run page's answer comes late (a slow link); meanwhile the user opens the samples page
    js(driver, """const real = window.fetch;
        window.fetch = (u, o) => String(u).startsWith('/api/run?') ? new Promise(r => setTimeout(() => r(real(u, o)), 1500)) : real(u, o);""")
    js(driver, "location.hash = arguments[0];", f"#/run/seeds/{run}")
    time.sleep(0.2)
    js(driver, "location.hash = arguments[0];", f"#/samples/seeds/{run}")
    wait_for(lambda: js(driver, "return document.querySelector('h1').textContent") == "Samples", what="the samples page")
    time.sleep(2.5)  # the run page's answer has arrived by now
    assert js(driver, "return document.querySelector('h1').textContent") == "Samples"
    assert js(driver, "return location.hash").startswith("#/samples/")


def test_the_header_names_the_store_and_says_live(site):
    root, _ids, server, driver, _dl = site
    open_fresh(driver, server.url + "#/")
    wait_for(lambda: js(driver, "return document.getElementById('root').textContent") == str(root), what="the store's path")
    time.sleep(4)  # a poll has happened
    assert js(driver, "return document.getElementById('live').textContent") == "live"


def test_charts_draw_in_the_dark_theme_when_the_system_asks_for_it(site):
    _root, ids, server, driver, _dl = site
    open_fresh(driver, runs_link(server, ids, ALL[:3], keys="reward"))
    wait_chart(driver, "reward", lambda s: len(s) == 3)
    stroke = """const c = window.__ts.charts['reward']; if (!c || !c.u) return null;
                const a = c.u.axes[0]; return typeof a.stroke === 'function' ? a.stroke(c.u, 0) : a.stroke;"""
    light = js(driver, stroke)
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        dark = wait_for(lambda: (s := js(driver, stroke)) and s != light and s, what="the axes to take the dark theme")
        assert dark == js(driver, "return getComputedStyle(document.documentElement).getPropertyValue('--axis').trim()")
        js(driver, "document.getElementById('charts').scrollIntoView();")
        shot(driver, "dark")
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
