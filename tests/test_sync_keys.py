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
from trackstore.sync.keys import MLFLOW_MAX_KEY, SWANLAB_MAX_KEY, mlflow_key, renamed, swanlab_key, wandb_key

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
    assert renamed("mlflow", ["loss", "a#b"]) == {"a#b": mlflow_key("a#b")}


def test_every_mapped_key_passes_mlflows_own_validation():
    from mlflow.utils.validation import _validate_metric_name, _validate_tag_name

    for k in HOSTILE:
        _validate_metric_name(mlflow_key(k))
        _validate_tag_name(mlflow_key(k))


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
    rule = RULES[harness.target]

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
    want = {rule(k): [(0, i + 0.5), (1, i + 1000.5)] for i, k in enumerate(HOSTILE)}
    assert {k: sorted(v) for k, v in got.items()} == want

    again = run_cli("sync", *harness.cli_args(), "--format", "json", root=root, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(harness.metrics("keys", run.id)) == sorted(
        (k, s, v, ts) for k, s, v, ts in harness.metrics("keys", run.id))
    assert sum(len(v) for v in got.values()) == 2 * len(HOSTILE)
