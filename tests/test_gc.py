"""gc deletes only what is safe: never live runs, unsynced runs (without the flag) or runs being
synced; a gc killed mid-deletion leaves a consistent store that the next gc finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.stores import make_run, mark_synced, store_snapshot
from tests.helpers import python_child, run_cli
from trackstore.errors import LockHeldError, UsageError
from trackstore.read.listing import list_runs
from trackstore.store.layout import SYNC_DIR
from trackstore.store.ledger import iter_cursors
from trackstore.upkeep import gc as G

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = 86400


def ids(root):
    return {r.run_id for r in list_runs(root)}


def synced_run(root, project="p", days=40, **kw):
    p = make_run(root, project, ended_days_ago=days, **kw)
    mark_synced(root, p)
    return p


def test_default_deletes_only_old_fully_synced_runs(root):
    old_synced = synced_run(root)
    new_synced = synced_run(root, days=1)
    old_unsynced = make_run(root, ended_days_ago=40)
    old_partial = make_run(root, ended_days_ago=40)
    mark_synced(root, old_partial, fraction=0.5)
    plan, result = G.gc(root, G.Policy(older_than_s=30 * DAY))
    assert [c.run_id for c in result.deleted] == [old_synced.run_id]
    assert ids(root) == {new_synced.run_id, old_unsynced.run_id, old_partial.run_id}
    reasons = {c.run_id: c.reason for c in plan.keep}
    assert "never synced" in reasons[old_unsynced.run_id]
    assert "rows pending" in reasons[old_partial.run_id]
    assert "newer than" in reasons[new_synced.run_id]
    assert result.freed_bytes > 0 and not old_synced.dir.exists()
    # the deleted run's cursor is archived, not live sync state any more
    assert list(iter_cursors(root, run_id=old_synced.run_id)) == []
    assert list((root / SYNC_DIR / G.ARCHIVE_DIR).rglob(f"run={old_synced.run_id}.json"))


def test_unsynced_and_force_widen_explicitly(root):
    unsynced = make_run(root, ended_days_ago=40)
    partial = make_run(root, ended_days_ago=40)
    mark_synced(root, partial, fraction=0.5)
    _, res = G.gc(root, G.Policy(older_than_s=0, include_unsynced=True))
    assert [c.run_id for c in res.deleted] == [unsynced.run_id]
    _, res = G.gc(root, G.Policy(older_than_s=0, force=True))
    assert [c.run_id for c in res.deleted] == [partial.run_id]


def test_require_synced_to(root):
    only_mlflow = synced_run(root)
    both = synced_run(root)
    mark_synced(root, both, target="wandb", destination="ent/proj")
    plan = G.plan(root, G.Policy(older_than_s=0, require_synced_to=("wandb", "mlflow")))
    assert [c.run_id for c in plan.delete] == [both.run_id]
    assert "wandb" in {c.run_id: c.reason for c in plan.keep}[only_mlflow.run_id]


def test_status_running_final_status_not_pushed(root):
    """A cursor with every row but an older status (run failed after the last sync) is not complete."""
    p = make_run(root, ended_days_ago=40, status="failed")
    c = mark_synced(root, p)
    c.synced_status = "running"
    from trackstore.store.ledger import save_cursor

    save_cursor(root, c)
    plan = G.plan(root, G.Policy(older_than_s=0))
    assert not plan.delete and "final status" in plan.keep[0].reason


def test_never_deletes_a_live_run(root):
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        import trackstore
        run = trackstore.init("p", root={str(root)!r})
        run.log({{"x": 1}}); run.flush()
        print(run.id, flush=True)
        time.sleep(120)
    """)
    child = python_child(code)
    try:
        live_id = child.stdout.readline().strip()
        plan, res = G.gc(root, G.Policy(older_than_s=0, force=True, include_unsynced=True))
        assert res.deleted == [] and "live" in plan.keep[0].reason
        assert live_id in ids(root)
        with pytest.raises(UsageError):
            G.plan(root, G.Policy(older_than_s=0, statuses=("running",)))
    finally:
        child.kill()
        child.wait()
    # once its writer is dead the run is crashed, and eligible like any other ended run
    _, res = G.gc(root, G.Policy(older_than_s=0, force=True))
    assert [c.run_id for c in res.deleted] == [live_id]


def _sync_lock_holder(root, runs):
    info = "" if runs is None else f", info={{'runs': {runs!r}}}"
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        lk = locks.acquire({str(root)!r}, "sync-mlflow-abc"{info})
        print("held", flush=True)
        time.sleep(120)
    """)
    child = python_child(code)
    assert child.stdout.readline().strip() == "held"
    return child


def test_run_being_synced_is_not_deleted(root):
    busy = synced_run(root)
    idle = synced_run(root)
    child = _sync_lock_holder(root, [f"p/{busy.run_id}"])
    try:
        plan, res = G.gc(root, G.Policy(older_than_s=0))
        assert [c.run_id for c in res.deleted] == [idle.run_id]
        assert busy.dir.exists() and "being synced" in plan.keep[0].reason
    finally:
        child.kill()
        child.wait()


def test_sync_lock_without_runs_blocks_everything(root):
    synced_run(root)
    child = _sync_lock_holder(root, None)
    try:
        plan, res = G.gc(root, G.Policy(older_than_s=0))
        assert res.deleted == [] and "did not say which runs" in plan.keep[0].reason
    finally:
        child.kill()
        child.wait()


def test_lock_taken_after_plan_is_respected(root):
    p = synced_run(root)
    plan = G.plan(root, G.Policy(older_than_s=0))
    assert plan.delete
    child = _sync_lock_holder(root, [p.run_id])
    try:
        res = G.execute(root, plan)
        assert res.deleted == [] and res.skipped and p.dir.exists()
    finally:
        child.kill()
        child.wait()


def test_gc_and_compaction_exclude_each_other(root):
    synced_run(root)
    from trackstore.store import locks

    with locks.acquire(root, "maintenance"):
        with pytest.raises(LockHeldError):
            G.gc(root, G.Policy(older_than_s=0))


def test_older_than_uses_end_time_and_keep_last(root):
    a = synced_run(root, days=50)
    b = synced_run(root, days=45)
    c = synced_run(root, days=2)
    other = synced_run(root, "q", days=50)
    assert [x.run_id for x in G.plan(root, G.Policy(older_than_s=30 * DAY)).delete] == [a.run_id, b.run_id, other.run_id]
    keep2 = G.plan(root, G.Policy(older_than_s=0, keep_last=2))
    assert [x.run_id for x in keep2.delete] == [a.run_id]  # p keeps b, c; q keeps its only run
    assert [x.run_id for x in G.plan(root, G.Policy(older_than_s=0, project="q")).delete] == [other.run_id]
    assert c.run_id not in {x.run_id for x in G.plan(root, G.Policy(older_than_s=3 * DAY)).delete}


def test_max_size_deletes_oldest_first(root):
    runs = [synced_run(root, days=d) for d in (50, 40, 30, 20)]
    full = G.plan(root, G.Policy(older_than_s=0))
    total = full.store_bytes
    size = {c.run_id: c.bytes for c in full.runs}  # runs differ by a few bytes (ids, timestamps)
    oldest = size[runs[0].run_id]
    plan = G.plan(root, G.Policy(max_size=total - oldest))  # room for the three newest
    assert [c.run_id for c in plan.delete] == [runs[0].run_id]
    plan = G.plan(root, G.Policy(max_size=total - oldest - 1))  # one byte short: the next oldest goes too
    assert [c.run_id for c in plan.delete] == [r.run_id for r in runs[:2]]
    plan = G.plan(root, G.Policy(max_size=total - sum(size[r.run_id] for r in runs[:3])))
    assert [c.run_id for c in plan.delete] == [r.run_id for r in runs[:3]]
    assert not G.plan(root, G.Policy(max_size=total)).delete


def test_sigkill_between_rename_and_removal_leaves_consistent_store(root):
    victim = synced_run(root)
    survivor = make_run(root)
    before = store_snapshot(root)
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        from trackstore.upkeep import gc as G
        G._remove_tree = lambda path: os.kill(os.getpid(), 9)   # die right after the rename
        G.gc({str(root)!r}, G.Policy(older_than_s=0))
    """)
    child = python_child(code)
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    # the store lists and queries consistently: the victim is wholly gone, the survivor intact
    assert ids(root) == {survivor.run_id}
    after = store_snapshot(root)
    assert after == {k: v for k, v in before.items() if k[1] == survivor.run_id}
    assert G.trash_entries(root)
    # the next gc (even one with nothing to delete) finishes the job
    out = run_cli("gc", "--older-than", "30d", "--yes", root=root)
    assert out.returncode == 0, out.stderr
    assert G.trash_entries(root) == []
    assert list(iter_cursors(root, run_id=victim.run_id)) == []


def test_sigkill_during_removal(root):
    """Killed while rmtree is halfway through the run folder: nothing half-deleted is listed."""
    victim = synced_run(root, chunks=30)
    survivor = make_run(root)
    before = store_snapshot(root)
    code = textwrap.dedent(f"""
        import os, shutil, sys
        sys.path.insert(0, {REPO!r})
        from trackstore.upkeep import gc as G
        removed = []
        def slow_remove(path):
            for dirpath, _d, files in os.walk(path):
                for f in files:
                    os.unlink(os.path.join(dirpath, f))
                    removed.append(f)
                    if len(removed) == 10:
                        os.kill(os.getpid(), 9)
        G._remove_tree = slow_remove
        G.gc({str(root)!r}, G.Policy(older_than_s=0))
    """)
    child = python_child(code)
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert ids(root) == {survivor.run_id} and not victim.dir.exists()
    assert store_snapshot(root) == {k: v for k, v in before.items() if k[1] == survivor.run_id}
    assert G.clean_trash(root) == 1 and G.trash_entries(root) == []


def test_cli_dry_run_and_confirmation(root):
    p = synced_run(root)
    dry = run_cli("gc", "--older-than", "30d", "--dry-run", root=root)
    assert dry.returncode == 0, dry.stderr
    assert p.run_id in dry.stdout and "would free" in dry.stdout and p.dir.exists()
    js = run_cli("gc", "--older-than", "30d", "--dry-run", "--format", "json", root=root)
    rows = json.loads(js.stdout)
    assert rows[0]["action"] == "delete" and rows[0]["bytes"] > 0
    refused = run_cli("gc", "--older-than", "30d", root=root)  # stdin is not a terminal
    assert refused.returncode == 2 and "--yes" in refused.stderr and p.dir.exists()
    no_args = run_cli("gc", root=root)
    assert no_args.returncode == 2 and "--older-than" in no_args.stderr
    bad = run_cli("gc", "--older-than", "30 days", root=root)
    assert bad.returncode == 2
    done = run_cli("gc", "--older-than", "30d", "--yes", root=root)
    assert done.returncode == 0 and "freed" in done.stdout and not p.dir.exists()


def _in_pty(args, answer: bytes):
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    answered = False
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"[y/N]" in out:
            os.write(master, answer)
            answered = True
    proc.wait(timeout=60)
    os.close(master)
    import re

    return proc.returncode, re.sub(r"\x1b\[[0-9;]*m", "", out.decode(errors="replace"))


def test_cli_asks_on_a_terminal(root):
    p = synced_run(root)
    code, out = _in_pty(["gc", "--older-than", "1d", "--root", str(root)], b"n\n")
    assert code == 1 and "nothing deleted" in out and p.dir.exists()
    code, out = _in_pty(["gc", "--older-than", "1d", "--root", str(root)], b"y\n")
    assert code == 0 and "deleted 1 run," in out and not p.dir.exists()


def test_gc_compact_merges_the_old_runs_it_keeps(root):
    kept = make_run(root, ended_days_ago=40, chunks=4)  # unsynced: kept, but old
    recent = make_run(root, ended_days_ago=1, chunks=4)
    before = store_snapshot(root)
    out = run_cli("gc", "--older-than", "30d", "--yes", "--compact", root=root)
    assert out.returncode == 0, out.stderr
    assert "compacted 1 kept run: 8 part files -> 2" in out.stdout
    assert len(kept.parts("metrics")) == 1 and len(recent.parts("metrics")) == 4
    assert store_snapshot(root) == before


def test_real_sync_in_progress_protects_its_run(root, tmp_path, monkeypatch):
    """The real `trackstore sync` (MLflow file store) is paused after its first batch, holding
    its lock; gc --force runs meanwhile and must not delete the run being synced."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    busy = make_run(root, ended_days_ago=40, chunks=4)
    go = tmp_path / "go"
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.sync import engine
        real = engine.Engine._send_kind
        def paused(self, kind, table, cursor, res, **kw):
            print("paused", flush=True)
            while not os.path.exists({str(go)!r}):
                time.sleep(0.05)
            return real(self, kind, table, cursor, res, **kw)
        engine.Engine._send_kind = paused
        from trackstore.cli.main import main
        sys.exit(main(["sync", "--to", "mlflow", "--uri", {uri!r}, "--root", {str(root)!r}]))
    """)
    child = python_child(code)
    try:
        for line in child.stdout:  # the sync prints its own progress lines first
            if line.strip() == "paused":
                break
        else:
            pytest.fail("the sync never reached its first batch: " + child.stderr.read())
        plan, res = G.gc(root, G.Policy(older_than_s=0, force=True))
        assert res.deleted == [] and busy.dir.exists()
        assert "being synced" in plan.keep[0].reason
    finally:
        go.write_text("")
        child.communicate(timeout=300)
    assert child.returncode == 0
    # synced now, and no sync holds it: the default policy deletes it
    _, res = G.gc(root, G.Policy(older_than_s=0))
    assert [c.run_id for c in res.deleted] == [busy.run_id]


# ---------------------------------------------------------------------------- damage is not "done"
def _corrupt_cursor(root, paths, content: bytes, target="wandb", destination="ent/proj"):
    from trackstore.store.ledger import cursor_path

    f = cursor_path(root, target, destination, paths.project, paths.run_id)
    f.write_bytes(content)
    return f


def _truncate(part):
    part.write_bytes(part.read_bytes()[:40])  # no footer any more, as after a crash or a full disk


def _corrupt_column(part, column):
    """Flip the bytes of one column chunk, leaving the footer (and so the file's metadata) intact."""
    import pyarrow.parquet as pq

    rg = pq.read_metadata(part).row_group(0)
    chunk = next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(part.read_bytes())
    for i in range(start, start + chunk.total_compressed_size):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))


@pytest.mark.parametrize("content", [b"{not json", b"[]", b"", b'{"target": "wandb"}'])
def test_unreadable_cursor_keeps_the_run(root, content):
    """Fully synced to MLflow, half to wandb, and the wandb cursor is damaged: that must not read
    as "never synced to wandb" (the run would be deleted with half its rows only here)."""
    from trackstore.upkeep import doctor as D

    p = synced_run(root)
    mark_synced(root, p, target="wandb", destination="ent/proj", fraction=0.5)
    bad = _corrupt_cursor(root, p, content)
    only_bad = make_run(root, ended_days_ago=40)  # its only cursor is the damaged one
    _corrupt_cursor(root, only_bad, content)
    for policy in (G.Policy(older_than_s=0), G.Policy(older_than_s=0, include_unsynced=True),
                   G.Policy(older_than_s=0, require_synced_to=("mlflow",))):
        plan = G.plan(root, policy)
        assert plan.delete == []
        reasons = {c.run_id: c.reason for c in plan.keep}
        assert reasons[p.run_id].startswith(f"sync state unreadable: {bad.relative_to(root)}")
        assert "trackstore doctor" in reasons[p.run_id] and "sync state unreadable" in reasons[only_bad.run_id]
    # the file gc names is the one doctor reports
    assert bad in {f.path for f in D.diagnose(root).findings if f.check == "unreadable_cursor"}
    out = run_cli("gc", "--older-than", "0d", "--include-unsynced", "--yes", root=root)
    assert out.returncode == 0, out.stderr
    assert "2 sync state unreadable" in out.stdout and p.dir.exists() and only_bad.dir.exists()
    _, res = G.gc(root, G.Policy(older_than_s=0, force=True))
    assert {c.run_id for c in res.deleted} == {p.run_id, only_bad.run_id}


def test_damaged_parts_keep_the_run_until_doctor_fixes_them(root):
    """A truncated part's rows cannot be read, so sync never sent them and a cursor over the
    readable rows looks complete; gc keeps the run until doctor has quarantined the file."""
    from trackstore.upkeep import doctor as D
    from trackstore.upkeep.doctor import QUARANTINE_DIR

    truncated = make_run(root, ended_days_ago=40)
    lost = truncated.parts("metrics")[-1]
    _truncate(lost)
    mark_synced(root, truncated)  # what a sync sees: every readable row, final status pushed
    bad_pages = make_run(root, ended_days_ago=40)  # footer intact, the seq column's pages are not
    _corrupt_column(bad_pages.parts("metrics")[0], "seq")
    mark_synced(root, bad_pages)
    unsynced = make_run(root, ended_days_ago=40)
    _truncate(unsynced.parts("samples")[-1])
    plan = G.plan(root, G.Policy(older_than_s=0, include_unsynced=True))
    assert plan.delete == []
    reasons = {c.run_id: c.reason for c in plan.keep}
    assert reasons[truncated.run_id].startswith(f"damaged parts: {lost.relative_to(root)}")
    assert "damaged parts" in reasons[bad_pages.run_id] and "damaged parts" in reasons[unsynced.run_id]
    assert G.describe_kept(plan.keep) == {"damaged parts": 3}
    forced = G.plan(root, G.Policy(older_than_s=0, force=True))
    assert {c.run_id for c in forced.delete} == {truncated.run_id, bad_pages.run_id, unsynced.run_id}
    assert "`trackstore doctor --fix`" in reasons[truncated.run_id]
    assert "`trackstore doctor --deep --fix`" in reasons[bad_pages.run_id]  # its footer looks fine
    # doctor --fix quarantines the truncated files (the data is kept there); then gc may delete
    D.doctor(root, fix_problems=True)
    assert not lost.exists() and list((root / QUARANTINE_DIR).rglob(lost.name))
    plan = G.plan(root, G.Policy(older_than_s=0, include_unsynced=True))
    assert {c.run_id for c in plan.delete} == {truncated.run_id, unsynced.run_id}
    assert "damaged parts" in {c.run_id: c.reason for c in plan.keep}[bad_pages.run_id]
    D.doctor(root, fix_problems=True, deep=True)
    plan = G.plan(root, G.Policy(older_than_s=0, include_unsynced=True))
    assert {c.run_id for c in plan.delete} == {truncated.run_id, bad_pages.run_id, unsynced.run_id}


# ---------------------------------------------------------------------------- selection, through the CLI
def _cli_actions(root, *args):
    """The plan of ``trackstore gc ARGS --dry-run`` as {run_id: (action, reason)}."""
    out = run_cli("gc", *args, "--dry-run", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    return {r["run_id"]: (r["action"], r["reason"]) for r in json.loads(out.stdout)}


def test_status_selects_runs(root):
    finished = synced_run(root)
    failed = synced_run(root, status="failed")
    crashed = synced_run(root, status="crashed")
    plan = G.plan(root, G.Policy(older_than_s=0, statuses=("failed",)))
    assert [c.run_id for c in plan.delete] == [failed.run_id]
    reasons = {c.run_id: c.reason for c in plan.keep}
    assert reasons == {finished.run_id: "status finished not selected", crashed.run_id: "status crashed not selected"}
    out = run_cli("gc", "--older-than", "0d", "--status", "failed", "--status", "crashed", "--yes", root=root)
    assert out.returncode == 0, out.stderr
    assert ids(root) == {finished.run_id} and "deleted 2 runs" in out.stdout
    bad = run_cli("gc", "--older-than", "0d", "--status", "running", "--yes", root=root)
    assert bad.returncode == 2 and "Live runs are never deleted" in bad.stderr


def test_cli_max_size_deletes_oldest_first(root):
    runs = [synced_run(root, days=d) for d in (50, 40, 30)]
    rows = json.loads(run_cli("gc", "--keep-last", "0", "--dry-run", "--format", "json", root=root).stdout)
    size = {r["run_id"]: r["bytes"] for r in rows}
    total = sum(size.values())
    limit = total - size[runs[0].run_id]  # exactly room for the two newest
    actions = _cli_actions(root, "--max-size", str(limit))
    assert {r: a for r, (a, _) in actions.items()} == {runs[0].run_id: "delete", runs[1].run_id: "keep",
                                                       runs[2].run_id: "keep"}
    assert actions[runs[1].run_id][1] == "store within --max-size"
    out = run_cli("gc", "--max-size", str(limit - 1), "--yes", root=root)  # one byte short: two go
    assert out.returncode == 0, out.stderr
    assert ids(root) == {runs[2].run_id}
    assert f"({size[runs[0].run_id] + size[runs[1].run_id]:,} bytes)" in out.stdout
    bad = run_cli("gc", "--max-size", "lots", root=root)
    assert bad.returncode == 2 and "invalid size" in bad.stderr


def test_cli_keep_last(root):
    a, b, c = (synced_run(root) for _ in range(3))  # created in this order
    other = synced_run(root, "q")
    actions = _cli_actions(root, "--keep-last", "2")
    assert [r for r, (act, _) in actions.items() if act == "delete"] == [a.run_id]
    assert "--keep-last" in actions[b.run_id][1] and "--keep-last" in actions[other.run_id][1]
    out = run_cli("gc", "--older-than", "30d", "--keep-last", "1", "--yes", root=root)
    assert out.returncode == 0, out.stderr
    assert ids(root) == {c.run_id, other.run_id}
    assert run_cli("gc", "--keep-last", "-1", root=root).returncode == 2


def test_cli_require_synced_to(root):
    only_mlflow = synced_run(root)
    both = synced_run(root)
    mark_synced(root, both, target="wandb", destination="ent/proj")
    actions = _cli_actions(root, "--older-than", "0d", "--require-synced-to", "wandb")
    assert actions[both.run_id][0] == "delete" and actions[only_mlflow.run_id][0] == "keep"
    assert "not fully synced to wandb" in actions[only_mlflow.run_id][1]
    out = run_cli("gc", "--older-than", "0d", "--require-synced-to", "wandb, mlflow", "--yes", root=root)
    assert out.returncode == 0, out.stderr
    assert ids(root) == {only_mlflow.run_id}
    # without the flag, "every destination it was synced to" is only MLflow for the survivor
    assert _cli_actions(root, "--older-than", "0d")[only_mlflow.run_id][0] == "delete"


def test_cli_exit_6_while_the_maintenance_lock_is_held(root):
    from trackstore.store import locks

    p = synced_run(root)
    with locks.acquire(root, "maintenance"):
        out = run_cli("gc", "--older-than", "0d", "--yes", root=root)
        assert out.returncode == 6, (out.returncode, out.stderr)
        assert "maintenance" in out.stderr and p.dir.exists()
        # the dry run takes no lock: the plan can be looked at while a compaction runs
        assert run_cli("gc", "--older-than", "0d", "--dry-run", root=root).returncode == 0
    out = run_cli("gc", "--older-than", "0d", "--yes", root=root)
    assert out.returncode == 0 and not p.dir.exists()


def test_plan_takes_row_ids_from_the_catalog_only_for_the_very_files_it_recorded(root, monkeypatch):
    """gc's verdict needs every stored row's id. A run whose part files are the ones the catalog
    recorded (name, size, mtime: the facts deletion checks again) is judged from the catalog's
    row ids, no part read; a part rewritten in place with rows no destination has (its folder
    unchanged, so the catalog's listing still looks valid) is read from the file, and kept."""
    import pyarrow as pa

    from trackstore.store.catalog import freshness
    from trackstore.store.parts import write_part

    monkeypatch.setattr(freshness, "RACY_S", -1.0)  # every fingerprint is old enough to keep
    synced = synced_run(root)
    G.plan(root, G.Policy(older_than_s=30 * DAY))  # the catalog learns the run's parts
    read = []
    real = G.stored_row_ids
    monkeypatch.setattr(G, "stored_row_ids", lambda paths: read.append(paths.run_id) or real(paths))
    plan = G.plan(root, G.Policy(older_than_s=30 * DAY))
    assert [c.run_id for c in plan.delete] == [synced.run_id] and read == []

    part = sorted(synced.kind_dir("metrics").glob("*.parquet"))[0]
    folder_before = freshness.fingerprint(synced.kind_dir("metrics"))
    rows = [{"step": 99, "key": "loss", "value": 1.0, "ts": 1, "writer": "w-new", "seq": i, "last_of_key": False}
            for i in range(3)]
    from trackstore.store.schema import SCHEMAS, with_metadata

    tmp = root.parent / "rewritten.parquet"  # made outside the folder: only the part's bytes change there
    write_part(tmp, pa.Table.from_pylist(rows, schema=with_metadata(SCHEMAS["metrics"], "metrics")), "metrics")
    with open(part, "wb") as out:  # in place: the folder's own fingerprint does not change
        out.write(tmp.read_bytes())
    tmp.unlink()
    assert freshness.fingerprint(synced.kind_dir("metrics")) == folder_before  # the catalog's listing looks valid
    plan = G.plan(root, G.Policy(older_than_s=30 * DAY))
    assert plan.delete == [] and read == [synced.run_id]
    assert "rows pending" in plan.keep[0].reason
