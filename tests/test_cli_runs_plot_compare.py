"""``trackstore runs`` filters, ``show`` metric overview, ``compare`` and ``plot``, end to end."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import run_cli
from tests.query_fixtures import make_run
from trackstore.store.clock import iso


@pytest.fixture
def store(root):
    a = make_run(root, "grpo", "base", steps=50, config={"lr": 1e-6, "kl": {"coef": 0.1}, "seed": 1}, tags=["base", "v1"])
    b = make_run(root, "grpo", "hot", steps=40, config={"lr": 1e-5, "kl": {"coef": 0.1}, "seed": 2}, tags=["v1"],
                 metrics=lambda s: {"loss": 2.0 / (s + 1), "reward": s / 20, "actor/kl": float(s * s)})
    c = make_run(root, "ppo", "base", steps=5)
    return root, a, b, c


def names(res):
    assert res.returncode == 0, res.stderr
    return [r["name"] + "@" + r["project"] for r in json.loads(res.stdout)]


def test_runs_filters_and_sort(store):
    root, a, b, c = store
    assert names(run_cli("runs", "-f", "json", root=root)) == ["base@grpo", "hot@grpo", "base@ppo"]
    assert names(run_cli("runs", "-p", "grpo", "--tag", "v1", "--sort", "-created_at", "-f", "json", root=root)) == \
        ["hot@grpo", "base@grpo"]
    assert names(run_cli("runs", "--tag", "v1", "--tag", "base", "-f", "json", root=root)) == ["base@grpo"]
    assert names(run_cli("runs", "--where", "(config->>'lr')::DOUBLE > $lr", "--param", "lr=2e-6", "-f", "json",
                         root=root)) == ["hot@grpo"]
    assert names(run_cli("runs", "--where", "run_id IN (SELECT run_id FROM latest WHERE key = 'actor/kl' AND value > 100)",
                         "-f", "json", root=root)) == ["hot@grpo"]
    assert names(run_cli("runs", "--status", "finished", "--sort", "name", "-n", "2", "-f", "json", root=root)) == \
        ["base@grpo", "base@ppo"]


def test_runs_since(store):
    root, a, b, c = store
    meta_path = a.dir / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["created_at"] = iso(time.time() - 10 * 86400)
    meta_path.write_text(json.dumps(meta))
    assert names(run_cli("runs", "--since", "7d", "-f", "json", root=root)) == ["hot@grpo", "base@ppo"]
    assert names(run_cli("runs", "--since", "2000-01-01", "-f", "json", root=root))[0] == "base@grpo"
    res = run_cli("runs", "--since", "last tuesday", root=root)
    assert res.returncode == 2 and "--since" in res.stderr


def test_runs_bad_sort_and_bad_where(store):
    root = store[0]
    res = run_cli("runs", "--sort", "config; DROP", root=root)
    assert res.returncode == 2 and "--sort" in res.stderr
    res = run_cli("runs", "--where", "1=1; COPY runs TO '/tmp/x.csv'", root=root)
    assert res.returncode == 5 and "Traceback" not in res.stderr


def test_show_metric_overview(store):
    root, a, b, c = store
    res = run_cli("show", "grpo/hot", root=root)
    assert res.returncode == 0, res.stderr
    assert "metrics (3 keys)" in res.stdout and "actor/kl" in res.stdout and "0..39" in res.stdout
    data = json.loads(run_cli("show", b.id[:22], "-f", "json", root=root).stdout)[0]
    kl = next(m for m in data["metrics"] if m["key"] == "actor/kl")
    assert kl == {"key": "actor/kl", "points": 40, "first_step": 0, "last_step": 39, "last": 1521.0,
                  "min": 0.0, "max": 1521.0, "mean": sum(s * s for s in range(40)) / 40}


def test_ambiguous_reference_lists_candidates(store):
    root, a, b, c = store
    res = run_cli("show", "base", root=root)
    assert res.returncode == 3
    # each candidate by its handle (the random end of its id), which every command accepts
    assert a.id[-8:] in res.stderr and c.id[-8:] in res.stderr
    assert "grpo/base" in res.stderr and "ppo/base" in res.stderr


def test_compare_config_diff_and_metrics(store):
    root, a, b, c = store
    res = run_cli("compare", "grpo/base", "grpo/hot", "-f", "json", root=root)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    config = {r["key"]: (r[a.id], r[b.id]) for r in rows if r["section"] == "config"}
    assert config == {"lr": (1e-6, 1e-5), "seed": (1, 2)}  # kl.coef is equal: not a difference
    last = {r["key"]: (r[a.id], r[b.id]) for r in rows if r["section"] == "metrics" and r["stat"] == "last"}
    assert last == {"loss": (1 / 50, 2 / 40), "reward": (49 / 10, 39 / 20), "actor/kl": (None, 1521.0)}
    res = run_cli("compare", "grpo/base", "grpo/hot", "--keys", "re*", root=root)
    assert res.returncode == 0, res.stderr
    assert "config differences" in res.stdout and "reward" in res.stdout and "loss" not in res.stdout
    res = run_cli("compare", "grpo/base", root=root)
    assert res.returncode == 2


def test_plot_terminal_png_and_data(store, tmp_path):
    root, a, b, c = store
    res = run_cli("plot", "grpo/base", "grpo/hot", "--key", "loss", "--key", "reward", "--width", "90", root=root)
    assert res.returncode == 0, res.stderr
    assert "loss" in res.stdout and "reward" in res.stdout and "base" in res.stdout and "hot" in res.stdout
    assert "\x1b[" not in res.stdout  # no colour codes when not a terminal
    png = tmp_path / "curves.png"
    res = run_cli("plot", "grpo/hot", "-k", "actor/*", "--smooth", "5", "--x", "time", "--png", str(png), root=root)
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = run_cli("plot", "grpo/hot", "-k", "loss", "--points", "8", "-f", "json", root=root)
    pts = json.loads(res.stdout)
    assert len(pts) == 8 and sum(p["n"] for p in pts) == 40
    assert pts[0]["x"] < pts[-1]["x"]


def test_plot_unknown_key_lists_known(store):
    root = store[0]
    res = run_cli("plot", "grpo/hot", "-k", "nope", root=root)
    assert res.returncode == 2 and "actor/kl" in res.stderr


@pytest.mark.parametrize("command", ["sql", "plot", "compare", "runs", "show"])
def test_help_documents_every_option(command):
    res = run_cli(command, "--help")
    assert res.returncode == 0
    assert "--root" in res.stdout


def test_runs_as_parquet_holds_what_json_holds_for_any_config(root, tmp_path):
    """``runs -f parquet`` of runs without a config, and of configs whose keys hold a number in
    one run and a list in another: no crash (Parquet cannot hold an empty struct; Arrow cannot
    type a key two ways), config and summary as JSON text as the ``runs`` view holds them, tags a
    list of strings even when no run has one, every row's values those of ``-f json``."""
    import pyarrow.parquet as pq

    import trackstore

    for config in (None, {"lr": 1e-6, "n": {"x": [1, 2]}}, {"lr": "cosine", "n": {"x": "y"}}):
        with trackstore.init(project="p", name="r", root=root, config=config) as run:
            run.log({"loss": float("nan")}, step=0)
    as_json = {r["run_id"]: r for r in json.loads(run_cli("runs", "-f", "json", root=root).stdout)}
    out = tmp_path / "runs.parquet"
    res = run_cli("runs", "-f", "parquet", "-o", str(out), root=root)
    assert res.returncode == 0 and not res.stderr, res.stderr
    table = pq.read_table(out)
    assert str(table.schema.field("config").type) == "string" and str(table.schema.field("tags").type) == "list<element: string>"
    for row in table.to_pylist():
        want = as_json[row["run_id"]]
        assert json.loads(row["config"]) == want["config"] and json.loads(row["summary"]) == want["summary"]
        assert json.loads(row["nonfinite_keys"]) == want["nonfinite_keys"] and row["tags"] == want["tags"] == []
        assert (row["status"], row["last_step"], row["alerts"]) == (want["status"], want["last_step"], want["alerts"])
    assert {} in [json.loads(r["config"]) for r in table.to_pylist()] and table.num_rows == 3
