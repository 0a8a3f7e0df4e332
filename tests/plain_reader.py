"""Plain readers of a team store (pyarrow's S3 filesystem with DuckDB, Polars, the guide's
recipes), each run in a Python process of its own, as the Spark, DuckDB or Polars job they
stand for is.

Why a process: these readers bring native S3 clients with threads of their own (the AWS SDK
inside pyarrow, Polars' tokio runtime) that stay in a process once used. A pytest worker lives
for the whole session and runs hundreds of unrelated tests afterwards; a crash in such a thread
(seen: a worker of the S3 tests' group died later, in a native thread, while running an
unrelated in-process test) would end the whole run far from its cause. Here a reader's process
ends with its answer, and a crash in it fails the test that asked, naming it.

``call(name, *args, env=...)`` runs function ``name`` of this module in a fresh interpreter and
returns its JSON answer; ``Loop`` runs :func:`replica_counts` over and over until stopped. The
functions take and return JSON values only.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KINDS = ("metrics", "samples", "spans", "histograms")


# ------------------------------------------------------------------ in the reader's process
def _s3(server: dict):
    from pyarrow import fs

    return fs.S3FileSystem(endpoint_override=server["endpoint"], scheme="http", access_key=server["access_key"],
                           secret_key=server["secret_key"], region="us-east-1")


def replica_counts(server: dict, key: str, kinds: list[str]) -> dict[str, list[int]]:
    """Per kind, [rows, distinct row ids] a plain reader sees: a fresh listing of the replica
    through pyarrow's S3 filesystem (parts only: no ``_`` folder, no hidden file), queried by
    DuckDB (the docs/team-store.md recipe)."""
    import duckdb
    import pyarrow.dataset as ds
    from pyarrow import fs

    s3 = _s3(server)
    base = f"{server['bucket']}/{key}"
    listed = [f for f in s3.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
              if f.type == fs.FileType.File and f.path.endswith(".parquet") and "/_" not in f.path[len(base):]
              and not f.base_name.startswith(".")]
    out: dict[str, list[int]] = {}
    for kind in kinds:
        files = [f.path for f in listed if f"/{kind}/" in f.path]
        if not files:
            out[kind] = [0, 0]
            continue
        data = ds.dataset(files, filesystem=s3, format="parquet", partitioning="hive", partition_base_dir=base)
        con = duckdb.connect()
        con.register("rows", data.to_table(columns=["writer", "seq"]))
        n, distinct = con.execute("SELECT count(*), count(DISTINCT (writer, seq)) FROM rows").fetchone()
        out[kind] = [n, distinct]
    return out


def pyarrow_rows_per_run(server: dict, key: str) -> dict:
    """Metric rows per run, and the types of ``project`` and ``run``, read by a pyarrow dataset
    with an explicit hive schema of strings."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyarrow import fs

    s3 = _s3(server)
    base = f"{server['bucket']}/{key}"
    files = [f.path for f in s3.get_file_info(fs.FileSelector(base, recursive=True))
             if f.path.endswith(".parquet") and "/metrics/" in f.path]
    hive = pa.schema([("project", pa.string()), ("run", pa.string())])
    table = ds.dataset(files, filesystem=s3, format="parquet", partitioning=ds.partitioning(hive, flavor="hive"),
                       partition_base_dir=base).to_table(columns=["project", "run", "step"])
    counts = table.group_by(["project", "run"]).aggregate([("step", "count")]).to_pylist()
    return {"types": [str(table.schema.field("project").type), str(table.schema.field("run").type)],
            "rows": [[r["project"], r["run"], r["step_count"]] for r in counts]}


def polars_rows_per_run(glob: str, storage_options: dict, kw: dict) -> dict:
    """Metric rows per run, and the types of ``project`` and ``run``, read by Polars'
    ``scan_parquet`` over ``glob`` with hive partitions as strings (``kw``: its other options)."""
    import polars as pl

    frame = pl.scan_parquet(glob, storage_options=storage_options, hive_partitioning=True,
                            hive_schema={"project": pl.String, "run": pl.String}, **kw
                            ).select("project", "run", "step").collect()
    return {"types": [str(frame.schema["project"]), str(frame.schema["run"])],
            "rows": [[r["project"], r["run"], r["len"]] for r in frame.group_by("project", "run").len().to_dicts()]}


def polars_sums(glob: str, storage_options: dict) -> list[list]:
    """Per (project, run, key): the number of metric rows and the sum of their values, by Polars."""
    import polars as pl

    frame = pl.scan_parquet(
        glob, hive_partitioning=True, hive_schema={"project": pl.String, "run": pl.String},
        missing_columns="insert", storage_options=storage_options,
    ).group_by("project", "run", "key").agg(pl.len().alias("n"), pl.col("value").sum().alias("s")).collect()
    return [[r["project"], r["run"], r["key"], r["n"], r["s"]] for r in frame.to_dicts()]


def guide_recipes(duckdb_code: str, polars_code: str) -> dict:
    """Run the guide's DuckDB recipe and then its Polars recipe as written (their addresses
    already replaced; credentials from this process's environment) and return what a reader
    checks: per run the DuckDB rows, the types DuckDB gives ``project`` and ``run``, and the
    rows with ``last_of_key``; the Polars frame's types, rows per run and the ``last_of_key``
    nulls of run ``007``; and what the recipes printed."""
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        duck: dict = {"__name__": "__main__"}
        exec(compile(duckdb_code, "docs/team-store.md", "exec"), duck)
        lazy: dict = {"__name__": "__main__"}
        exec(compile(polars_code, "docs/team-store.md", "exec"), lazy)
    rows = duck["con"].sql("SELECT project, run, typeof(project), typeof(run), count(*), count(last_of_key) "
                           "FROM metrics GROUP BY ALL").fetchall()
    import polars as pl

    frame = lazy["metrics"].collect()
    old = frame.filter(pl.col("run") == "007")
    return {"duckdb": [list(r) for r in rows],
            "polars_types": [str(frame.schema["project"]), str(frame.schema["run"])],
            "polars_rows": [[r["project"], r["run"], r["len"]] for r in frame.group_by("project", "run").len().to_dicts()],
            "old_nulls": old["last_of_key"].null_count(), "old_height": old.height,
            "printed": printed.getvalue()}


def _loop(server: dict, key: str, kinds: list[str]) -> None:
    """:func:`replica_counts` over and over, a JSON line each, until standard input closes."""
    while True:
        print(json.dumps(replica_counts(server, key, kinds)), flush=True)
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready and not sys.stdin.read(1):
            return


def main() -> None:
    name, args = json.loads(sys.stdin.readline())
    if name == "_loop":
        _loop(*args)
        return
    print(json.dumps(globals()[name](*args)), flush=True)


# ------------------------------------------------------------------ in the test's process
def _command(env: dict | None) -> tuple[list[str], dict]:
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return [sys.executable, "-c", "from tests.plain_reader import main; main()"], full


def call(name: str, *args: Any, env: dict | None = None, timeout: float = 120) -> Any:
    """Function ``name``'s answer to ``args``, computed in a fresh interpreter with ``env``
    added to this process's environment. A reader that fails raises AssertionError with its
    output (a crash shows as its signal)."""
    cmd, full = _command(env)
    res = subprocess.run(cmd, input=json.dumps([name, list(args)]) + "\n", env=full, cwd=REPO,
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"the {name} reader ended with {res.returncode}:\n{res.stdout}{res.stderr}"
    return json.loads(res.stdout.splitlines()[-1])


def server_of(prefix) -> dict:
    """What the readers need of an S3 prefix's server (tests/servers.py's ``S3Prefix``)."""
    s = prefix.server
    return {"endpoint": s.endpoint.removeprefix("http://"), "access_key": s.access_key,
            "secret_key": s.secret_key, "bucket": s.bucket}


def counts(prefix, kinds: tuple[str, ...] = KINDS) -> dict[str, tuple[int, int]]:
    """:func:`replica_counts` of an S3 prefix, in a reader's process."""
    return {k: (n, d) for k, (n, d) in call("replica_counts", server_of(prefix), prefix.key, list(kinds)).items()}


class Loop:
    """A reader's process counting the replica's rows over and over (:func:`replica_counts`)
    while the test changes it; ``stop()`` ends it and returns every pass's counts."""

    def __init__(self, prefix, kinds: tuple[str, ...] = ("metrics",)) -> None:
        cmd, full = _command(None)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=full, cwd=REPO, text=True)
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(["_loop", [server_of(prefix), prefix.key, list(kinds)]]) + "\n")
        self._proc.stdin.flush()

    def stop(self, timeout: float = 120) -> list[dict[str, tuple[int, int]]]:
        try:
            out, err = self._proc.communicate(timeout=timeout)  # closes its standard input: the last pass
        except subprocess.TimeoutExpired:
            self._proc.kill()  # a pass that hangs: never left running after the test
            out, err = self._proc.communicate()
            raise AssertionError(f"the looping reader did not end within {timeout} s:\n{out}{err}") from None
        assert self._proc.returncode == 0, f"the looping reader ended with {self._proc.returncode}:\n{out}{err}"
        return [{k: (n, d) for k, (n, d) in json.loads(line).items()} for line in out.splitlines() if line.strip()]
