"""Sync never leaves a silent gap: a part file it cannot read stops that run (named, with what
to do) until it is restored or quarantined; a damaged part whose rows the target already holds
does not block; rows the writer could not write (``write_errors``) are reported.

Real stores, real damage (truncated files, a part of the wrong schema), the real CLI, and the
real embedded MLflow store read back with MLflow's own client; the unsynced-run case is also
checked for every target of the conformance harness (tests/sync_harness.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, run_cli

pytest.importorskip("mlflow")

STEPS_PER_PART = 100
KEYS = 6
ROWS_PER_PART = STEPS_PER_PART * KEYS


def log_parts(root, parts, *, run=None, start=0, name="damaged", finish=True, compact=False):
    """``parts`` metrics part files of ``ROWS_PER_PART`` rows each (one flush per part)."""
    run = run or trackstore.init("proj", name=name, root=root, flush_interval=3600)
    for i in range(start, start + parts):
        for s in range(i * STEPS_PER_PART, (i + 1) * STEPS_PER_PART):
            run.log({f"k{j}": s + j / 10 for j in range(KEYS)}, step=s)
        run.flush()
    if finish:
        run.finish(compact=compact)
    return run


def parts_of(run) -> list[Path]:
    return sorted((run.dir / "metrics").glob("*.parquet"))


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def local_points(run, *, without=()) -> list[tuple]:
    import pyarrow.parquet as pq

    rows = []
    for p in parts_of(run):
        if p not in without:
            rows += pq.read_table(p).to_pylist()
    return sorted((r["key"], r["step"], r["value"], int(r["ts"].timestamp() * 1000)) for r in rows)


class Mlflow:
    """The embedded sqlite MLflow store, read back with MLflow's client."""

    def __init__(self, tmp_path):
        self.uri = mlflow_sqlite_uri(tmp_path)

    def sync(self, root, *args):
        return run_cli("sync", "--to", "mlflow", "--uri", self.uri, *args, root=root)

    def sync_json(self, root, *args):
        res = self.sync(root, "--format", "json", *args)
        return res, {r["run_id"]: r for r in json.loads(res.stdout)["runs"]} if res.stdout.strip() else {}

    def remote(self, run):
        from mlflow.entities import ViewType
        from mlflow.tracking import MlflowClient

        c = MlflowClient(tracking_uri=self.uri)
        exp = c.get_experiment_by_name(run.project)
        if exp is None:
            return None
        found = c.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run.id}'",
                              run_view_type=ViewType.ALL)
        assert len(found) <= 1, "a second remote run was created"
        return found[0] if found else None

    def points(self, run) -> list[tuple]:
        from mlflow.tracking import MlflowClient

        r = self.remote(run)
        if r is None:
            return []
        c = MlflowClient(tracking_uri=self.uri)
        return sorted((k, m.step, m.value, m.timestamp) for k in r.data.metrics
                      for m in c.get_metric_history(r.info.run_id, k))

    def status(self, run) -> str | None:
        r = self.remote(run)
        return None if r is None else r.info.status


@pytest.fixture
def mlflow_target(tmp_path):
    return Mlflow(tmp_path)


def test_truncated_part_stops_that_run_until_doctor_quarantines_it(root, mlflow_target):
    bad = log_parts(root, 4, name="bad")
    good = log_parts(root, 1, name="good")
    victim = parts_of(bad)[1]
    truncate(victim)

    # --dry-run predicts it: the run would fail, with the file named, and the exit code says so
    res, plan = mlflow_target.sync_json(root, "--dry-run")
    assert res.returncode == 8, res.stdout + res.stderr
    assert victim.name in plan[bad.id]["error"] and "doctor --fix" in plan[bad.id]["error"]
    assert plan[bad.id]["pending"]["metrics"] == 3 * ROWS_PER_PART
    assert plan[good.id]["error"] is None

    # the sync: that run stops with the file named and nothing sent; the other run syncs whole
    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 8, res.stdout + res.stderr
    assert out[bad.id]["error_kind"] == "damaged" and out[bad.id]["result"].startswith("FAILED")
    assert str(victim) in out[bad.id]["error"] and "doctor --fix" in out[bad.id]["error"]
    assert out[bad.id]["unreadable_parts"] == [str(victim)]
    assert out[bad.id]["verify_ok"] is not True
    assert mlflow_target.points(bad) == [] and mlflow_target.status(bad) != "FINISHED"
    assert out[good.id]["result"] == "ok" and out[good.id]["verify_ok"] is True
    assert mlflow_target.points(good) == local_points(good) and mlflow_target.status(good) == "FINISHED"

    # the plain-text summary names the file too (what cron mails), and so does `status`
    text = mlflow_target.sync(root)
    assert text.returncode == 8 and victim.name in text.stdout and "doctor --fix" in text.stdout
    status = {r["run_id"]: r for r in json.loads(run_cli("status", "--format", "json", root=root).stdout)}
    assert status[bad.id]["unreadable_parts"] == 1 and victim.name in status[bad.id]["last_error"]
    assert status[bad.id]["synced_status"] is None and status[good.id]["unreadable_parts"] == 0

    # doctor --fix quarantines it; the next sync sends the rest exactly once and finishes the run
    assert run_cli("doctor", "--fix", root=root).returncode == 0
    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out[bad.id]["result"] == "ok" and out[bad.id]["verify_ok"] is True
    assert any("quarantined" in n for n in out[bad.id]["notes"]), out[bad.id]["notes"]
    assert mlflow_target.points(bad) == local_points(bad) and len(local_points(bad)) == 3 * ROWS_PER_PART
    assert mlflow_target.status(bad) == "FINISHED"
    res, out = mlflow_target.sync_json(root)
    assert res.returncode == 0 and out[bad.id]["result"] == "up to date"
    assert len(mlflow_target.points(bad)) == 3 * ROWS_PER_PART


def test_run_synced_while_live_is_not_finished_over_a_gap(root, mlflow_target):
    """Rows already sent stay; the damaged new part stops the rest, and the run that has ended
    meanwhile stays RUNNING at the target instead of being marked complete."""
    run = log_parts(root, 2, finish=False)
    assert mlflow_target.sync(root).returncode == 0
    first = mlflow_target.points(run)
    assert len(first) == 2 * ROWS_PER_PART and mlflow_target.status(run) == "RUNNING"
    log_parts(root, 2, run=run, start=2)
    victim = parts_of(run)[2]
    truncate(victim)

    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 8, res.stdout + res.stderr
    assert str(victim) in out[run.id]["error"] and out[run.id]["verify_ok"] is not True
    assert mlflow_target.points(run) == first
    assert mlflow_target.status(run) == "RUNNING"


def test_damaged_part_the_target_already_holds_does_not_block(root, mlflow_target):
    """Its rows were acknowledged before the damage (the part's name and its neighbour's tell
    which they were): the rest syncs, the run is finished, the file is reported, and --verify
    counts its rows as stored."""
    run = log_parts(root, 2, finish=False)
    assert mlflow_target.sync(root).returncode == 0
    log_parts(root, 1, run=run, start=2)
    complete = local_points(run)
    victim = parts_of(run)[0]
    truncate(victim)

    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out[run.id]["result"] == "ok" and out[run.id]["verify_ok"] is True, out[run.id]
    assert out[run.id]["sent"]["metrics"] == ROWS_PER_PART
    assert any(str(victim) in n and "already holds" in n for n in out[run.id]["notes"]), out[run.id]["notes"]
    assert mlflow_target.points(run) == complete
    assert mlflow_target.status(run) == "FINISHED"


def test_damaged_merged_part_of_a_synced_run_still_verifies(root, mlflow_target):
    """A finished run's parts are merged into one named by its first and last seq."""
    run = log_parts(root, 2, compact=True)
    (merged,) = parts_of(run)
    complete = local_points(run)
    assert mlflow_target.sync(root).returncode == 0
    truncate(merged)
    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out[run.id]["verify_ok"] is True, out[run.id]
    assert mlflow_target.points(run) == complete and mlflow_target.status(run) == "FINISHED"


def test_part_of_the_wrong_schema_stops_the_run_and_doctor_finds_it(root, mlflow_target):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = log_parts(root, 2)
    victim = parts_of(run)[1]
    table = pq.read_table(victim)
    bad = table.set_column(table.column_names.index("value"), "value",
                           pa.array(["n/a"] * table.num_rows, pa.string()))
    pq.write_table(bad, victim)

    res, out = mlflow_target.sync_json(root)
    assert res.returncode == 8, res.stdout + res.stderr
    assert str(victim) in out[run.id]["error"] and "not a metrics part" in out[run.id]["error"]
    assert mlflow_target.points(run) == []
    doctor = run_cli("doctor", "--format", "json", root=root)
    assert doctor.returncode == 4 and victim.name in doctor.stdout, doctor.stdout + doctor.stderr
    assert run_cli("doctor", "--fix", root=root).returncode == 0
    res, out = mlflow_target.sync_json(root, "--verify")
    assert res.returncode == 0 and out[run.id]["verify_ok"] is True, res.stdout + res.stderr
    assert mlflow_target.points(run) == local_points(run) and len(local_points(run)) == ROWS_PER_PART


NO_DAC_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                   "--inh-caps", "-dac_override,-dac_read_search"]


def as_plain_user(*args, root):
    """The CLI without the power to read files whatever their mode (tests run as root)."""
    cmd = [*NO_DAC_OVERRIDE, sys.executable, "-m", "trackstore.cli.main", *args, "--root", str(root)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_part_this_user_may_not_read_stops_the_run_with_the_right_advice(root, mlflow_target, tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        check = subprocess.run([*NO_DAC_OVERRIDE, "cat", str(probe)], capture_output=True)
    except OSError:
        pytest.skip("setpriv is not available to drop the root's file-permission override")
    if check.returncode == 0:
        pytest.skip("cannot make a file unreadable for this process (setpriv did not drop CAP_DAC_OVERRIDE)")
    run = log_parts(root, 2)
    victim = parts_of(run)[1]
    victim.chmod(0)
    res = as_plain_user("sync", "--to", "mlflow", "--uri", mlflow_target.uri, "--format", "json", root=root)
    assert res.returncode == 8, res.stdout + res.stderr
    (out,) = json.loads(res.stdout)["runs"]
    assert str(victim) in out["error"] and "read access" in out["error"], out["error"]
    assert mlflow_target.points(run) == []
    victim.chmod(0o644)
    res = as_plain_user("sync", "--to", "mlflow", "--uri", mlflow_target.uri, root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert mlflow_target.points(run) == local_points(run) and mlflow_target.status(run) == "FINISHED"


def test_rows_the_writer_could_not_write_are_reported(root, mlflow_target):
    """run.json's and a writer file's ``write_errors`` (format.md sections 4 and 5) are named in
    every output form; what exists is synced, and the failed status pushed."""
    run = log_parts(root, 1)
    meta = json.loads((run.dir / "run.json").read_text())
    lost = "600 metrics rows not written; last error: [Errno 28] No space left on device"
    meta.update(status="failed", error="WriteError: data could not be written", write_errors=lost)
    (run.dir / "run.json").write_text(json.dumps(meta))
    other = run.dir / "_writers" / "rank1-77-abcdef.json"  # a rank that ended before the last one
    other.write_text(json.dumps({"writer_id": "rank1-77-abcdef", "host": "elsewhere", "pid": 77, "status": "failed",
                                 "write_errors": "12 samples rows not written"}))

    plan = mlflow_target.sync(root, "--dry-run")
    assert plan.returncode == 0 and "600 metrics rows not written" in plan.stdout, plan.stdout
    res = mlflow_target.sync(root)
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "lost before sync" in ln)
    assert run.id in line and lost in line and "rank1-77-abcdef: 12 samples rows not written" in line
    assert mlflow_target.points(run) == local_points(run) and mlflow_target.status(run) == "FAILED"
    res, out = mlflow_target.sync_json(root, "--all")
    assert lost in out[run.id]["write_errors"]
    (status,) = json.loads(run_cli("status", "--format", "json", root=root).stdout)
    assert lost in status["write_errors"] and "12 samples rows not written" in status["write_errors"]


# ---------------------------------------------------------------------------- every target
def test_every_target_truncated_part_then_doctor(harness, root):
    run = log_parts(root, 3)
    victim = parts_of(run)[1]
    truncate(victim)
    res = run_cli("sync", *harness.cli_args(), "--format", "json", root=root, timeout=300)
    assert res.returncode == 8, res.stdout + res.stderr
    assert str(victim) in json.loads(res.stdout)["runs"][0]["error"]
    assert harness.metrics(run.project, run.id) == []
    assert harness.remote_run_count(run.project, run.id) == 0 or harness.status(run.project, run.id) != "finished"

    assert run_cli("doctor", "--fix", root=root).returncode == 0
    res = run_cli("sync", *harness.cli_args(), root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    got = harness.metrics(run.project, run.id)
    want = local_points(run)
    if harness.ts_precision is None:
        got, want = [p[:3] for p in got], [p[:3] for p in want]
    assert sorted(got) == want and len(want) == 2 * ROWS_PER_PART
    assert harness.status(run.project, run.id) == "finished"
    assert harness.remote_run_count(run.project, run.id) == 1


def test_unreadable_cursor_stops_that_run_not_the_sync(tmp_path):
    """A cursor file that is not valid JSON: that run is named and left alone (replaying it
    without knowing what the target holds could duplicate it), the other runs sync, exit 8."""
    root = tmp_path / "store"
    a = log_parts(root, 1, name="a")
    b = log_parts(root, 1, name="b")
    first = run_cli("sync", "--to", "mlflow", "-f", "json", root=root)
    assert first.returncode == 0, first.stderr
    (cursor,) = [p for p in (root / "_sync").rglob(f"run={a.id}.json")]
    cursor.write_text('{"target": "mlflow", "acked": ')
    log_parts(root, 1, run=trackstore.init("proj", run_id=b.id, resume=True, root=root), start=1)
    for dry in ([], ["--dry-run"]):
        res = run_cli("sync", "--to", "mlflow", "-f", "json", *dry, root=root)
        assert res.returncode == 8, res.stderr
        assert "Traceback" not in res.stderr
        runs = {r["run_id"]: r for r in json.loads(res.stdout)["runs"]}
        assert runs[a.id]["error_kind"] == "damaged" and "unreadable" in runs[a.id]["error"]
        assert str(cursor) in runs[a.id]["error"]
        assert runs[b.id]["error"] is None
    assert cursor.read_text() == '{"target": "mlflow", "acked": '  # left for the user to look at
