"""Helpers for tests: run the real CLI and real child processes."""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from tests import forkcli

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, root: Path | None = None, env: dict | None = None, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real ``trackstore`` CLI in a process of its own (exit code, stdout, stderr as a
    user sees them): forked from the tests' fork server (:mod:`tests.zygote`), which has the
    heavy imports done, or a fresh ``python -m trackstore.cli.main`` when the run's ``PYTHON*``
    variables differ from the server's (they only take effect in a fresh interpreter) or
    ``TRACKSTORE_TEST_FORKSERVER=0``."""
    argv = [*args, *(["--root", str(root)] if root is not None else [])]
    full_env = {**os.environ, **(env or {})}
    if _forkserver_usable(full_env):
        return _run_forked(argv, full_env, input, timeout)
    cmd = [sys.executable, "-m", "trackstore.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, input=input, timeout=timeout)


_START_ENV = dict(os.environ)  # as at collection, before any test changed it: the fork server's own
_forkserver: tuple[subprocess.Popen, str] | None = None
_forkserver_lock = threading.Lock()


def _server_python_env() -> dict:
    """The fork server's own ``PYTHON*`` variables (it starts with :data:`_START_ENV`)."""
    return {k: v for k, v in _START_ENV.items() if k.startswith("PYTHON")}


def _forkserver_usable(env: dict) -> bool:
    # the tests' environment has TRACKSTORE_* scrubbed (conftest.py): the switch is read from the
    # environment pytest started with as well
    if _START_ENV.get("TRACKSTORE_TEST_FORKSERVER") == "0" or not hasattr(os, "fork"):
        return False
    return forkcli.forks_faithfully(env, _server_python_env())


def _forkserver_path() -> str:
    global _forkserver
    with _forkserver_lock:
        if _forkserver is None or _forkserver[0].poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="ts-forkserver-"), "socket")
            proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "zygote.py"), path], env=_START_ENV,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if proc.stdout.readline().strip() != b"ready":
                raise RuntimeError("the tests' fork server did not start (run with TRACKSTORE_TEST_FORKSERVER=0)")
            atexit.register(proc.kill)
            _forkserver = (proc, path)
        return _forkserver[1]


def _ask_forkserver(argv: list[str], env: dict, fds: tuple[int, int, int]) -> socket.socket:
    """Ask the fork server for one CLI run with ``fds`` as its stdin, stdout and stderr; the
    connection its replies (``{"pid"}``, then ``{"status"}``) come on (tests/zygote.py)."""
    return forkcli.ask(_forkserver_path(), argv, env, os.getcwd(), fds)


def forked_cli_command(folder: Path, env: dict) -> Path | None:
    """A ``trackstore`` command written into ``folder`` (to put first on a shell's ``PATH``) that
    runs each CLI command forked from the fork server (:mod:`tests.forkcli`); None where
    :func:`run_cli` would not fork for ``env`` either (the shell then runs the real one)."""
    if not _forkserver_usable(env):
        return None
    real = Path(sys.executable).parent / "trackstore"
    return Path(forkcli.install(str(folder), _forkserver_path(), _server_python_env(), sys.executable, str(real)))


def _run_forked(argv: list[str], env: dict, input: str | None, timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trackstore.cli.main", *argv]  # what it stands for, for messages
    encoding = locale.getpreferredencoding(False)  # what subprocess.run(text=True) decodes with
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        sock = _ask_forkserver(argv, env, (in_r, out_w, err_w))
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    replies = sock.makefile("rb")
    pid = json.loads(replies.readline())["pid"]
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}

    def drain(fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            while block := f.read1(65536):
                chunks[fd].append(block)

    def feed() -> None:
        with os.fdopen(in_w, "wb") as f, contextlib.suppress(BrokenPipeError):
            if input:
                f.write(input.encode(encoding))

    threads = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
    threads.append(threading.Thread(target=feed, daemon=True))
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout

    def text(fd: int) -> str:
        return b"".join(chunks[fd]).decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        sock.close()
        raise subprocess.TimeoutExpired(cmd, timeout, text(out_r), text(err_r))
    status = json.loads(replies.readline())["status"]
    sock.close()
    return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(status), text(out_r), text(err_r))


class ForkedCli:
    """A CLI run forked from the fork server and left running, for the tests that signal it
    mid-work (SIGKILL at a chosen moment): ``pid``, ``poll()``, ``wait()``, ``send_signal()``,
    ``kill()`` and ``returncode`` as :class:`subprocess.Popen` has them. Its output goes to
    /dev/null."""

    def __init__(self, argv: list[str], env: dict) -> None:
        null = os.open(os.devnull, os.O_RDWR)
        try:
            self._sock = _ask_forkserver(argv, env, (null, null, null))
        finally:
            os.close(null)
        self._buffer = b""
        self.pid: int = json.loads(self._line(None))["pid"]
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> bytes | None:
        """The fork server's next reply line; None if none came within ``timeout`` (0: don't wait)."""
        self._sock.settimeout(timeout)
        try:
            while b"\n" not in self._buffer:
                chunk = self._sock.recv(4096)
                if not chunk:
                    raise RuntimeError("the fork server closed the connection without an answer")
                self._buffer += chunk
        except (BlockingIOError, TimeoutError):
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def poll(self) -> int | None:
        if self.returncode is None and (line := self._line(0.0)) is not None:
            self._ended(line)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(["trackstore"], timeout or 0)
            self._ended(line)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, line: bytes) -> None:
        self.returncode = os.waitstatus_to_exitcode(json.loads(line)["status"])
        self._sock.close()


def spawn_cli(*args: str | Path, env: dict | None = None) -> ForkedCli | subprocess.Popen:
    """Start the real CLI and return at once (output discarded): forked from the fork server when
    it can be (see :func:`run_cli`), else a fresh ``python -m trackstore.cli.main``."""
    argv = [str(a) for a in args]
    full_env = {**os.environ, **(env or {})}
    if _forkserver_usable(full_env):
        return ForkedCli(argv, full_env)
    return subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", *argv], env=full_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cli_in_pty(*args: str | Path, columns: int) -> tuple[int, str]:
    """The real CLI on a pseudo-terminal ``columns`` wide, as a person over ssh runs it:
    (exit code, everything it printed, CRLF as LF)."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # child
        os.environ["COLUMNS"] = str(columns)
        os.execv(sys.executable, [sys.executable, "-m", "trackstore.cli.main", *map(str, args)])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace").replace("\r\n", "\n")


def python_child(code: str, *, env: dict | None = None, **kw) -> subprocess.Popen:
    """Start a child Python process running ``code`` (for SIGKILL and concurrency tests)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen([sys.executable, "-c", code], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def kill9(child: subprocess.Popen) -> None:
    """SIGKILL a :func:`python_child` (no handler, no flush: a crash) and reap it."""
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    child.stderr.close()


def rewrite_cursor(path: Path, cursor: dict) -> None:
    """Replace a sync cursor file with ``cursor`` (its JSON) the way the store does: a temp file
    renamed over it (trackstore.store.atomic). A test that wrote the file in place would keep its
    folder's fingerprint, and the catalog, which trusts a cursor's cached summary while its folder
    is unchanged (cursors are only ever renamed into place), may never see the edit."""
    from trackstore.store.atomic import write_json_atomic

    write_json_atomic(path, cursor, indent=None)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` until it holds; fail the test saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def fake_old_client(tmp_path, dist: str, version: str) -> dict:
    """An environment in which ``importlib.metadata`` reports ``dist`` at ``version`` (its
    metadata first on ``sys.path``), while the real package stays importable."""
    site = tmp_path / "old-client-metadata"
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}


def mlflow_template_db() -> Path:
    """An empty MLflow sqlite store, migrated once per machine and MLflow version.

    MLflow builds a new sqlite store by running its ~60 schema migrations, about 4 s of CPU on
    these machines, in every process (client or server) that opens it first. The tests that each
    need a fresh store copy this one instead; what is being tested (trackstore writing into an
    empty store, a server starting on an empty store) is the same. Made in a temporary folder
    and renamed into place, so a test process killed while making it leaves nothing half-made.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    folder = Path(tempfile.gettempdir()) / f"trackstore-test-mlflow-{mlflow.__version__}-uid{os.getuid()}"
    template = folder / "empty.db"
    if not template.exists():
        folder.mkdir(exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="making-", dir=folder))
        MlflowClient(tracking_uri=f"sqlite:///{work / 'empty.db'}").search_experiments()  # runs the migrations
        os.replace(work / "empty.db", template)
        shutil.rmtree(work, ignore_errors=True)
    return template


def mlflow_sqlite_uri(tmp_path: Path, name: str = "m.db") -> str:
    """A ``sqlite:///`` URI of a new, empty MLflow store in ``tmp_path`` (a copy of
    :func:`mlflow_template_db`)."""
    db = tmp_path / name
    shutil.copyfile(mlflow_template_db(), db)
    return f"sqlite:///{db}"


def start_run_with_an_orphan_span(root: Path, *, metrics: bool = False) -> tuple[subprocess.Popen, str]:
    """A live writer process holding one complete trajectory and one whose root span was never
    written (no checkpoint yet): what a SIGKILL mid-trajectory leaves. Returns (process, run id);
    kill the process to make the run crashed."""
    logs = 'run.log({"a": 1.0}, step=0)\nrun.log({"a": 2.0}, step=1)\n' if metrics else ""
    code = f"""
import sys, trackstore
run = trackstore.init("proj", root={str(root)!r}, flush_interval=3600)  # no automatic checkpoint
{logs}with run.trace(step=0, sample_index=0) as tr:       # complete
    with tr.span("done", kind="llm"):
        pass
tr = run.trace(step=1, sample_index=1).__enter__()  # open: its root row is never written
with tr.span("turn", kind="llm", inputs="hi") as sp:
    sp.set_outputs("hello")
run.flush()
print(run.id, flush=True)
sys.stdin.read()
"""
    p = python_child(code, stdin=subprocess.PIPE)
    run_id = p.stdout.readline().strip()
    if not run_id:
        p.kill()
        raise AssertionError(p.stderr.read())
    return p, run_id


def log_record(run, kind: str, step: int, artifact: Path) -> None:
    """One record of ``kind`` at ``step`` (the model tests' histories): two metrics, a histogram,
    a sample, a trace of one span, or an artifact made from ``artifact`` (written first)."""
    import trackstore

    if kind == "metrics":
        run.log({"a": float(step), "b": 2.0 * step}, step=step)
    elif kind == "histograms":
        run.log({"h": trackstore.Histogram([1.0, float(step)])}, step=step)
    elif kind == "samples":
        run.log_samples([{"input": f"q{step}", "output": "a"}], step=step)
    elif kind == "spans":
        with run.trace(step=step, sample_index=0) as tr:
            with tr.span("assistant", inputs="hi", outputs="ho"):
                pass
    else:
        artifact.write_bytes(b"w" * max(1, step % 7))
        run.log_artifact(artifact, name=f"ckpt{step}", type="model")


def stored_rows(root: Path, sql: str) -> list[tuple]:
    """The rows of ``sql`` over the store at ``root`` (trackstore.connect's views)."""
    import trackstore

    con = trackstore.connect(root)
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


def has_swanboard() -> bool:
    """Is SwanLab's local dashboard (its local mode needs it) installed at the version it names?"""
    from importlib.metadata import PackageNotFoundError, version

    from trackstore.sync.swanlab_view import SWANBOARD_VERSION

    try:
        return version("swanboard") == SWANBOARD_VERSION
    except PackageNotFoundError:
        return False


# ----------------------------------------------------------------------------- processes
def descendants(pid: int) -> list[int]:
    """The live (not zombie) processes below ``pid``, from /proc."""
    parents: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(d.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if state[state.rindex(")") + 2] != "Z":
            out.append(pid)
    return out


def wait_gone(pids: list[int], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)
