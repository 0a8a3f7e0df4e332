"""``trackstore runs`` and ``trackstore show``: what is in the store."""

from __future__ import annotations

import json
from typing import List, Optional

import typer
from typing_extensions import Annotated

from .common import Format, FormatOpt, OutputOpt, RootOpt, console, emit

LIST_COLUMNS = ["project", "run_id", "name", "status", "last_step", "updated_at"]


def runs(
    root: RootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Only runs of this project.")] = None,
    status: Annotated[
        Optional[List[str]],
        typer.Option("--status", "-s", help="Only runs with this status (running, finished, failed, crashed); repeatable."),
    ] = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """List runs with their status (a run whose writer died is shown as crashed)."""
    from trackstore.catalog import RUN_COLUMNS, list_runs

    infos = list_runs(root, project=project, status=status or None)
    rows = [i.row() for i in infos]
    if fmt is Format.table:
        for r in rows:
            r["last_step"] = r["last_step"] if r["last_step"] is not None else "-"
        emit(rows, fmt, columns=LIST_COLUMNS, output=output, title=f"{len(rows)} runs")
    else:
        emit(rows, fmt, columns=list(RUN_COLUMNS), output=output)


def show(
    run: Annotated[str, typer.Argument(help="Run id, unique id prefix, or project/name.")],
    root: RootOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one run: metadata, config and summary."""
    from trackstore.catalog import resolve_run

    info = resolve_run(run, root)
    row = info.row()
    if fmt is not Format.table:
        emit([row], fmt)
        return
    from rich.table import Table

    con = console()
    meta = Table(show_header=False, title=f"{info.project}/{info.run_id}", title_justify="left")
    meta.add_column(style="bold")
    meta.add_column(overflow="fold")
    for key in ("name", "status", "created_at", "ended_at", "last_step", "host", "user", "tags", "notes",
                "group", "job_type", "exit_code", "error"):
        value = row.get(key)
        if value not in (None, [], ""):
            meta.add_row(key, ", ".join(value) if isinstance(value, list) else str(value))
    m = info.meta
    if m.get("git"):
        meta.add_row("git", f"{m['git'].get('commit', '')[:12]} ({m['git'].get('branch')})"
                     + (" dirty" if m["git"].get("dirty") else ""))
    meta.add_row("command", " ".join(m.get("command") or []))
    meta.add_row("path", str(info.paths.dir))
    con.print(meta)
    for title, data in (("config", row["config"]), ("summary", row["summary"])):
        if not data:
            continue
        t = Table(title=title, title_justify="left", header_style="bold")
        t.add_column("key")
        t.add_column("value", overflow="fold")
        for k, v in _flat(data).items():
            t.add_row(k, f"{v:.6g}" if isinstance(v, float) else json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v)
        con.print(t)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out
