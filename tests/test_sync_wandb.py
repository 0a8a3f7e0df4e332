"""``trackstore sync --to wandb`` / ``--to wandb-offline`` with the real wandb client in offline
mode, read back with wandb's own reader (``wandb leet inspect --json``, via WandbHarness): every
history row with its step, values and ``_timestamp``; config, summary, tables, histograms,
artifacts and the exit state; resume as one run id; late points counted; live runs; an
interrupted batch reconciled against the transaction logs; quiet output, no secret printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trackstore
from tests.helpers import fake_old_client, rewrite_cursor, run_cli
from tests.sync_harness import WandbHarness
from trackstore.sync.wandb import LATE, MAX_TABLE_ROWS, OVER_TABLE, SECOND, rebin, sample_down, wandb_key, wandb_run_id


def _sync(root, *extra, target="wandb"):
    res = run_cli("sync", "--to", target, *extra, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["runs"]


def _stored(run, kind):
    from trackstore.read.reader import read_kind

    return read_kind(run.paths, kind).to_pylist()


def _full_run(root, tmp_path):
    run = trackstore.init("proj", name="full", config={"lr": 0.5, "model": {"layers": 4}}, tags=["rl", "grpo"],
                          notes="a note", group="g1", job_type="train", root=root)
    for s in range(6):
        run.log({"loss": 1.0 / (s + 1), "reward/mean": s * 0.5}, step=s)
    run.log({"hist": trackstore.Histogram(counts=[1, 5, 3], edges=[0.0, 1.0, 2.0, 3.0])}, step=2)
    run.log_samples([{"input": f"q{i}", "output": f"a{i}", "score": float(i)} for i in range(3)], step=3)
    with run.trace(step=4, sample_index=0, rollout_n=0) as tr:
        with tr.span("assistant", kind="llm", inputs={"role": "user", "content": "hi"}) as sp:
            sp.set_outputs({"role": "assistant", "content": "hello"})
        tr.set_reward(1.0)
    ckpt = tmp_path / "ckpt.bin"
    ckpt.write_bytes(b"weights" * 100)
    run.log_artifact(ckpt, name="policy", type="model", aliases=["best"], metadata={"epoch": 1})
    run.summary["best_reward"] = 2.5
    run.finish()
    return run


def test_wandb_id_is_deterministic_and_valid():
    a = wandb_run_id("p", "20260101-000000000-abc")
    assert a == wandb_run_id("p", "20260101-000000000-abc") != wandb_run_id("q", "20260101-000000000-abc")
    assert a.startswith("ts") and len(a) == 18 and not set(a) & set(":;,#?/' ")
    assert wandb_key("_step") == "trackstore/_step" and wandb_key("loss") == "loss"


def test_rebin_and_sample_down_rules():
    counts, edges = rebin([1.0] * 1000, [float(i) for i in range(1001)])
    assert len(counts) <= 512 and len(edges) == len(counts) + 1 and sum(counts) == 1000
    assert edges[0] == 0.0 and edges[-1] == 1000.0
    rows = [{"sample_index": i, "writer": "w", "seq": i} for i in range(25000)]
    kept = sample_down(rows)
    assert len(kept) == MAX_TABLE_ROWS and kept == sample_down(list(reversed(rows)))
    assert kept[0]["sample_index"] == 0 and kept[-1]["sample_index"] > 24990


def test_full_mapping_read_back(wb, root, tmp_path):
    run = _full_run(root, tmp_path)
    out = _sync(root, "--verify")[0]
    assert out["result"] == "ok" and out["verify_ok"] is True, out
    assert out["sent"] == {"metrics": 12, "histograms": 1, "samples": 3, "spans": 2, "artifacts": 1, "images": 0}
    assert out["skipped_by_reason"] == {}

    history = {r["step"]: r for r in wb.history(run.project, run.id)}
    assert sorted(history) == list(range(6))  # one row per step, in order
    for r in _stored(run, "metrics"):
        row = history[r["step"]]
        assert row[r["key"]] == r["value"]
        assert row["_timestamp"] == r["ts"].timestamp()  # the original wall time, exactly
    assert history[2]["hist"]["_type"] == "histogram"
    assert history[2]["hist"]["values"] == [1, 5, 3] and history[2]["hist"]["bins"] == [0, 1, 2, 3]
    table = history[3]["samples/val"]
    assert table["_type"] == "table-file"
    data = wb.table(run.project, run.id, table)
    assert data["columns"][:4] == ["sample_index", "input", "output", "score"]
    assert [row[1:4] for row in data["data"]] == [["q0", "a0", 0.0], ["q1", "a1", 1.0], ["q2", "a2", 2.0]]

    recs = [r for recs in wb.records(run.project, run.id) for r in recs]
    # no number in the history but the user's metrics: wandb writes a table's entry with its
    # ncols/nrows, which `wandb leet` and history exports show as metrics samples/val.ncols...
    # (the fields leet knows as a media value's own: core/internal/leet historyMediaField)
    media_fields = {"_type", "path", "caption", "format", "width", "height", "sha256", "size"}
    charted = set()
    for r in recs:
        items = r["history"]["item"] if r["type"] == "history" else (r.get("summary") or {}).get("update") or {}
        assert not [k for k in items if k.endswith((".ncols", ".nrows"))], items
        for key, value in items.items() if r["type"] == "history" else ():
            media, _, field = key.rpartition(".")
            if not (media in ("samples/val", "hist") and field in media_fields) and not key.startswith("_") \
                    and isinstance(value, (int, float)):
                charted.add(key)
    assert charted == {"loss", "reward/mean"}, charted
    first_run = next(r["run"] for r in recs if r["type"] == "run")
    assert first_run["run_id"] == wandb_run_id(run.project, run.id) and first_run["project"] == "proj"
    assert first_run["display_name"] == "full" and first_run["notes"] == "a note"
    assert first_run["run_group"] == "g1" and first_run["job_type"] == "train" and first_run["tags"] == ["rl", "grpo"]
    assert first_run["resume"] is True
    config: dict = {}
    for r in recs:
        if r["type"] == "config":
            config.update(r["config"].get("update") or {})
    assert config["lr"] == 0.5 and config["model"] == {"layers": 4}

    code, summary = wb.final(run.project, run.id)
    assert code == 0 and wb.status(run.project, run.id) == "finished"
    assert summary["best_reward"] == 2.5 and summary["trackstore/status"] == "finished"
    assert summary["trackstore/run_id"] == run.id and summary["trackstore/created_at"]

    arts = [r["artifact"] for r in recs if r["type"] == "artifact"]
    policy = next(a for a in arts if a["type"] == "model")
    step = _stored(run, "artifacts")[0]["step"]
    assert policy["name"] == "policy" and set(policy["aliases"]) >= {"best", f"step-{step}"}
    meta = json.loads(policy["metadata"])
    assert meta["epoch"] == 1 and meta["trackstore.version"] == _stored(run, "artifacts")[0]["version"]
    traj = next(a for a in arts if a["type"] == "trajectories")
    assert json.loads(traj["metadata"])["traces"] == 1

    # nothing new: a second sync is a no-op and writes no further session folder
    again = _sync(root)[0]
    assert again["result"] == "up to date"
    assert len(wb.run_dirs(run.project, run.id)) == 1


@pytest.mark.parametrize("status,exit_code,expected", [("failed", 3, 3), ("crashed", None, 1)])
def test_exit_state(wb, root, status, exit_code, expected):
    run = trackstore.init("proj", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish(exit_code=exit_code, status=status)
    _sync(root)
    code, summary = wb.final(run.project, run.id)
    assert code == expected
    assert summary["trackstore/status"] == status
    assert wb.status(run.project, run.id) == status


def test_resume_same_id_increasing_steps_and_late_points_reported(wb, root):
    run = trackstore.init("proj", root=root)
    for s in range(5):
        run.log({"a": float(s)}, step=s)
    run.flush()
    first = _sync(root)[0]
    assert first["sent"]["metrics"] == 4  # the newest step of a live run waits (it may still grow)
    assert first["pending"]["metrics"] == 5
    for s in range(5, 10):
        run.log({"a": float(s)}, step=s)
    run.log({"late": 1.0}, step=2)   # a value for a step wandb has already committed
    run.finish()
    second = _sync(root)[0]
    assert second["skipped_by_reason"] == {LATE: 1}
    assert second["sent"]["metrics"] == 6  # step 4 (held back before) and 5..9

    dirs = wb.run_dirs(run.project, run.id)
    assert len(dirs) == 2 and wb.remote_run_count(run.project, run.id) == 1  # two sessions, one run id
    steps = [r["step"] for r in wb.history(run.project, run.id)]
    assert steps == list(range(10))  # strictly increasing across both sessions, nothing twice
    got = [p for p in wb.metrics(run.project, run.id)]
    assert [(k, s, v) for k, s, v, _ in got] == [("a", s, float(s)) for s in range(10)]
    assert wb.status(run.project, run.id) == "finished"
    res = run_cli("sync", "--to", "wandb", "--all", root=root)  # the table output names the reason too
    assert res.returncode == 0, res.stdout + res.stderr


def test_second_value_for_a_key_at_one_step_is_reported(wb, root):
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    run.log({"a": 2.0}, step=0)
    run.log({"a": 3.0}, step=1)
    run.finish()
    out = _sync(root)[0]
    assert out["skipped_by_reason"] == {SECOND: 1}
    assert [(k, s, v) for k, s, v, _ in wb.metrics(run.project, run.id)] == [("a", 0, 2.0), ("a", 1, 3.0)]


def test_step_kinds_share_the_step_axis(wb, root):
    """Histograms and samples at steps before the last metric step are not lost: a metrics batch
    carries them, and their own turn acknowledges them without logging them twice."""
    run = trackstore.init("proj", root=root)
    for s in range(30):
        run.log({"m": float(s)}, step=s)
        if s % 7 == 0:
            run.log({"h": trackstore.Histogram([float(s), s + 1.0], bins=2)}, step=s)
            run.log_samples([{"input": "q", "output": f"a{s}"}], step=s)
    run.log_samples([{"input": "q", "output": "after"}], step=40)  # beyond every metric step
    run.finish()
    out = _sync(root, "--batch-size", "4", "--verify")[0]
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}, out
    assert out["sent"] == {"metrics": 30, "histograms": 5, "samples": 6, "images": 0}
    history = wb.history(run.project, run.id)
    assert [r["step"] for r in history] == list(range(30)) + [40]
    by_step = {r["step"]: r for r in history}
    for s in (0, 7, 14, 21, 28):
        assert by_step[s]["h"]["_type"] == "histogram"
        assert len(wb.table(run.project, run.id, by_step[s]["samples/val"])["data"]) == 1
        assert by_step[s]["m"] == float(s)
    assert wb.table(run.project, run.id, by_step[40]["samples/val"])["data"][0][2] == "after"


def test_samples_over_the_table_limit_are_sampled_down_and_reported(wb, root):
    run = trackstore.init("proj", root=root)
    run.log_samples([{"input": "q", "output": str(i)} for i in range(MAX_TABLE_ROWS + 7)], step=0)
    run.finish()
    plan = run_cli("sync", "--to", "wandb", "--dry-run", "--format", "json", root=root)
    assert json.loads(plan.stdout)["runs"][0]["skipped_by_reason"] == {OVER_TABLE: 7}
    out = _sync(root)[0]
    assert out["skipped_by_reason"] == {OVER_TABLE: 7}
    [row] = wb.history(run.project, run.id)
    assert len(wb.table(run.project, run.id, row["samples/val"])["data"]) == MAX_TABLE_ROWS


def _cursor_files(root):
    return list((root / "_sync").rglob("run=*.json"))


@pytest.mark.parametrize("first", [8, 6], ids=["marker", "steps-and-keys"])
def test_interrupted_batch_already_in_the_log_is_not_resent(wb, root, first):
    """The process died after wandb-core wrote the batch but before the cursor recorded it.
    Steps 8..11 are exactly the last batch (its marker is in the log); 6..11 is not a batch
    that was sent, so the history's steps and keys decide."""
    from trackstore.store.ranges import RangeSet

    run = trackstore.init("proj", root=root)
    for s in range(12):
        run.log({"a": float(s), "b": 1.0}, step=s)
    run.finish()
    _sync(root, "--batch-size", "8")
    [path] = _cursor_files(root)
    cur = json.loads(path.read_text())
    rows = _stored(run, "metrics")
    last = [r for r in rows if r["step"] >= first]
    doubt, acked = RangeSet(), RangeSet()
    for r in rows:
        (doubt if r["step"] >= first else acked).add_seqs(r["writer"], [r["seq"]])
    cur["acked"]["metrics"] = acked.to_json()
    cur["in_doubt"] = {"kind": "metrics", "rows": doubt.to_json(), "batch_id": "x", "since": "now"}
    cur["remote"]["last_step"] = first - 1
    cur["synced_status"] = None
    rewrite_cursor(path, cur)
    out = _sync(root)[0]
    assert out["reconciled"] == len(last) and out["sent"].get("metrics", 0) == 0, out
    steps = [r["step"] for r in wb.history(run.project, run.id)]
    assert steps == list(range(12))
    assert len(wb.metrics(run.project, run.id)) == 24


def test_interrupted_batch_missing_from_the_log_is_sent_once(wb, root):
    """The process died before wandb-core wrote anything of the batch."""
    from trackstore.store.ranges import RangeSet

    run = trackstore.init("proj", root=root)
    for s in range(6):
        run.log({"a": float(s)}, step=s)
    run.flush()
    _sync(root)                                   # steps 0..4 (5 is the live run's newest)
    for s in range(6, 10):
        run.log({"a": float(s)}, step=s)
    run.finish()
    [path] = _cursor_files(root)
    cur = json.loads(path.read_text())
    doubt = RangeSet()
    for r in _stored(run, "metrics"):
        if r["step"] >= 5:
            doubt.add_seqs(r["writer"], [r["seq"]])
    cur["in_doubt"] = {"kind": "metrics", "rows": doubt.to_json(), "batch_id": "x", "since": "now"}
    rewrite_cursor(path, cur)
    out = _sync(root)[0]
    assert out["reconciled"] == 0 and out["sent"]["metrics"] == 5, out
    assert [(s, v) for _, s, v, _ in wb.metrics(run.project, run.id)] == [(s, float(s)) for s in range(10)]


def test_wandb_offline_target_writes_a_standard_offline_run(root, tmp_path):
    logdir = tmp_path / "for-upload"
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    res = run_cli("sync", "--to", "wandb-offline", "--logdir", str(logdir), root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    rid = wandb_run_id(run.project, run.id)
    [folder] = [d for d in (logdir / "wandb").glob(f"offline-run-*-{rid}")]
    assert (folder / f"run-{rid}.wandb").is_file() and (folder / "files").is_dir()
    import os
    import subprocess
    import sys

    # wandb's own uploader recognises it (dry run: nothing is sent; the base URL is a dead port)
    env = {**os.environ, "WANDB_BASE_URL": "http://127.0.0.1:9"}
    dry = subprocess.run([str(Path(sys.executable).with_name("wandb")), "sync", "--dry-run", str(folder)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert "Would sync 1 run" in dry.stdout + dry.stderr and f"run-{rid}.wandb" in dry.stdout + dry.stderr
    h = WandbHarness(tmp_path, None)
    h.dir = logdir
    assert [(k, s, v) for k, s, v, _ in h.metrics(run.project, run.id)] == [("a", 0, 1.0)]


def test_output_is_quiet_and_the_api_key_is_never_printed_or_stored(wb, root, monkeypatch):
    secret = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    res = run_cli("sync", "--to", "wandb", root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    text = res.stdout + res.stderr
    assert "wandb:" not in text and secret not in text
    assert "synced to wandb" in res.stdout
    for p in (root / "_sync").rglob("*"):
        if p.is_file():
            assert secret not in p.read_text(errors="replace")


def test_unknown_mode_is_a_clear_error(root):
    trackstore.init("proj", root=root).finish()
    res = run_cli("sync", "--to", "wandb", "--mode", "shared", root=root)
    assert res.returncode == 2 and "'shared' is not one of" in res.stderr
    assert "Traceback" not in res.stderr
    # a mode that exists, but not for wandb: the message names what wandb takes
    res = run_cli("sync", "--to", "wandb", "--mode", "local", root=root)
    assert res.returncode == 2 and "sync target 'wandb' takes online, offline" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_wandb_dir_holds_no_store_paths(wb, root):
    """The client's own directory is where the run folders go (WANDB_DIR), not the store."""
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    _sync(root)
    assert not (Path(root) / "_wandb").exists()
    assert wb.run_dirs(run.project, run.id)


class _RecordingProxy:
    """A tiny HTTP proxy on 127.0.0.1 that answers everything itself and records what it saw
    (CONNECT tunnels are refused, so nothing leaves the machine)."""

    def __init__(self):
        import http.server
        import threading

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_POST = do_GET

            def do_CONNECT(self):
                seen.append(f"CONNECT {self.path}")
                self.send_response(502)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_online_mode_goes_through_the_proxy_and_needs_a_key(root):
    """The online path is the same code: here it reaches the (fake) server through --proxy, and
    without WANDB_API_KEY the client refuses with a clear, permanent error (exit 8)."""
    trackstore.init("proj", root=root).finish()
    proxy = _RecordingProxy()
    try:
        res = run_cli("sync", "--to", "wandb", "--uri", "http://wandb.example.invalid", "--proxy", proxy.url,
                      "--format", "json", root=root, timeout=300)
    finally:
        proxy.close()
    assert "GET http://wandb.example.invalid/healthz" in proxy.seen
    assert res.returncode == 8, res.stdout + res.stderr
    out = json.loads(res.stdout)["runs"][0]
    assert "API key" in out["error"] and "Traceback" not in res.stderr
    assert proxy.url not in res.stdout + res.stderr  # --proxy is never printed


def test_online_unreachable_exits_7_or_0_with_if_online(root):
    import socket

    trackstore.init("proj", root=root).finish()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    res = run_cli("sync", "--to", "wandb", "--uri", url, root=root)
    assert res.returncode == 7 and "unreachable" in res.stderr + res.stdout
    assert run_cli("sync", "--to", "wandb", "--uri", url, "--if-online", root=root).returncode == 0


def test_interrupted_step_batch_is_reconciled(wb, root):
    """A step-merged batch (metrics and histograms of steps 8..11) was written, then the sync
    died before recording it: every row of it is recognised as delivered, none as late."""
    from trackstore.store.ranges import RangeSet

    run = trackstore.init("proj", root=root)
    for s in range(12):
        run.log({"a": float(s)}, step=s)
        run.log({"h": trackstore.Histogram([float(s)], bins=1)}, step=s)
    run.finish()
    _sync(root, "--batch-size", "8")
    [path] = _cursor_files(root)
    cur = json.loads(path.read_text())
    sets = {}
    for kind in ("metrics", "histograms"):
        old, new = RangeSet(), RangeSet()
        for r in _stored(run, kind):
            (new if r["step"] >= 8 else old).add_seqs(r["writer"], [r["seq"]])
        sets[kind] = (old, new)
    cur["acked"] = {k: sets[k][0].to_json() for k in sets}
    cur["in_doubt"] = {"kind": "steps", "rows": {k: sets[k][1].to_json() for k in sets}, "batch_id": "x",
                       "since": "now"}
    cur["remote"]["last_step"] = 7
    cur["synced_status"] = None
    rewrite_cursor(path, cur)
    out = _sync(root, "--verify")[0]
    assert out["skipped_by_reason"] == {} and out["verify_ok"] is True, out
    assert out["reconciled"] == 8
    history = wb.history(run.project, run.id)
    assert [r["step"] for r in history] == list(range(12))
    assert all(r["h"]["_type"] == "histogram" for r in history)


def test_batch_marker_is_not_left_in_the_summary(wb, root):
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    _sync(root)
    recs = [r for recs in wb.records(run.project, run.id) for r in recs if r["type"] == "summary"]
    assert any("trackstore/batch" in (r["summary"].get("update") or {}) for r in recs)  # it was the barrier
    last = [r for r in recs if "remove" in r["summary"]]
    assert last and "trackstore/batch" in json.dumps(last[-1]["summary"]["remove"])


def test_transaction_log_reader_is_incremental_and_stops_at_a_torn_tail(wb, root, tmp_path):
    """The barrier's reader: what wandb's own reader sees, never a half-written record."""
    from trackstore.sync.wandb_log import LogReader

    run = trackstore.init("proj", root=root)
    for s in range(400):  # > 32 KiB: records cross block boundaries
        run.log({f"k{i}": float(s * i) for i in range(8)}, step=s)
    run.finish()
    _sync(root)
    [folder] = wb.run_dirs(run.project, run.id)
    [log] = folder.glob("run-*.wandb")
    data = log.read_bytes()
    assert len(data) > 2 * 32768
    n_leet = sum(len(recs) for recs in wb.records(run.project, run.id))
    assert sum(1 for _ in LogReader(log).records()) == n_leet

    part = tmp_path / "growing.wandb"
    part.write_bytes(data[: len(data) // 2 + 3])          # cut inside a record
    reader = LogReader(part)
    first = [r.num for r in reader.records()]
    assert first and first == list(range(first[0], first[0] + len(first)))
    part.write_bytes(data)                                 # the rest arrives
    rest = [r.num for r in reader.records()]
    assert first + rest == [r.num for r in LogReader(log).records()]
    assert sum(1 for _ in reader.records()) == 0           # nothing new: nothing returned


@pytest.mark.parametrize("how", ["env", "flag"])
def test_entity_from_env_or_flag_and_remote_project(wb, root, monkeypatch, how):
    """``WANDB_ENTITY`` places the run (``--entity`` wins over it) and ``--remote-project``
    renames the project; read back from the run and artifact records wandb wrote."""
    monkeypatch.setenv("WANDB_ENTITY", "team-from-env")
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    ckpt = Path(root).parent / "w.bin"
    ckpt.write_bytes(b"w")
    run.log_artifact(ckpt, name="w")
    run.finish()
    extra = ["--entity", "team-from-flag"] if how == "flag" else []
    res = run_cli("sync", "--to", "wandb", "--remote-project", "replays", *extra, "--format", "json", root=root,
                  timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    entity = "team-from-flag" if how == "flag" else "team-from-env"
    assert json.loads(res.stdout)["destination"].endswith(f" {entity}/replays")
    [rec] = wb.run_records(run.project, run.id)
    assert (rec["entity"], rec["project"]) == (entity, "replays")
    assert rec["run_id"] == wandb_run_id(run.project, run.id)  # the identity is the trackstore run's
    [art] = wb.artifacts(run.project, run.id)
    assert (art["entity"], art["project"]) == (entity, "replays")
    assert [(k, s, v) for k, s, v, _ in wb.metrics(run.project, run.id)] == [("a", 0, 1.0)]


def test_trajectories_table_holds_one_row_per_trajectory_with_its_turns(wb, root):
    """The trajectories artifact's table, read from the file wandb staged for it: one row per
    trajectory with the root's fields, and every span ("turn") in ``turns``."""
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    for i in range(3):
        with run.trace(step=i, sample_index=i, rollout_n=0) as tr:
            with tr.span("assistant", kind="llm", inputs={"role": "user", "content": f"q{i}"}) as sp:
                with tr.span("calculator", kind="tool", inputs={"expr": "6*7"}) as tool:
                    tool.set_outputs(42)
                sp.set_outputs({"role": "assistant", "content": f"a{i}"})
            tr.set_reward(float(i))
    run.finish()
    out = _sync(root)[0]
    assert out["sent"]["spans"] == 9 and out["skipped_by_reason"] == {}, out
    [art] = [a for a in wb.artifacts(run.project, run.id) if a["type"] == "trajectories"]
    assert art["name"] == f"trajectories-{wandb_run_id(run.project, run.id)}" and art["metadata"]["traces"] == 3
    table = json.loads(wb.artifact_file(art, "trajectories.table.json").read_text())
    cols = table["columns"]
    assert cols == ["trace_id", "step", "sample_index", "rollout_n", "validate", "reward", "name", "status",
                    "start_time", "duration_s", "n_spans", "turns"]
    rows = [dict(zip(cols, r)) for r in table["data"]]
    spans = _stored(run, "spans")
    assert len(rows) == 3 and {r["trace_id"] for r in rows} == {s["trace_id"] for s in spans}
    for row in rows:
        mine = {s["span_id"]: s for s in spans if s["trace_id"] == row["trace_id"]}
        root_span = next(s for s in mine.values() if s["parent_span_id"] is None)
        i = root_span["step"]
        assert (row["step"], row["sample_index"], row["rollout_n"], row["reward"]) == (i, i, 0, float(i))
        assert (row["name"], row["status"], row["n_spans"]) == ("episode", "ok", 3)
        assert row["start_time"] == root_span["start_ns"] / 1e9
        assert row["duration_s"] == (root_span["end_ns"] - root_span["start_ns"]) / 1e9
        turns = {t["name"]: t for t in json.loads(row["turns"])}
        assert set(turns) == {"episode", "assistant", "calculator"}
        assert {t["span_id"] for t in turns.values()} == set(mine)
        assert turns["assistant"]["parent_span_id"] == turns["episode"]["span_id"]
        assert turns["calculator"]["parent_span_id"] == turns["assistant"]["span_id"]
        assert turns["assistant"]["kind"] == "llm" and turns["calculator"]["kind"] == "tool"
        assert turns["assistant"]["inputs"] == {"role": "user", "content": f"q{i}"}
        assert turns["assistant"]["outputs"] == {"role": "assistant", "content": f"a{i}"}
        assert turns["calculator"]["outputs"] == 42 and turns["calculator"]["status"] == "ok"
    # the same artifact's "turns" table: one readable row per span, nested by depth
    turns_table = json.loads(wb.artifact_file(art, "turns.table.json").read_text())
    tcols = turns_table["columns"]
    trows = [dict(zip(tcols, r)) for r in turns_table["data"]]
    assert len(trows) == 9 and tcols[:7] == ["trace_id", "step", "sample_index", "rollout_n", "turn", "depth", "span"]
    first = [r for r in trows if r["step"] == 0]
    assert [(r["turn"], r["depth"], r["span"]) for r in first] == [(0, 0, "episode"), (1, 1, "└ assistant"),
                                                                   (2, 2, "  └ calculator")]
    assert first[1]["inputs"] == json.dumps({"role": "user", "content": "q0"}) and first[2]["outputs"] == "42"


def test_trajectory_without_a_root_span_waits_while_live_then_is_reported(wb, root):
    """A run killed mid-trajectory before its root span was ever written (no checkpoint yet):
    while the run is live the trajectory waits (the root may still come); once the run has
    ended it is reported as skipped, not left pending on every sync for ever."""
    from tests.helpers import start_run_with_an_orphan_span
    from trackstore.sync.trajectories import NO_ROOT_SPAN as NO_ROOT

    p, run_id = start_run_with_an_orphan_span(root, metrics=True)
    try:
        live = _sync(root)[0]
        assert live["status"] == "running"
        assert live["sent"]["spans"] == 2 and live["skipped_by_reason"] == {}, live  # the complete one
        assert live["pending"]["spans"] == 3
    finally:
        p.kill()
        p.wait()
    out = _sync(root)[0]
    assert out["status"] == "crashed"
    assert out["skipped_by_reason"] == {NO_ROOT: 1}, out   # the orphan "turn" row, reported
    status = json.loads(run_cli("status", "--to", "wandb", "--format", "json", root=root).stdout)
    assert status[0]["pending_other"] == 0  # nothing left pending for ever
    again = _sync(root)[0]
    assert again["result"] == "up to date"
    arts = [a for a in wb.artifacts("proj", run_id) if a["type"] == "trajectories"]
    assert [a["metadata"]["traces"] for a in arts] == [1]


def test_an_artifact_resent_after_an_interrupted_batch_adds_no_version(wb, root, tmp_path):
    """wandb versions an artifact by its content digest. A batch whose acknowledgement was
    lost is logged again: the re-logged artifact has the same digest (so wandb keeps one
    version), distinct content has distinct digests, and a plain re-sync logs nothing."""
    run = trackstore.init("proj", root=root)
    run.log({"a": 1.0}, step=0)
    for name, content in (("policy", b"v0" * 50), ("policy", b"v1" * 50), ("data", b"d" * 10)):
        f = tmp_path / f"{name}.bin"
        f.write_bytes(content)
        run.log_artifact(f, name=name, type="model", metadata={"content": content[:2].decode()})
    run.finish()
    _sync(root)
    first = [a for a in wb.artifacts(run.project, run.id) if a["type"] == "model"]
    assert len(first) == 3 and len({a["digest"] for a in first}) == 3  # one version per content

    # the last artifact batch in doubt again (its acknowledgement lost), as a kill leaves it
    from trackstore.store.ranges import RangeSet

    [path] = _cursor_files(root)
    cur = json.loads(path.read_text())
    stored = _stored(run, "artifacts")
    doubt, acked = RangeSet(), RangeSet()
    for r in stored:
        (doubt if (r["name"], r["version"]) == ("policy", 1) else acked).add_seqs(r["writer"], [r["seq"]])
    cur["acked"]["artifacts"] = acked.to_json()
    cur["in_doubt"] = {"kind": "artifacts", "rows": doubt.to_json(), "batch_id": "x", "since": "now"}
    rewrite_cursor(path, cur)
    out = _sync(root)[0]
    assert out["result"] == "ok" and out["skipped_by_reason"] == {}, out
    arts = [a for a in wb.artifacts(run.project, run.id) if a["type"] == "model"]
    assert len(arts) == 4  # policy v1 was logged once more, in a second session
    resent = arts[-1]
    assert resent["metadata"]["trackstore.version"] == 1 and resent["name"] == "policy"
    original = next(a for a in first if a["metadata"]["trackstore.version"] == 1 and a["name"] == "policy")
    assert resent["digest"] == original["digest"]  # the same wandb version, not a new one
    assert [(e["path"], e["digest"]) for e in resent["manifest"]["contents"]] == \
           [(e["path"], e["digest"]) for e in original["manifest"]["contents"]]

    again = _sync(root, "--all")[0]  # re-check everything: no artifact is logged again
    assert again["sent"].get("artifacts", 0) == 0
    assert len([a for a in wb.artifacts(run.project, run.id) if a["type"] == "model"]) == 4


@pytest.mark.parametrize("target", ["wandb", "wandb-offline"])
def test_an_older_wandb_client_is_refused_with_a_clear_message(wb, root, tmp_path, target):
    trackstore.init("proj", root=root).finish()
    env = fake_old_client(tmp_path, "wandb", "0.19.0")
    check = run_cli("sync", "--to", target, "--dry-run", root=root, env=env)
    res = run_cli("sync", "--to", target, root=root, env=env)
    for r in (check, res):
        assert r.returncode == 2, r.stdout + r.stderr
        assert "wandb 0.19.0 is installed" in r.stderr and "wandb>=0.31" in r.stderr
        assert "Traceback" not in r.stderr
    assert not (wb.dir / "wandb").exists()  # nothing was written
