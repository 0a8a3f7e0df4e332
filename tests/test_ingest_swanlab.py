"""trackstore ingest --from swanlab with runs the real swanlab 0.10 client wrote (offline and
local mode), checked against SwanLab's own readers: its ``DataStoreReader`` + ``record_pb2.Record``
for run files, and for local mode's dashboard layout the SQLite database and the log files read
by swanboard's own ``read_tag_data``. Points, steps and microsecond times, texts, histogram
charts, config and status; again adds nothing; a resumed run is one run and brings only its new
rows; cut, corrupt and foreign-version files; what is not mapped is counted."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

import trackstore
from tests.helpers import has_swanboard, run_cli

pytest.importorskip("swanlab")

# one worker (--dist loadgroup) writes the module fixture `rich` (~4 s) once, not each worker
pytestmark = pytest.mark.xdist_group("test_ingest_swanlab")

from trackstore.errors import UsageError  # noqa: E402
from trackstore.sync import ingest  # noqa: E402
from trackstore.sync.ingest import swanlab as source  # noqa: E402
from trackstore.sync.swanlab import read_session_files  # noqa: E402
from trackstore.sync.swanlab_view import SWANBOARD_VERSION  # noqa: E402

RICH_ID = "ingestrich00000000001"
RESUME_ID = "ingestresume000000001"

RICH = r"""
import sys, numpy as np, swanlab
from swanlab import echarts
from trackstore.sync.swanlab_media import histogram_chart
logdir, mode, saved = sys.argv[1], sys.argv[2], sys.argv[3]
run = swanlab.init(project="ingest-demo", experiment_name="rich", description="a note", tags=["grpo", "v1"],
                   group="g1", job_type="train", config={"lr": 0.001, "model": {"layers": 2}, "stages": [1, 2]},
                   mode=mode, logdir=logdir, id=sys.argv[4])
for s in range(20):
    run.log({"loss": 1.0 / (s + 1), "train/acc": s / 20}, step=s)
run.log({"prompt": swanlab.Text("What is 6 * 7?", caption="q0")}, step=3)
run.log({"answers": [swanlab.Text("42"), swanlab.Text("forty-two", caption="words")]}, step=3)
run.log({"img": swanlab.Image(np.zeros((4, 4, 3), dtype=np.uint8))}, step=4)
run.log({"bars": swanlab.ECharts(echarts.Bar().add_xaxis(["a", "b"]).add_yaxis("c", [1, 2]))}, step=5)
run.log({"weights": histogram_chart({"edges": [0.0, 0.5, 1.0, 1.5], "counts": [1.0, 3.0, 2.0]})}, step=6)
if saved:
    run.save(saved, base_path=str(__import__("pathlib").Path(saved).parent.parent), policy="now")
swanlab.finish()
"""

RESUME = r"""
import sys, swanlab
logdir, first, last, state = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
run = swanlab.init(project="ingest-demo", experiment_name="resumed", id=sys.argv[5], resume="allow", mode="offline",
                   logdir=logdir, config={"first": first})
for s in range(first, last):
    run.log({"loss": float(s), "lr": 0.1 / (s + 1)}, step=s)
swanlab.finish(state=state, error="boom" if state == "crashed" else None)
"""

BIG = r"""
import sys, swanlab
run = swanlab.init(project="ingest-demo", experiment_name="big", mode="offline", logdir=sys.argv[1], id=sys.argv[2])
for s in range(4000):  # about 220 KB of records: several straddle a 32 KiB block boundary
    run.log({"x": float(s)}, step=s)
swanlab.finish()
"""


def swanlab_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWANLAB_", "TRACKSTORE_", "WANDB_"))}
    env.update(SWANLAB_ROOT=str(home / "swanlab-home"), HOME=str(home), PYTHONPATH=str(Path(__file__).parent.parent))
    return env


def swanlab_child(code: str, *args: str, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=swanlab_env(home), capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr




needs_swanboard = pytest.mark.skipif(not has_swanboard(), reason=f"swanboard {SWANBOARD_VERSION} not installed "
                                     "(local mode needs it; make install-test installs it)")


# ---------------------------------------------------------------------------- SwanLab's own view
def us(t) -> int:
    return t.seconds * 1_000_000 + t.nanos // 1000


def point_time(payload, rec) -> int:
    """The time `swanlab sync` gives a point: its own timestamp, else the record's."""
    return us(payload.timestamp if (payload.timestamp.seconds or payload.timestamp.nanos) else rec.timestamp)


def oracle(logdir: Path, exp_id: str) -> dict:
    """What SwanLab's reader (DataStoreReader + record_pb2.Record) returns for one experiment, all sessions."""
    out: dict = {"metrics": [], "samples": [], "histograms": [], "logs": 0, "media": {}, "start": [], "finish": []}
    for folder, rec in read_session_files(logdir, exp_id):
        kind = rec.WhichOneof("record_type")
        if kind == "scalar":
            s = rec.scalar
            out["metrics"].append((s.key, s.step, s.value.number, point_time(s, rec)))
        elif kind == "media":
            m = rec.media
            out["media"][m.type] = out["media"].get(m.type, 0) + len(m.value.items)
            for item in m.value.items:
                if m.type == 4:  # text
                    text = (folder / "media" / "text" / item.filename).read_text()
                    out["samples"].append((m.step, m.key, text, item.caption or None, point_time(m, rec)))
                elif m.type == 6:  # echarts
                    option = json.loads((folder / "media" / "echarts" / item.filename).read_text())
                    labels = option["xAxis"][0]["data"]
                    if all(".." in str(label) for label in labels):
                        edges = [float(labels[0].split("..")[0])] + [float(x.split("..")[1]) for x in labels]
                        out["histograms"].append((m.step, m.key, edges, [float(v) for v in option["series"][0]["data"]],
                                                  point_time(m, rec)))
        elif kind == "log":
            out["logs"] += 1
        elif kind in ("start", "finish"):
            out[kind].append(getattr(rec, kind))
    return out


def stored(root: Path, run_id: str) -> dict:
    con = trackstore.connect(root)
    q = lambda sql: con.execute(sql, [run_id]).fetchall()  # noqa: E731
    out = {
        "metrics": sorted(q("SELECT key, step, value, epoch_us(ts) FROM metrics WHERE run_id = ?")),
        "samples": sorted(q("SELECT step, split, output, json_extract_string(extra, '$.caption'), epoch_us(ts) "
                            "FROM samples WHERE run_id = ?")),
        "histograms": sorted(q("SELECT step, key, edges, counts, epoch_us(ts) FROM histograms WHERE run_id = ?")),
        "artifacts": q("SELECT name FROM artifacts WHERE run_id = ?"),
    }
    con.close()
    [meta] = [json.loads(p.read_text()) for p in root.glob(f"project=*/run={run_id}/run.json")]
    out["meta"] = meta
    return out


def iso_us(text: str) -> int:
    t = datetime.fromisoformat(text) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (t.days * 86400 + t.seconds) * 1_000_000 + t.microseconds


def config_yaml(folder: Path) -> dict:
    import yaml

    return {k: v["value"] for k, v in yaml.safe_load((folder / "files" / "config.yaml").read_text()).items()}


# ---------------------------------------------------------------------------- sources (built once)
@pytest.fixture(scope="module")
def rich(tmp_path_factory) -> Path:
    """An offline run with scalars, texts, an image, a bar chart, a histogram chart and a saved file."""
    base = tmp_path_factory.mktemp("swanlab-rich")
    model = base / "work" / "ckpt" / "model.bin"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    swanlab_child(RICH, base / "swanlog", "offline", model, RICH_ID, home=base / "home")
    return base / "swanlog"


def copy_of(logdir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy" / logdir.name
    shutil.copytree(logdir, dst, symlinks=True)
    return dst


def one(report: ingest.IngestReport):
    assert not report.failed, report.failed
    [result] = report.results
    return result


# ---------------------------------------------------------------------------- round trip
def test_offline_run_round_trip_equals_swanlabs_reader_and_again_adds_nothing(root, rich):
    want = oracle(rich, RICH_ID)
    assert len(want["metrics"]) == 40 and len(want["samples"]) == 3 and len(want["histograms"]) == 1

    result = one(ingest.ingest_swanlab(str(rich), root=root))
    assert result.run_id == f"swanlab-{RICH_ID}" and result.project == "ingest-demo" and result.created
    assert result.problems == []
    assert result.added == {"metrics": 40, "samples": 3, "spans": 0, "histograms": 1}
    # what the store has no kind for is counted, never dropped silently
    assert result.unmapped == {"image": 1, "echarts": 1, "console line": want["logs"]} and want["logs"] > 0
    assert result.artifacts_added == 1

    got = stored(root, result.run_id)
    assert got["metrics"] == sorted(want["metrics"])  # every point, step, value and microsecond time
    assert got["samples"] == sorted(want["samples"])
    assert got["histograms"] == sorted(want["histograms"])
    assert got["histograms"][0][2:4] == ([0.0, 0.5, 1.0, 1.5], [1.0, 3.0, 2.0])
    assert got["artifacts"] == [("ckpt_model.bin",)]

    meta = got["meta"]
    [start], [finish] = want["start"], want["finish"]
    [folder] = rich.glob(f"run-*-{RICH_ID}")
    assert meta["config"] == config_yaml(folder) == {"lr": 0.001, "model": {"layers": 2}, "stages": [1, 2]}
    assert (meta["name"], meta["notes"], meta["tags"], meta["group"], meta["job_type"]) == (
        start.name, start.description, list(start.tags), start.group, start.job_type) == (
        "rich", "a note", ["grpo", "v1"], "g1", "train")
    assert meta["status"] == "finished" and finish.state == 1
    assert abs(iso_us(meta["created_at"]) - us(start.started_at)) <= 1
    assert abs(iso_us(meta["ended_at"]) - us(finish.finished_at)) <= 1
    assert meta["host"] and meta["ingested"]["source_id"] == RICH_ID

    again = one(ingest.ingest_swanlab(str(rich), root=root))
    assert not again.created and set(again.added.values()) == {0} and again.artifacts_added == 0
    assert stored(root, result.run_id)["metrics"] == got["metrics"]


def test_a_resumed_run_is_one_run_and_ingesting_again_adds_only_its_new_rows(root, tmp_path):
    logdir = tmp_path / "swanlog"
    swanlab_child(RESUME, logdir, 0, 5, "success", RESUME_ID, home=tmp_path / "h")
    first = one(ingest.ingest_swanlab(str(logdir), root=root))
    assert first.added["metrics"] == 10
    assert stored(root, first.run_id)["meta"]["status"] == "finished"

    swanlab_child(RESUME, logdir, 5, 8, "crashed", RESUME_ID, home=tmp_path / "h")  # a second session, same id
    [found] = source.discover(str(logdir))
    assert found.source_id == RESUME_ID and len(found.handle) == 2
    second = one(ingest.ingest_swanlab(str(logdir), root=root))
    assert second.run_id == first.run_id and not second.created
    assert second.added == {"metrics": 6, "samples": 0, "spans": 0, "histograms": 0}
    got = stored(root, first.run_id)
    assert got["metrics"] == sorted(oracle(logdir, RESUME_ID)["metrics"]) and len(got["metrics"]) == 16
    meta = got["meta"]
    assert meta["status"] == "failed" and meta["ingested"]["meta"]["error"] == "boom"  # SwanLab's "crashed"
    assert meta["config"] == {"first": 5}  # the latest session's config
    assert [s["layout"] for s in meta["ingested"]["meta"]["sessions"]] == ["records", "records"]
    # one run folder alone is that session
    newest = sorted(logdir.glob("run-*"))[-1]
    [alone] = source.discover(str(newest))
    assert alone.source_id == RESUME_ID and len(alone.handle) == 1


# ---------------------------------------------------------------------------- local mode
@needs_swanboard
def test_local_mode_agrees_with_swanlabs_reader_and_its_dashboard_files(root, tmp_path):
    logdir = tmp_path / "local"
    swanlab_child(RICH, logdir, "local", "", RICH_ID, home=tmp_path / "h")
    assert (logdir / "runs.swanlab").is_file()
    want = oracle(logdir, RICH_ID)
    result = one(ingest.ingest_swanlab(str(logdir), root=root))
    got = stored(root, result.run_id)
    assert got["metrics"] == sorted(want["metrics"]) and len(got["metrics"]) == 40
    assert got["samples"] == sorted(want["samples"])

    # the same points as SwanLab's local dashboard reads them (runs.swanlab + logs/<tag>/*.log)
    from swanboard.controller.utils.tag import get_tag_files, read_tag_data

    [folder] = logdir.glob(f"run-*-{RICH_ID}")
    db = sqlite3.connect(f"{(logdir / 'runs.swanlab').as_uri()}?mode=ro", uri=True)
    tags = db.execute("SELECT t.name, t.folder, t.type FROM tag t JOIN experiment e ON e.id = t.experiment_id "
                      "WHERE e.run_id = ?", (folder.name,)).fetchall()
    [(exp_name, exp_desc, exp_status)] = db.execute("SELECT name, description, status FROM experiment").fetchall()
    db.close()
    board_points, board_texts = [], []
    for name, tag_folder, kind in tags:
        path = folder / "logs" / tag_folder
        for row in [r for f in get_tag_files(str(path)) for r in read_tag_data(str(path / f))]:
            t = iso_us(row["create_time"])
            if kind == "line":
                board_points.append((name, row["index"], row["data"], t))
            elif kind == "text":
                for i, text in enumerate(row["data"]):
                    cap = (row.get("more") or [None] * (i + 1))[i]
                    board_texts.append((row["index"], name, text, (cap or {}).get("caption"), t))
    assert got["metrics"] == sorted(board_points)
    assert got["samples"] == sorted(board_texts)

    # local mode's dashboard layout alone (a run folder without its record file) reads the same
    dashboard_only = copy_of(logdir, tmp_path)
    [record_file] = dashboard_only.glob(f"run-*/run-{RICH_ID}.swanlab")
    record_file.unlink()
    other = tmp_path / "store2"
    alone = one(ingest.ingest_swanlab(str(dashboard_only), root=other))
    assert alone.run_id == result.run_id and alone.problems == []
    assert alone.unmapped == {"image": 1, "untagged dashboard series": 2}  # the two charts: no dashboard tag
    board = stored(other, alone.run_id)
    assert board["metrics"] == got["metrics"] and board["samples"] == got["samples"]
    assert (board["meta"]["name"], board["meta"]["notes"], board["meta"]["status"]) == (exp_name, exp_desc,
                                                                                     "finished") and exp_status == 1
    assert board["meta"]["config"] == got["meta"]["config"] and board["meta"]["project"] == "ingest-demo"


# ---------------------------------------------------------------------------- damaged sources
def test_a_cut_run_file_imports_its_whole_records_and_names_the_file(root, rich, tmp_path):
    logdir = copy_of(rich, tmp_path)
    [run_file] = logdir.glob(f"run-*/run-{RICH_ID}.swanlab")
    data = run_file.read_bytes()
    run_file.write_bytes(data[:-5])  # inside the last record (the finish record)
    want = oracle(logdir, RICH_ID)  # what SwanLab's own reader still returns
    assert want["finish"] == [] and len(want["metrics"]) == 40

    result = one(ingest.ingest_swanlab(str(logdir), root=root))
    assert len(result.problems) == 1 and str(run_file) in result.problems[0] and "cut" in result.problems[0]
    got = stored(root, result.run_id)
    assert got["metrics"] == sorted(want["metrics"]) and got["samples"] == sorted(want["samples"])
    assert got["meta"]["status"] == "running" and got["meta"]["ingested"]["problems"] == result.problems

    # a corrupt byte in the middle: the records before it, the problem naming the file
    damaged = bytearray(data)
    at = -1
    for _ in range(12):  # inside the 11th record naming "loss" (its column, then its points)
        at = data.index(b"loss", at + 1)
    damaged[at] ^= 0xFF
    run_file.write_bytes(bytes(damaged))
    want = oracle(logdir, RICH_ID)
    assert 0 < len(want["metrics"]) < 40
    [found] = source.discover(str(logdir))
    run = source.read(found)
    assert len(run.problems) == 1 and str(run_file) in run.problems[0]
    assert sorted(zip(*(c.to_pylist() for c in run.table("metrics").columns))) == sorted(
        (s, k, v, datetime.fromtimestamp(t / 1e6, timezone.utc)) for k, s, v, t in want["metrics"])

    # the command says so: exit 8, the file named on stderr
    run_file.write_bytes(data[:-5])
    out = run_cli("ingest", "--from", "swanlab", str(logdir), root=tmp_path / "store3")
    assert out.returncode == 8, out.stdout + out.stderr
    assert run_file.name in out.stderr and "cut" in out.stderr


def test_a_file_cut_inside_a_record_split_over_blocks_is_reported(root, tmp_path):
    """A record that straddles a 32 KiB block is written in two chunks; a file cut between them
    ends, for SwanLab's reader, as cleanly as a whole file: the ingest still says it is cut."""
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    logdir = tmp_path / "swanlog"
    swanlab_child(BIG, logdir, "ingestbig000000000001", home=tmp_path / "h")
    [run_file] = logdir.glob("run-*/run-*.swanlab")
    reader = DataStoreReader()  # where each record ends (the test's own look at SwanLab's framing)
    reader.open(run_file)
    ends = []
    while reader.scan() is not None:
        ends.append(reader._index)
    reader.close()
    boundaries = [(a // 32768 + 1) * 32768 for a in ends]
    [cut, *_] = [k for a, b, k in zip(ends, ends[1:], boundaries) if k - a >= 7 and b > k]  # a record across it
    run_file.write_bytes(run_file.read_bytes()[:cut])
    want = oracle(logdir, "ingestbig000000000001")
    assert 0 < len(want["metrics"]) < 4000 and want["finish"] == []  # SwanLab's reader stops there without a word

    result = one(ingest.ingest_swanlab(str(logdir), root=root))
    assert len(result.problems) == 1 and str(run_file) in result.problems[0]
    assert "inside a record" in result.problems[0]
    assert stored(root, result.run_id)["metrics"] == sorted(want["metrics"])


def test_a_run_file_of_another_format_version_is_refused_naming_it(root, rich, tmp_path):
    logdir = copy_of(rich, tmp_path)
    [run_file] = logdir.glob(f"run-*/run-{RICH_ID}.swanlab")
    data = bytearray(run_file.read_bytes())
    assert data[:4] == b":SWL" and data[6] == source.RECORD_VERSION
    data[6] = 1
    run_file.write_bytes(bytes(data))
    report = ingest.ingest_swanlab(str(logdir), root=root)
    assert report.results == [] and len(report.failed) == 1
    why = report.failed[0][1]
    assert str(run_file) in why and "version 1" in why and "version 2" in why
    assert not list(root.glob("project=*"))  # nothing written
    # a session killed before SwanLab flushed anything leaves an empty file: refused, named
    run_file.write_bytes(b"")
    [(_found, why)] = ingest.ingest_swanlab(str(logdir), root=root).failed
    assert str(run_file) in why and "header" in why


# ---------------------------------------------------------------------------- discover
def test_discover_missing_path_empty_folder_and_layouts(tmp_path, rich):
    with pytest.raises(UsageError, match="nowhere"):
        source.discover(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    assert source.discover(str(tmp_path / "empty")) == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert source.discover(str(tmp_path / "other")) == []
    # the logdir, a folder holding it, the run folder, the run file: the same run, read cheaply
    [folder] = rich.glob("run-*")
    for loc in (rich, rich.parent, folder, folder / f"run-{RICH_ID}.swanlab"):
        [found] = source.discover(str(loc))
        assert found.source_id == RICH_ID and found.size == (folder / f"run-{RICH_ID}.swanlab").stat().st_size
