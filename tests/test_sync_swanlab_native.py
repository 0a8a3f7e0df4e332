"""What a synced run looks like in SwanLab's own terms, read back from what SwanLab wrote (its
run files with its own reader, its config file, its local dashboard database): readable config,
structured samples and trajectories, one dashboard project per trackstore project, and local
mode refused without the swanboard it needs. (In a real browser: tests/test_ui_platforms.py.)"""

from __future__ import annotations

import json
import sqlite3
import sys

import pytest
import yaml

import trackstore
from tests.helpers import fake_old_client, has_swanboard, run_cli

pytest.importorskip("swanlab")

from trackstore.sync.swanlab import experiment_id, read_session_files  # noqa: E402
from trackstore.sync.swanlab_view import SWANBOARD_VERSION  # noqa: E402

LOCAL = ["--to", "swanlab", "--mode", "local"]




needs_swanboard = pytest.mark.skipif(not has_swanboard(), reason=f"swanboard {SWANBOARD_VERSION} not installed "
                                     "(make install-test installs it)")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    return tmp_path


def two_projects(root):
    runs = []
    for project in ("agent-rl-old", "demo-grpo"):
        run = trackstore.init(project, name=f"run-{project}", config={"lr": 0.1, "model": {"name": "tiny", "layers": 2},
                                                                       "stages": [1, 2]},
                              tags=["grpo", "v1"], notes="a note", root=root)
        run.log({"loss": 0.5}, step=1)
        run.log_samples([{"input": [{"role": "user", "content": "What is 6 * 7?"}], "output": "It is 42.", "score": 1.0,
                          "ground_truth": "42"}], step=1)
        with run.trace(step=1, sample_index=0) as tr:
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "6 * 7"}]) as turn:
                with pytest.raises(ZeroDivisionError):
                    with tr.span("calculator", kind="tool", inputs={"expression": "6 / 0"}):
                        raise ZeroDivisionError("division by zero")
                turn.set_outputs("42")
            tr.set_reward(1.0)
        run.finish()
        runs.append(run)
    return runs


def texts(logdir, run, key):
    """(caption, text) of every Text item SwanLab holds under ``key``, read with SwanLab's reader."""
    out = []
    for folder, rec in read_session_files(logdir, experiment_id(run.project, run.id)):
        if rec.WhichOneof("record_type") == "media" and rec.media.key == key:
            for item in rec.media.value.items:
                out.append((item.caption, (folder / "media" / "text" / item.filename).read_text()))
    return out


@needs_swanboard
def test_local_mode_each_project_its_own_dashboard_with_readable_config(root, home):
    runs = two_projects(root)
    logdir = home / "swanlog"
    res = run_cli("sync", *LOCAL, "--logdir", str(logdir), "--verify", "--format", "json", root=root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(r["result"] == "ok" and r["verify_ok"] for r in json.loads(res.stdout)["runs"])
    for run in runs:
        db = sqlite3.connect(logdir / run.project / "runs.swanlab")  # the dashboard's own database
        assert db.execute("SELECT name FROM project").fetchall() == [(run.project,)]
        assert db.execute("SELECT name FROM experiment").fetchall() == [(run.name,)]
        [cfg_file] = (logdir / run.project).glob("run-*/files/config.yaml")
        cfg = {k: v["value"] for k, v in yaml.safe_load(cfg_file.read_text()).items()}
        assert cfg["lr"] == 0.1 and cfg["model.name"] == "tiny" and cfg["model.layers"] == 2
        assert cfg["stages"] == "[1, 2]" and cfg["trackstore.tags"] == "grpo, v1"
        assert cfg["trackstore.run_id"] == run.id and cfg["trackstore.status"] == "finished"
        assert not [k for k, v in cfg.items() if isinstance(v, (dict, list))]  # nothing shows as [object Object]

        samples = texts(logdir / run.project, run, "samples/val")
        assert samples == [("#0 input", "user: What is 6 * 7?"), ("#0 output", "It is 42."), ("#0 score", "1.0"),
                           ("#0 ground_truth", "42")]
        traj = texts(logdir / run.project, run, "trajectories")
        assert [c for c, _ in traj] == ["▸ sample 0", "episode", "\u00a0\u00a0\u00a0└ assistant",
                                        "\u00a0\u00a0\u00a0\u00a0\u00a0\u00a0└ calculator"]
        assert traj[3][1].startswith("tool ERROR") and "error: ZeroDivisionError: division by zero" in traj[3][1]
        assert "reward 1.0" in traj[0][1]


def test_local_mode_without_swanboard_is_refused_before_anything_is_written(root, home):
    two_projects(root)
    logdir = home / "swanlog"
    code = ("import sys; sys.modules['swanboard'] = None; sys.argv[0] = 'trackstore'; "
            "from trackstore.cli.main import main; sys.exit(main())")
    for extra in ((), ("--dry-run",)):
        import subprocess

        res = subprocess.run([sys.executable, "-c", code, "sync", *LOCAL, "--logdir", str(logdir), *extra,
                              "--root", str(root)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "swanboard" in res.stderr and SWANBOARD_VERSION in res.stderr and "pip install --no-deps" in res.stderr
        assert "Traceback" not in res.stderr and "verified" not in res.stdout
    assert not logdir.exists()
    # nothing was acknowledged: once swanboard is there, the whole run is sent (no "already up to date")
    status = run_cli("sync", "--to", "swanlab", "--mode", "offline", "--logdir", str(home / "offline"), "--dry-run",
                     "--format", "json", root=root)
    assert all(sum(r["pending"].values()) > 0 for r in json.loads(status.stdout)["runs"]), status.stdout


def test_local_mode_with_another_swanboard_version_is_refused(root, home, tmp_path):
    two_projects(root)
    logdir = home / "swanlog"
    env = fake_old_client(tmp_path, "swanboard", "0.1.6")
    # an importable swanboard of that version, whether or not the real one is installed here
    package = tmp_path / "old-client-metadata" / "swanboard"
    package.mkdir()
    (package / "__init__.py").write_text("")
    res = run_cli("sync", *LOCAL, "--logdir", str(logdir), root=root, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"needs swanboard {SWANBOARD_VERSION}" in res.stderr and "0.1.6 is installed" in res.stderr
    assert not logdir.exists()
