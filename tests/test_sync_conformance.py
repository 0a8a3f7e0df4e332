"""The same promises, checked for every sync target through its harness (tests/sync_harness.py):
full round trip, incremental re-sync without duplicates, SIGKILL mid-sync then resume ending
exact, --dry-run sending nothing, the per-target lock, and reporting what cannot be held."""

from __future__ import annotations

import json
import random
import signal
import time

import trackstore
from tests.helpers import run_cli, spawn_cli

SYNC_CHILD = "import sys\nfrom trackstore.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


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


def _cursor_mtime(root):
    files = list((root / "_sync").rglob("run=*.json")) if (root / "_sync").exists() else []
    return max((f.stat().st_mtime_ns for f in files), default=0)


def _acked_metrics(root):
    """(metric rows acknowledged, end status pushed) from the run's cursor; (0, None) before it exists."""
    files = list((root / "_sync").rglob("run=*.json")) if (root / "_sync").exists() else []
    if not files:
        return 0, None
    try:
        cur = json.loads(files[0].read_text())  # replaced atomically: never half-written
    except (OSError, ValueError):
        return -1, None
    acked = sum(hi - lo + 1 for rs in cur["acked"].get("metrics", {}).values() for lo, hi in rs)
    return acked, cur.get("synced_status")


def test_sigkill_mid_sync_then_resume(harness, root):
    """Kill the sync process three times while it is sending, then finish: exact.

    Each kill waits until the sync is sending (its cursor file has moved: it is written once
    the remote run is open, then around every batch), then until a seeded number of further
    batches was acknowledged (so a fast target is not done before the kill), then a seeded
    moment more (mid-batch). Each kill must land before the pass completed."""
    run = _log(root, 300, keys=4)
    total = 1200
    rng = random.Random(11)
    args = ["sync", *harness.cli_args(), "--batch-size", "16", "--root", str(root)]
    kills = 0
    for _ in range(3):
        before, _status = _acked_metrics(root)
        target = before + 16 * rng.randint(1, max(1, (total - before) // 16 // 4))
        p = spawn_cli(*args)
        start = _cursor_mtime(root)
        deadline = time.time() + 120
        while p.poll() is None and _cursor_mtime(root) == start and time.time() < deadline:
            time.sleep(0.005)
        while p.poll() is None and _acked_metrics(root)[0] < target and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(rng.random() * 0.02)
        assert p.poll() is None, "the sync completed before it could be killed mid-send"
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
        acked, status = _acked_metrics(root)
        assert before < acked < total and status != "finished", (before, acked, status)  # it landed mid-send
    assert kills == 3
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
    from trackstore.store import locks
    from trackstore.sync import lock_name

    _log(root, 3)
    with locks.acquire(root, lock_name(harness.target)):
        res = _sync(harness, root)
    assert res.returncode == 6 and "lock" in res.stderr.lower()


def test_unsupported_records_are_reported(harness, root):
    """Kinds the target cannot hold are reported, never dropped silently; so is a second value
    for one key at one step (the store keeps both), where the target keeps only one: each
    harness states what its target does with it (``Harness.second_value``)."""
    run = trackstore.init("conf", root=root)
    run.log({"h": trackstore.Histogram([1.0, 2.0, 2.5, 3.0], bins=3), "x": 1.0}, step=0)
    run.log({"x": 2.0}, step=0)  # a second value for (x, 0)
    run.log({"x": 3.0}, step=1)
    run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=0)
    run.finish()
    res = _sync(harness, root, "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["runs"][0]
    expected: dict[str, int] = {}
    for kind in ("histograms", "samples"):
        if kind in harness.kinds:
            assert out["sent"].get(kind, 0) == 1
        else:
            assert any(kind in reason for reason in out["skipped_by_reason"]), out
            expected.update({r: n for r, n in out["skipped_by_reason"].items() if kind in r})
    reason, kept = harness.second_value()
    points = [(k, s, v) for k, s, v, _ts in harness.metrics(run.project, run.id)]
    if reason is None:
        assert kept == "both" and points == [("x", 0, 1.0), ("x", 0, 2.0), ("x", 1, 3.0)]
    else:
        expected[reason] = 1
        assert points == [("x", 0, 1.0 if kept == "first" else 2.0), ("x", 1, 3.0)]
    assert out["skipped_by_reason"] == expected, out
