"""The team store on S3: ``sync --to store --uri s3://...`` against a real SeaweedFS server
(tests/servers.py), through a proxy that cuts connections before and after a request arrives,
killed with SIGKILL; trackstore's readers and gc over ``--root s3://``; Polars and DuckDB
reading the replica directly; the errors a user meets, each one line with its exit code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import time

import pytest

import trackstore
from tests import plain_reader
from tests.helpers import descendants, run_cli, spawn_cli, wait_gone
from tests.proxy import FaultyProxy
from tests.test_team_store import KINDS, make_runs, source_rows

pytest.importorskip("obstore")

# one SeaweedFS server per worker: keep this module's tests together
pytestmark = pytest.mark.xdist_group("weed_s3")


def sync_s3(root, prefix, *extra: str, env: dict | None = None, timeout: float = 300):
    return run_cli("sync", "--to", "store", "--uri", prefix.uri, *extra, root=root,
                   env={**prefix.env, **(env or {})}, timeout=timeout)


def assert_exact(root, prefix) -> None:
    for kind, (n, distinct) in plain_reader.counts(prefix, KINDS).items():
        assert n == distinct, f"{kind}: a row twice in the replica"
        assert n == source_rows(root, kind), kind


def test_replicate_to_s3_and_read_it_back_with_trackstore(root, s3_prefix, tmp_path):
    make_runs(root, 2, project="123")
    make_runs(root, 1, project="grpo 数学")
    res = sync_s3(root, s3_prefix, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, s3_prefix)
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    listed = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    local = run_cli("runs", "--format", "json", root=root)
    strip = lambda rows: sorted((r["project"], r["run_id"], r["status"], r["last_step"], r["ended_at"]) for r in rows)  # noqa: E731
    assert strip(json.loads(listed.stdout)) == strip(json.loads(local.stdout))
    q = "SELECT project, run_id, key, count(*) AS n, sum(value) AS s FROM metrics GROUP BY ALL ORDER BY ALL"
    over = run_cli("sql", q, "--root", s3_prefix.uri, "--format", "json", env=env)
    here = run_cli("sql", q, "--format", "json", root=root)
    assert over.returncode == 0, over.stderr
    assert json.loads(over.stdout) == json.loads(here.stdout)
    assert {r["project"] for r in json.loads(over.stdout)} == {"123", "grpo 数学"}
    run_id = json.loads(local.stdout)[0]["run_id"]
    shown = run_cli("show", run_id, "--root", s3_prefix.uri, env=env)
    assert shown.returncode == 0 and run_id in shown.stdout, shown.stderr
    samples = run_cli("samples", run_id, "--root", s3_prefix.uri, "--format", "json", env=env)
    assert samples.returncode == 0, samples.stderr
    # a new run replicated later is seen by the next command (the copy follows the replica)
    make_runs(root, 1, project="later")
    assert sync_s3(root, s3_prefix).returncode == 0
    listed = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert "later" in {r["project"] for r in json.loads(listed.stdout)}
    # readers only read: the replica holds what sync wrote and nothing else
    keys = [o["path"] for batch in __import__("obstore").list(s3_prefix.store()) for o in batch]
    assert not [k for k in keys if "_catalog" in k or "_locks" in k]


def test_runs_over_s3_shows_the_alerts_the_source_shows(root, s3_prefix, tmp_path):
    """``runs --root s3://`` lists a run that logged NaN with the same alert as over its source
    store, and a quiet run quiet, from the run.json files alone: a replica's run.json carries
    the run's metric facts, so a listing downloads no part."""
    with trackstore.init("alerts", name="bad", root=root) as bad:
        bad.log({"loss": 1.0}, step=0)
        bad.log({"loss": float("nan")}, step=1)
    make_runs(root, 1, project="alerts")
    assert sync_s3(root, s3_prefix).returncode == 0
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    strip = lambda rows: sorted((r["run_id"], r["alerts"], r["nonfinite_keys"]) for r in rows)  # noqa: E731
    over = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert over.returncode == 0, over.stderr
    here = json.loads(run_cli("runs", "--format", "json", root=root).stdout)
    assert strip(json.loads(over.stdout)) == strip(here)
    assert sorted(r["alerts"] for r in here) == [[], ["nonfinite"]]
    table = run_cli("runs", "--root", s3_prefix.uri, "--alerts", env=env)
    assert "bad" in table.stdout and "1 run" in table.stdout, table.stdout + table.stderr
    assert not list((tmp_path / "cache").glob("replicas/**/*.parquet")), "a listing fetched parts"
    # a named run's parts come in later (show): the listing still answers from run.json
    shown = run_cli("show", bad.id, "--root", s3_prefix.uri, env=env)
    assert shown.returncode == 0, shown.stderr
    assert list((tmp_path / "cache").glob("replicas/**/metrics/*.parquet"))
    again = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert strip(json.loads(again.stdout)) == strip(here)


def test_runs_over_s3_reads_the_parts_of_runs_replicated_without_facts(root, s3_prefix, tmp_path):
    """A replica whose run.json files carry no metric facts (replicated before they did, or
    edited) is listed with its alerts all the same: ``runs`` then fetches those runs' metrics
    parts, whose footers hold them, and no other part."""
    with trackstore.init("alerts", name="bad", root=root) as bad:
        bad.log({"loss": float("inf")}, step=3)
    make_runs(root, 1, project="alerts")
    assert sync_s3(root, s3_prefix).returncode == 0
    store = s3_prefix.store()
    obstore = __import__("obstore")
    keys = [o["path"] for batch in obstore.list(store) for o in batch]
    old = next(k for k in keys if k.endswith(f"run={bad.id}/run.json"))
    meta = json.loads(bytes(obstore.get(store, old).bytes()))
    del meta["replica"]["metric_facts"]
    obstore.put(store, old, json.dumps(meta).encode())
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    over = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert over.returncode == 0, over.stderr
    alerts = {r["run_id"]: r["alerts"] for r in json.loads(over.stdout)}
    assert alerts[bad.id] == ["nonfinite"] and sorted(alerts.values()) == [[], ["nonfinite"]]
    fetched = list((tmp_path / "cache").glob("replicas/**/*.parquet"))
    assert fetched and {p.parent.name for p in fetched} == {"metrics"}
    assert {p.parent.parent.name for p in fetched} == {f"run={bad.id}"}


def test_images_and_their_files_are_read_over_s3(root, s3_prefix, tmp_path):
    """A run's image rows and the files they name (``media/``) reach the local copy of a team
    store: ``sql`` over s3:// counts the images the source counts, and the copy's files are the
    logged bytes (the dashboard serves them from there)."""
    import numpy as np

    with trackstore.init("pics", name="frames", root=root) as run:
        for s in range(3):
            run.log({"loss": 1.0 / (s + 1), "val/frame": trackstore.Image(np.full((4, 4, 3), 60 * s, dtype=np.uint8))},
                    step=s)
    assert sync_s3(root, s3_prefix).returncode == 0
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    q = "SELECT step, path FROM images ORDER BY step"
    over = run_cli("sql", q, "--root", s3_prefix.uri, "--format", "json", env=env)
    assert over.returncode == 0, over.stderr
    rows = json.loads(over.stdout)
    assert rows == json.loads(run_cli("sql", q, "--format", "json", root=root).stdout) and len(rows) == 3
    [copy] = (tmp_path / "cache").glob("replicas/*")
    for r in rows:
        assert (copy / f"project=pics/run={run.id}" / r["path"]).read_bytes() == (run.dir / r["path"]).read_bytes()
    shown = json.loads(run_cli("show", run.id, "--root", s3_prefix.uri, "--format", "json", env=env).stdout)
    assert shown[0]["records"]["images"]["rows"] == 3


def test_a_reader_of_named_runs_fetches_those_runs_only(root, s3_prefix, tmp_path):
    """Over s3://, show, samples, plot and compare bring into the local copy every run.json and
    the parts of the runs they name, no other (one run of a team store of thousands is one
    run's download); their answers are the local store's; sql then fetches the rest."""
    runs = make_runs(root, 3)
    assert sync_s3(root, s3_prefix).returncode == 0
    cache = tmp_path / "cache"
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(cache)}
    a, b, _c = (r.id for r in runs)

    def copied() -> set[str]:
        """The run ids whose parts the local copy holds."""
        return {p.parent.parent.name.removeprefix("run=") for p in cache.glob("replicas/*/project=*/run=*/*/*.parquet")}

    shown = run_cli("show", a, "--root", s3_prefix.uri, "--format", "json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert copied() == {a} and len(list(cache.glob("replicas/*/project=*/run=*/run.json"))) == 3
    [over], [here] = json.loads(shown.stdout), json.loads(run_cli("show", a, "--format", "json", root=root).stdout)
    assert (over["metrics"], over["records"]) == (here["metrics"], here["records"])
    assert run_cli("samples", a, "--root", s3_prefix.uri, env=env).returncode == 0 and copied() == {a}
    plotted = run_cli("plot", a, b, "-k", "loss/k0", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert plotted.returncode == 0, plotted.stderr
    assert json.loads(plotted.stdout) == json.loads(run_cli("plot", a, b, "-k", "loss/k0", "--format", "json", root=root).stdout)
    assert copied() == {a, b}
    compared = run_cli("compare", a, b, "--root", s3_prefix.uri, "--format", "json", env=env)
    assert json.loads(compared.stdout) == json.loads(run_cli("compare", a, b, "--format", "json", root=root).stdout)
    q = "SELECT run_id, count(*) AS n FROM metrics GROUP BY ALL ORDER BY ALL"
    over = run_cli("sql", q, "--root", s3_prefix.uri, "--format", "json", env=env)
    assert json.loads(over.stdout) == json.loads(run_cli("sql", q, "--format", "json", root=root).stdout)
    assert copied() == {r.id for r in runs}


def test_a_reader_of_named_runs_lists_the_replica_once(root, s3_prefix, tmp_path):
    """show RUN over s3:// lists the replica once: the listing that brought in every run.json
    also chooses the named run's parts (a listing of a team store of thousands of runs is
    thousands of keys)."""
    runs = make_runs(root, 2)
    assert sync_s3(root, s3_prefix).returncode == 0
    counting = (  # the CLI, with each whole listing of the replica counted
        "import atexit, sys\n"
        "from trackstore.store import objects\n"
        "whole, listing = [0], objects.S3Folder.listing\n"
        "def counted(self, prefix=''):\n"
        "    whole[0] += not prefix\n"
        "    return listing(self, prefix)\n"
        "objects.S3Folder.listing = counted\n"
        "atexit.register(lambda: print('whole listings:', whole[0], file=sys.stderr))\n"
        "from trackstore.cli.main import main\n"
        "sys.argv[0] = 'trackstore'\n"
        "main()\n")
    env = {**os.environ, **s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-c", counting, "show", runs[0].id, "--root", s3_prefix.uri,
                          "--format", "json"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["run_id"] == runs[0].id
    assert "whole listings: 1" in res.stderr, res.stderr


def test_polars_over_s3_gives_what_duckdb_gives_over_the_source(root, s3_prefix):
    if importlib.util.find_spec("polars") is None:  # it reads in a process of its own (tests/plain_reader.py)
        pytest.skip("polars is not installed")
    make_runs(root, 3, project="123")
    assert sync_s3(root, s3_prefix).returncode == 0
    server = s3_prefix.server
    options = {"aws_endpoint_url": server.endpoint, "aws_access_key_id": server.access_key,
               "aws_secret_access_key": server.secret_key, "aws_region": "us-east-1", "aws_allow_http": "true"}
    frame = plain_reader.call("polars_sums", f"{s3_prefix.uri}/project=*/run=*/metrics/*.parquet", options)
    got = sorted((p, r, k, n, round(s, 6)) for p, r, k, n, s in frame)
    want = trackstore.query("SELECT project, run_id, key, count(*) AS n, sum(value) AS s FROM metrics GROUP BY ALL",
                            root=root).to_pylist()
    assert got == sorted((r["project"], r["run_id"], r["key"], r["n"], round(r["s"], 6)) for r in want)


def test_connections_cut_before_and_after_delivery_end_with_an_exact_replica(root, s3_prefix):
    make_runs(root, 6, steps=60)
    with FaultyProxy("127.0.0.1", s3_prefix.server.port) as proxy:
        proxy.random_cuts(probability=0.4, seed=5, max_bytes={"up": 3000, "down": 400}, direction=("up", "down"))
        env = {"AWS_ENDPOINT_URL": proxy.url}
        for _ in range(20):
            res = sync_s3(root, s3_prefix, "--max-retries", "3", "--timeout", "10", env=env)
            assert res.returncode in (0, 7, 8), res.stdout + res.stderr
            if res.returncode == 0:
                break
        assert res.returncode == 0, res.stdout + res.stderr
        assert proxy.stats().cuts > 0
    assert_exact(root, s3_prefix)


def test_a_link_lost_mid_sync_stops_every_process_and_a_rerun_is_exact(root, s3_prefix):
    """The link goes down while two worker processes replicate: the runs in flight give up as
    unreachable, no process starts another (the rest are "not attempted"), and the sync exits 8
    (some runs were sent: docs/sync.md's exit codes); once the link is back, a rerun makes the
    replica exact."""
    make_runs(root, 60, steps=100, keys=6)
    with FaultyProxy("127.0.0.1", s3_prefix.server.port) as proxy:
        env = {**os.environ, **s3_prefix.env, "AWS_ENDPOINT_URL": proxy.url, "TRACKSTORE_SYNC_PROCESSES": "2"}
        p = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", "sync", "--to", "store", "--uri",
                              s3_prefix.uri, "--jobs", "4", "--max-retries", "1", "--timeout", "5", "--format",
                              "json", "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        deadline = time.monotonic() + 120
        while proxy.stats().bytes_up < 200_000 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert p.poll() is None, "the sync ended before the link went down"
        proxy.refuse()
        out, err = p.communicate(timeout=180)
        assert p.returncode == 8, err
        runs = json.loads(out)["runs"]
        ok = [r for r in runs if r["result"] == "ok"]
        lost = [r for r in runs if r["error_kind"] == "unreachable"]
        assert ok and lost and len(ok) + len(lost) == len(runs), out
        # only the runs in flight when the link went (2 processes x 2 threads) tried and gave up
        gave_up = [r for r in lost if r["error"] != "not attempted: target unreachable"]
        assert 0 < len(gave_up) <= 6 < len(lost), out
        proxy.reset()
        res = sync_s3(root, s3_prefix, env={"AWS_ENDPOINT_URL": proxy.url})
        assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, s3_prefix)


def test_sigkill_during_s3_replication_then_a_rerun_is_exact(root, s3_prefix):
    """Killed in two worker processes (what a store of a hundred runs or more gets by default on
    a machine of two cores; tests/test_sync_processes.py), rerun in threads."""
    make_runs(root, 10, steps=150, keys=6)
    rng = random.Random(3)
    for _ in range(5):
        child = spawn_cli("sync", "--to", "store", "--uri", s3_prefix.uri, "--root", str(root),
                          env={**s3_prefix.env, "TRACKSTORE_SYNC_PROCESSES": "2"})
        time.sleep(rng.uniform(0.3, 2.0))
        workers = descendants(child.pid)
        child.kill()
        child.wait(timeout=30)
        assert wait_gone(workers) == [], "a worker process outlived its killed parent"  # and held its runs' locks
        n, distinct = plain_reader.counts(s3_prefix, ("metrics",))["metrics"]
        assert n == distinct
    res = sync_s3(root, s3_prefix)
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, s3_prefix)


def test_a_reader_looping_over_s3_never_double_counts_while_runs_grow_and_compact(root, s3_prefix):
    """A plain reader (pyarrow's S3 listing and DuckDB, in a process of its own, as a Spark or
    DuckDB job is) counts the replica's rows pass after pass while a live run grows, is
    replicated, compacted locally and replicated again."""
    make_runs(root, 2, steps=40)
    live = make_runs(root, 1, finish=False)[0]
    reader = plain_reader.Loop(s3_prefix)
    try:
        for round_ in range(3):
            for s in range(40 + round_ * 10, 50 + round_ * 10):
                live.log({"loss/k0": float(s)}, step=s)
            assert sync_s3(root, s3_prefix).returncode == 0
            assert run_cli("compact", root=root).returncode == 0
        live.finish()
        assert sync_s3(root, s3_prefix).returncode == 0
    finally:
        seen = [c["metrics"] for c in reader.stop()]
    assert len(seen) > 2 and all(n == d for n, d in seen), "a reader counted a row twice"
    assert_exact(root, s3_prefix)


def test_gc_on_s3_deletes_old_runs_and_readers_follow(root, s3_prefix, tmp_path):
    from trackstore.store.objects import open_location
    from trackstore.upkeep import replica_gc

    make_runs(root, 3)
    assert sync_s3(root, s3_prefix).returncode == 0
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    dry = run_cli("gc", "--root", s3_prefix.uri, "--older-than", "0d", "--dry-run", env=env)
    assert dry.returncode == 0 and "nothing to delete" in dry.stdout, dry.stdout + dry.stderr
    assert len(json.loads(run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env).stdout)) == 3
    import os

    saved = dict(os.environ)
    os.environ.update(s3_prefix.env)
    try:
        folder = open_location(s3_prefix.uri)
        plan = replica_gc.plan(folder, older_than_s=0, now=time.time() + 7200, keep_last=1)
        assert len(plan.delete) == 2
        replica_gc.execute(folder, plan)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert len(json.loads(run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env).stdout)) == 1
    n, d = plain_reader.counts(s3_prefix, ("metrics",))["metrics"]
    assert n == d == 30 * 4


@pytest.mark.parametrize("case,code,words", [
    ("bad secret", 10, "access denied"),
    ("no bucket", 10, "no such bucket"),
    ("dead endpoint", 7, "cannot reach"),
    ("no credentials", 2, "no S3 credentials"),
])
def test_s3_trouble_is_one_line_with_its_exit_code(root, s3_prefix, case, code, words):
    make_runs(root, 1)
    env = dict(s3_prefix.env)
    uri = s3_prefix.uri
    if case == "bad secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    elif case == "no bucket":
        uri = f"s3://no-such-bucket/{s3_prefix.key}"
    elif case == "dead endpoint":
        from tests.servers import free_port

        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    else:
        env.pop("AWS_ACCESS_KEY_ID")
        env.pop("AWS_SECRET_ACCESS_KEY")
    for args in (("sync", "--to", "store", "--uri", uri, "--root", str(root)), ("runs", "--root", uri)):
        res = run_cli(*args, env={**env, **({"AWS_ACCESS_KEY_ID": ""} if case == "no credentials" else {})})
        assert res.returncode == code, (args, res.stdout + res.stderr)
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and words in lines[0], (args, res.stderr)
        assert s3_prefix.server.secret_key not in res.stdout + res.stderr
    # nothing partial: no replica marker or part was written anywhere by the refused sync
    import obstore

    if case != "no bucket":
        assert not [o for batch in obstore.list(s3_prefix.store()) for o in batch]


def test_a_named_profile_supplies_the_credentials_which_are_never_stored(root, s3_prefix, tmp_path):
    import os
    from pathlib import Path

    make_runs(root, 1)
    server = s3_prefix.server
    aws = Path(os.environ["HOME"]) / ".aws"
    aws.mkdir()
    (aws / "credentials").write_text(f"[team]\naws_access_key_id = {server.access_key}\n"
                                     f"aws_secret_access_key = {server.secret_key}\n")
    (aws / "config").write_text(f"[profile team]\nregion = us-east-1\nendpoint_url = {server.endpoint}\n")
    env = {"AWS_PROFILE": "team", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_ENDPOINT_URL": "",
           "HOME": os.environ["HOME"], "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    res = run_cli("sync", "--to", "store", "--uri", s3_prefix.uri, "--format", "json", root=root, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    listed = run_cli("runs", "--root", s3_prefix.uri, "--format", "json", env=env)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 1, listed.stderr
    secret = server.secret_key.encode()
    for where in (root, tmp_path / "cache"):
        for f in where.rglob("*"):
            if f.is_file():
                assert secret not in f.read_bytes(), f
    import obstore

    store = s3_prefix.store()
    for batch in obstore.list(store):
        for o in batch:
            assert secret not in bytes(obstore.get(store, o["path"]).bytes()), o["path"]
    assert secret.decode() not in res.stdout + res.stderr


@pytest.fixture
def fuse_mount(s3_prefix, tmp_path):
    """The session server's bucket prefix mounted with ``weed mount`` (FUSE): the shared
    filesystem case, on the same objects S3 serves. Skips where FUSE cannot mount."""
    import shutil as _shutil
    import subprocess

    from tests.servers import weed_binary

    point = tmp_path / "shared"
    point.mkdir()
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    proc = subprocess.Popen([str(weed_binary()), "mount", f"-filer=127.0.0.1:{s3_prefix.server.ports['filer']}",
                             f"-dir={point}", f"-filer.path=/buckets/{s3_prefix.server.bucket}/{s3_prefix.key}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not os.path.ismount(point):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.skip("weed mount could not mount (FUSE not permitted here?)")
        time.sleep(0.1)
    try:
        yield point
    finally:
        fusermount = _shutil.which("fusermount3") or _shutil.which("fusermount")
        subprocess.run([fusermount, "-u", str(point)] if fusermount else ["umount", "-l", str(point)],
                       capture_output=True)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_a_replica_on_a_fuse_shared_filesystem_reads_the_same_over_s3(root, s3_prefix, fuse_mount, tmp_path):
    """sync --to store into a FUSE mount (weed mount: a shared filesystem backed by the same
    objects): create-only by hard links works there, and the replica reads the same through
    the path and through s3://."""
    make_runs(root, 3, project="123")
    replica = fuse_mount / "team"
    res = run_cli("sync", "--to", "store", "--uri", str(replica), root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    q = "SELECT project, run_id, count(*) AS n, count(DISTINCT (writer, seq)) AS d FROM metrics GROUP BY ALL ORDER BY ALL"
    by_path = run_cli("sql", q, "--format", "json", root=replica)
    env = {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    by_s3 = run_cli("sql", q, "--root", f"{s3_prefix.uri}/team", "--format", "json", env=env)
    assert by_path.returncode == 0 and by_s3.returncode == 0, by_path.stderr + by_s3.stderr
    assert json.loads(by_path.stdout) == json.loads(by_s3.stdout)
    rows = json.loads(by_s3.stdout)
    assert all(r["n"] == r["d"] for r in rows) and sum(r["n"] for r in rows) == source_rows(root)
    assert not list(replica.rglob(".*.tmp")), "a temp file was left on the shared filesystem"


def test_a_first_read_of_many_runs_shows_progress_on_a_terminal_only(root, s3_prefix, tmp_path, monkeypatch):
    from tests.helpers import cli_in_pty

    make_runs(root, 26, steps=2, keys=1)
    assert sync_s3(root, s3_prefix).returncode == 0
    for name, value in {**s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    piped = run_cli("sql", "SELECT count(*) AS n FROM samples", "--root", s3_prefix.uri, "--format", "json")
    assert piped.returncode == 0 and json.loads(piped.stdout) == [{"n": 26}], piped.stderr
    assert "fetching" not in piped.stderr  # a script's stderr stays quiet
    monkeypatch.setenv("TRACKSTORE_CACHE_DIR", str(tmp_path / "cache2"))
    code, out = cli_in_pty("sql", "SELECT count(*) AS n FROM samples", "--root", s3_prefix.uri, columns=80)
    assert code == 0, out
    assert "fetching from the team store" in out, out


def test_a_copy_fetched_in_two_steps_shows_one_bar_at_a_time(monkeypatch):
    """``runs`` over a replica whose run.json files carry no facts fetches them, then metrics
    parts: the second step's bar replaces the first, and its files tick the second bar."""
    import cli.common as common

    events: list[tuple] = []

    class Bar:
        def __init__(self, what, total):
            self.total = total

        def __enter__(self):
            events.append(("open", self.total))
            return self

        def __call__(self, label):
            events.append(("tick", self.total, label))

        def __exit__(self, *exc):
            events.append(("close", self.total))

    monkeypatch.setattr(common, "Steps", Bar)
    monkeypatch.setattr(common.sys.stderr, "isatty", lambda: True, raising=False)
    with common.fetch_bar() as on_fetch:
        first = on_fetch(60)
        first("project=p/run=r/run.json")
        second = on_fetch(70)
        second("project=p/run=r/metrics/part-w-1-2.parquet")
        assert on_fetch(3) is None  # a few files: no bar
    assert events == [("open", 60), ("tick", 60, "run.json"), ("close", 60), ("open", 70),
                      ("tick", 70, "part-w-1-2.parquet"), ("close", 70)]


def test_the_dashboard_over_s3_follows_the_replica_and_a_lost_link(root, s3_prefix, tmp_path):
    """``ui --root s3://...`` serves a local copy and brings it in step every ``--refresh``
    seconds: a run replicated after the dashboard started appears without a restart; the copy
    holds the run.json files and the parts of the runs a page has read, fetched at its first
    read; a link
    that goes down is said once on stderr while the copy goes on being served, and its return
    is said too."""
    import urllib.request

    from tests.servers import free_port

    def listed(port: int) -> set[str] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=10) as r:
                return {row["project"] for row in json.loads(r.read())["runs"]}
        except OSError:
            return None

    def until(what, seconds: float = 60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            time.sleep(0.2)
        raise AssertionError(f"not within {seconds} s: {what.__doc__ or what}")

    def series(port: int, project: str, run_id: str) -> dict:
        url = f"http://127.0.0.1:{port}/api/series?run={project}/{run_id}&key=loss/k0"
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())["series"][0]

    def copied(project: str) -> set[str]:
        return {p.parent.name for p in (tmp_path / "cache").glob(f"replicas/*/project={project}/run=*/*/*.parquet")}

    (first,) = make_runs(root, 1, project="first")
    assert sync_s3(root, s3_prefix).returncode == 0
    port = free_port()
    with FaultyProxy("127.0.0.1", s3_prefix.server.port) as proxy:
        env = {**os.environ, **s3_prefix.env, "AWS_ENDPOINT_URL": proxy.url,
               "TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
        p = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", "ui", "--root", s3_prefix.uri, "--port",
                              str(port), "--refresh", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        try:
            assert until(lambda: listed(port)) == {"first"}
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=10) as r:
                assert json.loads(r.read())["root"] == s3_prefix.uri  # the page names the team store, not the copy
            # the runs table comes from the run.json files; a run's parts when a page first reads it
            assert not list((tmp_path / "cache").glob("replicas/**/*.parquet"))
            assert series(port, "first", first.id)["n"] == 30
            assert copied("first") == {"metrics", "samples"}
            (later,) = make_runs(root, 1, project="later")
            assert sync_s3(root, s3_prefix).returncode == 0
            assert until(lambda: listed(port) == {"first", "later"})
            assert copied("later") == set()
            assert series(port, "later", later.id)["n"] == 30 and copied("later") == {"metrics", "samples"}
            proxy.refuse()
            time.sleep(3)  # several passes fail while the link is down
            assert listed(port) == {"first", "later"}  # the copy is still served
            proxy.reset()
            make_runs(root, 1, project="third")
            assert sync_s3(root, s3_prefix).returncode == 0
            assert until(lambda: listed(port) == {"first", "later", "third"})
        finally:
            p.terminate()
            out, err = p.communicate(timeout=30)
    assert f"serving {s3_prefix.uri} (read-only; a local copy, in step every 0.5 s) at http://" in out
    down = [line for line in err.splitlines() if "could not be brought in step" in line]
    assert len(down) == 1 and "cannot reach" in down[0], err  # said once, not once a pass
    assert err.count("in step again") == 1, err
    assert s3_prefix.env["AWS_SECRET_ACCESS_KEY"] not in out + err


def test_the_dashboard_over_s3_in_a_browser_shows_what_it_fetches_as_it_is_opened(root, s3_prefix, tmp_path):
    """In a real browser: the runs table of ``ui --root s3://...`` comes from the run.json files
    alone (with a run's NaN alert), and a run's page shows its records once the files it reads
    were fetched as it opened, and the store it was replicated from; the other run's files stay
    on the team store."""
    from tests.browser import chromium_paths, screenshot, start_chromium, wait_for_text
    from tests.servers import free_port

    if chromium_paths() is None:
        pytest.skip("chromium and chromedriver are not installed (make install-test)")
    with trackstore.init("team", name="nan-run", root=root) as bad:
        bad.log({"loss": 1.0}, step=0)
        bad.log({"loss": float("nan")}, step=1)
    (quiet,) = make_runs(root, 1, project="team")
    assert sync_s3(root, s3_prefix).returncode == 0
    cache = tmp_path / "cache"
    port = free_port()
    env = {**os.environ, **s3_prefix.env, "TRACKSTORE_CACHE_DIR": str(cache)}
    p = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", "ui", "--root", s3_prefix.uri, "--port",
                          str(port), "--refresh", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    driver = None
    try:
        driver = start_chromium(1400, 900)
        deadline = time.monotonic() + 60
        while True:
            try:
                driver.get(f"http://127.0.0.1:{port}/")
                wait_for_text(driver, "nan-run", quiet.name, timeout=5)
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                if time.monotonic() > deadline:
                    raise
        text = wait_for_text(driver, "NaN")
        assert "nan-run" in text
        screenshot(driver, "team-store", "dashboard-runs-over-s3")
        assert not list(cache.glob("replicas/**/*.parquet")), "the runs table fetched parts"
        driver.get(f"http://127.0.0.1:{port}/#/run/team/{quiet.id}")
        wait_for_text(driver, "4 metric keys", "1 sample")
        ident = json.loads((root / "_store.json").read_text())
        # where the run came from, in place of this copy's own (empty) sync state
        assert wait_for_text(driver, f"replicated from {ident['host']}:{ident['root']} (store {ident['store_id'][:12]})")
        body = driver.find_element("tag name", "body").text
        assert "never synced" not in body
        # each attempt's state, from what the replica's run.json carries of the writer files
        history = driver.find_element("xpath", "//h2[text()='Status history']/following-sibling::table[1]").text
        assert "finished" in history and "?" not in history, history
        screenshot(driver, "team-store", "dashboard-run-over-s3")
        fetched = {p.parent.parent.name for p in cache.glob("replicas/**/*.parquet")}
        assert fetched == {f"run={quiet.id}"}
    finally:
        if driver is not None:
            driver.quit()
        p.terminate()
        p.communicate(timeout=30)
