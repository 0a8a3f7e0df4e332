"""Ctrl-C during `trackstore sync` says it was interrupted, and how much is left, instead of
looking like success: exit 130, one line per run left with rows pending, no traceback; the
same command then completes, every point once."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import trackstore
from tests.helpers import mlflow_sqlite_uri

STEPS, KEYS, RUNS = 1500, 4, 2


def _store(root):
    for i in range(RUNS):
        run = trackstore.init("p", name=f"big-{i}", root=root)
        for step in range(STEPS):
            run.log({f"k{k}": step * 0.1 + k for k in range(KEYS)}, step=step)
        run.finish()


def _sync(root, uri):
    return [sys.executable, "-m", "trackstore.cli.main", "sync", "--to", "mlflow", "--uri", uri, "--root", str(root),
            "--batch-size", "50", "--jobs", "1"]


def test_ctrl_c_during_sync_says_interrupted_and_the_same_command_resumes(tmp_path):
    root = tmp_path / "store"
    _store(root)
    uri = mlflow_sqlite_uri(tmp_path)
    env = {**os.environ, "COLUMNS": "80"}
    # a shell starts background jobs (make test) with SIGINT ignored: give the child the default,
    # which Python turns into KeyboardInterrupt as on a terminal
    proc = subprocess.Popen(_sync(root, uri), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stdout.readline()  # "sync: opening ..." then a line when the first run starts
    deadline = time.monotonic() + 120
    while "rows pending" not in first and time.monotonic() < deadline:
        first = proc.stdout.readline()
    assert "rows pending" in first, first
    time.sleep(1.5)  # some batches in, most of the run still to go
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "ok (" not in out, out + err
    lines = re.findall(r"interrupted: ([\d,]+) rows? pending for p/(\S+); run the same command to resume", err)
    assert lines, err
    assert all(int(n.replace(",", "")) > 0 for n, _ in lines)
    assert ": interrupted" in out  # the run's progress line says so too, not "ok"
    done = subprocess.run(_sync(root, uri), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(uri.removeprefix("sqlite:///"))
    total, distinct = db.execute("SELECT count(*), count(DISTINCT run_uuid || '/' || key || '/' || step) "
                                 "FROM metrics WHERE key LIKE 'k%'").fetchone()
    assert total == distinct == RUNS * STEPS * KEYS


_INTERRUPTED_IN_AN_IMPORT = """
import sys

from trackstore.cli.main import main
from trackstore.sync.mlflow import MlflowAdapter


def interrupt():
    raise KeyboardInterrupt


def open_run(self, run, cursor):
    # the Ctrl-C lands while the adapter imports its client, inside code that the standard
    # library runs through eval() there (collections.namedtuple, dataclasses)
    eval("interrupt()", {"interrupt": interrupt})


MlflowAdapter.open_run = open_run
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_inside_an_import_still_exits_130(tmp_path):
    root = tmp_path / "store"
    run = trackstore.init("p", name="one", root=root)
    run.log({"k": 1.0}, step=0)
    run.finish()
    (tmp_path / "interrupted_in_an_import.py").write_text(_INTERRUPTED_IN_AN_IMPORT)
    args = _sync(root, mlflow_sqlite_uri(tmp_path))[3:]  # the CLI's own arguments
    # run as `python -m`, as the first test does: only then does CPython act on the mark at exit
    done = subprocess.run([sys.executable, "-m", "interrupted_in_an_import", *args], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 130, (done.returncode, done.stdout + done.stderr)
    assert "run the same command to resume" in done.stderr, done.stderr
