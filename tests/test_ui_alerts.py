"""The dashboard's alerts and a live run's last step: ``/api/runs`` carries each run's alert
fields; the runs table shows a badge beside the status (tooltip: what happened), filters on it,
and the run page's header shows it too, in a real headless Chromium (the system's package);
while a writer process logs, the table's last step keeps up with the run's parts (what the
charts read), through the ETag'd poll.

Screenshots go to test-artifacts/ui/alerts-*.png (git-ignored). The browser test is skipped, with
the reason, only when chromium or chromedriver is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import trackstore
from tests.ui_support import ARTIFACTS, LIVE_RUN, chromium, env_for, load, require_chromium, serving, wait_for

pytest.importorskip("starlette")

# its tests share a store, a server and a browser (module fixtures): one worker under `make test`
# (--dist loadgroup) sets them up once; spread over the workers, each set them up
pytestmark = pytest.mark.xdist_group("test_ui_alerts")

NAN = float("nan")

# a live run whose metrics stopped 10 minutes ago: its 60 log calls are stamped 20 s apart (the
# writer takes each row's ts from time.time()), then the process stays alive, logging nothing
STALLED_RUN = """
import os, time, trackstore
real = time.time
run = trackstore.init(project="rl", name="stuck", root={root!r})
fake = [real() - 600 - 59 * 20]
time.time = lambda: fake[0]
for step in range(60):
    run.log({{"actor/pg_loss": 1.0 / (step + 1)}}, step=step)
    fake[0] += 20
time.time = real
run.flush()
print(run.id, flush=True)
while not os.path.exists({stop!r}):
    time.sleep(0.1)
run.finish()
"""

def _finished_runs(root) -> dict[str, str]:
    ids = {}
    with trackstore.init(project="rl", name="diverged", root=root) as run:
        for step in range(200):
            run.log({"actor/pg_loss": NAN if step >= 120 else 1.0 / (step + 1), "critic/score": 0.5}, step=step)
        ids["diverged"] = run.id
    with trackstore.init(project="rl", name="healthy", root=root) as run:
        for step in range(200):
            run.log({"actor/pg_loss": 1.0 / (step + 1)}, step=step)
        ids["healthy"] = run.id
    return ids


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-alerts")
    root = tmp / "store"
    root.mkdir()
    ids = _finished_runs(root)
    stop = tmp / "stop-stalled"
    child = subprocess.Popen([sys.executable, "-c", STALLED_RUN.format(root=str(root), stop=str(stop))],
                             env=env_for(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids["stuck"] = child.stdout.readline().strip()
    assert ids["stuck"], child.stderr.read()
    yield root, ids, tmp
    stop.touch()
    child.wait(60)
    child.stdout.close()
    child.stderr.close()


@pytest.fixture(scope="module")
def server(store):
    root, _ids, tmp = store
    with serving(root, tmp) as s:
        yield s


def _rows(server) -> dict[str, dict]:
    return {r["name"]: r for r in server.json("/api/runs")["runs"]}


def test_api_runs_carries_the_alerts(server, store):
    rows = _rows(server)
    d = rows["diverged"]
    assert d["alerts"] == ["nonfinite"] and d["nonfinite"] == 80
    assert d["alert_text"] == ["NaN in actor/pg_loss since step 120"]
    assert d["nonfinite_keys"] == {"actor/pg_loss": {"nan": 80, "inf": 0, "first_step": 120}}
    assert d["last_metric_at"] is None and "silent_s" not in d  # ended: no silence measured
    h = rows["healthy"]
    assert h["alerts"] == [] and h["alert_text"] == [] and h["nonfinite"] == 0
    s = rows["stuck"]
    assert s["status"] == "running" and s["alerts"] == ["stalled"] and s["last_step"] == 59
    assert s["alert_text"] == ["no metric for 10 min, usually every 20 s"]
    assert s["metric_interval_s"] == pytest.approx(20.0, rel=0.01) and s["last_metric_at"]


def test_api_run_page_carries_the_alerts(server, store):
    _root, ids, _tmp = store
    d = server.json(f"/api/run?run=rl/{ids['diverged']}")
    assert d["alerts"] == ["nonfinite"] and d["alert_text"] == ["NaN in actor/pg_loss since step 120"]
    assert server.json(f"/api/run?run=rl/{ids['healthy']}")["alerts"] == []


def test_an_unchanged_table_is_not_modified(server, store):
    status, headers, _body = server.request("/api/runs")
    assert status == 200
    again, _h, body = server.request("/api/runs", {"If-None-Match": headers["etag"]})
    # the stalled run's sentence says whole minutes: the same table within a poll or two
    assert again == 304 or json.loads(body)["runs"]


def test_a_live_runs_last_step_keeps_up_with_its_parts(server, store):
    """While a writer process logs (flushing every 0.3 s), each poll of the ETag'd table gives a
    last step at least the largest step its parts held just before (what the charts read); the
    run's run.json, rewritten at heartbeats (10 s), lags behind."""
    root, _ids, tmp = store
    stop = tmp / "stop-live"
    writer = subprocess.Popen([sys.executable, "-c", LIVE_RUN.format(root=str(root), stop=str(stop))], env=env_for(tmp),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = writer.stdout.readline().strip()

        def parts_step() -> int:
            t = trackstore.query("SELECT max(step) AS s FROM metrics WHERE run_id = $r", {"r": run_id}, root=root)
            return t.column("s")[0].as_py() or 0

        wait_for(lambda: parts_step() >= 20, what="the writer's first parts")
        etag, body, seen, ahead = None, None, [], 0
        for _ in range(8):
            before = parts_step()
            status, headers, raw = server.request("/api/runs", {"If-None-Match": etag} if etag else None)
            if status == 200:
                etag, body = headers["etag"], json.loads(raw)
            else:
                assert status == 304 and body is not None
            (row,) = [r for r in body["runs"] if r["run_id"] == run_id]
            assert row["status"] == "running" and row["last_step"] >= before, (row["last_step"], before)
            recorded = json.loads((root / "project=live" / f"run={run_id}" / "run.json").read_text()).get("last_step")
            ahead += recorded is None or recorded < row["last_step"]
            seen.append(row["last_step"])
            time.sleep(0.4)
        assert seen == sorted(seen) and seen[-1] > seen[0]  # it grew poll by poll
        assert ahead > 0  # the table was ahead of run.json: what it showed before
        before = parts_step()
        page = server.json(f"/api/run?run=live/{run_id}")  # the run page reads the run afresh
        assert page["status"] == "running" and page["last_step"] >= before and page["alerts"] == []
    finally:
        stop.touch()
        assert writer.wait(60) == 0
        writer.stdout.close()
        writer.stderr.close()


# ------------------------------------------------------------------ in a real browser
@pytest.fixture(scope="module")
def browser(server):
    require_chromium()
    with chromium() as d:
        yield d


def js(browser, code: str, *args):
    return browser.execute_script(code, *args)


BADGES = """
return [...document.querySelectorAll('#runs tbody tr')].map(tr => {
  const b = tr.querySelector('.status-cell .alert-badge');
  return [tr.querySelector('td:nth-child(3)').textContent, tr.querySelector('.status').textContent,
          b ? b.textContent : null, b ? b.getAttribute('title') : null];
});
"""


def test_the_runs_table_shows_a_badge_with_what_happened(browser, server, store):
    load(browser, server.url, fresh_storage=True)
    rows = wait_for(lambda: (r := js(browser, BADGES)) and len(r) >= 3 and r, what="the runs table")
    by_name = {name: (status, badge, title) for name, status, badge, title in rows}
    assert by_name["diverged"] == ("finished", "⚠ NaN", "NaN in actor/pg_loss since step 120")
    assert by_name["stuck"] == ("running", "⚠ stalled", "no metric for 10 min, usually every 20 s")
    assert by_name["healthy"] == ("finished", None, None)
    color = js(browser, "return getComputedStyle(document.querySelector('.alert-badge.nonfinite')).color")
    assert color == "rgb(185, 28, 28)"  # var(--bad)
    browser.save_screenshot(str(ARTIFACTS / "alerts-runs.png"))
    # the status filter's "with alerts" keeps the alerted runs only
    js(browser, "const s = document.getElementById('filter-status'); s.value = 'alerts'; s.dispatchEvent(new Event('change'));")
    names = wait_for(lambda: (n := js(browser, "return [...document.querySelectorAll('#runs tbody tr td:nth-child(3)')]"
                                                 ".map(td => td.textContent).sort()")) and "healthy" not in n and n,
                     what="the alerts filter")
    assert [n for n in names if n in ("diverged", "stuck", "healthy")] == ["diverged", "stuck"]
    browser.save_screenshot(str(ARTIFACTS / "alerts-filtered.png"))
    js(browser, "const s = document.getElementById('filter-status'); s.value = ''; s.dispatchEvent(new Event('change'));")


def test_the_run_page_header_shows_the_badge(browser, server, store):
    _root, ids, _tmp = store
    browser.get(server.url + f"#/run/rl/{ids['diverged']}")
    badge = wait_for(lambda: js(browser, "const b = document.querySelector('h1 .alert-badge');"
                                         "return b && [b.textContent, b.getAttribute('title')]"), what="the header's badge")
    assert badge == ["⚠ NaN", "NaN in actor/pg_loss since step 120"]
    browser.save_screenshot(str(ARTIFACTS / "alerts-run-page.png"))
    browser.get(server.url + f"#/run/rl/{ids['healthy']}")
    wait_for(lambda: js(browser, "const h = document.querySelector('h1'); return h && h.textContent.includes('healthy')"),
             what="the healthy run's page")
    assert js(browser, "return document.querySelector('h1 .alert-badge')") is None
