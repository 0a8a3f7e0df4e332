"""Every SQL block in docs/sql.md runs against a simulated store, so the cookbook cannot drift."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_cli
from tests.query_fixtures import part
from trackstore.cli.demo import simulate_grpo
from trackstore.read.listing import resolve_run
from trackstore.read.views import VIEWS, connect, run_sql

DOC = (__import__("pathlib").Path(__file__).resolve().parent.parent / "docs" / "sql.md").read_text()
BLOCKS = re.findall(r"```sql\n(.*?)```", DOC, re.S)
# rows expected from the simulated store, by a phrase of the block
EXPECT_ROWS = ("best_score", "ILIKE", "start_entropy", "worst_kl", "mean_score", "AS value", "phase", "tool_calls", "IS DISTINCT FROM", "mb")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("docstore")
    a = simulate_grpo(root=root, steps=40, seed=1, val_every=10)
    b = simulate_grpo(root=root, name="hot-lr", steps=30, seed=2, val_every=10)
    b_meta = resolve_run(b.id, root)
    spans = [
        {"trace_id": "t1", "span_id": "r", "name": "rollout", "kind": "agent", "step": 10, "reward": 1.0,
         "start_ns": 0, "end_ns": 9_000_000, "status": "ok"},
        {"trace_id": "t1", "span_id": "c1", "parent_span_id": "r", "name": "python", "kind": "tool", "step": 10,
         "start_ns": 1_000_000, "end_ns": 4_000_000, "status": "ok"},
    ]
    part(root, b_meta.project, b.id, "spans", spans, writer="doc")
    part(root, b_meta.project, b.id, "artifacts", [{"name": "policy", "version": 0, "type": "model", "digest": "d",
                                                    "path": "artifacts/policy/v0/m.bin", "logical_path": "m.bin",
                                                    "size": 2_000_000, "sha256": "s"}], writer="doc")
    return root, a, b


def params_for(sql: str, a, b) -> dict:
    values = {"threshold": "0.004", "phrase": "Let me", "lo": "10", "hi": "20", "run": a.id, "fraction": "0.5",
              "a": a.id, "b": b.id}
    return {k: v for k, v in values.items() if f"${k}" in sql}


def test_doc_has_a_cookbook():
    assert len(BLOCKS) >= 12
    for view in VIEWS:
        assert f"### {view}" in DOC, view


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_sql_block_runs(store, index):
    root, a, b = store
    sql = BLOCKS[index]
    con = connect(root)
    table = run_sql(con, sql, params_for(sql, a, b))
    if any(marker in sql for marker in EXPECT_ROWS):
        assert table.num_rows > 0, sql


def test_cookbook_through_the_cli(store):
    root, a, b = store
    sql = next(s for s in BLOCKS if "worst_kl" in s)
    res = run_cli("sql", sql, "--param", "threshold=0.004", "-f", "csv", root=root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("project,run_id,first_step,worst_kl")
