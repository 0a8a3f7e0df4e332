"""Whether what the catalog keeps of a run still holds: fingerprints, and the one check.

Every group of fields of a :class:`~.rows.RunRow` is stored with the ``stat`` fingerprint
(device, inode, size, modification and change times) of what it was derived from: ``run.json``
for its fields, the ``_writers`` folder for the writers' losses, the run folder and each kind
folder for the parts' digest, rows and damage, all three for the folder's bytes. The promise:
**a field is used only while what it was derived from keeps that fingerprint**, and
:func:`holds` is the one place that decides it, for whatever of the row a caller needs
(:class:`Need`). A fingerprint taken within :data:`RACY_S` of a change is ``""`` and never
matches (a coarse file-system clock could give the next change the same time). A kind folder
that did not exist still does not while the run folder keeps its fingerprint (a folder made in
it would change it), so only the kind folders that existed are ``stat``-ed then.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..layout import ARTIFACTS_DIR, KINDS, RUN_FILE, WRITERS_DIR, kind_folder
from ..vocab import TERMINAL, Kind, RunStatus
from .rows import RunRow

RACY_S = 3.0  # a fingerprint younger than this (file-system time vs the clock) is not trusted later
SEP = os.sep
# each kind's folder inside a run folder (trackstore.store.layout.RunPaths.kind_dir), as text
KIND_DIRS: dict[str, str] = {k: kind_folder(k).replace("/", os.sep) for k in KINDS}


def fingerprint(path: str | os.PathLike, now: float | None = None) -> str | None:
    """``stat`` fingerprint of a file or folder: ``"-"`` when it does not exist, ``""`` when it
    changed too recently to be trusted later (:data:`RACY_S`), None when it cannot be stat-ed."""
    return stat_fingerprint(path, racy_limit(time.time() if now is None else now))


def racy_limit(now: float) -> float:
    """The newest file time a fingerprint taken at ``now`` trusts."""
    return now - RACY_S


def stat_fingerprint(path: str | os.PathLike, limit: float) -> str | None:
    """:func:`fingerprint` with its racy limit (:func:`racy_limit`) computed by the caller once."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    except OSError:
        return None
    if st.st_mtime > limit or st.st_ctime > limit:
        return ""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def same(stored: str | None, current: str | None) -> bool:
    """A stored fingerprint still holds: both known, neither racy, and equal."""
    return bool(stored) and bool(current) and stored == current


def bytes_basis(meta_fp: str | None, writers_fp: str | None, parts_fp: str | None) -> str:
    """What a run folder's bytes are stored under: its run.json's, writers' and parts'
    fingerprints (``""``, never matching, when one is unknown)."""
    return f"{meta_fp}|{writers_fp}|{parts_fp}" if meta_fp and writers_fp and parts_fp else ""


@dataclass(frozen=True)
class Need:
    """What a caller takes from a run's row without reading the run's files.

    ``ended``: the row must answer for the run alone: run.json was read whole and its recorded
    status is one of these (a running run's status depends on its writers). ``meta``: the
    run.json fields. ``parts``: the parts' digest, rows per kind and damage. ``writers``: the
    writers' losses. ``bytes``: the folder's bytes. ``same_folder``: the run folder itself kept
    its fingerprint too (else only the kind folders are checked)."""

    ended: frozenset[str] = frozenset()
    meta: bool = False
    parts: bool = False
    writers: bool = False
    bytes: bool = False
    same_folder: bool = False


#: the run.json fields (what :meth:`~.cache.Catalog.entry` gives)
META = Need(meta=True)
#: the writers' losses
WRITERS = Need(writers=True)
#: the parts in short (:meth:`~.cache.Catalog.parts_summary`)
PARTS = Need(parts=True)
#: a listing's row of a run that ended and whose status no longer depends on its data
LISTING = Need(ended=frozenset((RunStatus.FINISHED, RunStatus.FAILED)), meta=True)
#: the run folder's bytes (with the parts' digest they were counted under)
FOLDER_BYTES = Need(parts=True, bytes=True)
#: everything ``status`` shows of a run that ended, from its row alone
UNCHANGED = Need(ended=TERMINAL, meta=True, parts=True, writers=True, bytes=True, same_folder=True)


class Look:
    """The fingerprints of one run's files now, each taken once, when first asked for (the
    run folder's before its kind folders': see :func:`holds`). ``meta`` and ``writers`` may be
    given when taken already in this command."""

    __slots__ = ("run_dir", "limit", "_fps", "folder_same", "has_artifacts")

    def __init__(self, run_dir: str, limit: float, *, meta: str | None = None, writers: str | None = None):
        self.run_dir = run_dir
        self.limit = limit
        self._fps: dict[str, str | None] = {}
        if meta:
            self._fps[RUN_FILE] = meta
        if writers:
            self._fps[WRITERS_DIR] = writers
        self.folder_same: bool | None = None  # set by holds() when the parts were checked
        self.has_artifacts: bool | None = None  # set by holds() when the run folder changed

    def _of(self, rel: str) -> str | None:
        """The fingerprint of ``rel`` inside the run folder (``""``: the folder itself)."""
        if rel not in self._fps:
            self._fps[rel] = stat_fingerprint(f"{self.run_dir}{SEP}{rel}" if rel else self.run_dir, self.limit)
        return self._fps[rel]

    def meta(self) -> str | None:
        return self._of(RUN_FILE)

    def folder(self) -> str | None:
        return self._of("")

    def kind(self, kind: str) -> str | None:
        return self._of(KIND_DIRS[kind])

    def writers(self) -> str | None:
        return self._of(WRITERS_DIR)


def holds(row: RunRow, need: Need, look: Look) -> bool:
    """Whether the fields of ``row`` that ``need`` names still hold for the files ``look`` sees:
    each is used only while what it was derived from keeps the fingerprint stored with it."""
    if need.ended and (row.status not in need.ended or not row.read_whole):
        return False
    if need.meta and (row.meta_fp == "-" or not same(row.meta_fp, look.meta())):
        return False
    if need.parts and not _parts_hold(row, need.same_folder, look):
        return False
    if need.writers and not same(row.writers_fp, look.writers()):
        return False
    if need.bytes and (row.bytes is None or not row.bytes_fp
                       or row.bytes_fp != bytes_basis(look.meta(), look.writers(), row.parts_fp)):
        return False
    return True


def _parts_hold(row: RunRow, same_folder: bool, look: Look) -> bool:
    """Every kind folder keeps the fingerprint stored with the run's part list, from ``stat``
    calls only; the run folder's fingerprint is taken first."""
    if not row.kind_fps or not row.parts_fp:
        return False
    fps = row.kind_fps.split("|")
    folder_same = look.folder_same = same(row.dir_fp, look.folder())
    if not folder_same:
        if same_folder:
            return False
        look.has_artifacts = os.path.isdir(f"{look.run_dir}{SEP}{ARTIFACTS_DIR}")
    for i, kind in enumerate(KINDS):
        old = fps[i]
        if old == "-" and folder_same and (kind != Kind.ARTIFACTS or fps[-1] == "-"):
            continue  # did not exist, and its parent folder did not change
        if not same(old, look.kind(kind)):
            return False
    return True
