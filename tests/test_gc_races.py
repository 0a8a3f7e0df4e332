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
from pathlib import Path

import pytest

import trackstore
from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import python_child
from trackstore.read.listing import list_runs
from trackstore.upkeep import gc as G

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
    assert "deleted 1 run," in out
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
        from trackstore.upkeep import gc as G
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
    """Files in the run's ``_writers`` folder that were not there ``before`` (claims included)."""
    try:
        return {p.name for p in paths.writers_dir.iterdir() if not p.name.startswith(".")} - before
    except FileNotFoundError:
        return set()


def test_resume_between_recheck_and_rename_keeps_the_run(root, tmp_path):
    """The re-check passed, then a resume writes its claim before gc renames the folder:
    gc finds it in the moved folder and puts the run back; the resume goes on in it."""
    victim = synced_run(root)
    before = points(root, victim.run_id)
    writers_before = {p.name for p in victim.writers_dir.iterdir()}
    go = tmp_path / "go"
    gc = paused_gc(root, go, after_rename=False)
    resumer = python_child(resume_code(root, victim, range(100, 150)))
    try:
        # the resumer's first act is a claim in the run's _writers folder (then it waits for gc)
        wait_for(lambda: new_writer_files(victim, writers_before) or resumer.poll() is not None,
                 "the resumer's claim")
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
    from trackstore.store.meta import read_run_json

    assert not list(victim.writers_dir.glob("*.claim"))
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
        "import trackstore\nfrom trackstore.store import run_claims\nreal_wait = run_claims.wait_for_deletion_verdict\n"
        "def waiting(*a, **kw):\n    print('waiting', flush=True)\n    return real_wait(*a, **kw)\n"
        "run_claims.wait_for_deletion_verdict = waiting\n", 1)
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
    assert "deleted 1 run," in out
    assert "was deleted by `trackstore gc` while this process was resuming it" in r_err
    assert G.trash_entries(root) == []  # nothing was written into the moved folder after gc removed it
    assert points(root, victim.run_id) == 50  # the new run holds exactly the new points
    con = trackstore.connect(root)
    assert con.execute("SELECT min(step) FROM metrics WHERE run_id = ?", [victim.run_id]).fetchone()[0] == 100


# ---------------------------------------------------------------------------- model-based
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule  # noqa: E402

RUNS = 2  # runs per example; run 0 starts synced (so planned for deletion), run 1 not


class GcAgainstWriters(RuleBasedStateMachine):
    """gc executes a plan made earlier (at the start, then right after its previous execution)
    while runs are resumed, logged to, left open, finished and synced (cursors as the sync engine writes them, for all rows or half). Whatever the
    interleaving, gc deletes only runs that were fully synced and had no live writer when it
    deleted them, and every run it keeps holds every point logged to it."""

    base = None  # the test's own store root: each example gets a fresh store below it

    def __init__(self):
        super().__init__()
        import tempfile

        self.root = Path(tempfile.mkdtemp(dir=self.base)) / "store"
        self.root.mkdir()
        self.ids: list[str] = []
        self.points: dict[str, int] = {}  # run id -> points logged (runs in the store)
        self.synced: set[str] = set()  # runs whose every row and final status a cursor holds
        self.open: dict[str, trackstore.Run] = {}  # runs with a live writer (this process)
        self.plan = None

    def _paths(self, run_id):
        from trackstore.store.layout import RunPaths

        return RunPaths(self.root, "p", run_id)

    def _log(self, run, n):
        for s in range(run.step, run.step + n):
            run.log({"x": float(s)}, step=s)
        self.points[run.id] += n
        self.synced.discard(run.id)

    def _resumable(self, i):
        run_id = self.ids[i]
        return run_id if run_id in self.points and run_id not in self.open else None

    @initialize()
    def runs_and_a_plan(self):
        for i in range(RUNS):
            run = trackstore.init("p", root=self.root, compact=False)
            self.ids.append(run.id)
            self.points[run.id] = 0
            self._log(run, 2)
            run.finish()
            if i == 0:
                self.sync(i, True)
        self.plan_gc()

    @rule(i=st.integers(0, RUNS - 1), n=st.integers(1, 3))
    def resume_log_finish(self, i, n):
        if run_id := self._resumable(i):
            run = trackstore.init("p", run_id=run_id, resume=True, root=self.root, compact=False)
            self._log(run, n)
            run.finish()

    @rule(i=st.integers(0, RUNS - 1))
    def resume_and_leave_open(self, i):
        if run_id := self._resumable(i):
            run = trackstore.init("p", run_id=run_id, resume=True, root=self.root, compact=False)
            self._log(run, 1)
            run.flush()
            self.open[run_id] = run

    @rule(i=st.integers(0, RUNS - 1))
    def finish_open(self, i):
        run = self.open.pop(self.ids[i], None)
        if run is not None:
            run.finish()

    @rule(i=st.integers(0, RUNS - 1), full=st.booleans())
    def sync(self, i, full):
        """What a sync leaves: a cursor holding every row and the final status, or half the rows."""
        if run_id := self._resumable(i):
            mark_synced(self.root, self._paths(run_id), fraction=1.0 if full else 0.5)
            if full:
                self.synced.add(run_id)
            else:
                self.synced.discard(run_id)

    def plan_gc(self):
        self.plan = G.plan(self.root, G.Policy(older_than_s=0))

    @rule()
    def execute_gc_and_plan_again(self):
        """Execute the plan made at the end of the previous gc step (or at the start)."""
        result = G.execute(self.root, self.plan)
        self.plan_gc()
        for c in result.deleted:
            assert c.run_id in self.synced and c.run_id not in self.open, \
                f"gc deleted {c.run_id} with unsynced rows or a live writer"
            del self.points[c.run_id]
        self.every_kept_run_is_whole()

    def every_kept_run_is_whole(self):
        from trackstore.read.reader import read_kind

        for run_id, n in self.points.items():
            assert read_kind(self._paths(run_id), "metrics").num_rows == n, run_id

    def teardown(self):
        """Every plan is executed in the end: the one made last too."""
        import shutil

        try:
            self.execute_gc_and_plan_again()
        finally:
            for run in self.open.values():
                run.finish()
            shutil.rmtree(self.root.parent, ignore_errors=True)


def test_gc_against_writers(root, monkeypatch):
    from hypothesis.stateful import run_state_machine_as_test

    monkeypatch.setattr(GcAgainstWriters, "base", root)
    run_state_machine_as_test(GcAgainstWriters, settings=settings(max_examples=8, stateful_step_count=6,
                                                                  deadline=None, database=None))
