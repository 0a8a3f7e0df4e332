"""``trackstore export`` / ``trackstore import``: carry runs across an air gap, and receipts back.

Exit codes: 0 done; 2 bad options; 3 a named run does not exist; 4 the disk is full, or the
bundle's files do not fit in the free space (nothing was imported); 6 another gc, compact,
import or export holds the maintenance lock; 9 the bundle is invalid, damaged, tampered
with, hostile, or conflicts with the store (nothing was imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    NewRootOpt,
    RootOpt,
    Steps,
    check_project,
    console,
    emit,
    literal,
    plural,
    store_run_ids,
)


def export(
    runs: Annotated[Optional[List[str]], typer.Argument(help=f"Runs to export ({RUN_REF}).")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Bundle file to write (split volumes get .000, .001, ...).")] = ...,
    root: RootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Export every run of this project.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only runs updated within this duration (7d, 12h, 90min, 2w) or since this date (2026-11-30).")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Export every run in the store.")] = False,
    compress: Annotated[bool, typer.Option("--compress", help="Compress the bundle with zstd.")] = False,
    gzip: Annotated[bool, typer.Option("--gzip", help="Compress with gzip instead (readable by any tar).")] = False,
    split: Annotated[Optional[str], typer.Option("--split", help="Split into volumes of at most this size (e.g. 2G) for removable media.")] = None,
    receipt: Annotated[bool, typer.Option("--receipt", help="Write a receipt instead: the sync cursors of the selected runs (default: all), to carry back to the air-gapped side.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Write runs (or, with --receipt, their sync state) to a verifiable bundle."""
    from trackstore.errors import UsageError
    from trackstore.read.listing import list_runs, resolve_runs
    from trackstore.store.clock import parse_iso
    from trackstore.store.files import format_bytes
    from trackstore.store.layout import resolve_root
    from trackstore.upkeep import bundle

    from .quantities import parse_since, parse_size

    root_path = resolve_root(root)
    if compress and gzip:
        raise UsageError("choose one of --compress (zstd) and --gzip")
    if project is not None:
        check_project(root_path, project)
    comp = "zstd" if compress else "gzip" if gzip else None
    infos = resolve_runs(runs, root_path) if runs else []
    if project or since or all_runs:
        if not runs:
            infos = list_runs(root_path, project=project)
        elif project:
            infos = [i for i in infos if i.project == project]
        if since:
            t = parse_since(since, "--since")
            infos = [i for i in infos if (parse_iso(i.meta.get("updated_at") or i.meta.get("created_at")) or 0) >= t]
    if receipt:
        if split:
            raise UsageError("receipts are small: --split applies to run bundles only")
        pairs = [(i.project, i.run_id) for i in infos] if (runs or project or since) else None
        res = bundle.export_receipt(root_path, output, runs=pairs, compress=comp)
        what = f"{plural(len(res.manifest['cursors']), 'cursor')} of {plural(res.runs, 'run')}"
    else:
        if not runs and not (project or since or all_runs):
            raise UsageError("name the runs to export, or use --project, --since or --all")
        with Steps("export") as step:
            res = bundle.export_runs(root_path, infos, output, compress=comp,
                                     split_bytes=parse_size(split) if split else None, on_stage=step)
        what = plural(res.runs, "run")
    rows = [{"file": str(p), "bytes": p.stat().st_size} for p in res.paths]
    if fmt is Format.table:
        console().print(literal(f"wrote {what}, {plural(res.files, 'file')}, {format_bytes(res.bytes)} to "
                                + ", ".join(str(p) for p in res.paths)))
    else:
        emit(rows, fmt, columns=["file", "bytes"])


def import_(
    bundle_path: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle file (or the first split volume, or the name before .000).")],
    root: NewRootOpt = None,
    receipt: Annotated[bool, typer.Option("--receipt", help="Insist that BUNDLE is a receipt (sync cursors) and merge it.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Verify a bundle completely, then add its runs (or merge a receipt's sync state).

    Nothing becomes visible before every checksum is verified; unsafe entries (absolute
    paths, '..', links, devices), part files that are not Parquet of their kind, a run.json
    naming another run and conflicting content are refused with nothing imported (exit 9).
    Importing the same bundle again changes nothing. A root that does not exist is created.
    """
    from trackstore.upkeep import bundle

    with Steps("import") as step:
        res = bundle.import_bundle(root, bundle_path, expect="receipt" if receipt else None, on_stage=step)
    con = console(stderr=fmt is not Format.table)
    if res.kind == "receipt":
        con.print(literal(f"merged {plural(res.cursors_merged, 'sync cursor')} from {res.source_host}"))
        for s in res.cursors_skipped:
            con.print(literal(f"  skipped {s}"))
        if fmt is not Format.table:
            emit([{"cursors_merged": res.cursors_merged, "cursors_skipped": len(res.cursors_skipped)}], fmt)
        return
    rows = [{"project": r.project, "run_id": r.run_id, "action": r.action, "files_added": r.files_added,
             "files_replaced": r.files_replaced, "rows_added": sum(r.rows_added.values()) if r.rows_added else None}
            for r in res.runs]
    if fmt is Format.table:
        added = sum(r.action == "added" for r in res.runs)
        updated = sum(r.action == "updated" for r in res.runs)
        emit(rows, fmt, title=f"imported from {res.source_host}: {added} new, {updated} updated, "
                              f"{len(res.runs) - added - updated} unchanged", run_ids=store_run_ids(root),
             labels={"files_added": "files", "files_replaced": "replaced", "rows_added": "rows"})
    else:
        emit(rows, fmt)
