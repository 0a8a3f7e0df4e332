"""A CLI run forked from the tests' fork server (tests/zygote.py), through ``run_cli`` or the doc
sessions' ``trackstore`` command (tests/forkcli.py), ends as a fresh ``python -m
trackstore.cli.main`` ends: the same exit code, stdout and stderr. The suite's CLI tests rest
on this; a fork server that ended its runs otherwise would make them prove nothing."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import forked_cli_command, run_cli

FRESH = {"TRACKSTORE_TEST_FORKSERVER": "0"}  # run_cli then starts a fresh interpreter

CASES = {
    "ok": ["--version"],
    "usage error": ["no-such-command"],
    "refused root": ["runs", "--root", "/etc/passwd"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_a_forked_run_ends_as_a_fresh_interpreter_does(argv):
    forked, fresh = run_cli(*argv), run_cli(*argv, env=FRESH)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == (0 if argv == ["--version"] else 2)


def test_the_doc_sessions_command_gives_the_shell_the_runs_exit_code_and_output(tmp_path):
    import os

    command = forked_cli_command(tmp_path / "bin", dict(os.environ))
    if command is None:
        pytest.skip("the fork server is off here (TRACKSTORE_TEST_FORKSERVER=0, or no os.fork)")
    script = (f"{command} --version | cat; echo \"pipe=${{PIPESTATUS[0]}}\"; "
              f"{command} no-such-command 2>&1; echo \"rc=$?\"")
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    version, usage = run_cli("--version"), run_cli("no-such-command")
    assert shell.stdout == f"{version.stdout}pipe=0\n{usage.stdout}{usage.stderr}rc=2\n"


def test_an_unhandled_interrupt_is_noted_where_the_interpreter_hides_its_note(monkeypatch):
    """From Python 3.12 CPython's ``_Py_UnhandledKeyboardInterrupt`` cannot be named through
    ctypes: the fork server's own note stands in, the same one at every call."""
    import ctypes

    from tests import zygote

    def no_symbol(*_args, **_kw):
        raise ValueError("symbol not found")

    monkeypatch.setattr(ctypes.c_int, "in_dll", no_symbol)
    zygote._unhandled_interrupt.cache_clear()
    try:
        note = zygote._unhandled_interrupt()
        assert note.value == 0
        note.value = 1
        assert zygote._unhandled_interrupt().value == 1
    finally:
        zygote._unhandled_interrupt.cache_clear()
