"""A ``trackstore`` command that runs the CLI forked from the tests' fork server (tests/zygote.py).

:func:`install` writes an executable ``trackstore`` into a folder that a shell session puts
first on ``PATH`` (the doc examples, tests/test_docs_examples.py): each command a shell runs
there is then one real CLI process forked from the server, which has the heavy imports done,
instead of a fresh interpreter importing DuckDB, pyarrow and, for a sync, mlflow (about 2 s of
CPU) again. The command itself starts as ``python -I -S`` and imports only this module's
standard-library needs (a few milliseconds).

What the shell sees is what it would see of the CLI itself: the run gets the command's own
stdin, stdout and stderr (the file descriptors, so pipes, redirections and terminals are the
same), its environment, working folder and arguments; SIGINT, SIGTERM and SIGHUP sent to the
command are passed on to the run (a signal the command inherited as ignored, as bash ignores
SIGINT in a ``&`` job, stays ignored and is not passed on); the command exits with the run's
exit code, or, killed by a signal, kills itself with that signal, so ``$?``, ``set -e`` and
``wait`` see the same. Where a forked run cannot stand for a fresh interpreter (see the
fork server's docstring: ``PYTHON*`` variables that differ from the server's, or
``TRACKSTORE_TEST_FORKSERVER=0``) and when the server cannot be reached, the command runs the
real ``trackstore`` (the venv's console script) instead. What is not the same: the run's
parent is the fork server, not the shell, so a SIGKILL of the command (which cannot be passed
on) leaves the run going; nothing in the doc sessions does that.

No import outside the standard library, so it runs under ``python -I -S``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def ask(path: str, argv: list[str], env: dict, cwd: str, fds: tuple[int, int, int]) -> socket.socket:
    """Ask the fork server listening at ``path`` for one CLI run with ``fds`` as its stdin,
    stdout and stderr; the connection its replies (``{"pid"}``, then ``{"status"}``) come on."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n"
        sent = socket.send_fds(sock, [request], list(fds))
        sock.sendall(request[sent:])
    except BaseException:
        sock.close()
        raise
    return sock


def _reply(sock: socket.socket, buffer: bytearray) -> dict:
    while b"\n" not in buffer:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("the fork server closed the connection without an answer")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


def forks_faithfully(env: dict, server_python_env: dict) -> bool:
    """Whether a run forked from the server stands for a fresh interpreter started with ``env``:
    not when ``TRACKSTORE_TEST_FORKSERVER=0`` asks for fresh ones, nor when a ``PYTHON*``
    variable differs from the server's own (``server_python_env``; they only take effect when
    an interpreter starts)."""
    if env.get("TRACKSTORE_TEST_FORKSERVER", "1") == "0":
        return False
    names = {k for k in (*env, *server_python_env) if k.startswith("PYTHON")}
    return all(env.get(k) == server_python_env.get(k) for k in names)


def main(path: str, server_python_env: dict, real: str) -> None:
    """Run ``trackstore`` with this process's arguments through the fork server at ``path``;
    ``server_python_env`` is the server's own ``PYTHON*`` variables, ``real`` the console
    script to run instead when a forked run cannot stand for a fresh one."""
    argv = sys.argv[1:]
    env = dict(os.environ)
    if not forks_faithfully(env, server_python_env):
        os.execv(real, [real, *argv])
    pid: list[int] = []
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        if pid:
            try:
                os.kill(pid[0], sig)
            except ProcessLookupError:
                pass
        else:
            pending.append(sig)

    for sig in FORWARDED:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, forward)
    try:
        sock = ask(path, argv, env, os.getcwd(), (0, 1, 2))
    except OSError:  # no server (or a closed descriptor it cannot be given): a fresh interpreter
        os.execv(real, [real, *argv])
    buffer = bytearray()
    pid.append(_reply(sock, buffer)["pid"])
    for sig in pending:
        forward(sig, None)
    status = _reply(sock, buffer)["status"]
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def install(folder: str, socket_path: str, server_python_env: dict, python: str, real: str) -> str:
    """Write the ``trackstore`` command into ``folder`` (made if missing); returns its path."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(folder, exist_ok=True)
    command = os.path.join(folder, "trackstore")
    with open(command, "w") as f:
        f.write(f"#!{python} -IS\n"
                "import sys\n"
                f"sys.path.append({here!r})\n"
                "from tests.forkcli import main\n"
                f"main({socket_path!r}, {server_python_env!r}, {real!r})\n")
    os.chmod(command, 0o755)
    return command
