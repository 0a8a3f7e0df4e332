"""Exactly once by protocol, against a backend that would show duplicates.

A real ``mlflow server`` over MLflow's *file* store (no primary key absorbs a point sent twice,
unlike the sqlite store the other server tests use), reached through tests/proxy.py cutting
connections both before the request reaches the server and after it processed it. Every test
counts points read back directly from the server.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter

import pytest

import trackstore
from tests.helpers import run_cli
from tests.proxy import FaultyProxy
from tests.servers import unique_experiment_name
from tests.sync_harness import mlflow_points

pytest.importorskip("mlflow")

# the file-store server (tests/servers.py) is session-scoped: `make test` (--dist loadgroup) keeps
# every module using it on one worker, so it is started once
pytestmark = pytest.mark.xdist_group("mlflow_file_server")


@pytest.fixture
def file_server(mlflow_file_server):
    return mlflow_file_server


def _log(root, project, steps, keys=3, start=0, run=None):
    run = run or trackstore.init(project, name="x1", root=root)
    for s in range(start, start + steps):
        run.log({f"k{i}": s + i / 10 for i in range(keys)}, step=s)
    return run


def _expected(steps, keys=3) -> Counter:
    return Counter((f"k{i}", s, s + i / 10) for s in range(steps) for i in range(keys))


def test_cuts_before_and_after_delivery_never_duplicate(root, file_server):
    """Each retry of a batch whose answer was lost asks the server first: no point twice."""
    project = unique_experiment_name("cuts")
    run = _log(root, project, steps=60)
    run.finish()
    with FaultyProxy("127.0.0.1", file_server.port) as proxy:
        proxy.random_cuts(probability=1.0, seed=11, max_bytes={"up": 5000, "down": 5000}, direction=("up", "down"))
        for _ in range(15):
            res = run_cli("sync", "--to", "mlflow", "--uri", proxy.url, "--batch-size", "15", "--max-retries", "8",
                          "--timeout", "10", "--format", "json", root=root, timeout=300)
            assert res.returncode in (0, 7), res.stdout + res.stderr
            if res.returncode == 0:
                break
        assert res.returncode == 0, res.stdout + res.stderr
        assert proxy.stats().cuts >= 5
    points = mlflow_points(file_server.url, project, run.id)
    assert not [p for p, n in points.items() if n > 1], "a point was stored twice"
    assert points == _expected(60)


@pytest.mark.parametrize("spelling", ["http://localhost:{p}", "http://127.0.0.1:{p}/", "HTTP://bob:pw@127.0.0.1:{p}"])
def test_one_destination_whatever_the_spelling(root, file_server, spelling):
    """localhost, a trailing slash, credentials and upper case are the same server: one cursor,
    nothing replayed; a URI with credentials is reachable (it was 'unreachable', exit 7)."""
    project = unique_experiment_name("spelling")
    run = _log(root, project, steps=30)
    first = run_cli("sync", "--to", "mlflow", "--uri", file_server.url, root=root)
    assert first.returncode == 0, first.stderr
    _log(root, project, steps=10, start=30, run=run)
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", spelling.format(p=file_server.port), "--if-online", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len({p.name for p in (root / "_sync").iterdir() if p.is_dir()}) == 1
    assert mlflow_points(file_server.url, project, run.id) == _expected(40)
    assert "pw" not in res.stdout + res.stderr


def test_lost_cursor_is_reconciled_not_replayed(root, file_server):
    """A cursor deleted (or quarantined by doctor) meets the remote run by its marker tag: every
    batch is reconciled against what the server holds, and only the new points are sent."""
    project = unique_experiment_name("lost")
    run = _log(root, project, steps=50)
    assert run.flush()  # the live run's rows are on disk before the first sync (it used to race the writer)
    assert run_cli("sync", "--to", "mlflow", "--uri", file_server.url, root=root).returncode == 0
    shutil.rmtree(root / "_sync")
    _log(root, project, steps=20, start=50, run=run)
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", file_server.url, "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    [r] = json.loads(res.stdout)["runs"]
    assert r["metrics"] == 60, r  # 20 new steps x 3 keys; the 150 points the server held were not resent
    assert r["reconciled"] > 0, r
    assert mlflow_points(file_server.url, project, run.id) == _expected(70)


def test_file_uri_without_opt_in_is_a_clean_error(root, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run = _log(root, "p", steps=2)
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", (tmp_path / "mlruns").as_uri(), root=root,
                  env={"MLFLOW_ALLOW_FILE_STORE": ""})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "MLFLOW_ALLOW_FILE_STORE" in res.stderr and "Traceback" not in res.stderr
    assert not re.search(r"\bok\b", res.stdout), res.stdout  # a word: a run id's random end may hold "ok"
