"""Artifacts: snapshots copied at log time, content-addressed versions, manifest rows, I/O trouble contained."""

from __future__ import annotations

import hashlib
import json
import math
import os
import textwrap

import duckdb
import pyarrow.parquet as pq
import pytest

import trackstore
from tests.helpers import python_child
from trackstore.records.artifacts import list_versions


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_rows(run) -> list[dict]:
    return sorted(pq.read_table(run.dir / "artifacts" / "_manifest").to_pylist(), key=lambda r: r["seq"])


@pytest.fixture
def ckpt(tmp_path):
    d = tmp_path / "ckpt" / "step_100"
    (d / "tokenizer").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(os.urandom(3 << 20) + b"end")
    (d / "config.json").write_text(json.dumps({"hidden": 64}))
    (d / "tokenizer" / "vocab.txt").write_text("a\nb\n模型\n", encoding="utf-8")
    (d / "empty.bin").write_bytes(b"")
    return d


def test_folder_roundtrip_and_manifest(root, ckpt):
    run = trackstore.init("p", root=root)
    run.log({"x": 1.0}, step=99)
    v = run.log_artifact(ckpt, name="policy", type="model", aliases=["best", "best"], metadata={"acc": 0.5})
    assert v.new and v.version == 0 and v.step == 100 and v.aliases == ["best"]
    run.finish()
    originals = {p.relative_to(ckpt).as_posix(): p.read_bytes() for p in ckpt.rglob("*") if p.is_file()}
    rows = manifest_rows(run)
    assert sorted(r["logical_path"] for r in rows) == sorted(originals)
    for r in rows:
        stored = (run.dir / r["path"]).read_bytes()
        assert stored == originals[r["logical_path"]]
        assert r["sha256"] == sha(stored) and r["size"] == len(stored)
        assert (r["name"], r["version"], r["type"], r["digest"]) == ("policy", 0, "model", v.digest)
        assert r["aliases"] == ["best"] and json.loads(r["metadata"]) == {"acc": 0.5} and r["step"] == 100
    assert rows[0]["path"].startswith("artifacts/policy/v0/files/")
    (disk,) = list_versions(run.dir)
    assert (disk.name, disk.version, disk.digest, len(disk.files)) == ("policy", 0, v.digest, len(originals))
    con = duckdb.connect()
    total = con.execute("SELECT sum(size), count(*) FROM read_parquet(?)",
                        [str(run.dir / "artifacts" / "_manifest" / "*.parquet")]).fetchone()
    assert total == (sum(map(len, originals.values())), len(originals))


def test_unicode_names_empty_files_and_hard_metadata_roundtrip(root, tmp_path):
    src = tmp_path / "检查点 ✓"
    (src / "分词器" / "子目录").mkdir(parents=True)
    files = {
        "权重 ✓.bin": os.urandom(1000),
        "分词器/词表.txt": "a\nб\n模型\n".encode(),
        "分词器/子目录/空.txt": b"",  # 0 bytes, nested two levels down
        "🚀 émoji ñ.json": b"{}",
        "zero.bin": b"",
    }
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    metadata = {"nan": float("nan"), "inf": float("inf"), "nested": {"a": [], "b": {"c": [1, None, "✓"]}},
                "文字": "值", "empty": {}}
    run = trackstore.init("p", root=root)
    v = run.log_artifact(src, name="模型", type="model", aliases=["最佳"], metadata=metadata)
    one = run.log_artifact(src / "zero.bin", name="空文件")  # a single 0-byte file is an artifact too
    run.finish()

    def same_metadata(got: dict) -> None:
        assert math.isnan(got.pop("nan")) and got.pop("inf") == math.inf
        assert got == {k: val for k, val in metadata.items() if k not in ("nan", "inf")}

    # the copies, byte for byte, under their unicode names
    assert sorted(f.logical_path for f in v.files) == sorted(files)
    for f in v.files:
        stored = run.dir / f.path
        assert stored.read_bytes() == files[f.logical_path] and f.size == len(files[f.logical_path])
        assert f.sha256 == sha(files[f.logical_path])
    assert (one.files[0].size, one.files[0].sha256) == (0, sha(b""))
    # manifest.json on disk
    manifest = json.loads((v.dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["name"] == "模型" and manifest["aliases"] == ["最佳"]
    assert {f["logical_path"]: f["size"] for f in manifest["files"]} == {k: len(d) for k, d in files.items()}
    same_metadata(manifest["metadata"])
    (disk, disk_one) = sorted(list_versions(run.dir), key=lambda x: x.name != "模型")
    same_metadata(dict(disk.metadata))
    assert disk.files == v.files and disk_one.files == one.files
    # the manifest Parquet rows
    rows = [r for r in manifest_rows(run) if r["name"] == "模型"]
    assert sorted((r["logical_path"], r["size"]) for r in rows) == sorted((k, len(d)) for k, d in files.items())
    for r in rows:
        same_metadata(json.loads(r["metadata"]))
    # ...and the SQL view over the whole store
    con = trackstore.connect(root)
    got = con.execute("SELECT logical_path, size, sha256, aliases, metadata, "
                      "json_extract(metadata, '$.nested.a'), json_extract_string(metadata, '$.文字'), "
                      "CAST(json_extract(metadata, '$.nan') AS DOUBLE) FROM artifacts WHERE name = '模型' "
                      "ORDER BY logical_path").fetchall()
    assert [(g[0], g[1], g[2]) for g in got] == sorted((k, len(d), sha(d)) for k, d in files.items())
    for g in got:
        assert g[3] == ["最佳"] and g[5] == "[]" and g[6] == "值" and math.isnan(g[7])
        same_metadata(json.loads(g[4]))
    assert con.execute("SELECT name, logical_path, size FROM artifacts WHERE size = 0 ORDER BY name, logical_path"
                       ).fetchall() == [("模型", "zero.bin", 0), ("模型", "分词器/子目录/空.txt", 0),
                                        ("空文件", "zero.bin", 0)]


def test_copy_survives_trainer_overwrite_and_deletion(root, ckpt):
    run = trackstore.init("p", root=root)
    f = ckpt / "model.safetensors"
    before = f.read_bytes()
    v = run.log_artifact(f, name="policy")
    with open(f, "r+b") as fh:  # the trainer rewrites the checkpoint in place
        fh.write(b"X" * 100)
    stored = v.dir / "files" / "model.safetensors"
    assert stored.read_bytes() == before
    f.unlink()  # ...then rotates it away
    assert stored.read_bytes() == before and sha(before) == v.files[0].sha256
    run.finish()


def test_hardlink_opt_in_shares_the_inode(root, ckpt):
    run = trackstore.init("p", root=root)
    f = ckpt / "config.json"
    v = run.log_artifact(f, name="cfg", type="config", hardlink=True)
    assert os.stat(v.dir / "files" / "config.json").st_ino == os.stat(f).st_ino
    run.finish()


def test_identical_content_is_one_version(root, ckpt, tmp_path):
    run = trackstore.init("p", root=root, run_id="r1")
    v0 = run.log_artifact(ckpt, name="policy")
    again = run.log_artifact(ckpt, name="policy", aliases=["best"])  # nothing stored; the alias moves to v0
    assert again.version == 0 and not again.new and again.digest == v0.digest
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    for p in ckpt.rglob("*"):  # same content at another path: still the same version
        if p.is_file():
            dest = copy / p.relative_to(ckpt)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
    assert run.log_artifact(copy, name="policy").version == 0
    (ckpt / "config.json").write_text(json.dumps({"hidden": 128}))
    v1 = run.log_artifact(ckpt, name="policy")
    assert v1.version == 1 and v1.new and v1.digest != v0.digest
    run.finish()
    # a later attempt (resume) of the same run sees what is on disk
    run2 = trackstore.init("p", root=root, run_id="r1", resume=True)
    assert run2.log_artifact(ckpt, name="policy").version == 1
    run2.finish()
    assert sorted({(r["version"], r["digest"]) for r in manifest_rows(run2) if r["event"] == "file"}) == sorted(
        {(0, v0.digest), (1, v1.digest)})
    files = [r for r in manifest_rows(run2) if r["event"] == "file"]
    assert len(files) == 2 * len(v0.files)  # no file rows for the duplicates
    assert [(r["version"], r["aliases"]) for r in manifest_rows(run2) if r["event"] == "alias"] == [(0, ["best"])]
    assert not [p for p in (run2.dir / "artifacts" / "policy").iterdir() if p.name.startswith(".staging")]


def test_large_file_streamed_hash(root, tmp_path):
    big = tmp_path / "big.bin"
    chunk = os.urandom(1 << 20)
    with open(big, "wb") as f:
        for i in range(20):  # 20 MiB: several 8 MiB hash chunks
            f.write(chunk[i:] + chunk[:i])
    run = trackstore.init("p", root=root)
    v = run.log_artifact(big, type="dataset")
    run.finish()
    assert v.name == "big.bin" and v.files[0].size == 20 << 20
    assert v.files[0].sha256 == sha(big.read_bytes())


def test_caller_mistakes_raise(root, tmp_path, ckpt):
    run = trackstore.init("p", root=root)
    with pytest.raises(ValueError, match="does not exist"):
        run.log_artifact(tmp_path / "missing.pt")
    with pytest.raises(trackstore.InvalidNameError):
        run.log_artifact(ckpt, name="../escape")
    with pytest.raises(trackstore.InvalidNameError, match="reserved"):
        run.log_artifact(ckpt, name="_manifest")
    with pytest.raises(ValueError, match="metadata"):
        run.log_artifact(ckpt, name="x", metadata=["not", "a", "dict"])
    with pytest.raises(ValueError, match="type"):
        run.log_artifact(ckpt, name="x", type="")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(ValueError, match="no files"):
        run.log_artifact(empty)
    run.finish()
    assert not (run.dir / "artifacts").exists() or not list_versions(run.dir)


IO_FAIL = textwrap.dedent(
    """
    import os, resource, signal, sys, trackstore
    big = {big!r}
    run = trackstore.init("p", root={root!r}, run_id="io")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # writes past the limit fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # like a nearly full disk
    v = run.log_artifact(big, name="ckpt")
    print("returned", v, flush=True)
    run.log({{"still_training": 1.0}}, step=1)
    run.finish()
    print("finished", flush=True)
    """
)


def test_io_error_warns_and_returns_none(root, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(4 << 20))
    child = python_child(IO_FAIL.format(big=str(big), root=str(root)))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "returned None" in out and "finished" in out
    assert "log_artifact" in err and "NOT stored" in err
    adir = root / "project=p" / "run=io" / "artifacts" / "ckpt"
    assert not adir.exists() or not list(adir.iterdir())  # the partial copy was removed
    meta = json.loads((root / "project=p" / "run=io" / "run.json").read_text())
    assert meta["status"] == "finished"


RACER = textwrap.dedent(
    """
    import trackstore
    run = trackstore.init("p", root={root!r}, run_id="race", resume=True)
    a = run.log_artifact({src!r}, name="shared")
    b = run.log_artifact({same!r}, name="shared")
    print(a.version, b.version, flush=True)
    run.finish()
    """
)


def test_two_writers_same_name(root, tmp_path):
    srcs = []
    for i in range(2):
        p = tmp_path / f"w{i}.bin"
        p.write_bytes(f"writer {i} ".encode() * 1000)
        srcs.append(p)
    same = tmp_path / "same.bin"
    same.write_bytes(b"identical for both")
    trackstore.init("p", root=root, run_id="race").finish()
    children = [python_child(RACER.format(root=str(root), src=str(s), same=str(same))) for s in srcs]
    for c in children:
        out, err = c.communicate(timeout=120)
        assert c.returncode == 0, err
    versions = list_versions(root / "project=p" / "run=race", "shared")
    assert [v.version for v in versions] == [0, 1, 2]  # two contents + the shared one, each once
    assert len({v.digest for v in versions}) == 3


def test_stale_staging_of_a_dead_writer_is_removed(root, ckpt):
    run = trackstore.init("p", root=root, run_id="r")
    run.log_artifact(ckpt / "config.json", name="cfg")
    run.finish()
    base = run.dir / "artifacts" / "cfg"
    dead = base / f".staging-{run.writer_id}-0badc0de" / "files"  # as if killed mid-copy
    dead.mkdir(parents=True)
    (dead / "half.bin").write_bytes(b"partial")
    unknown = base / ".staging-otherhost-1-abcdef-12345678"  # no writer file: not ours to judge
    unknown.mkdir()
    assert [v.version for v in list_versions(run.dir)] == [0]  # readers ignore staging folders
    run2 = trackstore.init("p", root=root, run_id="r", resume=True)
    (ckpt / "config.json").write_text("{}")
    assert run2.log_artifact(ckpt / "config.json", name="cfg").version == 1
    run2.finish()
    assert not dead.parent.exists() and unknown.exists()


KILLED_COPY = textwrap.dedent(
    """
    import trackstore
    run = trackstore.init("p", root={root!r}, run_id="k")
    print("copying", flush=True)
    run.log_artifact({src!r}, name="many")
    print("done", flush=True)
    """
)


def test_sigkill_mid_copy_leaves_no_version_and_a_retry_cleans_up(root, tmp_path):
    import signal
    import time

    src = tmp_path / "many"
    src.mkdir()
    for i in range(1000):  # one fsync per file: the copy takes long enough to be killed in the middle
        (src / f"shard_{i:04d}.bin").write_bytes(i.to_bytes(4, "big") * 64)
    child = python_child(KILLED_COPY.format(root=str(root), src=str(src)))
    assert child.stdout.readline().strip() == "copying", child.stderr.read()
    base = root / "project=p" / "run=k" / "artifacts" / "many"

    def copying() -> bool:
        stages = list(base.glob(".staging-*/files")) if base.exists() else []
        return bool(stages) and len(list(stages[0].iterdir())) > 10

    deadline = time.monotonic() + 60
    while not copying() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    if (base / "v0").exists():  # the copy won the race: then the version must be whole
        (whole,) = list_versions(root / "project=p" / "run=k", "many")
        assert len(whole.files) == 1000
        return
    assert list(base.glob(".staging-*")), "the kill should have left a staging folder"
    assert list_versions(root / "project=p" / "run=k") == []  # no half version is visible
    run = trackstore.init("p", root=root, run_id="k", resume=True)
    v = run.log_artifact(src, name="many")
    run.finish()
    assert v.version == 0 and len(v.files) == 1000
    assert not list(base.glob(".staging-*"))
