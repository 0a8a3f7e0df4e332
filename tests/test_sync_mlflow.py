"""trackstore sync --to mlflow against real MLflow stores (embedded sqlite, and the file store,
which does not deduplicate re-sent points, so exactly-once is ours to prove there)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trackstore
from tests.helpers import cli_in_pty, mlflow_sqlite_uri, run_cli, spawn_cli

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


def make_run(root, *, steps=30, keys=5, project="proj", name="exp", finish=True, samples=False, extra=None):
    run = trackstore.init(project, name=name, config={"lr": 0.001, "model": {"layers": 2, "name": "tiny"}},
                          tags=["t1"], notes="hello", root=root)
    for s in range(steps):
        run.log({f"k{i}": s * 10 + i + 0.5 for i in range(keys)} | (extra or {}), step=s)
    if samples:
        run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=1)
    if finish:
        run.finish()
    else:
        run.flush()
    return run


def client_for(uri):
    return MlflowClient(tracking_uri=uri)


def remote_run(client, project, run_id):
    exp = client.get_experiment_by_name(project)
    found = client.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'")
    assert len(found) == 1, f"expected exactly one remote run, found {len(found)}"
    return found[0]


def points(client, rid, keys):
    out = []
    for k in keys:
        out += [(k, m.step, m.timestamp, m.value) for m in client.get_metric_history(rid, k)]
    return sorted(out)


def local_points(run):
    import pyarrow.parquet as pq

    t = pq.read_table(run.dir / "metrics").to_pylist()
    return sorted((r["key"], r["step"], int(r["ts"].timestamp() * 1000), r["value"]) for r in t)


@pytest.fixture(params=["sqlite", "filestore"])
def mlflow_uri(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        return mlflow_sqlite_uri(tmp_path, "mlflow.db")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()


def test_full_roundtrip(root, mlflow_uri):
    run = make_run(root, samples=True)
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_uri, root=root)
    assert res.returncode == 0, res.stderr + res.stdout
    c = client_for(mlflow_uri)
    r = remote_run(c, "proj", run.id)
    assert points(c, r.info.run_id, [f"k{i}" for i in range(5)]) == local_points(run)
    assert r.data.params["lr"] == "0.001" and r.data.params["model/layers"] == "2"
    assert r.data.tags["mlflow.note.content"] == "hello" and r.data.tags["t1"] == "true"
    assert r.data.tags["mlflow.runName"] == "exp"
    meta = json.loads((run.dir / "run.json").read_text())
    created = int(trackstore.store.clock.parse_iso(meta["created_at"]) * 1000)
    ended = int(trackstore.store.clock.parse_iso(meta["ended_at"]) * 1000)
    assert r.info.start_time == created and r.info.end_time == ended
    assert r.info.status == "FINISHED"
    files = [f.path for f in c.list_artifacts(r.info.run_id, "trackstore/samples/val")]
    assert len(files) == 1
    # second sync: nothing new, nothing sent, still one remote run
    res2 = run_cli("sync", "--to", "mlflow", "--uri", mlflow_uri, "--format", "json", root=root)
    assert res2.returncode == 0, res2.stderr
    summary = json.loads(res2.stdout)
    assert summary["runs"][0]["result"] == "up to date"
    assert points(c, r.info.run_id, [f"k{i}" for i in range(5)]) == local_points(run)


def test_incremental_live_run(root, mlflow_uri):
    run = trackstore.init("proj", root=root)
    for s in range(10):
        run.log({"loss": 1.0 / (s + 1)}, step=s)
    run.flush()
    assert run_cli("sync", "--to", "mlflow", "--uri", mlflow_uri, root=root).returncode == 0
    c = client_for(mlflow_uri)
    r = remote_run(c, "proj", run.id)
    assert r.info.status == "RUNNING"
    assert len(c.get_metric_history(r.info.run_id, "loss")) == 10
    for s in range(10, 25):
        run.log({"loss": 1.0 / (s + 1)}, step=s)
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_uri, "--format", "json", root=root)
    assert res.returncode == 0
    assert json.loads(res.stdout)["runs"][0]["metrics"] == 15
    r = remote_run(c, "proj", run.id)
    assert points(c, r.info.run_id, ["loss"]) == local_points(run)
    assert r.info.status == "FINISHED"


def test_status_mapping_and_key_mapping(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    ok = make_run(root, steps=2, keys=1, name="ok", extra={"val/acc@1": 0.5, "weird key!": 2.0})
    with pytest.raises(RuntimeError):
        with trackstore.init("proj", name="bad", root=root) as bad:
            bad.log({"x": 1.0})
            raise RuntimeError("boom")
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert res.returncode == 0, res.stderr
    c = client_for(uri)
    r_ok = remote_run(c, "proj", ok.id)
    # renamed keys that meet no other key of the run stay readable, without a hash (sync/keys.py)
    assert [m.value for m in c.get_metric_history(r_ok.info.run_id, "val/acc_at_1")] == [0.5, 0.5]
    assert len(c.get_metric_history(r_ok.info.run_id, "weird key_")) == 2
    assert "key 'val/acc@1' sent as 'val/acc_at_1'" in res.stdout  # named in the summary
    r_bad = remote_run(c, "proj", bad.id)
    assert r_bad.info.status == "FAILED" and "boom" in r_bad.data.tags["trackstore.error"]


def test_dry_run_sends_nothing(root, tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run = make_run(root, steps=3, keys=2)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--dry-run", "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["dry_run"] and plan["runs"][0]["pending"]["metrics"] == 6
    assert not (tmp_path / "m.db").exists() or client_for(uri).get_experiment_by_name("proj") is None
    assert run.id in res.stdout


def test_embedded_default_and_no_noise(root):
    run = make_run(root, steps=3, keys=1)
    res = run_cli("sync", "--to", "mlflow", root=root)
    assert res.returncode == 0, res.stderr
    assert (root / "_mlflow" / "mlflow.db").exists()
    c = client_for(f"sqlite:///{root / '_mlflow' / 'mlflow.db'}")
    assert len(c.get_metric_history(remote_run(c, "proj", run.id).info.run_id, "k0")) == 3
    assert "INFO" not in res.stderr


def test_deleted_experiment_is_permanent_and_others_continue(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    a = make_run(root, project="gone", steps=2, keys=1)
    b = make_run(root, project="alive", steps=2, keys=1)
    c = client_for(uri)
    c.delete_experiment(c.create_experiment("gone"))
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 8, res.stdout + res.stderr
    by_run = {r["run_id"]: r for r in json.loads(res.stdout)["runs"]}
    assert "deleted" in by_run[a.id]["error"] and "restore" in by_run[a.id]["error"]
    assert by_run[b.id]["error"] is None
    assert len(c.get_metric_history(remote_run(c, "alive", b.id).info.run_id, "k0")) == 2


def cursor_mtime(root):
    files = list((root / "_sync").rglob("run=*.json")) if (root / "_sync").exists() else []
    return max((f.stat().st_mtime_ns for f in files), default=0)


SYNC_CHILD = """
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1)  # a test that times out asks for every thread's stack
from trackstore.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_mid_sync_then_resume_is_exact(root, tmp_path, monkeypatch):
    """Kill the sync process at random moments (seeded) several times; the end state is exact.

    Uses MLflow's file store, which stores every re-sent point again: without the in-doubt
    batch reconciliation this test sees duplicates. The run is long enough (750 batches) that
    six kills at most 0.5 s after a pass starts sending all land while metrics are in flight,
    which is what this test is about (a kill inside MLflow's own non-atomic rewrite of a run's
    meta.yaml, at the end of a pass, breaks the file store itself: see the next test)."""
    import random

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    run = make_run(root, steps=3000, keys=5)
    rng = random.Random(7)
    args = ["sync", "--to", "mlflow", "--uri", uri, "--batch-size", "20", "--root", str(root)]
    kills = 0
    for _ in range(6):
        p = spawn_cli(*args)
        # wait until this sync is sending (its cursor moves), then kill it at a seeded moment
        start = cursor_mtime(root)
        deadline = time.time() + 60
        while p.poll() is None and cursor_mtime(root) == start and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(rng.random() * 0.5)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 1
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stderr
    c = client_for(uri)
    got = points(c, remote_run(c, "proj", run.id).info.run_id, [f"k{i}" for i in range(5)])
    want = local_points(run)
    assert len(got) == len(want) and got == want


def test_resync_of_a_finished_run_does_not_rewrite_mlflow_run_metadata(root, tmp_path, monkeypatch):
    """Status and summary tags already held are not sent again: on MLflow's file store each
    set_terminated rewrites meta.yaml in place, a window in which a killed sync corrupts it."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    run = trackstore.init("proj", root=root)
    run.log({"x": 1.0}, step=0)
    run.summary["best"] = 0.5
    run.finish()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    c = client_for(uri)
    r = remote_run(c, "proj", run.id)
    assert r.info.status == "FINISHED" and r.data.tags["trackstore.summary.best"] == "0.5"
    meta = next((tmp_path / "mlruns").glob(f"*/{r.info.run_id}/meta.yaml"))
    tag = meta.parent / "tags" / "trackstore.status"
    before = (meta.stat().st_mtime_ns, tag.stat().st_mtime_ns)
    time.sleep(0.05)
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, "--all", root=root).returncode == 0
    assert (meta.stat().st_mtime_ns, tag.stat().st_mtime_ns) == before


def test_corrupt_file_store_run_metadata_is_named_in_the_error(root, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    run = make_run(root, steps=5, keys=2, finish=False)
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    rid = remote_run(client_for(uri), "proj", run.id).info.run_id
    meta = next((tmp_path / "mlruns").glob(f"*/{rid}/meta.yaml"))
    meta.write_text("")  # what MLflow leaves when killed inside write_yaml
    run.log({"k0": 1.0}, step=99)
    run.flush()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "meta.yaml" in out and rid in out and "sqlite" in out
    assert "'NoneType' object" not in out


def test_remote_run_gone_for_good_is_replayed_whole_into_a_new_one(root, tmp_path):
    """The MLflow store was wiped (or the run purged by `mlflow gc`) after a sync: the next sync
    must not send only the points logged since into a fresh, partial run."""
    uri = mlflow_sqlite_uri(tmp_path)
    run = make_run(root, steps=10, keys=2, finish=False)
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    # the old run id from the cursor: a client in this process would keep the deleted file open
    (cursor,) = (root / "_sync").rglob("run=*.json")
    old = json.loads(cursor.read_text())["remote"]["run_id"]
    (tmp_path / "m.db").unlink()
    for s in range(10, 15):
        run.log({"k0": s + 0.5, "k1": s + 0.25}, step=s)
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    c = client_for(uri)
    r = remote_run(c, "proj", run.id)
    assert r.info.run_id != old and r.info.status == "FINISHED"
    assert points(c, r.info.run_id, ["k0", "k1"]) == local_points(run)
    assert "replayed the whole run" in res.stdout


def test_nan_values_roundtrip(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("proj", root=root)
    run.log({"x": float("nan")}, step=0)
    run.log({"x": 1.5}, step=1)
    run.finish()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    c = client_for(uri)
    hist = sorted(c.get_metric_history(remote_run(c, "proj", run.id).info.run_id, "x"), key=lambda m: m.step)
    assert math.isnan(hist[0].value) and hist[1].value == 1.5


def test_lock_held_exits_6(root, tmp_path):
    from trackstore.store import locks

    make_run(root, steps=2, keys=1)
    uri = mlflow_sqlite_uri(tmp_path)
    with locks.acquire(root, "sync-mlflow"):
        res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert res.returncode == 6, res.stderr
    assert "lock" in res.stderr.lower()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0


def test_stale_lock_from_killed_sync_is_taken_over(root, tmp_path):
    make_run(root, steps=2, keys=1)
    uri = mlflow_sqlite_uri(tmp_path)
    code = ("import sys, time; from trackstore.store import locks; l = locks.acquire(sys.argv[1], 'sync-mlflow'); "
            "print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 6
    p.kill()
    p.wait()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0


def test_unknown_target_is_usage_error(root):
    res = run_cli("sync", "--to", "nosuch", root=root)
    assert res.returncode == 2 and "unknown sync target" in res.stderr


def test_status_shows_pending(root, tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    run = make_run(root, steps=4, keys=2, finish=False)
    res = run_cli("status", "--format", "json", root=root)
    rows = json.loads(res.stdout)
    assert rows[0]["destination"] == "(never synced)" and rows[0]["pending_metrics"] == 8
    run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    run.log({"k0": 1.0}, step=99)
    run.flush()
    rows = json.loads(run_cli("status", "--format", "json", root=root).stdout)
    assert rows[0]["target"] == "mlflow" and rows[0]["pending_metrics"] == 1
    assert Path(uri[len("sqlite:///"):]).exists()

    # the table lists what needs syncing and counts the runs up to date in one line (--all lists them)
    done = make_run(root, project="done", steps=2, keys=1)
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, "--project", "done", root=root).returncode == 0
    table = run_cli("status", "--wide", root=root).stdout
    assert run.id in table and done.id not in table
    assert f"1 run up to date at mlflow {uri} (--all lists them)" in table
    every = run_cli("status", "--all", "--wide", root=root).stdout
    assert run.id in every and done.id in every and "up to date" not in every
    assert len(json.loads(run_cli("status", "--format", "json", root=root).stdout)) == 2  # machine formats: all


def _agent_run(root, n_traces=3, finish=True):
    run = trackstore.init("agent", root=root)
    for i in range(n_traces):
        with run.trace(step=2, sample_index=i, rollout_n=0) as tr:
            with tr.span("user", kind="other", inputs={"text": "what is 6*7?"}) as s:
                s.set_outputs("ok")
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "6*7"}]) as s:
                with tr.span("calculator", kind="tool", inputs={"expr": "6*7"}) as t:
                    t.set_outputs(42)
                s.set_outputs("The answer is 42")
            tr.set_reward(1.0)
    run.log({"reward": 1.0}, step=2)
    if finish:
        run.finish()
    return run


def test_traces_round_trip_and_never_duplicated(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = _agent_run(root)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--verify", "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["runs"][0]
    assert out["verify_ok"] is True and out["verified"]["traces"] == 3
    c = client_for(uri)
    exp = c.get_experiment_by_name("agent")
    rid = remote_run(c, "agent", run.id).info.run_id
    traces = c.search_traces(locations=[exp.experiment_id], run_id=rid)
    assert len(traces) == 3
    t = traces[0]
    names = {s.name: s for s in t.data.spans}
    assert set(names) == {"episode", "user", "assistant", "calculator"}
    assert names["calculator"].parent_id == names["assistant"].span_id
    assert names["assistant"].parent_id == names["episode"].span_id
    assert names["calculator"].inputs == {"expr": "6*7"} and names["calculator"].outputs == 42
    assert t.info.tags["trackstore.step"] == "2" and t.info.tags["trackstore.reward"] == "1.0"
    import pyarrow.parquet as pq

    local = {r["name"]: r for r in pq.read_table(run.dir / "spans").to_pylist() if r["trace_id"] == t.info.tags["trackstore.trace_id"]}
    assert names["calculator"].start_time_ns == local["calculator"]["start_ns"]
    assert names["calculator"].end_time_ns == local["calculator"]["end_ns"]
    # forget the cursor: the resend must find the traces by tag instead of creating copies
    import shutil

    shutil.rmtree(root / "_sync")
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    assert len(c.search_traces(locations=[exp.experiment_id])) == 3
    assert len(c.get_metric_history(rid, "reward")) == 1  # sqlite store: identical points deduplicated


def test_trajectory_without_a_root_span_waits_while_live_then_is_reported(root, tmp_path):
    """Killed mid-trajectory before its root span was written: while the run is live the
    trajectory waits; once the run has ended it is reported, not left pending for ever."""
    from tests.helpers import start_run_with_an_orphan_span
    from trackstore.sync.trajectories import NO_ROOT_SPAN

    uri = mlflow_sqlite_uri(tmp_path)
    p, run_id = start_run_with_an_orphan_span(root)

    def sync():
        res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["runs"][0]

    try:
        live = sync()
        assert live["status"] == "running" and live["skipped_by_reason"] == {}, live
    finally:
        p.kill()
        p.wait()
    out = sync()
    assert out["status"] == "crashed" and out["skipped_by_reason"] == {NO_ROOT_SPAN: 1}, out
    assert sync()["result"] == "up to date"
    c = client_for(uri)
    exp = c.get_experiment_by_name("proj")
    assert len(c.search_traces(locations=[exp.experiment_id], max_results=10)) == 1


def test_artifacts_uploaded_once(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"\x00" * 1000)
    (ckpt / "config.json").write_text('{"layers": 2}')
    run = trackstore.init("proj", root=root)
    run.log_artifact(ckpt, name="policy", type="model")
    run.log_artifact(ckpt, name="policy", type="model")  # same content: one version
    run.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    c = client_for(uri)
    rid = remote_run(c, "proj", run.id).info.run_id
    files = sorted(f.path for f in c.list_artifacts(rid, "trackstore/artifacts/policy/v0"))
    assert files == ["trackstore/artifacts/policy/v0/config.json", "trackstore/artifacts/policy/v0/model.safetensors"]
    sizes = {f.path: f.file_size for f in c.list_artifacts(rid, "trackstore/artifacts/policy/v0")}
    assert sizes["trackstore/artifacts/policy/v0/model.safetensors"] == 1000
    assert json.loads(run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root).stdout)["runs"][0]["artifacts"] == 0


def test_samples_as_table_artifacts(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("proj", root=root)
    run.log_samples([{"input": "你好", "output": "世界", "score": 0.5, "ground_truth": "x"}] * 3, step=4)
    run.finish()
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    c = client_for(uri)
    rid = remote_run(c, "proj", run.id).info.run_id
    [f] = c.list_artifacts(rid, "trackstore/samples/val")
    local = c.download_artifacts(rid, f.path, str(tmp_path / "dl"))
    table = json.loads(Path(local).read_text())
    cols = table["columns"]
    assert len(table["data"]) == 3 and table["data"][0][cols.index("input")] == "你好"


WRITER_CHILD = """
import sys, time, trackstore
run = trackstore.init("live", run_id=sys.argv[2], root=sys.argv[1], flush_interval=0.2)
for s in range(int(sys.argv[3])):
    run.log({"loss": 1.0 / (s + 1), "acc": s / 1000}, step=s)
    time.sleep(0.025)
run.finish()
"""


def test_live_run_synced_repeatedly_while_written(root, tmp_path):
    """A login node syncing a run that a compute node is still writing: every round sends only
    what is new, and the end state is exact with the final status."""
    uri = mlflow_sqlite_uri(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", WRITER_CHILD, str(root), "live-run-1", "300"])
    rounds = 0
    while writer.poll() is None and rounds < 15:
        res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
        assert res.returncode == 0, res.stderr
        rounds += 1
    writer.wait()
    assert writer.returncode == 0
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root).returncode == 0
    c = client_for(uri)
    r = remote_run(c, "live", "live-run-1")
    assert rounds >= 2
    assert len(c.get_metric_history(r.info.run_id, "loss")) == 300
    assert r.info.status == "FINISHED"


def test_watch_mode_follows_a_live_run(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("w", run_id="watched", root=root)
    run.log({"x": 1.0}, step=0)
    run.flush()
    watcher = subprocess.Popen([sys.executable, "-c", SYNC_CHILD, "sync", "--to", "mlflow", "--uri", uri, "--watch", "1",
                                "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        c = client_for(uri)
        while time.time() < deadline:
            try:
                if c.get_experiment_by_name("w") is not None and len(
                        c.get_metric_history(remote_run(c, "w", "watched").info.run_id, "x")) == 1:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        run.log({"x": 2.0}, step=1)
        run.finish()
        while time.time() < deadline:
            r = remote_run(c, "w", "watched")
            if len(c.get_metric_history(r.info.run_id, "x")) == 2 and r.info.status == "FINISHED":
                break
            time.sleep(0.5)
        else:
            watcher.send_signal(signal.SIGINT)
            out, err = watcher.communicate(timeout=30)
            pytest.fail(f"--watch did not pick up the new point and the final status:\n{out}\n{err}")
    finally:
        if watcher.poll() is None:
            watcher.send_signal(signal.SIGINT)
            watcher.wait(timeout=30)


def test_two_real_syncs_at_once_one_gets_the_lock(root, tmp_path, monkeypatch):
    """While one sync sends a run, a second sync of it skips it (exit 6, says so on stderr)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    make_run(root, steps=400, keys=5)
    first = spawn_cli("sync", "--to", "mlflow", "--uri", uri, "--batch-size", "10", "--root", root)
    try:
        def held():
            return list((root / "_locks").glob("sync-mlflow-run-*.lock")) if (root / "_locks").exists() else []

        deadline = time.time() + 60
        while not held() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert held(), "the first sync never took the run's lock"
        second = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
        assert second.returncode == 6 and "lock" in second.stderr.lower()
    finally:
        first.wait(timeout=300)
    assert first.returncode == 0


def test_selection_flags(root, tmp_path):
    uri = mlflow_sqlite_uri(tmp_path)
    a = make_run(root, project="a", steps=1, keys=1)
    live = make_run(root, project="b", steps=1, keys=1, finish=False)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--finished-only", "--dry-run", "--format", "json", root=root)
    assert [r["run_id"] for r in json.loads(res.stdout)["runs"]] == [a.id]
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--project", "b", "--dry-run", "--format", "json", root=root)
    assert [r["run_id"] for r in json.loads(res.stdout)["runs"]] == [live.id]
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--since", "1h", "--dry-run", "--format", "json", root=root)
    assert len(json.loads(res.stdout)["runs"]) == 2
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--since", "soon", root=root)
    assert res.returncode == 2 and "duration" in res.stderr


def test_progress_bar_on_a_terminal(root, tmp_path):
    """On a TTY the sync draws a rich progress bar (rows, rate); without one, plain lines."""
    uri = mlflow_sqlite_uri(tmp_path)
    make_run(root, steps=50, keys=4)
    code, text = cli_in_pty("sync", "--to", "mlflow", "--uri", uri, "--root", root, columns=120)
    assert code == 0, text
    assert "rows/s" in text and "200/200" in text


def test_watch_stops_on_sigterm_between_rounds(root, tmp_path):
    """systemd stops a --watch service with SIGTERM: it ends at once, with the last round's code."""
    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("w", run_id="term", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish()
    watcher = subprocess.Popen([sys.executable, "-c", SYNC_CHILD, "sync", "--to", "mlflow", "--uri", uri, "--watch", "30",
                                "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        line = watcher.stdout.readline()
        while line and not line.startswith("└"):  # the summary table's last line: now it sleeps 30 s
            line = watcher.stdout.readline()
        watcher.send_signal(signal.SIGTERM)
        try:
            out, err = watcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # say where it hangs, not just that it does
            watcher.send_signal(signal.SIGUSR1)
            time.sleep(2)
            os.killpg(watcher.pid, signal.SIGKILL)  # and whatever it started, which may hold its pipes
            _out, err = watcher.communicate(timeout=30)
            pytest.fail(f"--watch did not stop within 30 s of SIGTERM; its threads:\n{err[-6000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(watcher.pid, signal.SIGKILL)
    assert watcher.returncode == 0, err
    c = client_for(uri)
    assert [m.value for m in c.get_metric_history(remote_run(c, "w", "term").info.run_id, "x")] == [1.0]


def test_summary_says_where_to_see_the_runs_and_the_experiment_is_a_training_one(root, tmp_path):
    """After a sync, the summary names each experiment's runs list with
    ``workflowType=machine_learning`` (MLflow 3's UI otherwise opens the GenAI overview; the
    browser check is in tests/test_ui_platforms.py), for a store read in place after the
    ``mlflow ui`` command that serves it; the experiment trackstore creates has MLflow 3's kind
    of model training."""
    run = make_run(root, steps=2, keys=1)
    uri = mlflow_sqlite_uri(tmp_path)
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert res.returncode == 0, res.stderr + res.stdout
    exp = client_for(uri).get_experiment_by_name("proj")
    page = f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
    lines = res.stdout.splitlines()
    assert lines[-3:] == ["to see them in mlflow's UI, run and open:", f"  mlflow ui --backend-store-uri {uri}",
                          f"  {page}"], res.stdout
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    more = trackstore.init("proj", name="second", root=root)
    more.log({"loss": 1.0}, step=0)
    more.finish()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root)
    out = json.loads(res.stdout)
    assert out["view"] == [f"mlflow ui --backend-store-uri {uri}", page], out  # one experiment: said once
    assert [r["view"] for r in out["runs"] if r["run_id"] == more.id] == [out["view"]]
    assert run.id in {r["run_id"] for r in out["runs"]}
