"""Samples round-trip: what log_samples was given is what pyarrow and DuckDB give back."""

from __future__ import annotations

import json
import math

import duckdb
import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.records.samples import decode_row


def read_samples(run) -> list[dict]:
    rows = pq.read_table(run.dir / "samples").to_pylist()
    return sorted(rows, key=lambda r: r["seq"])


MB_TEXT = ("强化学习 reinforcement learning — ✓ " * 40_000)[:1_000_000]


def test_roundtrip_unicode_large_nested_nan(root):
    call = {"name": "search", "args": {"q": [1, 2.5, None]}}
    messages = [{"role": "user", "content": "写一首诗"},
                {"role": "assistant", "content": "🌙 床前明月光", "tool_calls": [call]}]
    rows = [
        {"input": "Ünïcödé ✓ مرحبا こんにちは 🚀", "output": "ok\n\ttabs\x00nul", "score": 1.0},
        {"input": MB_TEXT, "output": MB_TEXT[::-1], "score": 0.5},
        {"input": messages, "output": {"answer": 42, "steps": [], "nested": {"deep": [[], {}]}}, "score": float("nan")},
        {"input": "", "output": "", "score": None, "ground_truth": "42", "reward/format": 0.2, "tokens": [],
         "group_id": "g-7", "acc": float("nan")},
        ("verl prompt", "verl response", 0.0),
        ("tuple without score", "x"),
    ]
    run = trackstore.init("p", root=root)
    assert run.log_samples(rows, step=7) == len(rows)
    run.finish()
    got = [decode_row(r) for r in read_samples(run)]
    assert [r["sample_index"] for r in got] == list(range(6))
    assert {r["step"] for r in got} == {7} and {r["split"] for r in got} == {"val"}
    assert got[0]["input"] == rows[0]["input"] and got[0]["output"] == rows[0]["output"]
    assert got[1]["input"] == MB_TEXT and got[1]["output"] == MB_TEXT[::-1] and len(got[1]["input"]) == 1_000_000
    assert got[2]["input"] == messages and got[2]["output"] == rows[2]["output"] and math.isnan(got[2]["score"])
    assert got[3]["score"] is None and got[3]["ground_truth"] == "42" and got[3]["tokens"] == []
    assert got[3]["reward/format"] == 0.2 and math.isnan(got[3]["acc"]) and got[3]["input"] == ""
    assert (got[4]["input"], got[4]["output"], got[4]["score"]) == ("verl prompt", "verl response", 0.0)
    assert got[5]["score"] is None
    assert got[0]["ts"].tzinfo is not None


def test_duckdb_reads_samples_and_json(root):
    run = trackstore.init("p", root=root)
    run.log_samples([{"input": [{"role": "user", "content": "hi"}], "output": "yo", "score": 2, "reward/acc": 1}],
                    step=3, split="rollout")
    run.finish()
    con = duckdb.connect()
    glob = str(run.dir / "samples" / "*.parquet")
    row = con.execute(
        "SELECT step, split, score, json_extract_string(input, '$[0].content'), "
        "CAST(json_extract(extra, '$.\"reward/acc\"') AS DOUBLE), json_fields FROM read_parquet(?)", [glob]
    ).fetchone()
    assert row == (3, "rollout", 2.0, "hi", 1.0, ["input"])


def test_sample_index_continues_across_calls_and_splits(root):
    run = trackstore.init("p", root=root)
    run.log_samples([("a", "b", 1)], step=1)
    run.log_samples([("c", "d", 1), ("e", "f", 1)], step=1)
    run.log_samples([("g", "h", 1)], step=1, split="train")
    run.log_samples([{"input": "i", "output": "j", "sample_index": 10}, ("k", "l", 0)], step=1)
    run.log_samples([("m", "n", 1)], step=2)
    run.finish()
    idx = [(r["step"], r["split"], r["input"], r["sample_index"]) for r in read_samples(run)]
    assert idx == [(1, "val", "a", 0), (1, "val", "c", 1), (1, "val", "e", 2), (1, "train", "g", 0),
                   (1, "val", "i", 10), (1, "val", "k", 11), (2, "val", "m", 0)]


def test_default_step_is_run_step(root):
    run = trackstore.init("p", root=root)
    run.log({"x": 1.0}, step=4)
    run.log_samples([("a", "b", 1)])
    run.finish()
    assert read_samples(run)[0]["step"] == 5


def test_numpy_scores_and_surrogates(root):
    np = pytest.importorskip("numpy")
    run = trackstore.init("p", root=root)
    run.log_samples([{"input": "bad \udcff byte", "output": "o", "score": np.float32(0.25)},
                     {"input": "i", "output": "o", "score": np.int64(3), "sample_index": np.int64(5)}], step=0)
    run.finish()
    rows = read_samples(run)
    assert rows[0]["input"] == "bad \\udcff byte" and rows[0]["score"] == 0.25
    assert rows[1]["score"] == 3.0 and rows[1]["sample_index"] == 5


def test_bad_rows_raise_before_anything_is_stored(root):
    run = trackstore.init("p", root=root)
    with pytest.raises(ValueError, match="row 1 has no output"):
        run.log_samples([("ok", "ok", 1), {"input": "x"}], step=1)
    with pytest.raises(ValueError, match="score must be a number"):
        run.log_samples([{"input": "x", "output": "y", "score": "high"}], step=1)
    with pytest.raises(ValueError, match="list of rows"):
        run.log_samples({"input": "x", "output": "y"}, step=1)
    with pytest.raises(ValueError, match="row 0 is a int"):
        run.log_samples([5], step=1)
    with pytest.raises(ValueError, match="split"):
        run.log_samples([("a", "b", 1)], split="")
    with pytest.raises(trackstore.UsageError, match="unknown"):
        run.log_samples([("a", "b", 1)], stepp=3)
    assert run.log_samples([]) == 0
    run.finish()
    assert not (run.dir / "samples").exists()
    with pytest.raises(trackstore.UsageError, match="finished"):
        run.log_samples([("a", "b", 1)])


def test_dataframe_rows(root):
    pd = pytest.importorskip("pandas")
    run = trackstore.init("p", root=root)
    df = pd.DataFrame({"input": ["p1", "p2"], "output": ["c1", "c2"], "score": [0.1, 0.2], "advantage": [1.0, -1.0]})
    assert run.log_samples(df, step=2, split="train") == 2
    run.finish()
    rows = [decode_row(r) for r in read_samples(run)]
    assert [(r["input"], r["advantage"]) for r in rows] == [("p1", 1.0), ("p2", -1.0)]


def test_extra_is_valid_json_object(root):
    run = trackstore.init("p", root=root)
    run.log_samples([{"input": "a", "output": "b", "score": 1, "meta": {"k": (1, 2)}}], step=0)
    run.finish()
    assert json.loads(read_samples(run)[0]["extra"]) == {"meta": {"k": [1, 2]}}


def test_config_updates_are_recorded_with_time(root):
    run = trackstore.init("p", root=root, config={"lr": 1e-3})
    run.config["lr"] = 5e-4
    run.config.update({"batch": 64, "tmp": 1})
    del run.config["tmp"]
    run.flush()
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["config"] == {"lr": 5e-4, "batch": 64}
    updates = [(u["key"], u["value"], u.get("deleted", False)) for u in meta["config_updates"]]
    assert updates == [("lr", 5e-4, False), ("batch", 64, False), ("tmp", 1, False), ("tmp", None, True)]
    assert all("T" in u["at"] for u in meta["config_updates"])
    run.finish()


def test_user_summary_overrides_automatic_summary(root):
    run = trackstore.init("p", root=root)
    run.log({"acc": 0.1}, step=0)
    run.log({"acc": 0.9, "loss": 0.5}, step=1)
    run.summary["acc"] = 0.42  # e.g. the best, not the last
    run.finish()
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["summary"]["acc"] == 0.42 and meta["summary"]["loss"] == 0.5


def test_config_and_summary_hard_values_roundtrip(root):
    from trackstore.read.listing import list_runs

    config = {"lr": float("nan"), "clip": float("inf"), "模型": {"名前": "千问 ✓", "layers": [], "opt": {}},
              "nested": {"a": [[], {"b": None}], "emoji": "🤖"}, "flag": False}
    run = trackstore.init("p", root=root, run_id="r", config=config)
    run.config["warmup/比例"] = float("nan")
    run.config.update({"stages": [{"name": "第一阶段", "steps": []}]})
    run.log({"loss": float("nan"), "acc": 0.5}, step=0)
    run.summary["best/准确率"] = float("nan")
    run.summary["table"] = {"rows": [], "note": "ünïcödé"}
    run.finish()
    expected_config = {**config, "warmup/比例": float("nan"), "stages": [{"name": "第一阶段", "steps": []}]}

    def same(got, want) -> None:  # equality where NaN equals NaN
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), (got, want)
        elif isinstance(want, dict):
            assert isinstance(got, dict) and list(got) == list(want), (got, want)
            for k in want:
                same(got[k], want[k])
        elif isinstance(want, (list, tuple)):
            assert type(got) is type(want) and len(got) == len(want), (got, want)
            for g, w in zip(got, want):
                same(g, w)
        else:
            assert got == want and type(got) is type(want), (got, want)

    expected_summary = {"loss": float("nan"), "acc": 0.5, "best/准确率": float("nan"),
                        "table": {"rows": [], "note": "ünïcödé"}}
    meta = json.loads((run.dir / "run.json").read_text(encoding="utf-8"))
    same(meta["config"], expected_config)
    same({k: meta["summary"][k] for k in expected_summary}, expected_summary)
    same([[u["key"], u["value"]] for u in meta["config_updates"]],
         [["warmup/比例", float("nan")], ["stages", [{"name": "第一阶段", "steps": []}]]])
    [info] = list_runs(root)
    same(info.row()["config"], expected_config)
    con = trackstore.connect(root)
    cfg, summ = con.execute("SELECT config, summary FROM runs").fetchone()
    same(json.loads(cfg), expected_config)
    same({k: json.loads(summ)[k] for k in expected_summary}, expected_summary)
    row = con.execute("SELECT json_extract_string(config, '$.模型.名前'), json_extract(config, '$.模型.layers'), "
                      "CAST(json_extract(config, '$.lr') AS DOUBLE), json_extract_string(summary, '$.table.note') "
                      "FROM runs").fetchone()
    assert row[0] == "千问 ✓" and row[1] == "[]" and math.isnan(row[2]) and row[3] == "ünïcödé"
    # a resumed attempt starts from the same config
    run2 = trackstore.init("p", root=root, run_id="r", resume=True)
    same(dict(run2.config), expected_config)
    run2.finish()
