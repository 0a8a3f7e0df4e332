"""`trackstore ingest` as a user runs it: the plan of --dry-run, the table and JSON of what was
added, progress on stderr, and each exit code docs/ingest.md lists (2 bad input, 3 nothing to
ingest, 6 the store's lock held, 8 a run read in part), with the message naming what was wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, stored_rows

pytest.importorskip("tensorboard")


def event_file(folder: Path, steps: int, *, t0: float = 1_700_000_000.0) -> Path:
    """A TensorBoard event file of ``steps`` TF1 scalars, written by TensorBoard's own writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    w = EventFileWriter(str(folder))
    for step in range(steps):
        value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
        w.add_event(event_pb2.Event(wall_time=t0 + step, step=step, summary=summary_pb2.Summary(value=[value])))
    w.close()
    (path,) = folder.glob("events.out.tfevents.*")
    return path


def test_dry_run_then_ingest_then_again(root, tmp_path):
    logs = tmp_path / "logs"
    event_file(logs / "train", 20)
    plan = run_cli("ingest", "--from", "tensorboard", str(logs), "--dry-run", "--format", "json", root=root)
    assert plan.returncode == 0, plan.stderr
    (row,) = json.loads(plan.stdout)
    assert row["action"] == "would create" and row["metrics"] == 20 and row["project"] == "tensorboard"
    assert not any(root.iterdir())  # a dry run writes nothing

    done = run_cli("ingest", "--from", "tensorboard", str(logs), "--project", "rl", root=root)
    assert done.returncode == 0, done.stderr
    assert "ingested 1 run from tensorboard" in done.stdout and "created" in done.stdout
    assert "ingest" in done.stderr  # progress, as plain lines when stderr is not a terminal
    assert stored_rows(root, "SELECT project, count(*) FROM metrics GROUP BY project") == [("rl", 20)]

    again = run_cli("ingest", "--from", "tensorboard", str(logs), "--project", "rl", "--format", "json", root=root)
    assert again.returncode == 0 and json.loads(again.stdout)[0]["action"] == "unchanged"


def test_bad_input_exits_2_and_nothing_to_ingest_exits_3(root, tmp_path):
    unknown = run_cli("ingest", "--from", "aim", str(tmp_path), root=root)
    assert unknown.returncode == 2 and "aim" in unknown.stderr and "tensorboard" in unknown.stderr
    missing = run_cli("ingest", "--from", "tensorboard", str(tmp_path / "nowhere"), root=root)
    assert missing.returncode == 2 and "nowhere" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run_cli("ingest", "--from", "tensorboard", str(tmp_path / "empty"), root=root)
    assert empty.returncode == 3 and "no tensorboard runs found" in empty.stderr
    bad_project = run_cli("ingest", "--from", "tensorboard", str(tmp_path), "--project", "a/b", root=root)
    assert bad_project.returncode == 2


def test_a_damaged_source_is_ingested_in_part_exit_8_naming_the_file(root, tmp_path):
    path = event_file(tmp_path / "logs" / "run", 50)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])  # the last record cut short
    out = run_cli("ingest", "--from", "tensorboard", str(tmp_path / "logs"), root=root)
    assert out.returncode == 8, out.stderr
    assert path.name in out.stderr
    assert stored_rows(root, "SELECT count(*) FROM metrics")[0][0] == 49


def test_the_store_locked_by_a_maintenance_job_exits_6_with_nothing_written(root, tmp_path):
    from trackstore.store import locks

    event_file(tmp_path / "logs" / "run", 5)
    lock = locks.acquire_maintenance(root, job="gc")
    try:
        out = run_cli("ingest", "--from", "tensorboard", str(tmp_path / "logs"), root=root)
    finally:
        lock.release()
    assert out.returncode == 6, out.stderr
    assert not list(root.glob("project=*"))
