"""``trackstore artifacts RUN``: a run's artifact versions, where their bytes are, and their aliases.

One row per version: name, version, type, ``copy`` (in the store) or ``reference`` (left where
the trainer wrote it), files, size, step, the aliases it holds now (aliases move:
``run.alias_artifact``), when it was logged and, for a reference, whether its files are still as
they were logged (size and modification time; ``--verify`` re-hashes them). Exit 3 when the run
has no artifacts (or none of ``--name``), 0 otherwise, also when a reference changed (that is
what the ``check`` column is for; ``doctor`` reports it too).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import RUN_REF, Format, FormatOpt, ReaderRootOpt, WideOpt, emit, resolve_for_reading


def artifacts(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help=f"The run: {RUN_REF}.")],
    root: ReaderRootOpt = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Only versions of this artifact.")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Re-hash the files of references (sha256; slow for big checkpoints) instead of comparing size and time.")] = False,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """List a run's artifact versions (checkpoints, datasets, ...) with their aliases.

    Versions stored by reference (run.log_checkpoint, log_artifact(..., reference=True)) show in
    the check column whether their files are still there as logged: ok, vanished or changed.
    """
    from trackstore.errors import RunNotFoundError
    from trackstore.read.browse import artifact_versions
    from trackstore.records.artifact_refs import check_reference
    from trackstore.records.artifacts import REFERENCE, list_versions
    from trackstore.store.files import format_bytes

    from .sql_cmd import open_store

    [info] = resolve_for_reading(ctx, [run], root)
    with open_store(root, sync_state=False, runs=[info]) as con:
        rows = artifact_versions(con, info, name)
    if not rows:
        what = f"no artifact {name!r}" if name else "no artifacts"
        raise RunNotFoundError(f"run {info.project}/{info.run_id} has {what} (log them with run.log_artifact or "
                               "run.log_checkpoint, see docs/records.md)")
    stored = {(v.name, v.version): v for v in list_versions(info.paths.dir)} if info.paths is not None else {}
    out = []
    for r in rows:
        v = stored.get((r["name"], r["version"]))
        check = "-"
        if r["storage"] == REFERENCE and v is not None:
            problems = [p for f in v.files
                        if (p := check_reference(f.path, f.size, f.sha256, f.mtime_ns, quick=not verify)) is not None]
            check = problems[0].split(":", 1)[0] if problems else "ok"
        table = fmt == Format.table
        out.append({
            "name": r["name"], "version": f"v{r['version']}" if table else r["version"], "type": r["type"],
            "storage": r["storage"], "files": r["files"],
            "size": format_bytes(r["bytes"] or 0) if table else r["bytes"], "step": r["step"],
            "aliases": ", ".join(r["aliases"] or []) if table else list(r["aliases"] or []),
            "check": check, "logged": r["logged"],
            "source": v.source if v is not None and v.source else "",
        })
    emit(out, fmt, columns=["name", "version", "type", "storage", "files", "size", "step", "aliases", "check",
                            "logged", "source"],
         title=f"{info.project}/{info.run_id}: artifacts", wide=wide, drop_order=["source", "logged", "type", "files"])
