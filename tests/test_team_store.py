"""The team store on a shared path: ``sync --to store --uri PATH`` makes a replica that is itself a
store, exact after every ending of a sync, safe for plain globbing readers at every moment.

Plain readers here are DuckDB's own ``read_parquet`` over the hive glob of docs/format.md, as a
user's notebook would run it, never trackstore's views. The S3 side is tests/test_team_store_s3.py.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from pathlib import Path

import duckdb
import pytest

import trackstore
from tests.helpers import run_cli, spawn_cli

KINDS = ("metrics", "samples", "spans", "histograms")


def make_runs(root: Path, n: int, *, steps: int = 30, keys: int = 4, project: str = "team", finish: bool = True):
    runs = []
    for i in range(n):
        run = trackstore.init(project, name=f"r{i}", root=root, config={"i": i})
        for s in range(steps):
            run.log({f"loss/k{k}": s + k / 10 + i for k in range(keys)}, step=s)
        run.log_samples([{"input": f"p{i}", "output": f"r{i}", "score": 0.5}], step=steps - 1)
        if finish:
            run.finish()
        runs.append(run)
    return runs


def plain_rows(replica: Path, kind: str = "metrics") -> tuple[int, int]:
    """(rows, distinct row ids) a plain DuckDB glob sees in the replica right now."""
    files = f"{replica}/project=*/run=*/{kind}/*.parquet"
    if not list(replica.glob(f"project=*/run=*/{kind}/*.parquet")):
        return 0, 0
    con = duckdb.connect()
    return con.execute(f"SELECT count(*), count(DISTINCT (writer, seq)) FROM read_parquet('{files}', "
                   "hive_partitioning = true, union_by_name = true)").fetchone()


def source_rows(root: Path, kind: str = "metrics") -> int:
    return trackstore.query(f"SELECT count(*) AS n FROM {kind}", root=root).column("n")[0].as_py()


def sync_store(root: Path, replica, *extra: str, timeout: float = 300):
    return run_cli("sync", "--to", "store", "--uri", str(replica), *extra, root=root, timeout=timeout)


def assert_exact(root: Path, replica: Path) -> None:
    for kind in KINDS:
        n, distinct = plain_rows(replica, kind)
        assert n == distinct, f"{kind}: a row counted twice in the replica"
        assert n == source_rows(root, kind), kind


@pytest.mark.parametrize("stats", ["writer and seq", "seq only"])
@pytest.mark.parametrize("shape", ["one writer", "a gap", "two writers", "a writer a row group", "unordered",
                                   "a null seq", "empty"])
def test_a_whole_parts_row_ids_from_its_footer_are_its_rows(tmp_path, shape, stats):
    """The row ids a whole part is sent and acknowledged under (read from the footer's seq
    statistics when one writer's seqs fill their range, and its writer from the statistics of
    ``writer`` when they name one: parts written before those were kept have seq's only) are
    exactly the ids its rows hold."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trackstore.read.reader import whole_part_ids
    from trackstore.store.ranges import RangeSet

    seqs = {"one writer": list(range(5, 905)), "a gap": [*range(0, 400), *range(401, 901)],
            "two writers": list(range(900)), "unordered": random.Random(1).sample(range(900), 900),
            "a null seq": [1, None, 3], "empty": [], "a writer a row group": []}[shape]
    writers = [("w-b" if shape == "two writers" and i % 3 == 0 else "w-a") for i in range(len(seqs))]
    if shape == "a writer a row group":  # each group's statistics name one writer, not the same one
        seqs, writers = list(range(512)), ["w-a"] * 256 + ["w-b"] * 256
    if shape == "two writers":
        seqs = [s + 10_000 if w == "w-b" else s for s, w in zip(seqs, writers)]  # each writer's seqs unique
    table = pa.table({"writer": pa.array(writers, pa.string()), "seq": pa.array(seqs, pa.int64()),
                      "value": pa.array([0.5] * len(seqs))})
    path = tmp_path / "part.parquet"
    pq.write_table(table, path, row_group_size=256,  # several row groups: statistics per group
                   write_statistics=True if stats == "writer and seq" else ["seq", "value"])
    pf = pq.ParquetFile(path)
    ids, from_rows = whole_part_ids(pf), whole_part_ids(pf, pf.read())  # the ids alone; the rows read already
    if shape == "a null seq":
        assert ids is None and from_rows is None
        return
    decoded = RangeSet()
    decoded.add_table(table)
    assert ids == decoded == from_rows
    assert len(ids) == len(seqs)


def test_replica_is_a_store_that_plain_readers_and_trackstore_read(root, tmp_path):
    make_runs(root, 3)
    replica = tmp_path / "team"
    res = sync_store(root, replica, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, replica)
    marker = json.loads((replica / "_replica.json").read_text())
    assert marker["format"] == "trackstore-replica"
    # every run's run.json names the store it came from
    ident = json.loads((root / "_store.json").read_text())
    metas = [json.loads(p.read_text()) for p in replica.glob("project=*/run=*/run.json")]
    assert len(metas) == 3
    assert {m["replica"]["source"]["store_id"] for m in metas} == {ident["store_id"]}
    assert {m["status"] for m in metas} == {"finished"}
    # trackstore itself reads the replica as a store
    res = run_cli("sql", "SELECT count(*) AS n FROM metrics", "--format", "json", root=replica)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["n"] == source_rows(root)
    # and a second pass has nothing to do
    res = sync_store(root, replica)
    assert res.returncode == 0 and "up to date" in res.stdout + res.stderr, res.stdout + res.stderr


def test_a_replicas_run_json_carries_the_runs_metric_facts_as_the_source_has_them(root, tmp_path):
    """Each replica run.json carries its run's metric facts (non-finite values, newest log
    time, largest step) as the source's catalog has them, a live run's brought up to date by
    the pass that sends its new rows; and ``runs --root`` on the replica answers alerts and a
    live run's step from them, as over the source."""
    from trackstore.store.catalog import open_catalog

    live = trackstore.init("team", name="live", root=root)
    live.log({"loss": 1.0}, step=0)
    live.flush()
    make_runs(root, 1)
    replica = tmp_path / "team"
    assert sync_store(root, replica).returncode == 0

    def carried() -> dict:
        return {m["run_id"]: m["replica"]["metric_facts"]
                for m in (json.loads(p.read_text()) for p in replica.glob("project=*/run=*/run.json"))}

    def source() -> dict:
        cat = open_catalog(root)
        try:
            return {r: cat.metric_facts("team", r).to_json() for r in carried()}
        finally:
            cat.save()

    assert carried() == source() and carried()[live.id]["last_step"] == 0
    stamp = (replica / f"project=team/run={live.id}/run.json").stat().st_mtime_ns
    # nothing new: the run.json stays as it is
    assert sync_store(root, replica).returncode == 0
    assert (replica / f"project=team/run={live.id}/run.json").stat().st_mtime_ns == stamp
    live.log({"loss": float("nan")}, step=7)
    live.flush()
    assert sync_store(root, replica).returncode == 0
    assert carried() == source()
    assert carried()[live.id]["last_step"] == 7 and carried()[live.id]["keys"] == {"loss": [1, 0, 7]}
    over = {r["run_id"]: r for r in json.loads(run_cli("runs", "--format", "json", root=replica).stdout)}
    here = {r["run_id"]: r for r in json.loads(run_cli("runs", "--format", "json", root=root).stdout)}
    for rid in here:
        assert (over[rid]["alerts"], over[rid]["last_step"]) == (here[rid]["alerts"], here[rid]["last_step"])
    assert over[live.id]["alerts"] == ["nonfinite"] and over[live.id]["last_step"] == 7
    live.finish()
    # the writers' states travel too (writer files are not replicated): the run page's attempts
    assert sync_store(root, replica).returncode == 0
    meta = json.loads((replica / f"project=team/run={live.id}/run.json").read_text())
    (writer,) = meta["replica"]["writers"]
    mine = json.loads(next((root / f"project=team/run={live.id}/_writers").glob("*.json")).read_text())
    assert writer["writer_id"] == mine["writer_id"] and writer["status"] == "finished" == mine["status"]
    assert writer["ended_at"] == mine["ended_at"] and not (replica / f"project=team/run={live.id}/_writers").exists()


def test_a_listings_copy_reads_each_run_json_version_once_for_its_facts(root, tmp_path, monkeypatch):
    """The copy a listing makes (``for_listing``) tells which runs carry their metric facts by
    reading each run.json once per version (kept in its index), not at every call: a call with
    nothing new reads none, and a run.json changed to carry none has that run's metrics parts
    fetched at the next call."""
    from trackstore.read import replica_copy
    from trackstore.store.catalog import part_records

    runs = make_runs(root, 3)
    replica = tmp_path / "team"
    assert sync_store(root, replica).returncode == 0
    env = {"TRACKSTORE_CACHE_DIR": str(tmp_path / "cache")}
    looked: list[int] = []
    real = part_records.carried_facts
    monkeypatch.setattr(part_records, "carried_facts", lambda meta: looked.append(1) or real(meta))

    def parts(copy) -> set[str]:
        return {p.parent.parent.name for p in copy.glob("project=*/run=*/metrics/*.parquet")}

    copy = replica_copy.local_copy(str(replica), for_listing=True, env=env)
    assert len(looked) == 3 and parts(copy) == set()
    looked.clear()
    replica_copy.local_copy(str(replica), for_listing=True, env=env)
    assert looked == []  # nothing new: no run.json read again
    bare = replica / f"project=team/run={runs[1].id}/run.json"
    meta = json.loads(bare.read_text())
    del meta["replica"]["metric_facts"]
    bare.write_text(json.dumps(meta))
    replica_copy.local_copy(str(replica), for_listing=True, env=env)
    assert len(looked) == 1 and parts(copy) == {f"run={runs[1].id}"}


def test_parts_are_written_once_and_never_rewritten(root, tmp_path):
    """A live run's growth, local compaction and a resume add parts; none is ever replaced."""
    run = make_runs(root, 1, finish=False)[0]
    replica = tmp_path / "team"
    assert sync_store(root, replica).returncode == 0
    first = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in replica.rglob("*.parquet")}
    for s in range(30, 60):
        run.log({"loss/k0": float(s)}, step=s)
    run.finish()
    assert run_cli("compact", root=root).returncode == 0
    assert sync_store(root, replica).returncode == 0
    resumed = trackstore.init("team", resume=run.id, root=root)
    resumed.log({"loss/k0": 99.0}, step=60)
    resumed.finish()
    assert sync_store(root, replica).returncode == 0
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in replica.rglob("*.parquet")}
    assert all(after.get(p) == v for p, v in first.items()), "a replica part was rewritten or removed"
    assert len(after) > len(first)
    assert_exact(root, replica)
    writers = {p.name.split("-0000")[0] for p in replica.glob("project=*/run=*/metrics/*.parquet")}
    assert len(writers) == 2, writers  # the resumed attempt's writer has parts of its own


def test_a_lost_cursor_resends_nothing_the_replica_holds(root, tmp_path):
    make_runs(root, 2)
    replica = tmp_path / "team"
    assert sync_store(root, replica).returncode == 0
    shutil.rmtree(root / "_sync")  # the ledger is gone: every run looks unsynced
    res = sync_store(root, replica, "--format", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, replica)
    assert all(r["reconciled"] > 0 for r in json.loads(res.stdout)["runs"]), res.stdout


def test_sigkill_at_random_moments_then_a_rerun_is_exact(root, tmp_path):
    make_runs(root, 12, steps=200, keys=8)
    replica = tmp_path / "team"
    rng = random.Random(7)
    for _ in range(6):
        child = spawn_cli("sync", "--to", "store", "--uri", str(replica), "--jobs", "2", "--root", str(root))
        time.sleep(rng.uniform(0.2, 2.5))
        child.kill()
        child.wait(timeout=30)
        for kind in KINDS:  # at every moment in between, no row twice
            n, distinct = plain_rows(replica, kind)
            assert n == distinct, kind
    res = sync_store(root, replica)
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, replica)


def test_two_stores_replicate_into_one_prefix_and_a_copied_run_is_refused(tmp_path):
    a, b, replica = tmp_path / "a", tmp_path / "b", tmp_path / "team"
    make_runs(a, 2, project="lab")
    make_runs(b, 3, project="lab")
    assert sync_store(a, replica).returncode == 0
    assert sync_store(b, replica).returncode == 0
    res = run_cli("sql", "SELECT count(DISTINCT run_id) AS n FROM metrics", "--format", "json", root=replica)
    assert json.loads(res.stdout)[0]["n"] == 5
    sources = {json.loads(p.read_text())["replica"]["source"]["store_id"]
               for p in replica.glob("project=*/run=*/run.json")}
    assert len(sources) == 2
    # a run of a copied into b (as a bundle would carry it) meets a's copy at the replica
    src = next((a / "project=lab").iterdir())
    shutil.copytree(src, b / "project=lab" / src.name)
    before = plain_rows(replica)
    res = sync_store(b, replica)
    assert res.returncode == 8, res.stdout + res.stderr
    assert "replicated from another store" in res.stdout + res.stderr
    assert "not merged" in res.stdout + res.stderr
    assert plain_rows(replica) == before


def test_a_glob_reader_never_double_counts_during_replication_compaction_and_gc(root, tmp_path):
    """A DuckDB glob over the replica in a loop while a live run grows, the store compacts and
    gcs, and sync replicates again and again: every answer has each row at most once, and the
    final answer has every row."""
    done = make_runs(root, 4, steps=40)
    live = make_runs(root, 1, finish=False)[0]
    replica = tmp_path / "team"
    stop = threading.Event()
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def reader():
        while not stop.is_set():
            try:
                seen.append(plain_rows(replica))
            except duckdb.IOException as exc:  # a file gone between listing and reading is the only excuse
                errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for round_ in range(3):
            for s in range(40 + round_ * 10, 50 + round_ * 10):
                live.log({"loss/k0": float(s)}, step=s)
            live.flush()
            assert sync_store(root, replica).returncode == 0
            assert run_cli("compact", root=root).returncode == 0
        assert run_cli("gc", "--older-than", "0d", "--include-unsynced", "--yes", "--project", "team",
                       root=root).returncode in (0, 6)
        live.finish()
        assert sync_store(root, replica).returncode == 0
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert seen and all(n == d for n, d in seen), "a reader counted a row twice"
    assert len(done) == 4
    n, d = plain_rows(replica)
    assert n == d and n >= max(x for x, _ in seen)


def test_a_folder_that_is_not_a_replica_is_refused_before_anything_is_written(root, tmp_path):
    make_runs(root, 1)
    home = tmp_path / "mine"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    res = sync_store(root, home)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "not a trackstore replica" in res.stderr
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    res = sync_store(root, root / "inside")
    assert res.returncode == 2 and "overlaps the store" in res.stderr


@pytest.fixture
def small_mount(tmp_path):
    """A tmpfs of its own (read-only, or tiny): needs root and the right to mount, else skips."""
    import subprocess

    made = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(made)}"
        point.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "trackstore-test", str(point)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        made.append(point)
        return point

    yield mount
    for point in made:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_read_only_filesystem_is_exit_10_with_one_line(root, small_mount):
    make_runs(root, 1)
    ro = small_mount("ro,size=1m")
    res = sync_store(root, ro / "team")
    assert res.returncode == 10, res.stdout + res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Read-only file system" in lines[0], res.stderr


def test_a_full_filesystem_is_exit_10_and_leaves_nothing_half_written(root, small_mount):
    make_runs(root, 6, steps=400, keys=10)
    full = small_mount("size=96k")
    res = sync_store(root, full / "team")
    assert res.returncode == 10, res.stdout + res.stderr
    assert "No space left on device" in res.stderr, res.stderr
    assert not list(full.rglob(".*.tmp")), "a temp file was left behind"
    for kind in KINDS:  # what did land is whole and counted once
        n, distinct = plain_rows(full / "team", kind)
        assert n == distinct


def test_gc_on_a_replica_path_deletes_old_runs_parts_first(root, tmp_path):
    from trackstore.store.objects import open_location
    from trackstore.upkeep import replica_gc

    make_runs(root, 3)
    replica = tmp_path / "team"
    assert sync_store(root, replica).returncode == 0
    res = run_cli("gc", "--older-than", "0d", "--dry-run", "--show-kept", "--format", "json", root=replica)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert {r["action"] for r in rows} == {"keep"}  # just replicated: a sync may still be writing
    assert {r["reason"] for r in rows} == {rows[0]["reason"]} and "replicated" in rows[0]["reason"]
    folder = open_location(replica)
    plan = replica_gc.plan(folder, older_than_s=0, now=time.time() + 7200, keep_last=1)
    assert len(plan.delete) == 2
    replica_gc.execute(folder, plan)
    assert len(list(replica.glob("project=*/run=*/run.json"))) == 1
    n, d = plain_rows(replica)
    assert n == d == 30 * 4
    res = run_cli("gc", "--older-than", "0d", "--force", root=replica)
    assert res.returncode == 2 and "--force is for a local store" in res.stderr
    # --project is a filter there too: a mistyped one is told, with the projects the replica has
    res = run_cli("gc", "--older-than", "0d", "--project", "tem", "--dry-run", root=replica)
    assert res.returncode == 0 and "nothing to delete" in res.stdout, res.stderr
    assert res.stderr.strip() == f"note: no project 'tem' in {replica}; its projects, closest first: team"
    res = run_cli("gc", "--older-than", "0d", "--project", "team", "--dry-run", root=replica)
    assert res.returncode == 0 and not res.stderr, res.stderr


def test_a_filesystem_without_hard_links_still_gets_whole_create_only_parts(root, tmp_path, monkeypatch):
    """Some shared mounts refuse hard links (EPERM): parts are renamed into place instead,
    still whole and still never replaced."""
    import errno
    import os

    from trackstore.store.objects import PathFolder

    def no_links(src, dst, *a, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    folder = PathFolder(tmp_path / "team")
    assert folder.put_new("project=p/run=r/metrics/part-a.parquet", b"first") is True
    assert folder.put_new("project=p/run=r/metrics/part-a.parquet", b"second") is False
    assert folder.get("project=p/run=r/metrics/part-a.parquet") == b"first"
    assert not list((tmp_path / "team").rglob(".*.tmp"))


def test_credentials_written_into_the_uri_are_refused_and_never_echoed(root):
    make_runs(root, 1)
    res = sync_store(root, "s3://AKIAEXAMPLE:hunter2secret@team/lab")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "hunter2secret" not in res.stdout + res.stderr and "AKIAEXAMPLE" not in res.stdout + res.stderr
    assert "holds no credentials" in res.stderr
    res = run_cli("runs", "--root", "s3://AKIAEXAMPLE:hunter2secret@team/lab")
    assert res.returncode == 2 and "hunter2secret" not in res.stdout + res.stderr



def test_a_worker_that_looked_before_another_marked_the_replica_still_agrees(root, tmp_path):
    """sync() with several workers makes one adapter each, and each checks the destination: one
    that found no marker, then (a moment later) the marker another worker wrote and its first
    parts, must take it for the replica it now is, not for a folder of someone else's files."""
    from trackstore.store.objects import PathFolder
    from trackstore.sync import open_adapter, sync
    from trackstore.sync.adapter import TargetOptions
    from trackstore.sync.engine import SyncOptions

    make_runs(root, 12, steps=5, keys=2)
    replica = tmp_path / "team"
    first = open_adapter(root, "store", TargetOptions(uri=str(replica)))
    first.check_online()  # the first worker marks the folder

    class LookedEarlier(PathFolder):
        looks = 0

        def get(self, key):
            if key == "_replica.json" and not self.looks:
                self.looks += 1
                return None  # what it saw before the first worker wrote
            return super().get(key)

    late = open_adapter(root, "store", TargetOptions(uri=str(replica)))
    late.folder = LookedEarlier(replica)
    late.check_online()
    report = sync(root, first, SyncOptions(), jobs=4)
    assert [r.error for r in report.runs if not r.ok] == []
    assert_exact(root, replica)


@pytest.mark.parametrize("text,refused", [
    ("Error performing PUT http://127.0.0.1:44089/team/k in 1ms - HTTP error: error sending request "
     "(x-amz-date: 20261207T005403Z)", False),  # a dead endpoint at 00:54:03: the digits of a time
    ("Error performing PUT http://127.0.0.1:40312/team/k - HTTP error: error sending request", False),
    ("Error performing PUT http://127.0.0.1:9000/team/k - Server returned non-2xx status code: 403 Forbidden: ",
     True),
    ("Error performing GET ... <Code>SignatureDoesNotMatch</Code>", True),
])
def test_only_a_status_403_reads_as_access_denied(text, refused):
    """An S3 error is access denied (exit 10) for a status 403 or an S3 denial code, never for
    the digits 403 inside a signed request's date or a port (then it is a connection trouble,
    retried, and exit 7 when it lasts)."""
    from obstore import exceptions as ox

    from trackstore.errors import RetryableError, TargetRefusedError
    from trackstore.store import objects

    folder = objects.S3Folder.__new__(objects.S3Folder)
    folder.url, folder.bucket = "s3://team/p", "team"
    with pytest.raises(TargetRefusedError if refused else RetryableError):
        with folder._errors("k"):
            raise ox.GenericError(f"Generic S3 error: {text}")


@pytest.mark.parametrize("argv", [["status"], ["compact"], ["doctor"], ["export", "-o", "OUT"], ["sync", "--to", "mlflow"]])
def test_commands_that_change_or_watch_a_store_refuse_an_s3_root_in_one_line(argv, tmp_path):
    """A team store changes only through sync --to store and gc: every other command given
    --root s3://... stops with exit 2 before any request, in one line that names the commands
    that do read it (artifacts among them)."""
    out = tmp_path / "out.tar"
    res = run_cli(*[str(out) if a == "OUT" else a for a in argv], "--root", "s3://team/runs", env={"HOME": str(tmp_path)})
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"{argv[0]} works on a local store" in lines[0]
    assert "runs, show, sql, plot, compare, samples, trace, artifacts, ui and cleaned by gc" in lines[0]
    assert not out.exists()
