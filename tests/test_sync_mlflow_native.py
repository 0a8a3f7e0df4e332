"""What a synced run looks like in MLflow's own terms, read back with MlflowClient: trace
previews, error spans, span types, trace tags to filter on, samples as logged tables,
histograms drawn, bookkeeping tags out of sight. (The same data in a real browser:
tests/test_ui_platforms.py.)"""

from __future__ import annotations

import json

import pytest

import trackstore
from tests.helpers import mlflow_sqlite_uri, run_cli

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


def agent_run(root, *, steps=(3, 4), project="agent-rl"):
    """A run whose trajectories have a user question, a chat turn, a failed tool call, a retry,
    a final answer and a reward span; validation samples with a chat input; a histogram."""
    run = trackstore.init(project, name="agent", config={"lr": 1e-6, "model": {"name": "tiny"}}, tags=["grpo"],
                          root=root)
    for step in steps:
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        run.log({"actor/entropy": trackstore.Histogram(counts=[1, 4, 2], edges=[0.0, 0.5, 1.0, 1.5])}, step=step)
        run.log_samples([{"input": [{"role": "user", "content": f"What is {i} + {step}?"}],
                          "output": f"It is {i + step}.", "score": float(i % 2), "ground_truth": str(i + step)}
                         for i in range(3)], step=step, split="val")
        for i in range(2):
            with run.trace(step=step, sample_index=i, rollout_n=0) as tr:
                with tr.span("user", kind="other", inputs={"content": f"Q{step}.{i}: what is 6 * 7?"}):
                    pass
                with tr.span("assistant", kind="llm", inputs=[{"role": "system", "content": "be brief"},
                                                              {"role": "user", "content": "6 * 7"}]) as turn:
                    with pytest.raises(ZeroDivisionError):
                        with tr.span("calculator", kind="tool", inputs={"expression": "6 / 0"}):
                            raise ZeroDivisionError("division by zero")
                    with tr.span("calculator", kind="tool", inputs={"expression": "6 * 7"}) as tool:
                        tool.set_outputs(42)
                    turn.set_outputs({"role": "assistant", "content": f"A{step}.{i}: the answer is 42."})
                with tr.span("reward", kind="reward", inputs={"answer": 42}) as rw:
                    rw.set_outputs(1.0)
                tr.set_reward(1.0)
    run.finish()
    return run


# the two tests reading `synced` share one sync (they only read): kept on one worker by
# `make test` (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_sync_mlflow_native")


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("native")
    root = tmp_path / "store"
    root.mkdir()
    run = agent_run(root)
    uri = mlflow_sqlite_uri(tmp_path, "native.db")
    res = run_cli("sync", "--to", "mlflow", "--uri", uri, "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("agent-rl")
    [remote] = client.search_runs([exp.experiment_id])
    return run, client, exp.experiment_id, remote, json.loads(res.stdout)["runs"][0]


def test_traces_have_previews_errors_types_and_filterable_tags(synced):
    run, client, exp_id, remote, out = synced
    traces = client.search_traces(locations=[exp_id], max_results=100)
    assert len(traces) == 4
    for t in traces:
        step, index = t.info.tags["trackstore.step"], t.info.tags["trackstore.sample_index"]
        assert t.info.request_preview == f"Q{step}.{index}: what is 6 * 7?"
        assert t.info.response_preview == f"A{step}.{index}: the answer is 42."
        assert t.info.state.value == "ERROR"  # one tool call failed: the trace list says so
        failed = [s for s in t.data.spans if s.name == "calculator" and s.status.status_code.value == "ERROR"]
        assert len(failed) == 1
        [event] = failed[0].events
        assert event.name == "exception"
        assert event.attributes["exception.type"] == "ZeroDivisionError"
        assert event.attributes["exception.message"] == "division by zero"
        assert failed[0].status.description == "ZeroDivisionError: division by zero"
        types = {s.name: s.span_type for s in t.data.spans}
        assert types["reward"] == "EVALUATOR" and types["assistant"] == "LLM" and types["calculator"] == "TOOL"
        # the spans' own inputs stay as logged
        assistant = next(s for s in t.data.spans if s.name == "assistant")
        assert assistant.inputs[1] == {"role": "user", "content": "6 * 7"}

    found = client.search_traces(locations=[exp_id],
                                 filter_string="tags.`trackstore.step` = '4' AND tags.`trackstore.sample_index` = '1'")
    assert [t.info.request_preview for t in found] == ["Q4.1: what is 6 * 7?"]


def test_samples_are_tables_histograms_are_step_images_and_bookkeeping_is_hidden(synced):
    run, client, exp_id, remote, out = synced
    rid = remote.info.run_id
    listed = json.loads(remote.data.tags["mlflow.loggedArtifacts"])
    tables = sorted(e["path"] for e in listed if e["type"] == "table")
    assert len(tables) == 2 and all(p.startswith("trackstore/samples/val/step_00000000") for p in tables)
    mlflow.set_tracking_uri(client.tracking_uri)  # load_table searches through the fluent API
    df = client.load_table(exp_id, tables[1], run_ids=[rid])  # MLflow's own table reader
    # the Evaluation view groups by the first column: one row per sample (docs/sync.md)
    assert list(df.columns)[:6] == ["sample_index", "input", "output", "score", "step", "ground_truth"]
    assert "ts" not in df.columns and "json_fields" not in df.columns and "seq" not in df.columns
    assert df["input"].tolist() == [f"user: What is {i} + 4?" for i in range(3)]  # a chat, readable
    assert df["output"].tolist() == [f"It is {i + 4}." for i in range(3)]

    images = [f.path for f in client.list_artifacts(rid, "images")]
    pngs = sorted(p for p in images if p.endswith(".png"))
    assert len(pngs) == 2 and len([p for p in images if p.endswith("+compressed.webp")]) == 2
    assert [p.split("+")[:3] for p in pngs] == [["images/actor~entropy", "step", "3"], ["images/actor~entropy", "step", "4"]]
    assert remote.data.tags["mlflow.loggedImages"] == "True"

    visible = [k for k in remote.data.tags if not k.startswith("mlflow.")]
    assert not [k for k in visible if "batch" in k or "digest" in k], visible
    assert remote.data.tags["mlflow.trackstore.batch.metrics"]


def test_resending_samples_and_histograms_after_a_cut_adds_nothing(root, tmp_path):
    """An in-doubt batch is sent again whole (reconcile returns it): same file names, same list."""
    from tests.sync_harness import MlflowHarness
    from trackstore.read.reader import read_kind
    from trackstore.sync.adapter import TargetOptions
    from trackstore.sync.mlflow import MlflowAdapter

    run = agent_run(root, steps=(1,))
    uri = mlflow_sqlite_uri(tmp_path, "again.db")
    assert run_cli("sync", "--to", "mlflow", "--uri", uri, root=root, timeout=300).returncode == 0
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("agent-rl")
    [remote] = client.search_runs([exp.experiment_id])
    rid = remote.info.run_id
    before = sorted(f.path for f in client.list_artifacts(rid, "images")), remote.data.tags["mlflow.loggedArtifacts"]
    adapter = MlflowAdapter(TargetOptions(uri=uri, store_root=str(root)))
    for kind in ("samples", "histograms"):
        adapter.send(kind, read_kind(run.paths, kind), type("C", (), {"remote": {"run_id": rid}, "remote_id": rid})(),
                     f"resend-{kind}")
    after = (sorted(f.path for f in client.list_artifacts(rid, "images")),
             client.get_run(rid).data.tags["mlflow.loggedArtifacts"])
    assert after == before
    assert MlflowHarness  # the conformance suite (test_sync_conformance.py) covers exactly-once of every kind
