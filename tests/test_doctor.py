"""doctor finds each kind of damage (fixtures kept in the repo, and damage made by real killed
processes), says what to do, and --fix repairs or quarantines without deleting data."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import textwrap
import time
from pathlib import Path

import pytest

import trackstore
from tests.fixtures.stores import make_run
from tests.helpers import python_child, run_cli
from trackstore.errors import CorruptFileError
from trackstore.read.listing import list_runs
from trackstore.read.reader import read_kind
from trackstore.store.layout import QUARANTINE_DIR, RunPaths
from trackstore.upkeep import doctor as D

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "damaged_store"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def damaged(tmp_path):
    root = tmp_path / "damaged"
    shutil.copytree(FIXTURE, root)
    return root


def shas(root):
    out = {}
    for dirpath, _d, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def found(report):
    return sorted((f.check, str(f.path.relative_to(report.root))) for f in report.findings)


def test_fixture_damage_is_found_with_advice(damaged):
    report = D.diagnose(damaged)
    w = "part-fixturenode-4242-a1b2c3"
    assert found(report) == sorted([
        ("broken_run_json", "project=fx/run=broken-json/run.json"),
        ("corrupt_parquet", f"project=fx/run=broken-json/samples/{w}-000000000000.parquet"),
        ("corrupt_parquet", f"project=fx/run=dead-writer/metrics/{w}-000000000010.parquet"),
        ("temp_file", f"project=fx/run=dead-writer/metrics/.{w}-000000000020.parquet.deadbeef.tmp"),
        ("stuck_running", "project=fx/run=dead-writer/run.json"),
        ("orphan_cursor", "_sync/mlflow-df9e1f528c81/project=fx/run=gone.json"),
        ("trash", "_trash/20200101T000000-0000abcd"),
    ])
    assert all("doctor --fix" in f.advice or "gc" in f.advice for f in report.findings)
    assert not report.healthy
    assert not any("healthy" in str(f.path) for f in report.findings)
    # diagnosing changes nothing
    assert shas(damaged) == shas(FIXTURE)


def test_fix_repairs_and_quarantines_without_losing_data(damaged):
    original = shas(damaged)
    with pytest.raises(CorruptFileError):
        read_kind(RunPaths(damaged, "fx", "dead-writer"), "metrics")
    report = D.doctor(damaged, fix_problems=True)
    assert report.healthy and all(f.fixed for f in report.findings), [f.row(damaged) for f in report.findings]
    assert D.diagnose(damaged).findings == []
    # every byte of the fixture is still somewhere: in the store, the quarantine or the cursor archive
    # (except the trash, which gc had already taken out, and the run.json doctor rewrote as crashed)
    after = set(shas(damaged).values())
    repaired = {"project=fx/run=dead-writer/run.json"}
    lost = {p for p, h in original.items() if h not in after and not p.startswith("_trash") and p not in repaired}
    assert lost == set()
    reasons = D.quarantine_listing(damaged)
    assert sorted(r["from"].rsplit("/", 1)[-1] for r in reasons) == sorted([
        "run.json", "part-fixturenode-4242-a1b2c3-000000000000.parquet",
        "part-fixturenode-4242-a1b2c3-000000000010.parquet",
        ".part-fixturenode-4242-a1b2c3-000000000020.parquet.deadbeef.tmp"])
    assert all(r["why"] for r in reasons)
    # the store is usable again: runs list, statuses are honest, the good rows are readable
    runs = {r.run_id: r for r in list_runs(damaged)}
    assert runs["dead-writer"].meta["status"] == "crashed"
    assert runs["dead-writer"].meta["ended_at"].startswith("2020-01-01")
    assert runs["broken-json"].meta["status"] == "crashed" and runs["broken-json"].meta["recovered_by"]
    assert read_kind(runs["dead-writer"].paths, "metrics").num_rows == 10
    assert read_kind(runs["broken-json"].paths, "metrics").num_rows == 5
    assert runs["healthy"].meta["status"] == "finished"
    assert list((damaged / "_sync" / "_gc").rglob("run=gone.json"))
    assert not (damaged / "_trash").exists() or not any((damaged / "_trash").iterdir())


def test_cli_exit_codes(damaged):
    sick = run_cli("doctor", root=damaged)
    assert sick.returncode == 4 and "stuck_running" in sick.stdout and "6 problems remain" in sick.stderr  # the crash is info
    js = run_cli("doctor", "--format", "json", root=damaged)
    assert {r["check"] for r in json.loads(js.stdout)} >= {"temp_file", "corrupt_parquet", "orphan_cursor"}
    fixed = run_cli("doctor", "--fix", root=damaged)
    assert fixed.returncode == 0, fixed.stderr
    assert "quarantined" in fixed.stdout
    again = run_cli("doctor", root=damaged)
    assert again.returncode == 0 and "healthy" in again.stdout


def test_writer_killed_by_sigkill_is_marked_crashed(root):
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        import trackstore
        run = trackstore.init("p", root={str(root)!r}, flush_interval=0.2)
        for i in range(5):
            run.log({{"x": i}}, step=i)
        run.flush()
        print(run.id, flush=True)
        time.sleep(120)
    """)
    child = python_child(code)
    run_id = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    report = D.doctor(root, fix_problems=True)
    assert [(f.check, bool(f.fixed)) for f in report.findings] == [("stuck_running", True)]
    meta = json.loads(RunPaths(root, "p", run_id).run_file.read_text())
    assert meta["status"] == "crashed" and meta["crash_detected_by"] == "trackstore doctor"
    assert D.diagnose(root).findings == []


def test_live_run_and_write_in_progress_are_left_alone(root):
    run = trackstore.init("p", root=root)
    run.log({"x": 1.0})
    run.flush()
    tmp = run.paths.kind_dir("metrics") / ".part-w-000000000001.parquet.0123abcd.tmp"
    tmp.write_bytes(b"partial")
    assert D.diagnose(root).findings == []
    old = time.time() - 2 * D.TEMP_AGE_S
    os.utime(tmp, (old, old))
    assert [f.check for f in D.diagnose(root).findings] == ["temp_file"]
    run.finish()


def test_leftovers_of_interrupted_operations(root):
    from trackstore.store import locks
    from trackstore.store.layout import IMPORT_DIR
    from trackstore.store.layout import MERGE_MARKER as MARKER

    p = make_run(root)
    staging = p.dir / ".compact-metrics-0000abcd"
    staging.mkdir()
    (staging / MARKER).write_text("{}")
    imp = root / IMPORT_DIR / "20261202T000000-0000abcd" / "runs"
    imp.mkdir(parents=True)
    (imp / "x").write_bytes(b"staged bytes")
    cursor = root / "_sync" / "mlflow-abc" / "project=p" / f"run={p.run_id}.json"
    cursor.parent.mkdir(parents=True)
    cursor.write_text("{not json")
    lock = locks.lock_path(root, "sync-old")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "t",
                                "heartbeat_at": "2020-01-01T00:00:00+00:00"}))
    report = D.diagnose(root)
    assert sorted(f.check for f in report.findings) == ["compaction_leftover", "import_leftover", "stale_lock",
                                                         "unreadable_cursor"]
    report = D.doctor(root, fix_problems=True)
    assert report.healthy and all(f.fixed for f in report.findings)
    assert not staging.exists() and not lock.exists() and not cursor.exists()
    assert any(r["from"].startswith(IMPORT_DIR) for r in D.quarantine_listing(root))
    assert D.diagnose(root).findings == []
    assert (root / QUARANTINE_DIR).is_dir()


def test_deep_check_reads_pages(root):
    """A file whose footer is intact but whose data pages are damaged is caught by --deep only."""
    p = make_run(root, chunks=1, samples=False)
    part = p.parts("metrics")[0]
    data = bytearray(part.read_bytes())
    for i in range(8, 200):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))
    deep = D.diagnose(root, deep=True)
    assert [f.check for f in deep.findings] == ["corrupt_parquet"]


def test_a_merge_at_work_is_not_a_compaction_leftover(root):
    """A live run merging its parts holds the maintenance lock while its staging folder exists:
    doctor (library and CLI) does not call that damage; once the holder is gone, what is left is."""
    import threading

    from trackstore.store import locks
    from trackstore.store import merge as M

    run = trackstore.init("p", root=root, compact=False)
    for step in range(3):
        run.log({"x": float(step)}, step=step)
        run.flush()
    kind_dir = run.paths.kind_dir("metrics")
    building, release = threading.Event(), threading.Event()

    def build(staging):  # the merge's new folder, held half-built until the test has looked
        for f in kind_dir.iterdir():
            os.link(f, staging / f.name)
        building.set()
        release.wait(60)
        return []

    def merge():  # what a live writer's rolling merge does (trackstore.write.rolling)
        held = locks.acquire(root, locks.MAINTENANCE,
                             info={"job": locks.BRIEF_JOB, "runs": [f"{run.project}/{run.id}"]})
        try:
            M.replace_kind_dir(kind_dir, build)
        finally:
            held.release()

    worker = threading.Thread(target=merge)
    worker.start()
    try:
        assert building.wait(60) and M.has_leftovers(kind_dir)
        assert D.diagnose(root).findings == []
        done = run_cli("doctor", root=root)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        release.set()
        worker.join(60)
    assert D.diagnose(root).findings == []
    interrupted = kind_dir.parent / ".compact-metrics-0000abcd"  # no live holder: damage
    interrupted.mkdir()
    assert [f.check for f in D.diagnose(root).findings] == ["compaction_leftover"]
    interrupted.rmdir()
    run.finish()
