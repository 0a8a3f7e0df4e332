"""Spark reads a team store replica (`trackstore sync --to store`) on a shared path the way
docs/team-store readers are told to, and gets the same counts and aggregates per run and key as
DuckDB over the source store: no row missing or counted twice, `project` and `run` strings
(a project named `123` stays '123'), timestamps readable as Spark timestamps.

Spark runs in local mode in its own venv (`make test-spark`); elsewhere the module is skipped."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (run `make test-spark`)")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import StringType, TimestampType  # noqa: E402

import trackstore  # noqa: E402

# Two projects, one named like a number (a reader inferring partition types would make it 123),
# the other with a space and characters beyond ASCII.
PROJECTS = ("123", "grpo 数学")
RUNS_PER_PROJECT = 2
STEPS = 40
FLUSH_EVERY = 10  # steps per flushed part: several parts per writer before compaction


def _cli(*args: str, root: Path) -> subprocess.CompletedProcess:
    """The real `trackstore` command (as `python -m`), failing the test with its output."""
    done = subprocess.run([sys.executable, "-m", "trackstore.cli.main", *args, "--root", str(root)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"trackstore {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _log_steps(run: trackstore.Run, steps: range, salt: int) -> None:
    """Keys of every shape a training run logs: nested with '/', one per run, NaN and infinities."""
    for step in steps:
        run.log({
            "loss": 1.0 / (step + 1) + salt,
            "actor/pg_loss": step * 0.25 - salt,
            "critic/score/mean": (step * 7 + salt) % 11 / 3.0,
            "val-core/gsm8k/acc/mean@4": step / STEPS,
            f"per_run/r{salt}": float(step * salt),
            "timing_s/gen": 1e-9 * step if step % 3 else 1e12,
            "edge/nan_inf": math.nan if step % 13 == 5 else (math.inf if step == 17 else -step),
        }, step=step)
        if step % FLUSH_EVERY == FLUSH_EVERY - 1:
            run.flush()


def _build_source(root: Path) -> dict[str, list[str]]:
    """The source store: runs in two projects, written with merging off so flushes stay parts;
    one run resumed (two writers). Returns the run ids per project."""
    ids: dict[str, list[str]] = {}
    salt = 0
    for project in PROJECTS:
        for _ in range(RUNS_PER_PROJECT):
            salt += 1
            run = trackstore.init(project=project, root=root, compact=False, config={"salt": salt})
            ids.setdefault(project, []).append(run.run_id)
            _log_steps(run, range(STEPS), salt)
            run.log_samples([("2+2?", "4", 1.0), ("3+3?", "5", 0.0)], step=10)
            run.log_samples([{"input": "写一首诗", "output": "床前明月光", "score": math.nan, "ground_truth": "?"}]
                            * salt, step=20, split="rollout")
            run.finish()
    resumed = trackstore.init(project=PROJECTS[0], root=root, run_id=ids[PROJECTS[0]][0], resume=True,
                              compact=False)
    _log_steps(resumed, range(STEPS, STEPS + 15), 9)
    resumed.log_samples([("again?", "yes")], step=STEPS + 5, split="val")
    resumed.finish()
    return ids


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path, dict[str, list[str]]]:
    """(source root, replica path, run ids per project). One run is compacted before the sync and
    two after it (the resumed one among them), so the source's parts no longer match the replica's."""
    base = tmp_path_factory.mktemp("team")
    source, replica = base / "source", base / "shared" / "team"
    source.mkdir()
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith("TRACKSTORE_")]:
            env.delenv(name)
        env.setenv("TRACKSTORE_DISABLE_GIT", "1")
        env.setenv("TRACKSTORE_SYSTEM_METRICS", "0")  # the keys are counted below: only what the runs log
        ids = _build_source(source)
        _cli("compact", ids[PROJECTS[1]][0], root=source)
        _cli("sync", "--to", "store", "--uri", str(replica), root=source)
        _cli("compact", ids[PROJECTS[0]][0], ids[PROJECTS[1]][1], root=source)
    return source, replica, ids


@pytest.fixture(scope="module")
def spark():
    """One small local Spark for the module (its start costs about 9 s)."""
    session = (SparkSession.builder.master("local[1]").appName("trackstore-replica")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "512m")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _read(spark, replica: Path, kind: str, project: str = "*"):
    """One kind of the replica, as readers of a replica are told to: a glob per kind, `basePath`
    for the hive partitions (the root holds non-Parquet files), `mergeSchema` for old parts."""
    return (spark.read.option("basePath", str(replica)).option("mergeSchema", "true")
            .parquet(f"{replica}/project={project}/run=*/{kind}/*.parquet"))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _differences(expected: dict, got: dict) -> list[str]:
    out = [f"missing in Spark: {k}" for k in sorted(expected.keys() - got.keys())]
    out += [f"only in Spark: {k}" for k in sorted(got.keys() - expected.keys())]
    for k in sorted(expected.keys() & got.keys()):
        if len(expected[k]) != len(got[k]) or not all(map(_same, expected[k], got[k])):
            out.append(f"{k}: DuckDB {expected[k]} != Spark {got[k]}")
    return out


METRIC_AGGREGATES = ("count(*)", "sum(value)", "min(value)", "max(value)", "min(step)", "max(step)",
                     "min(ts)", "max(ts)")


def test_metrics_per_run_and_key_equal_duckdb_over_the_source(stores, spark):
    source, replica, ids = stores
    duck = trackstore.query(
        "SELECT project, run_id, key, count(*), sum(value), min(value), max(value), min(step), max(step), "
        "epoch_us(min(ts)), epoch_us(max(ts)) FROM metrics GROUP BY ALL", root=source)
    expected = {tuple(r[:3]): tuple(r[3:]) for r in (tuple(row.values()) for row in duck.to_pylist())}
    rows = (_read(spark, replica, "metrics").groupBy("project", "run", "key")
            .agg(F.count("*"), F.sum("value"), F.min("value"), F.max("value"), F.min("step"), F.max("step"),
                 F.unix_micros(F.min("ts")), F.unix_micros(F.max("ts")))
            .collect())
    got = {tuple(r[:3]): tuple(r[3:]) for r in rows}
    assert len(expected) == len(PROJECTS) * RUNS_PER_PROJECT * 7 + 1  # 6 shared keys + 1 per run, r9 resumed
    differences = _differences(expected, got)
    assert not differences, "\n".join(differences)
    assert sum(v[0] for v in got.values()) == (len(PROJECTS) * RUNS_PER_PROJECT * STEPS + 15) * 7


def test_no_row_is_in_the_replica_twice_and_the_resumed_run_has_both_writers(stores, spark):
    source, replica, ids = stores
    metrics = _read(spark, replica, "metrics")
    assert metrics.groupBy("project", "run", "writer", "seq").count().where("count > 1").count() == 0
    writers = {(r["project"], r["run"]): r["writers"]
               for r in metrics.groupBy("project", "run").agg(F.countDistinct("writer").alias("writers")).collect()}
    resumed = (PROJECTS[0], ids[PROJECTS[0]][0])
    assert writers == {(p, i): 2 if (p, i) == resumed else 1 for p, run_ids in ids.items() for i in run_ids}


def test_samples_per_run_equal_duckdb_over_the_source(stores, spark):
    source, replica, ids = stores
    duck = trackstore.query("SELECT project, run_id, split, count(*) AS n FROM samples GROUP BY ALL", root=source)
    expected = {(r["project"], r["run_id"], r["split"]): r["n"] for r in duck.to_pylist()}
    got = {(r["project"], r["run"], r["split"]): r["count"]
           for r in _read(spark, replica, "samples").groupBy("project", "run", "split").count().collect()}
    assert got == expected
    assert len({(p, r) for p, r, _ in got}) == len(PROJECTS) * RUNS_PER_PROJECT


def test_partitions_are_strings_and_ts_a_utc_timestamp(stores, spark):
    source, replica, ids = stores
    metrics = _read(spark, replica, "metrics")
    types = {f.name: f.dataType for f in metrics.schema.fields}
    assert isinstance(types["project"], StringType) and isinstance(types["run"], StringType)
    assert type(types["ts"]) is TimestampType  # an instant (timestamp[us, UTC]), not TimestampNTZ
    projects = {r["project"] for r in metrics.select("project").distinct().collect()}
    assert projects == set(PROJECTS)
    assert all(type(p) is str for p in projects)
    # read alone, its folders are all `project=123`: only a reader told not to infer keeps it text
    numeric = _read(spark, replica, "metrics", project="123").select("project").distinct().collect()
    assert [(r["project"], type(r["project"])) for r in numeric] == [("123", str)]
    # the wall times are those of the logging: within the test's own lifetime, formatted in UTC
    first = metrics.select(F.date_format(F.min("ts"), "yyyy-MM-dd'T'HH:mm:ss").alias("t")).first()["t"]
    duck_first = trackstore.query("SELECT strftime(min(ts) AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S') FROM metrics",
                                  root=source).column(0)[0].as_py()
    assert first == duck_first


def test_the_guides_spark_recipe_runs_as_written(stores, spark):
    """docs/team-store.md's Spark recipe, as a user pastes it, over this replica (in this
    process: its `getOrCreate` finds the module's session, so no second JVM starts): its
    per-key maxima equal DuckDB's over the source."""
    from tests.test_docs_examples import parse

    guide = Path(__file__).resolve().parents[2] / "docs" / "team-store.md"
    [code] = [e.code for e in parse(guide)[0] if e.not_run and "tests/spark/" in e.not_run]
    source, replica, _ = stores
    assert '"/shared/team"' in code and '.max("step").show()' in code
    namespace: dict = {}
    exec(compile(code.replace('"/shared/team"', repr(str(replica))).replace('.max("step").show()', '.max("step")'),
                 str(guide), "exec"), namespace)
    rows = namespace["metrics"].groupBy("project", "run", "key").max("step").collect()
    got = sorted([r[0], r[1], r[2], r[3]] for r in rows)
    want = trackstore.query("SELECT project, run_id, key, max(step) AS m FROM metrics GROUP BY ALL",
                            root=source).to_pylist()
    assert got == sorted([r["project"], r["run_id"], r["key"], r["m"]] for r in want)
