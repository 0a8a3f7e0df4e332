"""What survives ``kill -9``: every part flushed before the kill, readable; the run reported
``crashed`` (dead pid on this host, stale heartbeat on another); temp files never read."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pyarrow.parquet as pq

from tests.helpers import kill9, python_child, run_cli
from trackstore.read.listing import list_runs
from trackstore.store import clock as tsclock
from trackstore.store import host as tshost
from trackstore.store import meta as tsmeta
from trackstore.store import schema
from trackstore.store.layout import RunPaths

KEYS = 50

LOGGER = textwrap.dedent(
    """
    import sys, time, trackstore
    run = trackstore.init("crash", root={root!r}, run_id={run_id!r},
                          flush_interval=0.05)
    print("started", flush=True)
    step = 0
    while True:
        run.log({{f"k{{i:02d}}": step + i / 100 for i in range({keys})}}, step=step)
        step += 1
        if step % 50 == 0:
            time.sleep(0.01)
    """
)


def wait_for(pred, timeout=60.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def start_logger(root, run_id):
    child = python_child(LOGGER.format(root=str(root), run_id=run_id, keys=KEYS))
    assert child.stdout.readline().strip() == "started", child.stderr.read()
    return child


def check_parts_complete(paths: RunPaths) -> int:
    """Every visible part is a whole Parquet file holding whole log calls; seqs are dense."""
    parts = paths.parts("metrics")
    assert parts, "nothing was flushed before the kill"
    seqs, by_step = [], {}
    for p in parts:
        t = pq.read_table(p)  # raises if any visible file were partial
        assert t.schema.metadata[b"trackstore.schema_version"] == str(schema.SCHEMA_VERSION).encode()
        rows = t.to_pydict()
        seqs += rows["seq"]
        for step, key, value in zip(rows["step"], rows["key"], rows["value"]):
            by_step.setdefault(step, {})[key] = value
    assert sorted(seqs) == list(range(len(seqs))), "a flushed part is missing or duplicated"
    assert sorted(by_step) == list(range(len(by_step))), "steps flushed out of order"
    for step, points in by_step.items():
        assert len(points) == KEYS, f"step {step} was split across a part boundary and lost points"
        assert points["k07"] == step + 0.07
    return len(seqs)


def test_sigkill_keeps_flushed_parts_and_reports_crashed(root):
    child = start_logger(root, "r1")
    paths = RunPaths(root, "crash", "r1")
    assert wait_for(lambda: len(paths.parts("metrics")) >= 5)
    kill9(child)

    n = check_parts_complete(paths)
    assert n >= 5 * KEYS
    # The directory read the way every reader reads it (pyarrow, and DuckDB's globs) sees
    # exactly the complete parts, whatever temp files the kill left behind.
    assert pq.read_table(paths.kind_dir("metrics")).num_rows == n

    [info] = list_runs(root)
    assert info.meta["status"] == "running"  # what the dead writer last wrote ...
    assert info.status == "crashed"  # ... and what readers report
    out = run_cli("runs", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert (row["run_id"], row["status"]) == ("r1", "crashed")


def test_partial_and_temp_files_are_never_read(root):
    child = start_logger(root, "r2")
    paths = RunPaths(root, "crash", "r2")
    assert wait_for(lambda: len(paths.parts("metrics")) >= 2)
    kill9(child)
    n = check_parts_complete(paths)
    # What a kill in the middle of a part write leaves: a hidden temp file with half a Parquet
    # file in it (and one with no footer at all).
    whole = paths.parts("metrics")[0].read_bytes()
    metrics = paths.kind_dir("metrics")
    (metrics / ".part-deadbeef-1-abc-000000999999.parquet.1a2b3c4d.tmp").write_bytes(whole[: len(whole) // 2])
    (metrics / ".part-deadbeef-1-abc-000001999999.parquet.5e6f7a8b.tmp").write_bytes(b"PAR1")
    assert all(p.name.endswith(".parquet") and not p.name.startswith(".") for p in paths.parts("metrics"))
    assert check_parts_complete(paths) == n
    assert pq.read_table(metrics).num_rows == n
    [info] = list_runs(root)
    assert info.status == "crashed"


def test_dead_pid_on_this_host_is_crashed_at_once(root):
    child = start_logger(root, "r3")
    paths = RunPaths(root, "crash", "r3")
    assert wait_for(lambda: paths.writers_dir.exists() and any(paths.writers_dir.glob("*.json")))
    [w] = tsmeta.read_writer_files(paths)
    assert w["host"] == tshost.hostname() and w["pid"] == child.pid
    assert [r.status for r in list_runs(root)] == ["running"]  # alive: pid exists
    kill9(child)
    # No waiting for a heartbeat to go stale: the reader is on the writer's host.
    [w] = tsmeta.read_writer_files(paths)
    assert time.time() - tsclock.parse_iso(w["heartbeat_at"]) < tsmeta.STALE_AFTER_S
    assert [r.status for r in list_runs(root)] == ["crashed"]


def fake_run(root, run_id, writers: list[dict]):
    """A run folder as a writer elsewhere would leave it: run.json 'running' + heartbeat files."""
    paths = RunPaths(root, "remote", run_id)
    tsmeta.write_run_json(paths, {"project": "remote", "run_id": run_id, "name": run_id, "status": "running",
                                  "created_at": tsclock.iso(time.time() - 3600), "host": writers[0]["host"],
                                  "pid": writers[0]["pid"]})
    for w in writers:
        tsmeta.write_writer_file(paths, {"status": "running", **w})
    return paths


def statuses(root):
    return {r.run_id: r.status for r in list_runs(root, project="remote")}


def test_foreign_host_is_judged_by_heartbeat_age(root):
    now = time.time()
    bound = tsmeta.STALE_AFTER_S
    live_pid = os.getpid()  # a live pid here must not make a foreign writer alive
    fake_run(root, "fresh", [{"writer_id": "gpu17-1-a", "host": "gpu-node-17", "pid": live_pid,
                              "heartbeat_at": tsclock.iso(now - 5)}])
    fake_run(root, "stale", [{"writer_id": "gpu17-2-b", "host": "gpu-node-17", "pid": live_pid,
                              "heartbeat_at": tsclock.iso(now - bound - 5)}])
    fake_run(root, "nobeat", [{"writer_id": "gpu17-3-c", "host": "gpu-node-17", "pid": 1}])
    # Two ranks on two nodes: one still beating keeps the run alive.
    fake_run(root, "ranks", [{"writer_id": "gpu17-4-d", "host": "gpu-node-17", "pid": 4,
                              "heartbeat_at": tsclock.iso(now - bound - 60)},
                             {"writer_id": "gpu18-5-e", "host": "gpu-node-18", "pid": 5,
                              "heartbeat_at": tsclock.iso(now - 1)}])
    assert statuses(root) == {"fresh": "running", "stale": "crashed", "nobeat": "crashed", "ranks": "running"}
    out = run_cli("runs", "--format", "json", "--project", "remote", root=root)
    assert {r["run_id"]: r["status"] for r in json.loads(out.stdout)} == statuses(root)
    # The same heartbeat read later than the bound: crashed (time passes, nothing is rewritten).
    [w] = tsmeta.read_writer_files(RunPaths(root, "remote", "fresh"))
    assert tsmeta.writer_alive(w, now=now + bound - 10)
    assert not tsmeta.writer_alive(w, now=now + bound)


def test_reused_pid_on_this_host_is_not_alive(root):
    # The pid exists (it is this test process) but was started at another time: a reused pid.
    start = tshost.process_start_ticks(os.getpid())
    fake_run(root, "reused", [{"writer_id": "me-1-a", "host": tshost.hostname(), "pid": os.getpid(),
                               "pid_start": (start or 0) + 12345, "heartbeat_at": tsclock.iso(time.time())}])
    fake_run(root, "same", [{"writer_id": "me-2-b", "host": tshost.hostname(), "pid": os.getpid(),
                             "pid_start": start, "heartbeat_at": tsclock.iso(time.time() - 10_000)}])
    assert statuses(root) == {"reused": "crashed", "same": "running"}
