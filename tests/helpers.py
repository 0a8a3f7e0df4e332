"""Helpers for tests: run the real CLI and real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, root: Path | None = None, env: dict | None = None, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real ``trackstore`` CLI in a subprocess (exit code, stdout, stderr as a user sees them)."""
    cmd = [sys.executable, "-m", "trackstore.cli.main", *args]
    if root is not None:
        cmd += ["--root", str(root)]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, input=input, timeout=timeout)


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


def fake_old_client(tmp_path, dist: str, version: str) -> dict:
    """An environment in which ``importlib.metadata`` reports ``dist`` at ``version`` (its
    metadata first on ``sys.path``), while the real package stays importable."""
    site = tmp_path / "old-client-metadata"
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}


_MLFLOW_TEMPLATE: Path | None = None


def mlflow_sqlite_uri(tmp_path: Path, name: str = "m.db") -> str:
    """A ``sqlite:///`` URI of a new, empty MLflow store in ``tmp_path``.

    MLflow builds a new sqlite store by running its ~60 schema migrations, about 4 s on these
    machines, in every process that opens it first. The tests that each need a fresh store copy
    one migrated once per test process instead; what is being tested (trackstore writing into
    an empty store) is the same.
    """
    global _MLFLOW_TEMPLATE
    import shutil
    import tempfile

    if _MLFLOW_TEMPLATE is None:
        from mlflow.tracking import MlflowClient

        template = Path(tempfile.mkdtemp(prefix="trackstore-test-mlflow-")) / "empty.db"
        MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()  # runs the migrations
        _MLFLOW_TEMPLATE = template
    db = tmp_path / name
    shutil.copyfile(_MLFLOW_TEMPLATE, db)
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
