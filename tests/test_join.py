"""Helper processes joining a run another process owns: ``trackstore.init(..., join=True)`` and
``Run.mark_idle``. Every helper is a real Python process; the owner is this test process or
another real one. Statuses and rows are read back from the store.

What is checked: helpers' rows land in the owner's run under their own writer ids; a helper's
ending (normal exit, uncaught exception, ``sys.exit(n)``, SIGTERM) never fails the run; the last
writer to finish sets the status, so an owner's ``failed`` stands when a helper ends after it; a
helper marked idle and then killed without exit handlers (as Ray stops its workers) leaves the
run ``finished``, while one killed mid-batch leaves it ``crashed``; a fork of a helper never
writes the joined run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.read.listing import list_runs
from trackstore.store import meta as tsmeta
from trackstore.store.layout import RunPaths

PROJECT = "joined"

# A helper process: ``flag(name)`` tells the test where it is, ``wait(name)`` waits for the test.
PRELUDE = textwrap.dedent(
    """
    import os, sys, time, trackstore
    root, run_id, flags = sys.argv[1:4]

    def flag(name):
        open(os.path.join(flags, name), "w").close()

    def wait(name):
        while not os.path.exists(os.path.join(flags, name)):
            time.sleep(0.01)

    """
)


def helper(root: Path, run_id: str, flags: Path, body: str) -> subprocess.Popen:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code, str(root), run_id, str(flags)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_helper(p: subprocess.Popen, code: int = 0) -> str:
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err
    return out + err


def wait_flag(flags: Path, name: str, p: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not (flags / name).exists():
        if p.poll() is not None:
            raise AssertionError(f"helper ended before {name!r}: {p.communicate()}")
        assert time.monotonic() < end, f"helper never reached {name!r}"
        time.sleep(0.01)


def go(flags: Path, name: str) -> None:
    (flags / name).write_text("")


@pytest.fixture
def flags(tmp_path) -> Path:
    d = tmp_path / "flags"
    d.mkdir()
    return d


def writers(root: Path, run_id: str) -> dict[str, dict]:
    return {w["writer_id"]: w for w in tsmeta.read_writer_files(RunPaths(root, PROJECT, run_id))}


def run_json(root: Path, run_id: str) -> dict:
    return tsmeta.read_run_json(RunPaths(root, PROJECT, run_id))


def status(root: Path, run_id: str) -> str:
    [info] = [i for i in list_runs(root, project=PROJECT) if i.run_id == run_id]
    return info.status


def metric_rows(root: Path, run_id: str) -> list[tuple[str, str, int, float]]:
    t = pq.read_table(RunPaths(root, PROJECT, run_id).kind_dir("metrics")).to_pydict()
    return sorted(zip(t["writer"], t["key"], t["step"], t["value"]))


def test_helpers_write_into_the_owners_run_and_the_owner_sets_the_status(root, flags):
    run = trackstore.init(PROJECT, root=root, run_id="r1", flush_interval=0.05)
    run.log({"owner/loss": 1.0}, step=0)
    body = """
        rank = int(os.environ["RANK"])
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        assert trackstore.current_run() is run
        run.log({f"helper{rank}/x": float(rank)}, step=5)
        run.log_samples([{"input": "q", "output": f"a{rank}", "score": 1.0}], step=5)
        with run.trace(step=5, sample_index=rank) as tr:
            with tr.span("turn", kind="llm"):
                pass
        print(run.writer_id)
        # no finish(): the process's exit ends its writer
    """
    procs = []
    for rank in range(2):
        os.environ["RANK"] = str(rank)
        try:
            procs.append(helper(root, "r1", flags, body))
        finally:
            del os.environ["RANK"]
    helper_ids = [finish_helper(p).split()[0] for p in procs]

    ws = writers(root, "r1")
    assert {ws[h]["status"] for h in helper_ids} == {"finished"}
    assert ws[run.writer_id]["status"] == "running"
    assert run_json(root, "r1")["status"] == "running" and status(root, "r1") == "running"  # the owner is alive

    run.log({"owner/loss": 0.5}, step=1)
    run.finish()
    meta = run_json(root, "r1")
    assert meta["status"] == "finished" and status(root, "r1") == "finished" and "error" not in meta
    assert sorted(a["writer_id"] for a in meta["attempts"]) == sorted([run.writer_id, *helper_ids])
    assert metric_rows(root, "r1") == sorted([
        (run.writer_id, "owner/loss", 0, 1.0), (run.writer_id, "owner/loss", 1, 0.5),
        (helper_ids[0], "helper0/x", 5, 0.0), (helper_ids[1], "helper1/x", 5, 1.0)])
    paths = RunPaths(root, PROJECT, "r1")
    samples = pq.read_table(paths.kind_dir("samples")).to_pydict()
    assert sorted(samples["output"]) == ["a0", "a1"] and set(samples["writer"]) == set(helper_ids)
    spans = pq.read_table(paths.kind_dir("spans")).to_pydict()
    assert sorted(spans["name"]) == ["episode", "episode", "turn", "turn"]
    assert set(spans["status"]) == {"ok"}


@pytest.mark.parametrize("ending, code", [
    ("raise RuntimeError('helper broke')", 1),
    ("sys.exit(3)", 3),
])
def test_a_helpers_failure_never_fails_the_run(root, flags, ending, code):
    run = trackstore.init(PROJECT, root=root, run_id="r2", flush_interval=0.05)
    p = helper(root, "r2", flags, f"""
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        run.log({{"helper/x": 1.0}}, step=3)
        print(run.writer_id, flush=True)
        {ending}
    """)
    out = finish_helper(p, code)
    helper_id = out.split()[0]
    assert writers(root, "r2")[helper_id]["status"] == "finished"
    assert "error" not in writers(root, "r2")[helper_id]
    run.finish()
    meta = run_json(root, "r2")
    assert meta["status"] == "finished" and "error" not in meta and "exit_code" not in meta
    assert (helper_id, "helper/x", 3, 1.0) in metric_rows(root, "r2")  # its rows were flushed at exit


def test_the_last_writer_to_finish_sets_the_status_and_an_owners_failure_stands(root, flags):
    run = trackstore.init(PROJECT, root=root, run_id="r3", flush_interval=0.05)
    p = helper(root, "r3", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        flag("joined")
        wait("go")
        run.log({"helper/x": 2.0}, step=7)  # the owner has finished: the helper still writes
        run.finish()
    """)
    wait_flag(flags, "joined", p)
    run.finish(status="failed", error="owner broke")
    # A helper is still writing: the owner records only its own end.
    assert run_json(root, "r3")["status"] == "running" and status(root, "r3") == "running"
    assert writers(root, "r3")[run.writer_id]["status"] == "failed"
    go(flags, "go")
    finish_helper(p)
    meta = run_json(root, "r3")
    assert meta["status"] == "failed" and meta["error"] == "owner broke"
    assert status(root, "r3") == "failed"
    assert ("helper/x", 7, 2.0) in [r[1:] for r in metric_rows(root, "r3")]


def test_a_helper_ending_last_finishes_the_run(root, flags):
    owner = helper(root, "r4", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, flush_interval=0.05)
        run.log({"owner/loss": 1.0}, step=0)
        run.finish()
    """)
    finish_helper(owner)
    assert run_json(root, "r4")["status"] == "finished"
    p = helper(root, "r4", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        run.log({"helper/x": 1.0})
    """)
    finish_helper(p)
    meta = run_json(root, "r4")
    assert meta["status"] == "finished" and meta["last_step"] == 1  # the helper continued after step 0
    assert sorted(r[1:] for r in metric_rows(root, "r4")) == [("helper/x", 1, 1.0), ("owner/loss", 0, 1.0)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_idle_helper_stopped_without_exit_handlers_leaves_the_run_finished(root, flags, sig):
    run = trackstore.init(PROJECT, root=root, run_id="r5", flush_interval=0.05)
    p = helper(root, "r5", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        print(run.writer_id, flush=True)
        run.log({"helper/batch": 1.0}, step=1)
        run.flush()
        run.mark_idle(True)
        flag("idle")
        wait("next batch")
        run.mark_idle(False)
        flag("busy")
        wait("go on")
        run.log({"helper/batch": 2.0}, step=2)
        run.flush()
        run.mark_idle()
        flag("idle again")
        time.sleep(600)  # stopped here by a signal, as Ray stops its workers
    """)
    wait_flag(flags, "idle", p)
    helper_id = p.stdout.readline().split()[0]
    w = writers(root, "r5")[helper_id]
    assert w["status"] == "finished" and w["ended_at"]
    go(flags, "next batch")
    wait_flag(flags, "busy", p)
    w = writers(root, "r5")[helper_id]
    assert w["status"] == "running" and w.get("ended_at") is None
    go(flags, "go on")
    wait_flag(flags, "idle again", p)
    assert writers(root, "r5")[helper_id]["status"] == "finished"
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode == -sig
    run.finish()
    meta = run_json(root, "r5")
    assert meta["status"] == "finished" and status(root, "r5") == "finished" and "error" not in meta
    assert [r[1:] for r in metric_rows(root, "r5")] == [("helper/batch", 1, 1.0), ("helper/batch", 2, 2.0)]


def test_a_helper_killed_mid_batch_leaves_the_run_crashed(root, flags):
    run = trackstore.init(PROJECT, root=root, run_id="r6", flush_interval=0.05)
    p = helper(root, "r6", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        run.log({"helper/batch": 1.0}, step=1)
        run.flush()
        flag("busy")
        time.sleep(600)
    """)
    wait_flag(flags, "busy", p)
    p.kill()
    p.communicate(timeout=60)
    run.finish()
    assert status(root, "r6") == "crashed"  # which it was: a writer died without ending
    assert [r[1:] for r in metric_rows(root, "r6")] == [("helper/batch", 1, 1.0)]  # what was flushed is kept


def test_a_fork_of_a_helper_never_writes_the_joined_run(root, flags):
    run = trackstore.init(PROJECT, root=root, run_id="r7", flush_interval=0.05)
    p = helper(root, "r7", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        run.log({"helper/x": 1.0}, step=1)
        pid = os.fork()
        if pid == 0:
            try:
                run.log({"child/x": 1.0})
            except trackstore.UsageError as exc:
                print("child refused:", "fork" in str(exc), flush=True)
            sys.exit(0)  # runs the inherited atexit hooks: they must not end the joined run
        os.waitpid(pid, 0)
        run.log({"helper/x": 2.0}, step=2)
        print(run.writer_id, flush=True)
    """)
    out = finish_helper(p)
    assert "child refused: True" in out
    helper_id = out.split()[-1]
    run.finish()
    assert run_json(root, "r7")["status"] == "finished"
    assert metric_rows(root, "r7") == [(helper_id, "helper/x", 1, 1.0), (helper_id, "helper/x", 2, 2.0)]
    assert set(writers(root, "r7")) == {run.writer_id, helper_id}


def test_join_needs_a_run_id(root):
    with pytest.raises(trackstore.UsageError, match="run_id"):
        trackstore.init(PROJECT, root=root, join=True)
    assert list(root.iterdir()) == []


def test_joining_an_unknown_run_id_creates_it_as_resume_does(root, flags):
    p = helper(root, "r8", flags, """
        run = trackstore.init("joined", root=root, run_id=run_id, join=True, flush_interval=0.05)
        run.log({"helper/x": 1.0}, step=0)
    """)
    finish_helper(p)
    meta = run_json(root, "r8")
    assert meta["status"] == "finished" and meta["run_id"] == "r8"
