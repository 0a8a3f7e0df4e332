"""Checkpoints by reference and movable aliases: nothing copied, hashing off the training thread,
a changed or vanished file never recorded or sent as something else, one version per alias."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from tests.helpers import run_cli
from trackstore.errors import InvalidValueError
from trackstore.records import artifact_refs
from trackstore.records.artifact_refs import check_reference
from trackstore.records.artifacts import list_versions
from trackstore.upkeep import gc as G
from trackstore.upkeep.doctor import diagnose


def write_ckpt(folder, step: int, size: int = 1 << 20):
    d = folder / f"global_step_{step}"
    (d / "actor").mkdir(parents=True, exist_ok=True)
    (d / "actor" / "model.safetensors").write_bytes(os.urandom(size))
    (d / "actor" / "config.json").write_text(json.dumps({"step": step}))
    return d


def aliases_now(root, run_id: str) -> dict[str, int]:
    con = trackstore.connect(root)
    return {a: v for a, v in con.execute("SELECT alias, version FROM artifact_aliases WHERE run_id = $r",
                                         {"r": run_id}).fetchall()}


def test_reference_copies_nothing_and_records_where_the_files_are(root, tmp_path):
    ck = write_ckpt(tmp_path / "ckpts", 100)
    run = trackstore.init("p", root=root, run_id="r1")
    run.log({"reward": 0.5}, step=100)
    future = run.log_checkpoint(ck, step=100, metrics={"reward": 0.5})
    v = future.result(timeout=60)
    run.finish()
    assert v.storage == "reference" and v.name == "model-r1" and v.type == "model" and v.source == str(ck)
    assert v.aliases == ["latest", "step-100"] and v.metadata == {"step": 100, "metrics": {"reward": 0.5}}
    stored = [p for p in (run.dir / "artifacts").rglob("*") if p.is_file() and "_manifest" not in p.parts and p.name != ".lock"]
    assert [p.name for p in stored] == ["manifest.json"]  # no bytes of the checkpoint in the store
    data = (ck / "actor" / "model.safetensors").read_bytes()
    files = {f.logical_path: f for f in v.files}
    assert files["actor/model.safetensors"].path == str(ck / "actor" / "model.safetensors")
    assert files["actor/model.safetensors"].sha256 == hashlib.sha256(data).hexdigest()
    con = trackstore.connect(root)
    rows = con.execute("SELECT logical_path, path, storage, size, aliases FROM artifacts ORDER BY logical_path").fetchall()
    assert rows == [("actor/config.json", str(ck / "actor" / "config.json"), "reference", len(b'{"step": 100}'),
                     ["latest", "step-100"]),
                    ("actor/model.safetensors", str(ck / "actor" / "model.safetensors"), "reference", len(data),
                     ["latest", "step-100"])]


def test_hashing_runs_off_the_calling_thread_and_finish_waits_for_it(root, tmp_path, monkeypatch):
    ck = write_ckpt(tmp_path / "ckpts", 1)
    release = threading.Event()
    threads = []
    real = artifact_refs._hash

    def slow_hash(path):
        threads.append(threading.current_thread().name)
        release.wait(30)
        return real(path)

    monkeypatch.setattr(artifact_refs, "_hash", slow_hash)
    run = trackstore.init("p", root=root, run_id="r1")
    future = run.log_checkpoint(ck, step=1)
    assert not future.done()  # the call came back while the hash is held
    run.log({"loss": 1.0}, step=1)  # training goes on meanwhile
    threading.Timer(0.5, release.set).start()
    run.finish()  # waits for the queued hash: its rows are part of the run
    assert future.done() and future.result().version == 0
    assert threads and all(t.startswith("trackstore-hash") for t in threads)
    assert trackstore.connect(root).execute("SELECT count(*) FROM artifacts").fetchone() == (2,)


def test_a_file_changing_while_hashed_is_not_recorded(root, tmp_path, monkeypatch, capsys):
    ck = write_ckpt(tmp_path / "ckpts", 1)
    real = artifact_refs._hash

    def hash_then_rewrite(path):
        out = real(path)
        if path.name == "model.safetensors":  # the trainer is still writing it
            with open(path, "ab") as f:
                f.write(b"more")
        return out

    monkeypatch.setattr(artifact_refs, "_hash", hash_then_rewrite)
    run = trackstore.init("p", root=root, run_id="r1")
    assert run.log_checkpoint(ck, step=1).result(timeout=60) is None
    run.finish()
    assert "changed while it was hashed" in capsys.readouterr().err
    assert list_versions(run.dir) == []
    assert trackstore.connect(root).execute("SELECT count(*) FROM artifacts").fetchone() == (0,)


def test_check_reference_tells_vanished_changed_and_ok(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    st_ = f.stat()
    good = hashlib.sha256(b"abc").hexdigest()
    assert check_reference(f, 3, good) is None
    assert check_reference(f, 3, good, st_.st_mtime_ns, quick=True) is None
    f.write_bytes(b"abd")  # same size, other bytes
    assert check_reference(f, 3, good).startswith("changed")
    os.utime(f, ns=(st_.st_atime_ns, st_.st_mtime_ns))  # even with the old time, the hash tells
    assert check_reference(f, 3, good).startswith("changed")
    f.write_bytes(b"abcd")
    assert check_reference(f, 3, good, quick=True).startswith("changed: 4 bytes")
    f.unlink()
    assert check_reference(f, 3, good) == "vanished"


def test_a_copy_is_never_answered_by_a_reference_of_the_same_content(root, tmp_path):
    ck = write_ckpt(tmp_path / "ckpts", 1, size=1000)
    run = trackstore.init("p", root=root, run_id="r1")
    ref = run.log_artifact(ck, name="m", reference=True).result(timeout=60)
    copy = run.log_artifact(ck, name="m")  # the user wants bytes the trainer cannot delete
    again = run.log_artifact(ck, name="m", reference=True).result(timeout=60)
    run.finish()
    assert (ref.version, ref.storage, ref.new) == (0, "reference", True)
    assert (copy.version, copy.storage, copy.new) == (1, "copy", True)
    assert (again.version, again.new) == (0, False)
    with pytest.raises(InvalidValueError, match="hardlink"):
        trackstore.init("p", root=root, run_id="r2").log_artifact(ck, reference=True, hardlink=True)


def test_aliases_move_and_one_version_holds_each(root, tmp_path):
    run = trackstore.init("p", root=root, run_id="r1")
    versions = [run.log_checkpoint(write_ckpt(tmp_path, s, 100), step=s).result(timeout=60) for s in (10, 20, 30)]
    run.alias_artifact("model-r1", versions[1], "best")
    run.alias_artifact("model-r1", 0, "best")  # best moves back to v0
    with pytest.raises(InvalidValueError, match="no version 7"):
        run.alias_artifact("model-r1", 7, "best")
    with pytest.raises(InvalidValueError, match="alias"):
        run.alias_artifact("model-r1", 0, ["best"])  # type: ignore[arg-type]
    run.finish()
    assert aliases_now(root, "r1") == {"latest": 2, "best": 0, "step-10": 0, "step-20": 1, "step-30": 2}
    con = trackstore.connect(root)
    by_version = dict(con.execute("SELECT DISTINCT version, aliases FROM artifacts").fetchall())
    assert by_version == {0: ["best", "step-10"], 1: ["step-20"], 2: ["latest", "step-30"]}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moves=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["best", "latest", "keep"])), max_size=12))
def test_alias_holders_are_the_last_move_of_each_alias(tmp_path_factory, moves):
    """Whatever order aliases are moved in, the view says what a plain fold over the moves says."""
    root = tmp_path_factory.mktemp("store")
    src = tmp_path_factory.mktemp("src")
    run = trackstore.init("p", root=root, run_id="r")
    for i in range(3):
        (src / f"f{i}").write_bytes(bytes([i]) * 10)
        run.log_artifact(src / f"f{i}", name="m", aliases=[])
    expected: dict[str, int] = {}
    for version, alias in moves:
        run.alias_artifact("m", version, alias)
        expected[alias] = version
    run.finish()
    assert aliases_now(root, "r") == expected


def test_doctor_reports_a_vanished_or_changed_reference_and_sync_status_stays(root, tmp_path):
    ck = write_ckpt(tmp_path / "ckpts", 5, size=100)
    run = trackstore.init("p", root=root, run_id="r1")
    run.log_checkpoint(ck, step=5).result(timeout=60)
    run.finish()
    assert [f for f in diagnose(root).findings if f.check == "artifact_reference"] == []
    (ck / "actor" / "config.json").write_text("rewritten by the trainer")
    (ck / "actor" / "model.safetensors").unlink()
    found = sorted((f.path.name, f.problem.split("the file ", 1)[1].split(":")[0], f.severity)
                   for f in diagnose(root).findings if f.check == "artifact_reference")
    assert found == [("config.json", "changed", "warning"), ("model.safetensors", "vanished", "warning")]
    assert diagnose(root).healthy  # the store itself is intact


def test_gc_keeps_the_only_copy_of_an_aliased_version_unless_asked(root, tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"w" * 100)
    for rid, aliases in (("aliased", ["best"]), ("plain", [])):
        run = trackstore.init("p", root=root, run_id=rid)
        run.log_artifact(f, name="m", aliases=aliases)
        run.finish()
    policy = G.Policy(older_than_s=0, include_unsynced=True)
    plan = G.plan(root, policy, now=time.time() + 10)
    verdicts = {c.info.run_id: c for c in plan.runs}
    assert verdicts["plain"].delete
    kept = verdicts["aliased"]
    assert not kept.delete and "only copy of an aliased artifact version: m:v0 (best)" in kept.reason
    asked = G.plan(root, G.Policy(older_than_s=0, include_unsynced=True, include_aliased=True), now=time.time() + 10)
    assert all(c.delete for c in asked.runs)


def test_cli_lists_versions_with_their_aliases_and_reference_state(root, tmp_path):
    ck = write_ckpt(tmp_path / "ckpts", 3, size=100)
    run = trackstore.init("p", root=root, run_id="r1")
    run.log_checkpoint(ck, step=3, aliases=["latest", "best"]).result(timeout=60)
    run.finish()
    out = run_cli("artifacts", "r1", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["name"], row["version"], row["storage"], row["aliases"], row["check"], row["source"]) == (
        "model-r1", 0, "reference", ["best", "latest", "step-3"], "ok", str(ck))
    (ck / "actor" / "model.safetensors").unlink()
    table = run_cli("artifacts", "r1", root=root, env={"COLUMNS": "80"})
    assert table.returncode == 0 and "vanished" in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())
    missing = run_cli("artifacts", "r1", "--name", "nope", root=root)
    assert missing.returncode == 3 and "no artifact 'nope'" in missing.stderr
