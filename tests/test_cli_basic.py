"""The first CLI commands as a user runs them (real subprocesses), and SIGTERM on a logging
process: data flushed, the run marked failed, the process still dying of SIGTERM."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

import trackstore
from tests.helpers import python_child, run_cli
from trackstore.cli.runs_cmd import ALERT_COLUMNS
from trackstore.read.listing import RUN_COLUMNS, list_runs


def test_help_and_version():
    out = run_cli("--help")
    assert out.returncode == 0
    for command in ("runs", "show", "demo"):
        assert command in out.stdout
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"trackstore {trackstore.__version__}"
    for command, options in (("runs", ["--root", "--project", "--status", "--format"]),
                             ("show", ["--root", "--format"]), ("demo", ["--root", "--steps", "--seed"])):
        out = run_cli(command, "--help")
        assert out.returncode == 0, out.stderr
        for opt in options:
            assert opt in out.stdout, f"{command} --help does not document {opt}"


def test_cli_import_is_light():
    # `trackstore --help` must answer fast: no query engine, no Arrow, no target SDK at import.
    heavy = ("duckdb", "pyarrow", "wandb", "mlflow", "swanlab", "pandas", "numpy", "torch")
    code = f"import sys, trackstore.cli.main; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["typer", "trackstore.cli.app"])
def test_ctrl_c_while_the_command_line_loads_is_a_quiet_interrupt(root, module):
    """A Ctrl-C in the first tenth of a second of a command (while typer and the command's
    modules load) ends it as one a moment later does: "interrupted", exit 130, no traceback.
    The interrupt is raised by the import itself here, at the moment it would arrive."""
    code = textwrap.dedent(f"""
        import sys
        class Interrupting:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise KeyboardInterrupt
                return None
        sys.meta_path.insert(0, Interrupting())
        from trackstore.cli.main import main
        sys.exit(main(["runs", "--root", {str(root)!r}]))
    """)
    child = python_child(code)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert err == "interrupted\n" and out == ""


def test_metric_logging_stays_light(root):
    # A metrics-only run writes Parquet without importing pandas (50 MB, 0.3 s) or duckdb.
    code = (f"import sys, trackstore; run = trackstore.init('p', root={str(root)!r}); "
            "[run.log({'a': float(i), 'b': i}) for i in range(100)]; run.finish(); "
            "print([m for m in ('pandas', 'duckdb', 'rich', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    [info] = list_runs(root)
    assert info.meta["last_step"] == 99


def test_demo_then_runs_and_show(root):
    out = run_cli("demo", "--steps", "20", root=root)
    assert out.returncode == 0, out.stderr
    assert str(root) in out.stdout and "trackstore runs" in out.stdout  # where it went, what next
    [info] = list_runs(root)
    assert info.project == "demo-grpo" and info.status == "finished" and info.meta["last_step"] == 20  # verl counts steps from 1
    keys = set(pq.read_table(info.paths.kind_dir("metrics"), columns=["key"]).column("key").to_pylist())
    assert len(keys) >= 90 and {"actor/entropy", "critic/score/mean", "response_length/mean"} <= keys
    assert any(k.startswith("timing_s/") for k in keys)

    out = run_cli("runs", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert list(row) == [*RUN_COLUMNS, *ALERT_COLUMNS]  # the `runs` view's columns, then the run's alerts
    assert (row["project"], row["run_id"], row["status"], row["last_step"]) == ("demo-grpo", info.run_id, "finished", 20)

    out = run_cli("runs", "--format", "csv", root=root)
    [header, line] = list(csv.reader(io.StringIO(out.stdout)))
    assert header == [*RUN_COLUMNS, *ALERT_COLUMNS] and line[1] == info.run_id

    out = run_cli("runs", root=root)
    assert out.returncode == 0 and info.run_id in out.stdout and "finished" in out.stdout

    out = run_cli("show", info.run_id[:20], root=root)
    assert out.returncode == 0, out.stderr
    for text in ("demo-grpo", "finished", "config", "records", "actor/entropy"):  # summary: the metrics' last values
        assert text in out.stdout
    out = run_cli("show", info.run_id, "--format", "json", root=root)
    assert json.loads(out.stdout)[0]["summary"]["training/global_step"] == 20.0


def test_runs_filters_and_errors(root):
    for project, status in (("a", "finished"), ("b", "failed")):
        run = trackstore.init(project, root=root)
        run.log({"x": 1.0})
        run.finish(status=status)
    out = run_cli("runs", "--format", "json", "--project", "b", root=root)
    assert [r["project"] for r in json.loads(out.stdout)] == ["b"]
    out = run_cli("runs", "--format", "json", "--status", "finished", root=root)
    assert [r["status"] for r in json.loads(out.stdout)] == ["finished"]
    out = run_cli("show", "no-such-run", root=root)
    assert out.returncode == 3 and "no run matches" in out.stderr and "Traceback" not in out.stderr


def test_root_flag_and_env_var_are_honoured(tmp_path, root):
    run = trackstore.init("envtest", root=root)
    run.finish()
    other = tmp_path / "other"
    other.mkdir()
    by_env = run_cli("runs", "--format", "json", env={"TRACKSTORE_DIR": str(root)})
    assert [r["run_id"] for r in json.loads(by_env.stdout)] == [run.id]
    by_flag = run_cli("runs", "--format", "json", "--root", str(other), env={"TRACKSTORE_DIR": str(root)})
    assert json.loads(by_flag.stdout) == []  # the flag wins over the environment
    out = run_cli("show", run.id, "--format", "json", env={"TRACKSTORE_DIR": str(root)})
    assert out.returncode == 0 and json.loads(out.stdout)[0]["run_id"] == run.id
    demo = run_cli("demo", "--steps", "3", env={"TRACKSTORE_DIR": str(other)})
    assert demo.returncode == 0, demo.stderr
    assert [i.project for i in list_runs(other)] == ["demo-grpo"]


LOGGING_CHILD = textwrap.dedent(
    """
    import signal, sys, time, trackstore
    {setup}
    run = trackstore.init("term", root={root!r}, run_id="r1", flush_interval=3600)  # no timed flush
    for step in range(200):
        run.log({{"loss": 1.0 / (step + 1), "step_x2": 2.0 * step}})
    print("logged", flush=True)
    {after}
    """
)


def term_child(root, setup="", after="time.sleep(3600)"):
    child = python_child(LOGGING_CHILD.format(root=str(root), setup=setup, after=after))
    assert child.stdout.readline().strip() == "logged", child.stderr.read()
    return child


def rows(root):
    return pq.read_table(root / "project=term" / "run=r1" / "metrics").to_pylist()


def test_sigterm_flushes_and_marks_failed(root):
    child = term_child(root)
    child.send_signal(signal.SIGTERM)
    _out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM, err  # still dies of SIGTERM, as a scheduler expects
    assert len(rows(root)) == 400  # nothing had been flushed before: all of it came from the handler
    [info] = list_runs(root)
    assert info.status == "failed" and "SIGTERM" in info.meta["error"]
    out = run_cli("runs", "--format", "json", root=root)
    [row] = json.loads(out.stdout)
    assert row["status"] == "failed" and "SIGTERM" in row["error"]


def test_sigterm_chains_to_the_programs_own_handler(root):
    # A graceful-shutdown handler (set before init): it decides when to stop, and may log more.
    setup = textwrap.dedent(
        """
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        """
    )
    after = textwrap.dedent(
        """
        while not stop:
            time.sleep(0.01)
        print("flushed", len(list(run.dir.joinpath("metrics").glob("*.parquet"))), flush=True)
        run.log({"loss": 0.0}, step=999)
        """
    )
    child = term_child(root, setup=setup, after=after)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err  # the program's handler chose to exit normally
    assert out.split() == ["flushed", "1"]  # flushed by trackstore before the program's handler ran
    assert len(rows(root)) == 401  # and the last log after the signal was kept too (at exit)
    [info] = list_runs(root)
    assert info.status == "failed" and "SIGTERM" in info.meta["error"]


def test_sigterm_during_a_flush_in_the_main_thread_waits_for_it(root):
    # The signal lands while the main thread is itself inside run.flush() (holding the writer's
    # I/O lock). Handling it right there would deadlock; it must wait for the flush to end.
    after = textwrap.dedent(
        """
        import os, trackstore.write.writer as w
        real = w.write_part
        def write_part(*a, **k):
            os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of the write
            real(*a, **k)
        w.write_part = write_part
        run.flush()
        print("not reached: the deferred SIGTERM ends the process when the flush is done", flush=True)
        """
    )
    child = term_child(root, after=after)
    out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGTERM, err
    assert "not reached" not in out
    assert len(rows(root)) == 400
    [info] = list_runs(root)
    assert info.status == "failed" and "SIGTERM" in info.meta["error"]


@pytest.mark.parametrize("how", ["exception", "keyboardinterrupt"])
def test_uncaught_exception_marks_failed_at_exit(root, how):
    raise_it = "raise RuntimeError('boom')" if how == "exception" else "raise KeyboardInterrupt"
    child = term_child(root, after=raise_it)
    _out, err = child.communicate(timeout=60)
    assert child.returncode != 0
    assert len(rows(root)) == 400
    [info] = list_runs(root)
    assert info.status == "failed"
    assert ("boom" if how == "exception" else "KeyboardInterrupt") in info.meta["error"]
