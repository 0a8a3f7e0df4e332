"""A synced run as a person sees it in each platform's own UI: a real headless Chromium (system
package, Selenium) against a real ``mlflow server`` and a real ``swanlab watch`` on 127.0.0.1.
Screenshots go to test-artifacts/platform/ (looked at when these tests were written; docs/img/
holds the ones docs/sync.md shows)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.browser import body_text, chromium_paths, click_text, screenshot, start_chromium, wait_for, wait_for_text
from tests.helpers import run_cli
from tests.servers import free_port, unique_experiment_name

pytest.importorskip("selenium")
pytest.importorskip("mlflow")
if chromium_paths() is None:
    pytest.skip("chromium and chromedriver are not installed (make install-test installs them)", allow_module_level=True)

from tests.test_sync_mlflow_native import agent_run  # noqa: E402

AREA = "platform"


# its tests share a server/store (session-scoped: a module fixture is set up again whenever another
# module's test ran in between on that worker), and with the other users of the session's MLflow
# server (about 18 s of CPU to start) they stay on one worker under `make test` (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("mlflow_server")


@pytest.fixture(scope="session")
def browser():
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _dismiss(driver) -> None:
    """Close MLflow's first-visit popups (its assistant panel and feature tips)."""
    click_text(driver, "Got it")
    for el in driver.find_elements("css selector", "[aria-label='Close'], [aria-label='close']"):
        try:
            if el.is_displayed():
                driver.execute_script("arguments[0].click()", el)
        except Exception:
            pass


@pytest.fixture(scope="session")
def mlflow_synced(mlflow_server, tmp_path_factory):
    """One agent run (2 steps x 2 trajectories with a failed tool call, samples, a histogram)
    synced to the session's MLflow server."""
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("ui-store")
    project = unique_experiment_name("ui")
    run = agent_run(root, project=project)
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_server.url, root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    client = MlflowClient(tracking_uri=mlflow_server.url)
    exp = client.get_experiment_by_name(project)
    [remote] = client.search_runs([exp.experiment_id])
    return mlflow_server.url, exp.experiment_id, remote.info.run_id, run


def _trace_rows(driver):
    return [r.text for r in driver.find_elements("css selector", "[role=row]") if "what is 6 * 7" in r.text]


def test_mlflow_trace_list_shows_each_conversation_and_its_errors(browser, mlflow_synced):
    url, exp_id, _rid, _run = mlflow_synced
    browser.get(f"{url}/#/experiments/{exp_id}/traces")
    wait_for_text(browser, "Q3.0: what is 6 * 7?", timeout=60)
    _dismiss(browser)
    text = wait_for_text(browser, "Q3.0: what is 6 * 7?", "A3.0: the answer is 42.", "Q4.1: what is 6 * 7?",
                         "A4.1: the answer is 42.")
    screenshot(browser, AREA, "mlflow-trace-list")
    rows = wait_for(browser, lambda: (lambda r: r if len(r) == 4 else None)(_trace_rows(browser)), "four trace rows")
    for row in rows:  # each row: its own question, its own answer, the state of a trace with a failed span
        q = re.search(r"Q(\d)\.(\d): what is 6 \* 7\?", row)
        assert q and f"A{q.group(1)}.{q.group(2)}: the answer is 42." in row and "Error" in row, row
        assert "trackstore." in row  # the trace tags (step, sample_index...) filters use; read back in test_sync_mlflow_native
    assert "-\n-" not in text


def _visible_css(driver, selector: str):
    return [e for e in driver.find_elements("css selector", selector) if e.is_displayed()]


def _visible(driver, component: str):
    return [e for e in driver.find_elements("css selector", f"[data-component-id='{component}']") if e.is_displayed()]


def test_mlflow_filter_by_step_and_sample_index_finds_the_trajectory(browser, mlflow_synced):
    """The trace list's own filter box (MLflow 3.18's; the Makefile pins the version the tests
    follow): it suggests the trackstore tags, and ``tag.trackstore.step = '4'`` then
    ``tag.trackstore.sample_index = '1'`` leave the one trajectory."""
    from selenium.webdriver.common.keys import Keys

    url, exp_id, _rid, _run = mlflow_synced
    browser.get(f"{url}/#/experiments/{exp_id}/traces")
    wait_for_text(browser, "Q3.0: what is 6 * 7?", timeout=60)
    _dismiss(browser)

    def box():
        return wait_for(browser, lambda: _visible(browser, "mlflow.traces-v4.search.typeahead"), "the filter box")[0]

    box().click()
    box().send_keys("tag")
    wait_for_text(browser, "tag.trackstore.step", "tag.trackstore.sample_index")  # suggested from the synced tags
    for key, value in (("trackstore.step", "4"), ("trackstore.sample_index", "1")):
        field = box()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(f"tag.{key} = '{value}'", Keys.ENTER)
    wait_for(browser, lambda: (lambda r: len(r) == 1 and "Q4.1" in r[0])(_trace_rows(browser)),
             "only the trajectory of step 4, sample 1", timeout=60)
    wait_for_text(browser, "Q4.1: what is 6 * 7?", "A4.1: the answer is 42.")
    screenshot(browser, AREA, "mlflow-trace-filter")


def test_mlflow_failed_tool_call_shows_as_an_error_in_the_trace(browser, mlflow_synced):
    url, exp_id, _rid, _run = mlflow_synced
    browser.get(f"{url}/#/experiments/{exp_id}/traces")  # (MLflow keeps the last filters: Q4.1 shows either way)
    wait_for_text(browser, "Q4.1: what is 6 * 7?", timeout=60)
    _dismiss(browser)
    click_text(browser, "Q4.1: what is 6 * 7?")
    wait_for_text(browser, "calculator", "reward")
    _dismiss(browser)
    for el in browser.find_elements("xpath", "//*[normalize-space(text())='calculator']"):
        if el.is_displayed():
            browser.execute_script("arguments[0].click()", el)
            break
    text = wait_for_text(browser, "division by zero")
    screenshot(browser, AREA, "mlflow-trace-error")
    assert "ZeroDivisionError" in text


def test_mlflow_samples_appear_as_a_table_and_histograms_are_drawn(browser, mlflow_synced):
    url, exp_id, rid, _run = mlflow_synced
    browser.get(f"{url}/#/experiments/{exp_id}/runs/{rid}/artifacts/trackstore/samples/val")
    wait_for_text(browser, "step_000000004", timeout=60)
    _dismiss(browser)
    click_text(browser, next(t for t in body_text(browser).split("\n") if t.startswith("step_000000004")))
    text = wait_for_text(browser, "user: What is 0 + 4?", "It is 4.", "ground_truth")
    screenshot(browser, AREA, "mlflow-samples-table")
    assert "json_fields" not in text and '\\"role\\"' not in text

    # the experiment's Evaluation view (Training runs, table icon): MLflow's own view of logged
    # tables, the first one (step 3) selected, one row per sample; "input" added to Group by
    browser.get(f"{url}/#/experiments/{exp_id}/runs?compareRunsMode=ARTIFACT")
    wait_for_text(browser, "Group by", "Compare", timeout=60)
    _dismiss(browser)
    text = wait_for_text(browser, "trackstore/samples/val/step_000000003", "It is 3.", "It is 4.", "It is 5.")
    assert "No evaluation tables logged" not in text
    wait_for(browser, lambda: _visible_css(browser, "[aria-label='Select \"group by\" columns']"), "Group by")[0].click()
    wait_for(browser, lambda: [o for o in _visible_css(browser, "[role=option]") if o.text.strip() == "input"],
             "the input column")[0].click()
    wait_for_text(browser, "user: What is 0 + 3?", "user: What is 2 + 3?")
    from selenium.webdriver.common.keys import Keys

    browser.find_element("tag name", "body").send_keys(Keys.ESCAPE)
    screenshot(browser, AREA, "mlflow-evaluation-view")

    browser.get(f"{url}/#/experiments/{exp_id}/runs/{rid}/model-metrics")
    wait_for_text(browser, "actor/entropy", timeout=60)
    _dismiss(browser)
    slider = wait_for(browser, lambda: [s for s in browser.find_elements("css selector", "[role=slider]")
                                        if s.is_displayed()], "the image step slider")[0]
    assert (slider.get_attribute("aria-valuemin"), slider.get_attribute("aria-valuemax")) == ("3", "4")
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).click_and_hold(slider).move_by_offset(400, 0).release().perform()  # to the last step
    wait_for(browser, lambda: slider.get_attribute("aria-valuenow") == "4", "the slider at step 4")
    # drawn from the artifact MLflow fetched (3.18 shows it through a blob: URL), not a placeholder
    wait_for(browser, lambda: [i for i in browser.find_elements("css selector", "img") if i.is_displayed()
                               and (i.get_attribute("src") or "").startswith(("blob:", url))
                               and i.size["width"] > 50 and i.get_attribute("naturalWidth") not in (None, "0")],
             "the histogram image of step 4")
    screenshot(browser, AREA, "mlflow-histogram")


def test_mlflow_link_the_sync_prints_opens_the_experiments_runs_list(browser, mlflow_server, tmp_path):
    """MLflow 3's UI opens an experiment in the view of the browser's workflow type (GenAI
    until the user flips the toggle), whatever the server holds (the experiment-kind tag
    trackstore sets included): for a new user the bare experiment address lands on the GenAI
    overview. The address the sync prints carries ``workflowType=machine_learning`` and lands
    on the runs list."""
    root = tmp_path / "store"
    root.mkdir()
    project = unique_experiment_name("landing")
    agent_run(root, project=project)
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_server.url, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    [link] = json.loads(res.stdout)["view"]
    exp_id = re.search(r"#/experiments/(\w+)/runs\?workflowType=machine_learning$", link).group(1)
    browser.get(mlflow_server.url + "/")
    browser.execute_script("window.localStorage.clear()")  # a browser that never chose a view
    browser.get("about:blank")
    browser.get(f"{mlflow_server.url}/#/experiments/{exp_id}")
    wait_for(browser, lambda: "/overview" in browser.current_url or "/traces" in browser.current_url,
             "the bare address to land in the GenAI view", timeout=60)
    browser.get("about:blank")
    browser.get(link)
    text = wait_for_text(browser, "Run Name", "agent", "1 matching run", timeout=60)
    _dismiss(browser)
    assert f"#/experiments/{exp_id}/runs?" in browser.current_url, browser.current_url
    assert "Overview" not in text.split("Run Name")[0], text  # the GenAI side menu is not shown
    screenshot(browser, AREA, "mlflow-runs-landing")


# ---------------------------------------------------------------------------------- SwanLab
@pytest.fixture(scope="session")
def swanlab_synced(tmp_path_factory):
    from tests.test_sync_swanlab_native import has_swanboard, two_projects

    if not has_swanboard():
        pytest.skip("swanboard 0.1.10b2 is not installed (make install-test installs it)")
    home = tmp_path_factory.mktemp("ui-swanlab")
    root, logdir = home / "store", home / "swanlog"
    runs = two_projects(root)
    env = {"SWANLAB_ROOT": str(home / "swanlab-home"), "SWANLAB_API_KEY": ""}
    res = run_cli("sync", "--to", "swanlab", "--mode", "local", "--logdir", str(logdir), root=root, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return logdir, runs, env


def _watch(folder, env):
    import os

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "swanlab", "watch", str(folder), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env}, start_new_session=True)
    return proc, port


def _stop(proc) -> None:
    import os
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _url_of(proc, port: int, timeout: float = 60) -> str:
    """The address ``swanlab watch`` says it serves (it moves to another port when one is taken)."""
    import urllib.request

    end = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return url
        except Exception:
            time.sleep(0.3)
    raise AssertionError("swanlab watch did not answer")


def test_swanlab_dashboard_each_project_under_its_name_config_as_text(browser, swanlab_synced):
    logdir, runs, env = swanlab_synced
    for run in runs:
        proc, port = _watch(logdir / run.project, env)
        try:
            url = _url_of(proc, port)
            browser.get(url)
            wait_for_text(browser, run.project, run.name, timeout=60)
            # the project's experiment table: config values as text, never [object Object]
            text = wait_for_text(browser, "model.name", "tiny", "trackstore.tags", "grpo, v1")
            assert "[object Object]" not in text
            assert [r for r in runs if r.project != run.project][0].project not in text
            screenshot(browser, AREA, f"swanlab-project-{run.project}")
            browser.get(f"{url}/experiment/1")
            wait_for_text(browser, "samples/val", "trajectories", timeout=60)
            for el in browser.find_elements("xpath", "//*[normalize-space(text())='trajectories']")[:1]:
                browser.execute_script("arguments[0].scrollIntoView()", el)
            text = wait_for_text(browser, "#0 input", "user: What is 6 * 7?", "#0 output", "It is 42.",
                                 "└ calculator", "tool ERROR")
            screenshot(browser, AREA, f"swanlab-media-{run.project}")
            click_text(browser, "Experiment Card")
            text = wait_for_text(browser, "model.layers", "trackstore.run_id", run.id)
            assert "[object Object]" not in text
            screenshot(browser, AREA, f"swanlab-card-{run.project}")
        finally:
            _stop(proc)
