"""``sync --jobs N`` in several processes (sync/parallel.py, ``Capabilities.processes``): the
team store's replication spreads its workers over processes, one per core. The same result as
one worker; every ending of the parent (SIGKILL, Ctrl-C) ends its processes too, and of a
worker process (SIGKILL) fails only its runs; each time the next sync makes the replica exact.

``$TRACKSTORE_SYNC_PROCESSES`` makes small stores use processes here (by default a process
needs 50 runs of its own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sync.adapter import Capabilities
from sync.parallel import PROCESS_MIN_RUNS, worker_processes
from tests.helpers import descendants, run_cli, spawn_cli, wait_gone
from tests.test_team_store import KINDS, assert_exact, make_runs, plain_rows, sync_store

TWO = {"TRACKSTORE_SYNC_PROCESSES": "2"}
SYNC_CHILD = ("import signal, sys\n"
              # a shell starts background jobs with SIGINT ignored, and children inherit that
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from trackstore.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")


def workers_of(pid: int, timeout: float = 60) -> list[int]:
    """The worker processes a sync started (multiprocessing's resource tracker aside), once both
    are there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in descendants(pid) if b"resource_tracker" not in _cmdline(p) and b"spawn_main" in _cmdline(p)]
        if len(found) >= 2:
            return found
        time.sleep(0.02)
    raise AssertionError("the sync started no worker processes")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def replica_runs(replica: Path) -> set[str]:
    return {p.parent.name for p in replica.glob("project=*/run=*/run.json")}


def replica_parts(replica: Path) -> int:
    return sum(1 for _ in replica.glob("project=*/run=*/metrics/*.parquet"))


def no_row_twice(replica: Path) -> None:
    for kind in KINDS:
        n, distinct = plain_rows(replica, kind)
        assert n == distinct, f"{kind}: a row counted twice"


# ----------------------------------------------------------------------------- how many
def test_processes_only_for_targets_that_declare_them_and_runs_enough_to_pay(monkeypatch):
    monkeypatch.delenv("TRACKSTORE_SYNC_PROCESSES", raising=False)
    monkeypatch.setattr("sync.parallel.cores", lambda: 4)
    store = SimpleNamespace(capabilities=Capabilities(processes=True))
    server = SimpleNamespace(capabilities=Capabilities())
    assert worker_processes(server, 8, 10_000) == 1  # a server's wait: threads
    assert worker_processes(store, 1, 10_000) == 1
    assert worker_processes(store, 8, PROCESS_MIN_RUNS - 1) == 1  # not worth a process's start
    assert worker_processes(store, 8, 2 * PROCESS_MIN_RUNS) == 2
    assert worker_processes(store, 8, 10_000) == 4  # one per core
    assert worker_processes(store, 3, 10_000) == 3  # never more than --jobs
    monkeypatch.setenv("TRACKSTORE_SYNC_PROCESSES", "2")
    assert worker_processes(store, 8, 5) == 2  # the variable's word, whatever the runs
    assert worker_processes(store, 8, 1) == 1
    monkeypatch.setenv("TRACKSTORE_SYNC_PROCESSES", "1")
    assert worker_processes(store, 8, 10_000) == 1


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_processes_variable_is_a_usage_error(root, tmp_path, value):
    make_runs(root, 2, steps=3)
    res = sync_store(root, tmp_path / "team", "--jobs", "2")  # the variable unset: fine
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_cli("sync", "--to", "store", "--uri", str(tmp_path / "team"), "--jobs", "2", "--all", root=root,
                  env={"TRACKSTORE_SYNC_PROCESSES": value})
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: TRACKSTORE_SYNC_PROCESSES={value}: the most processes a sync uses must be a whole number, 1 or more"]


def test_the_library_spawns_processes_only_when_asked(root, tmp_path, monkeypatch):
    """Spawning imports the calling script again in each process: a script's call to sync()
    must not start any unless it asks (and then keeps its top level under a main guard)."""
    from trackstore.sync import SyncOptions, TargetOptions, sync

    make_runs(root, 4, steps=5)
    monkeypatch.setenv("TRACKSTORE_SYNC_PROCESSES", "2")
    report = sync(root, "store", SyncOptions(), TargetOptions(uri=str(tmp_path / "a")), jobs=4)
    assert report.ok and report.processes == 1
    report = sync(root, "store", SyncOptions(), TargetOptions(uri=str(tmp_path / "b")), jobs=4, processes=True)
    assert report.ok and report.processes == 2
    assert_exact(root, tmp_path / "b")


# ----------------------------------------------------------------------------- the result
def test_a_sync_in_processes_gives_what_one_worker_gives(root, tmp_path):
    make_runs(root, 8, steps=40)
    live = make_runs(root, 3, steps=40, project="other", finish=False)  # live runs: their parts merged
    for run in live:
        run.flush()  # what they logged is on disk (a live run's several parts) before the syncs look
    outs = {}
    for name, jobs, env in (("one", "1", {}), ("procs", "4", TWO)):
        replica = tmp_path / name
        res = sync_store(root, replica, "--jobs", jobs, "--format", "json") if not env else run_cli(
            "sync", "--to", "store", "--uri", str(replica), "--jobs", jobs, "--format", "json", root=root, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        out = json.loads(res.stdout)
        outs[name] = out
        assert_exact(root, replica)
        again = run_cli("sync", "--to", "store", "--uri", str(replica), "--jobs", jobs, "--format", "json",
                        root=root, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert {r["result"] for r in json.loads(again.stdout)["runs"]} == {"up to date"}
    assert outs["one"]["processes"] == 1 and outs["procs"]["processes"] == 2

    def rows(out):  # the selection's order, whatever order the runs finished in
        return [(r["project"], r["run_id"], r["result"], r["sent"], r["error"]) for r in out["runs"]]
    assert rows(outs["procs"]) == rows(outs["one"])
    assert len(rows(outs["one"])) == 11


def test_progress_lines_name_every_run_of_every_process(root, tmp_path):
    make_runs(root, 6, steps=20)
    res = run_cli("sync", "--to", "store", "--uri", str(tmp_path / "team"), "--jobs", "4", root=root, env=TWO)
    assert res.returncode == 0, res.stdout + res.stderr
    ends = [line for line in res.stdout.splitlines() if line.startswith("sync team/") and "ok (" in line]
    assert len(ends) == 6
    assert sorted(line.rsplit("[", 1)[1] for line in ends) == sorted(f"{k}/6]" for k in range(1, 7))
    assert res.stderr == ""


# ----------------------------------------------------------------------------- endings
def big_store(root: Path) -> None:
    make_runs(root, 16, steps=300, keys=8)


def start_sync(root: Path, replica: Path, jobs: str, *extra: str, **popen) -> tuple[subprocess.Popen, list[int]]:
    """A fresh interpreter's ``sync --to store`` in two worker processes, Ctrl-C as a shell's
    foreground job takes it, and the pids of those processes, once they and a first part are
    there."""
    p = subprocess.Popen([sys.executable, "-c", SYNC_CHILD, "sync", "--to", "store", "--uri", str(replica),
                          "--jobs", jobs, *extra, "--root", str(root)], stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **TWO}, **popen)
    workers = workers_of(p.pid)
    deadline = time.monotonic() + 60
    while replica_parts(replica) == 0 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert p.poll() is None, "the sync ended before it could be interrupted"
    return p, workers


def rerun_is_exact(root: Path, replica: Path) -> None:
    no_row_twice(replica)
    res = sync_store(root, replica)
    assert res.returncode == 0, res.stdout + res.stderr
    assert_exact(root, replica)


def test_sigkill_of_the_parent_ends_its_processes_and_a_rerun_is_exact(root, tmp_path):
    big_store(root)
    replica = tmp_path / "team"
    for delay in (0.0, 0.4, 1.0):
        child = spawn_cli("sync", "--to", "store", "--uri", str(replica), "--jobs", "4", "--root", str(root), env=TWO)
        workers = workers_of(child.pid)
        time.sleep(delay)
        before = replica_runs(replica)
        child.kill()
        child.wait(timeout=30)
        assert wait_gone(workers) == [], "a worker process outlived its killed parent"
        # each worker thread may end the run it was on (2 processes x 2 threads), none starts another
        # (one more: a run may have opened between the look and the kill)
        assert len(replica_runs(replica) - before) <= 5
        no_row_twice(replica)
    rerun_is_exact(root, replica)


def test_ctrl_c_ends_every_process_at_once_and_a_rerun_is_exact(root, tmp_path):
    """SIGINT to the whole foreground group, as a terminal sends it: exit 130, no process left."""
    big_store(root)
    replica = tmp_path / "team"
    p, workers = start_sync(root, replica, "4", stdout=subprocess.DEVNULL, start_new_session=True)
    os.killpg(p.pid, signal.SIGINT)
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    assert wait_gone(workers, timeout=10) == []
    rerun_is_exact(root, replica)


def test_ctrl_c_while_the_processes_start_ends_them_quietly(root, tmp_path):
    """A Ctrl-C that comes while a worker process is still importing (before it could ignore
    SIGINT): exit 130, the one line that says how to resume, and no traceback from any process."""
    make_runs(root, 4, steps=5)
    interrupted = 0
    for delay in (0.0, 0.05, 0.15, 0.3):
        replica = tmp_path / f"team-{delay}"
        p = subprocess.Popen([sys.executable, "-c", SYNC_CHILD, "sync", "--to", "store", "--uri", str(replica),
                              "--jobs", "4", "--root", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, **TWO}, start_new_session=True)
        workers = workers_of(p.pid)  # they exist: spawned, and importing
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGINT)
        _out, err = p.communicate(timeout=60)
        if p.returncode == 0:  # it ended before the signal came: nothing to see at this delay
            continue
        assert p.returncode == 130, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert wait_gone(workers, timeout=10) == []
        interrupted += 1
    assert interrupted  # at 0 s at least, the processes were still starting
    rerun_is_exact(root, replica)


def holding_a_run(root: Path, workers: list[int], timeout: float = 60) -> int:
    """A worker process that holds a run's lock now (its pid is in the lock file): one that has
    been handed runs, not one still starting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for lock in (root / "_locks").glob("sync-store-run-*.lock"):
            try:
                pid = json.loads(lock.read_text()).get("pid")
            except (OSError, ValueError):
                continue
            if pid in workers:
                return pid
        time.sleep(0.002)
    raise AssertionError("no worker process took a run")


def test_a_killed_worker_process_fails_its_runs_only_and_a_rerun_is_exact(root, tmp_path):
    big_store(root)
    replica = tmp_path / "team"
    p, workers = start_sync(root, replica, "2", "--format", "json", stdout=subprocess.PIPE)
    # the one killed has runs: under load the other may still be starting when the first part lands
    os.kill(holding_a_run(root, workers), signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    report = json.loads(out)
    lost = [r for r in report["runs"] if r["error_kind"] == "error"]
    assert p.returncode == 8, err
    assert lost and all("ended unexpectedly (exit code -9)" in r["error"] for r in lost), out
    assert all(r["result"] == "ok" for r in report["runs"] if r not in lost)  # the other process's runs
    rerun_is_exact(root, replica)
