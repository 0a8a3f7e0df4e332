"""Words and small things of the CLI (issue 18): plural forms, LF line endings in CSV, a
`--help` without `<bool>` metavars that offers only what works, and the quick start's
commands working as written after `trackstore demo` ran twice."""

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


def test_top_level_help_needs_no_typer():
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f: main(['--help'])\n"
            "print(sorted(m for m in ('typer', 'rich', 'pyarrow', 'duckdb', 'pandas') if m in sys.modules))\n"
            "print(all(name in f.getvalue() for name in %r))" % (list(COMMANDS),))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_runs_without_where_needs_no_duckdb_nor_pandas(root):
    assert run_cli("demo", "--steps", "3", root=root).returncode == 0
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): main(['runs', '--root', {str(root)!r}])\n"
            "print(sorted(m for m in ('pyarrow', 'duckdb', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for args in ([], ["--sort", "-last_step"], ["--tag", "demo", "--since", "1d"], ["--status", "finished", "-n", "1"]):
        fast = run_cli("runs", *args, "-f", "json", root=root)
        sql = run_cli("runs", *args, "--where", "true", "-f", "json", root=root)
        assert fast.returncode == 0 and fast.stdout == sql.stdout, args  # the same rows as the runs view


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


def test_a_dry_run_with_rows_pending_imports_no_pandas(tmp_path):
    """pyarrow imports pandas (0.2-0.3 s) when a compute function or ``pa.scalar`` is handed a
    Python value, and for ``Table.from_pylist``/``Schema.empty_table``: the dry run of a run
    whose rows are partly acknowledged (the acknowledged-rows filter) and whose other kinds are
    empty must not."""
    import trackstore
    from trackstore.store.ledger import Cursor, save_cursor
    from trackstore.store.ranges import RangeSet

    root = tmp_path / "runs"
    run = trackstore.init("p", root=root)
    for s in range(10):
        run.log({"a": float(s), "b": 1.0}, step=s)
    run.finish()
    writer = next(run.paths.writers_dir.glob("*.json")).stem
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    save_cursor(root, Cursor("mlflow", uri, "p", run.run_id, acked={"metrics": RangeSet({writer: [[0, 5], [8, 9]]})},
                             remote={"run_id": "0" * 32, "experiment_id": "1"}))
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f:\n"
            f"    try: main(['sync', '--to', 'mlflow', '--uri', {uri!r}, '--dry-run', '-f', 'json', '--root', {str(root)!r}])\n"
            "    except SystemExit: pass\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout
