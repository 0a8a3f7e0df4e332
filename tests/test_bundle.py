"""Bundles: round trip between two stores, tamper and tar-slip refusal with nothing written,
idempotent and incremental imports, compacted runs, receipts that let the air-gapped gc work."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

import trackstore
from tests.fixtures.stores import make_run, mark_synced, store_snapshot
from tests.helpers import run_cli
from trackstore.errors import BundleError
from trackstore.read.listing import list_runs
from trackstore.store import schema
from trackstore.store.ledger import iter_cursors, pending_counts
from trackstore.upkeep import bundle as B
from trackstore.upkeep import compact as C
from trackstore.upkeep import gc as G


@pytest.fixture
def two(tmp_path):
    a, b = tmp_path / "cluster", tmp_path / "online"
    a.mkdir()
    b.mkdir()
    return a, b


def tree(root):
    """Every file under a store (path -> sha256), minus lock bookkeeping."""
    out = {}
    for dirpath, _d, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if rel.startswith("_locks"):
                continue
            out[rel] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def duck(root, q):
    """Answer ``q`` with the product's own query layer."""
    return trackstore.connect(root).execute(q).fetchall()


Q = ["SELECT project, run_id, key, step, value, ts, writer, seq FROM metrics ORDER BY ALL",
     "SELECT project, run_id, step, split, input, output, score, writer, seq FROM samples ORDER BY ALL",
     "SELECT project, run_id, name, status, created_at, ended_at, config, tags FROM runs ORDER BY ALL"]


@pytest.mark.parametrize("compress", [None, "zstd", "gzip"])
def test_round_trip_gives_identical_queries(two, tmp_path, compress):
    a, b = two
    p1 = make_run(a, "p", chunks=3)
    make_run(a, "q", chunks=2, status="failed")
    out = tmp_path / "bundle.tar"
    res = B.export_runs(a, list_runs(a), out, compress=compress)
    m = res.manifest
    assert m["source_host"] and m["schema_version"] == schema.SCHEMA_VERSION and len(m["runs"]) == 2
    run1 = next(r for r in m["runs"] if r["run_id"] == p1.run_id)
    assert run1["rows"]["metrics"] == 30 and run1["rows"]["samples"] == 3 and run1["schema_versions"] == [schema.SCHEMA_VERSION]
    assert all(len(f["sha256"]) == 64 and f["size"] >= 0 for f in m["files"])
    imp = B.import_bundle(b, out)
    assert sorted(r.action for r in imp.runs) == ["added", "added"]
    assert store_snapshot(b) == store_snapshot(a)
    assert [duck(b, q) for q in Q] == [duck(a, q) for q in Q]
    assert [(r.run_id, r.status, r.meta["config"]) for r in list_runs(b)] == \
           [(r.run_id, r.status, r.meta["config"]) for r in list_runs(a)]
    assert not (b / B.IMPORT_DIR).exists()


def test_import_twice_changes_nothing(two, tmp_path):
    a, b = two
    make_run(a)
    out = tmp_path / "b.tar"
    B.export_runs(a, list_runs(a), out)
    B.import_bundle(b, out)
    before = tree(b)
    again = B.import_bundle(b, out)
    assert [r.action for r in again.runs] == ["unchanged"]
    assert tree(b) == before


def test_growing_run_adds_only_new_parts(two, tmp_path):
    a, b = two
    run = trackstore.init("p", root=a)
    for i in range(3):
        run.log({"x": i}, step=i)
        run.flush()
    B.export_runs(a, list_runs(a), tmp_path / "1.tar")
    B.import_bundle(b, tmp_path / "1.tar")
    assert len(list_runs(b)[0].paths.parts("metrics")) == 3
    for i in range(3, 5):
        run.log({"x": i}, step=i)
        run.flush()
    run.finish(compact=False)
    B.export_runs(a, list_runs(a), tmp_path / "2.tar")
    res = B.import_bundle(b, tmp_path / "2.tar")
    (r,) = res.runs
    assert r.action == "updated" and r.rows_added == {"metrics": 2} and r.files_replaced == 0
    assert store_snapshot(b) == store_snapshot(a)
    assert list_runs(b)[0].meta["status"] == "finished"  # the newer run.json won


def test_compacted_source_replaces_small_parts_without_duplicates(two, tmp_path):
    a, b = two
    p = make_run(a, chunks=4)
    B.export_runs(a, list_runs(a), tmp_path / "small.tar")
    B.import_bundle(b, tmp_path / "small.tar")
    C.compact(a, [p])
    B.export_runs(a, list_runs(a), tmp_path / "big.tar")
    res = B.import_bundle(b, tmp_path / "big.tar")
    assert res.runs[0].files_replaced == 8  # 4 metrics + 4 samples parts superseded
    assert store_snapshot(b) == store_snapshot(a)
    assert duck(b, "SELECT count(*) FROM metrics") == [(40,)]
    # and the other way round: small parts arriving where the compacted file is are skipped
    before = tree(b)
    again = B.import_bundle(b, tmp_path / "small.tar")
    assert again.runs[0].files_added == 0 and tree(b) == before


@pytest.mark.parametrize("compress,limit", [(None, 8192), ("zstd", 1024)])
def test_split_volumes(two, tmp_path, compress, limit):
    a, b = two
    make_run(a, chunks=10)
    res = B.export_runs(a, list_runs(a), tmp_path / "b.tar", split_bytes=limit, compress=compress)
    assert len(res.paths) > 1 and all(p.stat().st_size <= limit for p in res.paths)
    assert res.paths[0].name == "b.tar.000"
    B.import_bundle(b, tmp_path / "b.tar")
    assert store_snapshot(b) == store_snapshot(a)


# ---------------------------------------------------------------------------- hostile bundles
def _rewrite(src, dst, edit):
    """Copy a bundle member by member; ``edit(info, data)`` returns replacements (or None to drop)."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isreg() else b""
            for info, payload in edit(m, data):
                tout.addfile(info, io.BytesIO(payload) if payload is not None else None)


def _member(name, data=b"x", **kw):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti, data


def _with_extra(first_only):
    def edit(m, data):
        out = []
        if m.name.endswith("run.json") and first_only:
            out.extend(first_only())
        out.append((m, data))
        return out
    return edit


HOSTILE = {
    "dotdot": lambda: [_member("trackstore-bundle/runs/project=p/run=r/../../../../evil.txt")],
    "absolute": lambda: [_member("/tmp/trackstore-evil-abs.txt")],
    "outside": lambda: [_member("elsewhere/evil.txt")],
    "symlink": lambda: [(_member("trackstore-bundle/runs/project=p/run=r/metrics/link.parquet", b"",
                                 type=tarfile.SYMTYPE, linkname="/etc/passwd")[0], None)],
    "hardlink": lambda: [(_member("trackstore-bundle/runs/project=p/run=r/metrics/h.parquet", b"",
                                  type=tarfile.LNKTYPE, linkname="/etc/passwd")[0], None)],
    "device": lambda: [(_member("trackstore-bundle/runs/project=p/run=r/dev", b"", type=tarfile.CHRTYPE,
                                devmajor=1, devminor=3)[0], None)],
    "bad-name": lambda: [_member("trackstore-bundle/runs/project=p/run=a%2f..%2fb/x")],
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_entries_rejected_with_nothing_written(two, tmp_path, attack):
    a, b = two
    make_run(a)
    good = tmp_path / "good.tar"
    B.export_runs(a, list_runs(a), good)
    bad = tmp_path / "bad.tar"
    _rewrite(good, bad, _with_extra(HOSTILE[attack]))
    existing = make_run(b, "mine")
    before = tree(b)
    with pytest.raises(BundleError, match="refusing bundle"):
        B.import_bundle(b, bad)
    assert tree(b) == before and not (b / B.IMPORT_DIR).exists()
    assert not os.path.exists("/tmp/trackstore-evil-abs.txt") and not (tmp_path / "evil.txt").exists()
    assert [r.run_id for r in list_runs(b)] == [existing.run_id]
    cli = run_cli("import", str(bad), root=b)
    assert cli.returncode == 9 and "refusing bundle" in cli.stderr


def test_tampered_checksum_rejected(two, tmp_path):
    a, b = two
    make_run(a)
    good = tmp_path / "good.tar"
    B.export_runs(a, list_runs(a), good)

    def flip(m, data):
        if m.name.endswith(".parquet") and "metrics" in m.name and not flip.done:
            flip.done = True
            data = data[:-20] + bytes(20)
            m.size = len(data)
        return [(m, data)]
    flip.done = False
    bad = tmp_path / "bad.tar"
    _rewrite(good, bad, flip)
    with pytest.raises(BundleError, match="checksum"):
        B.import_bundle(b, bad)
    assert list_runs(b) == [] and tree(b) == {}


def test_truncated_and_missing_manifest_rejected(two, tmp_path):
    a, b = two
    make_run(a)
    good = tmp_path / "good.tar"
    B.export_runs(a, list_runs(a), good, compress="zstd")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(BundleError):
        B.import_bundle(b, cut)
    nomani = tmp_path / "nomani.tar"
    plain = tmp_path / "plain.tar"
    B.export_runs(a, list_runs(a), plain)
    _rewrite(plain, nomani, lambda m, d: [] if m.name.endswith("manifest.json") else [(m, d)])
    with pytest.raises(BundleError, match="manifest"):
        B.import_bundle(b, nomani)
    assert list_runs(b) == []


def test_existing_run_with_different_content_is_refused(two, tmp_path):
    a, b = two
    p = make_run(a)
    out = tmp_path / "b.tar"
    B.export_runs(a, list_runs(a), out)
    B.import_bundle(b, out)
    local = list_runs(b)[0].paths
    victim = local.parts("metrics")[0]
    victim.write_bytes(local.parts("metrics")[1].read_bytes())  # same name, other bytes
    meta = json.loads(local.run_file.read_text())
    before = tree(b)
    with pytest.raises(BundleError, match="different content"):
        B.import_bundle(b, out)
    assert tree(b) == before
    meta["created_at"] = "2001-01-01T00:00:00+00:00"
    local.run_file.write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="different run"):
        B.import_bundle(b, out)
    assert p.run_id in {r.run_id for r in list_runs(b)}


# ---------------------------------------------------------------------------- receipts
def test_receipt_carries_sync_state_back_and_unlocks_gc(two, tmp_path):
    cluster, online = two
    p = make_run(cluster, ended_days_ago=40)
    B.export_runs(cluster, list_runs(cluster), tmp_path / "runs.tar")
    B.import_bundle(online, tmp_path / "runs.tar")
    online_run = list_runs(online)[0].paths
    mark_synced(online, online_run, fraction=0.5)  # first, partial sync on the connected side
    B.export_receipt(online, tmp_path / "r1.tar")
    res = B.import_bundle(cluster, tmp_path / "r1.tar", expect="receipt")
    assert res.cursors_merged == 1
    (c,) = iter_cursors(cluster)
    assert pending_counts(p, c)["metrics"] == 20  # 40 rows, half acknowledged
    assert not G.plan(cluster, G.Policy(older_than_s=0)).delete  # still half unsynced
    mark_synced(online, online_run)  # the rest is uploaded
    out = run_cli("export", "--receipt", "-o", str(tmp_path / "r2.tar"), root=online)
    assert out.returncode == 0, out.stderr
    cli = run_cli("import", "--receipt", str(tmp_path / "r2.tar"), root=cluster)
    assert cli.returncode == 0, cli.stderr
    (c,) = iter_cursors(cluster)
    assert not any(pending_counts(p, c).values()) and c.synced_status == "finished"
    plan = G.plan(cluster, G.Policy(older_than_s=30 * 86400))
    assert [x.run_id for x in plan.delete] == [p.run_id]
    # merging an older receipt again loses nothing (union of acknowledged rows)
    B.import_bundle(cluster, tmp_path / "r1.tar")
    (c,) = iter_cursors(cluster)
    assert not any(pending_counts(p, c).values())


def test_receipt_and_runs_flags_must_match(two, tmp_path):
    a, b = two
    make_run(a)
    B.export_runs(a, list_runs(a), tmp_path / "runs.tar")
    with pytest.raises(BundleError, match="not a 'receipt'"):
        B.import_bundle(b, tmp_path / "runs.tar", expect="receipt")


def test_reimported_gc_deleted_run_gets_its_cursor_back(two, tmp_path):
    """A run gc deleted and that comes back later keeps its sync state: no second upload."""
    a, _ = two
    p = make_run(a)
    mark_synced(a, p)
    B.export_runs(a, list_runs(a), tmp_path / "b.tar")
    G.gc(a, G.Policy(older_than_s=0))
    assert list_runs(a) == [] and list(iter_cursors(a)) == []
    B.import_bundle(a, tmp_path / "b.tar")
    (c,) = iter_cursors(a)
    assert not any(pending_counts(p, c).values())


def test_cli_export_import(two, tmp_path):
    a, b = two
    p = make_run(a, "proj")
    make_run(a, "other")
    out = run_cli("export", "--project", "proj", "--compress", "--split", "1M", "-o", str(tmp_path / "x.tar"), root=a)
    assert out.returncode == 0, out.stderr
    assert "wrote 1 run," in out.stdout
    none = run_cli("export", "-o", str(tmp_path / "y.tar"), root=a)
    assert none.returncode == 2
    imp = run_cli("import", str(tmp_path / "x.tar"), "--format", "json", root=b)
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)[0]["run_id"] == p.run_id
    assert [r.run_id for r in list_runs(b)] == [p.run_id]


@pytest.mark.parametrize("receipt", [False, True], ids=["runs", "receipt"])
def test_export_into_a_missing_folder_says_so_and_writes_nothing(two, tmp_path, receipt):
    a, _ = two
    make_run(a, "proj")
    target = tmp_path / "usb" / "x.tar"  # the drive is not mounted: its folder is missing
    out = run_cli("export", *(["--receipt"] if receipt else []), "--project", "proj", "-o", str(target), root=a)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"{tmp_path / 'usb'} does not exist" in out.stderr
    assert not (tmp_path / "usb").exists()


def _backdate(paths, days):
    """Make a run look created, updated and ended ``days`` ago (what --since looks at)."""
    import time

    from trackstore.store.clock import iso
    from trackstore.store.meta import read_run_json, write_run_json

    meta = read_run_json(paths)
    t = iso(time.time() - days * 86400)
    meta.update(created_at=t, updated_at=t, ended_at=t)
    write_run_json(paths, meta)


def test_cli_export_since(two, tmp_path):
    import datetime

    a, _ = two
    old = make_run(a, "p")
    _backdate(old, 30)
    new = make_run(a, "p")

    def exported(since, name):
        out = run_cli("export", "--since", since, "-o", str(tmp_path / name), root=a)
        assert out.returncode == 0, out.stderr
        dest = tmp_path / f"into-{name}"
        dest.mkdir()
        B.import_bundle(dest, tmp_path / name)
        return {r.run_id for r in list_runs(dest)}

    assert exported("7d", "week.tar") == {new.run_id}
    ten_days_ago = (datetime.date.today() - datetime.timedelta(days=10)).isoformat()
    assert exported(ten_days_ago, "date.tar") == {new.run_id}
    sixty_days_ago = (datetime.date.today() - datetime.timedelta(days=60)).isoformat()
    assert exported(sixty_days_ago, "both.tar") == {old.run_id, new.run_id}
    # --since narrows --project too
    out = run_cli("export", "--project", "p", "--since", "7d", "-o", str(tmp_path / "pw.tar"), root=a)
    assert out.returncode == 0 and "wrote 1 run," in out.stdout, out.stderr
    for bad in ("yesterday", "7 days"):
        out = run_cli("export", "--since", bad, "-o", str(tmp_path / "bad.tar"), root=a)
        assert out.returncode == 2 and "invalid --since" in out.stderr, (bad, out.stderr)
    assert not (tmp_path / "bad.tar").exists()


def test_import_killed_before_applying_leaves_store_unchanged(two, tmp_path):
    """SIGKILL after extraction and verification, before anything is moved into place."""
    import signal
    import textwrap

    from tests.helpers import python_child
    from trackstore.upkeep import doctor as D

    a, b = two
    make_run(a)
    B.export_runs(a, list_runs(a), tmp_path / "b.tar")
    mine = make_run(b, "mine")
    before = store_snapshot(b)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {repo!r})
        from trackstore.upkeep import bundle as B
        from trackstore.upkeep.bundle import import_
        import_.import_runs = lambda root, st: os.kill(os.getpid(), 9)
        B.import_bundle({str(b)!r}, {str(tmp_path / "b.tar")!r})
    """)
    child = python_child(code)
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert store_snapshot(b) == before and [r.run_id for r in list_runs(b)] == [mine.run_id]
    assert sorted(f.check for f in D.diagnose(b).findings) == ["import_leftover", "stale_lock"]
    assert D.doctor(b, fix_problems=True).healthy
    B.import_bundle(b, tmp_path / "b.tar")  # the dead importer's lock is taken over
    assert store_snapshot(b) == store_snapshot(a) | before


def test_a_receipt_with_an_unconfirmed_session_merges_its_rows_as_to_recheck():
    """A receipt written while a SwanLab-like session was open (its rows not yet durable at the
    target) must not merge those rows as delivered: they are rolled back and rechecked, and rows
    the other side did confirm need no recheck."""
    from trackstore.store.ledger import Cursor
    from trackstore.store.ranges import RangeSet

    def ids(a, b):
        rs = RangeSet()
        rs.add_seqs("w1", list(range(a, b)))
        return rs

    confirmed = ids(0, 10)
    incoming = Cursor("swanlab", "offline:/x", "p", "r1", acked={"metrics": ids(0, 20)}, skipped={"metrics": 3},
                      remote={"id": "new"},
                      session={"acked": {"metrics": confirmed.to_json()}, "skipped": {"metrics": 1},
                               "remote": {"id": "old"}},
                      in_doubt={"kind": "metrics", "rows": ids(20, 25).to_json(), "batch_id": "b", "since": "now"})
    local = Cursor("swanlab", "offline:/x", "p", "r1", acked={"metrics": ids(0, 12)})
    merged = B.merge_cursors(local, incoming)
    assert merged.acked["metrics"] == ids(0, 12)  # not rows 12-19, handed over but never confirmed
    assert merged.recheck == {"metrics": ids(12, 25)}  # those, and the batch in doubt
    assert merged.session is None and merged.in_doubt is None
    assert incoming.session is not None  # the caller's cursor is not changed
