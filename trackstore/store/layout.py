"""Where everything lives on disk. The one place that derives store paths and file names.

::

    <root>/project=<project>/run=<run_id>/
        run.json                      run metadata, rewritten atomically
        _writers/<writer_id>.json     one heartbeat file per writing process
        metrics/part-<writer_id>-<first_seq>.parquet
        samples/ spans/ histograms/   same naming
        artifacts/<name>/v<version>/  files; their manifest rows live in artifacts/_manifest/
    <root>/_sync/                     per-destination sync state (owned by trackstore.sync)
    <root>/_trash/                    runs being deleted by gc (invisible to queries)
    <root>/_quarantine/               damaged files moved aside by doctor

The root is ``root=`` / ``--root``, else ``$TRACKSTORE_DIR``, else ``./tsruns`` in the
current working directory (like ``wandb/`` or ``mlruns/``). Writing a run creates it; reading
(``resolve_root(..., must_exist=True)``: ``connect()`` and every CLI command but ``demo`` and
``run``) requires a store there, so a mistyped path is an error, never an empty store: a folder
is a store when it is empty (hidden entries aside) or holds a ``project=*`` folder or one of
trackstore's own ``_*`` folders (``_sync``, ``_locks``, ...).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import UsageError
from .names import validate_project, validate_run_id

ENV_ROOT = "TRACKSTORE_DIR"
DEFAULT_ROOT = "tsruns"
RUN_FILE = "run.json"
WRITERS_DIR = "_writers"
SYNC_DIR = "_sync"
TRASH_DIR = "_trash"
QUARANTINE_DIR = "_quarantine"
PROJECT_PREFIX = "project="
RUN_PREFIX = "run="
PART_SUFFIX = ".parquet"

_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def resolve_root(root: str | os.PathLike | None = None, *, must_exist: bool = False,
                 source: str | None = None) -> Path:
    """The store root: explicit argument, then ``$TRACKSTORE_DIR``, then ``./tsruns``.

    With ``must_exist`` the root must be a store (:func:`check_store_root`); ``source`` names
    where the path came from in the error (``--root``; by default ``root=``, the variable or
    the default).
    """
    origin = "root="
    if root is None or root == "":
        env = os.environ.get(ENV_ROOT)
        default = f"the default ./{DEFAULT_ROOT}, used when neither root nor ${ENV_ROOT} is set"
        root, origin = (env, f"${ENV_ROOT}") if env else (DEFAULT_ROOT, default)
    path = Path(root).expanduser().absolute()
    if must_exist:
        check_store_root(path, source or origin)
    return path


def store_root_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a store ("does not exist", ...), or None when it can."""
    others = []
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.name.startswith((PROJECT_PREFIX, "_")):
                    return None  # trackstore's own entries: a store
                if not e.name.startswith("."):
                    others.append(e.name)
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "is not a directory"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if others:
        return (f"is not a trackstore store: it holds {len(others)} other entries (e.g. {min(others)!r}) "
                f"and no {PROJECT_PREFIX}* or _* folder")
    return None  # empty: a new store


def check_store_root(path: Path, source: str) -> Path:
    """``path`` if it is a store; else a UsageError naming the path and where it came from."""
    problem = store_root_problem(path)
    if problem is not None:
        raise UsageError(f"store root {path} {problem} (from {source}). Check the path; an empty folder is a "
                         f"valid new store, and logging a run (trackstore.init, trackstore demo) creates one")
    return path


def new_run_id(now: float | None = None) -> str:
    """A run id sortable by creation time (ms) and unique across hosts: ``20261202-175630123-k3j9x2ab``."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"
    suffix = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
    return f"{stamp}-{suffix}"


def _host_tag() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "", socket.gethostname().split(".")[0])[:16]
    return host or "host"


def new_writer_id() -> str:
    """Unique per writing process; readable (host and pid) so a file tells who wrote it."""
    return f"{_host_tag()}-{os.getpid()}-{secrets.token_hex(3)}"


def part_file_name(writer_id: str, first_seq: int) -> str:
    return f"part-{writer_id}-{first_seq:012d}{PART_SUFFIX}"


_LIST_ATTEMPTS = 10


@dataclass(frozen=True)
class RunPaths:
    """Paths of one run folder."""

    root: Path
    project: str
    run_id: str

    @property
    def dir(self) -> Path:
        return self.root / f"{PROJECT_PREFIX}{self.project}" / f"{RUN_PREFIX}{self.run_id}"

    @property
    def run_file(self) -> Path:
        return self.dir / RUN_FILE

    @property
    def writers_dir(self) -> Path:
        return self.dir / WRITERS_DIR

    def writer_file(self, writer_id: str) -> Path:
        return self.writers_dir / f"{writer_id}.json"

    def kind_dir(self, kind: str) -> Path:
        if kind == "artifacts":
            return self.dir / "artifacts" / "_manifest"
        return self.dir / kind

    @property
    def artifacts_dir(self) -> Path:
        return self.dir / "artifacts"

    def parts(self, kind: str) -> list[Path]:
        """Complete part files of one kind, sorted by name (temp files never match).

        Compaction swaps a kind folder for a new one and then empties the old one: a listing
        that began on the old folder could come back short. The folder's identity is checked
        around the listing, and a listing that straddled a swap is taken again.
        """
        d = self.kind_dir(kind)
        for _ in range(_LIST_ATTEMPTS):
            try:
                before = os.stat(d)
                found = sorted(p for p in d.iterdir() if p.name.endswith(PART_SUFFIX) and not p.name.startswith("."))
                after = os.stat(d)
            except FileNotFoundError:
                return []
            if (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino):
                return found
        return found


def run_paths(root: Path, project: str, run_id: str) -> RunPaths:
    return RunPaths(Path(root), validate_project(project), validate_run_id(run_id))


def iter_run_dirs(root: Path) -> Iterator[tuple[str, str, Path]]:
    """Yield ``(project, run_id, run_dir)`` for every run folder under ``root``."""
    root = Path(root)
    try:
        projects = sorted(root.iterdir())
    except FileNotFoundError:
        return
    for pdir in projects:
        if not pdir.name.startswith(PROJECT_PREFIX) or not pdir.is_dir():
            continue
        project = pdir.name[len(PROJECT_PREFIX):]
        try:
            runs = sorted(pdir.iterdir())
        except OSError:
            continue
        for rdir in runs:
            if rdir.name.startswith(RUN_PREFIX) and rdir.is_dir():
                yield project, rdir.name[len(RUN_PREFIX):], rdir
