"""--dry-run predicts the sync: for every target, on a store of edge cases, the skips a dry run
plans (per reason, counted) are the ones the real sync then reports.

The dry run goes the sync's way up to sending: the same pending rows, the same batches in the
same order (``--batch-size 2`` here, so a rule that depends on earlier batches shows), and the
target's own plan of each batch (``Adapter.unsupported``) played on a scratch copy of the state
the cursor keeps (SwanLab's first value per (key, step)). A second sync after late rows arrive
checks the same against the state the first one left.
"""

from __future__ import annotations

import json

import pytest

import trackstore
from tests.helpers import run_cli
from tests.query_fixtures import part

pytestmark = pytest.mark.xdist_group("sync_dry_run")


def _skips(harness, root, *extra: str) -> dict[str, int]:
    res = run_cli("sync", *harness.cli_args(), "--batch-size", "2", "--format", "json", *extra, root=root)
    assert res.returncode == 0, res.stdout + res.stderr
    [r] = json.loads(res.stdout)["runs"]
    return {k: v for k, v in r["skipped_by_reason"].items() if v}


def _dry_then_real(harness, root) -> dict[str, int]:
    planned = _skips(harness, root, "--dry-run")
    done = _skips(harness, root)
    assert planned == done, (planned, done)
    return done


def test_dry_run_reports_the_skips_the_sync_reports(harness, root):
    run = trackstore.init("p", name="edges", root=root)
    run.log({"x": 1.0, "n": None}, step=0)  # a null value
    run.log({"x": 2.0, "weird key!": 1.0}, step=1)
    run.log({"x": 0.5}, step=0)  # a late point, and a second value at step 0
    run.log({"x": 3.0}, step=1)  # a second value at step 1, in another batch than the first
    run.log_samples([{"input": "p", "output": "r"}], split="val", step=1)
    run.log({"h": trackstore.Histogram([1.0, 2.0, 3.0], bins=3)}, step=1)
    run.finish()
    part(root, "p", run.id, "spans", [
        {"trace_id": "t1", "span_id": "r", "name": "rollout", "kind": "agent", "step": 1, "start_ns": 0,
         "end_ns": 9, "status": "ok"},
        {"trace_id": "t2", "span_id": "c", "parent_span_id": "gone", "name": "rootless", "kind": "llm", "step": 1,
         "start_ns": 5, "end_ns": 6, "status": "error"},
    ], writer="w9")
    first = _dry_then_real(harness, root)
    if harness.target in ("mlflow", "wandb"):  # whole trajectories: one without a root is reported
        assert any("root span" in k for k in first), first
    reason, _kept = harness.second_value()
    if reason is not None:
        assert reason in first, first  # the edge this test is about is really there

    # rows logged after the first sync, at steps the target already holds: what the target
    # does with them depends on what the first sync left in the cursor
    part(root, "p", run.id, "metrics", [
        {"step": 0, "key": "x", "value": 7.0}, {"step": 1, "key": "x", "value": 8.0},
        {"step": 2, "key": "x", "value": 9.0},
    ], writer="w8")
    _dry_then_real(harness, root)


def test_a_live_run_with_config_and_no_rows_is_planned_as_the_sync_creates_it(tmp_path, monkeypatch, root):
    """A run that started, set its config and logged nothing yet: the sync creates the remote
    run and sends the config, so the dry run must say so, not "up to date"."""
    from tests.sync_harness import MlflowHarness

    mlflow = MlflowHarness(tmp_path, monkeypatch)
    run = trackstore.init("p", name="warming-up", root=root, config={"lr": 1e-6, "model": "qwen"})
    run.flush()
    try:
        dry = run_cli("sync", *mlflow.cli_args(), "--dry-run", "--format", "json", root=root)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        [planned] = json.loads(dry.stdout)["runs"]
        assert planned["status"] == "running" and planned["result"] != "up to date", planned
        assert planned["plan"]["remote"] == "find or create" and planned["plan"]["metadata"], planned
        assert mlflow.remote_run_count("p", run.id) == 0  # a dry run creates nothing

        text = run_cli("sync", *mlflow.cli_args(), "--dry-run", root=root)
        assert "already up to date" not in text.stdout and "create" in text.stdout, text.stdout

        real = run_cli("sync", *mlflow.cli_args(), "--format", "json", root=root)
        assert real.returncode == 0, real.stdout + real.stderr
        [done] = json.loads(real.stdout)["runs"]
        assert done["result"] == "ok", done
        [remote] = mlflow._runs("p", run.id)
        assert remote.data.params["lr"] == "1e-06" and remote.data.params["model"] == "qwen", remote.data.params

        # and now it is: the dry run and the sync agree on that too
        again = json.loads(run_cli("sync", *mlflow.cli_args(), "--dry-run", "--format", "json", root=root).stdout)
        assert again["runs"][0]["result"] == "up to date", again
    finally:
        run.finish()
