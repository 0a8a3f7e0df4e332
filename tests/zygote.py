"""A fork server for the tests' CLI runs: real processes without paying the imports each time.

Most of the suite's CPU went to starting ``python -m trackstore.cli.main`` again and again:
importing mlflow alone costs about 2 s of CPU, and a sync test starts the CLI several times.
This server imports it (and the CLI) once, then forks one real process
per CLI run. The forked process gets the caller's stdin, stdout and stderr (passed as file
descriptors over a Unix socket), the caller's environment, working directory and arguments,
and then runs ``trackstore.cli.main`` as ``__main__`` and ends as ``python -m`` ends (exit
code, uncaught exception, threads joined, atexit handlers, flushing, death by SIGINT after an
unhandled Ctrl-C: :func:`_run_and_exit`), short of the interpreter's teardown of the whole heap.
What differs from a fresh interpreter: modules are imported before the
environment is set (nothing in trackstore or the SDKs reads it at import time), and
``PYTHON*`` variables cannot take effect, so :func:`tests.helpers.run_cli` starts a plain
subprocess whenever those differ from this server's; and what the server imported is frozen
(``gc.freeze``), so a reference cycle among those import-time objects is not collected at the
run's exit as a fresh interpreter's last collection would (objects the run itself makes are);
and without the teardown, objects still reachable from modules at exit are not finalized.

Protocol, one connection per run: the client sends one JSON line ``{"argv", "env", "cwd"}``
with three file descriptors (stdin, stdout, stderr); the server answers ``{"pid": N}`` and,
when that process has ended, ``{"status": waitstatus}``.
"""

from __future__ import annotations

import array
import contextlib
import functools
import json
import os
import signal
import socket
import sys
from typing import Callable, NoReturn

MAX_REQUEST = 1 << 20


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data = b""
    while not data.endswith(b"\n"):
        msg, ancdata, _flags, _addr = conn.recvmsg(MAX_REQUEST, socket.CMSG_LEN(3 * fds.itemsize))
        if not msg:
            raise EOFError("client went away")
        data += msg
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return json.loads(data), list(fds)


def _serve(path: str) -> tuple[dict, socket.socket]:
    """Accept runs for ever; returns only in a forked process that is to become a CLI run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the per-run handlers are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        if os.fork():
            conn.close()
            continue
        # the handler of one run: start it, report its pid and, later, how it ended
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            request, fds = _recv_request(conn)
        except Exception:
            os._exit(1)
        pid = os.fork()
        if pid == 0:
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            return request, conn
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            _, status = os.waitpid(pid, 0)
            conn.sendall(json.dumps({"status": status}).encode() + b"\n")
        os._exit(0)


def _wandb_temp_folders() -> list[tuple[object, str]]:
    """The ``tempfile.TemporaryDirectory`` objects wandb makes at import (media staging and
    artifact downloads; each removed at the exit of the process that made it), with their suffixes."""
    found = []
    private = sys.modules.get("wandb.sdk.data_types._private")
    if private is not None:
        found.append((private.MEDIA_TMP, "wandb-media"))
    artifact = sys.modules.get("wandb.sdk.artifacts.artifact")
    if artifact is not None:
        found.append((artifact.Artifact._TMP_DIR, "wandb-artifacts"))
    return found


def _own_wandb_temp_folders(*, parent: bool) -> None:
    """The server removes wandb's import-time folders at once (it is killed, never exits);
    each run makes its own, removed when that run exits, as in a fresh interpreter."""
    import shutil
    import tempfile
    import weakref

    for folder, suffix in _wandb_temp_folders():
        folder._finalizer.detach()
        if parent:
            shutil.rmtree(folder.name, ignore_errors=True)
            continue
        folder.name = tempfile.mkdtemp(suffix)
        folder._finalizer = weakref.finalize(folder, shutil.rmtree, folder.name, ignore_errors=True)


def _run_and_exit(run: Callable[..., object], *args: object, **kwargs: object) -> NoReturn:
    """Call ``run(*args, **kwargs)`` as the interpreter runs a ``-m`` module and end the process as the
    interpreter would, short of its teardown: the exit code (``SystemExit``'s, 1 after an
    uncaught exception printed by ``sys.excepthook``), non-daemon threads joined, atexit
    handlers run (an error in one printed as at exit), the run's own reference cycles collected
    (a ``__del__`` failing prints as at exit), stdout and stderr flushed (exit code 120 and the
    error printed if that fails), death by SIGINT after an unhandled Ctrl-C; then ``os._exit``.

    What is skipped is freeing the whole heap module by module, which in a process forked from
    this server touched (copy-on-write) every page of the imported SDKs: about 0.13 s of CPU per
    run, 3-4x what the rest of a short command costs. Lost with it: ``__del__`` of objects still
    reachable from modules at exit, and a file object left unclosed there (its buffer is not
    flushed: such a leak makes a test fail here, it cannot make one pass).
    """
    import atexit
    import gc
    import threading

    code = 0
    try:
        run(*args, **kwargs)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:  # as the interpreter does: the object printed, exit code 1
            with contextlib.suppress(Exception):
                print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:
        if exc.__traceback__ is not None:  # the traceback from ``run`` on, without this function's frame
            exc.__traceback__ = exc.__traceback__.tb_next
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
        if isinstance(exc, KeyboardInterrupt):  # what ``python -m`` notes for its exit (Modules/main.c)
            _unhandled_interrupt().value = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except Exception as exc:
            if stream is sys.stdout:
                sys.unraisablehook(sys.UnraisableHookArgs((type(exc), exc, exc.__traceback__, None, stream)))
            code = 120
    if _unhandled_interrupt().value:  # a Ctrl-C that escaped: die of SIGINT, as the interpreter does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


@functools.cache
def _unhandled_interrupt():
    """CPython's note that a KeyboardInterrupt went unhandled (``_Py_UnhandledKeyboardInterrupt``),
    which makes it kill itself with SIGINT at exit whatever the exit code. From Python 3.12 the
    note lives in the interpreter's runtime state, which ctypes cannot name: a note of this
    module's own stands in for it (the same object at every call), set only by
    :func:`_run_and_exit` (an unhandled Ctrl-C out of the run, the case that matters)."""
    import ctypes

    try:
        return ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except ValueError:  # no such symbol
        return ctypes.c_int(0)


if __name__ == "__main__":
    # What the runs need, imported once. Each import is optional: a missing extra makes the
    # run import (and fail) as it would in a fresh interpreter.
    import runpy

    import trackstore.cli.main  # noqa: F401

    # mlflow is the costliest import; wandb (with the launch module every wandb.init imports,
    # about 1.8 s of CPU together) and swanlab come next. wandb's only per-process state made at
    # import is two temporary folders, each run gets its own (_own_wandb_temp_folders).
    for name in ("mlflow", "trackstore.sync.mlflow", "trackstore.sync.engine", "trackstore.read.views", "duckdb",
                 "pyarrow.parquet", "typer", "rich.console", "wandb", "wandb.sdk.launch.inputs.internal",
                 "trackstore.sync.wandb", "swanlab", "trackstore.sync.swanlab"):
        with contextlib.suppress(Exception):
            __import__(name)
    _own_wandb_temp_folders(parent=True)
    # What was imported so far, frozen (gc.freeze): the collector never looks at it again, in this
    # server or in a run forked from it. Without this, each run's exit collected the whole
    # imported heap (mlflow, wandb, swanlab: ~1 s of CPU per run, and copy-on-write faults of
    # every page the collector touched), 10-20x what a fresh ``--version`` costs; with it, about
    # 0.1 s. What a run makes itself is collected as in any interpreter.
    import gc

    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    request, conn = _serve(sys.argv[1])
    conn.close()
    _own_wandb_temp_folders(parent=False)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv[1:] = request["argv"]
    sys.path[0] = os.getcwd()  # as ``python -m`` has it (this script's folder must not be importable)
    sys.modules.pop("trackstore.cli.main", None)  # run afresh as __main__, as ``python -m`` does
    _run_and_exit(runpy.run_module, "trackstore.cli.main", run_name="__main__", alter_sys=True)
