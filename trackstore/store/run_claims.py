"""Run claims and deletion announcements: how a resuming writer and ``trackstore gc`` never both win.

While gc deletes a run it names it in the maintenance lock's info, ``deleting:
"project/run_id"`` (:data:`DELETING`), written durably with
:func:`trackstore.store.locks.announce` before its last re-check. A resuming writer writes
first, then checks: its first write is a *claim*, ``<run>/_writers/<id>.claim``
(:func:`claim_run`), which gc counts as a live writer (:func:`run_claimed`) until the process
has its own writer file; then it calls :func:`wait_for_deletion_verdict` (a single read of the
lock file when nothing is announced). So gc's re-check sees the claim and keeps the run, or
the writer sees the announcement and waits for gc's verdict (see :mod:`trackstore.upkeep.gc`).
A claim never creates the run folder, and one whose process died is removed on the next
resume (:func:`dead_claims`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import LockHeldError
from . import meta as _meta
from .clock import iso
from .host import hostname, process_start_ticks
from .layout import CLAIM_SUFFIX, RunPaths
from .locks import MAINTENANCE, POLL_S, LockState, read_json_object, read_lock

DELETING = "deleting"  # maintenance lock info: the ``project/run_id`` gc is deleting right now
DELETION_WAIT_S = 60.0  # how long a resuming writer waits for gc's verdict on its run



# ---------------------------------------------------------------------------- deletion announcements
def deletion_announced(root: str | os.PathLike, project: str, run_id: str) -> LockState | None:
    """The live maintenance lock if its holder announced that it is deleting this run, else None.

    Reads one small file and creates nothing, so a writer can afford it on every resume.
    """
    state = read_lock(root, MAINTENANCE)
    if state is None or state.stale or state.info.get(DELETING) != f"{project}/{run_id}":
        return None
    return state


def wait_for_deletion_verdict(root: str | os.PathLike, project: str, run_id: str, *,
                              timeout: float = DELETION_WAIT_S) -> bool:
    """Return once no live gc announces the deletion of this run (True if one did and this
    waited for it); LockHeldError after ``timeout``."""
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        holder = deletion_announced(root, project, run_id)
        if holder is None:
            return waited
        waited = True
        if time.monotonic() >= deadline:
            raise LockHeldError(
                f"run {project}/{run_id} is being deleted by trackstore gc ({holder.describe()}) and gc has "
                f"not decided within {timeout:.0f} s; wait for that gc to end (or stop it), then resume the run again")
        time.sleep(POLL_S / 4)


# ---------------------------------------------------------------------------- run claims
def claim_run(paths: RunPaths) -> Path | None:
    """Claim an existing run folder for a process about to write it: ``_writers/<id>.claim``
    (host, pid, process start time, time), written durably. gc counts a live claim as a live
    writer. Never creates the run folder: None when it is not there (being deleted, or gone).
    A claim is not a writer file, so it is never recorded as an attempt of the run."""
    from .atomic import write_json_atomic
    from .layout import new_writer_id

    now = iso(time.time())
    claim = {"claim_id": new_writer_id(), "host": hostname(), "pid": os.getpid(),
             "pid_start": process_start_ticks(os.getpid()), "heartbeat_at": now}
    path = paths.writers_dir / f"{claim['claim_id']}{CLAIM_SUFFIX}"
    try:
        paths.writers_dir.mkdir(exist_ok=True)  # never parents=True: that would recreate a moved folder
        write_json_atomic(path, claim, durable=True)
    except FileNotFoundError:
        return None
    return path


def _claims(paths: RunPaths) -> list[tuple[Path, dict | None]]:
    try:
        files = sorted(paths.writers_dir.glob(f"*{CLAIM_SUFFIX}"))
    except OSError:
        return []
    return [(f, read_json_object(f)) for f in files]


def run_claimed(paths: RunPaths) -> bool:
    """Does a live process hold a claim on this run folder? (Alive as for writer files:
    :func:`trackstore.store.meta.writer_alive`; an unreadable claim counts while it is fresh.)"""
    now = time.time()
    for f, data in _claims(paths):
        if data is None:
            try:
                if now - f.stat().st_mtime < _meta.STALE_AFTER_S:
                    return True
            except OSError:
                pass
        elif _meta.writer_alive(data, now):
            return True
    return False


def dead_claims(paths: RunPaths) -> list[Path]:
    """Claims whose process died before it became a writer (readable ones only)."""
    return [f for f, data in _claims(paths) if data is not None and not _meta.writer_alive(data)]


def release_claim(path: Path) -> None:
    """Remove a claim; never raises (a claim that left with a deleted folder is gone already)."""
    try:
        path.unlink()
    except OSError:
        pass
