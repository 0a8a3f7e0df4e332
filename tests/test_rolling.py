"""Rolling merges: a live writer keeps its own part files few, without losing, duplicating or
blocking anything, and only when nothing could race it (trackstore.write.rolling)."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time

import trackstore
from tests.helpers import python_child, run_cli
from trackstore.read.listing import resolve_run
from trackstore.read.reader import read_kind
from trackstore.store import locks
from trackstore.store import merge as C
from trackstore.store.layout import RunPaths
from trackstore.write import rolling as R

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flush_steps(run, start, n, keys=("loss", "reward")):
    for s in range(start, start + n):
        run.log({k: s + i / 10 for i, k in enumerate(keys)}, step=s)
        run.flush()


def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def seqs(paths, kind="metrics"):
    t = read_kind(paths, kind)
    return sorted(zip(t.column("writer").to_pylist(), t.column("seq").to_pylist()))


def test_a_live_run_keeps_its_files_few_and_every_row(root):
    run = trackstore.init("p", root=root, flush_interval=3600)
    flush_steps(run, 0, 16 * 16 + 5)  # enough for a level-2 file
    paths = run.paths
    assert wait_for(lambda: len(paths.parts("metrics")) <= 6), len(paths.parts("metrics"))
    names = [p.name for p in paths.parts("metrics")]
    assert any(n.endswith(f"-{0:012d}-{2 * 256 - 1:012d}.parquet") for n in names), names  # 256 flushes x 2 keys
    assert seqs(paths) == [(run.writer_id, i) for i in range(2 * 261)]
    con = trackstore.connect(root)
    assert con.execute("SELECT count(*), count(DISTINCT step), max(step) FROM metrics").fetchone() == (522, 261, 260)
    assert con.execute("SELECT key, step, value FROM latest ORDER BY key").fetchall() == [
        ("loss", 260, 260.0), ("reward", 260, 260.1)]
    assert not any(n.startswith(".compact") for n in os.listdir(paths.dir))
    run.finish()
    assert len(paths.parts("metrics")) == 1 and seqs(paths) == [(run.writer_id, i) for i in range(522)]


def test_off_with_compact_false_or_the_environment(root, monkeypatch):
    a = trackstore.init("p", root=root, flush_interval=3600, compact=False)
    flush_steps(a, 0, 20)
    monkeypatch.setenv("TRACKSTORE_COMPACT", "0")
    b = trackstore.init("p", root=root, flush_interval=3600)
    flush_steps(b, 0, 20)
    time.sleep(0.5)
    assert len(a.paths.parts("metrics")) == 20 and len(b.paths.parts("metrics")) == 20
    a.finish()
    b.finish()
    assert len(a.paths.parts("metrics")) == 20 and len(b.paths.parts("metrics")) == 20


def test_no_merge_while_another_writer_is_alive_or_maintenance_runs(root):
    run = trackstore.init("p", root=root, flush_interval=3600)
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})
        import trackstore
        other = trackstore.init("p", run_id={run.id!r}, resume=True, root={str(root)!r}, flush_interval=3600)
        other.log({{"x": 1.0}}, step=0)
        other.flush()
        print("joined", flush=True)
        sys.stdin.readline()
    """)
    child = python_child(code, stdin=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "joined"
        flush_steps(run, 0, 20)
        time.sleep(0.5)
        ours = [p for p in run.paths.parts("metrics") if run.writer_id in p.name]
        assert len(ours) == 20  # another rank could be flushing into the folder: no swap
    finally:
        child.kill()
        child.wait()
    lone = trackstore.init("p", root=root, flush_interval=3600)
    with locks.acquire(root, "maintenance"):
        flush_steps(lone, 0, 20)
        time.sleep(0.5)
        assert len(lone.paths.parts("metrics")) == 20
    flush_steps(lone, 20, 12)  # the next flushes find the lock free
    assert wait_for(lambda: len(lone.paths.parts("metrics")) < 32)
    assert seqs(lone.paths) == [(lone.writer_id, i) for i in range(64)]


def test_a_failing_merge_warns_once_and_logging_goes_on(root, monkeypatch, capfd):
    calls = []

    def broken(paths, kind, files):
        calls.append(kind)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(C, "merge_own_parts", broken)
    run = trackstore.init("p", root=root, flush_interval=3600)
    flush_steps(run, 0, 40)
    assert wait_for(lambda: calls)
    time.sleep(0.3)
    run.finish(compact=False)
    err = capfd.readouterr().err
    assert err.count("as it goes stopped") == 1 and "No space left" in err
    assert len(calls) == 1  # disabled after the first failure
    assert seqs(run.paths) == [(run.writer_id, i) for i in range(80)]


def test_sigkill_during_a_rolling_merge_loses_nothing(root):
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        import trackstore
        from trackstore.store import merge as C
        real = C._exchange
        def die(a, b):
            os.kill(os.getpid(), 9)
        C._exchange = die
        run = trackstore.init("p", root={str(root)!r}, run_id="k", flush_interval=3600)
        C._exchange = real  # the probe of the filesystem must pass; the merge's swap must not
        import trackstore.write.rolling as R
        orig = R.RollingMerger._safe_now
        def safe_then_arm(self):
            ok = orig(self)
            C._exchange = die
            return ok
        R.RollingMerger._safe_now = safe_then_arm
        for s in range(40):
            run.log({{"loss": float(s)}}, step=s)
            run.flush()
        import time
        time.sleep(30)
    """)
    child = python_child(code)
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    paths = resolve_run("k", root).paths
    got = read_kind(paths, "metrics")
    assert sorted(got.column("seq").to_pylist()) == list(range(got.num_rows)) and got.num_rows >= 16
    assert C.has_leftovers(paths.kind_dir("metrics"))
    assert run_cli("doctor", "--fix", root=root).returncode == 0
    assert not C.has_leftovers(paths.kind_dir("metrics"))
    again = read_kind(paths, "metrics")
    assert sorted(again.column("seq").to_pylist()) == sorted(got.column("seq").to_pylist())


def test_levels_are_a_base_fanout_counter(tmp_path):
    """Pure bookkeeping: no file is touched until a merge is due."""
    m = R.RollingMerger(RunPaths(tmp_path, "p", "r"), "w")
    for i in range(R.FANOUT - 1):
        m.wrote("metrics", tmp_path / f"{i}")
    assert not m.due()
    m.wrote("metrics", tmp_path / "last")
    assert m.due()
    m.enabled = False
    assert not m.due()
    # files flushed while a merge was pending: the oldest run of FANOUT is merged first
    assert R._due_group([(1, "a")] * 15 + [(0, "b")] * 17) == 15
    assert R._due_group([(1, "a")] * 16 + [(0, "b")]) == 0
    assert R._due_group([(2, "a"), (1, "b")] * 3) is None


def test_merges_run_in_the_writers_thread_never_the_callers(root, monkeypatch):
    import threading

    threads = []
    real = C.merge_own_parts

    def recording(paths, kind, files):
        threads.append(threading.current_thread().name)
        return real(paths, kind, files)

    monkeypatch.setattr(C, "merge_own_parts", recording)
    run = trackstore.init("p", root=root, flush_interval=3600)
    flush_steps(run, 0, 40)  # explicit flushes from this (the training) thread
    assert wait_for(lambda: len(threads) >= 2)
    assert all(name.startswith("trackstore-writer-") for name in threads), threads
    run.finish()


def test_maintenance_commands_wait_for_a_runs_brief_merge_but_not_for_a_gc(root):
    """A cron gc (or compact, import, export, doctor --fix) started while a run merges its files
    waits the few moments that takes; while another maintenance job holds the lock, exit 6 at once."""
    run = trackstore.init("p", root=root, flush_interval=3600)
    flush_steps(run, 0, 3)
    run.finish(compact=False)

    def holder(job, seconds):
        code = textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {REPO!r})
            from trackstore.store import locks
            lk = locks.acquire({str(root)!r}, "maintenance", info={{"job": {job!r}}})
            print("held", flush=True)
            time.sleep({seconds})
            lk.release()
        """)
        child = python_child(code)
        assert child.stdout.readline().strip() == "held"
        return child

    child = holder(locks.BRIEF_JOB, 1.5)
    try:
        t0 = time.monotonic()
        res = run_cli("compact", root=root)
        assert res.returncode == 0, res.stderr
        assert time.monotonic() - t0 >= 1.0  # it waited for the merge, then did its work
        assert len(run.paths.parts("metrics")) == 1
    finally:
        child.wait(timeout=30)
    child = holder("gc", 30)
    try:
        t0 = time.monotonic()
        res = run_cli("compact", root=root)
        assert res.returncode == 6 and "maintenance" in res.stderr
        assert time.monotonic() - t0 < 25
    finally:
        child.kill()
        child.wait()
