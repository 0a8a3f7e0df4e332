"""The SQL sandbox, tried as an attacker would: user SQL (``trackstore sql``, ``query``) reads the
store's files and nothing else, and changes nothing on disk.

Every escape is tried against a store holding one run, with a secret file next to the store,
in DuckDB's default temp folder (``<cwd>/.tmp``) and behind symbolic links planted in the store.
"""

from __future__ import annotations

import os
import warnings

import pytest

from tests.helpers import run_cli
from tests.query_fixtures import make_run
from trackstore.errors import QueryError
from trackstore.read.listing import list_runs
from trackstore.read.views import SkippedFileWarning, connect, query
from trackstore.store.meta import RunJsonWarning

SECRET = "s3cr3t-outside-the-store"


@pytest.fixture
def attacked(root, tmp_path, monkeypatch):
    """A store with one run; secrets beside it and in ``<cwd>/.tmp``, the cwd being the store's parent."""
    make_run(root, "p", "a", steps=3)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "x.txt").write_text(SECRET)
    return root


def files_under(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _s, fs in os.walk(path) for f in fs
                  if not f.endswith(".guard") and "_locks" not in d and "_catalog" not in d)  # a cache (format.md 11)


def refused(root, sql, *, cli=False):
    """Run ``sql`` through query() (and the CLI): it must be refused, reveal nothing, write nothing."""
    before = files_under(root.parent)
    with pytest.raises(QueryError) as err:
        query(sql, root=root)
    assert SECRET not in str(err.value)
    if cli:
        done = run_cli("sql", sql, "--format", "csv", root=root)
        assert done.returncode == 5, done.stderr
        assert SECRET not in done.stdout + done.stderr and "error: refused" in done.stderr
    assert files_under(root.parent) == before
    return str(err.value)


def test_duckdb_temp_folder_is_not_readable(attacked, tmp_path):
    """DuckDB always allows its temp folder; by default that is <cwd>/.tmp, shared with anything."""
    for path in (".tmp/x.txt", str(tmp_path / ".tmp" / "x.txt"), f"{attacked}/../.tmp/x.txt"):
        msg = refused(attacked, f"SELECT content FROM read_text('{path}')", cli=path == ".tmp/x.txt")
        assert "reads only the files under the store root" in msg
    refused(attacked, f"SELECT * FROM glob('{tmp_path}/.tmp/*')")
    con = connect(attacked)
    spill = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
    assert spill != ".tmp" and not os.path.exists(spill)  # private, made only if a query spills
    with pytest.raises(Exception, match="Permission|locked"):
        con.execute("SET temp_directory = '.tmp'")


ESCAPES = {
    "absolute": "SELECT * FROM read_csv('/etc/passwd')",
    "read_text": "SELECT content FROM read_text('{outside}/secret.txt')",
    "read_blob": "SELECT content FROM read_blob('{outside}/secret.txt')",
    "dotdot": "SELECT content FROM read_text('{root}/../secret.txt')",
    "dotdot-glob": "SELECT content FROM read_text('{root}/*/../../secret.txt')",
    "glob-outside": "SELECT * FROM glob('{outside}/*')",
    "file-url": "SELECT content FROM read_text('file://{outside}/secret.txt')",
    "home": "SELECT content FROM read_text('~/.bashrc')",
    "sniff": "SELECT * FROM sniff_csv('{outside}/secret.txt')",
    "getenv": "SELECT getenv('HOME')",
    "copy-into-store": "COPY (SELECT 1 AS a) TO '{root}/evil.csv'",
    "explain-analyze-copy": "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{root}/evil.csv'",
    "explain-options-copy": "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1 AS a) TO '{root}/evil.csv'",
    "explain-analyze-create": "/* hi */ explain analyse CREATE TABLE t AS SELECT 1",
    "attach-in-store": "ATTACH '{root}/evil.db' AS e",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set": "SET enable_external_access = true",
    "reset": "RESET allowed_directories",
    "pragma": "PRAGMA enable_profiling",
    "call": "CALL enable_logging(storage = 'file', storage_path = '{root}/log')",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_is_refused(attacked, tmp_path, name):
    refused(attacked, ESCAPES[name].format(root=attacked, outside=tmp_path), cli=name == "explain-analyze-copy")


def test_queries_and_explain_of_queries_still_work(attacked):
    assert query("SELECT count(*) AS n FROM metrics", root=attacked).to_pylist() == [{"n": 6}]
    assert query("EXPLAIN ANALYZE SELECT count(*) FROM metrics", root=attacked).num_rows == 1
    assert query("EXPLAIN (FORMAT json) (SELECT 1)", root=attacked).num_rows == 1
    run_dir = next(attacked.glob("project=p/run=*"))
    own = query(f"SELECT count(*) AS n FROM read_parquet('{run_dir}/metrics/*.parquet')", root=attacked)
    assert own.to_pylist() == [{"n": 6}]  # the store's own files stay readable directly


@pytest.mark.filterwarnings("ignore::trackstore.read.views.SkippedFileWarning")  # expected: the links are skipped
@pytest.mark.filterwarnings("ignore::trackstore.store.meta.RunJsonWarning")
def test_links_out_of_the_store_are_never_read(attacked, tmp_path):
    """A link planted in the store (a part file, a run folder) is neither read nor a way to fail
    every query: the views leave it out with a warning naming it."""
    run_dir = next(attacked.glob("project=p/run=*"))
    part = next((run_dir / "metrics").glob("*.parquet"))
    elsewhere = tmp_path / "elsewhere" / "run=x" / "metrics"
    elsewhere.mkdir(parents=True)
    (elsewhere / part.name).write_bytes(part.read_bytes())  # a valid part, outside the store
    (run_dir / "metrics" / "zz-link.parquet").symlink_to(elsewhere / part.name)
    (attacked / "project=evil").mkdir()
    (attacked / "project=evil" / "run=x").symlink_to(elsewhere.parent)
    (run_dir / "metrics" / "secret.txt").symlink_to(tmp_path / "secret.txt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert query("SELECT count(*) AS n FROM metrics", root=attacked).to_pylist() == [{"n": 6}]
    skipped = sorted({str(w.message) for w in caught if issubclass(w.category, (SkippedFileWarning, RunJsonWarning))})
    assert len(skipped) == 2 and all("outside the store" in m for m in skipped)  # the part, the run folder
    refused(attacked, f"SELECT content FROM read_text('{run_dir}/metrics/secret.txt')")
    refused(attacked, f"SELECT * FROM read_parquet('{attacked}/project=evil/run=x/metrics/*.parquet')")
    cli = run_cli("sql", "SELECT count(*) AS n FROM metrics", "--format", "csv", root=attacked)
    assert cli.returncode == 0 and cli.stdout.split() == ["n", "6"] and "outside the store" in cli.stderr


@pytest.mark.parametrize("linked", ["run", "project"])
def test_runs_view_never_reads_run_json_through_a_link_out_of_the_store(attacked, tmp_path, linked):
    """A run folder (or a project folder) that is a symbolic link to a run outside the store is
    not a run of the store: the runs view, listings and handles never read its run.json."""
    outside = tmp_path / "elsewhere"
    make_run(outside, "p", "planted", steps=3)
    (planted,) = (outside / "project=p").glob("run=*")
    if linked == "run":
        (attacked / "project=p" / planted.name).symlink_to(planted)
    else:
        (attacked / "project=q").symlink_to(outside / "project=p")
    inside = tmp_path / "store" / "project=x"  # a link that stays inside the store is followed
    inside.symlink_to(attacked / "project=p")
    with pytest.warns(RunJsonWarning, match="outside the store"):
        names = query("SELECT project, name FROM runs ORDER BY ALL", root=attacked).to_pylist()
    assert names == [{"project": "p", "name": "a"}, {"project": "x", "name": "a"}]
    with pytest.warns(RunJsonWarning, match="outside the store"):
        assert [r.name for r in list_runs(attacked)] == ["a", "a"]
    cli = run_cli("runs", "--format", "csv", root=attacked)
    assert cli.returncode == 0 and "planted" not in cli.stdout and "outside the store" in cli.stderr
