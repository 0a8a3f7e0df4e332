"""Named store locks: one holder at a time across real processes, dead holders taken over safely."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time

import pytest

from tests.helpers import python_child
from trackstore.errors import LockHeldError
from trackstore.store import locks
from trackstore.store.clock import iso

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _holder(root, name, extra=""):
    """A child process that takes the lock, says so, and sleeps until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        lk = locks.acquire({str(root)!r}, {name!r})
        {extra}
        print("held", flush=True)
        time.sleep(120)
    """)
    child = python_child(code)
    assert child.stdout.readline().strip() == "held", child.stderr.read()
    return child


def test_second_acquire_names_the_holder(root):
    child = _holder(root, "sync-x")
    try:
        with pytest.raises(LockHeldError, match=f"pid {child.pid}"):
            locks.acquire(root, "sync-x")
        st = locks.read_lock(root, "sync-x")
        assert st is not None and not st.stale and st.data["pid"] == child.pid
    finally:
        child.kill()
        child.wait()


def test_dead_holder_is_taken_over(root):
    child = _holder(root, "gc")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert locks.read_lock(root, "gc").stale
    with locks.acquire(root, "gc") as lk:
        assert lk.held and json.loads(lk.path.read_text())["pid"] == os.getpid()
    assert not lk.path.exists()


def _fake_remote(root, name, age_s, token="remote"):
    path = locks.lock_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = iso(time.time() - age_s)
    path.write_text(json.dumps({"name": name, "host": "some-other-node", "pid": 1, "token": token,
                                "created_at": t, "heartbeat_at": t, "info": {}}))
    return path


def test_remote_holder_judged_by_heartbeat(root):
    _fake_remote(root, "sync-a", age_s=5)
    with pytest.raises(LockHeldError, match="some-other-node"):
        locks.acquire(root, "sync-a")
    _fake_remote(root, "sync-b", age_s=locks.STALE_AFTER_S + 60)
    with locks.acquire(root, "sync-b") as lk:
        assert lk.held


def test_unreadable_fresh_lock_counts_as_held(root):
    path = locks.lock_path(root, "half")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # a holder between O_EXCL create and its first write
    with pytest.raises(LockHeldError, match="holder unknown"):
        locks.acquire(root, "half")
    old = time.time() - locks.STALE_AFTER_S - 10
    os.utime(path, (old, old))
    with locks.acquire(root, "half"):
        pass


def test_refresh_detects_takeover(root):
    lk = locks.acquire(root, "sync-t", stale_after=1)
    data = json.loads(lk.path.read_text())
    data.update(host="elsewhere", heartbeat_at=iso(time.time() - 100))  # make it look stale
    lk.path.write_text(json.dumps(data))
    other = locks.acquire(root, "sync-t", stale_after=1)
    with pytest.raises(LockHeldError, match="lost lock"):
        lk.refresh()
    lk.release()  # not ours any more: must not remove the new holder's file
    assert other.path.exists() and json.loads(other.path.read_text())["token"] == other.token
    other.release()


def test_wait_and_timeout(root):
    child = _holder(root, "w")
    try:
        t0 = time.monotonic()
        with pytest.raises(LockHeldError):
            locks.acquire(root, "w", wait=True, timeout=0.5)
        assert time.monotonic() - t0 >= 0.5
        child.kill()
        child.wait()
        with locks.acquire(root, "w", wait=True, timeout=30):
            pass
    finally:
        child.kill()
        child.wait()


def test_set_info_runs_visible_to_gc(root):
    child = _holder(root, "sync-mlflow-1", extra="lk.set_info(runs=['p/r1', 'r2'])")
    try:
        named, unnamed = locks.runs_in_use(root)
        assert named == {"p/r1", "r2"} and unnamed == []
        assert locks.run_in_use("p", "r1", named) and locks.run_in_use("q", "r2", named)
        assert not locks.run_in_use("p", "r3", named)
    finally:
        child.kill()
        child.wait()
    assert locks.runs_in_use(root) == (set(), [])  # a dead holder protects nothing


def test_racing_takeover_has_one_winner(root):
    """Many processes find the same stale lock at once: exactly one ends up holding it."""
    _fake_remote(root, "race", age_s=locks.STALE_AFTER_S + 60)
    go = root / "go"
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        from trackstore.errors import LockHeldError
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        try:
            lk = locks.acquire({str(root)!r}, "race")
        except LockHeldError:
            print("lost", flush=True)
        else:
            print("won", flush=True)
            time.sleep(1.0)   # hold it while the others try (they try once, right at "go")
            lk.release()
    """)
    children = [python_child(code) for _ in range(6)]
    for c in children:
        assert c.stdout.readline().strip() == "ready"
    go.write_text("")
    outs = [c.communicate(timeout=60)[0].strip() for c in children]
    assert sorted(outs) == ["lost"] * 5 + ["won"], outs


def test_bad_names_refused(root):
    from trackstore.errors import UsageError

    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(UsageError):
            locks.acquire(root, bad)


def test_import_stays_cheap():
    import subprocess

    code = "import sys, trackstore.store.locks; print('pyarrow' in sys.modules or 'duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_takeover_restores_a_lock_that_replaced_the_stale_one(root):
    """The file judged stale was replaced before the rename: the new one is put back, not deleted."""
    stale = _fake_remote(root, "swap", age_s=locks.STALE_AFTER_S + 60)
    judged = locks._identity(stale)
    stale.unlink()
    fresh = _fake_remote(root, "swap", age_s=0, token="fresh")  # may even reuse the inode
    fresh_bytes = fresh.read_bytes()
    locks._take_over(fresh, judged)
    assert fresh.read_bytes() == fresh_bytes
    with pytest.raises(LockHeldError):
        locks.acquire(root, "swap")


def test_a_released_lock_leaves_no_file_behind(root):
    """A lock name used once leaves nothing in ``_locks/``: its guard goes with the lock file
    (one lock name per run and destination synced would otherwise leave a file each for ever)."""
    lk = locks.acquire(root, "once")
    assert (locks.locks_dir(root) / "once.lock").exists()
    lk.refresh()
    lk.release()
    assert sorted(os.listdir(locks.locks_dir(root))) == []
    again = locks.acquire(root, "once")  # and the name works as before
    with pytest.raises(LockHeldError):
        locks.acquire(root, "once")
    again.release()
    assert sorted(os.listdir(locks.locks_dir(root))) == []


def test_a_waiter_on_a_removed_guard_waits_on_the_new_one(root):
    """A process that waited for a guard its holder removed holds a file nobody opens again: it
    must see that and queue on the path's new guard, or it would be inside beside whoever
    created that one."""
    import threading

    locks.locks_dir(root).mkdir(parents=True, exist_ok=True)
    path = locks.lock_path(root, "contended")
    inside: list[tuple[str, float, float]] = []
    first_in, waiter_started = threading.Event(), threading.Event()

    def hold(who: str, seconds: float, remove: bool = False, started: threading.Event | None = None) -> None:
        if started is not None:
            started.set()
        with locks._guard(path, remove=remove):
            t0 = time.monotonic()
            if who == "first":
                first_in.set()
                waiter_started.wait(5)
                time.sleep(0.3)  # the waiter is blocked on this guard's flock by now
            else:
                time.sleep(seconds)
            inside.append((who, t0, time.monotonic()))

    first = threading.Thread(target=hold, args=("first", 0, True))
    first.start()
    assert first_in.wait(5)
    waiter = threading.Thread(target=hold, args=("waiter", 0.4), kwargs={"started": waiter_started})
    waiter.start()
    first.join(5)
    # the first holder has removed its guard and let go: a newcomer creates the path's new guard
    newcomer = threading.Thread(target=hold, args=("newcomer", 0.4))
    newcomer.start()
    waiter.join(10)
    newcomer.join(10)
    spans = sorted((t0, t1, who) for who, t0, t1 in inside if who != "first")
    assert len(spans) == 2
    (a0, a1, _), (b0, b1, _) = spans
    assert a1 <= b0, f"two holders of one guard at once: {spans}"


def test_one_holder_at_a_time_while_holders_release_and_die(root):
    """Processes take and release one lock name over and over while some are SIGKILLed at random
    moments, holding it or waiting for it (a stale lock is taken over by the next): never two
    holders at once, and when the last
    has gone, taking and releasing the name once leaves ``_locks/`` empty. Each holder marks
    its turn with a file that appears whole (a hard link) naming its pid; a mark left by a
    killed holder names a dead pid and is replaced by the next."""
    import random

    from tests.helpers import kill9

    mark = root / "inside"
    code = textwrap.dedent(f"""
        import os, random, sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        mark = {str(mark)!r}
        end = time.monotonic() + 2.0
        print("ready", flush=True)
        turns = 0
        while time.monotonic() < end:
            lk = locks.acquire({str(root)!r}, "busy", wait=True, timeout=60)
            mine = f"{{mark}}.{{os.getpid()}}"
            with open(mine, "w") as f:  # the mark appears whole, with its holder's pid (a link)
                f.write(str(os.getpid()))
            try:
                os.link(mine, mark)
            except FileExistsError:
                pid = int(open(mark).read())
                try:
                    os.kill(pid, 0)
                    print(f"OVERLAP with {{pid}}", flush=True)
                except ProcessLookupError:
                    pass  # a holder killed in its turn
                os.replace(mine, mark)
            else:
                os.unlink(mine)
            time.sleep(random.random() * 0.004)
            os.unlink(mark)
            lk.release()
            turns += 1
        print(f"turns {{turns}}", flush=True)
    """)
    rng = random.Random(7)
    live = [python_child(code) for _ in range(4)]
    finished = []
    for c in live:
        assert c.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 2.0
    killed = 0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.1, 0.3))
        victim = live.pop(rng.randrange(len(live)))
        kill9(victim)
        killed += 1
        live.append(python_child(code))
        assert live[-1].stdout.readline().strip() == "ready"
    for c in live:
        out, err = c.communicate(timeout=60)
        assert c.returncode == 0, err
        finished.append(out)
    assert killed >= 5
    assert not any("OVERLAP" in out for out in finished), finished
    assert sum(int(out.split("turns ")[1]) for out in finished) > 50
    for left in root.glob("inside*"):  # the marks of holders killed in their turn
        left.unlink()
    locks.acquire(root, "busy").release()  # a stale lock left by a killed holder is taken over
    assert os.listdir(locks.locks_dir(root)) == []


def test_gc_removes_the_guard_files_older_versions_left(root):
    """Guard files of names nobody holds (what versions before 8 December 2026 left for every
    lock name ever taken) are removed by a gc pass; the guard of a held lock, and one another
    process has flocked, stay."""
    import subprocess

    from trackstore.upkeep.gc import Policy, gc

    d = locks.locks_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    for i in range(50):  # as an older version leaves them: empty, no lock file
        (d / f"sync-store-run-{i:024x}.guard").touch()
    held = locks.acquire(root, "held-by-a-sync")
    busy = d / "busy-name.guard"
    busy.touch()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(busy)!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("flocked", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "flocked"
        gc(root, Policy(older_than_s=10 * 365 * 86400))
        assert sorted(os.listdir(d)) == ["busy-name.guard", "held-by-a-sync.guard", "held-by-a-sync.lock"]
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    held.release()
    gc(root, Policy(older_than_s=10 * 365 * 86400))
    assert os.listdir(d) == []


def test_a_holder_killed_while_taking_a_lock_leaves_no_empty_lock_file(root):
    """A process killed while it creates a lock file (here: stopped right before the file gets
    its name) leaves no lock at all, never an empty one that would count as held for
    ``STALE_AFTER_S``: the name is free at once, and gc removes the half-made file once old."""
    from tests.helpers import kill9
    from trackstore.upkeep.gc import Policy, gc

    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore.store import locks
        def stop(src, dst):
            print("writing", flush=True)
            time.sleep(600)
        os.link = stop
        locks.acquire({str(root)!r}, "half")
    """)
    child = python_child(code)
    assert child.stdout.readline().strip() == "writing"
    kill9(child)
    d = locks.locks_dir(root)
    leftovers = [n for n in os.listdir(d) if n.endswith(".tmp")]
    assert len(leftovers) == 1 and not (d / "half.lock").exists()
    locks.acquire(root, "half").release()  # free at once
    gc(root, Policy(older_than_s=10 * 365 * 86400))
    assert (d / leftovers[0]).exists()  # a creation under way, as far as gc can tell
    old = time.time() - locks.STALE_AFTER_S - 60
    os.utime(d / leftovers[0], (old, old))
    gc(root, Policy(older_than_s=10 * 365 * 86400))
    assert os.listdir(d) == []


def test_a_filesystem_without_hard_links_still_takes_locks(root, monkeypatch):
    """Where ``link`` is refused (some FUSE and network filesystems), a lock file is created in
    place with ``O_EXCL``, as before: one holder, the JSON whole."""
    import errno

    def refuse(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse)
    lk = locks.acquire(root, "nolinks")
    assert json.loads((locks.locks_dir(root) / "nolinks.lock").read_text())["token"] == lk.token
    with pytest.raises(LockHeldError):
        locks.acquire(root, "nolinks")
    lk.release()
    assert os.listdir(locks.locks_dir(root)) == []
