"""Commands import only what they need: `--help` without typer or rich, `runs` without duckdb
or pandas, and a sync dry run without pandas (startup cost is a feature)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import run_cli
from trackstore.cli.commands import COMMANDS


def test_top_level_help_needs_no_typer():
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f: main(['--help'])\n"
            "print(sorted(m for m in ('typer', 'rich', 'pyarrow', 'duckdb', 'pandas') if m in sys.modules))\n"
            "print(all(name in f.getvalue() for name in %r))" % (list(COMMANDS),))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_runs_without_where_needs_no_duckdb_nor_pandas(root):
    assert run_cli("demo", "--steps", "3", root=root).returncode == 0
    # the first listing reads each new metrics part once (pyarrow) for its alerts; later ones do not
    assert run_cli("runs", root=root).returncode == 0
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): main(['runs', '--root', {str(root)!r}])\n"
            "print(sorted(m for m in ('pyarrow', 'duckdb', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for args in ([], ["--sort", "-last_step"], ["--tag", "demo", "--since", "1d"], ["--status", "finished", "-n", "1"]):
        fast = run_cli("runs", *args, "-f", "json", root=root)
        sql = run_cli("runs", *args, "--where", "true", "-f", "json", root=root)
        assert fast.returncode == 0 and fast.stdout == sql.stdout, args  # the same rows as the runs view


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
