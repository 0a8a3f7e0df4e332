"""Key mapping per target is injective and accepted: a table of hostile keys, synced with the
real clients (MLflow sqlite and file store, SwanLab offline, wandb offline) and read back with
their own readers: every key arrives as its own remote key, with its own value, and the
renamings are listed in the summary and in ``--dry-run``."""

from __future__ import annotations

import json

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, run_cli
from tests.sync_harness import MlflowHarness, SwanlabHarness, WandbHarness
from trackstore.sync.keys import (
    MLFLOW_MAX_KEY,
    SWANLAB_MAX_KEY,
    mlflow_key,
    mlflow_names,
    remote_names,
    renamed,
    swanlab_key,
    wandb_key,
)

HOSTILE = [
    "a#b", "a_b", "a?b", "a!b", "a'b", "a@b", "a_at_b", "🚀", "..", ".", "_", "a/b", "a//b", "/a", "a/",
    "a/./b", "a/../b", "a.b", "a b", " a", "a ", "损失/奖励", "a:b", "a-b", "a%b", "a\\b",
    "x" * 300, "x" * 300 + "y", "x" * 251, "x" * 250, "a__0123abcd", "a_b__" + "0" * 8, "_step", "_timestamp",
    "trackstore/_step", "a.", ".a", "a/.", "loss", "actor/pg_loss",
]
RULES = {"mlflow": mlflow_key, "swanlab": swanlab_key, "wandb": wandb_key}


def test_mapping_is_injective_deterministic_and_keeps_valid_keys():
    for target, rule in RULES.items():
        images = [rule(k) for k in HOSTILE]
        assert len(set(images)) == len(HOSTILE), target
        assert images == [rule(k) for k in HOSTILE]  # deterministic
        for plain in ("loss", "actor/pg_loss", "a_b", "损失/奖励", "a-b"):
            assert rule(plain) == plain, (target, plain)
    assert all(len(mlflow_key(k)) <= MLFLOW_MAX_KEY for k in HOSTILE)
    assert all(len(swanlab_key(k)) <= SWANLAB_MAX_KEY for k in HOSTILE)
    assert mlflow_key("x" * 250) == "x" * 250 and mlflow_key("x" * 251) != "x" * 250
    assert wandb_key("_step") == "trackstore/_step" != wandb_key("trackstore/_step")
    assert renamed("wandb", ["loss", "_x"]) == {"_x": "trackstore/_x"}
    assert renamed("mlflow", ["loss", "a#b"]) == {"a#b": "a_b"}  # per run: alone, readable
    assert renamed("mlflow", ["a_b", "a#b"]) == {"a#b": mlflow_key("a#b")}


def test_every_mapped_key_passes_mlflows_own_validation():
    from mlflow.utils.validation import _validate_metric_name, _validate_tag_name

    names = mlflow_names(HOSTILE)
    for k in HOSTILE:
        for name in (mlflow_key(k), names[k]):
            _validate_metric_name(name)
            _validate_tag_name(name)


def test_mlflow_run_names_are_readable_injective_and_independent_of_order():
    """Per run, a renamed key stays readable unless another key of the run meets its name; the
    names are a function of the set of keys, and names already given are kept."""
    verl = ["val/acc/mean@1", "val/acc/best@4/mean", "pass@k", "actor/pg_loss", "loss"]
    names = mlflow_names(verl)
    assert names == {"val/acc/mean@1": "val/acc/mean_at_1", "val/acc/best@4/mean": "val/acc/best_at_4/mean",
                     "pass@k": "pass_at_k", "actor/pg_loss": "actor/pg_loss", "loss": "loss"}
    names = mlflow_names(HOSTILE)
    assert len(set(names.values())) == len(HOSTILE) and all(len(v) <= MLFLOW_MAX_KEY for v in names.values())
    assert names["a_b"] == "a_b" and names["a_at_b"] == "a_at_b" and names["_"] == "_"  # a key that is the name
    for k in ("a#b", "a?b", "a!b", "a'b", "a@b", "🚀", ".."):  # keys that meet on a name: all hashed
        assert names[k] == mlflow_key(k) and names[k].endswith(mlflow_key(k)[-10:]), k
    assert names["x" * 300] == mlflow_key("x" * 300)  # a readable form that had to be cut: hashed
    assert mlflow_names(["🚀"]) == {"🚀": "_"} and mlflow_names(["a#b"]) == {"a#b": "a_b"}  # alone: plain
    assert mlflow_names(list(reversed(HOSTILE))) == names  # the set decides, not the order
    # names already given are kept; a newcomer that meets one is hashed, whatever it is
    first = mlflow_names(["a@b", "loss"])
    assert first["a@b"] == "a_at_b"
    later = mlflow_names(["a_at_b", "a@b", "new@1"], first)
    assert later["a@b"] == "a_at_b" and later["a_at_b"] != "a_at_b" and later["new@1"] == "new_at_1"
    assert len(set(later.values())) == len(later)
    # a user key that looks like the hashed name another key would take: still apart
    trap = mlflow_key("a#b")
    both = mlflow_names(["a#b", "a?b", trap])
    assert both[trap] == trap and both["a#b"] != trap and len(set(both.values())) == 3


class MlflowSqliteHarness(MlflowHarness):
    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path, monkeypatch)
        self.uri = mlflow_sqlite_uri(tmp_path, "keys.db")


@pytest.fixture(params=["mlflow-sqlite", "mlflow-filestore", "swanlab", "wandb"])
def harness(request, tmp_path, monkeypatch):
    cls = {"mlflow-sqlite": MlflowSqliteHarness, "mlflow-filestore": MlflowHarness, "swanlab": SwanlabHarness,
           "wandb": WandbHarness}[request.param]
    h = cls(tmp_path, monkeypatch)
    for k, v in h.env().items():
        monkeypatch.setenv(k, v)
    return h


def test_hostile_keys_each_arrive_apart_with_their_own_values(harness, root):
    run = trackstore.init("keys", name="hostile", root=root)
    for step in (0, 1):
        run.log({k: i + step * 1000 + 0.5 for i, k in enumerate(HOSTILE)}, step=step)
    run.finish()
    names = remote_names(harness.target, HOSTILE)

    dry = run_cli("sync", *harness.cli_args(), "--dry-run", "--format", "json", root=root, timeout=300)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    dry_reasons = json.loads(dry.stdout)["runs"][0]["skipped_by_reason"]

    res = run_cli("sync", *harness.cli_args(), "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)["runs"][0]
    assert out["result"] == "ok"
    mapping = renamed(harness.target, HOSTILE)
    for k, rk in mapping.items():  # every renaming is named, in the summary and the dry run
        line = f"key {k!r} sent as {rk!r}"
        assert any(r.startswith(line) for r in out["skipped_by_reason"]), line
        assert any(r.startswith(line) for r in dry_reasons), line
    assert sum(out["skipped_by_reason"].values()) == 0  # renamed, never dropped

    got: dict[str, list] = {}
    for key, step, value, _ts in harness.metrics("keys", run.id):
        got.setdefault(key, []).append((step, value))
    want = {names[k]: [(0, i + 0.5), (1, i + 1000.5)] for i, k in enumerate(HOSTILE)}
    assert {k: sorted(v) for k, v in got.items()} == want

    again = run_cli("sync", *harness.cli_args(), "--format", "json", root=root, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(harness.metrics("keys", run.id)) == sorted(
        (k, s, v, ts) for k, s, v, ts in harness.metrics("keys", run.id))
    assert sum(len(v) for v in got.values()) == 2 * len(HOSTILE)


def test_mlflow_names_do_not_depend_on_batches_and_stay_across_syncs(root, tmp_path):
    """Against MLflow (sqlite): a key whose readable name another key of the run *is* gets the
    hash even when the two keys travel in different batches (50 points each); a key synced
    under a name keeps it when a later sync of the resumed run brings a key that is that name."""
    from mlflow.tracking import MlflowClient

    uri = mlflow_sqlite_uri(tmp_path, "names.db")
    run = trackstore.init("keys", name="batches", root=root)
    for s in range(120):  # "acc@1" in the first batches only, "acc_at_1" in the last one
        run.log({"acc@1": float(s)} if s < 110 else {"acc_at_1": float(s), "val/mean@4": 1.0}, step=s)
    run.log({"first@1": 1.0}, step=120)
    run.finish()

    def sync():
        res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--batch-size", "50", "--format", "json", root=root,
                      timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout)["runs"][0]

    dry = run_cli("sync", "--to", "mlflow", "--uri", uri, "--dry-run", "--format", "json", root=root)
    out = sync()
    want = {"acc@1": mlflow_key("acc@1"), "val/mean@4": "val/mean_at_4", "first@1": "first_at_1"}
    for reasons in (out["skipped_by_reason"], json.loads(dry.stdout)["runs"][0]["skipped_by_reason"]):
        assert {r.split(" (")[0] for r in reasons} == {f"key {k!r} sent as {v!r}" for k, v in want.items()}
    client = MlflowClient(tracking_uri=uri)
    [remote] = client.search_runs([client.get_experiment_by_name("keys").experiment_id])
    assert len(client.get_metric_history(remote.info.run_id, "acc_at_1")) == 10
    assert len(client.get_metric_history(remote.info.run_id, mlflow_key("acc@1"))) == 110

    # resumed: a key that *is* the name "first_at_1" arrives after "first@1" was synced under it
    run = trackstore.init("keys", run_id=run.id, resume=True, root=root)
    run.log({"first_at_1": 2.0, "first@1": 3.0}, step=121)
    run.finish()
    dry = run_cli("sync", "--to", "mlflow", "--uri", uri, "--dry-run", "--format", "json", root=root)
    out = sync()
    assert out["result"] == "ok", out
    assert json.loads(dry.stdout)["runs"][0]["skipped_by_reason"] == out["skipped_by_reason"]  # the cursor's names
    first = client.get_metric_history(remote.info.run_id, "first_at_1")
    assert sorted((m.step, m.value) for m in first) == [(120, 1.0), (121, 3.0)]  # the name it had
    moved = mlflow_names(["first_at_1"], {"first@1": "first_at_1"})["first_at_1"]
    assert moved != "first_at_1" and [m.value for m in client.get_metric_history(remote.info.run_id, moved)] == [2.0]
    assert f"key 'first_at_1' sent as {moved!r}" in " ".join(out["skipped_by_reason"])
