"""This machine and its processes: host name, whether a process still lives, and what
``run.json`` records about the environment a run started in.

The promise: :func:`pid_alive` tells a live process from a dead one on this host without
false positives from reused pids (the process start time must match) or zombies; it never
signals anything (signal 0 only). :func:`git_info` never takes more than a few seconds
(bounded subprocess calls). Nothing here touches the store.
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
import sys
from typing import Any

PID_MAX = 2**31 - 1  # pid_t is a signed 32-bit integer


def hostname() -> str:
    """This machine's host name, as writer files and locks record it."""
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
    """Whether process ``pid`` on this host lives (and, with ``start_ticks``, is the same process)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
        return False  # 0 and negative pids would address process groups; huge ones overflow
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except (OSError, OverflowError):
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
    """Host, pid, user, command, cwd, git and versions: what a new run records in run.json."""
    from .._version import __version__

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
