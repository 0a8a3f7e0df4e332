"""The ingest writer (trackstore.upkeep.ingest), whatever the source: a run read from another
tracker becomes an ordinary run, ingesting again adds only what is new (a property over any
sequence of source growth and ingests), a run id held by something else is refused, a pass
killed at any point is completed by the next, and sync sends each ingested row once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from trackstore.store.names import MAX_RUN_ID_CHARS
from trackstore.upkeep.ingest import (
    ExternalArtifact,
    ExternalRun,
    IngestConflictError,
    derive_run_id,
    status_from,
    write_external_run,
)

T0 = 1_700_000_000_000_000  # microseconds


def source_run(points, *, source_id="abc123", status="finished", **kw) -> ExternalRun:
    run = ExternalRun(source="wandb", source_id=source_id, location="/src", project="p", status=status, **kw)
    if points:
        steps, keys, values, ts = zip(*points)
        run.add_points(list(steps), list(keys), list(values), list(ts))
    return run


def stored(root, kind="metrics", cols="step, key, value, epoch_us(ts)") -> list:
    con = trackstore.connect(root)
    try:
        return sorted(con.sql(f"SELECT {cols} FROM {kind}").fetchall(), key=repr)
    finally:
        con.close()


def pts(n, start=0, key="loss"):
    return [(s, key, float(s) / 7, T0 + s * 1000) for s in range(start, start + n)]


def test_a_new_run_holds_every_point_and_its_metadata(root):
    run = source_run(pts(5) + pts(5, key="reward"), name="exp one", config={"lr": 1e-3, "nested": {"a": [1, 2]}},
                     summary={"loss": 0.5}, tags=["a", "b"], notes="hi", created_at=1_700_000_000.0,
                     ended_at=1_700_000_100.0, host="gpu7")
    run.add_sample(3, "prompt", {"role": "assistant", "content": "x"}, score=1.0, ts_us=T0)
    run.add_sample(3, "p2", "o2", ts_us=T0)
    run.add_histogram(2, "grad", counts=[1, 3], edges=[0.0, 0.5, 1.0], ts_us=T0)
    run.skip("image", 4)
    res = write_external_run(root, run)
    assert res.created and res.added == {"metrics": 10, "samples": 2, "spans": 0, "histograms": 1}
    assert res.unmapped == {"image": 4}
    assert stored(root) == sorted(pts(5) + pts(5, key="reward"), key=repr)
    assert stored(root, "samples", "step, sample_index, input, output, score, json_fields") == [
        (3, 0, "prompt", '{"role":"assistant","content":"x"}', 1.0, ["output"]), (3, 1, "p2", "o2", None, None)]
    assert stored(root, "histograms", "step, key, edges, counts, count") == [(2, "grad", [0.0, 0.5, 1.0], [1.0, 3.0], 4)]
    meta = json.loads((root / "project=p" / "run=wandb-abc123" / "run.json").read_text())
    assert meta["name"] == "exp one" and meta["status"] == "finished" and meta["host"] == "gpu7"
    assert meta["config"] == {"lr": 1e-3, "nested": {"a": [1, 2]}} and meta["summary"] == {"loss": 0.5}
    assert meta["tags"] == ["a", "b"] and meta["notes"] == "hi" and meta["pid"] is None
    assert meta["last_step"] == 4  # what `trackstore runs` shows as the run's step
    assert meta["created_at"].startswith("2023-11-14T22:13:20") and meta["ended_at"].startswith("2023-11-14T22:15:00")
    assert meta["ingested"]["source"] == "wandb" and meta["ingested"]["source_id"] == "abc123"
    assert meta["ingested"]["unmapped"] == {"image": 4}
    con = trackstore.connect(root)
    assert con.sql("SELECT run_id, status, name FROM runs").fetchall() == [("wandb-abc123", "finished", "exp one")]


def test_again_adds_nothing_and_a_grown_source_adds_only_its_tail(root):
    first = write_external_run(root, source_run(pts(100)))
    assert first.added["metrics"] == 100
    again = write_external_run(root, source_run(pts(100)))
    assert not again.created and not again.changed and again.added["metrics"] == 0
    grown = write_external_run(root, source_run(pts(130)))
    assert grown.added["metrics"] == 30
    assert stored(root) == sorted(pts(130), key=repr)
    # each pass that added rows is one writer with seq dense from 0: what sync resumes on
    con = trackstore.connect(root)
    writers = con.sql("SELECT writer, count(*), min(seq), max(seq) FROM metrics GROUP BY writer ORDER BY 2").fetchall()
    assert [(n, lo, hi) for _, n, lo, hi in writers] == [(30, 0, 29), (100, 0, 99)]
    assert all(w.startswith("ingest-") for w, *_ in writers)


def test_a_point_the_source_logged_twice_is_kept_twice_and_only_twice(root):
    twice = pts(3) + [pts(3)[1]]
    write_external_run(root, source_run(twice))
    write_external_run(root, source_run(twice))
    assert stored(root) == sorted(twice, key=repr)


def test_dry_run_plans_the_same_and_writes_nothing(root):
    write_external_run(root, source_run(pts(10)))
    before = sorted(p.relative_to(root) for p in root.rglob("*") if "_locks" not in p.parts)
    plan = write_external_run(root, source_run(pts(25)), dry_run=True)
    assert plan.dry_run and plan.added["metrics"] == 15 and not plan.created
    assert sorted(p.relative_to(root) for p in root.rglob("*") if "_locks" not in p.parts) == before
    fresh = write_external_run(root / "other", source_run(pts(5)), dry_run=True)
    assert fresh.created and fresh.added["metrics"] == 5 and not (root / "other").exists()


def test_a_run_id_held_by_a_native_run_or_another_source_run_is_refused(root):
    native = trackstore.init(project="p", run_id="wandb-abc123", root=root)
    native.log({"x": 1.0}, step=0)
    native.finish()
    with pytest.raises(IngestConflictError, match="logged by trackstore itself"):
        write_external_run(root, source_run(pts(3)))
    assert stored(root, cols="key") == [("x",)]
    # a source id whose derived run id collides with another source run's (by construction here)
    other = source_run(pts(3), source_id="other")
    other.run_id = "wandb-zzz"
    write_external_run(root, other)
    clash = source_run(pts(3), source_id="third")
    clash.run_id = "wandb-zzz"
    with pytest.raises(IngestConflictError, match="ingested from wandb run 'other'"):
        write_external_run(root, clash)


def test_derived_run_ids_are_path_safe_bounded_and_distinct():
    assert derive_run_id("wandb", "1a2b3c") == "wandb-1a2b3c"
    assert derive_run_id("tensorboard", "runs/exp 1") != derive_run_id("tensorboard", "runs/exp_1")
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    ids = {derive_run_id("mlflow", s) for s in (long_a, long_b, "../../etc", "名前")}
    assert len(ids) == 4
    for i in ids:
        assert len(i) <= MAX_RUN_ID_CHARS and "/" not in i and ".." not in i.split("-", 1)[0]


def test_statuses_map_and_a_silent_running_source_reads_as_crashed(root):
    assert [status_from(s) for s in ("FINISHED", "FAILED", "RUNNING", "KILLED", None)] == [
        "finished", "failed", "running", "crashed", "crashed"]
    live = source_run(pts(2), source_id="live", status="running", heartbeat_at=time.time())
    silent = source_run(pts(2), source_id="silent", status="running", heartbeat_at=time.time() - 3600)
    write_external_run(root, live)
    write_external_run(root, silent)
    con = trackstore.connect(root)
    assert dict(con.sql("SELECT run_id, status FROM runs").fetchall()) == {
        "wandb-live": "running", "wandb-silent": "crashed"}
    # the source finished since: the next ingest says so
    write_external_run(root, source_run(pts(2), source_id="silent", status="finished", ended_at=time.time()))
    con = trackstore.connect(root)
    assert con.sql("SELECT status FROM runs WHERE run_id = 'wandb-silent'").fetchall() == [("finished",)]


def test_keys_the_store_cannot_hold_are_left_out_and_named(root):
    run = source_run(pts(2) + [(0, "bad\x00key", 1.0, T0)])
    res = write_external_run(root, run)
    assert res.added["metrics"] == 2
    assert len(res.problems) == 1 and "bad" in res.problems[0] and "left out" in res.problems[0]


def test_artifacts_are_stored_once_by_content(root, tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"w" * 1000)
    run = source_run(pts(1))
    run.artifacts.append(ExternalArtifact(path=f, name="weights", type="model", step=0))
    assert write_external_run(root, run).artifacts_added == 1
    run2 = source_run(pts(1))
    run2.artifacts.append(ExternalArtifact(path=f, name="weights", type="model", step=0))
    assert write_external_run(root, run2).artifacts_added == 0
    assert stored(root, "artifacts", "name, version, logical_path, size") == [("weights", 0, "weights.bin", 1000)]


KILL_AFTER_FIRST_PART = r"""
import os, sys
sys.path.insert(0, {repo!r})
from tests.test_ingest_core import source_run, pts
from trackstore.store import parts
from trackstore.upkeep import ingest
real = parts.write_part
def write_then_die(path, table, kind, **kw):
    real(path, table, kind, **kw)
    os._exit(9)  # killed between the first part and the rest (no cleanup runs)
parts.write_part = write_then_die
run = source_run(pts(50))
run.add_sample(1, "in", "out", ts_us=1)
ingest.write_external_run({root!r}, run)
"""


def test_a_pass_killed_after_its_first_part_is_completed_by_the_next(root):
    repo = str(Path(__file__).resolve().parent.parent)
    child = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_PART.format(repo=repo, root=str(root))],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr
    assert len(stored(root)) == 50 and stored(root, "samples", "input") == []  # run.json, then metrics, then killed
    run = source_run(pts(50))
    run.add_sample(1, "in", "out", ts_us=1)
    res = write_external_run(root, run)
    assert res.added == {"metrics": 0, "samples": 1, "spans": 0, "histograms": 0}
    assert stored(root) == sorted(pts(50), key=repr)


def test_sync_sends_each_ingested_row_once_across_growing_ingests(root, tmp_path):
    from tests.helpers import run_cli

    replica = tmp_path / "replica"
    write_external_run(root, source_run(pts(40)))
    assert run_cli("sync", "--to", "store", "--uri", str(replica), root=root).returncode == 0
    write_external_run(root, source_run(pts(40)))  # nothing new
    write_external_run(root, source_run(pts(70)))  # 30 new
    out = run_cli("sync", "--to", "store", "--uri", str(replica), root=root)
    assert out.returncode == 0, out.stderr
    assert stored(replica) == sorted(pts(70), key=repr)


# A source is a log that only grows (a point may repeat); whatever the order of growth and
# ingests, the store holds exactly the source's rows after each ingest, as a multiset.
_point = st.tuples(st.integers(0, 5), st.sampled_from(["a", "b"]), st.sampled_from([0.0, 1.5, float("nan")]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_point, max_size=6), min_size=1, max_size=5))
def test_property_the_store_equals_the_grown_source_after_every_ingest(tmp_path, growths):
    import uuid

    root = tmp_path / uuid.uuid4().hex
    log: list = []
    for grow in growths:
        log += [(s, k, v, T0 + s) for s, k, v in grow]
        write_external_run(root, source_run(log))
        if log:
            got = sorted(((s, k, -1.0 if v != v else v, t) for s, k, v, t in stored(root)), key=repr)
            want = sorted(((s, k, -1.0 if v != v else v, t) for s, k, v, t in log), key=repr)
            assert got == want
