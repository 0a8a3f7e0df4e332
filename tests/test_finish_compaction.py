"""finish() merges a run's part files when its last writer ends, and only when nobody else is
working on the run; it never loses a row, never raises into the caller, and survives SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import textwrap

import pytest

import trackstore
from tests.helpers import python_child, run_cli
from trackstore.read.listing import resolve_run
from trackstore.read.reader import read_kind
from trackstore.read.views import connect
from trackstore.store import locks
from trackstore.store import merge as C
from trackstore.store.schema import KINDS

REPO = __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__)))


def log_in_chunks(run, chunks: int = 4, steps: int = 25):
    for c in range(chunks):
        for s in range(c * steps, (c + 1) * steps):
            run.log({"loss": 1.0 / (s + 1), "reward": s * 0.1, "hist": trackstore.Histogram([s, s + 1, s + 2])}, step=s)
        run.log_samples([{"input": f"q{c}", "output": f"a{c}", "score": float(c)}], step=c * steps)
        with run.trace(step=c * steps) as t:
            with t.span("search", kind="tool"):
                pass
        run.flush()


def rows(paths):
    return {kind: sorted(zip(*[read_kind(paths, kind).column(c).to_pylist() for c in ("writer", "seq")]))
            for kind in KINDS}


def answers(root):
    con = connect(root)
    try:
        return [con.execute(q).fetchall() for q in (
            "SELECT key, step, value FROM metrics ORDER BY ALL",
            "SELECT key, step, value FROM latest ORDER BY ALL",
            "SELECT step, input, output, score FROM samples ORDER BY ALL",
            "SELECT name, kind, status FROM spans ORDER BY ALL",
            "SELECT key, step, count FROM histograms ORDER BY ALL")]
    finally:
        con.close()


def part_counts(paths):
    return {kind: len(paths.parts(kind)) for kind in KINDS if paths.parts(kind)}


def test_finish_merges_every_kind_and_keeps_every_row(root):
    run = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(run)
    assert part_counts(run.paths) == {"metrics": 4, "samples": 4, "spans": 4, "histograms": 4}
    before_rows, before_answers = rows(run.paths), answers(root)
    run.finish()
    assert part_counts(run.paths) == {"metrics": 1, "samples": 1, "spans": 1, "histograms": 1}
    assert rows(run.paths) == before_rows
    assert answers(root) == before_answers
    assert not C.has_leftovers(run.paths.kind_dir("metrics"))


def test_opt_out_per_run_per_call_and_by_environment(root, monkeypatch):
    a = trackstore.init("p", root=root, flush_interval=3600, compact=False)
    log_in_chunks(a, chunks=2)
    a.finish()
    b = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(b, chunks=2)
    b.finish(compact=False)
    monkeypatch.setenv("TRACKSTORE_COMPACT", "0")
    c = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(c, chunks=2)
    c.finish()
    for r in (a, b, c):
        assert part_counts(r.paths)["metrics"] == 2
    assert run_cli("compact", root=root).returncode == 0  # what cron does for them later
    assert all(part_counts(r.paths)["metrics"] == 1 for r in (a, b, c))


def test_skipped_while_a_sync_names_the_run_or_maintenance_runs(root):
    run = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(run, chunks=3)
    with locks.acquire(root, "sync-mlflow-test", info={"runs": [run.id]}):
        run.finish()
        assert part_counts(run.paths)["metrics"] == 3
    other = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(other, chunks=3)
    with locks.acquire(root, "maintenance"):
        other.finish()
    assert part_counts(other.paths)["metrics"] == 3
    assert C.compact_finished_run(other.paths).changed  # once nobody holds it


def test_size_bound_and_reasons(root, monkeypatch):
    run = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(run, chunks=2)
    monkeypatch.setattr(C, "FINISH_MAX_BYTES", 100)
    run.finish()
    assert part_counts(run.paths)["metrics"] == 2
    res = C.compact_finished_run(run.paths)
    assert not res.changed and "trackstore compact" in res.skipped
    assert C.compact_finished_run(run.paths, max_bytes=1 << 30).changed
    assert C.compact_finished_run(run.paths).skipped is None  # one part each: nothing to do, no lock taken


def test_only_the_last_writer_merges(root):
    """Two processes write one run: the first to finish leaves the parts alone (the other is
    still flushing); the last one merges every writer's parts, each into its own file."""
    first = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(first, chunks=2)
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})
        import trackstore
        run = trackstore.init("p", run_id={first.id!r}, resume=True, root={str(root)!r}, flush_interval=3600)
        for s in range(100, 130):
            run.log({{"loss": 0.5}}, step=s)
            if s % 10 == 9:
                run.flush()
        print("flushed", flush=True)
        sys.stdin.readline()
        run.finish()
        print("done", flush=True)
    """)
    child = python_child(code, stdin=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "flushed"
        first.finish()
        assert part_counts(first.paths)["metrics"] == 5  # 2 of ours + 3 of the other writer
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
    finally:
        child.kill()
        child.wait()
    writers = {p.name.split("-0")[0] for p in first.paths.parts("metrics")}
    assert part_counts(first.paths)["metrics"] == 2 and len(writers) == 2
    assert read_kind(first.paths, "metrics").num_rows == 2 * 25 * 2 + 30  # loss and reward, then loss


def test_a_failing_merge_warns_and_finish_still_succeeds(root, monkeypatch, capfd):
    run = trackstore.init("p", root=root, flush_interval=3600)
    log_in_chunks(run, chunks=2)
    before = rows(run.paths)

    def broken(paths, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(C, "compact_run", broken)
    run.finish()  # must not raise
    err = capfd.readouterr().err
    assert "merging its part files failed" in err and "No space left" in err
    assert rows(run.paths) == before and trackstore.connect(root).execute(
        "SELECT status FROM runs").fetchall() == [("finished",)]


@pytest.mark.parametrize("where", ["C._exchange = die", "C._finish_swap = die"])
def test_sigkill_during_the_merge_at_finish_loses_nothing(root, where):
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        import trackstore
        from trackstore.store import merge as C
        def die(*a, **k):
            os.kill(os.getpid(), 9)
        {where}
        run = trackstore.init("p", root={str(root)!r}, flush_interval=3600)
        for s in range(200):
            run.log({{"loss": 1.0 / (s + 1)}}, step=s)
            if s % 50 == 49:
                run.flush()
        print(run.id, flush=True)
        run.finish()
    """)
    child = python_child(code)
    run_id = child.stdout.readline().strip()
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    con = trackstore.connect(root)
    assert con.execute("SELECT status FROM runs").fetchall() == [("finished",)]  # ended before merging
    assert con.execute("SELECT count(*), count(DISTINCT step) FROM metrics").fetchone() == (200, 200)
    doctor = run_cli("doctor", "--fix", root=root)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    paths = resolve_run(run_id, root).paths
    assert not C.has_leftovers(paths.kind_dir("metrics"))
    assert read_kind(paths, "metrics").num_rows == 200


def test_sigterm_finishes_without_merging(root):
    """A pre-empted job has seconds before SIGKILL: its data is made safe, merging waits for cron."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        import trackstore
        run = trackstore.init("p", root={str(root)!r}, run_id="pre", flush_interval=3600)
        for s in range(30):
            run.log({{"loss": 1.0 / (s + 1)}}, step=s)
            if s % 10 == 9:
                run.flush()
        print("ready", flush=True)
        time.sleep(3600)
    """)
    child = python_child(code)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM
    paths = resolve_run("pre", root).paths
    assert part_counts(paths) == {"metrics": 3}
    assert trackstore.connect(root).execute("SELECT status FROM runs").fetchall() == [("failed",)]
    assert C.compact_finished_run(paths).changed  # what `trackstore compact` does later
