"""``trackstore compact``: merge the part files of many runs, under the store's maintenance lock.

Each run is merged by :func:`trackstore.store.merge.compact_run`, with its promises (every row
keeps its ``(writer, seq)``, readers see the old files or the new, never both, crash-safe);
this job adds what a cron job over a whole store needs: the maintenance lock (no gc, import or
other compaction meanwhile) and skipping runs a sync is working on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from ..store.layout import RunPaths
from ..store.merge import DEFAULT_TARGET_BYTES, CompactResult, compact_run


def compact(root: Path, runs: Iterable[RunPaths], *, dry_run: bool = False,
            target_bytes: int = DEFAULT_TARGET_BYTES,
            on_run: Callable[[RunPaths], None] | None = None) -> list[CompactResult]:
    """Compact several runs under the store's maintenance lock, skipping runs being synced.
    ``on_run`` is called after each run (progress)."""
    from ..store import locks

    runs = list(runs)
    held = None if dry_run else locks.acquire_maintenance(root, job="compact")
    try:
        out = []
        for paths in runs:
            named, unnamed = locks.runs_in_use(root)  # again per run: a sync may start meanwhile
            if unnamed or locks.run_in_use(paths.project, paths.run_id, named):
                who = unnamed[0].describe() if unnamed else "a sync lock names it"
                out.append(CompactResult(paths.project, paths.run_id, skipped=f"being synced ({who})"))
            else:
                out.append(compact_run(paths, dry_run=dry_run, target_bytes=target_bytes))
            if on_run is not None:
                on_run(paths)
        return out
    finally:
        if held is not None:
            held.release()
