"""Basic run lifecycle: what is logged is what is on disk, and run.json says what happened."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.read.listing import list_runs


def read_metrics(run):
    return pq.read_table(run.dir / "metrics").to_pylist()


def test_log_roundtrip(root):
    run = trackstore.init("p", name="exp", config={"lr": 1e-3, "model": {"layers": 4}}, tags=["a"], root=root)
    run.log({"loss": 1.5, "acc": 1}, step=3)
    run.log({"nested": {"x": 2.0}, "flag": True, "nan": float("nan"), "inf": float("inf")})
    run.finish()
    rows = read_metrics(run)
    got = {(r["step"], r["key"]): r["value"] for r in rows}
    assert got[(3, "loss")] == 1.5 and got[(3, "acc")] == 1.0
    assert got[(4, "nested/x")] == 2.0 and got[(4, "flag")] == 1.0
    assert math.isnan(got[(4, "nan")]) and got[(4, "inf")] == math.inf
    assert sorted(r["seq"] for r in rows) == list(range(len(rows)))
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["config"]["model"] == {"layers": 4}
    assert meta["summary"]["loss"] == 1.5 and meta["tags"] == ["a"]
    assert [r.status for r in list_runs(root)] == ["finished"]


def test_context_manager_marks_failed(root):
    with pytest.raises(RuntimeError):
        with trackstore.init("p", root=root) as run:
            run.log({"x": 1})
            raise RuntimeError("boom")
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["status"] == "failed" and "boom" in meta["error"]


def test_bad_values_fail_early(root):
    run = trackstore.init("p", root=root)
    with pytest.raises(ValueError, match="string"):
        run.log({"x": "not a number"})
    with pytest.raises(ValueError, match="key"):
        run.log({"": 1.0})
    run.log({"ok": 1.0})
    run.finish()
    assert [r["key"] for r in read_metrics(run)] == ["ok"]


def test_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, trackstore; print(sorted(m for m in ('duckdb','pyarrow','wandb','mlflow','swanlab','torch','rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
