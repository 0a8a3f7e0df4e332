"""gc against runs that change after its plan: a run resumed, logged to and finished while gc
waits (at its prompt, or between its last re-check and the rename into ``_trash``) is kept with
every point, and a resume never writes into a folder gc moved.

Real processes throughout: the ``trackstore gc`` CLI on a pseudo-terminal (it asks only on a
terminal; a pipe makes it refuse), resumers as separate Python processes, and DuckDB counting
the points.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

import trackstore
from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import python_child
from trackstore import gc as G
from trackstore.catalog import list_runs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def points(root, run_id) -> int:
    con = trackstore.connect(root)
    return con.execute("SELECT count(*) FROM metrics WHERE run_id = ?", [run_id]).fetchone()[0]


def resume_code(root, paths, steps: range, *, key: str = "late") -> str:
    """A training script resuming ``paths``' run, logging ``key`` at ``steps`` and finishing."""
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {REPO!r})
        import trackstore
        run = trackstore.init({paths.project!r}, run_id={paths.run_id!r}, resume=True, root={str(root)!r},
                              compact=False)
        for s in {list(steps)!r}:
            run.log({{{key!r}: float(s)}}, step=s)
        run.finish()
        print("resumed", run.dir, flush=True)
    """)


def resume(root, paths, steps: range, **kw) -> subprocess.CompletedProcess:
    child = python_child(resume_code(root, paths, steps, **kw))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


class Prompted:
    """``trackstore gc ...`` on a pseudo-terminal, stopped at its ``[y/N]`` question."""

    def __init__(self, *args: str):
        import pty

        self.master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "200"}
        self.proc = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", *args], stdin=slave,
                                     stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.out = b""
        while b"[y/N]" not in self.out:
            chunk = self._read()
            if not chunk:
                raise AssertionError(f"gc ended without asking: {self.text}")
            self.out += chunk

    def _read(self) -> bytes:
        try:
            return os.read(self.master, 4096)
        except OSError:  # the child closed the terminal
            return b""

    def answer(self, text: bytes) -> tuple[int, str]:
        os.write(self.master, text)
        while chunk := self._read():
            self.out += chunk
        code = self.proc.wait(timeout=60)
        os.close(self.master)
        return code, self.text

    @property
    def text(self) -> str:
        return ANSI.sub("", self.out.decode(errors="replace"))


def synced_run(root, project="p"):
    p = make_run(root, project, ended_days_ago=40, chunks=2)
    mark_synced(root, p)
    return p


def test_run_resumed_while_gc_asks_is_kept_with_its_new_points(root):
    victim = synced_run(root)
    other = synced_run(root)
    before = points(root, victim.run_id)
    gc = Prompted("gc", "--older-than", "0d", "--root", str(root))
    assert victim.run_id in gc.text and other.run_id in gc.text  # both planned for deletion
    resume(root, victim, range(100, 150))  # resumed, logged, finished: never synced
    code, out = gc.answer(b"y\n")
    assert code == 0, out
    assert f"kept p/{victim.run_id}: changed since the plan" in out and "run gc again" in out
    assert "deleted 1 runs" in out
    assert {r.run_id for r in list_runs(root)} == {victim.run_id}
    assert points(root, victim.run_id) == before + 50
    # the next gc sees the unsynced points and says so
    plan = G.plan(root, G.Policy(older_than_s=0))
    assert not plan.delete and "rows pending" in plan.keep[0].reason


# ---------------------------------------------------------------------------- the last instant
# gc is paused inside its deletion by the test, in a child process that wraps gc's own
# ``move_to_trash`` (test instrumentation, like the SIGKILL tests in test_gc.py; the product
# has no test seam): before it (after the re-check passed) or after it (the folder is in
# ``_trash``). The resumer is a real training script.
def paused_gc(root, go, *, after_rename: bool):
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {REPO!r})
        from trackstore import gc as G
        real = G.move_to_trash
        def wait_for_go():
            print("paused", flush=True)
            while not os.path.exists({str(go)!r}):
                time.sleep(0.02)
        def paused(root, paths):
            if not {after_rename!r}:
                wait_for_go()
            entry = real(root, paths)
            if {after_rename!r}:
                wait_for_go()
            return entry
        G.move_to_trash = paused
        from trackstore.cli.main import main
        sys.exit(main(["gc", "--older-than", "0d", "--yes", "--root", {str(root)!r}]))
    """)
    child = python_child(code)
    read_until(child, "paused")  # after the plan table
    return child


def read_until(child, marker: str) -> None:
    """Read the child's stdout up to a line ``marker``; fail with its output if it ends first."""
    seen = []
    for line in child.stdout:
        if line.strip() == marker:
            return
        seen.append(line)
    child.wait(timeout=60)
    pytest.fail(f"{marker!r} never came; stdout: {''.join(seen)} stderr: {child.stderr.read()}")


def wait_for(predicate, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def new_writer_files(paths, before: set) -> set:
    try:
        return {p.name for p in paths.writers_dir.iterdir() if p.suffix == ".json"} - before
    except FileNotFoundError:
        return set()


def test_resume_between_recheck_and_rename_keeps_the_run(root, tmp_path):
    """The re-check passed, then a resume writes its writer file before gc renames the folder:
    gc finds it in the moved folder and puts the run back; the resume goes on in it."""
    victim = synced_run(root)
    before = points(root, victim.run_id)
    writers_before = {p.name for p in victim.writers_dir.iterdir()}
    go = tmp_path / "go"
    gc = paused_gc(root, go, after_rename=False)
    resumer = python_child(resume_code(root, victim, range(100, 150)))
    try:
        # the resumer's first act is a writer file in the run folder (then it waits for gc)
        wait_for(lambda: new_writer_files(victim, writers_before) or resumer.poll() is not None,
                 "the resumer's writer file")
        go.write_text("")
        out, err = gc.communicate(timeout=120)
        r_out, r_err = resumer.communicate(timeout=120)
    finally:
        for p in (gc, resumer):
            if p.poll() is None:
                p.kill()
    assert gc.returncode == 0, err
    assert resumer.returncode == 0, r_err
    assert f"kept p/{victim.run_id}: changed since the plan (a writer is live); run gc again" in out
    assert f"resumed {victim.dir}" in r_out and "deleted by" not in r_err
    assert points(root, victim.run_id) == before + 50
    assert G.trash_entries(root) == []
    # the claim the resumer wrote before its own writer file is gone; its attempt is recorded
    from trackstore.meta import read_run_json, read_writer_files

    assert not [w for w in read_writer_files(victim) if w.get("claim")]
    assert len(read_run_json(victim)["attempts"]) == 2


def test_resume_after_the_rename_starts_afresh_and_never_writes_into_the_trash(root, tmp_path):
    """The folder is already in ``_trash`` when the resume starts: the resume waits for gc's
    verdict (deleted), then starts the run again as a new run with the same id, saying so."""
    victim = synced_run(root)
    go = tmp_path / "go"
    gc = paused_gc(root, go, after_rename=True)
    assert not victim.dir.exists() and G.trash_entries(root)
    # the resumer reports when it starts waiting for gc (wrapping the real function in the
    # child, so that the test knows it is blocked there before letting gc go on)
    code = resume_code(root, victim, range(100, 150)).replace(
        "import trackstore\n",
        "import trackstore\nfrom trackstore import locks\nreal_wait = locks.wait_for_deletion_verdict\n"
        "def waiting(*a, **kw):\n    print('waiting', flush=True)\n    return real_wait(*a, **kw)\n"
        "locks.wait_for_deletion_verdict = waiting\n", 1)
    resumer = python_child(code)
    try:
        read_until(resumer, "waiting")
        assert not victim.dir.exists()  # waiting, the resumer created nothing
        go.write_text("")
        out, err = gc.communicate(timeout=120)
        r_out, r_err = resumer.communicate(timeout=120)
    finally:
        for p in (gc, resumer):
            if p.poll() is None:
                p.kill()
    assert gc.returncode == 0, err
    assert resumer.returncode == 0, r_err
    assert "deleted 1 runs" in out
    assert "was deleted by `trackstore gc` while this process was resuming it" in r_err
    assert G.trash_entries(root) == []  # nothing was written into the moved folder after gc removed it
    assert points(root, victim.run_id) == 50  # the new run holds exactly the new points
    con = trackstore.connect(root)
    assert con.execute("SELECT min(step) FROM metrics WHERE run_id = ?", [victim.run_id]).fetchone()[0] == 100
