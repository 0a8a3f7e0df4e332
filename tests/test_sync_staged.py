"""A destination that is a staging folder on this machine (wandb offline, SwanLab offline) is
staged, not synced: the cursor says so, ``status`` and the ``sync_state`` view show it, sync
prints the upload command once, and gc keeps a run only staged unless ``--count-staged``. Real
clients in offline mode; what they wrote is read back with their own readers."""

from __future__ import annotations

import json

import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.store.ledger import Cursor, fully_synced_from_pending
from trackstore.store.ranges import RangeSet


def test_fully_synced_does_not_count_a_staged_cursor_unless_asked():
    c = Cursor("wandb", "offline:/x/wandb e/p", "p", "r", acked={"metrics": RangeSet()}, synced_status="finished")
    assert fully_synced_from_pending(c, "finished", {"metrics": 0})
    c.staged = True
    assert not fully_synced_from_pending(c, "finished", {"metrics": 0})
    assert fully_synced_from_pending(c, "finished", {"metrics": 0}, count_staged=True)
    assert not fully_synced_from_pending(c, "finished", {"metrics": 3}, count_staged=True)  # still needs every row
    assert Cursor.from_json(c.to_json()).staged
    # a cursor written before the field existed: the adapter's recorded mode says it
    old = {k: v for k, v in c.to_json().items() if k != "staged"}
    assert Cursor.from_json({**old, "remote": {"mode": "offline"}}).staged
    assert not Cursor.from_json({**old, "remote": {"mode": "online"}}).staged


def test_offline_and_online_destinations_keep_separate_cursors(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from trackstore.store.ledger import destination_id
    from trackstore.sync.adapter import TargetOptions
    from trackstore.sync.wandb import WandbAdapter

    monkeypatch.delenv("WANDB_MODE", raising=False)
    opts = dict(store_root=str(tmp_path), logdir=str(tmp_path / "wb"))
    offline = WandbAdapter(TargetOptions(mode="offline", **opts))
    online = WandbAdapter(TargetOptions(mode="online", **opts))
    assert offline.capabilities.staging and not online.capabilities.staging
    assert destination_id("wandb", offline.destination()) != destination_id("wandb", online.destination())
    assert online.upload_command(Cursor("wandb", "d", "p", "r")) is None


def _finished_run(root):
    run = trackstore.init("proj", name="staged", root=root)
    for s in range(5):
        run.log({"loss": 1.0 / (s + 1)}, step=s)
    run.finish()
    return run


def _gc(root, *extra):
    return run_cli("gc", "--older-than", "0d", "--yes", *extra, root=root, timeout=120)


def _status(root):
    res = run_cli("status", "--format", "json", root=root)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _check_staged_then_gc(root, run, target):
    rows = [r for r in _status(root) if r["run_id"] == run.id and r["target"] == target]
    assert len(rows) == 1 and rows[0]["staged"] is True and rows[0]["pending_metrics"] == 0, rows
    table = run_cli("status", root=root, env={"COLUMNS": "200"})
    assert f"1 run staged at {target}, not uploaded" in table.stdout, table.stdout
    assert "up to date" not in table.stdout
    view = run_cli("sql", "--format", "json", "SELECT DISTINCT staged FROM sync_state", root=root)
    assert json.loads(view.stdout) == [{"staged": True}], view.stdout + view.stderr

    kept = _gc(root)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "only staged on this machine" in kept.stdout + kept.stderr
    assert run.dir.is_dir()
    gone = _gc(root, "--count-staged")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not run.dir.exists()


def test_wandb_offline_is_staged_and_gc_keeps_it(root, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from tests.sync_harness import WandbHarness

    wb = WandbHarness(tmp_path, monkeypatch)
    for k, v in wb.env().items():
        monkeypatch.setenv(k, v)
    run = _finished_run(root)
    res = run_cli("sync", "--to", "wandb", root=root, timeout=300, env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stdout + res.stderr
    command = f"wandb sync {wb.dir / 'wandb'}"
    assert res.stdout.count(command) == 1 and "staged on this machine, not uploaded" in res.stdout, res.stdout
    (folder,) = wb.run_dirs("proj", run.id)  # the offline-run folder `wandb sync` uploads
    assert folder.name.startswith("offline-run-") and list(folder.glob("*.wandb"))
    out = json.loads(run_cli("sync", "--to", "wandb", "--all", "--format", "json", root=root, timeout=300).stdout)
    assert out["upload"] == [command]
    _check_staged_then_gc(root, run, "wandb")


def test_swanlab_offline_is_staged_and_gc_keeps_it(root, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    from trackstore.sync.swanlab import count_points, experiment_id

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    logdir = tmp_path / "swanlog"
    run = _finished_run(root)
    res = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), "--format", "json",
                  root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    exp = experiment_id("proj", run.id)
    assert count_points(logdir, exp)["metrics"] == 5  # read back with SwanLab's own reader
    (folder,) = [d for d in logdir.glob(f"run-*-{exp}")]
    assert out["upload"] == [f"swanlab sync --id {exp} {folder}"], out
    _check_staged_then_gc(root, run, "swanlab")
