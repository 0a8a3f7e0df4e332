"""``trackstore ingest --from wandb``: real wandb 0.31 offline runs, made by the real client in a
process of their own, ingested, and compared with what wandb's own reader of ``.wandb`` files
(``wandb leet inspect --json``, Go) finds in them: every point with its step and timestamp (to
the microsecond), texts and table rows as samples, histograms, config, summary, status and run
fields. Again adds nothing; a resumed run (two offline folders) is one run and only its new rows
are added; a torn or corrupt log gives its readable part and a problem naming the file; media
the store cannot hold are counted; discover's edges."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import stored_rows as stored
from trackstore.errors import UsageError
from trackstore.sync.ingest import discover, ingest_wandb
from trackstore.sync.ingest import wandb as wandb_ingest

pytest.importorskip("wandb")

# one worker (--dist loadgroup) writes the module fixture `made` (~5 s) once, not each worker
pytestmark = pytest.mark.xdist_group("test_ingest_wandb")

WANDB_CLI = str(Path(sys.executable).with_name("wandb"))
INTERNAL = ("_step", "_timestamp", "_runtime")

MAKE_RUNS = r"""
import os, sys, time
import numpy as np
import wandb
from trackstore.sync.wandb_log import LogReader

d = sys.argv[1]
run = wandb.init(mode="offline", dir=d, project="ingest", id="rich1", name="rich run", tags=["rl", "grpo"],
                 notes="a note", group="g1", job_type="train",
                 config={"lr": 0.5, "model": {"layers": 4}, "names": ["a", "b"]})
for s in range(6):
    run.log({"loss": 1.0 / (s + 1), "actor/entropy": s * 0.25, "nested": {"kl": s * 0.01}, "done": s == 5}, step=s)
run.log({"gen": "the answer is 4", "odd": float("nan"), "up": float("inf")}, step=6)
run.log({"grad": wandb.Histogram(np_histogram=([1, 5, 3], [0.0, 1.0, 2.0, 3.0])),
         "act": wandb.Histogram([0.1, 0.2, 0.2, 0.9], num_bins=4)}, step=7)
run.log({"evals": wandb.Table(columns=["prompt", "completion", "reward", "judge"],
                              data=[["q1", "a1", 0.5, "ok"], ["q2", "a2", 1.0, "bad"]]),
         "raw": wandb.Table(columns=["x", "y"], data=[[1, 2]])}, step=8)
inc = wandb.Table(columns=["Question", "answer"], log_mode="INCREMENTAL")
inc.add_data("q3", "a3")
run.log({"inc": inc}, step=8)
run.log({"img": wandb.Image(np.zeros((4, 4, 3), dtype=np.uint8)), "loss": 0.1}, step=9)
run.summary["best_reward"] = 2.5
run.config.update({"extra": "x"})
with open(os.path.join(d, "notes.txt"), "w") as f:
    f.write("kept by wandb.save")
wandb.save(os.path.join(d, "notes.txt"), base_path=d)
art = wandb.Artifact("policy", type="model", metadata={"epoch": 1})
with open(os.path.join(d, "w.bin"), "wb") as f:
    f.write(b"weights" * 10)
art.add_file(os.path.join(d, "w.bin"))
run.log_artifact(art)
run.finish()

run = wandb.init(mode="offline", dir=d, project="ingest", id="fail1")
run.log({"loss": 1.0}, step=0)
run.finish(exit_code=2)

# a run still being written (or killed): no exit record
run = wandb.init(mode="offline", dir=d, project="ingest", id="live1",
                 settings=wandb.Settings(x_transaction_log_flush_interval=0.1))
for s in range(3):
    run.log({"loss": float(s)}, step=s)
log = os.path.join(run.dir, "..", "run-live1.wandb")
deadline = time.time() + 20
while time.time() < deadline:  # wandb holds a step's row until the next step: step 1 is the last written
    recs = list(LogReader(log).records()) if os.path.exists(log) else []
    if any(r.WhichOneof("record_type") == "history" and r.history.step.num == 1 for r in recs):
        break
    time.sleep(0.05)
os._exit(0)
"""

SESSION = r"""
import sys
import wandb

d, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
run = wandb.init(mode="offline", dir=d, project="ingest", id="res1", resume="allow", name="resumed")
for s in range(first, last):
    run.log({"loss": s * 0.5, "acc": s / 10}, step=s)
run.log({"gen": f"text {first}"}, step=last)
run.finish()
"""


def _env(home: Path) -> dict:
    # as tests/conftest.py scrubs each test's own environment (this fixture is module-scoped)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WANDB_", "MLFLOW_", "SWANLAB_", "TRACKSTORE_", "AWS_")) and "proxy" not in k.lower()}
    # HOME: wandb stages artifact files under ~/.local/share/wandb; keep them in the sandbox
    return {**env, "HOME": str(home), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "DO_NOT_TRACK": "true"}


def _python(script: str, *args: str, home: Path) -> None:
    res = subprocess.run([sys.executable, "-c", script, *args], env=_env(home), capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A folder given to ``wandb.init(dir=...)``: runs rich1 (finished), fail1 (exit code 2) and
    live1 (no exit record), under ``wandb/``."""
    base = tmp_path_factory.mktemp("wandb-made")
    (base / "home").mkdir()
    _python(MAKE_RUNS, str(base), home=base / "home")
    return base


def run_folder(base: Path, run_id: str) -> Path:
    (folder,) = [d for d in (base / "wandb").glob(f"offline-run-*-{run_id}") if not d.is_symlink()]
    return folder


def leet(log: Path) -> list[dict]:
    """Every record of one ``.wandb`` file, as wandb's own reader prints it."""
    res = subprocess.run([WANDB_CLI, "leet", "inspect", "--json", str(log)], capture_output=True, text=True,
                         timeout=120, check=True)
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def leet_state(log: Path) -> dict:
    """wandb's own view of the run in one log: config, summary, state, exit code, name..."""
    res = subprocess.run([WANDB_CLI, "leet", "inspect", "--summary", "--json", str(log)], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(res.stdout)


def _number(v):
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):  # how leet prints JSON's NaN, Infinity
        return float(v.replace("Infinity", "inf"))
    return float(v)


def _same(v) -> object:
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def expected(records: list[dict]) -> dict:
    """What the store should hold, from leet's records: points, texts, histograms, tables."""
    out: dict = {"points": [], "texts": [], "hists": [], "tables": [], "media": 0}
    for r in records:
        if r["type"] != "history":
            continue
        item = r["history"]["item"]
        step = (r["history"].get("step") or {}).get("num", item.get("_step", 0))
        ts_us = int(round(item["_timestamp"] * 1e6))
        media = {k[: -len("._type")]: v for k, v in item.items() if k.endswith("._type")}
        for key, v in item.items():
            if key in INTERNAL or any(key.startswith(m + ".") for m in media):
                continue
            key = key.replace(".", "/")  # leet joins nested keys with "."; the test logs no key with a dot
            if isinstance(v, str) and v not in ("NaN", "Infinity", "-Infinity"):
                out["texts"].append((step, key, v, ts_us))
            elif v is not None:
                out["points"].append((key, step, ts_us, _same(_number(v))))
        for m, kind in media.items():
            if kind == "histogram":
                out["hists"].append((m, step, [float(c) for c in item[m + ".values"]],
                                     [float(e) for e in item[m + ".bins"]], ts_us))
            elif kind in ("table-file", "incremental-table-file"):
                out["tables"].append((m, step, item[m + ".path"], ts_us))
            else:
                out["media"] += 1
    return out




def points(root, run_id: str) -> list:
    rows = stored(root, f"SELECT key, step, epoch_us(ts), value FROM metrics WHERE run_id = '{run_id}'")
    return sorted(((k, s, t, _same(v)) for k, s, t, v in rows), key=repr)


def counts(root, run_id: str) -> dict:
    return {kind: stored(root, f"SELECT count(*) FROM {kind} WHERE run_id = '{run_id}'")[0][0]
            for kind in ("metrics", "samples", "histograms", "artifacts")}


def run_json(root, project: str, run_id: str) -> dict:
    return json.loads((Path(root) / f"project={project}" / f"run={run_id}" / "run.json").read_text())


# ---------------------------------------------------------------------------- discover
def test_discover_missing_path_raises_naming_it_and_empty_folders_give_nothing(tmp_path):
    missing = tmp_path / "nope" / "wandb"
    with pytest.raises(UsageError, match=str(missing)):
        wandb_ingest.discover(str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert wandb_ingest.discover(str(empty)) == []
    (empty / "notes.txt").write_text("not a run")
    (empty / "offline-run-20260101_000000-x").mkdir()  # a folder without a log
    assert wandb_ingest.discover(str(empty)) == []
    assert wandb_ingest.discover(str(empty / "notes.txt")) == []


def test_discover_takes_every_form_of_location(made):
    everything = wandb_ingest.discover(str(made / "wandb"))
    assert {f.source_id for f in everything} == {"rich1", "fail1", "live1"}
    assert {f.source_id for f in wandb_ingest.discover(str(made))} == {"rich1", "fail1", "live1"}  # wandb.init(dir=)
    folder = run_folder(made, "rich1")
    (one,) = wandb_ingest.discover(str(folder))
    assert one.source_id == "rich1" and one.location == str(folder) and one.size == (folder / "run-rich1.wandb").stat().st_size
    (single,) = wandb_ingest.discover(str(folder / "run-rich1.wandb"))
    assert single.location == str(folder / "run-rich1.wandb") and single.handle == one.handle


def test_import_does_not_load_wandb():
    code = "import sys, trackstore.sync.ingest.wandb; print('wandb' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "False", res.stderr


# ---------------------------------------------------------------------------- round trip
def test_round_trip_equals_what_wandbs_own_reader_finds(made, root):
    folder = run_folder(made, "rich1")
    log = folder / "run-rich1.wandb"
    want = expected(leet(log))
    state = leet_state(log)
    report = ingest_wandb(str(folder), root=root)
    assert report.complete and not report.failed, report
    (res,) = report.results
    assert (res.project, res.run_id, res.created) == ("ingest", "wandb-rich1", True)

    # every point, step, timestamp (microseconds) and value, as wandb's reader has them
    assert points(root, "wandb-rich1") == sorted(want["points"], key=repr)
    assert {k for k, *_ in want["points"]} == {"loss", "actor/entropy", "nested/kl", "done", "odd", "up"}

    # text -> a sample (output, split = key); table rows -> samples (prompt/completion/reward mapped)
    samples = stored(root, "SELECT step, split, sample_index, input, output, score, extra, epoch_us(ts) FROM samples "
                           "WHERE run_id = 'wandb-rich1' ORDER BY split, step, sample_index")
    texts = [(s, sp, out, ts) for s, sp, _, inp, out, _, _, ts in samples if sp == "gen"]
    assert texts == [(s, k, v, ts) for s, k, v, ts in want["texts"]]
    table_rows = []
    for key, step, path, ts in want["tables"]:
        data = json.loads((folder / "files" / path).read_text())  # the table file wandb wrote
        for i, row in enumerate(data["data"]):
            cells = dict(zip(data["columns"], row))
            if key == "evals":
                table_rows.append((step, key, i, cells["prompt"], cells["completion"], cells["reward"],
                                   {"judge": cells["judge"]}, ts))
            elif key == "inc":  # an incremental table: its file holds this log's new rows
                table_rows.append((step, key, i, cells["Question"], cells["answer"], None, None, ts))
            else:
                table_rows.append((step, key, i, None, None, None, cells, ts))
    got = [(s, sp, i, inp, out, score, json.loads(extra) if extra else None, ts)
           for s, sp, i, inp, out, score, extra, ts in samples if sp != "gen"]
    assert got == sorted(table_rows, key=lambda r: (r[1], r[0], r[2])) and len(got) == 4

    hists = stored(root, "SELECT key, step, counts, edges, epoch_us(ts) FROM histograms WHERE run_id = 'wandb-rich1' "
                         "ORDER BY key")
    assert [tuple(h) for h in hists] == sorted(want["hists"])
    assert hists[1][2] == [1.0, 5.0, 3.0] and hists[1][3] == [0.0, 1.0, 2.0, 3.0]  # grad, as logged

    # config, summary, status and run fields: wandb's own summary of the log
    meta = run_json(root, "ingest", "wandb-rich1")
    assert meta["config"] == state["config"] == {"lr": 0.5, "model": {"layers": 4}, "names": ["a", "b"],
                                                 "extra": "x"}
    summary = {k: _same(_number(v)) if v in ("NaN", "Infinity") else v for k, v in state["summary"].items()
               if k not in INTERNAL}
    assert {k: _same(v) for k, v in meta["summary"].items()} == summary and meta["summary"]["best_reward"] == 2.5
    assert state["state"] == meta["status"] == "finished"
    assert (meta["name"], meta["notes"], meta["tags"]) == (state["name"], state["notes"], state["tags"])
    run_rec = next(r["run"] for r in leet(log) if r["type"] == "run")
    assert (meta["group"], meta["job_type"], meta["host"]) == (run_rec["run_group"], run_rec["job_type"],
                                                               run_rec["host"])
    assert stored(root, "SELECT epoch_us(created_at) FROM runs")[0][0] == _us(state["start_time"])
    assert meta["ingested"]["meta"]["exit_code"] == 0

    # what the store cannot hold is counted, not dropped: the image, and whatever console output
    # and system samples wandb recorded (as many as its own reader finds)
    records = leet(log)
    want_unmapped = {"image": 1}
    lines = sum(r["output_raw"]["line"].count("\n") or 1 for r in records
                if r["type"] == "output_raw" and r["output_raw"].get("line"))
    if lines:
        want_unmapped["console line"] = lines
    stats = sum(r["type"] == "stats" for r in records)
    if stats:
        want_unmapped["system stats sample"] = stats
    assert res.unmapped == want_unmapped and meta["ingested"]["unmapped"] == want_unmapped

    # artifacts: the logged one (files staged by wandb) and the run's own files (wandb.save)
    arts = stored(root, "SELECT name, type, logical_path, path FROM artifacts WHERE run_id = 'wandb-rich1' "
                        "ORDER BY name")
    assert [(n, t, lp) for n, t, lp, _ in arts] == [("policy", "model", "w.bin"), ("wandb-files", "files", "notes.txt")]
    run_dir = Path(root) / "project=ingest" / "run=wandb-rich1"
    assert (run_dir / arts[0][3]).read_bytes() == b"weights" * 10
    assert (run_dir / arts[1][3]).read_text() == "kept by wandb.save"


def _us(iso: str) -> int:
    from datetime import datetime

    whole, _, frac = iso.rstrip("Z").partition(".")
    base = datetime.fromisoformat(whole + "+00:00")
    return int(base.timestamp()) * 1_000_000 + int((frac + "000000")[:6])


def test_ingest_again_adds_nothing(made, root):
    folder = run_folder(made, "rich1")
    first = ingest_wandb(str(folder), root=root).results[0]
    before = counts(root, "wandb-rich1")
    again = ingest_wandb(str(folder), root=root).results[0]
    assert not again.created and set(again.added.values()) == {0} and again.artifacts_added == 0
    assert not again.changed and again.incoming == first.incoming
    assert counts(root, "wandb-rich1") == before


def test_status_failed_running_and_crashed_after_the_staleness_limit(made, root, tmp_path):
    failed = leet_state(run_folder(made, "fail1") / "run-fail1.wandb")
    # a snapshot of the live run: its wandb-core may outlive the killed client for a while
    snapshot = tmp_path / "live" / run_folder(made, "live1").name
    shutil.copytree(run_folder(made, "live1"), snapshot, symlinks=True)
    live_log = snapshot / "run-live1.wandb"
    live = leet_state(live_log)
    assert (failed["state"], live["state"]) == ("failed", "running")
    report = ingest_wandb(str(run_folder(made, "fail1")), str(snapshot), root=root)
    assert not report.failed
    meta = {r.run_id: run_json(root, "ingest", r.run_id) for r in report.results}
    assert meta["wandb-fail1"]["status"] == "failed" and meta["wandb-fail1"]["ended_at"]
    assert meta["wandb-live1"]["status"] == "running" and meta["wandb-live1"]["ended_at"] is None
    assert points(root, "wandb-live1") == sorted(expected(leet(live_log))["points"], key=repr)

    # the log's last write is the heartbeat: recent, the run is running; an hour ago, crashed
    for age, status in ((5, "running"), (3600, "crashed")):
        copy = tmp_path / f"age{age}" / live_log.parent.name
        shutil.copytree(live_log.parent, copy, symlinks=True)
        when = int(time.time()) - age
        os.utime(copy / live_log.name, (when, when))
        store = tmp_path / f"store{age}"
        assert ingest_wandb(str(copy), root=store).complete
        assert run_json(store, "ingest", "wandb-live1")["heartbeat_at"].startswith(
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)))
        assert stored(store, "SELECT status FROM runs")[0][0] == status


# ---------------------------------------------------------------------------- resume
def test_a_resumed_run_is_one_run_and_only_its_new_rows_are_added(root, tmp_path):
    home = tmp_path / "home-wb"
    home.mkdir()
    src = tmp_path / "src"
    _python(SESSION, str(src), "0", "5", home=home)
    first = ingest_wandb(str(src / "wandb"), root=root).results[0]
    assert first.added["metrics"] == 10 and first.added["samples"] == 1

    _python(SESSION, str(src), "10", "15", home=home)
    (found,) = discover("wandb", [str(src / "wandb")])
    assert len(found.handle) == 2 and found.label == "res1 (2 sessions)"
    logs = list(found.handle)
    assert logs == sorted(logs, key=lambda p: p.parent.name)  # in time order
    (named, ) = discover("wandb", [str(log.parent) for log in reversed(logs)])  # its folders named one by one
    assert named.handle == found.handle and named.label == "res1 (2 sessions)"
    second = ingest_wandb(str(src / "wandb"), root=root).results[0]
    assert not second.created and second.added == {"metrics": 10, "samples": 1, "spans": 0, "histograms": 0}

    want = [p for log in logs for p in expected(leet(log))["points"]]
    assert points(root, "wandb-res1") == sorted(want, key=repr) and len(want) == 20
    texts = stored(root, "SELECT step, output FROM samples ORDER BY step")
    assert texts == [(5, "text 0"), (15, "text 10")]
    meta = run_json(root, "ingest", "wandb-res1")
    assert meta["status"] == "finished" and meta["name"] == "resumed"
    assert meta["ingested"]["meta"]["sessions"] == [log.parent.name for log in logs]
    assert stored(root, "SELECT count(*) FROM runs")[0][0] == 1


# ---------------------------------------------------------------------------- damage
def test_a_torn_log_gives_its_readable_part_and_names_the_file(made, root, tmp_path):
    folder = tmp_path / "torn" / run_folder(made, "rich1").name
    shutil.copytree(run_folder(made, "rich1"), folder, symlinks=True)
    log = folder / "run-rich1.wandb"
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.truncate(size * 2 // 3)  # mid-record: the records after the cut are lost
    want = expected(leet(log))  # leet too stops at the last complete record
    assert 0 < len(want["points"]) < 34
    report = ingest_wandb(str(folder), root=root)
    (res,) = report.results
    assert not report.complete and len(res.problems) == 1, res.problems
    assert str(log) in res.problems[0] and "torn or damaged tail" in res.problems[0]
    assert points(root, "wandb-rich1") == sorted(want["points"], key=repr)
    meta = run_json(root, "ingest", "wandb-rich1")
    assert meta["status"] == "running"  # no exit record: the store calls it crashed once stale
    assert meta["ingested"]["problems"] == res.problems


def test_a_corrupt_record_stops_there_and_is_named(made, root, tmp_path):
    folder = tmp_path / "bad" / run_folder(made, "fail1").name
    shutil.copytree(run_folder(made, "fail1"), folder, symlinks=True)
    log = folder / "run-fail1.wandb"
    good = leet(log)
    data = bytearray(log.read_bytes())
    data[len(data) - 20] ^= 0xFF  # inside the last records: its checksum fails
    log.write_bytes(bytes(data))
    report = ingest_wandb(str(folder), root=root)
    (res,) = report.results
    assert any(str(log) in p and "bytes after offset" in p for p in res.problems), res.problems
    assert run_json(root, "ingest", "wandb-fail1")["status"] == "running"  # the exit record was lost
    assert [r["type"] for r in good][-1] == "exit"


def test_a_log_without_records_fails_that_run_naming_the_file(tmp_path, root):
    from trackstore.sync.wandb_log import HEADER

    folder = tmp_path / "wandb" / "offline-run-20260101_000000-empty1"
    folder.mkdir(parents=True)
    (folder / "run-empty1.wandb").write_bytes(HEADER)  # a session killed before wandb wrote a record
    report = ingest_wandb(str(tmp_path / "wandb"), root=root)
    assert not report.results and len(report.failed) == 1
    found, why = report.failed[0]
    assert found.source_id == "empty1" and str(folder / "run-empty1.wandb") in why
