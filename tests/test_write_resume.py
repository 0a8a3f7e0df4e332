"""Resuming a crashed run: steps continue after the largest step on disk, nothing is
overwritten, every attempt is recorded, the dead attempt's leftovers are cleaned."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
import time

import pyarrow.parquet as pq
import pytest

import trackstore
from tests.helpers import kill9, python_child, wait_for
from trackstore.read.listing import list_runs
from trackstore.store import meta as tsmeta
from trackstore.store.layout import RunPaths

FIRST = textwrap.dedent(
    """
    import time, trackstore
    run = trackstore.init("res", name="exp", root={root!r}, run_id="r1", flush_interval=0.05,
                          config={{"lr": 0.1, "model": {{"layers": 2}}}})
    for step in range(120):
        run.log({{"loss": 10.0 - step / 100, "acc": step / 1000}})
    print("logged", flush=True)
    time.sleep(3600)
    """
)


def digest(paths: RunPaths) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths.parts("metrics")}


def crash_first_attempt(root) -> RunPaths:
    paths = RunPaths(root, "res", "r1")
    child = python_child(FIRST.format(root=str(root)))
    assert child.stdout.readline().strip() == "logged", child.stderr.read()
    wait_for(lambda: sum(pq.ParquetFile(p).metadata.num_rows for p in paths.parts("metrics")) >= 240,
             "the first attempt never flushed")
    kill9(child)
    return paths


def test_resume_after_crash_continues_steps(root):
    paths = crash_first_attempt(root)
    assert [r.status for r in list_runs(root)] == ["crashed"]
    # The kill came before any heartbeat rewrote run.json: the step must come from the files.
    assert json.loads(paths.run_file.read_text()).get("last_step") is None
    before = digest(paths)
    # What a kill in the middle of a write leaves behind: a temp file of the dead writer.
    [dead] = tsmeta.read_writer_files(paths)
    stray = paths.kind_dir("metrics") / f".part-{dead['writer_id']}-000000000240.parquet.0badc0de.tmp"
    stray.write_bytes(b"PAR1 half a file")
    old = time.time() - 3600  # left by the crash an hour ago (fresh temp files may be a starting writer's)
    os.utime(stray, (old, old))

    run = trackstore.init("res", root=root, run_id="r1", resume=True, config={"lr": 0.05})
    assert run.step == 120
    assert [r.status for r in list_runs(root)] == ["running"]
    for _ in range(30):
        run.log({"loss": 1.0, "acc": 0.5})
    run.log({"late": 1.0}, step=200)
    run.finish()

    assert not stray.exists()
    after = digest(paths)
    assert {k: after[k] for k in before} == before, "a part of the first attempt was rewritten"
    assert len(after) > len(before)
    rows = pq.read_table(paths.kind_dir("metrics")).to_pylist()
    pairs = [(r["step"], r["key"]) for r in rows]
    assert len(pairs) == len(set(pairs)), "a point was stored twice"
    steps = sorted({r["step"] for r in rows if r["key"] == "loss"})
    assert steps == list(range(150))
    # Both attempts' rows stay distinguishable: (writer, seq) never repeats.
    assert len({(r["writer"], r["seq"]) for r in rows}) == len(rows)
    assert len({r["writer"] for r in rows}) == 2

    meta = json.loads(paths.run_file.read_text())
    assert meta["status"] == "finished" and meta["name"] == "exp"
    assert meta["config"] == {"lr": 0.05, "model": {"layers": 2}}
    assert meta["last_step"] == 200 and meta["summary"]["late"] == 1.0
    assert [a["writer_id"] for a in meta["attempts"]] == [dead["writer_id"], run.writer_id]
    assert "resumed_at" in meta
    by_id = {w["writer_id"]: w for w in tsmeta.read_writer_files(paths)}
    assert by_id[dead["writer_id"]]["status"] == "crashed"
    assert by_id[run.writer_id]["status"] == "finished"
    assert [r.status for r in list_runs(root)] == ["finished"]


def test_existing_run_id_without_resume_is_refused(root):
    run = trackstore.init("res", root=root, run_id="r2")
    run.log({"x": 1.0})
    run.finish()
    before = digest(run.paths), run.paths.run_file.read_bytes()
    with pytest.raises(trackstore.UsageError, match="resume=True"):
        trackstore.init("res", root=root, run_id="r2")
    assert (digest(run.paths), run.paths.run_file.read_bytes()) == before


def test_resume_of_finished_run_is_a_new_attempt(root):
    run = trackstore.init("res", root=root, run_id="r3", tags=["a"])
    run.log({"x": 1.0}, step=5)
    run.finish()
    again = trackstore.init("res", root=root, run_id="r3", resume=True, tags=["b"])
    assert again.step == 6
    again.log({"x": 2.0})
    again.finish()
    meta = json.loads(run.paths.run_file.read_text())
    assert meta["status"] == "finished" and meta["tags"] == ["a", "b"] and len(meta["attempts"]) == 2
    assert sorted((r["step"], r["value"]) for r in pq.read_table(run.paths.kind_dir("metrics")).to_pylist()) == [
        (5, 1.0), (6, 2.0)]


def test_resume_unknown_id_creates_the_run(root):
    run = trackstore.init("res", root=root, run_id="fresh-id", resume=True)
    assert run.step == 0
    run.log({"x": 1.0})
    run.finish()
    assert [(r.run_id, r.status) for r in list_runs(root)] == [("fresh-id", "finished")]


def test_resume_never_writes_where_a_writer_file_points(tmp_path):
    """A writer file is data from disk (a bundle, a hand edit): its ``writer_id`` never becomes a
    path. A resume that marks dead writers crashed skips one whose id is not a file name."""
    root = tmp_path / "store"
    run = trackstore.init("p", run_id="r", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    writers = run.paths.writers_dir
    evil = {"writer_id": "../../../../escaped", "status": "running", "host": "elsewhere", "pid": 1,
            "heartbeat_at": "2000-01-01T00:00:00+00:00"}
    (writers / "dead.json").write_text(json.dumps(evil))
    again = trackstore.init("p", run_id="r", root=root, resume=True)
    again.log({"a": 2.0}, step=1)
    again.finish()
    assert not list(tmp_path.rglob("escaped*"))
    assert json.loads((writers / "dead.json").read_text()) == evil  # left as it was
    values = trackstore.query("SELECT value FROM metrics ORDER BY step", root=root).column("value").to_pylist()
    assert values == [1.0, 2.0]
