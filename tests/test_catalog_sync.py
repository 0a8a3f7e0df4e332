"""Sync proportional to change, against a real MLflow sqlite store: a run whose parts did not
change since its destination acknowledged everything is skipped (the engine does not even look
at it), and a run that changed is picked up, each new point sent once."""

from __future__ import annotations

import time

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri
from trackstore.read.listing import list_runs
from trackstore.store.catalog import freshness
from trackstore.store.ledger import unchanged_since_ack

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from trackstore.sync import Engine, SyncOptions, TargetOptions  # noqa: E402
from trackstore.sync import sync as do_sync  # noqa: E402


@pytest.fixture
def trusted(monkeypatch):
    # every fingerprint trusted at once (in real use, after RACY_S): the skip itself is under test
    monkeypatch.setattr(freshness, "RACY_S", -3600.0)


def make_run(root, name, steps):
    run = trackstore.init("proj", name=name, root=root)
    for s in range(steps):
        run.log({"a": s + 0.5, "b": -s}, step=s)
    run.finish()
    return run


def history(uri, run_id, key):
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("proj")
    found = client.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'")
    assert len(found) == 1
    return sorted((m.step, m.value) for m in client.get_metric_history(found[0].info.run_id, key))


def sync(root, uri, **kw):
    time.sleep(0.012)  # a file-system clock tick between a change and the next look
    return do_sync(root, "mlflow", SyncOptions(**kw), TargetOptions(uri=uri))


def test_unchanged_runs_are_skipped_and_a_changed_run_is_picked_up(root, tmp_path, trusted, monkeypatch):
    uri = mlflow_sqlite_uri(tmp_path)
    one, two = make_run(root, "one", 6), make_run(root, "two", 4)
    first = sync(root, uri)
    assert first.ok and {r.run_id: r.sent.get("metrics") for r in first.runs} == {one.run_id: 12, two.run_id: 8}
    dest = first.destination

    assert unchanged_since_ack(root, "mlflow", dest, list_runs(root)) == {("proj", one.run_id), ("proj", two.run_id)}

    def never(self, info):  # the engine must not look at a run that did not change
        raise AssertionError(f"{info.run_id} was read although nothing changed")

    with monkeypatch.context() as m:
        m.setattr(Engine, "dry_run_one", never)
        m.setattr(Engine, "sync_one", never)
        dry = sync(root, uri, dry_run=True)
        assert dry.ok and all(r.up_to_date for r in dry.runs) and len(dry.runs) == 2
        again = sync(root, uri)
        assert again.ok and all(r.up_to_date and not r.sent for r in again.runs)

    resumed = trackstore.init("proj", run_id=one.run_id, resume=True, root=root)
    for s in range(6, 9):
        resumed.log({"a": s + 0.5, "b": -s}, step=s)
    resumed.finish()
    assert unchanged_since_ack(root, "mlflow", dest, list_runs(root)) == {("proj", two.run_id)}
    dry = sync(root, uri, dry_run=True)
    assert {r.run_id: r.pending.get("metrics", 0) for r in dry.runs} == {one.run_id: 6, two.run_id: 0}
    third = sync(root, uri)
    assert third.ok
    assert {r.run_id: r.sent.get("metrics", 0) for r in third.runs} == {one.run_id: 6, two.run_id: 0}
    assert history(uri, one.run_id, "a") == [(s, s + 0.5) for s in range(9)]  # every point once
    assert unchanged_since_ack(root, "mlflow", dest, list_runs(root)) == {("proj", one.run_id), ("proj", two.run_id)}


def test_a_compacted_run_stays_up_to_date_and_a_verify_or_all_looks_again(root, tmp_path, trusted):
    from trackstore.store.layout import RunPaths
    from trackstore.upkeep.compact import compact

    uri = mlflow_sqlite_uri(tmp_path)
    run = trackstore.init("proj", name="c", root=root, flush_interval=0.01)
    for s in range(5):
        run.log({"a": float(s)}, step=s)
        run.flush()
    run.finish()
    assert sync(root, uri).ok
    compact(root, [RunPaths(root, "proj", run.run_id)])
    after = sync(root, uri)
    assert after.ok and after.runs[0].up_to_date and not after.runs[0].sent
    assert history(uri, run.run_id, "a") == [(s, float(s)) for s in range(5)]
    full = sync(root, uri, include_synced=True)  # --all looks at it again, and sends nothing twice
    assert full.ok and not full.runs[0].sent
    assert history(uri, run.run_id, "a") == [(s, float(s)) for s in range(5)]


def test_a_destination_never_synced_reads_no_part_in_the_no_change_check(root, tmp_path, trusted, monkeypatch):
    # a first sync of a store the catalog has not seen: the no-change check must not read every
    # part's footer (thousands of runs: seconds, in the one process that hands runs out) to learn
    # that runs without a cursor have changed
    make_run(root, "one", 6), make_run(root, "two", 4)
    from trackstore.store.catalog import part_records

    def no_reads(*a, **k):
        raise AssertionError("a part was read for a run this destination never acknowledged")

    monkeypatch.setattr(part_records, "read_part_record", no_reads)
    assert unchanged_since_ack(root, "mlflow", "sqlite:////nowhere/mlflow.db", list_runs(root)) == set()
