"""The SQL views over a real store: columns, hive partitions, schema versions, live runs."""

from __future__ import annotations

import json
import os
import signal
import time

import pyarrow as pa
import pytest

import trackstore
from tests.helpers import python_child
from tests.query_fixtures import make_run, metric_rows, part
from trackstore.errors import QueryError
from trackstore.read.views import VIEWS, connect, query, run_sql, wide
from trackstore.store import schema


def columns(con, view):
    return [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]


def test_empty_store_has_every_view_with_schema_columns(root):
    con = connect(root)
    for kind, sch in schema.ROWS.items():  # the views show rows, not the latest index
        shown = [n for n in sch.names if not (kind == "artifacts" and n == "event")]  # files only: moves are artifact_aliases
        assert columns(con, kind) == ["project", "run_id", *shown], kind
        assert con.execute(f"SELECT count(*) FROM {kind}").fetchone() == (0,)
    assert columns(con, "runs")[:4] == ["project", "run_id", "name", "status"]
    assert set(columns(con, "sync_state")) >= {"target", "destination", "project", "run_id", "kind"}
    assert columns(con, "latest") == ["project", "run_id", "key", "step", "value", "ts"]
    for view in VIEWS:
        con.execute(f"SELECT * FROM {view}").fetchall()


def test_metrics_runs_latest_and_summary(root):
    a = make_run(root, "p", "a", steps=5, config={"lr": 0.1, "opt": {"beta": 0.9}}, tags=["base"])
    b = make_run(root, "q", "b", steps=3)
    con = connect(root)
    rows = con.execute("SELECT project, run_id, step, key, value FROM metrics WHERE key = 'loss' "
                       "ORDER BY project, step").fetchall()
    assert rows[0] == ("p", a.id, 0, "loss", 1.0) and len(rows) == 8
    assert {r[1] for r in rows} == {a.id, b.id}
    runs = {r["name"]: r for r in run_sql(con, "SELECT * FROM runs").to_pylist()}
    assert runs["a"]["status"] == "finished" and runs["a"]["tags"] == ["base"]
    assert con.execute("SELECT config->>'lr', config->'opt'->>'beta' FROM runs WHERE name = 'a'").fetchone() == ("0.1", "0.9")
    assert json.loads(runs["a"]["summary"])["reward"] == 0.4
    latest = dict(con.execute("SELECT key, value FROM latest WHERE run_id = $r", {"r": a.id}).fetchall())
    assert latest == {"loss": 1 / 5, "reward": 0.4}
    s = con.execute("SELECT points, first_step, last_step, min, max, last FROM metric_summary "
                    "WHERE run_id = $r AND key = 'reward'", {"r": b.id}).fetchone()
    assert s == (3, 0, 2, 0.0, 0.2, 0.2)


def test_latest_is_most_recently_logged_value(root):
    run = trackstore.init("p", root=root)
    run.log({"x": 1.0}, step=5)
    time.sleep(0.002)
    run.log({"x": 2.0}, step=5)  # logged again at the same step: the newer value wins
    run.finish()
    assert query("SELECT step, value FROM latest", root=root).to_pylist() == [{"step": 5, "value": 2.0}]


def test_runs_view_reports_crashed_run(root):
    code = ("import os, trackstore\n"
            f"r = trackstore.init('p', name='victim', root={str(root)!r}, flush_interval=0.2)\n"
            "r.log({'loss': 1.0}, step=1); r.flush(); print('ready', flush=True)\n"
            "import time; time.sleep(60)\n")
    child = python_child(code)
    assert child.stdout.readline().strip() == "ready"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    t = query("SELECT status, (SELECT count(*) FROM metrics) AS n FROM runs", root=root)
    assert t.to_pylist() == [{"status": "crashed", "n": 1}]


def test_live_run_visible_while_writer_logs(root):
    code = ("import sys, trackstore\n"
            f"r = trackstore.init('p', name='live', root={str(root)!r}, flush_interval=0.1)\n"
            "step = 0\n"
            "for line in sys.stdin:\n"
            "    for _ in range(int(line)):\n"
            "        r.log({'loss': float(step)}, step=step); step += 1\n"
            "    r.flush(); print(step, flush=True)\n")
    child = python_child(code, stdin=__import__("subprocess").PIPE)
    try:
        child.stdin.write("10\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "10"
        con = connect(root)  # one connection, kept open across the writer's next flush
        assert con.execute("SELECT count(*), max(step) FROM metrics").fetchone() == (10, 9)
        child.stdin.write("15\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "25"
        assert con.execute("SELECT count(*), max(step) FROM metrics").fetchone() == (25, 24)
        assert con.execute("SELECT status FROM runs").fetchone() == ("running",)
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_mixed_schema_versions_union_by_name(root):
    run = make_run(root, "p", "mix", steps=1)
    old = pa.schema([f for f in schema.SAMPLES if f.name != "json_fields"])  # as written before that column
    part(root, "p", run.id, "samples", [{"step": 1, "split": "val", "sample_index": 0, "input": "q", "output": "a",
                                         "score": 1.0, "extra": None}], schema_=old)
    newer = schema.SAMPLES.append(pa.field("judge", pa.string()))  # a column a newer version added
    part(root, "p", run.id, "samples", [{"step": 2, "split": "val", "sample_index": 0, "input": "q2", "output": "b",
                                         "score": 0.0, "json_fields": ["input"], "judge": "gpt"}],
         schema_=newer, writer="w2")
    con = connect(root)
    rows = con.execute("SELECT step, output, json_fields, judge FROM samples ORDER BY step").fetchall()
    assert rows == [(1, "a", None, None), (2, "b", ["input"], "gpt")]
    assert columns(con, "samples")[:2] == ["project", "run_id"]


def test_never_reads_temp_trash_quarantine_or_sync(root):
    run = make_run(root, "p", "keep", steps=2)
    mdir = run.dir / "metrics"
    (mdir / ".part-w9-000000000000.parquet.ab12.tmp").write_bytes(b"PAR1 half written")
    for hidden in ("_trash", "_quarantine", "_sync"):
        part(root / hidden, "p", "ghost", "metrics", metric_rows(3))
    assert query("SELECT count(*) AS n, count(DISTINCT run_id) AS r FROM metrics", root=root).to_pylist() == \
        [{"n": 4, "r": 1}]


def test_hive_columns_are_text_and_odd_names_work(root):
    for project in ("123", "it's [a] *test*"):
        run = trackstore.init(project, run_id="007", root=root)
        run.log({"x": 1.0}, step=0)
        run.finish()
    t = query("SELECT project, run_id FROM metrics ORDER BY project", root=root)
    assert t.schema.field("project").type == pa.string() and t.schema.field("run_id").type == pa.string()
    assert t.to_pylist() == [{"project": "123", "run_id": "007"}, {"project": "it's [a] *test*", "run_id": "007"}]


def test_spans_view_keeps_final_row_per_span(root):
    run = make_run(root, "p", "agent", steps=1)
    base = {"trace_id": "t1", "name": "assistant", "kind": "llm", "step": 3, "start_ns": 1}
    part(root, "p", run.id, "spans", [
        {**base, "span_id": "s1", "status": "unfinished"},
        {**base, "span_id": "s2", "status": "unfinished"},  # still open when the process died
        {**base, "span_id": "s1", "status": "ok", "end_ns": 9, "outputs": '"hi"'},
    ])
    rows = query("SELECT span_id, status, outputs FROM spans ORDER BY span_id", root=root).to_pylist()
    assert rows == [{"span_id": "s1", "status": "ok", "outputs": '"hi"'},
                    {"span_id": "s2", "status": "unfinished", "outputs": None}]


def test_histograms_and_artifacts_views(root):
    run = trackstore.init("p", root=root)
    run.log({"grad": trackstore.Histogram([1.0, 2.0, 2.5, 3.0])}, step=4)
    run.finish()
    part(root, "p", run.id, "artifacts", [{"name": "policy", "version": 0, "type": "model", "digest": "d",
                                           "path": "artifacts/policy/v0/m.bin", "logical_path": "m.bin",
                                           "size": 3, "sha256": "s", "aliases": ["latest"]}])
    h = query("SELECT key, step, count FROM histograms", root=root).to_pylist()
    assert h == [{"key": "grad", "step": 4, "count": 4}]
    a = query("SELECT name, version, size, aliases FROM artifacts", root=root).to_pylist()
    assert a == [{"name": "policy", "version": 0, "size": 3, "aliases": ["latest"]}]


def test_connect_limited_to_runs(root):
    a = make_run(root, "p", "a", steps=3)
    make_run(root, "p", "b", steps=4)
    con = connect(root, runs=[("p", a.id)])
    assert con.execute("SELECT DISTINCT run_id FROM metrics").fetchall() == [(a.id,)]
    assert con.execute("SELECT name FROM runs").fetchall() == [("a",)]


def test_wide_table_one_column_per_key(root):
    run = make_run(root, "p", "w", steps=3, metrics=lambda s: {"loss": float(s), 'odd "key"; DROP': -s})
    t = wide(run.id, root=root)
    assert t.column_names == ["step", "loss", 'odd "key"; DROP']
    assert t.to_pydict() == {"step": [0, 1, 2], "loss": [0.0, 1.0, 2.0], 'odd "key"; DROP': [0.0, -1.0, -2.0]}
    assert wide(run.id, keys=["loss"], root=root).column_names == ["step", "loss"]


def test_query_params_are_values_not_sql(root):
    make_run(root, "p", "a", steps=2)
    evil = "x'; DROP VIEW metrics; --"
    assert query("SELECT count(*) AS n FROM metrics WHERE key = $k", {"k": evil}, root=root).to_pylist() == [{"n": 0}]
    assert query("SELECT $k AS v", {"k": evil}, root=root).to_pylist() == [{"v": evil}]


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO 'x.csv'", "ATTACH 'x.db' AS x", "CREATE TABLE t AS SELECT 1", "INSERT INTO runs VALUES (1)",
    "INSTALL httpfs", "LOAD httpfs", "SET threads = 1", "SELECT 1; SELECT 2", "DROP VIEW metrics",
])
def test_query_refuses_writes(root, sql):
    with pytest.raises(QueryError, match="refused|one statement"):
        query(sql, root=root)
    assert sorted(os.listdir(root)) == []


def test_read_only_connection_cannot_touch_files_outside(root, tmp_path):
    con = connect(root)
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    import duckdb

    with pytest.raises(duckdb.Error):
        con.execute(f"SELECT * FROM read_text('{outside}')").fetchall()
    with pytest.raises(duckdb.Error):
        con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")
    assert not (tmp_path / "out.csv").exists()


def test_sql_error_is_query_error(root):
    with pytest.raises(QueryError, match="no_such_column"):
        query("SELECT no_such_column FROM metrics", root=root)


def test_kind_without_files_at_connect_becomes_visible(root):
    run = make_run(root, "p", "late", steps=1)
    con = connect(root)
    assert con.execute("SELECT count(*) FROM samples").fetchone() == (0,)
    part(root, "p", run.id, "samples", [{"step": 0, "split": "val", "sample_index": 0, "output": "late"}])
    assert con.execute("SELECT project, run_id, output FROM samples").fetchall() == [("p", run.id, "late")]


def test_part_with_older_schema_flushed_after_connect(root):
    """One schema at connect (fast path without union_by_name); an older-version part appears later."""
    run = make_run(root, "p", "a", steps=1)
    part(root, "p", run.id, "samples", [{"step": 0, "split": "val", "sample_index": 0, "output": "new",
                                         "json_fields": ["input"]}], writer="a-new")
    con = connect(root)
    old = pa.schema([f for f in schema.SAMPLES if f.name != "json_fields"])
    part(root, "p", run.id, "samples", [{"step": 1, "split": "val", "sample_index": 0, "output": "old"}],
         schema_=old, writer="b-old")
    rows = run_sql(con, "SELECT output, json_fields FROM samples ORDER BY step").to_pylist()
    assert rows == [{"output": "new", "json_fields": ["input"]}, {"output": "old", "json_fields": None}]


def test_run_deleted_after_connect_leaves_views_working(root):
    """Views bind files by name for speed; when every file a view globs is gone (gc deleted the
    run meanwhile) the connection falls back to the general form instead of failing."""
    import shutil

    run = make_run(root, "p", "gone", steps=3)
    con = connect(root, runs=[("p", run.id)])
    assert run_sql(con, "SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 6}]
    shutil.rmtree(run.dir)
    assert run_sql(con, "SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 0}]
    assert run_sql(con, "SELECT count(*) AS n FROM latest").to_pylist() == [{"n": 0}]


def test_sync_state_view_reads_the_ledger(root):
    from trackstore.store.ledger import Cursor, save_cursor
    from trackstore.store.ranges import RangeSet

    run = make_run(root, "p", "synced", steps=5)  # 10 metric rows, seq 0..9 of one writer
    writer = query("SELECT DISTINCT writer FROM metrics", root=root).column("writer")[0].as_py()
    acked = RangeSet()
    acked.add_range(writer, 0, 6)
    save_cursor(root, Cursor(target="mlflow", destination="http://127.0.0.1:5000", project="p",
                             run_id=run.id, acked={"metrics": acked}, synced_status="running"))
    rows = query("SELECT target, destination, acked_rows, pending_rows FROM sync_state WHERE kind = 'metrics'",
                 root=root).to_pylist()
    assert len(rows) == 1 and rows[0]["target"] == "mlflow"
    assert rows[0]["acked_rows"] + rows[0]["pending_rows"] == 10 and rows[0]["pending_rows"] > 0


def test_latest_breaks_same_microsecond_ties_by_log_order(root):
    run = make_run(root, "p", "tie", steps=1)
    same_ts = 1_764_000_000_000_000
    part(root, "p", run.id, "metrics", [{"step": 7, "key": "k", "value": v, "ts": same_ts} for v in (1.0, 2.0, 3.0)],
         writer="fast")
    con = connect(root)
    assert con.execute("SELECT step, value FROM latest WHERE key = 'k'").fetchall() == [(7, 3.0)]
    assert con.execute("SELECT first, last FROM metric_summary WHERE key = 'k'").fetchall() == [(1.0, 3.0)]


def test_views_limited_to_some_runs_hold_only_their_sync_state(tmp_path):
    """``connect(runs=...)`` limits every view to those runs, sync_state included (it listed
    every run's cursors before)."""
    import trackstore
    from trackstore.store.ledger import Cursor, save_cursor
    from trackstore.store.ranges import RangeSet

    root = tmp_path / "runs"
    ids = []
    for i in range(3):
        run = trackstore.init("p" if i < 2 else "q", root=root)
        run.log({"a": float(i)}, step=0)
        run.finish()
        writer = next(run.paths.writers_dir.glob("*.json")).stem
        for dest in ("sqlite:///one.db", "sqlite:///two.db"):
            save_cursor(root, Cursor("mlflow", dest, run.project, run.run_id, acked={"metrics": RangeSet({writer: [[0, 0]]})},
                                     remote={"run_id": f"r{i}"}))
        ids.append((run.project, run.run_id))
    full = trackstore.connect(root)
    try:
        for some in ([ids[0]], [ids[0], ids[2]]):
            con = trackstore.connect(root, runs=some)
            try:
                q = "SELECT * FROM sync_state ORDER BY ALL"
                got = con.execute(q).fetchall()
                assert got and {(r[2], r[3]) for r in got} == set(some)
                want = [r for r in full.execute(q).fetchall() if (r[2], r[3]) in set(some)]
                assert got == want
            finally:
                con.close()
    finally:
        full.close()
