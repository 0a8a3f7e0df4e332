"""trackstore sync --to swanlab with the real swanlab client in offline/local mode, read back
with SwanLab's own reader (``DataStoreReader`` + ``record_pb2.Record``): identity and resume,
original point times, metadata, what SwanLab cannot hold (reported), rich records, and a sync
killed after SwanLab had been handed rows its spool never wrote."""

from __future__ import annotations

import json
import signal
import socket
import time
from datetime import timezone
from pathlib import Path

import pytest

import trackstore
from tests.helpers import fake_old_client, python_child, run_cli, spawn_cli

pytest.importorskip("swanlab")

from trackstore.sync.swanlab import SKIP_OLD, SKIP_SECOND, count_points, experiment_id, read_session_files  # noqa: E402


@pytest.fixture
def logdir(tmp_path, monkeypatch):
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    return tmp_path / "swanlog"


def sync(root, logdir, *extra, mode="offline"):
    res = run_cli("sync", "--to", "swanlab", "--mode", mode, "--logdir", str(logdir), "--format", "json", *extra,
                  root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["runs"][0], res


def run_logdir(logdir, run):
    """Where SwanLab wrote the run: ``<logdir>/<project>`` in local mode, else ``<logdir>``."""
    return logdir / run.project if (logdir / run.project).is_dir() else logdir


def records(logdir, run, kind=None):
    out = [(d, r) for d, r in read_session_files(run_logdir(logdir, run), experiment_id(run.project, run.id))]
    return [(d, r) for d, r in out if kind is None or r.WhichOneof("record_type") == kind]


def scalars(logdir, run):
    """(key, step, value, ts_us) of every scalar point, all sessions."""
    out = []
    for _d, rec in records(logdir, run, "scalar"):
        s = rec.scalar
        ts = s.timestamp.ToDatetime(tzinfo=timezone.utc)
        out.append((s.key, int(s.step), s.value.number, int(round(ts.timestamp() * 1_000_000))))
    return sorted(out)


def local_points(run):
    import pyarrow.parquet as pq

    rows = pq.read_table(run.dir / "metrics").to_pylist()
    return sorted((r["key"], r["step"], r["value"], int(round(r["ts"].timestamp() * 1_000_000))) for r in rows)


@pytest.mark.parametrize("mode", ["offline", "local"])
def test_identity_metadata_and_original_times(root, logdir, mode):
    run = trackstore.init("proj", name="exp", config={"lr": 0.001, "model": {"layers": 2}}, tags=["t1", "t2"],
                          notes="hello", root=root)
    for s in range(10):
        run.log({"loss": 1.0 / (s + 1), "train/acc": s / 10}, step=s)
        time.sleep(0.002)  # distinct original times per step
    run.flush()
    out, res = sync(root, logdir, mode=mode)
    assert "swanlab:" not in res.stdout + res.stderr  # SwanLab's console is silenced
    for s in range(10, 15):
        run.log({"loss": 1.0 / (s + 1), "train/acc": s / 10}, step=s)
    run.summary["best_acc"] = 0.97
    run.finish()
    sync(root, logdir, mode=mode)
    sync(root, logdir, mode=mode)  # nothing new: no new session, nothing sent
    # every point, exactly once, with its original time to the microsecond
    assert scalars(logdir, run) == local_points(run)
    starts = [r.start for _d, r in records(logdir, run, "start")]
    assert len(starts) == 2  # one SwanLab session per sync that had something to send
    assert {s.id for s in starts} == {experiment_id("proj", run.id)} and len(starts[0].id) == 21
    from swanlab.proto.swanlab.run.v1.run_pb2 import RESUME_MODE_ALLOW

    assert all(s.resume == RESUME_MODE_ALLOW for s in starts)
    last = starts[-1]
    assert last.name == "exp" and last.description == "hello" and list(last.tags) == ["t1", "t2"]
    session = sorted(run_logdir(logdir, run).glob(f"run-*-{experiment_id('proj', run.id)}"))[-1]
    import yaml

    cfg = {k: v["value"] for k, v in yaml.safe_load((session / "files" / "config.yaml").read_text()).items()}
    assert cfg["lr"] == 0.001 and cfg["model.layers"] == 2  # flattened: SwanLab shows nested values as [object Object]
    assert cfg["trackstore.status"] == "finished" and cfg["trackstore.run_id"] == run.id
    assert cfg["trackstore.summary.best_acc"] == 0.97
    finish = [r.finish for _d, r in records(logdir, run, "finish")]
    assert finish[-1].state == 1  # RUN_STATE_FINISHED


def test_second_value_and_late_value_are_reported_not_lost(root, logdir):
    run = trackstore.init("dups", root=root)
    run.log({"a": 1.0, "b": 1.0}, step=5)
    run.log({"a": 2.0}, step=5)          # a second value for (a, 5): SwanLab keeps the first
    run.log({"a": 3.0, "b": 3.0}, step=6)
    run.flush()
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_SECOND: 1} and out["verify_ok"] is True
    run.log({"a": 4.0, "c": 4.0}, step=3)  # late: a is past step 3 at SwanLab, c is a new key
    run.finish()
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_OLD: 1} and out["verify_ok"] is True
    got = {(k, s): v for k, s, v, _t in scalars(logdir, run)}
    assert got == {("a", 5): 1.0, ("b", 5): 1.0, ("a", 6): 3.0, ("b", 6): 3.0, ("c", 3): 4.0}
    status = json.loads(run_cli("status", "--to", "swanlab", "--format", "json", root=root).stdout)
    assert status[0]["pending_metrics"] == 0


def test_samples_trajectories_histograms_and_artifacts(root, logdir, tmp_path):
    run = trackstore.init("rich", root=root)
    run.log({"h": trackstore.Histogram([1.0, 2.0, 2.5, 3.0], bins=3), "x": 1.0}, step=0)
    run.log_samples([{"input": "q1", "output": "a1", "score": 1.0}, {"input": "q2", "output": "a2", "score": 0.0}],
                    step=0)
    for i in range(2):
        with run.trace(step=1, sample_index=i) as tr:
            with tr.span("assistant", kind="llm", inputs={"q": "6*7"}) as s:
                with tr.span("calculator", kind="tool", inputs={"expr": "6*7"}) as t:
                    t.set_outputs(42)
                s.set_outputs("The answer is 42")
            tr.set_reward(1.0)
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    run.log_artifact(model, name="model")
    run.finish()
    out, _ = sync(root, logdir, "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}
    assert out["verified"] == {"metrics": 1, "samples": 2, "histograms": 1, "traces": 2, "images": 0}
    media = {r.media.key: r.media for _d, r in records(logdir, run, "media")}
    session = sorted(logdir.glob("run-*"))[-1]
    texts = [(it.caption, (session / "media" / "text" / it.filename).read_text())
             for it in media["samples/val"].value.items]
    assert texts == [("#0 input", "q1"), ("#0 output", "a1"), ("#0 score", "1.0"),
                     ("#1 input", "q2"), ("#1 output", "a2"), ("#1 score", "0.0")]
    traj = media["trajectories"]
    rows = [(it.caption, (session / "media" / "text" / it.filename).read_text()) for it in traj.value.items]
    assert int(traj.step) == 1 and [c for c, _ in rows].count("▸ sample 0") == 1 and len(rows) == 8
    assert rows[1][0] == "episode" and rows[2][0].endswith("└ assistant") and rows[3][0].endswith("└ calculator")
    assert len(rows[3][0]) > len(rows[2][0])  # nested deeper
    assert rows[2][1].startswith("llm ok") and "outputs: 42" in rows[3][1] and "reward 1.0" in rows[0][1]
    chart = json.loads((session / "media" / "echarts" / media["h"].value.items[0].filename).read_text())
    import pyarrow.parquet as pq

    counts = pq.read_table(run.dir / "histograms").column("counts").to_pylist()[0]
    assert [d if not isinstance(d, dict) else d["value"] for d in _bar_data(chart)] == counts == [1.0, 1.0, 2.0]
    # the documented name, artifacts/<name>/v<version>/files/<path in the artifact>, and nothing else
    saves = [r.save for _d, r in records(logdir, run, "save") if r.save.name.startswith("artifacts/")]
    assert [s.name for s in saves] == ["artifacts/model/v0/files/model.bin"]
    assert Path(saves[0].target_path) == session / "files" / "artifacts" / "model" / "v0" / "files" / "model.bin"
    assert Path(saves[0].target_path).read_bytes() == b"weights"


def _bar_data(chart):
    """The y data of the first bar series, wherever pyecharts put it in the option JSON."""
    def walk(o):
        if isinstance(o, dict):
            if o.get("type") == "bar" and "data" in o:
                return o["data"]
            for v in o.values():
                found = walk(v)
                if found is not None:
                    return found
        if isinstance(o, list):
            for v in o:
                found = walk(v)
                if found is not None:
                    return found
        return None
    return walk(chart)


def test_failed_run_is_crashed_with_exit_code(root, logdir):
    run = trackstore.init("fail", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish(exit_code=3)
    sync(root, logdir)
    fin = [r.finish for _d, r in records(logdir, run, "finish")][-1]
    assert fin.state == 2 and "exit_code=3" in fin.error  # RUN_STATE_CRASHED


def test_crashed_run_is_aborted_with_its_status(root, logdir, tmp_path, monkeypatch):
    """As documented: finished -> success, failed -> crashed, crashed -> aborted (SwanLab's
    RUN_STATE_ABORTED), the reason in the finish record's error."""
    from swanlab.proto.swanlab.run.v1.run_pb2 import RunState

    run = trackstore.init("crash", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish(status="crashed", exit_code=137)
    out, _ = sync(root, logdir)
    assert out["status"] == "crashed" and out["error"] is None
    fin = [r.finish for _d, r in records(logdir, run, "finish")][-1]
    assert fin.state == RunState.RUN_STATE_ABORTED
    assert "trackstore status crashed" in fin.error and "exit_code=137" in fin.error
    from tests.sync_harness import SwanlabHarness

    h = SwanlabHarness(tmp_path, monkeypatch)  # the conformance suite's reading of the state
    assert h.logdir == logdir and h.status(run.project, run.id) == "crashed"


def test_sigkill_after_acknowledged_batches_ends_exact(root, logdir):
    """Kill the sync once the cursor has acknowledged hundreds of rows: SwanLab's spool had not
    written all of them; the engine's session record makes the next sync re-check and resend them."""
    run = trackstore.init("kill", root=root)
    for s in range(2000):
        run.log({f"m{i}": s + i / 10 for i in range(4)}, step=s)
    run.finish()
    p = spawn_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", logdir, "--batch-size", "16",
                  "--root", root)
    cursor_glob = "_sync/*/project=kill/run=*.json"
    deadline = time.monotonic() + 120
    acked = 0
    while time.monotonic() < deadline and p.poll() is None:
        for f in root.glob(cursor_glob):
            try:
                c = json.loads(f.read_text())
            except ValueError:
                continue
            acked = sum(hi - lo + 1 for rs in c["acked"].get("metrics", {}).values() for lo, hi in rs)
        if acked >= 800:
            break
        time.sleep(0.005)
    assert p.poll() is None, "the sync finished before it could be killed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    c = json.loads(next(root.glob(cursor_glob)).read_text())
    from trackstore.store.ranges import RangeSet

    before = RangeSet.from_json(c["session"]["acked"].get("metrics"))  # the cursor when the session began
    handed = len(RangeSet.from_json(c["acked"]["metrics"]) - before)
    assert handed >= 800  # handed over to SwanLab, not confirmed durable
    plan = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), "--dry-run",
                   "--format", "json", root=root)
    acked = sum(hi - lo + 1 for rs in c["acked"]["metrics"].values() for lo, hi in rs)
    assert json.loads(plan.stdout)["runs"][0]["pending"]["metrics"] == 8000 - acked + handed
    out, _ = sync(root, logdir, "--verify")
    assert any("did not close" in n for n in out["notes"]), out["notes"]
    assert out["verify_ok"] is True
    pts = scalars(logdir, run)
    assert len(pts) == len(set((k, s) for k, s, _v, _t in pts)) == 8000
    assert pts == local_points(run)
    assert len({d.name.rsplit("-", 1)[-1] for d in logdir.glob("run-*")}) == 1


def test_fallback_without_verified_timestamp_path(root, logdir):
    """An unverified client version uses the public API: points get the sync time, and the
    notes say so."""
    run = trackstore.init("fallback", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish()
    code = ("import sys, trackstore.sync.swanlab as s\ns.TIMESTAMP_VERIFIED = ('never',)\n"
            "from trackstore.cli.main import main\n"
            f"sys.exit(main(['sync', '--to', 'swanlab', '--mode', 'offline', '--logdir', {str(logdir)!r}, "
            f"'--format', 'json', '--root', {str(root)!r}]))\n")
    p = python_child(code)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    out = json.loads(stdout)["runs"][0]
    assert any("original point times not kept" in n for n in out["notes"])
    (key, step, value, ts_us), = scalars(logdir, run)
    assert (key, step, value) == ("x", 0, 1.0)
    assert ts_us > local_points(run)[0][3]  # stamped at sync time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cloud_mode_unreachable_host_and_key_never_printed(root, monkeypatch):
    secret = "sk-swanlab-test-secret-0123456789"
    monkeypatch.setenv("SWANLAB_API_KEY", secret)
    run = trackstore.init("cloud", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish()
    host = f"http://127.0.0.1:{_free_port()}"
    res = run_cli("sync", "--to", "swanlab", "--host", host, root=root)
    assert res.returncode == 7 and "unreachable" in res.stderr.lower(), res.stdout + res.stderr
    assert secret not in res.stdout + res.stderr
    assert run_cli("sync", "--to", "swanlab", "--host", host, "--if-online", root=root).returncode == 0
    for f in root.rglob("*.json"):
        assert secret not in f.read_text()


def test_bad_mode_is_a_usage_error(root):
    trackstore.init("m", root=root).finish()
    res = run_cli("sync", "--to", "swanlab", "--mode", "sideways", root=root)
    assert res.returncode == 2 and "--mode" in res.stderr


def test_count_points_reads_empty_and_cut_files(tmp_path):
    """A killed session can leave a 0-byte or cut file: the reader yields what is whole."""
    exp = "0" * 21
    d = tmp_path / f"run-20260101_000000-{exp}"
    d.mkdir()
    (d / f"run-{exp}.swanlab").write_bytes(b"")
    assert count_points(tmp_path, exp) == {"metrics": 0, "samples": 0, "histograms": 0, "traces": 0, "images": 0}
    (d / f"run-{exp}.swanlab").write_bytes(b":SWL\xd6\xe1\x02" + b"\x01\x02\x03")
    assert count_points(tmp_path, exp)["metrics"] == 0


def test_steps_outside_swanlab_range_are_reported(root, logdir):
    from trackstore.sync.swanlab import SKIP_STEP

    run = trackstore.init("range", root=root)
    run.log({"x": 1.0}, step=-1)
    run.log({"x": 2.0}, step=2 ** 49)
    run.log({"x": 3.0}, step=0)
    run.finish()
    res = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), "--dry-run",
                  "--format", "json", root=root)
    assert json.loads(res.stdout)["runs"][0]["skipped_by_reason"] == {SKIP_STEP: 2}
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_STEP: 2} and out["verify_ok"] is True
    assert [(k, s, v) for k, s, v, _t in scalars(logdir, run)] == [("x", 0, 3.0)]


def test_live_trajectory_waits_and_late_samples_are_reported(root, logdir):
    run = trackstore.init("live", root=root)
    run.log_samples([{"input": "q", "output": "a"}], step=0)
    tr = run.trace(step=1, sample_index=0).__enter__()
    span = tr.span("assistant", kind="llm", inputs={"q": "hi"}).__enter__()
    from trackstore.records.trace import checkpoint_open_spans

    assert checkpoint_open_spans(run) == 2  # the open episode and turn, as ``unfinished`` rows
    run.flush()
    out, _ = sync(root, logdir)
    assert out["pending"]["spans"] > 0 and out["sent"].get("spans", 0) == 0  # deferred, not sent half-done
    assert not [r for _d, r in records(logdir, run, "media") if r.media.key == "trajectories"]
    span.set_outputs("hello")
    span.__exit__(None, None, None)
    tr.__exit__(None, None, None)
    run.log_samples([{"input": "q2", "output": "a2"}], step=0)  # step 0 of samples/val is already at SwanLab
    run.finish()
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_OLD: 1} and out["verify_ok"] is True
    traj = [r.media for _d, r in records(logdir, run, "media") if r.media.key == "trajectories"]
    assert len(traj) == 1 and int(traj[0].step) == 1
    assert [it.caption for it in traj[0].value.items][0].startswith("▸ ")  # one trajectory: one header row
    assert [it.caption.startswith("▸ ") for it in traj[0].value.items].count(True) == 1
    session = sorted(logdir.glob("run-*"))[-1]
    text = "\n".join((session / "media" / "text" / it.filename).read_text() for it in traj[0].value.items)
    assert "llm ok" in text and "unfinished" not in text and "outputs: hello" in text


def test_cloud_path_reaches_the_host_and_reports_a_rejected_login(root, monkeypatch):
    """The online code path for real: init logs in against --host; a server that is not
    SwanLab (404 everywhere) is a permanent, readable error; the key is never printed."""
    import http.server
    import threading

    class NotSwanlab(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotSwanlab)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = "sk-swanlab-test-secret-0123456789"
    monkeypatch.setenv("SWANLAB_API_KEY", secret)
    try:
        run = trackstore.init("cloud", root=root)
        run.log({"x": 1.0}, step=0)
        run.finish()
        res = run_cli("sync", "--to", "swanlab", "--host", f"http://127.0.0.1:{server.server_port}", "--format", "json",
                      root=root, timeout=120)
    finally:
        server.shutdown()
    assert res.returncode == 8, res.stdout + res.stderr
    out = json.loads(res.stdout)["runs"][0]
    assert out["error"].startswith("swanlab init:") and "API key" in out["error"]
    assert secret not in res.stdout + res.stderr
    import os
    from pathlib import Path

    for base in (root, Path(os.environ["HOME"])):  # the cursor, SwanLab's files, ~/.swanlab
        for f in base.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f


def test_in_doubt_batch_is_counted_like_the_interrupted_send(root, logdir):
    """A batch whose send reached SwanLab but whose acknowledgement was never recorded (the
    state a kill between the two leaves): the next sync sends nothing twice and counts the
    batch's second values and late values exactly once."""
    from trackstore.store.ledger import iter_cursors, save_cursor
    from trackstore.store.ranges import RangeSet

    run = trackstore.init("doubt", root=root)
    run.log({"a": 1.0, "b": 1.0}, step=1)
    run.flush()
    sync(root, logdir)
    run.log({"a": 3.0}, step=1)            # late: (a, 1) is already at SwanLab
    run.log({"a": 5.0, "b": 5.0}, step=5)
    run.log({"a": 6.0}, step=5)            # a second value for (a, 5)
    run.finish()
    out, _ = sync(root, logdir)
    assert out["skipped_by_reason"] == {SKIP_OLD: 1, SKIP_SECOND: 1}
    # rewind the cursor to "the last batch is in doubt": not acknowledged, its skips not counted
    cursor = next(iter_cursors(root, target="swanlab"))
    import pyarrow.parquet as pq

    rows = pq.read_table(run.dir / "metrics").to_pylist()
    batch = [r for r in rows if not (r["step"] == 1 and r["value"] == 1.0)]
    doubt = RangeSet()
    for r in batch:
        doubt.add_range(r["writer"], r["seq"], r["seq"])
    first = RangeSet()
    for r in rows:
        if r not in batch:
            first.add_range(r["writer"], r["seq"], r["seq"])
    cursor.acked["metrics"] = first
    cursor.skipped["metrics"] = 0
    cursor.in_doubt = {"kind": "metrics", "rows": doubt.to_json(), "batch_id": "x", "since": "2026-01-01T00:00:00Z"}
    cursor.synced_status = None
    cursor.remote["key_max"] = {"a": 1, "b": 1}
    save_cursor(root, cursor)
    before = scalars(logdir, run)
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_OLD: 1, SKIP_SECOND: 1} and out["verify_ok"] is True
    assert scalars(logdir, run) == before  # nothing logged twice
    assert {(k, s): v for k, s, v, _t in before} == {("a", 1): 1.0, ("b", 1): 1.0, ("a", 5): 5.0, ("b", 5): 5.0}


def test_values_swanlab_failed_to_write_are_detected_and_resent(root, logdir):
    """SwanLab's writer thread swallows I/O errors (a full disk) and its ``finish`` still
    returns: the adapter reads the closed session file back, fails the run instead of
    acknowledging lost values, and the next sync re-sends exactly those."""
    run = trackstore.init("diskfull", root=root)
    for s in range(300):
        run.log({"a": float(s), "b": -float(s)}, step=s)
    run.finish()
    code = ("import sys\nimport swanlab.sdk.internal.core_python.store as st\n"
            "orig, n = st.DataStoreWriter.write, [0]\n"
            "def write(self, data):\n"
            "    n[0] += 1\n"
            "    if 100 < n[0] < 160:\n"
            "        raise OSError(28, 'No space left on device')\n"
            "    return orig(self, data)\n"
            "st.DataStoreWriter.write = write\n"
            "from trackstore.cli.main import main\n"
            f"sys.exit(main(['sync', '--to', 'swanlab', '--mode', 'offline', '--logdir', {str(logdir)!r}, "
            f"'--format', 'json', '--root', {str(root)!r}]))\n")
    p = python_child(code)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 8, stdout + stderr
    out = json.loads(stdout)["runs"][0]
    assert "SwanLab wrote" in out["error"] and "re-sends" in out["error"]
    assert len(scalars(logdir, run)) < 600
    out, _ = sync(root, logdir, "--verify")
    assert out["verify_ok"] is True
    assert scalars(logdir, run) == local_points(run)


def test_sigkill_during_samples_ends_exact_for_every_kind(root, logdir):
    run = trackstore.init("killmix", root=root)
    for s in range(400):
        run.log({"a": float(s), "h": trackstore.Histogram([float(s), s + 1.0, s + 2.0], bins=2)}, step=s)
        run.log_samples([{"input": f"q{s}-{i}", "output": "a", "score": 0.5} for i in range(3)], step=s)
    run.finish()
    p = spawn_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", logdir, "--batch-size", "16",
                  "--root", root)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        acked = 0
        for f in root.glob("_sync/*/project=killmix/run=*.json"):
            try:
                c = json.loads(f.read_text())
            except ValueError:
                continue
            acked = sum(hi - lo + 1 for rs in c["acked"].get("samples", {}).values() for lo, hi in rs)
        if acked >= 150:
            break
        time.sleep(0.005)
    assert p.poll() is None, "the sync finished before it could be killed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    out, _ = sync(root, logdir, "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}
    assert out["verified"] == {"metrics": 400, "samples": 1200, "histograms": 400, "traces": 0, "images": 0}
    media = [(r.media.key, int(r.media.step)) for _d, r in records(logdir, run, "media")]
    assert len(media) == len(set(media)) == 800  # one chart and one sample list per step, never twice


def test_keys_are_mapped_as_swanlab_stores_them(root, logdir):
    long_key = "x" * 600
    run = trackstore.init("keys", root=root)
    run.log({"./loss/": 1.0, long_key: 2.0, "ok": 3.0}, step=0)
    run.finish()
    res = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), "--dry-run",
                  "--format", "json", root=root)
    from trackstore.sync.keys import swanlab_key

    reasons = json.loads(res.stdout)["runs"][0]["skipped_by_reason"]
    for k in ("./loss/", long_key):  # renamed, named in --dry-run and in the summary
        assert f"key {k!r} sent as {swanlab_key(k)!r} (SwanLab's key rules; see docs/sync.md)" in reasons
    out, _ = sync(root, logdir, "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == reasons
    assert sorted(k for k, _s, _v, _t in scalars(logdir, run)) == sorted([swanlab_key("./loss/"), swanlab_key(long_key), "ok"])
    assert swanlab_key("./loss/").startswith("loss__") and len(swanlab_key(long_key)) == 512


def test_a_key_used_for_a_scalar_and_a_chart_is_reported(root, logdir):
    """SwanLab drops a value whose type differs from its key's column without a word; the
    adapter reports it instead of failing the run on every sync."""
    from trackstore.sync.swanlab import SKIP_TYPE

    run = trackstore.init("types", root=root)
    run.log({"h": 1.0}, step=1)
    run.log({"h": trackstore.Histogram([1.0, 2.0, 3.0], bins=2)}, step=5)
    run.finish()
    out, _ = sync(root, logdir, "--verify")
    assert out["skipped_by_reason"] == {SKIP_TYPE: 1} and out["verify_ok"] is True
    out, _ = sync(root, logdir, "--all")
    assert out["error"] is None


@pytest.mark.parametrize("mode", ["offline", "local"])
def test_mode_and_log_dir_from_the_environment_only(root, tmp_path, monkeypatch, mode):
    """SWANLAB_MODE and SWANLAB_LOG_DIR alone (no --mode, no --logdir) place the run folders,
    and the experiment lands in the trackstore project."""
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    envdir = tmp_path / "from-env"
    monkeypatch.setenv("SWANLAB_MODE", mode)
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(envdir))
    run = trackstore.init("envproj", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish()
    res = run_cli("sync", "--to", "swanlab", "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert report["destination"] == f"{mode}:{envdir}"
    exp = experiment_id("envproj", run.id)
    [folder] = run_logdir(envdir, run).glob(f"run-*-{exp}")
    assert (folder / f"run-{exp}.swanlab").is_file()
    assert not (root / "_swanlab").exists()  # not the default place
    [start] = [r.start for _d, r in records(envdir, run, "start")]
    assert (start.project, start.id) == ("envproj", exp)
    assert [(k, s, v) for k, s, v, _t in scalars(envdir, run)] == [("x", 0, 1.0)]


def test_an_older_swanlab_client_is_refused_with_a_clear_message(root, logdir, tmp_path):
    trackstore.init("old", root=root).finish()
    env = fake_old_client(tmp_path, "swanlab", "0.6.0")
    for extra in ((), ("--dry-run",)):
        res = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), *extra, root=root,
                      env=env)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "swanlab 0.6.0 is installed" in res.stderr and "swanlab>=0.10.3" in res.stderr
        assert "Traceback" not in res.stderr
    assert not logdir.exists()  # nothing was written
