"""The catalog (trackstore/store/catalog/) is a cache: whatever happens to the store, every answer
made from it is the answer a full read of the files gives.

* property-based: random sequences of creating, logging (resume), finishing, crashing, failing,
  compacting, gc-deleting, importing runs, acknowledging rows in a cursor and adding a damaged
  part, with the listing, ``status`` and the no-change sync check compared with a full scan
  after every step;
* a corrupt, truncated, foreign or deleted catalog file is rebuilt silently with the same answers;
* two processes refreshing the catalog while a third writes runs never see a wrong listing;
* a racy fingerprint (a file changed less than RACY_S ago) is not trusted;
* connect() takes each part's check from the catalog and still skips a damaged part.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from tests.helpers import run_cli
from trackstore.read.listing import list_runs, listed_rows, load_run, resolve_run, resolve_runs
from trackstore.read.overview import run_overview
from trackstore.read.sync_status import status_rows
from trackstore.store import catalog as store_catalog
from trackstore.store.catalog import freshness
from trackstore.store.files import tree_bytes
from trackstore.store.layout import RunPaths, iter_run_dirs, part_file_name
from trackstore.store.ledger import (
    Cursor,
    iter_cursors,
    load_cursor,
    pending_counts,
    read_row_ids,
    save_cursor,
    sync_state_rows,
    unchanged_since_ack,
)
from trackstore.store.meta import read_writer_files, write_run_json, write_writer_file
from trackstore.store.schema import KINDS

TARGET, DEST = "mlflow", "sqlite:///nowhere.db"


# ----------------------------------------------------------------------------- full-scan references
def full_runs(root: Path) -> list[RunInfo]:  # noqa: F821 - a RunInfo from load_run
    out = []
    for proj, rid, _d in iter_run_dirs(root):
        info = load_run(RunPaths(root, proj, rid), unreadable=True)
        if info is not None:
            out.append(info)
    out.sort(key=lambda r: (r.meta.get("created_at") or "", r.run_id))
    return out


def described(infos) -> list:
    return [(r.project, r.run_id, r.status, r.unreadable, r.row(), r.write_errors()) for r in infos]


def full_status(root: Path) -> list[dict]:
    """``trackstore status`` as it was computed before the catalog: every part read."""
    infos = {(r.project, r.run_id): r for r in full_runs(root) if not r.unreadable}
    stored = {}

    def row(info, cursor, target, destination):
        key = (info.project, info.run_id)
        if key not in stored:
            ids, bad = {}, 0
            for kind in KINDS:
                ids[kind], damaged = read_row_ids(info.paths, kind)
                bad += len(damaged)
            stored[key] = ids, bad
        ids, bad = stored[key]
        pending = pending_counts(info.paths, cursor, ids=ids)
        return {"target": target, "destination": destination, "project": info.project, "run_id": info.run_id,
                "status": info.status, "pending_metrics": pending.get("metrics", 0),
                "pending_other": sum(v for k, v in pending.items() if k != "metrics"),
                "bytes": tree_bytes(info.paths.dir), "synced_status": cursor.synced_status if cursor else None,
                "last_sync_at": cursor.last_sync_at if cursor else None,
                "last_error": cursor.last_error if cursor else None, "unreadable_parts": bad,
                "write_errors": info.write_errors(), "staged": bool(cursor and cursor.staged)}

    rows, seen = [], set()
    for c in iter_cursors(root):
        info = infos.get((c.project, c.run_id))
        if info is None:
            continue
        seen.add((c.project, c.run_id))
        rows.append(row(info, c, c.target, c.destination))
    for key, info in infos.items():
        if key not in seen:
            rows.append(row(info, None, "-", "(never synced)"))
    return rows


def full_unchanged(root: Path) -> set:
    """The runs a sync has nothing to do for, from every part's rows and the cursor file."""
    out = set()
    for info in full_runs(root):
        if info.unreadable:
            continue
        try:
            c = load_cursor(root, TARGET, DEST, info.project, info.run_id)
        except Exception:
            continue
        if not c.remote:
            continue
        damaged = any(read_row_ids(info.paths, k)[1] for k in KINDS)
        pending = pending_counts(info.paths, c)
        synced = c.synced_status
        status_pushed = not (info.status != synced and (info.status in ("finished", "failed", "crashed") or synced))
        if not damaged and not c.in_doubt and not c.remote.get("journal") and not any(pending.values()) \
                and status_pushed:
            out.add((info.project, info.run_id))
    return out


def full_sync_state(root: Path) -> list[dict]:
    """The ``sync_state`` rows as computed before the catalog: every cursor and part read."""
    rows = []
    for c in iter_cursors(root):
        paths = RunPaths(Path(root), c.project, c.run_id)
        pending = pending_counts(paths, c) if paths.dir.exists() else {}
        for kind in KINDS:
            acked = c.acked.get(kind)
            rows.append({"target": c.target, "destination": c.destination, "project": c.project,
                         "run_id": c.run_id, "kind": kind, "acked_rows": len(acked) if acked else 0,
                         "pending_rows": pending.get(kind, 0), "skipped_rows": c.skipped.get(kind, 0),
                         "remote_id": c.remote_id, "synced_status": c.synced_status,
                         "last_sync_at": c.last_sync_at, "last_error": c.last_error, "staged": c.staged})
    return rows


def check_views_against_full_scan(root: Path) -> None:
    """``connect()``'s views, made from the catalog (kept kind-folder listings and part checks,
    run.json text, cursor summaries), hold what a full read of the files gives."""
    import pyarrow.parquet as pq

    from trackstore.read.views import connect, quote_ident

    full = {(i.project, i.run_id): i for i in full_runs(root)}
    con = connect(root)
    try:
        runs = {(p, r): (status, json.loads(config), json.loads(summary), notes)
                for p, r, status, config, summary, notes in
                con.execute("SELECT project, run_id, status, config, summary, notes FROM runs").fetchall()}
        assert runs == {k: (i.status, i.row()["config"], i.row()["summary"], i.row()["notes"]) for k, i in full.items()}
        light = ("project", "run_id", "name", "status", "created_at", "ended_at", "updated_at", "last_step", "host",
                 "user", "tags", "group", "job_type", "exit_code")
        got = con.execute(f"SELECT {', '.join(quote_ident(c) for c in light)} FROM runs ORDER BY project, run_id").fetchall()
        assert [dict(zip(light, r)) for r in got] == \
            [i.view_row(light=True) for _k, i in sorted(full.items(), key=lambda kv: kv[0])]
        state = sorted(con.execute("SELECT target, destination, project, run_id, kind, acked_rows, pending_rows, "
                                   "skipped_rows, remote_id, synced_status, last_error FROM sync_state").fetchall())
        assert state == sorted(tuple(r[c] for c in ("target", "destination", "project", "run_id", "kind", "acked_rows",
                                                     "pending_rows", "skipped_rows", "remote_id", "synced_status",
                                                     "last_error")) for r in full_sync_state(root))
        sound = 0
        for f in root.glob("project=*/run=*/metrics/*.parquet"):
            try:
                sound += pq.read_table(f).num_rows
            except Exception:  # damaged: the views skip it
                pass
        assert con.execute("SELECT count(*) FROM _raw_metrics").fetchone() == (sound,)
    finally:
        con.close()


def listed(root: Path) -> list[dict]:
    """The listing's rows (runs that did not change come from the catalog's rows without a run
    object), in a full listing's order."""
    order = {(r.project, r.run_id): i for i, r in enumerate(full_runs(root))}
    return sorted(listed_rows(root, unreadable=True), key=lambda r: order.get((r["project"], r["run_id"]), -1))


def check_against_full_scan(root: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_views_against_full_scan(root)
        assert described(list_runs(root, unreadable=True)) == described(full_runs(root))
        assert [i.run_id for i in list_runs(root)] == [i.run_id for i in full_runs(root) if not i.unreadable]
        assert listed(root) == [r.view_row(light=True) for r in full_runs(root)]
        assert status_rows(root) == full_status(root)
        assert sync_state_rows(root) == full_sync_state(root)
        readable = [r for r in full_runs(root) if not r.unreadable]
        got = unchanged_since_ack(root, TARGET, DEST, list_runs(root))
        assert got == full_unchanged(root)
        for info in readable:  # every reference resolves to the run a full listing finds
            assert resolve_run(info.run_id, root).row() == info.row()
        for info in readable[:1] + readable[-1:]:  # show's overview, kept or not, is what the files say
            fresh = run_overview(info, _connection(root, info))  # a full listing's run: no catalog
            for _ in range(2):  # derived (and kept), then as kept
                assert _close(run_overview(resolve_run(info.run_id, root), _connection(root, info)), fresh)


def _close(a, b) -> bool:
    """Equal, floats within rounding: a mean's last bits depend on the order DuckDB adds the
    values in, which a compaction finishing in the background (finish()) changes."""
    import math

    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _connection(root: Path, info):
    import contextlib

    from trackstore.read.views import connect

    return lambda: contextlib.closing(connect(root, runs=[info], sync_state=False))


# ----------------------------------------------------------------------------- operations
def _settle() -> None:
    # the property test trusts every fingerprint (RACY_S patched below); a file system clock
    # ticks every few ms, so two changes of one folder are kept apart by more than a tick
    time.sleep(0.012)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def op_create(root: Path, project: str, steps: int, ending: str) -> None:
    run = trackstore.init(project=project, root=root, name=f"n{steps}", config={"steps": steps}, tags=[ending])
    for s in range(steps):
        run.log({"loss": 1.0 / (s + 1), "acc": s * 0.1}, step=s)
    if steps % 2:
        run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=0)
    if ending == "failed":
        run.finish(exit_code=1)
    else:
        run.finish()
    if ending == "crashed":  # what kill -9 leaves: run.json and the writer still say running, the pid is gone
        paths = run.paths
        meta = dict(load_run(paths).meta)
        meta.update(status="running", ended_at=None)
        write_run_json(paths, meta)
        for w in read_writer_files(paths):
            write_writer_file(paths, {**w, "status": "running", "pid": _dead_pid(), "pid_start": None})


def op_resume(root: Path, info, steps: int) -> None:
    run = trackstore.init(project=info.project, run_id=info.run_id, resume=True, root=root)
    for _ in range(steps):
        run.log({"loss": 0.5, "extra": 2.0})
    run.finish()


def op_records(root: Path, info, artifact: bool) -> None:
    """New record kinds in an existing run (a kind folder that was not there: samples, the
    artifacts manifest inside an existing or new ``artifacts`` folder)."""
    run = trackstore.init(project=info.project, run_id=info.run_id, resume=True, root=root)
    run.log_samples([{"input": "later", "output": "b", "score": 0.5}], step=1)
    if artifact:
        f = root.parent / f"{root.name}-artifact.txt"
        f.write_text("weights")
        run.log_artifact(f, name="policy", type="model")
        f.unlink()
    run.finish()


def op_lose(root: Path, info) -> None:
    """A writer file that records rows it could not write (what a writer with a full disk leaves)."""
    for w in read_writer_files(info.paths)[:1]:
        write_writer_file(info.paths, {**w, "write_errors": "3 metrics rows lost: disk full"})


def op_compact(root: Path, info) -> None:
    from trackstore.upkeep.compact import compact

    compact(root, [info.paths])


def op_gc(root: Path, info) -> None:
    from trackstore.upkeep import gc

    plan = gc.plan(root, gc.Policy(older_than_s=0, project=info.project, include_unsynced=True, force=True))
    for c in plan.runs:
        c.delete = c.delete and c.info.run_id == info.run_id
    gc.execute(root, plan)


def op_import(root: Path, steps: int) -> None:
    from trackstore.upkeep.bundle import export_runs, import_bundle

    side = Path(tempfile.mkdtemp(prefix="ts-side-"))
    try:
        op_create(side, "imported", steps, "finished")
        bundle = side.parent / f"{side.name}.tar"
        export_runs(side, list_runs(side), bundle)
        import_bundle(root, bundle)
        bundle.unlink()
    finally:
        shutil.rmtree(side, ignore_errors=True)


def op_ack(root: Path, info, fraction: float, push_status: bool, in_doubt: bool) -> None:
    """A cursor acknowledging the first ``fraction`` of each kind's rows (what a sync leaves)."""
    cursor = Cursor(TARGET, DEST, info.project, info.run_id, remote={"run_id": "r"})
    for kind in KINDS:
        ids = read_row_ids(info.paths, kind)[0].sort_by("seq")
        cut = ids.slice(0, int(ids.num_rows * fraction))
        cursor.acked_set(kind).add_table(cut)
    cursor.synced_status = info.status if push_status else None
    cursor.in_doubt = {"kind": "metrics", "rows": {}, "batch_id": "x", "since": "now"} if in_doubt else None
    save_cursor(root, cursor)


def op_damage(root: Path, info) -> None:
    """A new part that is not Parquet (renamed into place, as every part arrives)."""
    from trackstore.store.atomic import write_bytes_atomic

    d = info.paths.kind_dir("metrics")
    d.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(d / part_file_name("vm-1-dead00", 0), b"PAR1 not really parquet")


OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(["a", "b"]), st.integers(0, 5),
              st.sampled_from(["finished", "crashed", "failed"])),
    st.tuples(st.just("resume"), st.integers(0, 9), st.integers(1, 4)),
    st.tuples(st.just("compact"), st.integers(0, 9)),
    st.tuples(st.just("gc"), st.integers(0, 9)),
    st.tuples(st.just("import"), st.integers(1, 3)),
    st.tuples(st.just("ack"), st.integers(0, 9), st.sampled_from([0.0, 0.5, 1.0]), st.booleans(), st.booleans()),
    st.tuples(st.just("damage"), st.integers(0, 9)),
    st.tuples(st.just("records"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("lose"), st.integers(0, 9)),
)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(ops=st.lists(OPS, min_size=1, max_size=6))
def test_catalog_agrees_with_a_full_scan(ops):
    root = Path(tempfile.mkdtemp(prefix="ts-cat-"))
    old = freshness.RACY_S
    freshness.RACY_S = -3600.0  # trust every fingerprint: the cache, not the racy rule, is under test
    try:
        op_create(root, "a", 3, "finished")
        check_against_full_scan(root)
        for op in ops:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs = full_runs(root)
            name, *args = op
            if name == "create":
                op_create(root, *args)
            elif name == "import":
                op_import(root, *args)
            elif runs:
                info = runs[args[0] % len(runs)]
                if name == "resume" and info.status != "crashed":
                    op_resume(root, info, args[1])
                elif name == "compact":
                    op_compact(root, info)
                elif name == "gc":
                    op_gc(root, info)
                elif name == "ack":
                    op_ack(root, info, *args[1:])
                elif name == "damage":
                    op_damage(root, info)
                elif name == "records" and info.status != "crashed":
                    op_records(root, info, args[1])
                elif name == "lose":
                    op_lose(root, info)
            _settle()
            check_against_full_scan(root)
    finally:
        freshness.RACY_S = old
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- a damaged catalog
@pytest.fixture
def store(root, monkeypatch):
    monkeypatch.setattr(freshness, "RACY_S", -3600.0)
    for i in range(4):
        op_create(root, "p" if i % 2 else "q", i + 1, ["finished", "crashed"][i % 2])
    op_ack(root, full_runs(root)[0], 1.0, True, False)
    return root


def answers(root: Path) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (described(list_runs(root, unreadable=True)), listed(root), status_rows(root),
                unchanged_since_ack(root, TARGET, DEST, list_runs(root)))


def catalog_is_sound(root: Path) -> bool:
    db = sqlite3.connect(f"file:{store_catalog.catalog_path(root)}?immutable=1", uri=True)
    try:
        return db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone() == (str(store_catalog.CATALOG_VERSION),)
    finally:
        db.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "deleted", "folder deleted", "other version",
                                    "wrong fingerprints"])
def test_a_damaged_catalog_is_rebuilt_with_the_same_answers(store, damage):
    first = answers(store)
    assert first == (described(full_runs(store)), [r.view_row(light=True) for r in full_runs(store)],
                     full_status(store), full_unchanged(store))
    path = store_catalog.catalog_path(store)
    assert catalog_is_sound(store)
    if damage == "garbage":
        path.write_bytes(os.urandom(5000))
    elif damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "deleted":
        path.unlink()
    elif damage == "folder deleted":
        shutil.rmtree(path.parent)
    elif damage == "other version":
        db = sqlite3.connect(path)
        db.execute("UPDATE catalog_info SET value = '999' WHERE key = 'version'")
        db.commit()
        db.close()
    elif damage == "wrong fingerprints":  # entries that claim to be current but are not: refused by stat
        db = sqlite3.connect(path)
        db.execute("UPDATE runs SET meta_fp = 'x', writers_fp = 'x', parts_fp = 'x', name = 'forged', "
                   "status = 'failed'")
        db.execute("UPDATE runs SET dir_fp = 'x', kind_fps = 'x|x|x|x|x|-', kind_rows = '7|7|7|7|7', damaged = 0, "
                   "writers_lost = NULL")
        db.execute("UPDATE cursors SET fp = 'x', dir_fp = 'x', pending = '0|0|0|0|0', synced_status = 'finished'")
        db.commit()
        db.close()
    assert answers(store) == first
    assert catalog_is_sound(store)  # written again
    assert answers(store) == first


def test_the_catalog_holds_what_it_promises(store):
    """Run metadata, per-kind row counts and step ranges, last values (summary), part fingerprints."""
    answers(store)
    db = sqlite3.connect(f"file:{store_catalog.catalog_path(store)}?immutable=1", uri=True)
    rows = db.execute("SELECT r.project, r.run_id, name, status, last_step, meta, parts, kind_rows, damaged "
                      "FROM runs r JOIN run_details d ON (r.project, r.run_id) = (d.project, d.run_id)").fetchall()
    db.close()
    assert len(rows) == 4
    import json

    for project, run_id, name, status, last_step, meta, parts, kind_rows, damaged in rows:
        info = load_run(RunPaths(store, project, run_id))
        assert (name, status, last_step) == (info.meta["name"], info.meta["status"], info.meta.get("last_step"))
        assert json.loads(meta)["summary"] == info.meta["summary"]
        kinds = json.loads(parts)
        listed = sorted(p.name for p in info.paths.parts("metrics"))
        assert sorted(p[0] for p in kinds["metrics"][1]) == listed
        rows_in = sum(p[3] for p in kinds["metrics"][1])
        assert rows_in == read_row_ids(info.paths, "metrics")[0].num_rows
        assert kind_rows.split("|") == [str(read_row_ids(info.paths, k)[0].num_rows) for k in KINDS]
        assert damaged == 0


def test_a_store_where_the_catalog_cannot_be_written_is_served_without_it(store):
    first = answers(store)
    shutil.rmtree(store_catalog.catalog_path(store).parent)
    store_catalog.catalog_path(store).parent.write_text("not a folder")  # every write of the catalog fails
    assert answers(store) == first
    assert answers(store) == first


def test_a_fingerprint_younger_than_racy_s_is_not_trusted(root):
    op_create(root, "p", 2, "finished")
    info = list_runs(root)[0]
    assert freshness.fingerprint(info.paths.run_file) == ""  # just written: racy
    old = time.time() - 100
    os.utime(info.paths.run_file, (old, old))  # the change time stays now: still racy
    assert freshness.fingerprint(info.paths.run_file) == ""
    assert freshness.fingerprint(info.paths.dir / "nothing") == "-"


def test_a_row_kept_while_its_run_was_racy_is_never_trusted(root):
    """A run changed within RACY_S of a command is kept with empty fingerprints; while it keeps
    changing that fast, the fingerprints taken now are empty too: equal, but never a reason to
    trust the row (the listing, status and the no-change check read the files again)."""
    op_create(root, "p", 2, "finished")
    info = list_runs(root)[0]  # the catalog now holds the run with meta_fp "" (it was just written)
    assert listed_rows(root)[0]["name"] == info.name
    meta = json.loads(info.paths.run_file.read_text())
    meta["name"] = "renamed in place"
    info.paths.run_file.write_text(json.dumps(meta))  # in place, within RACY_S: racy again
    assert freshness.fingerprint(info.paths.run_file) == ""
    assert listed_rows(root)[0]["name"] == "renamed in place"
    assert list_runs(root)[0].name == "renamed in place"
    assert status_rows(root) == full_status(root)


def test_references_resolve_without_a_listing_and_in_one_scan(root):
    for i in range(5):
        op_create(root, "p" if i < 3 else "q", i, "finished")
    infos = list_runs(root)
    refs = [infos[0].run_id, infos[1].run_id[:22], f"q/{infos[4].name}", f"p/{infos[2].run_id[:21]}"]
    got = resolve_runs(refs, root)
    assert [g.run_id for g in got] == [infos[0].run_id, infos[1].run_id, infos[4].run_id, infos[2].run_id]
    with pytest.raises(trackstore.errors.AmbiguousRunError):
        resolve_run("2026", root) if infos[0].run_id.startswith("2026") else resolve_run(infos[0].run_id[:4], root)
    with pytest.raises(trackstore.errors.RunNotFoundError):
        resolve_run("zz-no-such-run", root)


# ----------------------------------------------------------------------------- concurrency
REFRESHER = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
from trackstore.read.listing import list_runs, listed_rows
from trackstore.read.sync_status import status_rows
root, until = sys.argv[1], float(sys.argv[2])
n = 0
while time.time() < until:
    runs = list_runs(root, unreadable=True)
    listed_rows(root, unreadable=True)
    ids = [r.run_id for r in runs]
    assert len(ids) == len(set(ids)), ids
    for r in runs:
        assert r.status in ("running", "finished", "failed", "crashed"), r
    status_rows(root)
    n += 1
print(n)
"""

WRITER = r"""
import sys, trackstore
root = sys.argv[1]
for i in range(12):
    run = trackstore.init(project="w", root=root, name=f"w{i}", flush_interval=0.05)
    for s in range(40):
        run.log({"x": s}, step=s)
    run.finish()
    if i % 3 == 0:
        r = trackstore.init(project="w", run_id=run.run_id, resume=True, root=root)
        r.log({"x": 1.0})
        r.finish()
print("done")
"""


def test_two_refreshers_race_a_writer(root):
    op_create(root, "p", 2, "finished")
    until = time.time() + 6
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-c", REFRESHER, str(root), str(until)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert int(out) > 0
    time.sleep(freshness.RACY_S + 0.1)  # every file is now old enough to be cached
    for _ in range(2):  # once deriving what changed, once from the catalog
        assert answers(root)[:3] == (described(full_runs(root)), [r.view_row(light=True) for r in full_runs(root)],
                                     full_status(root))


def test_connect_reuses_part_checks_and_still_skips_a_damaged_part(store, monkeypatch):
    """connect() checks a part file once (framing, columns); a later connect (here: with the
    checks counted, as in a new process) takes the check from the catalog while the file keeps its size and mtime, and still skips
    a damaged part with a warning."""
    from trackstore.read import part_scan

    op_damage(store, full_runs(store)[0])
    checked = []
    real = part_scan.check_part

    def counting(path):
        checked.append(path)
        return real(path)

    monkeypatch.setattr(part_scan, "check_part", counting)
    found = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            con = trackstore.connect(store)
            n = con.execute("SELECT count(*) FROM metrics").fetchone()[0]
            con.close()
        found.append((n, sorted(str(w.message).split(":")[0] for w in caught
                                if issubclass(w.category, part_scan.SkippedFileWarning))))
    assert found[0] == found[1] and len(found[0][1]) == 1 and "dead00" in found[0][1][0]
    assert found[0][0] == sum(read_row_ids(r.paths, "metrics")[0].num_rows for r in full_runs(store))
    parts = [p for r in full_runs(store) for k in KINDS for p in r.paths.parts(k)]
    assert len(checked) == len(parts)  # the second connect checked nothing again
    new = full_runs(store)[1]
    op_resume(store, new, 2)  # a new part: checked; the others are not
    checked.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the damaged part, again
        trackstore.connect(store).close()
    assert checked and len(checked) < len(parts)


SHOW_CHILD = """
import contextlib, io, json, sys
from trackstore.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["show", sys.argv[1], "-f", "json", "--root", sys.argv[2]])
    except SystemExit:
        pass
print(json.dumps([sorted(m for m in ("duckdb", "pyarrow", "pandas") if m in sys.modules), out.getvalue()]))
"""


def _show(root: Path, run_id: str) -> tuple[list, str]:
    out = subprocess.run([sys.executable, "-c", SHOW_CHILD, run_id, str(root)], capture_output=True, text=True,
                         check=True)
    imported, text = json.loads(out.stdout)
    return imported, text


def test_show_answers_from_the_catalog_until_the_run_changes(root):
    """`show` keeps a run's overview (metric keys, record counts) in the catalog for the parts it
    was derived from: the next `show` starts neither DuckDB nor pyarrow and prints the same; rows
    added, a compaction, or a kept entry that is garbage give what the files say."""
    run = trackstore.init("p", root=root, compact=False)
    for s in range(5):
        run.log({"loss": 1.0 / (s + 1), "acc": s / 8}, step=s)
    run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=2)
    run.finish()
    time.sleep(freshness.RACY_S + 0.1)  # a folder changed within RACY_S is never trusted: nothing would be kept
    imported, first = _show(root, run.id)
    assert "duckdb" in imported  # derived from the files (and kept)
    assert _show(root, run.id) == ([], first)  # as kept: no DuckDB, no pyarrow, the same answer
    assert json.loads(first)[0]["records"]["samples"]["rows"] == 1

    more = trackstore.init("p", run_id=run.id, resume=True, root=root, compact=False)
    more.log({"loss": 0.1, "extra": 2.0}, step=9)
    more.finish()
    imported, grown = _show(root, run.id)
    assert "duckdb" in imported  # its metrics folder changed: derived again
    metrics = {m["key"]: m for m in json.loads(grown)[0]["metrics"]}
    assert metrics["loss"]["last_step"] == 9 and metrics["loss"]["points"] == 6 and "extra" in metrics

    assert run_cli("compact", run.id, root=root).returncode == 0  # same rows, other files: derived again
    time.sleep(freshness.RACY_S + 0.1)
    imported, compacted = _show(root, run.id)
    assert "duckdb" in imported and _close(json.loads(compacted)[0]["metrics"], json.loads(grown)[0]["metrics"])
    assert _show(root, run.id) == ([], compacted)

    db = sqlite3.connect(store_catalog.catalog_path(root))
    db.execute("UPDATE run_overviews SET overview = '{not json'")
    db.commit()
    db.close()
    imported, again = _show(root, run.id)
    assert "duckdb" in imported and _close(json.loads(again), json.loads(compacted))
