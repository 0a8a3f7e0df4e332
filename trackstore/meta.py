"""Run metadata (``run.json``), writer heartbeats, and telling a live run from a crashed one.

Every process writing a run has a heartbeat file ``_writers/<writer_id>.json`` (host, pid,
process start time, ``heartbeat_at``, status). A run's recorded status is what its writers
last wrote. A writer killed with ``kill -9`` never writes again, so readers derive the
*effective* status: a run recorded ``running`` is reported ``crashed`` when none of its
writers is alive. A writer is alive when

* it is on the reader's host: its pid exists and is the same process (its start time
  matches, so a reused pid does not count) and is not a zombie — known at once, or
* it is on another host: its heartbeat is younger than :data:`STALE_AFTER_S` (120 s).

The writer thread rewrites the heartbeat every :data:`HEARTBEAT_INTERVAL_S` (10 s), so a
foreign-host run is reported ``crashed`` between 120 and 130 s after its writer died. The
bound is twelve heartbeats wide so that a slow shared filesystem or a long flush (a busy NFS
server) does not make a live run look dead. A writer whose clock runs more than the bound
behind the reader's is also reported dead; keep hosts NTP-synchronised.

When several writers share a run (ranks, or a resumed attempt), the run ends when the last
of them ends: :func:`ended_status` combines their final states.
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any

from .atomic import read_json, write_json_atomic
from .layout import RunPaths

HEARTBEAT_INTERVAL_S = 10.0
STALE_AFTER_S = 120.0
META_VERSION = 1

STATUSES = ("running", "finished", "failed", "crashed")


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="microseconds")


def parse_iso(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        return None


def hostname() -> str:
    return socket.gethostname()


def process_start_ticks(pid: int) -> int | None:
    """Kernel start time of a process (Linux), used to detect pid reuse. None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return False
    if start_ticks is not None:
        now_ticks = process_start_ticks(pid)
        if now_ticks is not None and now_ticks != start_ticks:
            return False  # pid was reused by another process
    # a zombie (killed, not yet reaped) is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
    except (OSError, IndexError):
        pass
    return True


def git_info(cwd: str) -> dict | None:
    """Commit, branch and dirty flag of the working directory's git checkout, if any (fast, bounded)."""
    def _git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=2)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "branch": _git("rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(status)}


def environment_info() -> dict[str, Any]:
    from ._version import __version__

    try:
        user = getpass.getuser()
    except Exception:
        user = None
    cwd = os.getcwd()
    return {
        "host": hostname(),
        "pid": os.getpid(),
        "user": user,
        "command": list(sys.argv),
        "cwd": cwd,
        "git": git_info(cwd) if os.environ.get("TRACKSTORE_DISABLE_GIT") != "1" else None,
        "python": platform.python_version(),
        "trackstore_version": __version__,
    }


def read_run_json(paths: RunPaths) -> dict | None:
    try:
        data = read_json(paths.run_file)
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def write_run_json(paths: RunPaths, meta: dict, *, durable: bool = True) -> None:
    paths.dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.run_file, meta, durable=durable)


def write_writer_file(paths: RunPaths, info: dict, *, durable: bool = False) -> None:
    paths.writers_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.writer_file(info["writer_id"]), info, durable=durable)


def read_writer_files(paths: RunPaths) -> list[dict]:
    out = []
    try:
        entries = sorted(paths.writers_dir.glob("*.json"))
    except OSError:
        return out
    for p in entries:
        try:
            data = read_json(p)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def writer_alive(info: dict, now: float | None = None, this_host: str | None = None) -> bool:
    """Is the process behind this heartbeat file still writing? See the module docstring."""
    if info.get("status", "running") != "running":
        return False
    now = time.time() if now is None else now
    this_host = hostname() if this_host is None else this_host
    if info.get("host") == this_host and isinstance(info.get("pid"), int):
        return pid_alive(info["pid"], info.get("pid_start"))
    beat = parse_iso(info.get("heartbeat_at"))
    return beat is not None and now - beat < STALE_AFTER_S


def ended_status(writers: list[dict]) -> str | None:
    """The run's status once every writer has ended, or None while one is still alive.

    ``crashed`` writer files are earlier attempts that a resume superseded and do not count,
    unless nothing else is left. A writer that died while others went on makes the run
    ``crashed``; otherwise any ``failed`` writer makes it ``failed``, else ``finished``.
    """
    if not writers or any(writer_alive(w) for w in writers):
        return None
    states = [w.get("status", "running") for w in writers]
    if "running" in states:  # recorded running but dead: it died without finishing
        return "crashed"
    states = [s for s in states if s != "crashed"]
    if not states:
        return "crashed"
    return "failed" if "failed" in states else "finished"


def effective_status(meta: dict, writers: list[dict], now: float | None = None) -> str:
    """The status a reader should report: ``crashed`` for a running run with no live writer."""
    status = meta.get("status", "running")
    if status != "running":
        return status
    if writers:
        if any(writer_alive(w, now) for w in writers):
            return "running"
        return ended_status(writers) or "crashed"
    return "running" if writer_alive({"status": "running", **meta}, now) else "crashed"


def run_status(paths: RunPaths) -> str | None:
    meta = read_run_json(paths)
    if meta is None:
        return None
    return effective_status(meta, read_writer_files(paths))


def any_writer_alive(paths: RunPaths) -> bool:
    return any(writer_alive(w) for w in read_writer_files(paths))

