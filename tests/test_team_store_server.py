"""The S3 server of the team store's tests (SeaweedFS, ``tests/servers.py``) behaves as the
replica's design needs, through the clients the replica and its readers use.

obstore: a create-only upload refuses an existing key and leaves it unchanged, a conditional
upload refuses a stale ETag, listings see what was written, a wrong key is refused (403), a
bucket that does not exist is refused and not created by an upload, and objects survive a
restart and a SIGKILL. Readers: pyarrow and Polars read hive-partitioned parts with ``project``
and ``run`` as strings (``project=123``, ``run=007``), and the DuckDB and Polars recipes of
docs/team-store.md run as written, on S3 and on a path, against a replica shaped as the design
says (one of its metrics parts of schema version 1, without ``last_of_key``). Its Spark recipe
runs in the Spark venv: tests/spark/test_spark_reads_replica.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests import plain_reader
from tests.fixtures.stores import make_run
from tests.helpers import REPO
from tests.servers import WeedS3
from tests.test_docs_examples import parse

obstore = pytest.importorskip("obstore")
if importlib.util.find_spec("polars") is None:  # its readers run in processes of their own (tests/plain_reader.py)
    pytest.skip("polars is not installed", allow_module_level=True)
from obstore.exceptions import AlreadyExistsError, BaseError, PermissionDeniedError, PreconditionError  # noqa: E402

pytestmark = pytest.mark.xdist_group("weed_s3")  # one session server (tests/servers.py) for its users

GUIDE = REPO / "docs" / "team-store.md"
TESTED_HERE = "tests/test_team_store_server.py"  # what the guide's not-run markers name


def _keys(store, prefix: str | None = None) -> list[str]:
    return sorted(m["path"] for batch in obstore.list(store, prefix=prefix) for m in batch)


def test_create_only_upload_refuses_an_existing_key(s3_prefix):
    store = s3_prefix.store()
    obstore.put(store, "metrics/part-w-0-9.parquet", b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, "metrics/part-w-0-9.parquet", b"second", mode="create")
    assert bytes(obstore.get(store, "metrics/part-w-0-9.parquet").bytes()) == b"first"


def test_conditional_upload_refuses_a_stale_etag(s3_prefix):
    store = s3_prefix.store()
    first = obstore.put(store, "run.json", b"{}", mode="create")
    second = obstore.put(store, "run.json", b'{"n": 1}', mode={"e_tag": first["e_tag"]})
    assert second["e_tag"] != first["e_tag"]
    with pytest.raises(PreconditionError):
        obstore.put(store, "run.json", b'{"n": 2}', mode={"e_tag": first["e_tag"]})
    assert bytes(obstore.get(store, "run.json").bytes()) == b'{"n": 1}'


def test_listing_sees_what_was_written_under_the_prefix_only(s3_prefix, weed_s3):
    store = s3_prefix.store()
    names = ["_replica.json", "project=a/run=1/run.json", "project=a/run=1/metrics/part-w-0-1.parquet",
             "project=b/run=2/metrics/part-w-0-3.parquet"]
    for name in names:
        obstore.put(store, name, b"x", mode="create")
    obstore.put(weed_s3.store(s3_prefix.key + "-other"), "project=c/run=3/run.json", b"x")  # a neighbour prefix
    assert _keys(store) == sorted(names)
    assert _keys(store, "project=a") == sorted(n for n in names if n.startswith("project=a/"))
    top = obstore.list_with_delimiter(store)
    assert sorted(top["common_prefixes"]) == ["project=a", "project=b"]
    assert [o["path"] for o in top["objects"]] == ["_replica.json"]


def test_wrong_or_missing_credentials_are_refused(s3_prefix, weed_s3):
    obstore.put(s3_prefix.store(), "a", b"1", mode="create")
    wrong = weed_s3.store(s3_prefix.key, secret_key="not-the-secret", retries=0)
    with pytest.raises(PermissionDeniedError, match="403"):
        obstore.put(wrong, "b", b"2", mode="create")
    with pytest.raises(PermissionDeniedError, match="403"):
        obstore.get(wrong, "a")
    with pytest.raises(BaseError, match="403"):
        _keys(wrong)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:  # unsigned
        opener.open(f"{weed_s3.endpoint}/{weed_s3.bucket}/{s3_prefix.key}/a", timeout=5)
    assert refused.value.code == 403
    assert _keys(s3_prefix.store()) == ["a"]


def test_a_bucket_that_does_not_exist_is_refused_not_created(s3_prefix, weed_s3):
    missing = weed_s3.store("p", bucket=f"no-such-{s3_prefix.key[-8:]}", retries=0)
    with pytest.raises(FileNotFoundError, match="404"):  # obstore's not-found, as for a missing key
        obstore.put(missing, "a", b"1", mode="create")
    with pytest.raises(BaseError, match="404"):  # a GenericError: obstore has no finer kind for it
        _keys(missing)
    with pytest.raises(FileNotFoundError):
        obstore.get(missing, "a")


def test_env_names_the_server_for_clients_that_read_the_aws_variables(s3_prefix, monkeypatch):
    from obstore.store import S3Store

    for name, value in s3_prefix.env.items():
        monkeypatch.setenv(name, value)
    store = S3Store(s3_prefix.server.bucket, prefix=s3_prefix.key)  # everything else from the environment
    obstore.put(store, "a", b"1", mode="create")
    assert _keys(s3_prefix.store()) == ["a"]


def test_objects_survive_a_restart_and_a_kill(tmp_path):
    server = WeedS3(tmp_path / "weed")
    server.start()
    try:
        store = server.store("p")
        obstore.put(store, "before-stop", b"1", mode="create")
        group = server.pid
        server.stop()
        assert not server.running
        with pytest.raises(ProcessLookupError):  # the whole process group is gone
            os.killpg(group, 0)
        server.start()
        assert bytes(obstore.get(store, "before-stop").bytes()) == b"1"
        obstore.put(store, "before-kill", b"2", mode="create")
        server.kill()
        assert not [p for p in Path("/tmp").glob("seaweedfs-*.sock")  # what weed leaves when killed
                    if any(p.name.endswith(f"-{port}.sock") or p.name.endswith(f"-{port + 10000}.sock")
                           for port in server.ports.values())]
        server.start()
        assert _keys(store) == ["before-kill", "before-stop"]
        with pytest.raises(AlreadyExistsError):  # still create-only after the restart
            obstore.put(store, "before-kill", b"3", mode="create")
    finally:
        server.kill()


# --- readers -------------------------------------------------------------------------------------

def _drop_last_of_key(path: Path) -> None:
    """Make a metrics part look like one of schema version 1 (before ``last_of_key``)."""
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["last_of_key"]), path)


@pytest.fixture
def replica(tmp_path, s3_prefix) -> tuple[Path, dict[tuple[str, str], int]]:
    """A replica shaped as docs/team-store.md says, in a folder and under ``s3_prefix``: runs of
    projects ``123`` and ``vision`` (run ``007``, whose metrics part is of schema version 1).
    Returns the folder and the number of metric rows per (project, run)."""
    source = tmp_path / "source"
    runs = [make_run(source, "123", chunks=2, samples=True), make_run(source, "123", chunks=1, samples=False),
            make_run(source, "vision", chunks=1, samples=True)]
    folder = tmp_path / "replica"
    folder.mkdir()
    (folder / "_replica.json").write_text('{"format": "trackstore-replica", "version": 1}')
    expected: dict[tuple[str, str], int] = {}
    for paths in runs:
        run_id = "007" if paths.project == "vision" else paths.run_id
        dest = folder / f"project={paths.project}" / f"run={run_id}"
        dest.mkdir(parents=True)
        shutil.copy(paths.run_file, dest / "run.json")
        for kind in ("metrics", "samples"):
            for i, part in enumerate(sorted(paths.kind_dir(kind).glob("*.parquet"))):
                (dest / kind).mkdir(exist_ok=True)
                target = dest / kind / f"part-w-{i}-{i}.parquet"
                shutil.copy(part, target)
                if kind == "metrics":
                    expected[(paths.project, run_id)] = expected.get((paths.project, run_id), 0) + \
                        pq.read_metadata(target).num_rows
                    if run_id == "007":
                        _drop_last_of_key(target)
    store = s3_prefix.store()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            obstore.put(store, f.relative_to(folder).as_posix(), f.read_bytes(), mode="create")
    return folder, expected


def test_pyarrow_and_polars_read_hive_parts_with_explicit_options(replica, s3_prefix, weed_s3):
    _, expected = replica
    table = plain_reader.call("pyarrow_rows_per_run", plain_reader.server_of(s3_prefix), s3_prefix.key)
    assert table["types"] == ["string", "string"]
    assert {(p, r): n for p, r, n in table["rows"]} == expected

    options = {"aws_endpoint_url": weed_s3.endpoint, "aws_access_key_id": weed_s3.access_key,
               "aws_secret_access_key": weed_s3.secret_key, "aws_region": "us-east-1", "aws_allow_http": "true"}
    frame = plain_reader.call("polars_rows_per_run", f"{s3_prefix.uri}/project=*/run=*/metrics/*.parquet", options,
                              {"extra_columns": "ignore"})
    assert frame["types"] == ["String", "String"]
    assert {(p, r): n for p, r, n in frame["rows"]} == expected


def _guide_recipes() -> dict[str, str]:
    """The guide's recipes whose not-run marker names this file, by engine and place."""
    recipes: dict[str, str] = {}
    for e in parse(GUIDE)[0]:
        if e.not_run and TESTED_HERE in e.not_run:
            engine = "spark" if "pyspark" in e.code else "duckdb" if "duckdb" in e.code else "polars"
            place = "s3" if '"s3://ml-team/tsruns"' in e.code else "path"
            recipes[f"{engine}-{place}"] = e.code
    return recipes


def test_the_guide_marks_its_tested_recipes():
    assert sorted(_guide_recipes()) == ["duckdb-path", "duckdb-s3", "polars-s3"]


def _recipe(code: str, replace: dict[str, str]) -> str:
    for old, new in replace.items():
        assert old in code, f"the recipe no longer says {old!r}"
        code = code.replace(old, new)
    return code


@pytest.mark.parametrize("where", ["s3", "path"])
def test_the_guides_duckdb_and_polars_recipes_run_as_written(where, replica, s3_prefix):
    """The recipes run in a process of their own (tests/plain_reader.py), as a reader's job
    does, with the server's AWS variables in its environment."""
    folder, expected = replica
    recipes = _guide_recipes()
    address = s3_prefix.uri if where == "s3" else str(folder)
    if where == "s3":
        duck = _recipe(recipes["duckdb-s3"], {'"s3://ml-team/tsruns"': repr(address)})
    else:
        duck = _recipe(recipes["duckdb-path"], {'"/shared/team"': repr(address)})
    lazy = _recipe(recipes["polars-s3"], {'"s3://ml-team/tsruns"': repr(address)})  # either place
    got = plain_reader.call("guide_recipes", duck, lazy, env=s3_prefix.env)
    rows = got["duckdb"]
    assert {(p, r): n for p, r, _, _, n, _ in rows} == expected
    assert {(tp, tr) for _, _, tp, tr, _, _ in rows} == {("VARCHAR", "VARCHAR")}
    assert {(p, r): with_flag > 0 for p, r, _, _, _, with_flag in rows} == {k: k[1] != "007" for k in expected}
    assert got["polars_types"] == ["String", "String"]
    assert {(p, r): n for p, r, n in got["polars_rows"]} == expected
    assert got["old_nulls"] == got["old_height"] > 0
    assert "007" in got["printed"]  # the recipes print what they found

