"""The README's quick start and its "Log" snippet run as written: the block a new user pastes
after ``make demo`` (activate the venv, point TRACKSTORE_DIR at the demo's store, look), and the
logging example, each in a fresh folder through a real shell and a real interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

README = (REPO / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.S | re.M)


def after_demo_block() -> str:
    """The bash block right after the quick start's `make demo` block."""
    [block] = [b for b in blocks("bash") if b.startswith("source .venv/bin/activate")]
    return block


def clean_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACKSTORE_", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path), COLUMNS="80")
    return env


def test_make_demo_prints_the_lines_the_readme_pastes_next():
    makefile = (REPO / "Makefile").read_text()
    demo = makefile[makefile.index("\ndemo:"):].split("\n\n")[0]
    assert "source $(VENV)/bin/activate" in demo and "export TRACKSTORE_DIR=$(abspath $(DEMO_ROOT))" in demo
    lines = after_demo_block().splitlines()
    assert lines[0].startswith("source .venv/bin/activate")
    assert lines[1].startswith("export TRACKSTORE_DIR=$PWD/demo-store")
    assert "--root $(DEMO_ROOT)" in demo and "DEMO_ROOT ?= demo-store" in makefile


def test_quick_start_block_after_make_demo_runs_as_pasted(tmp_path):
    # the state `make demo` leaves: .venv with trackstore installed, the demo run in demo-store/
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = clean_env(tmp_path)
    env["PATH"] = os.defpath  # trackstore is reachable only through the activated venv
    demo = subprocess.run([str(tmp_path / ".venv" / "bin" / "trackstore"), "demo", "--root", "demo-store", "--steps", "30"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    script = "set -e\n" + after_demo_block()
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    for expected in ("qwen2.5-0.5b-grpo-gsm8k", "critic/score/mean", "val-core/"):
        assert expected in out.stdout, expected
    assert not (tmp_path / "tsruns").exists()  # everything read the demo's store


def test_log_snippet_runs_as_written(tmp_path):
    [snippet] = [b for b in blocks("python") if "trackstore.init(" in b and "log_artifact" in b]
    env = clean_env(tmp_path)
    env["TRACKSTORE_DIR"] = str(tmp_path / "store")
    out = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    [run_dir] = (tmp_path / "store").glob("project=grpo-gsm8k/run=*")
    assert (run_dir / "run.json").is_file()
    assert any(p.name == "policy.bin" for p in (run_dir / "artifacts").rglob("*"))
