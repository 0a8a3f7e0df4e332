"""Receipts: sync cursors carried from the connected side back to the air-gapped one.

Promises: :func:`export_receipt` writes the cursors of the chosen runs (and their destinations'
descriptions) as a ``kind: "receipt"`` bundle. :func:`import_receipt` reads every cursor as
every reader does (:func:`trackstore.store.cursor.check_cursor`) before any is merged, merges
each with the local one by :meth:`~trackstore.store.cursor.Cursor.merge` (:func:`merge_cursors`:
the union of acknowledged rows, the more recent sync deciding the rest), reads each result back
the same way, and only then writes them: one bad cursor refuses the whole receipt. Cursors of
runs not in this store are skipped and listed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ...errors import BundleError
from ...store.atomic import read_json
from ...store.clock import parse_iso
from ...store.cursor import Cursor
from ...store.layout import (
    DESTINATION_FILE,
    PROJECT_PREFIX,
    RUN_PREFIX,
    RunPaths,
    resolve_root,
)
from ...store.names import validate_project, validate_run_id
from .manifest import manifest_base
from .results import ExportResult, ImportResult
from .staging import Staged
from .writing import Member, check_output_folder, write_bundle


def export_receipt(root: str | Path | None, out: str | os.PathLike, *, runs: Iterable[tuple[str, str]] | None = None,
                   project: str | None = None, compress: str | None = None) -> ExportResult:
    """Write the sync cursors of ``runs`` (``(project, run_id)`` pairs; default all) to a receipt."""
    from ...store.ledger import cursor_path, iter_cursors, sync_root

    root = resolve_root(root)
    check_output_folder(out)
    wanted = set(runs) if runs is not None else None
    entries, members = [], []
    seen_dest: set[str] = set()
    for c in iter_cursors(root, project=project):
        if wanted is not None and (c.project, c.run_id) not in wanted:
            continue
        path = cursor_path(root, c.target, c.destination, c.project, c.run_id)
        rel = path.relative_to(sync_root(root)).as_posix()
        dest_dir = rel.split("/", 1)[0]
        desc = sync_root(root) / dest_dir / DESTINATION_FILE
        if dest_dir not in seen_dest and desc.is_file():
            members.append(Member.snapshot(f"sync/{dest_dir}/destination.json", desc))
            seen_dest.add(dest_dir)
        members.append(Member.snapshot(f"sync/{rel}", path))
        entries.append({"target": c.target, "destination": c.destination, "project": c.project,
                        "run_id": c.run_id, "synced_status": c.synced_status, "last_sync_at": c.last_sync_at})
    manifest = manifest_base("receipt", compress)
    manifest["cursors"] = entries
    paths = write_bundle(out, compress, None, manifest, members)
    return ExportResult(paths, len({(e["project"], e["run_id"]) for e in entries}), len(manifest["files"]),
                        sum(p.stat().st_size for p in paths), manifest)


def import_receipt(root: Path, st: Staged) -> ImportResult:
    """Merge the cursors of the staged receipt ``st`` into the store's (see the module docstring)."""
    from ...store.ledger import load_cursor, save_cursor

    res = ImportResult("receipt", source_host=st.manifest.get("source_host"))
    cursors = []  # every cursor is read before any is merged: a bad one refuses the whole receipt
    for path in sorted((st.dir / "sync").glob(f"*/{PROJECT_PREFIX}*/{RUN_PREFIX}*.json")):
        rel = path.relative_to(st.dir).as_posix()
        try:  # the reading every reader does (cursor.check_cursor): types, and numbers in the format's ranges
            incoming = Cursor.from_json(read_json(path))
            validate_project(incoming.project)
            validate_run_id(incoming.run_id)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"refusing receipt: its cursor {rel} is unreadable: {_reason(exc)}; "
                              "nothing was imported") from exc
        cursors.append(incoming)
    changed = []
    for incoming in cursors:
        if not RunPaths(root, incoming.project, incoming.run_id).dir.exists():
            res.cursors_skipped.append(f"{incoming.project}/{incoming.run_id} ({incoming.target}): run not in this store")
            continue
        local = load_cursor(root, incoming.target, incoming.destination, incoming.project, incoming.run_id)
        try:
            merged = merge_cursors(local, incoming)
            Cursor.from_json(merged.to_json())  # the union is read back as every reader will read it
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"refusing receipt: its cursor of {incoming.project}/{incoming.run_id} "
                              f"({incoming.target}) cannot be merged: {_reason(exc)}; nothing was imported") from exc
        if merged.to_json() != local.to_json():
            changed.append(merged)
    for merged in changed:
        save_cursor(root, merged)
        res.cursors_merged += 1
    return res


def _reason(exc: BaseException) -> str:
    """An exception as a reason in a message: its text (a KeyError's names the missing field)."""
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    return str(exc) or type(exc).__name__


def merge_cursors(local: Cursor, incoming: Cursor) -> Cursor:
    """``local`` and ``incoming`` as one cursor (:meth:`~trackstore.store.cursor.Cursor.merge`),
    the more recent sync (``last_sync_at``; a cursor never synced is the older) deciding the
    status, errors and batch in doubt."""
    theirs, ours = parse_iso(incoming.last_sync_at), parse_iso(local.last_sync_at)
    return local.merge(incoming, other_is_newer=theirs is not None and (ours is None or theirs > ours))

