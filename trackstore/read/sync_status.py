"""``trackstore status``: per run and destination, what is pending, from the ledger and the catalog.

One row per (destination, run) that has a readable cursor, then one row per run that has none
(``(never synced)``): pending rows per kind, the run folder's bytes, the status the destination
holds, the last sync and its error, how many part files cannot be read, and what the writers
could not write, and whether the destination is a staging area (``staged``: a wandb offline or
SwanLab offline/local folder on this machine, whose rows have not been uploaded by this
sync; see :attr:`trackstore.store.cursor.Cursor.staged`). The answer is the one a full read gives (each readable part's rows minus
those the cursor acknowledges; damaged parts not counted, but counted as ``unreadable_parts``),
but it costs what changed: the catalog (:mod:`trackstore.store.catalog`) keeps each part's row
ids and each cursor's pending counts, valid while the files keep their ``stat`` fingerprints.
A cursor file that cannot be read (or holds a number out of the format's range) gives its
destination's row with pending counts unknown (None) and the problem as ``last_error``
(:func:`~trackstore.store.ledger.damaged_cursor_summary`); the other rows are unaffected.
"""

from __future__ import annotations

import os
from typing import Any

from ..store.catalog import PartsSummary, UnchangedRun, open_catalog
from ..store.layout import resolve_root
from ..store.ledger import CURSOR_ERRORS, cached_cursor_summary, cursor_files, damaged_cursor_summary
from ..store.vocab import Kind
from .listing import RunInfo, from_catalog, lost_rows

STATUS_COLUMNS = ("target", "destination", "project", "run_id", "status", "pending_metrics", "pending_other",
                  "bytes", "synced_status", "last_sync_at", "last_error", "unreadable_parts", "write_errors",
                  "staged")
NEVER_SYNCED = "(never synced)"  # the destination of a run's row when no readable cursor names one


def status_rows(root: str | os.PathLike | None = None, *, target: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``trackstore status`` (columns :data:`STATUS_COLUMNS`), for every destination
    or only those of ``target``.

    A run that did not change and has ended is answered from its catalog row alone
    (:meth:`~trackstore.store.catalog.Catalog.unchanged_run`: a few ``stat`` calls); the others as
    :func:`~trackstore.read.listing.list_runs` finds them."""
    root_path = resolve_root(root)
    catalog = open_catalog(root_path)
    rows = []
    try:
        catalog.prefetch()
        catalog.prefetch_cursors()
        found: dict[tuple[str, str], RunInfo | UnchangedRun] = {}
        for key in catalog.run_keys():
            unchanged = catalog.unchanged_run(*key)
            if unchanged is not None:
                found[key] = unchanged
                continue
            info = from_catalog(catalog, *key, False)  # warns about a run.json it cannot use, as list_runs does
            if info is not None:
                found[key] = info
        order = sorted(found, key=lambda k: (found[k].created_at or "", k[1]))  # a listing's order
        parts_of: dict[tuple[str, str], PartsSummary] = {}

        def parts(key: tuple[str, str]) -> PartsSummary:
            run = found[key]
            if isinstance(run, UnchangedRun):
                return run.parts
            if key not in parts_of:
                parts_of[key] = catalog.parts_summary(*key)
            return parts_of[key]

        def row(key: tuple[str, str], summary: dict | None, target: str, destination: str) -> dict[str, Any]:
            run = found[key]
            got = parts(key)
            pending = summary["pending"] if summary is not None else got.rows
            damaged = summary is not None and summary.get("damaged")
            if isinstance(run, UnchangedRun):
                status, size = run.status, run.bytes
                lost = lost_rows(run.write_errors, run.writers_lost)
            else:
                status, lost = run.status, run.write_errors()
                size = catalog.run_bytes(*key)
            return {"target": target, "destination": destination, "project": key[0], "run_id": key[1],
                    "status": status, "pending_metrics": None if damaged else pending.get("metrics", 0),
                    "pending_other": None if damaged else sum(v for k, v in pending.items() if k != Kind.METRICS),
                    "bytes": size,
                    "synced_status": summary["synced_status"] if summary else None,
                    "last_sync_at": summary["last_sync_at"] if summary else None,
                    "last_error": summary["last_error"] if summary else None,
                    "unreadable_parts": got.damaged,
                    "write_errors": lost,
                    "staged": bool(summary and summary["staged"])}

        seen = set()
        for path in cursor_files(root_path):
            key = (path.parent.name.partition("=")[2], path.name.partition("=")[2].removesuffix(".json"))
            if key not in found:
                continue
            try:
                summary = cached_cursor_summary(catalog, path, key[0], key[1], parts(key))
            except FileNotFoundError:  # vanished (archived meanwhile)
                continue
            except CURSOR_ERRORS as exc:  # unreadable: that destination's row says so, pending unknown
                summary = damaged_cursor_summary(path, exc)
            if target is not None and summary["target"] != target:
                continue
            if (summary["project"], summary["run_id"]) != key:
                continue  # a cursor file in another run's place: not this run's
            seen.add(key)
            rows.append(row(key, summary, summary["target"], summary["destination"]))
        for key in order:
            if key not in seen:
                rows.append(row(key, None, target or "-", NEVER_SYNCED))
    finally:
        catalog.save()
    return rows
