"""The same promises, checked for every sync target through its harness (tests/sync_harness.py):
full round trip, incremental re-sync without duplicates, SIGKILL mid-sync then resume ending
exact, --dry-run sending nothing, the per-target lock, and reporting what cannot be held."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import trackstore
from tests.helpers import run_cli
from tests.sync_harness import HARNESSES

SYNC_CHILD = "import sys\nfrom trackstore.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


@pytest.fixture(params=sorted(HARNESSES))
def harness(request, tmp_path, monkeypatch):
    cls = HARNESSES[request.param]
    h = cls(tmp_path, monkeypatch)
    for k, v in h.env().items():
        monkeypatch.setenv(k, v)
    return h


def _log(root, steps, keys=3, start=0, run=None, finish=True):
    run = run or trackstore.init("conf", name="c", config={"lr": 0.1}, root=root)
    for s in range(start, start + steps):
        run.log({f"m{i}": s + i / 10 for i in range(keys)}, step=s)
    if finish:
        run.finish()
    else:
        run.flush()
    return run


def _expected(run, with_ts: bool):
    import pyarrow.parquet as pq

    rows = pq.read_table(run.dir / "metrics").to_pylist()
    return sorted((r["key"], r["step"], r["value"], int(r["ts"].timestamp() * 1000) if with_ts else None)
                  for r in rows)


def _got(harness, run):
    pts = harness.metrics(run.project, run.id)
    if harness.ts_precision is None:
        pts = [(k, s, v, None) for k, s, v, _ in pts]
    return sorted(pts)


def _sync(harness, root, *extra, timeout=300):
    res = run_cli("sync", *harness.cli_args(), *extra, root=root, timeout=timeout)
    return res


def test_round_trip(harness, root):
    run = _log(root, 20)
    res = _sync(harness, root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _got(harness, run) == _expected(run, harness.ts_precision is not None)
    assert harness.status(run.project, run.id) == "finished"
    assert harness.remote_run_count(run.project, run.id) == 1


def test_incremental_no_duplicates(harness, root):
    run = _log(root, 10, finish=False)
    assert _sync(harness, root).returncode == 0
    _log(root, 10, start=10, run=run)
    assert _sync(harness, root).returncode == 0
    assert _sync(harness, root).returncode == 0  # nothing new: must be a no-op
    assert _got(harness, run) == _expected(run, harness.ts_precision is not None)
    assert harness.remote_run_count(run.project, run.id) == 1


def test_sigkill_mid_sync_then_resume(harness, root):
    run = _log(root, 300, keys=4)
    rng = random.Random(11)
    args = [sys.executable, "-c", SYNC_CHILD, "sync", *harness.cli_args(), "--batch-size", "16", "--root", str(root)]
    for _ in range(3):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
        time.sleep(2.5 + rng.random() * 2)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
    res = _sync(harness, root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _got(harness, run) == _expected(run, harness.ts_precision is not None)
    assert harness.remote_run_count(run.project, run.id) == 1


def test_dry_run_sends_nothing(harness, root):
    run = _log(root, 5)
    res = _sync(harness, root, "--dry-run", "--format", "json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True and plan["runs"][0]["pending"]["metrics"] == 15
    assert harness.metrics(run.project, run.id) == []


def test_lock_excludes_a_second_sync(harness, root):
    from trackstore import locks
    from trackstore.sync import lock_name

    _log(root, 3)
    with locks.acquire(root, lock_name(harness.target)):
        res = _sync(harness, root)
    assert res.returncode == 6 and "lock" in res.stderr.lower()


def test_unsupported_records_are_reported(harness, root):
    run = trackstore.init("conf", root=root)
    run.log({"h": trackstore.Histogram([1.0, 2.0, 2.5, 3.0], bins=3), "x": 1.0}, step=0)
    run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=0)
    run.finish()
    res = _sync(harness, root, "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["runs"][0]
    for kind in ("histograms", "samples"):
        if kind in harness.kinds:
            assert out["sent"].get(kind, 0) == 1
        else:
            assert any(kind in reason for reason in out["skipped_by_reason"]), out
