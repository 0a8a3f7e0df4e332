"""``trackstore sql`` end to end: formats, output files, limits, parameters, read-only refusals."""

from __future__ import annotations

import csv
import io
import json
import os

import pyarrow.parquet as pq
import pytest

from tests.helpers import run_cli
from tests.query_fixtures import make_run

Q = "SELECT step, key, value FROM metrics WHERE key = 'loss' ORDER BY step"


@pytest.fixture
def store(root):
    make_run(root, "p", "a", steps=60)
    return root


def test_json_is_array_of_objects(store):
    res = run_cli("sql", Q, "-f", "json", root=store)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 60 and rows[1] == {"step": 1, "key": "loss", "value": 0.5}


def test_csv_jsonl_and_parquet_file(store, tmp_path):
    res = run_cli("sql", Q, "-f", "csv", root=store)
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == 60 and rows[3] == {"step": "3", "key": "loss", "value": "0.25"}
    res = run_cli("sql", Q, "--format", "jsonl", root=store)
    lines = res.stdout.splitlines()
    assert len(lines) == 60 and json.loads(lines[0]) == {"step": 0, "key": "loss", "value": 1.0}
    out = tmp_path / "out.parquet"
    res = run_cli("sql", Q, "-f", "parquet", "-o", str(out), root=store)
    assert res.returncode == 0, res.stderr
    t = pq.read_table(out)
    assert t.num_rows == 60 and t.schema.field("step").type == "int64"
    out_csv = tmp_path / "out.csv"
    assert run_cli("sql", Q, "-f", "csv", "-o", str(out_csv), root=store).stdout == ""
    assert out_csv.read_text().splitlines()[0] == "step,key,value"


def test_table_view_limit_shows_total(store):
    res = run_cli("sql", Q, "--limit", "5", root=store)
    assert res.returncode == 0, res.stderr
    assert "showing 5 of 60 rows" in res.stdout
    body = [line for line in res.stdout.splitlines() if "│ loss" in line]
    assert len(body) == 5
    full = run_cli("sql", Q, "-f", "csv", "--limit", "5", root=store)
    assert len(full.stdout.splitlines()) == 61  # other formats get every row


def test_params_are_bound_values(store):
    evil = "loss'; DROP VIEW metrics; --"
    res = run_cli("sql", "SELECT count(*) AS n, $k AS k FROM metrics WHERE key = $k", "-P", f"k={evil}",
                  "-f", "json", root=store)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"n": 0, "k": evil}]
    res = run_cli("sql", "SELECT count(*) AS n FROM metrics WHERE key = $k AND step >= $s",
                  "--param", "k=loss", "--param", "s=50", "-f", "json", root=store)
    assert json.loads(res.stdout) == [{"n": 10}]


def test_bad_param_syntax_is_usage_error(store):
    res = run_cli("sql", "SELECT 1", "-P", "no-equals-sign", root=store)
    assert res.returncode == 2 and "NAME=VALUE" in res.stderr


@pytest.mark.parametrize("sql", [
    "COPY (SELECT * FROM metrics) TO '{root}/project=p/stolen.parquet'",
    "ATTACH '{root}/x.duckdb' AS x",
    "CREATE TABLE t AS SELECT 1",
    "INSERT INTO runs SELECT * FROM runs",
    "INSTALL httpfs",
    "LOAD httpfs",
])
def test_writes_are_refused_with_exit_5(store, sql):
    def walk():  # the catalog left out: a cache every reading command may refresh (docs/format.md section 11)
        return sorted(w for w in os.walk(store) if "_catalog" not in w[0])

    run_cli("runs", root=store)  # the catalog exists before, as on any store that was read once
    before = walk()
    res = run_cli("sql", sql.format(root=store), root=store)
    assert res.returncode == 5, (res.stdout, res.stderr)
    assert "refused" in res.stderr and "read-only" in res.stderr and "Traceback" not in res.stderr
    assert walk() == before


def test_sql_error_clear_and_exit_5(store):
    res = run_cli("sql", "SELECT nope FROM metrics", root=store)
    assert res.returncode == 5
    assert res.stderr.startswith("error: SQL error:") and "nope" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("sql", "SELEC 1", root=store)
    assert res.returncode == 5 and "syntax" in res.stderr.lower()


def test_query_from_stdin(store):
    res = run_cli("sql", "-", "-f", "csv", root=store, input="SELECT count(*) AS n FROM runs")
    assert res.stdout.splitlines() == ["n", "1"]


def test_empty_store_views_answer(root):
    res = run_cli("sql", "SELECT count(*) AS n FROM samples", "-f", "json", root=root)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"n": 0}]


def test_the_runs_view_is_filled_only_for_a_query_that_names_it(store):
    """`trackstore sql` lists the store's runs only for a query that mentions `runs` (in any
    form: a name, a string, a comment); the others get the same answers without the listing."""
    import trackstore

    con = trackstore.connect(store, runs_view=False)
    full = trackstore.connect(store)
    try:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)  # its columns, no rows
        assert con.execute("DESCRIBE runs").fetchall() == full.execute("DESCRIBE runs").fetchall()
        for q in ("SELECT count(*), min(value), max(value), sum(step) FROM metrics",  # (a float sum varies with order)
                  "SELECT * FROM latest ORDER BY 1, 2, 3"):
            assert con.execute(q).fetchall() == full.execute(q).fetchall()
    finally:
        con.close()
        full.close()
    full_count = json.loads(run_cli("sql", "SELECT count(*) AS n FROM runs", "-f", "json", root=store).stdout)[0]["n"]
    assert full_count > 0
    for q in ("SELECT count(*) AS n FROM main.runs", "SELECT count(*) AS n FROM RUNS",
              "SELECT count(*) AS n FROM query_table('runs')", "SELECT count(*) AS n FROM \"runs\""):
        out = run_cli("sql", q, "-f", "json", root=store)
        assert out.returncode == 0, (q, out.stderr)
        assert json.loads(out.stdout)[0]["n"] == full_count, q
