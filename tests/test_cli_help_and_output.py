"""The CLI's words and output: plural forms, LF line endings in CSV, a `--help` that fits 80
columns without `<bool>` metavars and offers only what works, and the quick start's commands
working as written after `trackstore demo` ran twice."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli
from trackstore.cli.commands import COMMANDS
from trackstore.cli.common import plural

REPO = Path(__file__).resolve().parent.parent


def test_plural():
    assert [plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert plural(1, "finding") == "1 finding" and plural(1, "metric key") == "1 metric key"
    assert plural(3, "retry", "retries") == "3 retries" and plural(1, "retry", "retries") == "1 retry"


def test_one_run_and_csv_line_endings(root):
    assert run_cli("demo", "--steps", "3", root=root).returncode == 0
    out = run_cli("runs", root=root)
    assert out.stdout.splitlines()[0].strip() == "1 run"
    csv = subprocess.run([sys.executable, "-m", "trackstore.cli.main", "sql", "-f", "csv",
                          "SELECT run_id, name FROM runs", "--root", str(root)], capture_output=True, check=True)
    assert b"\r" not in csv.stdout and csv.stdout.endswith(b"\n")
    assert csv.stdout.splitlines()[-1].endswith(b"qwen2.5-0.5b-grpo-gsm8k")  # what `| tail -1` yields
    status = run_cli("status", "-f", "csv", root=root)
    assert "\r" not in status.stdout


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_clean(command):
    args = ["--help"] if command is None else [command, "--help"]
    out = run_cli(*args, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert "<bool>" not in out.stdout and "<str>" not in out.stdout and "list[" not in out.stdout
    assert all(len(line) <= 80 for line in out.stdout.splitlines()), out.stdout
    if command == "sync":
        assert "csv" not in out.stdout.split("--format", 1)[1].split("\n\n")[0]  # sync prints a table or json
        assert len(out.stdout.splitlines()) <= 70
        assert {"Selection:", "Target:", "Output:", "Store:"} <= set(out.stdout.splitlines())


def test_quickstart_after_two_demos(tmp_path):
    """docs/quickstart.md section 2, as written, in a folder where `demo` already ran once."""
    text = (REPO / "docs" / "quickstart.md").read_text()
    block = re.search(r"## 2\. See it work\s+```bash\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() if not line.strip().startswith("trackstore sql") else line.strip()
                for line in block.splitlines() if line.strip()]
    assert commands[0] == "trackstore demo"
    assert run_cli("demo", "--steps", "3", root=tmp_path / "tsruns").returncode == 0  # the first demo
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "trackstore"
        out = subprocess.run([sys.executable, "-m", "trackstore.cli.main", *argv[1:]], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (command, out.stderr)
