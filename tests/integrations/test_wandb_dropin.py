"""The wandb drop-in, and an unmodified wandb script run under ``trackstore run``.

The real wandb package is installed in this environment: the script's ``import wandb`` must
still resolve to the drop-in, and nothing may reach wandb's own files or servers.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trackstore.compat.wandb as wandb
from trackstore.errors import UsageError

from ..helpers import REPO
from .store_read import only_run, rows

SCRIPT = textwrap.dedent('''
    import argparse
    import sys

    import numpy as np
    import wandb

    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--exit", type=int, default=0)
    args = p.parse_args()

    run = wandb.init(project="wb-script", name="baseline", config=args, tags=["baseline"], notes="first try",
                     group="sweep", settings=wandb.Settings(silent=True))
    wandb.config.update({"batch_size": 8}, allow_val_change=True)
    wandb.define_metric("eval/acc", summary="max")
    for i in range(3):
        wandb.log({"train/loss": 1.0 / (i + 1), "lr": wandb.config.lr})
        wandb.log({"weights": wandb.Histogram(np.arange(10) + i), "acts": np.ones(50)}, commit=False)
    table = wandb.Table(columns=["prompt", "completion", "reward"])
    table.add_data("2+2?", "4", 1.0)
    wandb.log({"samples": table}, step=2)
    table.add_data("3+3?", "7", 0.0)
    wandb.log({"samples": table}, step=3)  # the grown table: only the new row is stored
    run.summary["best_acc"] = 0.75
    with open("weights.bin", "wb") as f:
        f.write(b"0123456789")
    art = wandb.Artifact("policy", type="model", metadata={"params": 10})
    art.add_file("weights.bin")
    run.log_artifact(art, aliases=["final"])
    print("MODULE", wandb.__name__)
    wandb.finish(exit_code=args.exit)
    sys.exit(args.exit)
''')


def run_script(tmp_path, root, *extra):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "trackstore.cli.main", "run", "--root", str(root), "--", sys.executable,
           str(script), *extra]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)


def test_unmodified_wandb_script_logs_to_the_store(tmp_path, root):
    out = run_script(tmp_path, root, "--lr", "0.01")
    assert out.returncode == 0, out.stderr
    assert "MODULE trackstore.compat.wandb" in out.stdout
    assert not (tmp_path / "wandb").exists()  # the real wandb never ran

    info = only_run(root, "wb-script")
    assert (info.name, info.status, info.meta["tags"], info.meta["notes"], info.meta["group"]) == (
        "baseline", "finished", ["baseline"], "first try", "sweep")
    cfg = info.meta["config"]
    assert cfg["lr"] == 0.01 and cfg["batch_size"] == 8 and cfg["exit"] == 0
    assert cfg["_wandb_define_metric"] == {"eval/acc": {"summary": "max"}}
    got = sorted((r["step"], r["key"], r["value"]) for r in rows(info, "metrics"))
    assert got == sorted([(i, "train/loss", 1.0 / (i + 1)) for i in range(3)] + [(i, "lr", 0.01) for i in range(3)])
    hists = sorted((r["step"], r["key"], r["count"]) for r in rows(info, "histograms"))
    assert hists == sorted([(s, "weights", 10) for s in (1, 2, 3)] + [(s, "acts", 50) for s in (1, 2, 3)])
    samples = sorted((r["step"], r["split"], r["input"], r["output"], r["score"]) for r in rows(info, "samples"))
    assert samples == [(2, "samples", "2+2?", "4", 1.0), (3, "samples", "3+3?", "7", 0.0)]
    assert info.meta["summary"]["best_acc"] == 0.75
    arts = rows(info, "artifacts")
    assert [(a["name"], a["type"], a["logical_path"], a["size"], a["aliases"]) for a in arts] == [
        ("policy", "model", "weights.bin", 10, ["final"])]


def test_exit_code_of_the_command_is_passed_through(tmp_path, root):
    out = run_script(tmp_path, root, "--exit", "3")
    assert out.returncode == 3, out.stderr
    info = only_run(root, "wb-script")
    assert info.status == "failed" and info.meta["exit_code"] == 3


def test_run_without_a_command_is_a_usage_error(root):
    out = subprocess.run([sys.executable, "-m", "trackstore.cli.main", "run", "--", "no-such-program-xyz"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 2 and "command not found: no-such-program-xyz" in out.stderr


# ---------------------------------------------------------------------- the module itself
def test_log_before_init_is_a_clear_error():
    with pytest.raises(UsageError, match=r"call wandb.init\(\) before wandb.log"):
        wandb.log({"x": 1})
    with pytest.raises(UsageError, match="wandb.init"):
        wandb.config.lr


def test_config_include_and_exclude_keys(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    wandb.init(project="p", config={"lr": 1, "seed": 2, "secret_path": "/x"}, config_exclude_keys=["secret_path"],
               sync_tensorboard=False).finish()
    assert only_run(root, "p").meta["config"] == {"lr": 1, "seed": 2}


def test_disabled_mode_records_nothing(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    run = wandb.init(project="p", mode="disabled", config={"a": 1})
    run.log({"x": 1.0})
    assert wandb.config["a"] == 1
    wandb.finish()
    assert list(root.iterdir()) == []


def test_resume_by_id(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    with pytest.raises(Exception, match="resume='must'"):
        wandb.init(project="p", id="run-1", resume="must")
    with wandb.init(project="p", id="run-1", name="r") as run:
        run.log({"x": 1.0})
        run.log({"x": 2.0})
    with wandb.init(project="p", id="run-1", resume="allow") as run:
        assert run.step == 2
        run.log({"x": 3.0})
    info = only_run(root, "p")
    assert sorted((r["step"], r["value"]) for r in rows(info, "metrics")) == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert len(info.meta["attempts"]) == 2
    with pytest.raises(Exception, match="resume='never'"):
        wandb.init(project="p", id="run-1", resume="never")


def test_resume_true_and_auto_continue_the_run(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    for resume, value in ((True, 1.0), ("auto", 2.0), (True, 3.0)):
        with wandb.init(project="p", id="run-2", resume=resume) as run:
            run.log({"x": value})
    info = only_run(root, "p")
    assert sorted((r["step"], r["value"]) for r in rows(info, "metrics")) == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert len(info.meta["attempts"]) == 3


def test_init_dir_places_the_store_unless_trackstore_dir_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACKSTORE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    wandb.init(project="p", dir=tmp_path / "wdir").finish()
    assert only_run(tmp_path / "wdir" / "tsruns", "p")
    override = tmp_path / "explicit"
    monkeypatch.setenv("TRACKSTORE_DIR", str(override))
    wandb.init(project="q", dir=tmp_path / "wdir").finish()
    assert only_run(override, "q") and not list((tmp_path / "wdir" / "tsruns").glob("project=q"))


def test_artifact_add_dir_and_new_file(root, tmp_path, monkeypatch):
    import gc
    import hashlib

    from trackstore.records.artifacts import list_versions

    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(b"\x00" * 1000)
    (src / "sub" / "tok.json").write_text('{"v": 1}')
    run = wandb.init(project="p")
    art = wandb.Artifact("model", type="model", metadata={"epoch": 3})
    art.add_dir(src, name="checkpoint")
    with art.new_file("notes/readme.txt") as f:
        f.write("trained on 1k prompts")
    tmp_folder = art._tmp
    run.log_artifact(art, aliases=["best"])
    run.finish()
    (version,) = list_versions(only_run(root, "p").paths.dir)
    files = {f.logical_path: f for f in version.files}
    assert set(files) == {"checkpoint/weights.bin", "checkpoint/sub/tok.json", "notes/readme.txt"}
    assert files["checkpoint/weights.bin"].sha256 == hashlib.sha256(b"\x00" * 1000).hexdigest()
    assert (version.dir.parent.parent.parent / files["notes/readme.txt"].path).read_text() == "trained on 1k prompts"
    assert version.type == "model" and version.metadata["epoch"] == 3 and "best" in version.aliases
    with pytest.raises(UsageError, match="not a folder"):
        art.add_dir(tmp_path / "missing")
    del art
    gc.collect()
    assert not tmp_folder.exists()  # new_file's scratch folder does not outlive the Artifact


def test_what_is_not_covered_says_so(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    assert not hasattr(wandb, "Api")  # hasattr keeps working
    with pytest.raises(wandb.NotSupportedError, match="wandb.Audio is not supported"):
        wandb.Audio
    with pytest.raises(wandb.NotSupportedError, match=r"init\(sweep_id=...\)"):
        wandb.init(project="p", sweep_id="x")
    with pytest.raises(wandb.NotSupportedError, match=r"init\(sync_tensorboard=...\)"):
        wandb.init(project="p", sync_tensorboard=True)
    run = wandb.init(project="p")
    with pytest.raises(wandb.NotSupportedError, match="use run.log_artifact"):
        run.save("*.pt")
    with pytest.raises(ValueError, match="string"):
        run.log({"note": "text"})
    run.finish()
    assert wandb.run is None


def test_watch_logs_gradient_histograms(root, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed (run `make test-frameworks`)")
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    run = wandb.init(project="p")
    model = torch.nn.Linear(3, 1)
    wandb.watch(model, log="gradients", log_freq=1)
    for _ in range(2):
        model(torch.randn(4, 3)).sum().backward()
        wandb.log({"loss": 1.0})
    run.finish()
    keys = {r["key"] for r in rows(only_run(root), "histograms")}
    assert keys == {"gradients/weight", "gradients/bias"}
