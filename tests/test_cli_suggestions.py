"""Near matches: what names nothing is answered with the closest names there are (run
references, plot keys, projects) or with what exists (trace sample indices)."""

from __future__ import annotations

import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.read.refs import closest

KEYS = ["critic/score/mean", "critic/score/max", "critic/rewards/mean"] + [f"actor/a{i:02d}" for i in range(40)]


def test_closest_ranks_prefix_then_part_then_similar():
    assert closest("critic/score/mea", KEYS)[:2] == ["critic/score/mean", "critic/score/max"]
    assert closest("grpo", ["demo-grpo", "grpo-math", "other"], everything=True) == ["grpo-math", "demo-grpo", "other"]
    assert closest("zzzz", ["demo-grpo", "grpo-math"]) == []


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    for project in ("grpo-math", "demo-grpo"):
        r = trackstore.init(project, name="qwen-grpo", root=root)
        r.log({k: 1.0 for k in KEYS}, step=1)
        with r.trace(step=1, sample_index=0):
            pass
        with r.trace(step=1, sample_index=1):
            pass
        with r.trace(step=1, sample_index=4):
            pass
        r.finish()
    return root


def test_plot_suggests_the_closest_keys(store):
    ref = "grpo-math/qwen-grpo"
    out = run_cli("plot", ref, "-k", "critic/score/mea", root=store, env={"COLUMNS": "80"})
    assert out.returncode == 2
    assert "did you mean: critic/score/mean, critic/score/max" in out.stderr, out.stderr
    assert "actor/a00" not in out.stderr


def test_mistyped_run_suggests_the_closest_runs(store):
    from trackstore.read.listing import list_runs

    run = [r for r in list_runs(store) if r.project == "grpo-math"][0]
    typo = run.run_id[:-1] + ("x" if run.run_id[-1] != "x" else "y")
    out = run_cli("show", typo, root=store)
    assert out.returncode == 3
    assert "did you mean:" in out.stderr
    first = out.stderr.split("did you mean:")[1].strip().splitlines()[0]
    assert first.split()[0] == run.run_id[-8:] and "grpo-math/qwen-grpo" in first, out.stderr
    handle_typo = run_cli("show", typo[-8:], root=store)
    assert handle_typo.returncode == 3 and run.run_id[-8:] in handle_typo.stderr


def test_trace_names_the_sample_indices_there_are(store):
    out = run_cli("trace", "grpo-math/qwen-grpo", "--sample-index", "3", root=store)
    assert out.returncode == 2
    assert "sample indices at step 1: 0..1, 4" in out.stderr, out.stderr


def test_export_unknown_project_lists_projects_closest_first(store, tmp_path):
    for extra in ([], ["--receipt"]):
        out = run_cli("export", "--project", "grpo", "-o", str(tmp_path / "b.tar"), *extra, root=store)
        assert out.returncode == 3, out.stderr
        assert "no project 'grpo'" in out.stderr and "grpo-math, demo-grpo" in out.stderr, out.stderr
        assert not (tmp_path / "b.tar").exists()


@pytest.mark.parametrize("command", [["runs"], ["gc", "--older-than", "1d", "--dry-run"], ["compact", "--dry-run"],
                                     ["sync", "--to", "mlflow", "--dry-run"]])
def test_a_filter_naming_no_project_says_so_and_goes_on(store, tmp_path, command):
    """runs/gc/compact/sync -p filter rather than name: a project without runs is no error (a
    cron line may name one whose first run has not started), but a mistyped one is told, with
    the projects there are, instead of a silent "0 runs" or "nothing to do"."""
    extra = ["--uri", f"sqlite:///{tmp_path / 'm.db'}"] if command[0] == "sync" else []
    out = run_cli(*command, "-p", "grpo", *extra, root=store, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "note: no project 'grpo'" in out.stderr and "grpo-math, demo-grpo" in out.stderr, out.stderr
    known = run_cli(*command, "-p", "grpo-math", *extra, root=store, env={"COLUMNS": "80"})
    assert known.returncode == 0 and "note:" not in known.stderr, known.stdout + known.stderr
