"""`trackstore ingest --from mlflow` (trackstore.sync.ingest.mlflow) against real MLflow stores
written by MLflow's own client: a sqlite database, a file store (``mlruns``) and a real
``mlflow server``. Every point, step, timestamp (to MLflow's millisecond), param, table row,
span and status is compared with what MLflow's own reader returns (``get_metric_history``,
``get_run``, ``search_traces``, ``load_table``), not with what was logged. Then: a second ingest
adds nothing, points logged since come in alone, a locked database is named at once, and an
unreadable metric history costs its key (sqlite) or its run (file store), named."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
from pathlib import Path

import pytest

import trackstore
from tests.helpers import mlflow_template_db, run_cli
from trackstore.errors import LockHeldError, TargetUnreachableError, UsageError
from trackstore.sync.ingest import discover, ingest_mlflow

mlflow = pytest.importorskip("mlflow")
np = pytest.importorskip("numpy")
pytest.importorskip("pandas")
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

T0 = 1_700_000_000_000  # ms


# ---------------------------------------------------------------------------- making sources
@contextlib.contextmanager
def tracking(uri: str):
    """MLflow's fluent tracking URI pointed at ``uri`` while traces and tables are made and read
    back (MLflow exports traces and loads tables through it), then reset."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [n for n in os.environ if n.startswith("MLFLOW_")]:
            mp.delenv(name)
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
        if uri.startswith("file:"):
            mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_tracking_uri(uri)
        try:
            yield MlflowClient(tracking_uri=uri)
        finally:
            mlflow.set_tracking_uri(None)


def sqlite_uri(folder: Path) -> str:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mlflow_template_db(), folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def log_points(c: MlflowClient, rid: str, steps: range, keys=("loss", "reward")) -> None:
    metrics = [Metric(k, s / 7 + i, T0 + s * 10 + i, s) for s in steps for i, k in enumerate(keys)]
    for i in range(0, len(metrics), 1000):
        c.log_batch(rid, metrics=metrics[i:i + 1000])


def log_trace(c: MlflowClient, exp: str, rid: str, name: str, *, fail: bool = False, step: int | None = None) -> None:
    tags = {"trackstore.step": str(step)} if step is not None else None
    root = c.start_trace(name, span_type="AGENT", inputs={"q": name}, experiment_id=exp, run_id=rid, tags=tags)
    child = c.start_span("llm", trace_id=root.trace_id, parent_id=root.span_id, span_type="LLM",
                         inputs=[{"role": "user", "content": name}], attributes={"model": "m1"})
    c.end_span(root.trace_id, child.span_id, outputs="an answer", status="ERROR" if fail else "OK")
    c.end_trace(root.trace_id, outputs={"a": 1})


def rich_run(c: MlflowClient, exp: str, tmp: Path) -> str:
    """A finished run holding every kind of record MLflow has."""
    rid = c.create_run(exp, run_name="grpo-1", tags={"team": "rl", "mlflow.note.content": "first try"},
                       start_time=T0).info.run_id
    log_points(c, rid, range(40))
    c.log_batch(rid, metrics=[Metric("odd", math.nan, T0, 0), Metric("odd", math.inf, T0 + 1, 1),
                              Metric("odd", -2.5, T0 + 2, 2)],
                params=[Param("lr", "1e-06"), Param("actor/optim/warmup", "None")])
    c.log_image(rid, np.zeros((4, 4, 3), dtype=np.uint8), key="frame", step=1)
    c.log_image(rid, np.zeros((4, 4, 3), dtype=np.uint8), key="frame", step=2)
    c.log_text(rid, "a note", "notes/readme.txt")
    c.log_dict(rid, {"layers": 2}, "config.json")
    c.log_table(rid, {"prompt": ["1+1", "2+2"], "answer": ["two", "four"], "score": [1.0, 0.5]}, "eval_table.json")
    model_dir = tmp / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "MLmodel").write_text("flavors: {}\n")
    (model_dir / "weights.bin").write_bytes(b"w" * 100)
    model = c.create_logged_model(exp, name="policy", source_run_id=rid)
    c.log_model_artifacts(model.model_id, str(model_dir))
    log_trace(c, exp, rid, "episode-0", step=3)
    log_trace(c, exp, rid, "episode-1", fail=True)
    with mlflow.start_run(run_id=rid):
        mlflow.log_input(mlflow.data.from_numpy(np.zeros((3, 2)), name="train"), context="training")
    c.set_terminated(rid, "FINISHED", end_time=T0 + 60_000)
    return rid


@pytest.fixture(scope="module")
def sqlite_src(tmp_path_factory):
    """A sqlite store: experiment ``rl/grpo`` (no valid project name) with a rich finished run,
    a killed run, a run still running, and nested runs."""
    tmp = tmp_path_factory.mktemp("mlflow-sqlite")
    uri = sqlite_uri(tmp)
    with tracking(uri) as c:
        exp = c.create_experiment("rl/grpo", artifact_location=str(tmp / "artifacts"))
        rich = rich_run(c, exp, tmp)
        killed = c.create_run(exp, run_name="killed", start_time=T0).info.run_id
        log_points(c, killed, range(5))
        c.set_terminated(killed, "KILLED", end_time=T0 + 1000)
        live = c.create_run(exp, run_name="live", start_time=T0).info.run_id
        log_points(c, live, range(3))
        child = c.create_run(exp, run_name="child", tags={"mlflow.parentRunId": rich}).info.run_id
        c.set_terminated(child, "FAILED")
    return {"uri": uri, "tmp": tmp, "exp": exp, "rich": rich, "killed": killed, "live": live, "child": child}


# ---------------------------------------------------------------------------- reading back
def con(root):
    return trackstore.connect(root)


def nan_safe(rows):
    return sorted(tuple("NaN" if isinstance(v, float) and v != v else v for v in r) for r in rows)


def oracle_points(c: MlflowClient, rid: str) -> list:
    """(key, step, ts in µs, value) of every point, as MLflow's get_metric_history returns them."""
    return nan_safe((k, m.step, m.timestamp * 1000, m.value)
                    for k in c.get_run(rid).data.metrics for m in c.get_metric_history(rid, k))


def stored_points(root, rid: str) -> list:
    return nan_safe(con(root).sql("SELECT key, step, epoch_us(ts), value FROM metrics WHERE run_id = ?",
                                  params=[f"mlflow-{rid}"]).fetchall())


def oracle_spans(c: MlflowClient, exp: str, rid: str) -> list:
    out = []
    for t in c.search_traces(locations=[exp], run_id=rid):
        for s in t.data.spans:
            out.append((t.info.trace_id, s.span_id, s.parent_id, s.name, s.start_time_ns, s.end_time_ns,
                        "error" if s.status.status_code == "ERROR" else "ok", s.inputs, s.outputs))
    return sorted(out, key=repr)


def stored_spans(root, rid: str) -> list:
    rows = con(root).sql("SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, status, inputs, outputs "
                         "FROM spans WHERE run_id = ?", params=[f"mlflow-{rid}"]).fetchall()
    return sorted(((*r[:7], json.loads(r[7]) if r[7] else None, json.loads(r[8]) if r[8] else None) for r in rows),
                  key=repr)


def run_json(root, project: str, rid: str) -> dict:
    return json.loads((root / f"project={project}" / f"run=mlflow-{rid}" / "run.json").read_text())


def iso_ms(text: str) -> int:
    from datetime import datetime

    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# ---------------------------------------------------------------------------- sqlite
def test_a_sqlite_store_round_trips_against_mlflows_own_reader(sqlite_src, root):
    uri, exp, rid = sqlite_src["uri"], sqlite_src["exp"], sqlite_src["rich"]
    found = {f.source_id: f for f in discover("mlflow", [uri])}
    assert set(found) == {sqlite_src[k] for k in ("rich", "killed", "live", "child")}
    assert found[rid].label == "rl/grpo/grpo-1" and found[rid].location == uri and found[rid].size == 3
    report = ingest_mlflow(uri, root=root)
    assert not report.failed and all(not r.problems for r in report.results), report
    res = {r.source_id: r for r in report.results}[rid]
    assert res.project == "rl_grpo" and res.run_id == f"mlflow-{rid}"
    assert res.unmapped == {"image": 2}
    with tracking(uri) as c:
        run = c.get_run(rid)
        assert stored_points(root, rid) == oracle_points(c, rid) and len(oracle_points(c, rid)) == 83
        assert stored_spans(root, rid) == oracle_spans(c, exp, rid) and res.added["spans"] == 4
        table = c.load_table(exp, "eval_table.json", run_ids=[rid])
        artifacts = {a.path: a for a in c.list_artifacts(rid)}
        statuses = {k: c.get_run(sqlite_src[k]).info.status for k in ("killed", "live", "child")}
    meta = run_json(root, "rl_grpo", rid)
    assert meta["name"] == run.info.run_name == "grpo-1" and meta["status"] == "finished"
    assert meta["config"] == run.data.params and meta["notes"] == "first try" and meta["tags"] == ["team=rl"]
    assert iso_ms(meta["created_at"]) == run.info.start_time and iso_ms(meta["ended_at"]) == run.info.end_time
    assert meta["summary"]["loss"] == run.data.metrics["loss"]
    origin = meta["ingested"]
    assert origin["source"] == "mlflow" and origin["location"] == uri
    assert origin["meta"]["experiment_name"] == "rl/grpo" and origin["meta"]["datasets"][0]["name"] == "train"
    assert origin["meta"]["models"][0]["name"] == "policy" and origin["unmapped"] == {"image": 2}
    # table rows are samples, compared with MLflow's load_table
    samples = con(root).sql("SELECT split, sample_index, input, output, score FROM samples ORDER BY sample_index")
    assert samples.fetchall() == [("eval_table", i, p, a, s) for i, (p, a, s) in
                                  enumerate(zip(table["prompt"], table["answer"], table["score"]))]
    # the local artifacts (not the images, not the table) and the logged model, by content
    arts = dict(con(root).sql("SELECT name, sum(size) FROM artifacts GROUP BY name").fetchall())
    assert artifacts["notes"].is_dir and "images" in artifacts and "eval_table.json" in artifacts
    assert arts == {"notes": len("a note"), "config.json": artifacts["config.json"].file_size,
                    "policy": 100 + len("flavors: {}\n")}
    # spans: the store's kinds, the error text, the step of a trace that says it
    rows = con(root).sql("SELECT name, kind, step, status, attributes FROM spans ORDER BY start_ns").fetchall()
    assert [(n, k, s, st) for n, k, s, st, _ in rows] == [("episode-0", "agent", 3, "ok"), ("llm", "llm", 3, "ok"),
                                                        ("episode-1", "agent", None, "ok"),
                                                        ("llm", "llm", None, "error")]
    assert json.loads(rows[1][4])["model"] == "m1" and json.loads(rows[1][4])["mlflow.spanType"] == "LLM"
    # statuses: KILLED -> crashed, RUNNING -> running (its heartbeat the latest point), FAILED -> failed
    assert statuses == {"killed": "KILLED", "live": "RUNNING", "child": "FAILED"}
    live = run_json(root, "rl_grpo", sqlite_src["live"])
    assert live["status"] == "running" and iso_ms(live["heartbeat_at"]) == T0 + 2 * 10 + 1
    assert run_json(root, "rl_grpo", sqlite_src["killed"])["status"] == "crashed"
    child = run_json(root, "rl_grpo", sqlite_src["child"])
    assert child["status"] == "failed" and child["group"] == rid
    runs = dict(con(root).sql("SELECT run_id, status FROM runs").fetchall())
    assert runs[f"mlflow-{sqlite_src['killed']}"] == "crashed"


def test_again_adds_nothing_and_points_logged_since_come_alone(sqlite_src, root):
    uri, rid = sqlite_src["uri"], sqlite_src["live"]
    first = ingest_mlflow(uri, root=root)
    assert all(r.created for r in first.results)
    again = ingest_mlflow(uri, root=root)
    assert [r.added for r in again.results] == [dict.fromkeys(("metrics", "samples", "spans", "histograms"), 0)] * 4
    assert not any(r.changed for r in again.results)
    with tracking(uri) as c:
        log_points(c, rid, range(3, 8))
        log_trace(c, sqlite_src["exp"], rid, "later")
        c.set_terminated(rid, "FINISHED")
        want = oracle_points(c, rid)
    grown = {r.source_id: r for r in ingest_mlflow(uri, root=root).results}
    assert grown[rid].added == {"metrics": 10, "samples": 0, "spans": 2, "histograms": 0}
    assert all(not r.changed for k, r in grown.items() if k != rid)
    assert stored_points(root, rid) == want
    assert run_json(root, "rl_grpo", rid)["status"] == "finished"


def test_a_locked_database_is_named_at_once_not_waited_for(sqlite_src, root):
    uri, db = sqlite_src["uri"], str(sqlite_src["tmp"] / "mlflow.db")
    found = discover("mlflow", [uri])
    holder = sqlite3.connect(db, timeout=0.1)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        out = run_cli("ingest", "--from", "mlflow", uri, root=root, timeout=60)
        assert out.returncode == 6 and "locked by another process" in out.stderr and db in out.stderr, out.stderr
        from trackstore.sync.ingest import mlflow as source

        with pytest.raises(LockHeldError, match=db.replace(".", r"\.")):  # locked between discover and read
            source.read(found[0])
        assert time.monotonic() - started < 15
    finally:
        holder.rollback()
        holder.close()
    assert not ingest_mlflow(uri, root=root).failed


def test_an_unreadable_metric_row_costs_its_key_only(tmp_path, root):
    uri = sqlite_uri(tmp_path / "src")
    with tracking(uri) as c:
        exp = c.create_experiment("damaged", artifact_location=str(tmp_path / "art"))
        rid = c.create_run(exp, run_name="r").info.run_id
        log_points(c, rid, range(10), keys=("good", "bad"))
        c.set_terminated(rid, "FINISHED")
    with sqlite3.connect(tmp_path / "src" / "mlflow.db") as db:  # a value no float can be made of
        db.execute("UPDATE metrics SET value = 'garbage' WHERE key = 'bad' AND step = 4")
    report = ingest_mlflow(uri, root=root)
    [res] = report.results
    assert res.added["metrics"] == 10
    assert any("'bad'" in p and str(tmp_path / "src" / "mlflow.db") in p for p in res.problems), res.problems
    with tracking(uri) as c:
        want = [p for p in oracle_points(c, rid) if p[0] == "good"]
    assert stored_points(root, rid) == want


# ---------------------------------------------------------------------------- file store
def test_a_file_store_round_trips_and_a_damaged_metric_file_costs_its_run(tmp_path, root):
    folder = tmp_path / "project"
    uri = (folder / "mlruns").as_uri()
    with tracking(uri) as c:
        exp = c.create_experiment("fs-exp")
        rids = []
        for name in ("a", "b"):
            rid = c.create_run(exp, run_name=name, start_time=T0).info.run_id
            log_points(c, rid, range(20))
            c.log_batch(rid, params=[Param("seed", name)], tags=[RunTag("kind", "fs")])
            c.log_text(rid, "x", "out.txt")
            log_trace(c, exp, rid, f"t-{name}")
            c.set_terminated(rid, "FINISHED", end_time=T0 + 5000)
            rids.append(rid)
        want = {rid: oracle_points(c, rid) for rid in rids}
        spans = {rid: oracle_spans(c, exp, rid) for rid in rids}
    report = ingest_mlflow(str(folder), root=root)  # a folder holding mlruns/
    assert not report.failed and all(not r.problems for r in report.results)
    for rid in rids:
        assert stored_points(root, rid) == want[rid] and len(want[rid]) == 40
        assert stored_spans(root, rid) == spans[rid]
        meta = run_json(root, "fs-exp", rid)
        assert meta["config"]["seed"] in ("a", "b") and meta["tags"] == ["kind=fs"]
        assert meta["ingested"]["location"] == uri
    assert dict(con(root).sql("SELECT name, count(*) FROM artifacts GROUP BY name").fetchall()) == {"out.txt": 2}
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    # one run's metric file damaged: MLflow cannot read that run (nor list the experiment);
    # the other run is still ingested and the damaged one is named with its file
    metric_file = folder / "mlruns" / exp / rids[0] / "metrics" / "loss"
    with open(metric_file, "a") as f:
        f.write("garbage line\n")
    report = ingest_mlflow(uri, root=tmp_path / "other")
    assert [r.source_id for r in report.results] == [rids[1]]
    [(failed, why)] = report.failed
    assert failed.source_id == rids[0] and str(metric_file) in why


# ---------------------------------------------------------------------------- server
@pytest.mark.xdist_group("mlflow_server")  # the session's server, shared with the modules using it (--dist loadgroup)
def test_a_tracking_server_round_trips_over_rest(mlflow_server, mlflow_experiment_name, root, tmp_path):
    with tracking(mlflow_server.url) as c:
        exp = c.create_experiment(mlflow_experiment_name)
        rid = c.create_run(exp, run_name="remote", start_time=T0).info.run_id
        log_points(c, rid, range(30), keys=("loss", "nested/kl"))
        c.log_batch(rid, params=[Param("lr", "0.01")])
        c.log_text(rid, "hello", "out/hello.txt")
        c.log_table(rid, {"input": ["q"], "output": ["a"]}, "tbl.json")
        log_trace(c, exp, rid, "remote-episode")
        c.set_terminated(rid, "FINISHED")
        want, spans, run = oracle_points(c, rid), oracle_spans(c, exp, rid), c.get_run(rid)
    found = [f for f in discover("mlflow", [mlflow_server.url + "/"]) if f.source_id == rid]
    assert [f.location for f in found] == [mlflow_server.url]
    report = ingest_mlflow(mlflow_server.url, root=root, project="remote")
    [res] = [r for r in report.results if r.source_id == rid]
    assert not res.problems and res.unmapped == {"remote artifact": 1}  # out/: not downloaded
    assert stored_points(root, rid) == want and len(want) == 60
    assert stored_spans(root, rid) == spans
    assert con(root).sql("SELECT input, output, split FROM samples WHERE run_id = ?",
                         params=[f"mlflow-{rid}"]).fetchall() == [("q", "a", "tbl")]
    meta = run_json(root, "remote", rid)
    assert meta["config"] == run.data.params and meta["status"] == "finished"


# ---------------------------------------------------------------------------- locations
def test_locations_missing_empty_foreign_and_unreachable(tmp_path):
    from tests.servers import free_port
    from trackstore.sync.ingest import mlflow as source

    with pytest.raises(UsageError, match="nowhere"):
        source.discover(str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match="gone.db"):
        source.discover(f"sqlite:///{tmp_path / 'gone.db'}")
    (tmp_path / "empty").mkdir()
    assert source.discover(str(tmp_path / "empty")) == []
    assert not any((tmp_path / "empty").iterdir())  # nothing created there
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert source.discover(str(other)) == [] and source.discover(f"sqlite:///{other}") == []
    (tmp_path / "notes.txt").write_text("not a database")
    assert source.discover(str(tmp_path / "notes.txt")) == []
    # MLflow 3's default: mlflow.db in the folder a script ran in (artifacts in its mlruns/)
    uri = sqlite_uri(tmp_path / "project")
    with tracking(uri) as c:
        rid = c.create_run(c.create_experiment("p", artifact_location=str(tmp_path / "project" / "mlruns")),
                           run_name="r").info.run_id
    [found] = source.discover(str(tmp_path / "project"))
    assert found.source_id == rid and found.location == uri and found.label == "p/r"
    started = time.monotonic()
    with pytest.raises(TargetUnreachableError, match="unreachable"):
        source.discover(f"http://127.0.0.1:{free_port()}")
    assert time.monotonic() - started < 15


def test_experiment_names_become_valid_projects():
    from trackstore.sync.ingest.mlflow import project_name

    assert project_name("Default") == "Default" and project_name("强化学习") == "强化学习"
    assert project_name("team/rl=1%") == "team_rl_1_" and project_name(".hidden") == "hidden"
    assert project_name("/") == "_" and project_name("x" * 300) == "x" * 128
