"""``trackstore runs``: what is in the store (``trackstore show`` is in show_cmd)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, List, Optional

import typer

from trackstore.read.alerts import ROW_KEY, STALL_AFTER, attach
from trackstore.store.meta import STATUSES

from .common import (
    Format,
    FormatOpt,
    OutputOpt,
    ReaderRootOpt,
    WideOpt,
    choices,
    emit,
    note_unknown_project,
    plural,
    store_run_ids,
)
from .sql_cmd import ParamOpt

RunStatus = choices("RunStatus", STATUSES)
LIST_COLUMNS = ["project", "run_id", "name", "status", "alerts", "last_step", "updated_at"]
# what --format json/jsonl/csv/parquet adds to the runs view's columns (trackstore.read.alerts)
ALERT_COLUMNS = ["alerts", "alert_text", "nonfinite", "nonfinite_keys", "last_metric_at", "metric_interval_s", "silent_s"]


def runs(
    root: ReaderRootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Only runs of this project.")] = None,
    status: Annotated[
        Optional[List[RunStatus]],
        typer.Option("--status", "-s", help="Only runs with this status (running, finished, failed, crashed); repeatable."),
    ] = None,
    tag: Annotated[Optional[List[str]], typer.Option("--tag", "-t", help="Only runs carrying this tag; repeatable (all must match).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only runs created within this age (90min, 12h, 7d, 2w) or since this date (2026-11-30).")] = None,
    where: Annotated[Optional[str], typer.Option("--where", "-w", help="SQL condition over the runs view, e.g. \"(config->>'lr')::DOUBLE < $lr\" (values via --param; ->> gives text, so cast to compare numbers).")] = None,
    params: ParamOpt = None,
    sort: Annotated[str, typer.Option("--sort", help="Column of the runs view to sort by; prefix '-' for descending (e.g. -updated_at).")] = "created_at",
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, help="Show at most this many runs (0 = all).")] = 0,
    alerts: Annotated[bool, typer.Option("--alerts", help="Only runs with an alert: a NaN or infinite metric value, or a running run that stopped logging (see --stall-after).")] = False,
    stall_after: Annotated[float, typer.Option("--stall-after", min=1.0, metavar="N", help="A running run whose newest metric is older than N times (default 10) its usual logging interval, and than a minute, is stalled.")] = STALL_AFTER,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """List runs with their status (a run whose writer died is shown as crashed) and alerts, filtered and sorted.

    The alerts column marks a run that logged a NaN or infinite metric value (NaN, inf) and a
    running run that stopped logging: its newest metric (system/ metrics aside) is older than
    --stall-after times its usual logging interval (that of the writer that logged most often)
    and older than a minute ("stalled 14m"). A run that ended is never stalled. --format json adds alerts, alert_text,
    nonfinite, nonfinite_keys (per key: nan, inf, first_step), last_metric_at,
    metric_interval_s and silent_s. The store's catalog counts non-finite values once per part
    file, so a listing reads only the parts it has not seen.
    """
    from trackstore.read.listing import RUN_COLUMNS

    from .sql_cmd import hint_text_numbers, open_store, parse_params

    if where is None:  # no SQL to run: the same rows, without starting DuckDB and pyarrow (~0.3 s)
        check_sort(sort)
        rows = listed_runs(root, project=project, status=[s.value for s in status or []], tag=tag, since=since,
                           sort=sort, limit=0 if alerts else limit, light=fmt is Format.table, stall_after=stall_after)
    else:
        from trackstore.read.alerts import add_alerts
        from trackstore.read.views import run_sql
        from trackstore.store.arrays import to_pylist

        sql, values = runs_query(project=project, status=[s.value for s in status or []], tag=tag, since=since,
                                 where=where, params=parse_params(params), sort=sort, limit=0 if alerts else limit)
        with open_store(root, sync_state=False) as con:
            table = run_sql(con, sql, values)
        hint_text_numbers(where, values, table.num_rows)
        rows = to_pylist(table)
        add_alerts(root, rows, stall_after=stall_after)
    if alerts:
        rows = [r for r in rows if r["alerts"]]
        rows = rows[:limit] if limit else rows
    if not rows and project:
        from trackstore.store.layout import resolve_root

        note_unknown_project(resolve_root(root), project)  # a mistyped -p is told, not just "0 runs"
    for r in rows:
        for col in ("config", "summary"):
            if isinstance(r.get(col), str):
                r[col] = json.loads(r[col])
    if fmt is Format.table:
        for r in rows:
            r["last_step"] = r["last_step"] if r["last_step"] is not None else "-"
            r["alerts"] = r.pop(ROW_KEY).short
        columns = LIST_COLUMNS if any(r["alerts"] for r in rows) else [c for c in LIST_COLUMNS if c != "alerts"]
        emit(rows, fmt, columns=columns, output=output, title=plural(len(rows), "run"), wide=wide,
             run_ids=store_run_ids(root), labels={"last_step": "step", "updated_at": "updated"},
             drop_order=["updated_at", "project"])
    else:
        for r in rows:
            r.pop(ROW_KEY, None)
        emit(rows, fmt, columns=[*RUN_COLUMNS, *ALERT_COLUMNS], output=output)


RUN_SORT_COLUMNS = ("project", "run_id", "name", "status", "created_at", "ended_at", "updated_at", "last_step",
                    "host", "user", "group", "job_type", "exit_code")


def parse_since(value: str, now: float | None = None) -> datetime:
    """``7d`` / ``12h`` / ``90min`` / ``2w`` ago, or an ISO date/time, as an aware UTC datetime
    (the one duration vocabulary: cli/quantities.py)."""
    from .quantities import parse_since as since_ts

    return datetime.fromtimestamp(since_ts(value, "--since", now), tz=timezone.utc)


def runs_query(*, project=None, status=None, tag=None, since=None, where=None, params=None, sort="created_at",
               limit=0) -> tuple[str, dict]:
    """The SELECT over the runs view behind ``trackstore runs`` (every value bound as a parameter)."""
    from trackstore.read.views import quote_ident

    values: dict = dict(params or {})
    conds = []

    def bind(name: str, value) -> str:
        key = f"_{name}"
        values[key] = value
        return f"${key}"

    if project:
        conds.append(f"project = {bind('project', project)}")
    if status:
        conds.append("status IN (" + ", ".join(bind(f"status{i}", s) for i, s in enumerate(status)) + ")")
    for i, t in enumerate(tag or []):
        conds.append(f"list_contains(tags, {bind(f'tag{i}', t)})")
    if since:
        conds.append(f"created_at >= {bind('since', parse_since(since))}")
    if where:
        conds.append(f"({where})")
    desc = sort.startswith("-")
    column = check_sort(sort)
    order = f"{quote_ident(column)} {'DESC' if desc else 'ASC'} NULLS LAST, run_id"
    sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(conds) if conds else "") + f" ORDER BY {order}"
    if limit:
        sql += f" LIMIT {int(limit)}"
    return sql, values


def check_sort(sort: str) -> str:
    """The column ``--sort`` names (refused unless the runs view can sort by it)."""
    from trackstore.errors import UsageError

    column = sort.lstrip("-+")
    if column not in RUN_SORT_COLUMNS:
        raise UsageError(f"--sort must be one of {', '.join(RUN_SORT_COLUMNS)} (prefix '-' for descending), got {sort!r}")
    return column


def listed_runs(root, *, project=None, status=None, tag=None, since=None, sort="created_at", limit=0,
                light=False, stall_after: float = STALL_AFTER) -> list[dict]:
    """What :func:`runs_query` selects from the runs view (same rows, order and types), read
    from the store's catalog without DuckDB, with each run's alerts (``_alerts`` and the
    fields of :meth:`trackstore.read.alerts.RunAlerts.fields`). ``sort`` was checked by
    :func:`runs_query`. ``light``: only the columns a listing shows, filters and sorts by (no
    config, summary, notes, error): the rest of each run.json is not even parsed."""
    import time

    from trackstore.read.listing import list_runs, listed_rows

    from .sql_cmd import report_skipped_files

    with report_skipped_files():
        if light:
            rows = listed_rows(root, project=project or None, unreadable=True, alerts=stall_after)
        else:
            infos = list_runs(root, project=project or None, unreadable=True, facts=True)
            if len(infos) > 1:
                for catalog in {id(i.catalog): i.catalog for i in infos if i.catalog is not None}.values():
                    catalog.prefetch_meta()  # every run.json's fields in one query, not one per run
            rows = []
            now = time.time()
            for info in infos:
                row = info.view_row()
                rows.append(attach(row, info.alerts(stall_after=stall_after, now=now)))
    after = parse_since(since) if since else None
    rows = [r for r in rows if (not project or r["project"] == project) and (not status or r["status"] in status)
            and all(t in r["tags"] for t in tag or []) and (after is None or (r["created_at"] and r["created_at"] >= after))]
    column = sort.lstrip("-+")
    rows.sort(key=lambda r: r["run_id"])
    present = [r for r in rows if r[column] is not None]
    present.sort(key=lambda r: r[column], reverse=sort.startswith("-"))  # stable: run_id breaks ties
    rows = present + [r for r in rows if r[column] is None]  # NULLS LAST
    rows = rows[:limit] if limit else rows
    # config and summary are as parsed from run.json: the values the view's JSON text holds
    return rows


def _short_time(value) -> str:
    if value is None:
        return ""
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value)
