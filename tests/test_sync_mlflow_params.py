"""A run's config as MLflow params, named as verl's own MLflow logger names them (nested keys
joined with ``/``, lists as ``list_len`` and indices, values as ``str``), read back with
MlflowClient; a run synced earlier with ``.``-joined names keeps them."""

from __future__ import annotations

import json
import shutil

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, run_cli
from trackstore.sync.keys import mlflow_params

mlflow = pytest.importorskip("mlflow")
pd = pytest.importorskip("pandas")
from mlflow.tracking import MlflowClient  # noqa: E402

VERL_LIKE = {
    "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-06, "warmup": None}, "use_kl_loss": True},
                          "rollout": {"n": 5, "name": "vllm"}},
    "trainer": {"logger": ["console", "mlflow"], "project_name": "grpo", "total_epochs": 15},
    "data": {"reward_fn_key": "data_source", "train_files": [{"path": "gsm8k/train.parquet", "weight": 0.5}]},
    "algorithm.adv_estimator": "grpo",
}


def verl_params(config: dict) -> dict[str, str]:
    """What verl's MLflow logger sends (``verl/utils/tracking.py``:
    ``_compute_mlflow_params_from_objects``, then ``mlflow.log_params``, which writes ``str``),
    rebuilt from its code: lists become ``{"list_len": n, "0": ..., ...}``, then
    ``pandas.json_normalize(sep="/")``."""
    def transform(x):
        if isinstance(x, dict):
            return {k: transform(v) for k, v in x.items()}
        if isinstance(x, list):
            return {"list_len": len(x)} | {f"{i}": transform(v) for i, v in enumerate(x)}
        return x

    flat = pd.json_normalize(transform(config), sep="/").to_dict(orient="records")[0]
    return {k: str(v) for k, v in flat.items()}


def remote_run(client, project, run_id):
    exp = client.get_experiment_by_name(project)
    (found,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'")
    return found


def test_params_are_named_and_written_as_verls_mlflow_logger_does(root, tmp_path):
    run = trackstore.init("grpo", name="verl-like", config=VERL_LIKE, root=root)
    run.log({"loss": 1.0}, step=1)
    run.finish()
    uri = mlflow_sqlite_uri(tmp_path)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 0, res.stderr + res.stdout
    client = MlflowClient(tracking_uri=uri)
    params = remote_run(client, "grpo", run.id).data.params
    expected = verl_params(VERL_LIKE)
    assert expected["actor_rollout_ref/actor/optim/lr"] == "1e-06" and expected["trainer/logger/list_len"] == "2"
    assert params == expected
    # a second sync, and one after the cursor is lost, add nothing and note no change
    for lose_cursor in (False, True):
        if lose_cursor:
            shutil.rmtree(root / "_sync")
        again = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
        assert again.returncode == 0, again.stderr + again.stdout
        assert "write-once" not in again.stdout
        assert remote_run(client, "grpo", run.id).data.params == expected


def test_a_run_synced_with_dot_joined_params_keeps_them(root, tmp_path):
    """MLflow params are write-once: a run an earlier trackstore synced (``.``-joined names,
    values as JSON) gets no second, ``/``-joined set, and no "changed" note for ``true``."""
    config = {"lr": 0.001, "use_kl": True, "model": {"layers": 2, "tags": ["a", "b"]}}
    run = trackstore.init("proj", name="old", config=config, root=root)
    run.log({"loss": 1.0}, step=1)
    run.finish()
    uri = mlflow_sqlite_uri(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    before = {"lr": "0.001", "use_kl": "true", "model.layers": "2", "model.tags": '["a", "b"]'}
    exp = client.create_experiment("proj")
    rid = client.create_run(exp, tags={"trackstore.run_id": run.id, "trackstore.project": "proj"}).info.run_id
    from mlflow.entities import Param

    client.log_batch(rid, params=[Param(k, v) for k, v in before.items()])
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "write-once" not in res.stdout, json.loads(res.stdout)
    r = client.get_run(rid)
    assert r.data.params == before
    assert len(client.get_metric_history(rid, "loss")) == 1


def test_param_names_of_lists_empty_dicts_and_keys_that_meet():
    params = mlflow_params({"a": {"b": 1}, "a/b": 2, "e": {}, "l": [], "s": {"x y": "t"}})
    values = {name: value for name, (_, value) in params.items()}
    assert values["e"] == "{}" and values["l/list_len"] == "0" and values["s/x y"] == "t"
    met = sorted(name for name, (path, _) in params.items() if path == "a/b")
    assert len(met) == 2 and "a/b" not in met  # two config paths, one joined name: both hashed, neither lost
    assert sorted(values[n] for n in met) == ["1", "2"]
    assert mlflow_params({}) == {}
