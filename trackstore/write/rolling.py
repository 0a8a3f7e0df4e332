"""Rolling merges: a live writer keeps its own part files few while the run goes on.

A writer flushes a part file every couple of seconds, and an RL loop logs once per step, so a
run of 2,000 steps is 2,000 files per record kind. Every question about a live run pays a
fixed cost per file (measured: a curve of one key took 2.7 s and ``latest`` 0.56 s over 2,000
parts, against 9 and 15 ms over one), and merging them all at ``finish()`` took 3.8 s.

So the writer merges as it goes, like a counter in base :data:`FANOUT`: each time ``FANOUT``
consecutive files of one kind are of the same level, they become one file of the next level (16 flushes -> one level-1 file, 16 of those -> one level-2 file, ...). A row is
rewritten about log16(flushes) times in all, a run never has more than ``15 x levels`` files
per kind and writer (about 45 for 2,000 flushes), and ``finish()`` has little left to merge.

Each merge is :func:`trackstore.store.merge.merge_own_parts`: the same build, checks and atomic
folder swap as ``trackstore compact``, so readers see the old files or the new, and rows keep
their ``(writer, seq)``. It runs in the writer's thread between flushes, under the store's
maintenance lock, and only when nothing could race it:

* this writer is the run's only live writer (another rank's flush could land in the folder
  being swapped away);
* the filesystem can swap folders atomically (``renameat2(RENAME_EXCHANGE)``; on others a
  reader could see a kind as empty for an instant, acceptable for a cron job, not every minute);
* no gc, compaction, import, export or doctor holds the maintenance lock (then it waits for a
  later flush).

Any error stops rolling merges for the rest of the run, with one warning: the data is safe in
the unmerged files, and ``finish()`` or ``trackstore compact`` merge them later.

Whether a run merges at all (as it goes and at finish) is :func:`compact_default` unless
``trackstore.init(compact=...)`` says; the merge at finish is
:func:`trackstore.store.merge.compact_finished_run`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..store.layout import RunPaths

FANOUT = 16
COMPACT_ENV = "TRACKSTORE_COMPACT"


def compact_default() -> bool:
    """Whether runs merge their own part files (as they go and at finish): yes, unless
    ``TRACKSTORE_COMPACT=0``."""
    return os.environ.get(COMPACT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class RollingMerger:
    """The levels of one writer's own part files, and the merges they call for."""

    def __init__(self, paths: RunPaths, writer_id: str):
        self.paths = paths
        self.writer_id = writer_id
        self.enabled = True
        self._files: dict[str, list[tuple[int, Path]]] = {}  # kind -> [(level, file)], oldest first
        self._exchange: bool | None = None

    def wrote(self, kind: str, path: Path) -> None:
        """Record a part this writer just flushed (level 0)."""
        self._files.setdefault(kind, []).append((0, path))

    def due(self) -> bool:
        """Whether some kind has FANOUT consecutive files of one level (cheap: no I/O)."""
        return self.enabled and any(_due_group(files) is not None for files in self._files.values())

    def merge(self) -> None:
        """Do the merges that are due, if nothing could race them. Raises on failure."""
        if not self.due() or not self._safe_now():
            return
        from ..errors import LockHeldError
        from ..store import locks
        from ..store.merge import merge_own_parts

        try:
            held = locks.acquire(self.paths.root, locks.MAINTENANCE,
                                 info={"job": locks.BRIEF_JOB, "runs": [f"{self.paths.project}/{self.paths.run_id}"]})
        except LockHeldError:
            return  # a gc/import/export/doctor is at work: try again after a later flush
        try:
            for kind, files in self._files.items():
                while (start := _due_group(files)) is not None:
                    level = files[start][0]
                    group = [path for _lvl, path in files[start:start + FANOUT]]
                    merged = merge_own_parts(self.paths, kind, group)
                    files[start:start + FANOUT] = [(level + 1, merged)]
        finally:
            held.release()

    def _safe_now(self) -> bool:
        from ..store import meta as _meta

        if self._exchange is None:
            from ..store.merge import swap_method

            self._exchange = swap_method(self.paths.dir) == "exchange"
        if not self._exchange:
            self.enabled = False  # for the whole run: the filesystem will not change
            return False
        others = [w for w in _meta.read_writer_files(self.paths)
                  if w.get("writer_id") != self.writer_id and _meta.writer_alive(w)]
        return not others


def _due_group(files: list[tuple[int, Path]]) -> int | None:
    """Where the oldest run of FANOUT consecutive files of one level starts, or None.

    Oldest first, so files flushed while a merge was pending never strand an older one
    between two merged files (which would keep that level from ever filling up).
    """
    run_start = 0
    for i in range(1, len(files) + 1):
        if i == len(files) or files[i][0] != files[run_start][0]:
            if i - run_start >= FANOUT:
                return run_start
            run_start = i
    return None
