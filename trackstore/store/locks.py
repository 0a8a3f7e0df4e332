"""Named, cross-process locks under ``<root>/_locks/``: one sync per run and destination, one maintenance job.

The promise: at most one live process holds a given lock name in a store, on one host or on
several hosts sharing the store's filesystem, and a lock whose holder died never blocks anyone
for longer than it takes to notice the death.

Usage (the sync engine, gc, compaction and import all use it)::

    from trackstore.store import locks

    with locks.acquire(root, "sync-mlflow-1a2b3c4d5e6f") as lock:   # LockHeldError if held
        lock.set_info(runs=["p/20261202-...-abc"])   # what gc must not delete right now
        for batch in ...:
            lock.refresh()        # heartbeat; raises LockHeldError if the lock was taken over
    # released here, also when the block raises

    locks.acquire(root, "gc", wait=True, timeout=60)   # wait up to 60 s for the holder

API:

* :func:`acquire(root, name, *, wait=False, timeout=None, stale_after=...) <acquire>` returns a
  held :class:`Lock` (also a context manager). Not waiting, a held lock raises
  :class:`~trackstore.errors.LockHeldError` whose message names the holder (host, pid, since);
  waiting, it polls until ``timeout`` seconds (``None`` = for ever) and then raises.
* :meth:`Lock.refresh` rewrites ``heartbeat_at``; call it at least every ``stale_after / 2``
  seconds while working (the sync engine does it per batch).
* :meth:`Lock.set_info` stores extra fields (``runs=[...]``: run ids or ``project/run_id``
  being worked on); :func:`live_locks` and :func:`runs_in_use` read them back for gc.
* :meth:`Lock.release` (idempotent) removes the file only if it is still ours.

Reading without writing. :func:`reading` keeps maintenance away while a command that only
reads needs the store to hold still (``export``), and writes nothing into the store: it
takes a shared ``flock`` on the root folder itself, which every ``maintenance`` holder takes
exclusively (besides its lock file) for as long as it holds the lock. A reader waits up to
:data:`BRIEF_WAIT_S` for a run merging its own files and otherwise raises
:class:`~trackstore.errors.LockHeldError`; a maintenance job that finds readers does the
same. Where the root folder cannot be flocked, a reader checks the lock file only and says
so in one line (on a read-only filesystem nothing can change the store, so nothing is
lost). flock on a folder is local to one host on NFS: a gc started on another host during
an export is not excluded there (the lock file check still sees one already running).

A store that cannot be written (a read-only mount or snapshot, no permission) makes
:func:`acquire` raise :class:`~trackstore.errors.StoreError` (exit 4) in one line naming the
path, never a traceback: commands that change the store cannot run there.

Lock names are short path-safe strings (``[A-Za-z0-9._-]``, at most 120 characters). The
names in use: ``sync-<target>-...`` (the sync engine: one per run and destination, one per
remote object a sync creates for several runs (:func:`sync_object_lock_name`, held for a
moment and naming no runs), and one declaration per sync, see below; a sync lock should declare its runs, best at once with
``acquire(..., info={"runs": [...]})``, because gc treats a live sync lock that names no runs
as "every run is in use") and ``maintenance`` (gc, compaction, import,
``doctor --fix`` and runs merging their own files: at most one of them changes the store at a
time; ``export`` holds them off with :func:`reading`).

Per-run sync locks. ``sync --jobs N`` syncs several runs at once, and two syncs (two cron
jobs, a cron job and a person) may run at the same time: what must never happen is two
processes sending *the same run to the same destination* at once. Each run being synced is
held under :func:`sync_run_lock_name` ``(target, destination, project, run_id)``
(``sync-<target>-run-<24 hex>``, a hash, since project names and destinations are not lock
names), which declares ``runs=["project/run_id"]`` for gc. Different runs, or one run to two
destinations, never contend. A sync also declares every run it selected in a lock of its own
(:func:`sync_session_lock_name`, unique, so never contended) for as long as it works, so gc
leaves them alone as it did when one lock per target covered the whole sync. The name
``sync-<target>`` (:func:`sync_target_lock_name`) was that older whole-target lock: a sync
treats every run as held while a live process holds it (an older trackstore syncing the same
store). :func:`remove_stale_declarations` clears declarations left by dead syncs (their names
are never reused, so nobody would take them over). A lock's ``.guard`` file goes with it: a
release removes both, so no file is left per (run, destination) ever synced.

Deletion announcements. While gc deletes a run it names it in the maintenance lock's info,
written durably with :func:`announce` before its last re-check; a resuming writer claims the
run folder and waits for gc's verdict. Both halves are :mod:`trackstore.store.run_claims`.

How it works. ``<root>/_locks/<name>.lock`` is written under a temporary name and hard-linked
to its own, which fails on an existing name atomically (on local filesystems and NFS), so it
never exists empty (where hard links are refused: ``O_CREAT | O_EXCL``, then the write). It
holds ``{name, host, pid, pid_start, token, created_at, heartbeat_at, info}``. A lock file is *stale* when

* its host is this host and its pid is dead or was reused (start time differs) — on the same
  host the pid decides, so a live but slow holder is never robbed, or
* it is from another host and its heartbeat is older than ``stale_after`` seconds
  (default :data:`STALE_AFTER_S`), or
* it is unreadable (a holder died between create and write: where hard links are refused, or
  a version before 8 December 2026) and older than ``stale_after``.

Taking over a stale lock is race-free: every check-and-create and every takeover runs while
holding ``flock`` on ``<name>.guard`` (released by the kernel if the process dies; a release
removes the guard while holding it, and a process that waited on a removed guard sees that the
path no longer names the file it holds and queues on the new one), and the stale file is first
renamed to a unique name and checked, so a fresh lock created by someone
else in between (possible only where flock does not work) is recognised (inode, mtime, token)
and put back instead of being deleted.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import LockHeldError, StoreError, UsageError
from .clock import iso, parse_iso
from .host import hostname, pid_alive, process_start_ticks
from .layout import GUARD_SUFFIX, LOCK_SUFFIX, LOCKS_DIR, STALE_LOCK_MARK

STALE_AFTER_S = 300.0
POLL_S = 0.2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$")
MAINTENANCE = "maintenance"
BRIEF_JOB = "merge"  # the ``job`` a run's own merge (rolling or at finish) declares in its lock
BRIEF_WAIT_S = 30.0


def locks_dir(root: str | os.PathLike) -> Path:
    return Path(root) / LOCKS_DIR


def lock_path(root: str | os.PathLike, name: str) -> Path:
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"invalid lock name {name!r}: use letters, digits, '.', '_' and '-' (max 120)")
    return locks_dir(root) / f"{name}{LOCK_SUFFIX}"


@dataclass
class LockState:
    """What a lock file says about its holder, and whether that holder is still alive."""

    name: str
    path: Path
    data: dict = field(default_factory=dict)
    stale: bool = False

    @property
    def info(self) -> dict:
        return dict(self.data.get("info") or {})

    @property
    def runs(self) -> list[str] | None:
        """Run ids the holder declared it is working on (None: it declared nothing)."""
        runs = self.info.get("runs")
        return [str(r) for r in runs] if isinstance(runs, list) else None

    def describe(self) -> str:
        d = self.data
        if not d:
            return f"lock {self.name!r} ({self.path}, holder unknown: file unreadable)"
        return (f"lock {self.name!r} held by pid {d.get('pid')} on {d.get('host')} since {d.get('created_at')} "
                f"(last heartbeat {d.get('heartbeat_at')}; file {self.path})")


def read_json_object(path: Path) -> dict | None:
    """The JSON object in a small file (a lock file, a claim); None if it is missing, unreadable
    or not an object."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read() or b"null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_stale(data: dict | None, path: Path, stale_after: float, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    if not data:
        try:
            return now - path.stat().st_mtime > stale_after
        except FileNotFoundError:
            return True
    if data.get("host") == hostname() and isinstance(data.get("pid"), int):
        return not pid_alive(data["pid"], data.get("pid_start"))
    beat = parse_iso(data.get("heartbeat_at")) or parse_iso(data.get("created_at"))
    return beat is None or now - beat > stale_after


def _digest(*parts: str) -> str:
    import hashlib

    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def sync_target_lock_name(target: str) -> str:
    """``sync-<target>``: the whole-target lock of older versions (and the prefix of the others)."""
    return f"sync-{target}"


def sync_run_lock_name(target: str, destination: str, project: str, run_id: str) -> str:
    """The lock held while one run is synced to one destination (see the module docstring)."""
    return f"{sync_target_lock_name(target)}-run-{_digest(target, destination, project, run_id)[:24]}"


def sync_object_lock_name(target: str, destination: str, what: str) -> str:
    """The lock held while a sync creates a remote object every run of a project shares (an
    MLflow experiment): one creator per (destination, object) in a store, so it is made once."""
    return f"{sync_target_lock_name(target)}-object-{_digest(target, destination, what)[:24]}"


def sync_session_lock_name(target: str) -> str:
    """A fresh, never-contended name declaring the runs one sync selected (for gc)."""
    return f"{sync_target_lock_name(target)}-session-{secrets.token_hex(8)}"


def declare(root: str | os.PathLike, name: str, info: dict) -> Lock:
    """Create the lock ``name`` for a name nobody else uses (:func:`sync_session_lock_name`):
    no guard file, since nobody contends for it.
    The returned :class:`Lock` refreshes and releases like any other."""
    root = Path(root)
    path = _writable_lock_path(root, name)
    now = iso(time.time())
    data = {"name": name, "host": hostname(), "pid": os.getpid(), "pid_start": process_start_ticks(os.getpid()),
            "token": secrets.token_hex(8), "created_at": now, "heartbeat_at": now, "info": dict(info)}
    try:
        if not _try_create(path, data):
            raise LockHeldError(f"lock {name!r} exists already ({path}); declared names must be unique")
    except OSError as exc:
        raise _unwritable(name, path, exc) from None
    lock = Lock(root, name, path, data, STALE_AFTER_S)
    lock.guarded = False
    return lock


def _lock_files(root: str | os.PathLike, prefix: str) -> list[Path]:
    """The lock files whose names start with ``prefix``, in name order. The folder may also hold
    a ``.guard`` file per lock name ever used (left by versions before 8 December 2026: one per
    run and destination synced, tens of thousands in a big store), so names are filtered as
    strings before any path is made."""
    d = locks_dir(root)
    with os.scandir(d) as it:
        names = sorted(e.name for e in it if e.name.startswith(prefix) and e.name.endswith(LOCK_SUFFIX))
    return [d / n for n in names]


def remove_stale_declarations(root: str | os.PathLike, prefix: str) -> int:
    """Remove the lock files made by :func:`declare` under ``prefix`` whose holder is dead (their names
    are never reused, so nobody would take them over); the number removed. Without a guard: a
    file is moved aside and checked (:func:`_take_over`), so two processes cleaning at once, or
    a live holder, lose nothing."""
    try:
        entries = _lock_files(root, prefix)
    except OSError:
        return 0
    removed = 0
    for p in entries:
        judged = _identity(p)
        if judged is not None and _is_stale(read_json_object(p), p, STALE_AFTER_S):
            _take_over(p, judged)
            removed += 1
    return removed


def read_lock(root: str | os.PathLike, name: str, *, stale_after: float = STALE_AFTER_S) -> LockState | None:
    """The state of one lock, or None when nobody holds it."""
    path = lock_path(root, name)
    if not path.exists():
        return None
    data = read_json_object(path)
    return LockState(name, path, data or {}, _is_stale(data, path, stale_after))


def live_locks(root: str | os.PathLike, prefix: str = "", *, stale_after: float = STALE_AFTER_S) -> list[LockState]:
    """Every lock whose name starts with ``prefix`` and whose holder is alive."""
    try:
        entries = _lock_files(root, prefix)
    except FileNotFoundError:
        return []
    out = []
    for p in entries:
        name = p.name[: -len(LOCK_SUFFIX)]
        data = read_json_object(p)
        if p.exists() and not _is_stale(data, p, stale_after):
            out.append(LockState(name, p, data or {}, False))
    return out


def runs_in_use(root: str | os.PathLike, prefix: str = "sync-") -> tuple[set[str], list[LockState]]:
    """Runs named by live ``prefix*`` locks, and the live locks that named none.

    A run id and its ``project/run_id`` form are both accepted in a lock's ``runs`` field.
    A live lock without a ``runs`` field means "unknown runs": callers must treat every run
    as in use (gc then deletes nothing and says why).
    """
    named: set[str] = set()
    unnamed = []
    for st in live_locks(root, prefix):
        runs = st.runs
        if runs is None:
            unnamed.append(st)
        else:
            named.update(runs)
    return named, unnamed


def run_in_use(project: str, run_id: str, named: set[str]) -> bool:
    return run_id in named or f"{project}/{run_id}" in named


TEMP_SUFFIX = ".tmp"  # a lock file being written: ``.<name>.lock.<8 hex>.tmp`` (:func:`_try_create`)
GUARD_ATTEMPTS = 100  # guards removed under a waiter, one after the other: then it goes on unguarded


@contextmanager
def _guard(path: Path, *, remove: bool = False) -> Iterator[None]:
    """Serialise check-and-create/takeover of one lock name among processes (kernel flock).

    The guard file may be removed by whoever holds it (``remove``: a release, which leaves no
    file behind). A process that waited for the flock of a removed guard holds a file nobody
    else will open again: after taking the flock it checks that the path still names the file
    it holds (device and inode) and, when not, opens the path again and waits there."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    guard = path.with_suffix(GUARD_SUFFIX)
    fd = None
    for _ in range(GUARD_ATTEMPTS):
        try:
            fd = os.open(guard, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            break  # filesystem without flock: O_EXCL plus the token check still protect us
        if _still_named(guard, fd):
            break
        os.close(fd)  # removed by the holder we waited for: queue on the path's new guard
        fd = None
    try:
        yield
        if remove and fd is not None:
            try:
                guard.unlink()  # while still held: a waiter finds the path gone and opens it anew
            except OSError:
                pass
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the flock


def _still_named(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (device and inode): a guard removed
    by its holder, or replaced since, does not."""
    try:
        held, named = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def remove_leftovers(root: str | os.PathLike) -> int:
    """Remove the files in ``_locks/`` that no lock needs: the ``.guard`` files of lock names
    nobody holds (versions before 8 December 2026 left one for every lock name ever taken; a
    process killed in a release leaves one), and the temporary files of lock creations a killed
    process left (:func:`_try_create`; older than :data:`STALE_AFTER_S`). A guard is removed
    under its own flock, taken without waiting (one in use is left), and only while no lock file
    of its name exists; a process that waited on it queues on the path's next guard
    (:func:`_guard`). The number removed. Gc calls it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        return 0
    d = locks_dir(root)
    try:
        with os.scandir(d) as it:
            names = sorted(e.name for e in it if e.name.endswith((GUARD_SUFFIX, TEMP_SUFFIX)))
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = d / name
        if name.endswith(TEMP_SUFFIX):
            try:
                if name.startswith(".") and time.time() - path.stat().st_mtime > STALE_AFTER_S:
                    path.unlink()
                    removed += 1
            except OSError:
                pass
            continue
        if name.startswith("."):
            continue
        lock = path.with_suffix(LOCK_SUFFIX)
        if lock.exists():
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # in use
                continue
            if not _still_named(path, fd) or lock.exists():
                continue  # removed or replaced by now, or the lock was taken before this flock
            path.unlink()
            removed += 1
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


class Lock:
    """A held lock. Use :func:`acquire` to get one."""

    def __init__(self, root: Path, name: str, path: Path, data: dict, stale_after: float):
        self.root = root
        self.name = name
        self.path = path
        self._data = data
        self.stale_after = stale_after
        self.held = True
        self._root_fd: int | None = None  # maintenance only: the root folder's exclusive flock (readers)
        self.guarded = True  # False for :func:`declare`d names: nobody else uses them, no guard file

    @property
    def token(self) -> str:
        return self._data["token"]

    @property
    def info(self) -> dict:
        return dict(self._data.get("info") or {})

    def _rewrite(self) -> None:
        from .atomic import write_json_atomic

        with _guard(self.path) if self.guarded else nullcontext():
            current = read_json_object(self.path)
            if current is None or current.get("token") != self.token:
                self.held = False
                holder = read_lock(self.root, self.name)
                who = holder.describe() if holder else "nobody holds it now"
                raise LockHeldError(f"lost lock {self.name!r}: it was taken over as stale ({who})")
            write_json_atomic(self.path, self._data, durable=False)

    def refresh(self) -> None:
        """Heartbeat: rewrite ``heartbeat_at``. Raises LockHeldError if the lock is no longer ours."""
        self._data["heartbeat_at"] = iso(time.time())
        self._rewrite()

    def set_info(self, **fields: Any) -> None:
        """Record extra fields for others to read, e.g. ``runs=[...]`` (also refreshes the heartbeat)."""
        info = dict(self._data.get("info") or {})
        info.update(fields)
        self._data["info"] = info
        self.refresh()

    def release(self) -> None:
        """Remove the lock file if it is still ours. Idempotent; never raises for I/O trouble."""
        if not self.held:
            return
        self.held = False
        try:
            # the guard goes with the lock file: none is left behind per lock name ever taken
            with _guard(self.path, remove=True) if self.guarded else nullcontext():
                current = read_json_object(self.path)
                if current is not None and current.get("token") == self.token:
                    self.path.unlink()
        except OSError:
            pass
        fd, self._root_fd = self._root_fd, None
        try:
            _close(fd)
        except OSError:
            pass

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<trackstore.store.locks.Lock {self.name!r} held={self.held}>"


def _try_create(path: Path, data: dict) -> bool:
    """Create the lock file holding ``data``; False when the name exists. The file appears whole:
    written under a temporary name, then hard-linked to its own (``link`` fails on an existing
    name, atomically, as ``O_EXCL`` does), so a holder killed at any moment leaves no empty lock
    file, which would count as held until it is ``stale_after`` old. Where the filesystem has no
    hard links: ``O_EXCL``, then the write. Not fsynced: a lock lives as long as its process,
    and a power cut ends every process."""
    body = json.dumps(data, separators=(",", ":")).encode()
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return _create_in_place(path, body)
    try:
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links on this filesystem
            return _create_in_place(path, body)
        return True
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _create_in_place(path: Path, body: bytes) -> bool:
    """:func:`_try_create` where hard links are refused (a lock file left empty by a holder
    killed between its creation and the write is stale by its age, as any unreadable lock)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, body)
    finally:
        os.close(fd)
    return True


def _identity(path: Path) -> tuple | None:
    """What tells one lock file from another: inode, change time, size and holder token."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, (read_json_object(path) or {}).get("token")


def _take_over(path: Path, judged: tuple | None) -> None:
    """Move a stale lock file aside; put it back if it is not the file judged stale.

    Files are told apart by inode, mtime, size and token (:func:`_identity`), so even an
    unreadable lock created by someone else between the judgement and the rename is
    recognised and restored, never deleted.
    """
    aside = path.with_name(f".{path.name}{STALE_LOCK_MARK}{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _identity(aside) != judged:
        try:
            os.link(aside, path)  # a fresh lock was created meanwhile: restore it (fails if replaced)
        except OSError:
            pass
    try:
        aside.unlink()
    except OSError:
        pass


def acquire(root: str | os.PathLike, name: str, *, wait: bool = False, timeout: float | None = None,
            stale_after: float = STALE_AFTER_S, info: dict | None = None) -> Lock:
    """Take lock ``name`` in the store at ``root``; see the module docstring."""
    root = Path(root)
    path = _writable_lock_path(root, name)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        now = time.time()
        data = {
            "name": name,
            "host": hostname(),
            "pid": os.getpid(),
            "pid_start": process_start_ticks(os.getpid()),
            "token": secrets.token_hex(8),
            "created_at": iso(now),
            "heartbeat_at": iso(now),
            "info": dict(info or {}),
        }
        with _guard(path):
            root_fd, readers = _exclude_readers(root) if name == MAINTENANCE else (None, False)
            if not readers:
                try:
                    lock = _create_or_take_over(root, name, path, data, stale_after)
                except OSError as exc:
                    _close(root_fd)
                    raise _unwritable(name, path, exc) from None
                if lock is not None:
                    lock._root_fd = root_fd
                    return lock
                _close(root_fd)
            current = read_json_object(path)
        if not wait or (deadline is not None and time.monotonic() >= deadline):
            raise LockHeldError(_held_message(root, name, path, current, readers, stale_after))
        time.sleep(POLL_S)


def _create_or_take_over(root: Path, name: str, path: Path, data: dict, stale_after: float) -> Lock | None:
    """Create the lock file, or replace a stale one; None when a live holder has it (call under the guard)."""
    if _try_create(path, data):
        return Lock(root, name, path, data, stale_after)
    judged = _identity(path)
    if _is_stale(read_json_object(path), path, stale_after):
        _take_over(path, judged)
        if _try_create(path, data):
            return Lock(root, name, path, data, stale_after)
    return None


def _held_message(root: Path, name: str, path: Path, current: dict | None, readers: bool,
                  stale_after: float) -> str:
    if readers and (not current or _is_stale(current, path, stale_after)):
        return (f"lock {name!r}: the store {root} is being read by a command that needs it unchanged "
                "(trackstore export); wait for it to finish, or retry later")
    holder = LockState(name, path, current or {}, False)
    return f"{holder.describe()}; wait for it to finish, or retry later"


def _writable_lock_path(root: Path, name: str) -> Path:
    """The file of lock ``name``, its folder created; a read-only store is a clear StoreError."""
    path = lock_path(root, name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(name, path.parent, exc) from None
    return path


def _unwritable(name: str, path: Path, exc: OSError) -> StoreError:
    why = exc.strerror or str(exc)
    return StoreError(f"cannot take the {name!r} lock: {why} ({path}). This command changes the store, so it "
                      "needs a writable store; commands that only read (runs, show, sql, status, doctor, export, "
                      "--dry-run) work on a read-only one")


# ---------------------------------------------------------------------------- readers
def _root_fd(root: Path) -> int | None:
    try:
        return os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing releases the flock


def _flock_root(fd: int | None, exclusive: bool) -> bool | None:
    """flock the root folder without waiting: True taken, False someone else holds it, None not possible here."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        return None
    if fd is None:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None


def _exclude_readers(root: Path) -> tuple[int | None, bool]:
    """A maintenance holder's exclusive flock on the root folder: ``(fd to keep, readers or a holder present)``."""
    fd = _root_fd(root)
    got = _flock_root(fd, exclusive=True)
    if got is False:
        _close(fd)
        return None, True
    if got is None:  # no flock on this filesystem: the lock file alone decides, as before
        _close(fd)
        return None, False
    return fd, False


def _readers_present(root: Path) -> bool:
    """Whether a process holds the root folder's flock (a reader, or a holder not yet in its file)."""
    fd, busy = _exclude_readers(root)
    _close(fd)
    return busy


def read_only_filesystem(root: str | os.PathLike) -> bool:
    """True when the filesystem holding ``root`` is mounted read-only (nothing can change the store)."""
    try:
        return bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


@contextmanager
def reading(root: str | os.PathLike, *, job: str) -> Iterator[None]:
    """Hold maintenance (gc, compact, import, ``doctor --fix``, run merges) off the store while
    ``job`` reads it, writing nothing into the store; see the module docstring.

    Raises :class:`~trackstore.errors.LockHeldError` when a maintenance job holds the store
    (a run merging its own files is waited for, up to :data:`BRIEF_WAIT_S`).
    """
    root = Path(root)
    deadline = time.monotonic() + BRIEF_WAIT_S
    while True:
        fd = _root_fd(root)
        got = _flock_root(fd, exclusive=False)
        holder = read_lock(root, MAINTENANCE)
        live = holder if holder is not None and not holder.stale else None
        if got is not False and live is None:
            break
        _close(fd)
        brief = live is None or live.info.get("job") == BRIEF_JOB  # None: a holder between flock and file
        if not brief or time.monotonic() >= deadline:
            who = live.describe() if live is not None else f"a maintenance job holds {root}"
            raise LockHeldError(f"{who}; {job} needs the store unchanged: wait for it to finish, or retry later")
        time.sleep(POLL_S)
    if got is None:
        from .notices import warn_note

        if read_only_filesystem(root):
            warn_note(f"note: {root} is on a read-only filesystem: nothing can change it, "
                      f"{job} reads it without a lock")
        else:
            warn_note(f"note: cannot flock {root}: {job} checked that no gc, compact or import runs, but cannot "
                      "keep one from starting meanwhile")
    try:
        yield
    finally:
        _close(fd)


def acquire_maintenance(root: str | os.PathLike, *, job: str, runs: list[str] | None = None) -> Lock:
    """Take the store's maintenance lock for ``job`` (gc, compact, import, doctor...).

    Runs merge their own part files under this lock too, for milliseconds to a few seconds,
    every few dozen flushes of each live run. A cron gc must not fail because one of those
    was in progress, so a holder that declares itself a brief merge is waited for (up to
    :data:`BRIEF_WAIT_S`); any other holder, and a reader (:func:`reading`: an export),
    raises :class:`LockHeldError` at once, as before.
    """
    info: dict = {"job": job}
    if runs is not None:
        info["runs"] = runs
    try:
        return acquire(root, MAINTENANCE, info=info)
    except LockHeldError:
        holder = read_lock(root, MAINTENANCE)
        gone = holder is None and not _readers_present(Path(root))  # released just now
        if gone or (holder is not None and holder.info.get("job") == BRIEF_JOB):
            return acquire(root, MAINTENANCE, wait=True, timeout=BRIEF_WAIT_S, info=info)
        raise


# ---------------------------------------------------------------------------- durable info
def announce(lock: Lock, **fields: Any) -> None:
    """``lock.set_info(**fields)``, made durable (file and folder fsynced) before it returns:
    for announcements another process must see before this one acts on them."""
    from .atomic import fsync_dir

    lock.set_info(**fields)
    try:
        fd = os.open(lock.path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    fsync_dir(lock.path.parent)


__all__ = ["acquire", "Lock", "LockState", "read_lock", "live_locks", "runs_in_use", "run_in_use",
           "STALE_AFTER_S", "lock_path", "locks_dir", "reading", "read_only_filesystem", "announce",
           "read_json_object", "remove_leftovers", "sync_target_lock_name", "sync_run_lock_name",
           "sync_object_lock_name", "sync_session_lock_name", "declare",
           "remove_stale_declarations"]
