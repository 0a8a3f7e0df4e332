"""A synced run's traces and sample tables as MLflow shows them, read back with MlflowClient:
the trace's ``mlflow.source.*`` name the training run (not the sync process), the root
``episode`` span holds what the episode was asked and answered, and sample tables are named by
their step, exactly once across a resumed sync."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, run_cli

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

TRAIN = """
import sys
import trackstore

run = trackstore.init("episodes", name="train", root=sys.argv[1])
run.log({"loss": 1.0}, step=200)
with run.trace(step=200, sample_index=0) as tr:
    with tr.span("user", kind="other", inputs={"content": "What is 6 * 7?"}):
        pass
    with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "6 * 7"}]) as turn:
        turn.set_outputs({"role": "assistant", "content": "It is 42."})
run.finish()
"""


def test_traces_name_the_training_run_as_their_source_and_the_episode_has_its_question_and_answer(tmp_path):
    """The run was trained by ``train.py`` outside any git repository; the sync runs from this
    checkout (a git repository), whose program and commit MLflow would otherwise record."""
    root = tmp_path / "store"
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    subprocess.run([sys.executable, str(script), str(root)], cwd=tmp_path, check=True, timeout=120)
    [run_json] = root.glob("project=episodes/*/run.json")
    meta = json.loads(run_json.read_text())
    assert meta["git"] is None and meta["command"][0].endswith("train.py")
    uri = mlflow_sqlite_uri(tmp_path)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("episodes")
    [trace] = client.search_traces(locations=[exp.experiment_id])
    source = {k: v for k, v in trace.info.trace_metadata.items() if k.startswith(("mlflow.source.", "mlflow.user"))}
    assert source["mlflow.source.name"] == " ".join(meta["command"]), source
    assert source["mlflow.source.git.commit"] == source["mlflow.source.git.branch"] == "", source
    assert source["mlflow.user"] == meta["user"]
    [remote] = client.search_runs([exp.experiment_id])
    assert remote.data.tags["mlflow.source.name"] == source["mlflow.source.name"]
    [episode] = [s for s in trace.data.spans if s.parent_id is None]
    assert (episode.name, episode.inputs, episode.outputs) == ("episode", "What is 6 * 7?", "It is 42.")
    assert (trace.info.request_preview, trace.info.response_preview) == ("What is 6 * 7?", "It is 42.")


def _tables(client, rid):
    files = sorted(f.path for f in client.list_artifacts(rid, "trackstore/samples/val"))
    listed = sorted(e["path"] for e in json.loads(client.get_run(rid).data.tags["mlflow.loggedArtifacts"]))
    return files, listed


def _rows(client, rid, files):
    out = []
    for f in files:
        table = json.loads(open(client.download_artifacts(rid, f)).read())
        out += [row[table["columns"].index("output")] for row in table["data"]]
    return sorted(out)


def _samples(run, texts):
    run.log_samples([{"input": f"q{t}", "output": t} for t in texts], step=200, split="val")
    run.flush()


@pytest.mark.parametrize("named_by", ["this-version", "earlier-version"])
def test_sample_tables_are_named_by_step_once_across_an_in_doubt_resend(root, tmp_path, named_by):
    """One table per step, ``step_000000200.json``; samples added to that step after it was
    synced are its second table, ``step_000000200_2.json``. A batch sent whose acknowledgement
    was lost (the sync died before saving its cursor) is sent again by the next sync under the
    same name: one copy. A table an earlier trackstore named after its first row
    (``step_…_<writer>_<seq>.json``) keeps that name when it is sent again."""
    from trackstore.read.reader import read_kind
    from trackstore.store.ledger import load_cursor, save_cursor
    from trackstore.sync.adapter import TargetOptions
    from trackstore.sync.mlflow import MlflowAdapter

    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("tables", name="live", root=root)
    run.log({"loss": 1.0}, step=200)
    _samples(run, ["a", "b", "c"])
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    _samples(run, ["d", "e"])
    run.finish()
    cursor = load_cursor(root, "mlflow", uri, "tables", run.id)
    rid = cursor.remote["run_id"]
    adapter = MlflowAdapter(TargetOptions(uri=uri, store_root=str(root)))
    later = read_kind(run.paths, "samples").slice(3)
    if named_by == "earlier-version":  # what a trackstore before step names sent, unacknowledged
        del cursor.remote["tables"]
        save_cursor(root, cursor)
        first = later.to_pylist()[0]
        older = f"trackstore/samples/val/step_000000200_{first['writer']}_{first['seq']:012d}.json"
        adapter.client.log_dict(rid, {"columns": ["output"], "data": [["d"], ["e"]]}, older)
        expected = ["trackstore/samples/val/step_000000200.json", older]
    else:  # this version sent it, then died before saving the cursor
        adapter.send("samples", later, cursor, "in-doubt")
        assert "tables" in load_cursor(root, "mlflow", uri, "tables", run.id).remote  # the saved one, from before
        expected = ["trackstore/samples/val/step_000000200.json", "trackstore/samples/val/step_000000200_2.json"]
    adapter.close()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["runs"][0]["samples"] == 2
    client = MlflowClient(tracking_uri=uri)
    files, listed = _tables(client, rid)
    assert files == sorted(expected), files
    if named_by == "this-version":
        assert listed == files
        assert _rows(client, rid, files) == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("batch", [[], ["--batch-size", "2"]], ids=["one-batch", "batches-of-2"])
def test_a_lost_cursor_resends_a_two_table_step_without_duplicate_rows(root, tmp_path, batch):
    """A step whose samples reached MLflow as two tables (rows logged after the step was
    synced): after the cursor is lost, the sync finds the run by its marker and sends every
    batch again, now grouped differently, in one batch or in several (each checked against
    the tables there, not only the first). Every sample is in the step's tables once."""
    from trackstore.store.ledger import cursor_path, load_cursor

    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("tables", name="lost", root=root)
    _samples(run, ["a", "b", "c"])
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    _samples(run, ["d", "e"])
    run.finish()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    rid = load_cursor(root, "mlflow", uri, "tables", run.id).remote["run_id"]
    client = MlflowClient(tracking_uri=uri)
    assert _rows(client, rid, _tables(client, rid)[0]) == ["a", "b", "c", "d", "e"]
    cursor_path(root, "mlflow", uri, "tables", run.id).unlink()  # lost (a wiped disk, a new machine)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, *batch, root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert load_cursor(root, "mlflow", uri, "tables", run.id).remote["run_id"] == rid  # found, not created
    files, listed = _tables(client, rid)
    assert _rows(client, rid, files) == ["a", "b", "c", "d", "e"], files
    assert listed == files
