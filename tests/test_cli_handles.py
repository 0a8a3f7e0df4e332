"""Run handles: the short form listings show for a run id, and every run reference accepts.

A shortened generated id used to be its date (``20261205``), which every run of the day
shares. A handle is the id's random end (a chosen id: its unique prefix), unique in the store.
Also: run names and metric keys stay readable in tables at 80 columns.
"""

from __future__ import annotations

import json
import re

import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.read.listing import list_runs, resolve_run
from trackstore.read.refs import handles

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    header = next(line for line in lines if line.startswith("┃"))
    body = [line for line in lines if line.startswith("│")]
    return ([c.strip() for c in header.strip("┃").split("┃")],
            [[c.strip() for c in line.strip("│").split("│")] for line in body])


def test_handle_is_the_random_end_of_a_generated_id():
    ids = ["20261204-062115546-e01ueed1", "20261204-062116884-f9ad6lwv", "20261130-101010000-aaaaaaaa"]
    assert handles(ids) == {ids[0]: "e01ueed1", ids[1]: "f9ad6lwv", ids[2]: "aaaaaaaa"}
    # the same random end twice: more characters from the right, never a leading '-'
    twin = "20261204-062117000-e01ueed1"
    got = handles([ids[0], twin])
    assert got == {ids[0]: "6-e01ueed1", twin: "0-e01ueed1"}
    # a chosen id starting like another's handle makes that handle longer
    assert handles([ids[0]], ["e01ueed1-mine"])[ids[0]] == "6-e01ueed1"


def test_handle_of_a_chosen_id_is_its_unique_prefix():
    assert handles(["grpo-baseline-lr1e-6", "grpo-baseline-lr3e-6"]) == {
        "grpo-baseline-lr1e-6": "grpo-baseline-lr1", "grpo-baseline-lr3e-6": "grpo-baseline-lr3"}
    assert handles(["abc"], ["abcdef"]) == {"abc": "abc"}  # a prefix of another id stays whole
    assert handles(["run-1"]) == {"run-1": "run-1"}  # short ids stay whole


@pytest.fixture
def day_store(tmp_path):
    """Three runs of one day named alike (a sweep), one with a chosen id."""
    root = tmp_path / "store"
    for i, rid in enumerate([None, None, "grpo-baseline-lr3e-6"]):
        r = trackstore.init("grpo-gsm8k", name=f"qwen2.5-0.5b-grpo-gsm8k-lr{i}e-6-seed1", run_id=rid, root=root)
        r.log({"actor/entropy": 1.0, "val-core/openai/gsm8k/reward/mean@1": 0.5}, step=1)
        r.finish()
    return root


def test_runs_at_80_columns_shows_handles_that_resolve(day_store):
    out = run_cli("runs", root=day_store, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    header, rows = table(out.stdout)
    shown = [row[header.index("run_id")] for row in rows]
    ids = [r.run_id for r in list_runs(day_store)]
    expected = handles(ids)
    assert sorted(shown) == sorted(expected.values())
    assert not any(s.startswith("2026") or s.startswith("20") and len(s) == 8 for s in shown[:2])
    # the names of a sweep stay whole and told apart
    names = [row[header.index("name")] for row in rows]
    assert len(set(names)) == 3 and all(n.endswith("-seed1") for n in names), names
    for handle in shown:  # every command that takes a run accepts the handle
        res = run_cli("show", handle, "--format", "json", root=day_store)
        assert res.returncode == 0, res.stderr
        assert expected[json.loads(res.stdout)[0]["run_id"]] == handle
        res = run_cli("sql", "-r", handle, "-f", "csv", "SELECT count(*) AS n FROM metrics", root=day_store)
        assert res.returncode == 0 and res.stdout.splitlines()[1] == "2", res.stderr
    for line in out.stdout.splitlines():
        assert len(ANSI.sub("", line)) <= 80


def test_show_prints_the_handle_and_resolver_accepts_project_handle(day_store):
    info = [r for r in list_runs(day_store) if r.run_id != "grpo-baseline-lr3e-6"][0]
    handle = info.run_id[-8:]
    out = run_cli("show", info.run_id, root=day_store, env={"COLUMNS": "80"})
    assert re.search(rf"│ handle\s+│ {handle}\s", ANSI.sub("", out.stdout)), out.stdout
    assert resolve_run(f"grpo-gsm8k/{handle}", day_store).run_id == info.run_id
    assert resolve_run(handle, day_store).run_id == info.run_id


def test_sql_one_run_keeps_key_step_value_at_80_columns(day_store):
    res = run_cli("sql", "-r", "grpo-baseline-lr3", "SELECT * FROM metrics", root=day_store, env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    header, rows = table(res.stdout)
    assert {"key", "step", "value"} <= set(header), header
    assert "project" not in header and "run_id" not in header
    assert sorted(row[header.index("key")] for row in rows) == ["actor/entropy", "val-core/openai/gsm8k/reward/mean@1"]
    text = ANSI.sub("", res.stdout)
    assert "(hidden: project, run_id" in text and "--format csv" in text
    assert all(len(line) <= 80 for line in text.splitlines())
