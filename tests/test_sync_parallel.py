"""``trackstore sync --jobs N`` and the per-run sync locks (sync/parallel.py, trackstore/store/locks.py).

Real things only: the real CLI in subprocesses, real MLflow stores (sqlite, and the file store,
which keeps re-sent points, so "sent once" is visible there), the real swanlab client offline
read back with SwanLab's own reader, real processes holding locks and real SIGKILLs.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time

import pytest

import trackstore
from tests.helpers import cli_in_pty, mlflow_sqlite_uri, run_cli, spawn_cli
from trackstore.store import locks

pytest.importorskip("mlflow")

SYNC_CHILD = "import sys\nfrom trackstore.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


def make_runs(root, n, *, steps=20, keys=3, project="par"):
    runs = []
    for i in range(n):
        run = trackstore.init(project, name=f"r{i}", root=root)
        for s in range(steps):
            run.log({f"m{k}": s * 10 + k + i / 100 for k in range(keys)}, step=s)
        run.finish()
        runs.append(run)
    return runs


def expected(run):
    import pyarrow.parquet as pq

    rows = pq.read_table(run.dir / "metrics").to_pylist()
    return sorted((r["key"], r["step"], r["value"], int(r["ts"].timestamp() * 1000)) for r in rows)


def mlflow_points(uri, run):
    """Every point MLflow holds for the run (all remote runs carrying its tag), as ``expected``."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    exp = c.get_experiment_by_name(run.project)
    if exp is None:
        return []
    out = []
    for r in c.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run.id}'",
                           run_view_type=ViewType.ALL):
        for key in r.data.metrics:
            out += [(key, m.step, m.value, m.timestamp) for m in c.get_metric_history(r.info.run_id, key)]
    return sorted(out)


def hold_run_lock(root, target, destination, run):
    """A real process holding ``run``'s sync lock for ``destination``, as a sync sending it would."""
    name = locks.sync_run_lock_name(target, destination, run.project, run.id)
    code = ("import sys, time; from trackstore.store import locks; "
            "l = locks.acquire(sys.argv[1], sys.argv[2], info={'runs': [sys.argv[3]]}); print('held', flush=True); "
            "time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(root), name, f"{run.project}/{run.id}"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def sync_json(root, *args, timeout=240):
    res = run_cli("sync", "--format", "json", *args, root=root, timeout=timeout)
    assert res.stdout, res.stderr
    return res.returncode, json.loads(res.stdout), res.stderr


# ---------------------------------------------------------------------------- the option


def test_help_explains_jobs(root):
    res = run_cli("sync", "--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    assert "--jobs" in text and "runs at once" in text and "own lock" in text and "MLflow server" in text
    assert "--wait" in text and "instead of skipping them" in text


@pytest.mark.parametrize("value", ["0", "-3"])
def test_jobs_zero_or_negative_is_a_usage_error(root, tmp_path, value):
    make_runs(root, 1, steps=2)
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_sqlite_uri(tmp_path), "--jobs", value, root=root)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"--jobs {value}" in res.stderr and "1 or more" in res.stderr
    assert not (root / "_sync").exists()  # refused before anything was sent


def test_jobs_summary_and_exit_codes_equal_one_at_a_time(root, tmp_path):
    """The same store synced with --jobs 1 and --jobs 4 to two destinations: the same summary
    (runs in selection order, every field but the destination) and the same exit codes, for a
    pass with a damaged run (8) and for the pass after it (8 again, the others up to date)."""
    from tests.test_sync_damaged import truncate

    runs = make_runs(root, 5)
    damaged = make_runs(root, 1, project="par2")[0]
    truncate(sorted((damaged.dir / "metrics").glob("*.parquet"))[0])
    outs = {}
    for jobs in ("1", "4"):
        uri = mlflow_sqlite_uri(tmp_path, f"m{jobs}.db")
        first = sync_json(root, "--to", "mlflow", "--uri", uri, "--jobs", jobs)
        again = sync_json(root, "--to", "mlflow", "--uri", uri, "--jobs", jobs)
        # the destination, and where to view it (which names the destination), differ by design
        outs[jobs] = [(code, {k: [{f: x for f, x in r.items() if f != "view"} for r in v] if k == "runs" else v
                              for k, v in out.items() if k not in ("destination", "view")})
                      for code, out, _err in (first, again)]
        assert [code for code, _ in outs[jobs]] == [8, 8]
        for run in runs:
            assert mlflow_points(uri, run) == expected(run)
    assert outs["1"] == outs["4"]
    first = outs["4"][0][1]["runs"]
    assert [r["run_id"] for r in first] == [r["run_id"] for r in outs["1"][0][1]["runs"]]
    assert [r["error_kind"] for r in first if r["run_id"] == damaged.id] == ["damaged"]


# ---------------------------------------------------------------------------- per-run locks


def test_a_held_run_is_skipped_and_the_others_proceed(root, tmp_path):
    """Another sync holds run A for this destination: a sync of A and B sends B, says A is
    held (exit 6, stderr names the lock), and a later sync sends A. A lock for another
    destination holds nothing here."""
    a, b = make_runs(root, 2)
    uri = mlflow_sqlite_uri(tmp_path)
    holder = hold_run_lock(root, "mlflow", uri, a)
    other = hold_run_lock(root, "mlflow", "sqlite:///elsewhere.db", b)
    try:
        code, out, err = sync_json(root, "--to", "mlflow", "--uri", uri, "--jobs", "2")
        assert code == 6, err
        by_id = {r["run_id"]: r for r in out["runs"]}
        assert by_id[b.id]["error"] is None and by_id[b.id]["sent"]["metrics"] == 60
        assert by_id[a.id]["error_kind"] == "locked" and by_id[a.id]["sent"] == {}
        assert f"pid {holder.pid}" in by_id[a.id]["error"] and "skipped" in by_id[a.id]["result"]
        assert "1 run skipped" in err and "lock" in err
        assert mlflow_points(uri, a) == [] and mlflow_points(uri, b) == expected(b)
    finally:
        holder.kill()
        holder.wait()
    code, out, err = sync_json(root, "--to", "mlflow", "--uri", uri)
    assert code == 0, err
    assert mlflow_points(uri, a) == expected(a)
    other.kill()
    other.wait()


def test_wait_waits_for_the_run_and_sends_the_rest_meanwhile(root, tmp_path):
    a, b = make_runs(root, 2)
    uri = mlflow_sqlite_uri(tmp_path)
    holder = hold_run_lock(root, "mlflow", uri, a)
    sync = subprocess.Popen([sys.executable, "-c", SYNC_CHILD, "sync", "--to", "mlflow", "--uri", uri, "--wait",
                             "--jobs", "2", "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 120
        while mlflow_points(uri, b) != expected(b) and time.time() < deadline:
            time.sleep(0.2)
        assert mlflow_points(uri, b) == expected(b), "the free run was not sent while the other was held"
        assert sync.poll() is None, "--wait did not wait for the held run"
    finally:
        holder.kill()
        holder.wait()
    out, err = sync.communicate(timeout=120)
    assert sync.returncode == 0, out + err
    assert "another sync holds this run" in out and "waiting for it" in out
    assert mlflow_points(uri, a) == expected(a)


def test_two_real_syncs_of_the_same_runs_never_both_send_one(root, tmp_path):
    """Two real syncs of the same three runs at once (``--jobs 2`` each, one with ``--wait``):
    their summaries together sent every point once (each run was sent by one of them; the
    other skipped it, waited for it or found it up to date), and MLflow holds every point."""
    uri = mlflow_sqlite_uri(tmp_path)
    runs = make_runs(root, 3, steps=150, keys=4)
    base = [sys.executable, "-c", SYNC_CHILD, "sync", "--to", "mlflow", "--uri", uri, "--batch-size", "25",
            "--jobs", "2", "--format", "json", "--root", str(root)]
    procs = [subprocess.Popen(base + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for extra in ([], ["--wait"])]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes[0] in (0, 6) and codes[1] == 0, outs
    sent = {}
    for out, _err in outs:
        for r in json.loads(out)["runs"]:
            sent[r["run_id"]] = sent.get(r["run_id"], 0) + r["sent"].get("metrics", 0)
    assert sent == {run.id: 600 for run in runs}
    for run in runs:
        assert mlflow_points(uri, run) == expected(run)


def test_mlflow_file_store_takes_one_sync_at_a_time(root, tmp_path, monkeypatch):
    """MLflow's file store makes two experiments of one name when two writers create it at
    once: a sync to it holds the whole destination and sends one run at a time."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    runs = make_runs(root, 2, steps=5)
    holder = hold_run_lock(root, "mlflow", uri, type("AnyRun", (), {"project": "*", "id": "*"}))
    try:
        res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--jobs", "4", root=root)
        assert res.returncode == 6 and "lock" in res.stderr, res.stdout + res.stderr
    finally:
        holder.kill()
        holder.wait()
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--jobs", "4", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "syncing 1 run at a time to mlflow (MLflow's file store takes one writer at a time)" in res.stdout
    for run in runs:
        assert mlflow_points(uri, run) == expected(run)


def test_run_lock_names_and_stale_declarations(root):
    one = locks.sync_run_lock_name("mlflow", "http://a:5000", "p", "r1")
    assert one == locks.sync_run_lock_name("mlflow", "http://a:5000", "p", "r1")
    assert len({one, locks.sync_run_lock_name("mlflow", "http://b:5000", "p", "r1"),
                locks.sync_run_lock_name("mlflow", "http://a:5000", "p", "r2"),
                locks.sync_run_lock_name("wandb", "http://a:5000", "p", "r1")}) == 4
    locks.lock_path(root, one)  # a valid lock name
    # a declaration of a sync that died is cleared; a live one (this process) is kept
    code = ("import sys; from trackstore.store import locks; "
            "locks.declare(sys.argv[1], 'sync-mlflow-session-dead', {'runs': ['p/r9']})")
    subprocess.run([sys.executable, "-c", code, str(root)], check=True)
    live = locks.declare(root, locks.sync_session_lock_name("mlflow"), {"runs": ["p/r1"]})
    assert locks.runs_in_use(root)[0] == {"p/r1"}  # gc sees the live declaration only
    assert locks.remove_stale_declarations(root, "sync-mlflow-session-") == 1
    assert sorted(p.name for p in (root / "_locks").iterdir()) == [f"{live.name}.lock"]  # no guard files
    live.release()
    assert list((root / "_locks").iterdir()) == []


# ---------------------------------------------------------------------------- progress


def test_progress_shows_active_runs_and_an_overall_bar(root, tmp_path):
    runs = make_runs(root, 3, steps=30)
    code, text = cli_in_pty("sync", "--to", "mlflow", "--uri", mlflow_sqlite_uri(tmp_path), "--jobs", "2",
                            "--root", root, columns=120)
    assert code == 0, text
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colours and cursor moves
    # the display's last frame: the overall bar complete, with every row sent
    assert "3 runs, 2 at a time" in text and "3/3" in text and "270 rows, " in text and "rows/s" in text
    assert all(r.id in text for r in runs)
    res = run_cli("sync", "--to", "mlflow", "--uri", mlflow_sqlite_uri(tmp_path, "b.db"), "--jobs", "2", root=root)
    assert res.returncode == 0, res.stderr
    ended = [line for line in res.stdout.splitlines() if ": ok (" in line]
    assert sorted(line.rsplit(" ", 1)[1] for line in ended) == ["[1/3]", "[2/3]", "[3/3]"]


# ---------------------------------------------------------------------------- SIGKILL


def _acked(root) -> int:
    total = 0
    for f in (root / "_sync").rglob("run=*.json") if (root / "_sync").exists() else []:
        try:
            cur = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        total += sum(hi - lo + 1 for rs in cur["acked"].get("metrics", {}).values() for lo, hi in rs)
    return total


def _kill_and_rerun(root, args, total, seed, env=None):
    """SIGKILL ``args`` (a ``sync --jobs 4``) at seeded moments while it sends, four times."""
    rng = random.Random(seed)
    kills = 0
    for _ in range(4):
        before = _acked(root)
        p = spawn_cli(*args, env=env)
        deadline = time.time() + 120
        while p.poll() is None and _acked(root) == before and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(rng.random() * 0.3)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 2 and 0 < _acked(root), (kills, _acked(root))
    res = run_cli(*args, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _acked(root) == total
    # the killed syncs' locks are stale: nothing is left held (session declarations are cleared)
    assert locks.live_locks(root, "sync-") == []


def test_sigkill_of_a_parallel_sync_then_rerun_is_exact_mlflow(root, tmp_path):
    """MLflow (sqlite) after four SIGKILLs of a ``--jobs 4`` sync and a rerun: every point of
    every run, one remote run each. (MLflow's SQL stores merge a point sent twice, so this half
    proves nothing is lost; the SwanLab half below, whose files keep duplicates, proves nothing
    is doubled.)"""
    runs = make_runs(root, 4, steps=80, keys=3)
    uri = mlflow_sqlite_uri(tmp_path)
    args = ["sync", "--to", "mlflow", "--uri", uri, "--jobs", "4", "--batch-size", "10", "--root", str(root)]
    _kill_and_rerun(root, args, total=4 * 240, seed=3)
    for run in runs:
        assert mlflow_points(uri, run) == expected(run)


def test_sigkill_of_a_parallel_sync_then_rerun_is_exact_swanlab_offline(root, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    from tests.sync_harness import SwanlabHarness

    harness = SwanlabHarness(tmp_path, monkeypatch)
    # enough rows that the sync is still sending when the kills land (0.19-0.28 s after its first
    # acknowledgement): with 150 steps it was done about 0.3 s after it here, and a kill met only
    # the process's exit, if that
    runs = make_runs(root, 3, steps=400, keys=3)
    args = ["sync", *harness.cli_args(), "--jobs", "4", "--batch-size", "15", "--root", str(root)]
    _kill_and_rerun(root, args, total=3 * 1200, seed=5, env=harness.env())
    for run in runs:
        assert harness.metrics(run.project, run.id) == expected(run)
        assert harness.status(run.project, run.id) == "finished"


def test_swanlab_jobs_is_capped_at_one_and_says_why(root, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    from tests.sync_harness import SwanlabHarness

    harness = SwanlabHarness(tmp_path, monkeypatch)
    runs = make_runs(root, 2, steps=5)
    res = run_cli("sync", *harness.cli_args(), "--jobs", "4", root=root, env=harness.env())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--jobs 4: syncing 1 run at a time to swanlab (swanlab.init keeps one run per process)" in res.stdout
    for run in runs:
        assert harness.metrics(run.project, run.id) == expected(run)


def test_ctrl_c_stops_a_parallel_sync_at_once_and_the_rerun_is_exact(root, tmp_path):
    """SIGINT while two workers send: the sync exits 130 at once (it does not wait for the
    workers' runs to end), and the next sync settles what was in flight: exact."""
    runs = make_runs(root, 2, steps=200, keys=2)
    uri = mlflow_sqlite_uri(tmp_path)
    # a shell starts background jobs with SIGINT ignored, and children inherit that: restore it
    child = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n" + SYNC_CHILD
    args = [sys.executable, "-c", child, "sync", "--to", "mlflow", "--uri", uri, "--jobs", "2",
            "--batch-size", "5", "--root", str(root)]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while p.poll() is None and _acked(root) == 0 and time.time() < deadline:
        time.sleep(0.01)
    assert p.poll() is None, "the sync ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert 0 < _acked(root) < 800
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    for run in runs:
        assert mlflow_points(uri, run) == expected(run)
