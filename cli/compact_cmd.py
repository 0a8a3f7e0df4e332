"""``trackstore compact``: merge a run's small part files into a few large ones (see trackstore.upkeep.compact)."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    RootOpt,
    Steps,
    WideOpt,
    console,
    emit,
    note_unknown_project,
    plural,
    store_run_ids,
)

COLUMNS = ["project", "run_id", "kind", "files_before", "files_after", "rows", "bytes_before", "bytes_after", "note"]


def compact(
    runs: Annotated[Optional[List[str]], typer.Argument(help=f"Runs to compact ({RUN_REF}). Default: every run.")] = None,
    root: RootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Only runs of this project.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show which files would be merged; change nothing.")] = False,
    target_mb: Annotated[int, typer.Option("--target-mb", min=1, help="Merge input files up to this many MB into one file.")] = 256,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Merge small part files per run and kind, keeping every row and its (writer, seq).

    Runs with a live writer and runs a sync is working on are skipped. Finished runs usually
    merged themselves already; this catches the rest (crashed, multi-writer, too large at
    exit, merging turned off). Queries give the same answers before and after; sync cursors
    stay valid. Exit 0 on success, 6 when another gc/compact/import holds the store's
    maintenance lock (a run merging its own files is waited for, up to 30 s).
    """
    from trackstore.read.listing import list_runs, resolve_runs
    from trackstore.store.layout import resolve_root
    from trackstore.upkeep.compact import compact as do_compact

    root_path = resolve_root(root)
    infos = resolve_runs(runs, root_path) if runs else list_runs(root_path, project=project)
    if project:
        infos = [i for i in infos if i.project == project]
        if not infos:
            note_unknown_project(root_path, project)
    with Steps("compact", total=len(infos)) as step:
        results = do_compact(root_path, [i.paths for i in infos], dry_run=dry_run, target_bytes=target_mb << 20,
                             on_run=lambda paths: step(paths.run_id))
    rows = []
    for r in results:
        if r.skipped:
            rows.append({"project": r.project, "run_id": r.run_id, "note": f"skipped: {r.skipped}"})
        for k in r.kinds:
            rows.append({"project": r.project, "run_id": r.run_id, "kind": k.kind, "files_before": k.files_before,
                         "files_after": k.files_after, "rows": k.rows if not dry_run else None,
                         "bytes_before": k.bytes_before, "bytes_after": k.bytes_after if not dry_run else None,
                         "note": "dry run" if dry_run else (f"swap: {r.swap}" if r.swap else "")})
    if fmt is Format.table:
        changed = sum(1 for r in results if r.kinds)
        title = f"{'would compact' if dry_run else 'compacted'} {changed} of {plural(len(results), 'run')}"
        if not rows:
            console().print(f"nothing to compact ({plural(len(results), 'run')} checked)")
            return
        emit(rows, fmt, columns=COLUMNS, title=title, wide=wide, run_ids=store_run_ids(root_path),
             labels={"files_before": "files", "files_after": "after", "bytes_before": "bytes", "bytes_after": "after"},
             drop_order=["project", "bytes_before", "bytes_after"])
    else:
        emit(rows, fmt, columns=COLUMNS)
