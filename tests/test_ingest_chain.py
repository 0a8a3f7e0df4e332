"""The chain no tool offered before: a wandb offline run -> `trackstore ingest` -> `sync --to
mlflow` -> read back with MLflow's own client: the same points, steps and timestamps (to
MLflow's millisecond precision) as wandb's own log holds, config as params, and a second ingest
and sync that add nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import mlflow_sqlite_uri, run_cli

pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")

WANDB_RUN = r"""
import wandb
run = wandb.init(project="backlog", id="chain1", mode="offline", dir={dir!r}, config={{"lr": 0.001, "algo": "grpo"}})
for step in range(60):
    run.log({{"critic/score/mean": step / 60, "actor/entropy": 1.0 - step / 120, "nested": {{"kl": step * 0.01}}}}, step=step)
run.finish()
"""


def wandb_points(wandb_dir) -> list[tuple[str, int, int, float]]:
    """Every point of the offline run as wandb's own log holds it (key, step, ms, value)."""
    from trackstore.sync.wandb_log import LogReader

    (log,) = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    out = []
    for rec in LogReader(log).records():
        if rec.WhichOneof("record_type") != "history":
            continue
        items = {("/".join(i.nested_key) if i.nested_key else i.key): json.loads(i.value_json) for i in rec.history.item}
        step, ts = int(items.pop("_step")), items.pop("_timestamp")
        for k, v in items.items():
            if not k.startswith("_") and isinstance(v, (int, float)):
                out.append((k, step, int(round(ts * 1e6)) // 1000, float(v)))
    return sorted(out)


def test_a_wandb_offline_run_reaches_mlflow_with_its_points_and_times(root, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    made = subprocess.run([sys.executable, "-c", WANDB_RUN.format(dir=str(src))], env=env, capture_output=True,
                          text=True, timeout=180)
    assert made.returncode == 0, made.stderr
    want = wandb_points(src)
    assert len(want) == 180

    out = run_cli("ingest", "--from", "wandb", str(src / "wandb"), root=root)
    assert out.returncode == 0, out.stderr + out.stdout
    uri = mlflow_sqlite_uri(tmp_path)
    out = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert out.returncode == 0, out.stderr + out.stdout

    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("backlog")
    (remote,) = client.search_runs([exp.experiment_id])
    keys = {k for k, *_ in want}
    got = sorted((k, m.step, m.timestamp, m.value) for k in keys
                 for m in client.get_metric_history(remote.info.run_id, k))
    assert got == want
    assert remote.data.params["lr"] == "0.001" and remote.data.params["algo"] == "grpo"

    # again, end to end: nothing new is read, written or sent
    again = run_cli("ingest", "--from", "wandb", str(src / "wandb"), "--format", "json", root=root)
    assert again.returncode == 0, again.stderr
    assert [r["action"] for r in json.loads(again.stdout)] == ["unchanged"]
    out = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert out.returncode == 0, out.stderr
    assert sorted((k, m.step, m.timestamp, m.value) for k in keys
                  for m in client.get_metric_history(remote.info.run_id, k)) == want
