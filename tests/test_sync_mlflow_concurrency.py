"""One MLflow experiment per project, whatever the number of workers, against a server whose
store does not enforce unique names (MLflow's file store), and runs found in every copy of a
name when such copies exist.

Every figure is read back from the server with MLflow's own client.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
import yaml

import trackstore
from tests.helpers import run_cli
from tests.servers import unique_experiment_name

pytest.importorskip("mlflow")
from mlflow.entities import ViewType  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

# the file-store server is session-scoped: every module using it stays on one worker
pytestmark = pytest.mark.xdist_group("mlflow_file_server")


def _store(root, projects, runs=3, steps=4):
    for p in projects:
        for r in range(runs):
            run = trackstore.init(p, name=f"r{r}", root=root)
            for s in range(steps):
                run.log({"a": s, "b": s / 2}, step=s)
            run.finish()


def _live_copies(url, projects) -> Counter:
    exps = MlflowClient(tracking_uri=url).search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=1000)
    return Counter(e.name for e in exps if e.name in projects)


def test_jobs_8_creates_each_experiment_once(tmp_path, mlflow_file_server):
    """8 projects x 3 runs synced by 8 workers, five times over fresh stores: every project is
    one experiment (before: 1-6 names created twice in most tries)."""
    copies = []
    for attempt in range(5):
        root = tmp_path / f"store{attempt}"
        root.mkdir()
        projects = [unique_experiment_name(f"jobs{attempt}-{i}") for i in range(8)]
        _store(root, projects)
        res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_file_server.url, "--jobs", "8", root=root,
                      timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        live = _live_copies(mlflow_file_server.url, projects)
        copies.append(sum(n - 1 for n in live.values()))
        assert set(live) == set(projects)
        c = MlflowClient(tracking_uri=mlflow_file_server.url)
        ids = [e.experiment_id for e in c.search_experiments(max_results=1000) if e.name in projects]
        assert len(c.search_runs(ids, max_results=1000)) == 24
    assert copies == [0] * 5, f"experiments created twice, per try: {copies}"


def _duplicate(server, project, older: bool) -> str:
    """A second live experiment named ``project``, as two clients creating it at once leave on the
    file store: made through MlflowClient under another name, then given ``project``'s name
    (the file store keeps the name in the experiment's meta.yaml; MLflow itself refuses the
    rename, but not the race)."""
    c = MlflowClient(tracking_uri=server.url)
    [first] = [e for e in c.search_experiments(max_results=1000) if e.name == project]
    other = c.create_experiment(unique_experiment_name("copy"))
    meta = server.workdir / "mlruns" / other / "meta.yaml"
    data = yaml.safe_load(meta.read_text())
    data["name"] = project
    data["creation_time"] = first.creation_time + (-60_000 if older else 60_000)
    meta.write_text(yaml.safe_dump(data))
    assert len([e for e in c.search_experiments(max_results=1000) if e.name == project]) == 2
    return other


@pytest.mark.parametrize("older", [False, True], ids=["newer-copy", "older-copy"])
def test_lost_cursor_finds_the_run_in_any_copy_of_the_experiment(root, mlflow_file_server, older):
    """The run lives in one copy of its experiment's name; its cursor is lost: the sync finds it
    there (whichever copy MLflow or trackstore would pick first) and resends no point."""
    project = unique_experiment_name("copies")
    run = trackstore.init(project, name="r", root=root)
    for s in range(40):
        run.log({"a": s, "b": s / 2}, step=s)
    run.finish()
    url = mlflow_file_server.url
    assert run_cli("sync", "--to", "mlflow", "--uri", url, root=root).returncode == 0
    _duplicate(mlflow_file_server, project, older)
    shutil.rmtree(root / "_sync")
    res = run_cli("sync", "--to", "mlflow", "--uri", url, "--format", "json", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    [r] = json.loads(res.stdout)["runs"]
    assert r["metrics"] == 0, r
    c = MlflowClient(tracking_uri=url)
    ids = [e.experiment_id for e in c.search_experiments(max_results=1000) if e.name == project]
    [remote] = c.search_runs(ids, filter_string=f"tags.`trackstore.run_id` = '{run.id}'")
    points = Counter((k, m.step, m.value) for k in ("a", "b") for m in c.get_metric_history(remote.info.run_id, k))
    assert points == Counter({**{("a", s, s): 1 for s in range(40)}, **{("b", s, s / 2): 1 for s in range(40)}})
