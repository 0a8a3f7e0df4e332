"""``trackstore sync --to TARGET`` and ``trackstore status``.

Exit codes (docs/sync.md; cron reads them): 0 everything selected is synced (or, with
``--if-online``, the target is unreachable), 2 usage error, 130 interrupted (Ctrl-C: the runs
left with rows pending are named; the same command resumes), 6 some runs were skipped because
another sync was sending them to the same destination (and nothing failed), 7 the target is
unreachable, 8 some runs failed (a permanent error, or part files it cannot read) while others
synced; ``--dry-run`` exits 8 when the sync would. ``--jobs N`` changes none of this: the
summary lists the runs in selection order, as one at a time would.

Rows a run's writer could not write (``write_errors``) are reported with the run, in every
output form: they are not in the store, so no sync can send them.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, List, Optional

import typer

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    RootOpt,
    WideOpt,
    check_targets,
    choices,
    console,
    echo_err,
    emit,
    note_unknown_project,
    one_line,
    plural,
    say_where,
    store_run_ids,
    visible,
)
from .sync_progress import CronProgress, RichProgress
from .sync_watch import WatchStop, in_pass

TargetOpt = Annotated[str, typer.Option("--to", "-t", help="Target: mlflow, wandb, wandb-offline, swanlab, store "
                                        "(a team store), or a plugin's.")]
SummaryFormat = choices("SummaryFormat", ("table", "json"))
Mode = choices("Mode", ("online", "offline", "local", "cloud"))
# the --mode values each built-in target takes (a plugin's target gets any of them)
TARGET_MODES = {"mlflow": (), "wandb": ("online", "offline"), "wandb-offline": ("offline",),
                "swanlab": ("cloud", "online", "offline", "local")}


def sync(
    to: TargetOpt,
    runs: Annotated[Optional[List[str]], typer.Argument(help=f"Runs to sync ({RUN_REF}). "
                                                        "Default: every run with pending data.")] = None,
    root: RootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Only runs of this local project.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Also re-check runs that look up to date "
                                           "(re-pushes metadata and final status).")] = False,
    since: Annotated[Optional[str], typer.Option("--since", help="Only runs created within this duration: 7d, 12h, 90min, 2w.")] = None,
    finished_only: Annotated[bool, typer.Option("--finished-only", help="Skip runs that are still running.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Send nothing; list what would be sent and what the "
                                          "target cannot hold.")] = False,
    watch: Annotated[Optional[float], typer.Option("--watch", help="Keep syncing every SECONDS (for live runs; "
                                                   "Ctrl-C to stop).", min=1)] = None,
    if_online: Annotated[bool, typer.Option("--if-online", help="Exit 0 quietly when the target is unreachable "
                                            "(for cron).")] = False,
    max_retries: Annotated[int, typer.Option("--max-retries", min=0, help="Retries per request on transient errors.")] = 5,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Per-request timeout in seconds.")] = 30.0,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1, help="Rows per request (capped by the "
                                                      "target's own limit).")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Read back what the target holds and compare counts.")] = False,
    fmt: Annotated[SummaryFormat, typer.Option("--format", "-f", help="Summary format: table or json.")] = SummaryFormat.table,
    wide: WideOpt = False,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", help="Sync up to N runs at once, each under its own "
                                                "lock (default 8 for an MLflow server or a store, else 1; wandb, SwanLab: "
                                                "1; a store uses a process per core). See docs/sync.md.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for runs another sync is sending to this destination "
                                       "instead of skipping them (exit code 6).")] = False,
    uri: Annotated[Optional[str], typer.Option("--uri", help="MLflow tracking URI (default $MLFLOW_TRACKING_URI, else "
                                               "a sqlite store under the trackstore root); wandb base URL; store: "
                                               "s3://BUCKET/PREFIX or a path.")] = None,
    entity: Annotated[Optional[str], typer.Option("--entity", help="wandb entity / SwanLab workspace.")] = None,
    remote_project: Annotated[Optional[str], typer.Option("--remote-project", help="wandb/SwanLab project to write to "
                                                          "(default: the trackstore project).")] = None,
    host: Annotated[Optional[str], typer.Option("--host", help="SwanLab API host (self-hosted SwanLab).")] = None,
    mode: Annotated[Optional[Mode], typer.Option("--mode", help="Client mode: wandb online (default) or offline; "
                                                 "SwanLab cloud (default), offline or local.")] = None,
    logdir: Annotated[Optional[str], typer.Option("--logdir", help="Where offline/local modes write.")] = None,
    proxy: Annotated[Optional[str], typer.Option("--proxy", help="HTTP(S) proxy URL (default: the standard proxy "
                                                 "variables). Never printed.")] = None,
) -> None:
    """Replay stored runs to a tracking platform: original steps and timestamps, exactly once, resumable."""
    from trackstore.errors import UsageError
    from trackstore.store.layout import resolve_root
    from trackstore.sync import SyncOptions, TargetOptions

    from .quantities import parse_duration

    fmt = Format(SummaryFormat(fmt).value)
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: the number of runs synced at once must be 1 or more")
    mode = _check_mode(to, mode)
    root_path = resolve_root(root)
    note_unknown_project(root_path, project)
    opts = SyncOptions(runs=list(runs or []), project=project, since_s=parse_duration(since, "--since") if since else None,
                       finished_only=finished_only, include_synced=all_runs, dry_run=dry_run,
                       max_retries=max_retries, batch_size=batch_size, verify=verify)
    options = TargetOptions(uri=uri or host, project=remote_project, entity=entity, mode=mode, logdir=logdir,
                            proxy=proxy, timeout=timeout, store_root=str(root_path))
    # --proxy travels in TargetOptions: each adapter hands it to its client (sync/http.py, Proxies)
    interactive = sys.stderr.isatty() and fmt is Format.table
    stop = WatchStop() if watch is not None else None
    started: set[tuple[str, str]] = set()
    try:
        report = _sync_loop(root_path, to, opts, options, dry_run=dry_run, watch=watch, stop=stop,
                            if_online=if_online, interactive=interactive, fmt=fmt, wait=wait, wide=wide, jobs=jobs,
                            started=started)
    except KeyboardInterrupt:
        _say_interrupted(root_path, to, started)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if stop is not None:
            stop.restore()
    raise typer.Exit(_exit_code(report, if_online))


def _check_mode(to: str, mode) -> str | None:
    """``--mode`` as a string, refused (exit 2) when the built-in target ``to`` has no such mode."""
    from trackstore.errors import UsageError

    if mode is None:
        return None
    mode = Mode(mode).value
    valid = TARGET_MODES.get(to)
    if valid is not None and mode not in valid:
        takes = f"takes {', '.join(valid)}" if valid else "has no modes"
        raise UsageError(f"--mode {mode}: sync target {to!r} {takes}")
    return mode


def _sync_loop(root_path, to, opts, options, *, dry_run, watch, stop, if_online, interactive, fmt, wait, wide=False,
               jobs=None, started=None):
    """One sync pass, or (``--watch``) passes every ``watch`` seconds until stopped; the last report."""
    from trackstore.sync import open_adapter
    from trackstore.sync import sync as do_sync

    first = True
    seen: dict | None = None  # --watch: what each run's last summary row said (a pass prints what changed)
    while True:
        with in_pass(stop):
            adapter = open_adapter(root_path, to, options)  # this pass's adapter: do_sync owns and closes it
            where = None
            if not dry_run:
                try:
                    where = _target_reachable(adapter, if_online=if_online, watch=watch)
                finally:
                    if where is None:
                        adapter.close()
            reachable = dry_run or where is not None
            opening = f"{to} at {where}" if where and first else None  # later passes have it open already
            if reachable:
                if interactive:
                    with RichProgress(opening, started) as progress:
                        report = do_sync(root_path, adapter, opts, progress=progress, wait_lock=wait, jobs=jobs,
                                         processes=True)
                else:
                    report = do_sync(root_path, adapter, opts, progress=CronProgress(quiet=fmt is Format.json,
                                     opening=opening, started=started), wait_lock=wait, jobs=jobs,
                                     processes=True)
                first = False
        if not reachable:  # only in --watch mode: wait (a signal only sets the flag here), then retry
            if stop.sleep(watch):
                raise KeyboardInterrupt
            continue
        seen = render_summary(report, fmt, root_path, wide=wide, seen=seen)
        _say_held(report)
        if watch is None or stop.stopped or stop.sleep(watch):
            return report


def _target_reachable(adapter, *, if_online: bool, watch: float | None) -> str | None:
    """Where the target is (its destination, credentials left out) if it answers. Unreachable:
    exit 0 with ``--if-online``, raise without ``--watch``, else say so and return None (the
    watch loop retries)."""
    from trackstore.errors import TargetUnreachableError
    from trackstore.store.redact import redact_text

    try:
        adapter.check_online()
        return redact_text(str(adapter.destination()))
    except TargetUnreachableError as exc:
        if if_online:
            raise typer.Exit(0) from None
        if watch is None:
            raise
        echo_err(f"{exc}; retrying in {watch:.0f}s")
        return None


EXIT_INTERRUPTED = 130  # Ctrl-C (or SIGTERM under --watch) during a sync, as a shell reports SIGINT


def _say_interrupted(root_path, to: str, started: set) -> None:
    """On stderr, after Ctrl-C: each run this sync began that still has rows to send, with how
    many (read back from its cursors, so a batch left in doubt counts as pending), and how to
    resume. Never a traceback."""
    from trackstore.read.sync_status import status_rows

    pending: dict[tuple[str, str], int] = {}
    try:
        for r in status_rows(root_path, target=to):
            key = (r["project"], r["run_id"])
            if key in started:
                n = (r["pending_metrics"] or 0) + (r["pending_other"] or 0)
                pending[key] = max(pending.get(key, 0), n)
    except Exception as exc:  # noqa: BLE001 - the message must still come out
        echo_err(f"interrupted ({one_line(str(exc))} while counting what is left); "
                 "run the same command to resume")
        return
    left = [(k, n) for k, n in pending.items() if n]
    for (project, run_id), n in left:
        echo_err(visible(f"interrupted: {plural(n, 'row')} pending for {project}/{run_id}; "
                         "run the same command to resume"))
    if not left:
        echo_err("interrupted: run the same command to resume")


def _say_held(report) -> None:
    """On stderr, once: runs skipped because another sync was sending them (exit code 6)."""
    held = [r for r in report.runs if r.error_kind == "locked"]
    if held:
        echo_err(visible(f"{plural(len(held), 'run')} skipped: another sync holds "
                         f"{'its' if len(held) == 1 else 'their'} lock for {report.destination} "
                         f"({', '.join(f'{r.project}/{r.run_id}' for r in held[:3])}{', ...' if len(held) > 3 else ''}); "
                         "the next sync sends what is left, or use --wait"))


def _exit_code(report, if_online: bool) -> int:
    """0 all synced; 7 unreachable (0 with --if-online) unless some run was sent; 6 when the
    only runs not synced were skipped because another sync held them; else 8."""
    from trackstore.errors import EXIT_LOCKED, EXIT_OK, EXIT_PARTIAL, EXIT_UNREACHABLE

    if report.ok:
        return EXIT_OK
    if report.unreachable and not any(r.ok and not r.up_to_date for r in report.runs):
        return EXIT_OK if if_online else EXIT_UNREACHABLE
    if all(r.ok or r.error_kind == "locked" for r in report.runs):
        return EXIT_LOCKED
    return EXIT_PARTIAL


def _lost_line(result) -> str:
    return f"WARNING: rows lost before sync (the writer could not write them): {result.write_errors}"


SUMMARY_LABELS = {"histograms": "hists"}
SUMMARY_DROP = ["name", "project", "skipped", "retries", "artifacts", "histograms", "spans", "samples"]


def render_summary(report, fmt: Format, root_path=None, *, wide: bool = False, seen: dict | None = None) -> dict:
    """Print the summary of a pass; returns what each run's row said. With ``seen`` (the
    previous pass of ``--watch``), only runs whose row changed are printed, and nothing when
    none did."""
    rows = {(r.project, r.run_id): r.row() for r in report.runs}
    if fmt is Format.json:
        import json

        out = {"target": report.target, "destination": report.destination, "dry_run": report.dry_run,
               "ok": report.ok, "processes": report.processes, "runs": [{**r.row(), "pending": r.pending, "sent": r.sent, "skipped_by_reason": r.skipped,
                                          "reconciled": r.reconciled, "notes": r.notes, "error": r.error,
                                          "error_kind": r.error_kind, "unreadable_parts": r.unreadable,
                                          "write_errors": r.write_errors, "verified": r.verified,
                                          "verify_ok": r.verify_ok, "upload": r.upload, "view": r.view,
                                          "plan": r.plan.to_json() if r.plan else None} for r in report.runs],
               "upload": _upload_commands(report.runs), "view": _view_lines(report.runs)}
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return rows

    def ids() -> set[str] | None:  # listed only when a table is drawn (a folder scan of the store)
        return store_run_ids(root_path) if root_path is not None else None

    if report.dry_run:  # the runs with something to do (or that would fail); the others in one line
        plan = []
        current = sum(1 for r in report.runs if r.ok and r.up_to_date)
        for r in report.runs:
            if r.ok and r.up_to_date:
                continue
            plan.append({"project": r.project, "run_id": r.run_id, "status": r.status,
                         **{k: v for k, v in r.pending.items()},
                         "plan": "; ".join(r.plan.steps(report.target)) if r.plan else "",
                         "cannot hold": "; ".join(f"{reason}: {n}" if n else reason for reason, n in r.skipped.items()),
                         "notes": "; ".join(r.notes), "result": "ok" if r.ok else f"WOULD FAIL: {r.error}"})
        if plan:
            emit(plan, Format.table, title=f"dry run: would sync to {report.target} {report.destination}", wide=wide,
                 run_ids=ids(), labels=SUMMARY_LABELS, drop_order=["notes", "cannot hold", "project", *SUMMARY_DROP, "plan"],
                 wrap=["plan"])  # the plan is what a dry run is read for: never cut
        if current or not plan:
            say_where(f"dry run: {plural(current, 'run')} already up to date at {report.target}", report.destination,
                      " (nothing to sync)" if not plan else "")
        _print_lost(report.runs)
        return rows
    if seen is not None:  # a later pass of --watch: what changed since the last one, if anything
        changed = [r for r in report.runs if (r.ok and not r.up_to_date)  # sent something
                   or (not r.ok and seen.get((r.project, r.run_id)) != rows[(r.project, r.run_id)])]  # a new failure
        if changed:
            emit([r.row() for r in changed], Format.table, title=f"{time.strftime('%H:%M:%S')} synced to "
                 f"{report.target} {report.destination}", wide=wide, run_ids=ids(), labels=SUMMARY_LABELS,
                 drop_order=SUMMARY_DROP)
            _print_lost(changed)
            _print_uploads(changed)
            _print_views(changed, report.target)
        return rows
    if not rows:
        say_where(f"nothing to sync to {report.target}", report.destination)
        return rows
    changed = [r for r in report.runs if not r.up_to_date or not r.ok]
    if not changed:
        say_where(f"{plural(len(rows), 'run')} already up to date at {report.target}", report.destination)
        return rows
    emit([r.row() for r in changed], Format.table, title=f"synced to {report.target} {report.destination}",
         wide=wide, run_ids=ids(), labels=SUMMARY_LABELS, drop_order=SUMMARY_DROP)
    _print_lost(changed)
    skipped: dict = {}
    for r in report.runs:
        for reason, n in r.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    fold = _folder()
    for reason, n in skipped.items():
        print(fold(visible(f"not representable at {report.target}: {reason}" + (f" ({plural(n, 'row')})" if n else ""))))
    notes = sorted({n for r in report.runs for n in r.notes})
    for n in notes[:20]:
        print(visible(f"note: {n}"))
    if len(notes) > 20:
        print(f"note: ... and {len(notes) - 20} more (see --format json)")
    _print_uploads(report.runs)
    _print_views(changed, report.target)
    return rows


def _view_lines(runs) -> list[str]:
    """The distinct lines that say where the runs are seen in the target's own UI."""
    return list(dict.fromkeys(line for r in runs for line in r.view))


def _print_views(runs, target: str, limit: int = 10) -> None:
    """Once, at the end of a summary: where to see the runs in the target's UI (MLflow: each
    experiment's runs list). Never folded, so that each line can be pasted."""
    lines = _view_lines(runs)
    if not lines:
        return
    if all(line.startswith("trackstore ") for line in lines):  # a team store: read with trackstore itself
        print("to read them, run:")
    else:
        print(f"to see them in {target}'s UI, open:" if not any(" " in line for line in lines) else
              f"to see them in {target}'s UI, run and open:")
    for line in lines[:limit]:
        print(visible(f"  {line}"))
    if len(lines) > limit:
        print(f"  ... and {len(lines) - limit} more (see --format json)")


def _upload_commands(runs) -> list[str]:
    """The distinct commands that upload what a staging target wrote on this machine."""
    return list(dict.fromkeys(r.upload for r in runs if r.upload))


def _print_uploads(runs, limit: int = 10) -> None:
    """Once, at the end of a summary: what a staging target (wandb offline, SwanLab offline or
    local) wrote has not left this machine, and the commands that upload it. Never folded, so
    that each line can be pasted."""
    commands = _upload_commands(runs)
    if not commands:
        return
    print("staged on this machine, not uploaded yet; to upload, run:")
    for command in commands[:limit]:
        print(visible(f"  {command}"))
    if len(commands) > limit:
        print(f"  ... and {len(commands) - limit} more (see --format json)")


def _folder():
    """Folds a summary line to the terminal's width (COLUMNS when piped), continuations indented."""
    import textwrap

    width = console().width

    def fold(line: str) -> str:
        if len(line) <= width:
            return line
        return "\n".join(textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=True,
                                        break_on_hyphens=False))
    return fold


def _print_lost(runs) -> None:
    """One line per run whose writer lost rows: they are in neither the store nor the target."""
    for r in runs:
        if r.write_errors:
            print(visible(f"{r.project}/{r.run_id}: {_lost_line(r)}"))


def status(
    root: RootOpt = None,
    to: Annotated[Optional[str], typer.Option("--to", "-t", help="Only this target.")] = None,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
    all_rows: Annotated[bool, typer.Option("--all", "-a", help="Tables: a row for every run, also those up to "
                                           "date (csv, json, jsonl and parquet always have every row).")] = False,
) -> None:
    """Per run and destination: pending rows per kind, bytes, last sync time, last error.

    The table lists the runs with something to sync or to look at (pending rows, an error,
    unreadable parts, rows the writer lost, a status the destination does not have yet, never
    synced) and counts the runs already up to date in one line per destination; --all lists
    them too. A destination staged on this machine (wandb offline, SwanLab offline or local)
    is shown as staged, not up to date: nothing of it was uploaded by the sync. Exit 0."""
    from trackstore.read.sync_status import NEVER_SYNCED, status_rows
    from trackstore.store.layout import resolve_root

    root_path = resolve_root(root)
    if to is not None:
        check_targets([to], root_path, "--to")
    rows = status_rows(root_path, target=to)
    if fmt is not Format.table:
        emit(rows, fmt)
        return
    from trackstore.store.files import format_bytes

    current: dict[tuple[str, str, bool], int] = {}
    shown = []
    for r in rows:
        if not all_rows and r["destination"] != NEVER_SYNCED and _up_to_date(r):
            where = (r["target"], r["destination"], r["staged"])
            current[where] = current.get(where, 0) + 1
            continue
        cells = _status_cells(r, format_bytes)
        if cells.pop("staged", False):  # a staging folder on this machine holds it: not synced until uploaded
            cells["synced_status"] = f"{cells['synced_status'] or '-'} (staged)"
        shown.append(cells)
    if shown or not current:
        emit(shown, fmt, columns=STATUS_TABLE, title="sync status", wide=wide, run_ids=store_run_ids(root_path),
             labels=STATUS_LABELS, drop_order=STATUS_DROP)
    for (target, destination, staged), n in current.items():
        if staged:
            say_where(f"{plural(n, 'run')} staged at {target}, not uploaded:", destination,
                      " (the sync printed the upload command; --all lists them)")
        else:
            say_where(f"{plural(n, 'run')} up to date at {target}", destination, " (--all lists them)")


def _up_to_date(row: dict) -> bool:
    """A status row of a destination with nothing to sync and nothing to look at."""
    return (not row["pending_metrics"] and not row["pending_other"]
            and not row["last_error"] and not row["unreadable_parts"] and not row["write_errors"]
            and row["synced_status"] == row["status"])


def _status_cells(row: dict, format_bytes) -> dict:
    """A status row as the table shows it: the rows still to send, of every kind, under a header
    that says pending (``pending 0`` is "nothing left to send", not "nothing synced"; json and
    csv keep ``pending_metrics`` and ``pending_other``), and no cell for
    zero unreadable parts or lost rows, so that at 80 columns those columns go before what was
    synced and when."""
    known = row["pending_metrics"] is not None and row["pending_other"] is not None  # None: an unreadable cursor
    return {**row, "pending": row["pending_metrics"] + row["pending_other"] if known else None,
            "bytes": format_bytes(row["bytes"]),
            "unreadable_parts": row["unreadable_parts"] or None, "write_errors": row["write_errors"] or None}


# the table: json/csv carry every column of status_rows; the table reads pending per kind
STATUS_TABLE = ["target", "destination", "project", "run_id", "status", "pending", "synced_status", "last_sync_at", "bytes", "last_error", "unreadable_parts", "write_errors"]
STATUS_LABELS = {"synced_status": "synced",
                 "last_sync_at": "last sync", "last_error": "error", "unreadable_parts": "unreadable",
                 "write_errors": "lost rows", "destination": "where"}
# hidden first at 80 columns: what is zero or can be read elsewhere, never "synced" and "last sync" early
STATUS_DROP = ["bytes", "project", "unreadable_parts", "target", "destination", "last_sync_at", "synced_status"]
