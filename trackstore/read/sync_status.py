"""``trackstore status``: per run and destination, what is pending, from the ledger and the catalog.

One row per (destination, run) that has a readable cursor, then one row per run that has none
(``(never synced)``): pending rows per kind, the run folder's bytes, the status the destination
holds, the last sync and its error, how many part files cannot be read, and what the writers
could not write. The answer is the one a full read gives (each readable part's rows minus
those the cursor acknowledges; damaged parts not counted, but counted as ``unreadable_parts``),
but it costs what changed: the catalog (:mod:`trackstore.store.index`) keeps each part's row
ids and each cursor's pending counts, valid while the files keep their ``stat`` fingerprints.
An unreadable cursor file is left out (the run then shows as never synced there).
"""

from __future__ import annotations

import os
from typing import Any

from ..store.index import Catalog, PartsSummary, open_catalog
from ..store.layout import resolve_root
from ..store.ledger import CURSOR_ERRORS, cached_cursor_summary, cursor_files
from .catalog import RunInfo, list_runs

STATUS_COLUMNS = ("target", "destination", "project", "run_id", "status", "pending_metrics", "pending_other",
                  "bytes", "synced_status", "last_sync_at", "last_error", "unreadable_parts", "write_errors")
NEVER_SYNCED = "(never synced)"  # the destination of a run's row when no readable cursor names one


def status_rows(root: str | os.PathLike | None = None, *, target: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``trackstore status`` (columns :data:`STATUS_COLUMNS`), for every destination
    or only those of ``target``."""
    root_path = resolve_root(root)
    infos = {(r.project, r.run_id): r for r in list_runs(root_path)}
    catalogs: dict[int, Catalog] = {}
    catalog_of: dict[tuple[str, str], Catalog] = {}
    for key, r in infos.items():
        catalog_of[key] = r.catalog or catalogs.setdefault(0, open_catalog(root_path))
        catalogs.setdefault(id(catalog_of[key]), catalog_of[key])
    for catalog in catalogs.values():
        catalog.prefetch_cursors()
    parts_of: dict[tuple[str, str], PartsSummary] = {}

    def parts(info: RunInfo) -> PartsSummary:
        key = (info.project, info.run_id)
        if key not in parts_of:
            parts_of[key] = catalog_of[key].parts_summary(info.project, info.run_id)
        return parts_of[key]

    def row(info: RunInfo, summary: dict | None, target: str, destination: str) -> dict[str, Any]:
        found = parts(info)
        pending = summary["pending"] if summary is not None else found.rows
        catalog = catalog_of[(info.project, info.run_id)]
        meta_fp = catalog.row_value(info.project, info.run_id, "meta_fp")
        return {"target": target, "destination": destination, "project": info.project, "run_id": info.run_id,
                "status": info.status, "pending_metrics": pending.get("metrics", 0),
                "pending_other": sum(v for k, v in pending.items() if k != "metrics"),
                "bytes": catalog.run_bytes(info.project, info.run_id, meta_fp, found.fp),
                "synced_status": summary["synced_status"] if summary else None,
                "last_sync_at": summary["last_sync_at"] if summary else None,
                "last_error": summary["last_error"] if summary else None,
                "unreadable_parts": found.damaged,
                "write_errors": info.write_errors()}

    rows = []
    seen = set()
    try:
        for path in cursor_files(root_path):
            key = (path.parent.name.partition("=")[2], path.name.partition("=")[2].removesuffix(".json"))
            info = infos.get(key)
            if info is None:
                continue
            try:
                summary = cached_cursor_summary(catalog_of[key], path, key[0], key[1], parts(info))
            except CURSOR_ERRORS:  # vanished (archived meanwhile) or unreadable: says nothing
                continue
            if target is not None and summary["target"] != target:
                continue
            if (summary["project"], summary["run_id"]) != key:
                continue  # a cursor file in another run's place: not this run's
            seen.add(key)
            rows.append(row(info, summary, summary["target"], summary["destination"]))
        for key, info in infos.items():
            if key not in seen:
                rows.append(row(info, None, target or "-", NEVER_SYNCED))
    finally:
        for catalog in catalogs.values():
            catalog.save()
    return rows
