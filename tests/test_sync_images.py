"""Images replayed to real targets, read back with each target's own reader: wandb offline
(``wandb leet`` and the run folder's files: the exact bytes), MLflow (an sqlite store through
``MlflowClient``: the step-image layout, PNGs byte for byte, the stored files under
``trackstore/images/``), SwanLab offline (its session files: the pixels). Exactly once: a second
sync sends nothing, and a batch in doubt is reconciled without duplicates."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, rewrite_cursor, run_cli
from trackstore.store.ranges import RangeSet

PIL = pytest.importorskip("PIL.Image", reason="Pillow reads the images back")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pixels(data: bytes):
    return np.asarray(PIL.open(io.BytesIO(data)).convert("RGB"))


def _run_with_images(root, tmp_path):
    png, jpg = tmp_path / "red.png", tmp_path / "blue.jpg"
    PIL.new("RGB", (20, 10), (255, 0, 0)).save(png)
    PIL.new("RGB", (16, 8), (0, 0, 255)).save(jpg, quality=90)
    run = trackstore.init("imgs", root=root)
    for s in range(4):
        run.log({"loss": 1.0 / (s + 1), "val/pic": trackstore.Image(png if s % 2 else jpg, caption=f"step {s}")}, step=s)
    run.log({"grid": [trackstore.Image(np.full((4, 4, 3), 40 * i, dtype=np.uint8), caption=str(i)) for i in range(3)]},
            step=2)
    run.finish()
    return run


def _stored(run):
    from trackstore.read.reader import read_kind

    return read_kind(run.paths, "images").to_pylist()


def _cli_sync(root, *args):
    res = run_cli("sync", *args, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)["runs"][0]


def _cursor(root):
    [path] = [p for p in (root / "_sync").rglob("run=*.json") if "_gc" not in p.parts]
    return path


# ---------------------------------------------------------------------------- wandb

def test_wandb_gets_the_exact_bytes_once(wb, root, tmp_path):
    run = _run_with_images(root, tmp_path)
    out = _cli_sync(root, "--to", "wandb", "--verify")
    assert out["result"] == "ok" and out["verify_ok"] is True, out
    assert out["sent"]["images"] == 7 and out["skipped_by_reason"] == {}
    history = {r["step"]: r for r in wb.history(run.project, run.id)}
    [run_dir] = wb.run_dirs(run.project, run.id)
    by_step = {(r["step"], r["key"], r["index"]): r for r in _stored(run)}
    for s in range(4):
        entry, stored = history[s]["val/pic"], by_step[(s, "val/pic", 0)]
        assert entry["_type"] == "image-file" and entry["caption"] == f"step {s}"
        assert entry["sha256"] == stored["sha256"]
        assert (run_dir / "files" / entry["path"]).read_bytes() == (run.dir / stored["path"]).read_bytes()
        assert history[s]["loss"] == 1.0 / (s + 1)  # one history row per step, images merged in
    grid = history[2]["grid"]
    assert grid["_type"] == "images/separated" and grid["count"] == 3
    assert grid["captions"] == ["0", "1", "2"]
    again = _cli_sync(root, "--to", "wandb")
    assert not any(again["sent"].values()), again
    assert [r["step"] for r in wb.history(run.project, run.id)] == [0, 1, 2, 3]


def test_wandb_reconciles_an_image_batch_in_doubt(wb, root, tmp_path):
    """The step batch with steps 2..3 reached wandb, then the sync died before recording it."""
    run = _run_with_images(root, tmp_path)
    _cli_sync(root, "--to", "wandb")
    path = _cursor(root)
    cur = json.loads(path.read_text())
    from trackstore.read.reader import read_kind

    sets = {}
    for kind in ("metrics", "images"):
        old, new = RangeSet(), RangeSet()
        for r in read_kind(run.paths, kind).to_pylist():
            (new if r["step"] >= 2 else old).add_seqs(r["writer"], [r["seq"]])
        sets[kind] = (old, new)
    cur["acked"] = {k: sets[k][0].to_json() for k in sets}
    cur["in_doubt"] = {"kind": "steps", "rows": {k: sets[k][1].to_json() for k in sets}, "batch_id": "x",
                       "since": "now"}
    cur["remote"]["last_step"] = 1
    cur["synced_status"] = None
    rewrite_cursor(path, cur)
    out = _cli_sync(root, "--to", "wandb", "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}, out
    assert out["reconciled"] == 2 + 5 and not any(out["sent"].values())
    history = wb.history(run.project, run.id)
    assert [r["step"] for r in history] == [0, 1, 2, 3]


# ---------------------------------------------------------------------------- MLflow
def _mlflow_images(client, rid):
    names = [f.path for f in client.list_artifacts(rid, "images")]
    kept = [f.path for f in client.list_artifacts(rid, "trackstore/images")]
    return sorted(names), sorted(kept)


def test_mlflow_holds_step_images_and_the_stored_bytes(root, tmp_path):
    from mlflow.tracking import MlflowClient

    run = _run_with_images(root, tmp_path)
    uri = mlflow_sqlite_uri(tmp_path)
    out = _cli_sync(root, "--to", "mlflow", "--uri", uri)
    assert out["result"] == "ok" and out["sent"]["images"] == 7 and out["skipped_by_reason"] == {}, out
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("imgs")
    [remote] = client.search_runs([exp.experiment_id])
    rid = remote.info.run_id
    assert remote.data.tags["mlflow.loggedImages"] == "True"
    names, kept = _mlflow_images(client, rid)
    pngs = [n for n in names if n.endswith(".png")]
    assert len(pngs) == 7 and len([n for n in names if n.endswith("+compressed.webp")]) == 7
    stored = _stored(run)
    assert sorted(kept) == sorted({f"trackstore/images/{Path(r['path']).name}" for r in stored})
    with tempfile.TemporaryDirectory() as tmp:
        for r in stored:
            ms = int(r["ts"].timestamp() * 1000)
            key = r["key"].replace("/", "~")
            [name] = [n for n in pngs if n.startswith(f"images/{key}+step+{r['step']}+timestamp+{ms}+")
                      and _is_row(n, r)]
            got = Path(client.download_artifacts(rid, name, tmp)).read_bytes()
            original = (run.dir / r["path"]).read_bytes()
            if r["format"] == "png":
                assert got == original  # a PNG goes as it is
            else:
                assert got.startswith(b"\x89PNG") and (pixels(got) == pixels(original)).all()  # re-encoded, pixels kept
            exact = Path(client.download_artifacts(rid, f"trackstore/images/{Path(r['path']).name}", tmp)).read_bytes()
            assert exact == original
    again = _cli_sync(root, "--to", "mlflow", "--uri", uri)
    assert not any(again["sent"].values())
    assert _mlflow_images(client, rid) == (names, kept)


def _is_row(name: str, row: dict) -> bool:
    import uuid

    from trackstore.sync.mlflow_records import _NS

    return name.endswith(f"+{uuid.uuid5(_NS, chr(0).join(('image', row['writer'], str(row['seq']))))}.png")


def test_mlflow_resend_of_an_image_batch_in_doubt_adds_nothing(root, tmp_path):
    from mlflow.tracking import MlflowClient

    run = _run_with_images(root, tmp_path)
    uri = mlflow_sqlite_uri(tmp_path)
    _cli_sync(root, "--to", "mlflow", "--uri", uri)
    client = MlflowClient(tracking_uri=uri)
    [remote] = client.search_runs([client.get_experiment_by_name("imgs").experiment_id])
    before = _mlflow_images(client, remote.info.run_id)
    path = _cursor(root)
    cur = json.loads(path.read_text())
    doubt = RangeSet()
    for r in _stored(run):
        doubt.add_seqs(r["writer"], [r["seq"]])
    cur["acked"]["images"] = {}
    cur["in_doubt"] = {"kind": "images", "rows": doubt.to_json(), "batch_id": "x", "since": "now"}
    rewrite_cursor(path, cur)
    out = _cli_sync(root, "--to", "mlflow", "--uri", uri)
    assert out["result"] == "ok" and out["sent"]["images"] == 7, out  # sent again: the same names
    assert _mlflow_images(client, remote.info.run_id) == before


# ---------------------------------------------------------------------------- SwanLab
def test_swanlab_offline_holds_the_pixels(root, tmp_path, monkeypatch):
    pytest.importorskip("swanlab")
    from trackstore.sync.swanlab import experiment_id, read_session_files

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    logdir = tmp_path / "swanlog"
    run = _run_with_images(root, tmp_path)
    out = _cli_sync(root, "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir), "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}, out
    assert out["verified"]["images"] == 7
    session = sorted(logdir.glob("run-*"))[-1]
    media = {}
    for _d, rec in read_session_files(logdir, experiment_id(run.project, run.id)):
        if rec.WhichOneof("record_type") == "media":
            media[(rec.media.key, int(rec.media.step))] = rec.media
    stored = {(r["key"], r["step"], r["index"]): r for r in _stored(run)}
    for (key, step, index), r in stored.items():
        item = media[(key, step)].value.items[index]
        assert item.caption == r["caption"]
        [f] = list(session.glob(f"media/**/{item.filename}"))
        assert (pixels(f.read_bytes()) == pixels((run.dir / r["path"]).read_bytes())).all()
    again = _cli_sync(root, "--to", "swanlab", "--mode", "offline", "--logdir", str(logdir))
    assert not any(again["sent"].values())


# ---------------------------------------------------------------------------- the team store
def test_a_replica_holds_the_image_files_its_rows_name(root, tmp_path):
    run = _run_with_images(root, tmp_path)
    more = trackstore.init("imgs", root=root)
    png = tmp_path / "red.png"
    more.log_samples([{"input": "describe", "output": "red", "pic": trackstore.Image(png)}], step=0)
    more.finish()
    replica = tmp_path / "team"
    out = _cli_sync(root, "--to", "store", "--uri", str(replica), "--verify")
    assert out["verify_ok"] is True, out
    for r in _stored(run):
        copy = replica / run.dir.relative_to(root) / r["path"]
        assert copy.read_bytes() == (run.dir / r["path"]).read_bytes()
    ref = json.loads(trackstore.query("SELECT extra FROM samples", root=root).column("extra")[0].as_py())["pic"]
    assert (replica / more.dir.relative_to(root) / ref["path"]).read_bytes() == png.read_bytes()
    res = run_cli("sql", "SELECT count(*) AS n FROM images", "--format", "json", root=replica)
    assert res.returncode == 0 and json.loads(res.stdout)[0]["n"] == 7, res.stderr


def test_swanlab_image_batch_in_doubt_is_not_logged_twice(root, tmp_path, monkeypatch):
    """The images batch reached SwanLab, then the sync died before the cursor recorded it: the
    next sync checks each (key, step) against SwanLab's files and logs none of them again."""
    pytest.importorskip("swanlab")
    from trackstore.store.ledger import iter_cursors, save_cursor
    from trackstore.sync.swanlab import experiment_id, read_session_files

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    logdir = tmp_path / "swanlog"
    run = _run_with_images(root, tmp_path)
    args = ("--to", "swanlab", "--mode", "offline", "--logdir", str(logdir))
    _cli_sync(root, *args)

    def media():
        return sorted((r.media.key, int(r.media.step)) for _d, r in read_session_files(
            logdir, experiment_id(run.project, run.id)) if r.WhichOneof("record_type") == "media")

    before = media()
    assert len(before) == 5  # val/pic at 4 steps, grid at one
    cursor = next(iter_cursors(root, target="swanlab"))
    doubt = RangeSet()
    for r in _stored(run):
        doubt.add_range(r["writer"], r["seq"], r["seq"])
    cursor.acked["images"] = RangeSet()
    cursor.in_doubt = {"kind": "images", "rows": doubt.to_json(), "batch_id": "x", "since": "2026-01-01T00:00:00Z"}
    cursor.synced_status = None
    cursor.remote["key_max"] = {k: v for k, v in cursor.remote["key_max"].items() if k not in ("val/pic", "grid")}
    cursor.remote["media_keys"] = [k for k in cursor.remote.get("media_keys", []) if k not in ("val/pic", "grid")]
    save_cursor(root, cursor)
    out = _cli_sync(root, *args, "--verify")
    assert out["verify_ok"] is True and out["skipped_by_reason"] == {}, out
    assert media() == before
