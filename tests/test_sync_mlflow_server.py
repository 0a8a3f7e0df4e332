"""trackstore sync against a real `mlflow server` on 127.0.0.1, directly and through a TCP proxy
that cuts, refuses and slows connections (tests/proxy.py)."""

from __future__ import annotations

import json
import os

import pytest

import trackstore
from tests.helpers import run_cli

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

# the session's MLflow server (about 18 s of CPU to start) is started once: every module using it
# stays on one worker under `make test` (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("mlflow_server")


def _run(root, project, steps=50, keys=4):
    run = trackstore.init(project, name="srv", config={"lr": 0.01}, root=root)
    for s in range(steps):
        run.log({f"k{i}": s + i / 100 for i in range(keys)}, step=s)
    run.finish()
    return run


def _remote(url, project, run_id):
    c = MlflowClient(tracking_uri=url)
    exp = c.get_experiment_by_name(project)
    runs = c.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'")
    return c, runs


def _points(c, r):
    out = []
    for key in r.data.metrics:
        out += [(key, m.step, m.timestamp, m.value) for m in c.get_metric_history(r.info.run_id, key)]
    return sorted(out)


def _local(run):
    import pyarrow.parquet as pq

    rows = pq.read_table(run.dir / "metrics").to_pylist()
    return sorted((r["key"], r["step"], int(r["ts"].timestamp() * 1000), r["value"]) for r in rows)


def test_round_trip_over_http(root, mlflow_server, mlflow_experiment_name, tmp_path):
    run = _run(root, mlflow_experiment_name, steps=20)
    art = tmp_path / "weights.bin"
    art.write_bytes(os.urandom(2048))
    with trackstore.init(mlflow_experiment_name, root=root) as run2:
        run2.log({"x": 1.0})
        run2.log_artifact(art, name="policy")
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_server.url, "--verify", "--format", "json", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(r["verify_ok"] for r in json.loads(res.stdout)["runs"])
    c, [r] = _remote(mlflow_server.url, mlflow_experiment_name, run.id)
    assert _points(c, r) == _local(run)
    assert r.info.status == "FINISHED" and r.data.params["lr"] == "0.01"
    c, [r2] = _remote(mlflow_server.url, mlflow_experiment_name, run2.id)
    [f] = c.list_artifacts(r2.info.run_id, "trackstore/artifacts/policy/v0")
    assert f.file_size == 2048


def test_cuts_and_refusals_end_exact(root, mlflow_server, mlflow_proxy, mlflow_experiment_name):
    """Seeded random connection cuts (some after the server got the request) and a refusal
    window: syncing again until it succeeds ends with exactly the local points."""
    run = _run(root, mlflow_experiment_name, steps=250, keys=4)
    mlflow_proxy.random_cuts(probability=0.35, seed=3, max_bytes=3000, direction="both")
    codes = []
    for attempt in range(25):
        if attempt == 2:
            mlflow_proxy.refuse(seconds=1.5)
        res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_proxy.url, "--batch-size", "40", "--max-retries", "2",
                      "--timeout", "10", root=root, timeout=300)
        codes.append(res.returncode)
        assert res.returncode in (0, 7, 8), res.stdout + res.stderr
        if res.returncode == 0:
            break
    assert codes[-1] == 0, codes
    assert mlflow_proxy.stats().cuts > 0
    mlflow_proxy.reset()
    c, runs = _remote(mlflow_server.url, mlflow_experiment_name, run.id)
    assert len(runs) == 1, "the remote run was created more than once"
    assert _points(c, runs[0]) == _local(run)


def test_if_online_with_server_down_is_quiet(root, mlflow_experiment_name):
    from tests.servers import free_port

    _run(root, mlflow_experiment_name, steps=2)
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a server that is down
    res = run_cli("sync", "--to", "mlflow", "--uri", down, "--if-online", root=root)
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""
    res = run_cli("sync", "--to", "mlflow", "--uri", down, root=root)
    assert res.returncode == 7 and "unreachable" in res.stderr


def test_proxy_variables_are_honoured_and_credentials_never_printed(root, mlflow_server, mlflow_experiment_name):
    from tests.servers import free_port

    _run(root, mlflow_experiment_name, steps=2)
    dead = f"http://alice:s3cr3t-token@127.0.0.1:{free_port()}"
    env = {"HTTP_PROXY": dead, "http_proxy": dead, "NO_PROXY": "", "no_proxy": ""}
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_server.url, "--max-retries", "0", root=root, env=env)
    # the proxy is dead, so the sync must fail (it went through the proxy) and never leak the secret
    assert res.returncode in (7, 8), res.stdout + res.stderr
    assert "s3cr3t" not in res.stdout + res.stderr
    cursor_text = "".join(p.read_text() for p in (root / "_sync").rglob("*.json")) if (root / "_sync").exists() else ""
    assert "s3cr3t" not in cursor_text
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_server.url, root=root)
    assert res.returncode == 0, res.stderr
