"""Compaction keeps every row with its (writer, seq), keeps query answers and sync cursors exact,
swaps kind folders atomically for readers, and recovers from a crash at any point."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import textwrap
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import trackstore
from tests.fixtures.stores import make_run, mark_synced, store_snapshot
from tests.helpers import python_child, run_cli
from trackstore.read.reader import read_kind
from trackstore.store import merge as C
from trackstore.store.ledger import load_cursor, pending_counts
from trackstore.upkeep.compact import compact

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sql(root, q):
    """Answer ``q`` with the product's own query layer (DuckDB views over the store)."""
    return trackstore.connect(root).execute(q).fetchall()


QUERIES = [
    "SELECT count(*), count(DISTINCT (writer, seq)) FROM metrics",
    "SELECT run_id, key, step, value, ts FROM metrics ORDER BY ALL",
    "SELECT run_id, key, max(value), min(step), max(step) FROM metrics GROUP BY ALL ORDER BY ALL",
    "SELECT run_id, step, input, output, score FROM samples ORDER BY ALL",
    "SELECT project, run_id, status, last_step FROM runs ORDER BY ALL",
]


def test_compaction_keeps_rows_and_query_answers(root):
    a = make_run(root, chunks=6)
    b = make_run(root, "q", chunks=3)
    before_sql = [sql(root, q) for q in QUERIES]
    before = store_snapshot(root)
    assert len(a.parts("metrics")) == 6 and len(a.parts("samples")) == 6
    results = compact(root, [a, b])
    assert all(r.changed and not r.skipped for r in results)
    for p in (a, b):
        for kind in ("metrics", "samples"):
            parts = p.parts(kind)
            assert len(parts) == 1 and "-000000000000-" in parts[0].name
            md = pq.ParquetFile(parts[0]).schema_arrow.metadata
            assert md[b"trackstore.kind"] == kind.encode()
    assert store_snapshot(root) == before
    assert [sql(root, q) for q in QUERIES] == before_sql
    assert not any(n.startswith(".compact") for n in os.listdir(a.dir))
    # a second pass has nothing to do
    assert not any(r.changed for r in compact(root, [a, b]))


def test_merged_metrics_are_clustered_by_key_and_skippable(root, tmp_path):
    """A merged metrics part is sorted by key (string order), then step and seq, keeps key
    statistics and small row groups, so a question about one key skips the others' rows."""
    run = trackstore.init("p", root=root, flush_interval=3600)
    keys = [f"k{i:02d}" for i in range(40)][::-1]  # logged in reverse string order
    for chunk in range(4):
        for s in range(chunk * 1000, (chunk + 1) * 1000):
            run.log({k: float(s) for k in keys}, step=s)
        run.flush()
    run.finish(compact=False)
    paths = run.paths
    assert len(paths.parts("metrics")) == 4
    before = sql(root, "SELECT key, step, value, seq FROM metrics ORDER BY ALL")
    latest_before = sql(root, "SELECT key, step, value FROM latest ORDER BY ALL")
    assert compact(root, [paths])[0].changed
    (merged,) = paths.parts("metrics")
    table = pq.read_table(merged)
    body = table.filter(pc.invert(table.column("last_of_key")))
    order = list(zip(body.column("key").to_pylist(), body.column("step").to_pylist(), body.column("seq").to_pylist()))
    assert order == sorted(order)
    md = pq.ParquetFile(merged).metadata
    assert md.num_row_groups > 4  # several per file, each holding a narrow range of keys
    key_col = md.schema.names.index("key")
    stats = [md.row_group(i).column(key_col).statistics for i in range(md.num_row_groups)]
    assert all(st is not None and st.has_min_max for st in stats)
    assert [sql(root, "SELECT key, step, value, seq FROM metrics ORDER BY ALL"),
            sql(root, "SELECT key, step, value FROM latest ORDER BY ALL")] == [before, latest_before]
    con = trackstore.connect(root)
    plan = con.execute("EXPLAIN ANALYZE SELECT step, value FROM metrics WHERE key = 'k07'").fetchall()[0][1]
    scanned, total = map(int, re.search(r"Row Groups Scanned: (\d+) / (\d+)", plan).groups())
    assert scanned <= 2 < total
    assert con.execute("SELECT count(*), min(step), max(step) FROM metrics WHERE key = 'k07'").fetchone() == (4000, 0, 3999)


def test_cursor_stays_exact_across_compaction(root):
    """Sync half, compact, "sync the rest": the rest is exactly the unsent half."""
    p = make_run(root, chunks=8)
    cursor = mark_synced(root, p, fraction=0.5)
    total = read_kind(p, "metrics").num_rows
    pending_before = pending_counts(p, cursor)
    rest_before = read_kind(p, "metrics", exclude=cursor.acked["metrics"]).to_pylist()
    assert pending_before["metrics"] == total - total // 2
    compact(root, [p])
    assert len(p.parts("metrics")) == 1
    cursor = load_cursor(root, cursor.target, cursor.destination, p.project, p.run_id)
    assert pending_counts(p, cursor) == pending_before
    rest_after = read_kind(p, "metrics", exclude=cursor.acked["metrics"]).to_pylist()
    assert rest_after == rest_before
    # acknowledging the rest completes the run: every row sent exactly once
    cursor.acked["metrics"].add_table(read_kind(p, "metrics", exclude=cursor.acked["metrics"]))
    assert len(cursor.acked["metrics"]) == total


def test_live_run_is_not_compacted(root):
    run = trackstore.init("p", root=root)
    for i in range(3):
        run.log({"x": i}, step=i)
        run.flush()
    res = C.compact_run(run.paths)
    assert res.skipped == "a writer is alive" and len(run.paths.parts("metrics")) == 3
    run.finish(compact=False)
    assert C.compact_run(run.paths).changed


def test_run_being_synced_is_skipped(root):
    p = make_run(root)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        lk = locks.acquire({str(root)!r}, "sync-mlflow-x", info={{"runs": [{p.run_id!r}]}})
        print("held", flush=True)
        time.sleep(60)
    """)
    child = python_child(code)
    try:
        assert child.stdout.readline().strip() == "held"
        (res,) = compact(root, [p])
        assert res.skipped and "being synced" in res.skipped and len(p.parts("metrics")) == 4
    finally:
        child.kill()
        child.wait()
    assert compact(root, [p])[0].changed


def test_reader_sees_old_or_new_never_both(root):
    """A concurrent reader process lists and reads the kind folder while compaction swaps it
    back and forth: every successful read has exactly the right row count. The reader follows
    the store's protocol (relist): a listing that straddled a swap is taken again, and a part
    gone when opened means the folder changed (counted apart from the reads)."""
    p = make_run(root, chunks=10, samples=False)
    kind_dir = p.kind_dir("metrics")
    n = read_kind(p, "metrics").num_rows
    small = sorted(kind_dir.iterdir())
    stash = root / "stash"
    stash.mkdir()
    for f in small:
        os.link(f, stash / f.name)
    C.compact_run(p)
    merged = sorted(kind_dir.iterdir())
    stash2 = root / "stash2"
    stash2.mkdir()
    for f in merged:
        os.link(f, stash2 / f.name)
    stop = root / "stop"
    progress = root / "progress"
    code = textwrap.dedent(f"""
        import os, sys
        import pyarrow.parquet as pq
        ok = bad = missing = 0
        d = {str(kind_dir)!r}
        print("ready", flush=True)
        while not os.path.exists({str(stop)!r}):
            try:
                # the store's reader protocol (trackstore.store.layout.relist): a listing during
                # which the folder changed identity may have come back short (the old folder is
                # emptied after the swap): it is taken again
                before = os.stat(d)
                names = [x for x in os.listdir(d) if x.endswith(".parquet") and not x.startswith(".")]
                if os.stat(d).st_ino != before.st_ino:
                    continue
                rows = sum(pq.ParquetFile(os.path.join(d, x)).metadata.num_rows for x in names)
            except FileNotFoundError:
                missing += 1
                continue
            if rows == {n}:
                ok += 1
            else:
                bad += 1
            if ok % 10 == 0:
                with open({str(progress)!r} + ".tmp", "w") as f:
                    f.write(str(ok))
                os.replace({str(progress)!r} + ".tmp", {str(progress)!r})
        print(ok, bad, missing, flush=True)
    """)
    reader = python_child(code)
    assert reader.stdout.readline().strip() == "ready"
    swaps = 0
    try:
        # keep swapping until the reader has made many reads while swaps were happening
        while swaps < 40 or (swaps < 20000 and (not progress.exists() or int(progress.read_text() or 0) < 100)):
            src = stash if swaps % 2 == 0 else stash2
            current = {f.name for f in kind_dir.iterdir() if f.suffix == ".parquet"}

            def build(staging, src=src, current=current):
                for f in src.iterdir():
                    os.link(f, staging / f.name)
                return sorted(current - {f.name for f in src.iterdir()})

            C.replace_kind_dir(kind_dir, build)
            swaps += 1
    finally:
        stop.write_text("")
        out, err = reader.communicate(timeout=60)
    ok, bad, missing = map(int, out.split())
    assert bad == 0, (ok, bad, missing, err)
    assert ok > 0
    assert read_kind(p, "metrics").num_rows == n


def test_product_readers_stay_exact_while_compaction_swaps(root):
    """The sync reader (read_kind), SQL over the views and curves (trackstore.read.points) list a
    folder and then open its files; a swap in between must cost a retry, never a wrong count
    or an error. Another process swaps the metrics folder between its flushed and merged forms."""
    from trackstore.read.listing import resolve_run
    from trackstore.read.overview import curves
    from trackstore.read.points import read_points
    from trackstore.read.views import connect, run_sql

    p = make_run(root, chunks=12, samples=False)
    kind_dir = p.kind_dir("metrics")
    n = read_kind(p, "metrics").num_rows
    forms = [root / "flushed", root / "merged"]
    forms[0].mkdir()
    for f in kind_dir.iterdir():
        os.link(f, forms[0] / f.name)
    C.compact_run(p)
    forms[1].mkdir()
    for f in kind_dir.iterdir():
        os.link(f, forms[1] / f.name)
    stop = root / "stop"
    code = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        sys.path.insert(0, {REPO!r})
        from trackstore.store import merge as C
        kind_dir, forms = Path({str(kind_dir)!r}), [Path({str(forms[0])!r}), Path({str(forms[1])!r})]
        swaps = 0
        print("ready", flush=True)
        while not os.path.exists({str(stop)!r}):
            src = forms[swaps % 2]
            current = {{f.name for f in kind_dir.iterdir() if f.suffix == ".parquet"}}
            def build(staging, src=src, current=current):
                for f in src.iterdir():
                    os.link(f, staging / f.name)
                return sorted(current - {{f.name for f in src.iterdir()}})
            C.replace_kind_dir(kind_dir, build)
            swaps += 1
            time.sleep(0.02)  # a swap every ~25 ms: many reads straddle one, none meets a storm
        print(swaps, flush=True)
    """)
    info = resolve_run(p.run_id, root)
    con = connect(root)
    swapper = python_child(code)
    try:
        assert swapper.stdout.readline().strip() == "ready"
        for _ in range(60):
            assert read_kind(p, "metrics").num_rows == n
            assert run_sql(con, "SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": n}]
            assert sum(t.num_rows for t in read_points(p, ["loss", "acc"]).values()) == n
            assert sum(curves([info], ["loss"]).column("n").to_pylist()) == n // 2
    finally:
        stop.write_text("")
        out, err = swapper.communicate(timeout=60)
        con.close()
    assert int(out.split()[-1]) > 10, err


def _kill_at(root, p, where):
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        from trackstore.store import merge as C
        from trackstore.store.layout import RunPaths
        def die(*a, **k):
            os.kill(os.getpid(), 9)
        {where}
        C.compact_run(RunPaths(__import__("pathlib").Path({str(root)!r}), {p.project!r}, {p.run_id!r}))
    """)
    child = python_child(code)
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()


@pytest.mark.parametrize("where", [
    "C._exchange = die",                                     # new folder complete, not swapped
    "C._finish_swap = die",                                  # swapped, old folder not removed
    "C._exchange = lambda a, b: False\n        import os as _o\n        _r = _o.rename\n"
    "        calls = []\n"
    "        def rn(a, b):\n            calls.append(1)\n            if len(calls) == 2: die()\n            _r(a, b)\n"
    "        C.os.rename = rn",                               # fallback swap killed between renames
])
def test_sigkill_mid_compaction_leaves_consistent_run(root, where):
    p = make_run(root, chunks=5)
    before = store_snapshot(root)
    _kill_at(root, p, where)
    kind_dir = p.kind_dir("metrics")
    if kind_dir.exists():  # whatever is listed is complete: no duplicated or missing rows
        assert store_snapshot(root) == before
    assert C.has_leftovers(kind_dir)
    C.recover(p)
    assert not C.has_leftovers(kind_dir)
    assert store_snapshot(root) == before
    C.compact_run(p)
    assert store_snapshot(root) == before and len(p.parts("metrics")) == 1


def test_rename_fallback_swap(root, monkeypatch):
    p = make_run(root, chunks=3)
    before = store_snapshot(root)
    monkeypatch.setattr(C, "_exchange", lambda a, b: False)
    res = C.compact_run(p)
    assert res.swap == "rename" and store_snapshot(root) == before and len(p.parts("metrics")) == 1


def test_straggler_written_during_swap_is_kept(root):
    p = make_run(root, chunks=3)
    kind_dir = p.kind_dir("metrics")
    late = root / "late.parquet"
    os.link(p.parts("metrics")[0], late)

    def build(staging):
        for f in kind_dir.iterdir():
            os.link(f, staging / f.name)
        os.link(late, kind_dir / "part-late-writer-000000000000.parquet")  # appears after staging
        return []

    C.replace_kind_dir(kind_dir, build)
    assert (kind_dir / "part-late-writer-000000000000.parquet").exists()


def test_cli_compact(root):
    p = make_run(root, chunks=3)
    dry = run_cli("compact", "--dry-run", "--format", "json", root=root)
    assert dry.returncode == 0, dry.stderr
    assert len(p.parts("metrics")) == 3
    out = run_cli("compact", p.run_id, "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    assert '"files_after": 1' in out.stdout and len(p.parts("metrics")) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "renameat2"),
                    reason="the atomic exchange is renameat2(RENAME_EXCHANGE), a Linux call")
def test_a_local_linux_filesystem_gets_the_atomic_exchange(root, monkeypatch):
    """Local Linux filesystems (ext4, tmpfs, xfs, btrfs: where tests run) swap a kind folder in one
    atomic exchange, so no reader ever sees it absent; the probe leaves nothing behind, and a
    filesystem that refuses the exchange is answered with the two-rename swap."""
    assert C.swap_method(root) == "exchange"
    assert list(root.iterdir()) == []  # the probe folders are gone
    p = make_run(root, chunks=3)
    assert C.compact_run(p).swap == "exchange"
    monkeypatch.setattr(C, "_exchange", lambda a, b: False)
    assert C.swap_method(root) == "rename"


def test_sync_half_compact_sync_rest_is_exact_at_the_target(root, tmp_path, monkeypatch):
    """Real engine, real MLflow file store (which keeps every re-sent point, so a duplicate
    would show): half the run is synced while it is live, then the finished run is compacted
    into one file, then the rest is synced. The target holds every point exactly once."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    run = trackstore.init("proj", root=root)
    keys = [f"k{i}" for i in range(3)]

    def log(steps):
        for s in steps:
            run.log({k: s + i / 10 for i, k in enumerate(keys)}, step=s)
            if s % 10 == 9:
                run.flush()

    log(range(0, 50))
    first = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root, timeout=300)
    assert first.returncode == 0, first.stderr
    log(range(50, 100))
    run.finish(compact=False)
    assert len(run.paths.parts("metrics")) == 10
    (res,) = compact(root, [run.paths])
    assert res.changed and len(run.paths.parts("metrics")) == 1
    rest = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root, timeout=300)
    assert rest.returncode == 0, rest.stderr
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("proj")
    (remote,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run.id}'")
    got = sorted((k, m.step, m.value) for k in keys for m in client.get_metric_history(remote.info.run_id, k))
    want = sorted((r["key"], r["step"], r["value"]) for r in read_kind(run.paths, "metrics").to_pylist())
    assert len(got) == 300 and got == want


def test_a_listing_begun_before_a_swap_stays_whole_while_the_old_folder_settles(root):
    """The old folder is emptied only ``settle`` seconds after the swap: a reader that opened it
    just before (a DuckDB glob, say) still reads every name meanwhile."""
    import threading

    p = make_run(root, chunks=6, samples=False)
    kind_dir = p.kind_dir("metrics")
    old_names = sorted(f.name for f in kind_dir.iterdir())
    old_inode = os.stat(kind_dir).st_ino
    listing = os.scandir(kind_dir)  # opendir now, read later
    try:
        parts = p.parts("metrics")
        worker = threading.Thread(target=C.replace_kind_dir, args=(kind_dir, lambda staging: C._build_merged(
            staging, "metrics", parts, [parts])[0]), kwargs={"settle": 0.5})
        worker.start()
        deadline = time.monotonic() + 10
        while os.stat(kind_dir).st_ino == old_inode and time.monotonic() < deadline:
            time.sleep(0.001)
        assert os.stat(kind_dir).st_ino != old_inode  # swapped; the old folder is settling
        time.sleep(0.2)  # a slow reader: without the settle time the old folder is empty by now
        assert sorted(e.name for e in listing) == old_names
    finally:
        listing.close()
        worker.join(timeout=30)
    assert len(p.parts("metrics")) == 1


def test_a_part_that_vanishes_mid_merge_leaves_the_kind_unchanged(root, monkeypatch):
    """Someone else's work (a doctor quarantine, say) removes a part between planning and
    merging: compaction reports the kind as left unchanged instead of crashing."""
    p = make_run(root, chunks=4, samples=False)
    real = C._plan_groups

    def plan_then_lose_one(parts, kind, target_bytes):
        groups = real(parts, kind, target_bytes)
        if kind == "metrics" and groups:
            os.unlink(groups[0][1])
        return groups

    monkeypatch.setattr(C, "_plan_groups", plan_then_lose_one)
    res = C.compact_run(p)
    assert res.skipped and "left unchanged" in res.skipped
    assert len(p.parts("metrics")) == 3 and not C.has_leftovers(p.kind_dir("metrics"))
