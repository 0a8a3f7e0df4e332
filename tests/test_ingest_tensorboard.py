"""``trackstore ingest --from tensorboard``: TensorBoard event files written by TensorBoard's own
writer (``EventFileWriter``, summaries built with TensorBoard's protos and summary helpers: TF1
``simple_value`` scalars and TF2-style scalar tensors, histograms both ways, text, hparams,
images, audio, a graph), ingested, and compared with what TensorBoard's own readers return: its
data server through its ``GrpcDataProvider`` (every point kept), and ``EventAccumulator`` for
the fallback reader and for damaged files. Every point, step and timestamp (to the microsecond;
TensorBoard's wall time is float64 seconds), histogram, text, config and status; more points
than TensorBoard samples to; again adds nothing; a run that went on adds only its new rows; a
truncated or corrupt tail gives the readable part and a problem naming the file; what the store
cannot hold is counted; discover's edges."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import stored_rows as stored
from trackstore.errors import UsageError
from trackstore.sync.ingest import discover, ingest_tensorboard
from trackstore.sync.ingest import tensorboard as tb_ingest

pytest.importorskip("tensorboard")
np = pytest.importorskip("numpy")

STEPS = 1500  # above the 1000 points per scalar series TensorBoard keeps and shows by default
PLUGINS = ("scalars", "histograms", "text", "hparams", "images", "audio", "graphs")
DAY = 86400.0


# ---------------------------------------------------------------------------- writing event files
def scalar_tensor(tag: str, value: float):
    """A TF2-style scalar: a float32 rank-0 tensor with the scalars plugin's metadata."""
    from tensorboard.plugins.scalar import summary_v2

    return summary_v2.scalar_pb(tag, value).value[0]


def simple(tag: str, value: float):
    from tensorboard.compat.proto import summary_pb2

    return summary_pb2.Summary.Value(tag=tag, simple_value=value)


def text(tag: str, value):
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.text import metadata
    from tensorboard.util import tensor_util

    md = metadata.create_summary_metadata(display_name="", description="")
    return summary_pb2.Summary.Value(tag=tag, metadata=md, tensor=tensor_util.make_tensor_proto(value))


def session_end(when: float, status: str = "STATUS_SUCCESS"):
    """The hparams session end summary (``hparams.summary.session_end_pb``, which needs TensorFlow,
    built from the same protos)."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(
        status=api_pb2.Status.Value(status), end_time_secs=when))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=metadata.SESSION_END_INFO_TAG, metadata=metadata.create_summary_metadata(data),
        tensor=metadata.NULL_TENSOR)])


class Writer:
    """TensorBoard's own event file writer, with the events' wall times given."""

    def __init__(self, folder: Path):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._w = EventFileWriter(str(folder), max_queue_size=1000)

    def values(self, step: int, wall: float, *values) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._w.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=list(values))))

    def summary(self, wall: float, summary) -> None:
        from tensorboard.compat.proto import event_pb2

        self._w.add_event(event_pb2.Event(wall_time=wall, summary=summary))

    def graph(self, wall: float, graph: bytes) -> None:
        from tensorboard.compat.proto import event_pb2

        self._w.add_event(event_pb2.Event(wall_time=wall, graph_def=graph))

    def close(self) -> None:
        self._w.close()


def write_train(folder: Path, t0: float, first: int = 0, last: int = STEPS) -> None:
    """Steps ``first..last-1`` of a training run: two scalar tags (TF1 and TF2 style), histograms
    (TF2 tensors and a TF1 HistogramProto), texts, and at the start the hparams, an image, two
    audio clips and a graph."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.histogram import summary_v2 as histogram
    from tensorboard.plugins.hparams import summary_v2 as hparams

    w = Writer(folder)
    if first == 0:
        w.summary(t0, hparams.hparams_config_pb(hparams=[hparams.HParam("lr"), hparams.HParam("optimizer")],
                                                metrics=[hparams.Metric("loss"), hparams.Metric("accuracy")]))
        w.summary(t0, hparams.hparams_pb({"lr": 0.001, "optimizer": "adam", "batch": 32, "warmup": True},
                                         start_time_secs=t0))
        w.values(0, t0 + 0.25, summary_pb2.Summary.Value(tag="sample", image=summary_pb2.Summary.Image(
            height=1, width=1, colorspace=3, encoded_image_string=b"\x89PNG not really")))
        for step in (0, 1):
            w.values(step, t0 + 0.5, summary_pb2.Summary.Value(tag="speech", audio=summary_pb2.Summary.Audio(
                sample_rate=8000, num_channels=1, length_frames=1, encoded_audio_string=b"RIFF")))
        w.graph(t0 + 0.75, b"a serialized GraphDef")
        w.values(7, t0 + 7.5, summary_pb2.Summary.Value(tag="legacy_weights", histo=summary_pb2.HistogramProto(
            min=-1.0, max=3.0, num=6, sum=5.0, sum_squares=11.0, bucket_limit=[0.0, 1.5, 3.0], bucket=[1, 2, 3])))
    for step in range(first, last):
        wall = t0 + step + 0.123456 + step * 1e-6  # a different microsecond each step
        w.values(step, wall, simple("loss", 1.0 / (step + 1)), scalar_tensor("accuracy", step / last))
        if step % 100 == 0:
            w.values(step, wall, histogram.histogram_pb("weights", np.linspace(-1.0, 1.0, 50) + step, buckets=5).value[0])
        if step % 500 == 3:
            w.values(step, wall, text("completion", f"step {step}: the answer is 42 ✓"))
            w.values(step, wall, text("table", np.array([["q1", "a1"], ["q2", "a2"]], dtype=object)))
            w.values(step, wall, text("list", np.array(["first", "second"], dtype=object)))
    if last == STEPS:
        w.summary(t0 + last, session_end(t0 + last))
    w.close()


def write_eval(folder: Path, t0: float) -> None:
    """An evaluation run: TF2 scalars every 10 steps."""
    w = Writer(folder)
    for step in range(0, 50, 10):
        w.values(step, t0 + step / 100, scalar_tensor("eval/accuracy", step / 50))
    w.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """``logs/train`` (a day ago: scalars, histograms, texts, hparams, media) and ``logs/eval``."""
    base = tmp_path_factory.mktemp("tb") / "logs"
    write_train(base / "train", time.time() - DAY)
    write_eval(base / "eval", time.time() - DAY / 2)
    return base


def copy_run(logdir: Path, tmp_path: Path, name: str = "train") -> Path:
    dest = tmp_path / "copy" / name
    shutil.copytree(logdir / name, dest)
    return dest


# ---------------------------------------------------------------------------- TensorBoard's own readers
@contextmanager
def data_provider(logdir: Path, *, all_points: bool = True):
    """TensorBoard's data server on ``logdir``, started as TensorBoard starts it (its own binary,
    port file, ``--die-after-stdin``), every point kept unless ``all_points`` is false, and read
    through TensorBoard's own ``GrpcDataProvider`` once its load cycle has finished."""
    import grpc
    from tensorboard.data import grpc_provider, server_ingester

    work = logdir.parent / f".provider-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    port_file = work / "port"
    args = [server_ingester.get_server_binary().path, f"--logdir={logdir}", "--reload=once", "--port=0",
            f"--port-file={port_file}", "--die-after-stdin", "--checksum", "--verbose"]
    if all_points:
        args.append("--samples-per-plugin=" + ",".join(f"{p}=all" for p in PLUGINS))
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "RUST_LOG": "info"})
    loaded = threading.Event()

    def drain():
        for line in proc.stderr:
            if b"Finished load cycle" in line:
                loaded.set()
        loaded.set()

    threading.Thread(target=drain, daemon=True).start()
    channel = None
    try:
        assert loaded.wait(60) and proc.poll() is None, "TensorBoard's data server did not load the logdir"
        addr = f"localhost:{int(port_file.read_text())}"
        channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 1 << 28)])
        yield grpc_provider.GrpcDataProvider(addr, grpc_provider.make_stub(channel))
    finally:
        if channel is not None:
            channel.close()
        proc.stdin.close()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def ctx():
    from tensorboard import context

    return context.RequestContext()


def us(wall: float) -> int:
    """TensorBoard's float64 wall time (seconds) to the microsecond."""
    return int(round(wall * 1e6))


def provider_points(provider, run: str) -> list:
    series = provider.read_scalars(ctx(), experiment_id="", plugin_name="scalars", downsample=10**9)[run]
    return sorted((tag, d.step, us(d.wall_time), d.value) for tag, data in series.items() for d in data)


def provider_tensors(provider, plugin: str, run: str) -> dict:
    series = provider.read_tensors(ctx(), experiment_id="", plugin_name=plugin, downsample=10**9).get(run, {})
    return {tag: [(d.step, us(d.wall_time), d.numpy) for d in data] for tag, data in series.items()}


def accumulator(folder: Path):
    """TensorBoard's EventAccumulator on a run folder, every tensor kept."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea

    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return acc


def accumulator_points(folder: Path) -> list:
    from tensorboard.util import tensor_util

    acc = accumulator(folder)
    return sorted((tag, e.step, us(e.wall_time), float(tensor_util.make_ndarray(e.tensor_proto).item()))
                  for tag in acc.Tags()["tensors"] if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
                  for e in acc.Tensors(tag))


# ---------------------------------------------------------------------------- the store


def points(root, run_id: str) -> list:
    return sorted(stored(root, f"SELECT key, step, epoch_us(ts), value FROM metrics WHERE run_id = '{run_id}'"))


def counts(root, run_id: str) -> dict:
    return {kind: stored(root, f"SELECT count(*) FROM {kind} WHERE run_id = '{run_id}'")[0][0]
            for kind in ("metrics", "samples", "histograms")}


def run_json(root, project: str, run_id: str) -> dict:
    return json.loads((Path(root) / f"project={project}" / f"run={run_id}" / "run.json").read_text())


def run_id_of(location: Path, name: str) -> str:
    (found,) = [f for f in tb_ingest.discover(str(location)) if f.label == name]
    return tb_ingest.run_id_for(found.source_id)


def iso_us(text: str) -> int:
    from datetime import datetime

    return us(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


# ---------------------------------------------------------------------------- tests
def test_a_logdir_round_trips_as_tensorboards_own_data_server_reads_it(root, logdir):
    report = ingest_tensorboard(str(logdir), root=root)
    assert report.complete, (report.failed, [r.problems for r in report.results])
    results = {r.run_id: r for r in report.results}
    train, ev = run_id_of(logdir, "train"), run_id_of(logdir, "eval")
    assert set(results) == {train, ev} and train.startswith("tb-train-") and ev.startswith("tb-eval-")
    assert {r.project for r in report.results} == {"tensorboard"}

    with data_provider(logdir) as provider:
        # every scalar, TF1 simple_value and TF2 tensor alike, with its step, value and wall time
        want = provider_points(provider, "train")
        assert len(want) == 2 * STEPS
        assert points(root, train) == want
        assert points(root, ev) == provider_points(provider, "eval")

        # histograms: edges = first left edge + every right edge, counts the third column
        hists = stored(root, f"SELECT key, step, epoch_us(ts), edges, counts FROM histograms WHERE run_id = '{train}'")
        want_h = [(tag, step, ts, [float(a[0, 0]), *map(float, a[:, 1])], [float(c) for c in a[:, 2]])
                  for tag, data in provider_tensors(provider, "histograms", "train").items() for step, ts, a in data]
        assert sorted(hists) == sorted(want_h) and len(want_h) == STEPS // 100 + 1

        # texts: one sample per string, a table one per row (its cells as a JSON list)
        samples = stored(root, "SELECT split, step, sample_index, epoch_us(ts), input, output, json_fields "
                               f"FROM samples WHERE run_id = '{train}'")
        got_s = [(split, step, i, ts, inp, json.loads(out) if fields == ["output"] else out)
                 for split, step, i, ts, inp, out, fields in samples]
        want_s = []
        for tag, data in provider_tensors(provider, "text", "train").items():
            for step, ts, a in data:
                if a.ndim == 0:
                    want_s.append((tag, step, 0, ts, None, a.item().decode()))
                for i, row in enumerate(a if a.ndim else []):
                    want_s.append((tag, step, i, ts, None, row.decode() if a.ndim == 1 else [c.decode() for c in row]))
        assert sorted(got_s, key=repr) == sorted(want_s, key=repr) and len(want_s) == 3 * 5

        # hparams: the session's hyperparameters are the config, its metrics' last values the summary
        from google.protobuf import json_format
        from tensorboard.plugins.hparams import metadata as hp_meta

        listed = provider.list_tensors(ctx(), experiment_id="", plugin_name="hparams")["train"]
        start = hp_meta.parse_session_start_info_plugin_data(listed["_hparams_/session_start_info"].plugin_content)
        meta = run_json(root, "tensorboard", train)
        assert meta["config"] == {k: json_format.MessageToDict(v) for k, v in start.hparams.items()}
        assert meta["config"] == {"lr": 0.001, "optimizer": "adam", "batch": 32.0, "warmup": True}
        last = {tag: max(data, key=lambda d: d.step).value for tag, data in provider.read_scalars(
            ctx(), experiment_id="", plugin_name="scalars", downsample=10**9)["train"].items()}
        assert meta["summary"] == {"loss": last["loss"], "accuracy": last["accuracy"]}

        # times: created = the first event, ended = the newest; status from the hparams session end
        run_start = {r.run_name: r.start_time for r in provider.list_runs(ctx(), experiment_id="")}
        assert iso_us(meta["created_at"]) == us(run_start["train"])
        newest = max(ts.max_wall_time for kind in ("scalars", "tensors")
                     for plugin in ("scalars", "histograms", "text", "hparams")
                     for ts in getattr(provider, f"list_{kind}")(ctx(), experiment_id="", plugin_name=plugin)
                     .get("train", {}).values())
        assert iso_us(meta["ended_at"]) == us(newest) > max(ts for _, _, ts, _ in want)  # the session end
        assert meta["status"] == "finished" and meta["ingested"]["meta"]["hparams"]["session_status"] == "STATUS_SUCCESS"
        assert meta["ingested"]["meta"]["reader"].startswith("tensorboard-data-server")

        # media, audio and the graph are counted, one per point TensorBoard keeps
        counted = {"image": 0, "audio": 0, "graph": 0}
        for plugin, kind in (("images", "image"), ("audio", "audio"), ("graphs", "graph")):
            blobs = provider.read_blob_sequences(ctx(), experiment_id="", plugin_name=plugin, downsample=10**9)
            counted[kind] = sum(len(d) for d in blobs.get("train", {}).values())
        assert counted == {"image": 1, "audio": 2, "graph": 1}
        assert results[train].unmapped == counted == meta["ingested"]["unmapped"]

    done = run_json(root, "tensorboard", ev)
    assert done["status"] == "finished" and iso_us(done["ended_at"]) == max(ts for _, _, ts, _ in points(root, ev))
    assert done["name"] == "eval" and done["ingested"]["source_id"] == str((logdir / "eval").resolve())


def test_status_running_while_written_and_as_an_hparams_session_ended(root, tmp_path):
    """TensorBoard has no run status: an event in the last 120 s means running (heartbeat: that
    event); an hparams session end, when written, says finished or failed."""
    from tensorboard.compat.proto import summary_pb2

    live = tmp_path / "logs" / "live"
    write_eval(live, time.time() - 5)
    failed = tmp_path / "logs" / "failed"
    write_eval(failed, time.time() - 5)
    w = Writer(failed)
    w.summary(time.time(), session_end(time.time(), "STATUS_FAILURE"))
    w.close()
    # the live run's writer is half-way through a record: not damage, the next ingest reads it
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    record = io.BytesIO()
    RecordWriter(record).write(event_pb2.Event(wall_time=time.time(), step=99, summary=summary_pb2.Summary(
        value=[simple("loss", 1.0)])).SerializeToString())
    (events,) = live.iterdir()
    size = events.stat().st_size
    with open(events, "ab") as f:
        f.write(record.getvalue()[:20])
    report = ingest_tensorboard(str(tmp_path / "logs"), root=root)
    assert report.complete, [r.problems for r in report.results]
    meta = {r.run_id: run_json(root, "tensorboard", r.run_id) for r in report.results}
    live_run, failed_run = meta[run_id_of(live.parent, "live")], meta[run_id_of(failed.parent, "failed")]
    assert live_run["status"] == "running" and live_run["ended_at"] is None
    assert live_run["ingested"]["meta"]["record being written"] == [f"{events.name}: 20 bytes from byte {size}"]
    assert iso_us(live_run["heartbeat_at"]) == max(ts for _, _, ts, _ in points(root, run_id_of(live.parent, "live")))
    assert failed_run["status"] == "failed" and failed_run["ended_at"] is not None
    assert failed_run["ingested"]["meta"]["hparams"]["session_status"] == "STATUS_FAILURE"


def test_every_point_arrives_where_tensorboard_would_sample(root, logdir):
    """TensorBoard samples twice: its data server keeps 1000 points of a scalar series unless
    told otherwise, and ``read_scalars`` returns ``downsample`` of them. The ingest has all."""
    ingest_tensorboard(str(logdir / "train"), root=root)
    got = points(root, run_id_of(logdir / "train", "train"))
    assert sum(k == "loss" for k, *_ in got) == STEPS
    with data_provider(logdir) as provider:
        sampled = provider.read_scalars(ctx(), experiment_id="", plugin_name="scalars", downsample=1000)
        assert len(sampled["train"]["loss"]) == 1000
    with data_provider(logdir, all_points=False) as provider:  # TensorBoard's defaults
        kept = provider.read_scalars(ctx(), experiment_id="", plugin_name="scalars", downsample=10**9)
        assert len(kept["train"]["loss"]) == 1000
    assert got == accumulator_points(logdir / "train")  # and TensorBoard's other reader agrees


def test_ingesting_again_adds_nothing(root, logdir):
    first = ingest_tensorboard(str(logdir), root=root)
    before = {r.run_id: counts(root, r.run_id) for r in first.results}
    again = ingest_tensorboard(str(logdir), root=root)
    assert again.complete
    for r in again.results:
        assert not r.created and set(r.added.values()) == {0}, r.added
        assert counts(root, r.run_id) == before[r.run_id]
    # the same run reached another way (its own folder, one of its files) is the same run
    for where in (logdir / "train", next((logdir / "train").iterdir())):
        (same,) = ingest_tensorboard(str(where), root=root).results
        assert same.run_id == run_id_of(logdir, "train") and not same.created and set(same.added.values()) == {0}


def test_a_run_that_went_on_adds_only_its_new_rows(root, tmp_path):
    run = tmp_path / "resumed" / "train"
    t0 = time.time() - DAY
    write_train(run, t0, 0, 1000)
    first = ingest_tensorboard(str(run), root=root)
    (res,) = first.results
    assert res.created and res.added["metrics"] == 2000

    # the job goes on: a new event file in the same folder, as a resumed writer leaves it
    write_train(run, t0, 1000, 1200)
    second = ingest_tensorboard(str(run), root=root)
    (res2,) = second.results
    assert not res2.created and res2.run_id == res.run_id
    assert res2.added == {"metrics": 400, "samples": 5, "spans": 0, "histograms": 2}, res2.added
    assert points(root, res.run_id) == accumulator_points(run)
    with data_provider(run.parent) as provider:
        assert points(root, res.run_id) == provider_points(provider, run.name)
    assert len(run_json(root, "tensorboard", res.run_id)["ingested"]["meta"]["files"]) == 2


@pytest.mark.parametrize("damage", ["cut mid-record", "bytes flipped at the end"])
def test_a_damaged_file_gives_its_readable_part_and_names_the_file(root, logdir, tmp_path, damage):
    run = copy_run(logdir, tmp_path)
    (events,) = run.iterdir()
    data = bytearray(events.read_bytes())
    if damage == "cut mid-record":
        events.write_bytes(bytes(data[: len(data) - 9]))  # inside the last record (the session end)
    else:
        data[-6] ^= 0xFF  # the last record's payload and checksum
        data[-2] ^= 0xFF
        events.write_bytes(bytes(data))
    report = ingest_tensorboard(str(run), root=root)
    assert not report.complete
    (res,) = report.results
    assert len(res.problems) == 1 and str(events) in res.problems[0], res.problems
    meta = run_json(root, "tensorboard", res.run_id)
    assert meta["ingested"]["problems"] == res.problems
    # everything before the damage is in, as TensorBoard's own reader has it
    assert points(root, res.run_id) == accumulator_points(run) and len(accumulator_points(run)) == 2 * STEPS
    assert counts(root, res.run_id)["histograms"] == STEPS // 100 + 1
    assert "session_status" not in meta["ingested"]["meta"]["hparams"]  # the lost last record
    assert meta["status"] == "finished"  # no event for a day


def test_the_fallback_reader_gives_the_same_rows(root, logdir, tmp_path, monkeypatch):
    """Without TensorBoard's data server (its binary missing), EventAccumulator reads the runs:
    the same rows, config, times and counts as the data server gives."""
    fast = ingest_tensorboard(str(logdir), root=root)
    slow_root = tmp_path / "slow"
    monkeypatch.setenv("TENSORBOARD_DATA_SERVER_BINARY", str(tmp_path / "no-such-server"))
    slow = ingest_tensorboard(str(logdir), root=slow_root)
    assert slow.complete
    for r in fast.results:
        a, b = run_json(root, "tensorboard", r.run_id), run_json(slow_root, "tensorboard", r.run_id)
        assert b["ingested"]["meta"]["reader"].startswith("EventAccumulator")
        for field in ("config", "summary", "status", "created_at", "ended_at", "heartbeat_at", "host"):
            assert a[field] == b[field], field
        assert a["ingested"].get("unmapped") == b["ingested"].get("unmapped")
        for kind in ("metrics", "samples", "histograms"):
            cols = {"metrics": "key, step, epoch_us(ts), value",
                    "samples": "split, step, sample_index, input, output, epoch_us(ts)",
                    "histograms": "key, step, edges, counts, epoch_us(ts)"}[kind]
            sql = f"SELECT {cols} FROM {kind} WHERE run_id = '{r.run_id}'"
            assert sorted(stored(root, sql)) == sorted(stored(slow_root, sql)), kind
    train = run_id_of(logdir, "train")
    assert points(slow_root, train) == accumulator_points(logdir / "train")


def test_project_and_dry_run(root, logdir):
    plan = ingest_tensorboard(str(logdir / "eval"), root=root, project="rl", dry_run=True)
    assert [r.dry_run for r in plan.results] == [True] and not (Path(root) / "project=rl").exists()
    done = ingest_tensorboard(str(logdir / "eval"), root=root, project="rl")
    assert [r.project for r in done.results] == ["rl"] and run_json(root, "rl", done.results[0].run_id)


def test_discover(tmp_path, logdir):
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError, match="nowhere"):
        tb_ingest.discover(str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tb_ingest.discover(str(empty)) == []
    (empty / "notes.txt").write_text("no event file here")
    assert tb_ingest.discover(str(empty)) == []

    found = {f.label: f for f in tb_ingest.discover(str(logdir))}
    assert set(found) == {"train", "eval"}
    assert found["train"].source_id == str((logdir / "train").resolve())
    assert found["train"].size == sum(p.stat().st_size for p in (logdir / "train").iterdir())
    # one run folder, or one of its files: that run, named after its folder
    (event_file,) = (logdir / "train").iterdir()
    for where in (logdir / "train", event_file):
        (one,) = tb_ingest.discover(str(where))
        assert (one.label, one.source_id) == ("train", found["train"].source_id)
    # nested runs are named by their path under the location; a link cycle is walked once
    nested = tmp_path / "nested"
    shutil.copytree(logdir / "eval", nested / "exp1" / "seed0")
    shutil.copytree(logdir / "eval", nested, dirs_exist_ok=True)  # event files in the location itself too
    (nested / "exp1" / "loop").symlink_to(nested, target_is_directory=True)
    labels = sorted(f.label for f in discover("tensorboard", [str(nested)]))
    assert labels == ["exp1/seed0", "nested"]
    ids = sorted(tb_ingest.run_id_for(f.source_id) for f in tb_ingest.discover(str(nested)))
    assert [i[: -len("-01234567")] for i in ids] == ["tb-nested", "tb-seed0"]


def test_a_run_whose_files_vanished_fails_and_the_others_are_written(root, tmp_path, logdir):
    src = tmp_path / "gone"
    shutil.copytree(logdir, src)
    found = tb_ingest.discover(str(src))
    shutil.rmtree(src / "eval")
    with pytest.raises(tb_ingest.TensorboardReadError, match="eval"):
        tb_ingest.read([f for f in found if f.label == "eval"][0])


def test_a_plugin_tensorboard_does_not_know_is_counted_point_by_point(root, tmp_path, monkeypatch):
    """A third-party plugin's summaries (here 150 tensors, more than the 100 TensorBoard's data
    server keeps of a tensor series it has no sampling hint for) are all counted, by both readers."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util

    run = tmp_path / "logs" / "custom"
    w = Writer(run)
    md = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="my_plugin"),
                                     data_class=summary_pb2.DATA_CLASS_TENSOR)
    t0 = time.time() - DAY
    for step in range(150):
        w.values(step, t0 + step, summary_pb2.Summary.Value(tag="probe", metadata=md,
                                                            tensor=tensor_util.make_tensor_proto([1.0, 2.0])),
                 simple("loss", step))
    w.close()
    (fast,) = ingest_tensorboard(str(run), root=root).results
    monkeypatch.setenv("TENSORBOARD_DATA_SERVER_BINARY", str(tmp_path / "no-such-server"))
    (slow,) = ingest_tensorboard(str(run), root=tmp_path / "slow").results
    assert fast.unmapped == slow.unmapped == {"tensorboard plugin my_plugin": 150}
    assert fast.added["metrics"] == slow.added["metrics"] == 150
