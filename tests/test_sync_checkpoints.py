"""Checkpoints by reference with moving aliases, replayed natively and read back with each
target's own reader: MLflow registered model versions and aliases (sqlite store and a real
server, through MlflowClient), wandb artifacts with their aliases (offline, its transaction
log), SwanLab files (what it cannot hold counted). A reference that vanished or changed is
skipped, never uploaded as something else; a resent batch adds no model version."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, rewrite_cursor, run_cli
from trackstore.records.artifacts import list_versions


def checkpoint(folder: Path, step: int) -> Path:
    d = folder / f"global_step_{step}"
    (d / "actor").mkdir(parents=True)
    (d / "actor" / "model.safetensors").write_bytes(os.urandom(50_000) + str(step).encode())
    (d / "actor" / "config.json").write_text(json.dumps({"step": step}))
    return d


def rl_run(root: Path, tmp_path: Path, project: str = "proj"):
    """Three checkpoints by reference (latest moves with each), best given to v1 then moved back to v0."""
    run = trackstore.init(project, root=root)
    for step in (10, 20, 30):
        run.log({"reward": step / 100}, step=step)
        v = run.log_checkpoint(checkpoint(tmp_path / "ckpts", step), step=step,
                               metrics={"reward": step / 100}).result(timeout=60)
        if step == 20:
            run.alias_artifact(v.name, v.version, "best")
    run.alias_artifact(f"model-{run.id}", 0, "best")
    run.finish()
    return run


def sync(root, *args):
    res = run_cli("sync", *args, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["runs"][0]


# ---------------------------------------------------------------------- MLflow
def mlflow_versions(uri: str, run) -> tuple[dict, dict]:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = f"model-{run.id}"
    versions = {int(mv.tags["trackstore.version"]): mv for mv in c.search_model_versions(f"name = '{model}'")}
    aliases = {a: c.get_model_version_by_alias(model, a).version for a in ("best", "step-10", "step-20", "step-30")}
    return versions, aliases


def check_mlflow(uri: str, run) -> None:
    from mlflow.tracking import MlflowClient

    versions, aliases = mlflow_versions(uri, run)
    assert sorted(versions) == [0, 1, 2]
    assert aliases == {"best": versions[0].version, "step-10": versions[0].version,
                       "step-20": versions[1].version, "step-30": versions[2].version}
    assert versions[2].tags["trackstore.step"] == "30" and versions[2].tags["metric.reward"] == "0.3"
    c = MlflowClient(tracking_uri=uri)
    rid = versions[0].run_id
    assert versions[0].source == f"runs:/{rid}/trackstore/artifacts/model-{run.id}/v0"
    folder = f"trackstore/artifacts/model-{run.id}/v2/actor"
    local = c.download_artifacts(rid, f"{folder}/model.safetensors")
    [v2] = [v for v in list_versions(run.dir) if v.version == 2]
    src = next(f.path for f in v2.files if f.logical_path == "actor/model.safetensors")
    assert Path(local).read_bytes() == Path(src).read_bytes()


def test_mlflow_model_versions_and_moved_aliases_sqlite_and_a_resend(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = rl_run(root, tmp_path)
    out = sync(root, "--to", "mlflow", "--uri", uri)
    assert out["result"] == "ok" and out["skipped_by_reason"] == {}, out
    check_mlflow(uri, run)
    assert sync(root, "--to", "mlflow", "--uri", uri)["result"] == "up to date"
    versions, _ = mlflow_versions(uri, run)
    assert sorted(versions) == [0, 1, 2]
    # every artifact row in doubt again, as a kill after MLflow took them leaves it: the resend
    # finds the model versions it made (by their tag) and makes no second one
    from trackstore.read.reader import read_kind
    from trackstore.store.ranges import RangeSet

    [path] = [p for p in (root / "_sync").rglob("*.json") if json.loads(p.read_text()).get("acked", {}).get("artifacts")]
    cur = json.loads(path.read_text())
    doubt = RangeSet()
    for r in read_kind(run.paths, "artifacts").to_pylist():
        doubt.add_seqs(r["writer"], [r["seq"]])
    cur["acked"]["artifacts"] = {}
    cur["in_doubt"] = {"kind": "artifacts", "rows": doubt.to_json(), "batch_id": "lost", "since": "now"}
    rewrite_cursor(path, cur)
    assert sync(root, "--to", "mlflow", "--uri", uri)["result"] == "ok"
    check_mlflow(uri, run)


@pytest.mark.xdist_group("mlflow_server")
def test_mlflow_model_versions_over_a_real_server(root, tmp_path, mlflow_server, mlflow_experiment_name):
    run = rl_run(root, tmp_path, project=mlflow_experiment_name)
    out = sync(root, "--to", "mlflow", "--uri", mlflow_server.url)
    assert out["result"] == "ok" and out["skipped_by_reason"] == {}, out
    check_mlflow(mlflow_server.url, run)


def test_a_vanished_or_rewritten_reference_is_skipped_not_sent(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("proj", root=root)
    gone = run.log_checkpoint(checkpoint(tmp_path / "a", 1), step=1).result(timeout=60)
    rewritten = run.log_checkpoint(checkpoint(tmp_path / "b", 2), step=2).result(timeout=60)
    run.finish()
    for f in gone.files:
        os.unlink(f.path)
    target = next(f for f in rewritten.files if f.logical_path == "actor/model.safetensors")
    data = bytearray(Path(target.path).read_bytes())
    data[0] ^= 0xFF  # same size, other bytes: only the hash tells
    Path(target.path).write_bytes(bytes(data))
    out = sync(root, "--to", "mlflow", "--uri", uri)
    assert out["skipped_by_reason"] == {"artifact reference vanished": 2, "artifact reference changed": 1}, out
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    rid = c.search_runs([c.get_experiment_by_name("proj").experiment_id])[0].info.run_id
    sent = {f.path for f in c.list_artifacts(rid, f"trackstore/artifacts/model-{run.id}/v1/actor")}
    assert sent == {f"trackstore/artifacts/model-{run.id}/v1/actor/config.json"}  # the intact file only
    assert c.search_model_versions(f"name = 'model-{run.id}'") == []  # an incomplete version is not registered


# ---------------------------------------------------------------------- wandb

def test_wandb_artifacts_with_moving_aliases_offline(wb, root, tmp_path):
    run = rl_run(root, tmp_path)
    out = sync(root, "--to", "wandb")
    assert out["result"] == "ok" and out["skipped_by_reason"] == {}, out
    arts = [a for a in wb.artifacts(run.project, run.id) if a["type"] == "model"]
    digests = {}
    for a in arts:
        digests.setdefault(a["metadata"]["trackstore.version"], set()).add(a["digest"])
    assert all(len(d) == 1 for d in digests.values()) and len(digests) == 3  # re-logs are the same versions
    holder = {}
    for a in arts:  # wandb moves an alias to the version logged with it last
        for alias in a.get("aliases") or []:
            holder[alias] = a["metadata"]["trackstore.version"]
    # latest too: wandb gives it to each logged artifact, the re-logs included, so the one holding
    # it in the store is logged last
    assert holder == {"step-10": 0, "step-20": 1, "step-30": 2, "best": 0, "latest": 2}
    assert {a["name"] for a in arts} == {f"model-{run.id}"}
    v2 = next(a for a in arts if a["metadata"]["trackstore.version"] == 2)
    assert v2["metadata"]["metrics"] == {"reward": 0.3}
    [stored] = [v for v in list_versions(run.dir) if v.version == 2]
    src = next(f for f in stored.files if f.logical_path == "actor/model.safetensors")
    entry = next(e for e in v2["manifest"]["contents"] if e["path"] == "actor/model.safetensors")
    assert Path(entry["local_path"]).read_bytes() == Path(src.path).read_bytes()
    assert sync(root, "--to", "wandb")["result"] == "up to date"


# ---------------------------------------------------------------------- SwanLab
def test_swanlab_saves_reference_files_and_counts_the_aliases_it_cannot_hold(root, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    from trackstore.sync.swanlab import SKIP_ALIAS, experiment_id, read_session_files

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    logdir = tmp_path / "swanlog"
    run = rl_run(root, tmp_path)
    out = sync(root, "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir))
    assert out["result"] == "ok" and out["skipped_by_reason"] == {SKIP_ALIAS: 2}, out
    saves = sorted(r.save.name for _d, r in read_session_files(logdir, experiment_id(run.project, run.id))
                   if r.WhichOneof("record_type") == "save" and r.save.name.startswith("global_step"))
    assert saves == [f"global_step_{s}/actor/{f}" for s in (10, 20, 30) for f in ("config.json", "model.safetensors")]
    [saved] = [r.save for _d, r in read_session_files(logdir, experiment_id(run.project, run.id))
               if r.WhichOneof("record_type") == "save" and r.save.name == "global_step_30/actor/model.safetensors"]
    original = tmp_path / "ckpts" / "global_step_30" / "actor" / "model.safetensors"
    assert hashlib.sha256(Path(saved.target_path).read_bytes()).digest() == hashlib.sha256(original.read_bytes()).digest()
