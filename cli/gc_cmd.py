"""``trackstore gc``: delete old runs that are safely synced (rules in trackstore.upkeep.gc, docs/gc.md).

Exit codes: 0 deleted what the plan said (runs that changed since the plan are kept and listed,
"run gc again"), nothing to delete, or ``--dry-run``; 1 the user
answered no; 2 bad options, or no terminal to confirm and no ``--yes``; 6 another gc, compact
or import holds the store's maintenance lock.
"""

from __future__ import annotations

import sys
from typing import Annotated, List, Optional

import typer

from .common import (
    Format,
    FormatOpt,
    GcRootOpt,
    Steps,
    WideOpt,
    check_targets,
    console,
    echo_err,
    emit,
    literal,
    note_unknown_project,
    plural,
    project_missing,
    store_run_ids,
)

COLUMNS = ["project", "run_id", "name", "status", "ended_at", "age_days", "bytes", "reason"]


def gc(
    root: GcRootOpt = None,
    older_than: Annotated[Optional[str], typer.Option("--older-than", help="Only runs that ended longer ago than this: a number and a unit, s, min, h, d or w (30d, 12h, 90min, 2w; 0d: any age). A number without a unit, m (minutes or months?), months and years are refused.")] = None,
    max_size: Annotated[Optional[str], typer.Option("--max-size", help="Delete oldest eligible runs until the store holds at most this much (e.g. 200G).")] = None,
    keep_last: Annotated[Optional[int], typer.Option("--keep-last", help="Always keep the N newest runs of each project.")] = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Only runs of this project.")] = None,
    status: Annotated[Optional[List[str]], typer.Option("--status", "-s", help="Only runs with this status: finished, failed, crashed (repeatable). Default: all three.")] = None,
    require_synced_to: Annotated[Optional[str], typer.Option("--require-synced-to", help="Comma-separated targets (e.g. wandb,mlflow) each of which must hold the run fully; replaces the default 'every destination it was synced to'.")] = None,
    include_unsynced: Annotated[bool, typer.Option("--include-unsynced", help="Also delete runs never synced anywhere (except those holding the only copy of an artifact version with an alias: see --include-aliased).")] = False,
    include_aliased: Annotated[bool, typer.Option("--include-aliased", help="With --include-unsynced: also delete never-synced runs holding the only copy of an artifact version that has an alias (best, latest...).")] = False,
    count_staged: Annotated[bool, typer.Option("--count-staged", help="Count destinations staged on this machine (wandb offline, SwanLab offline or local folders, not uploaded yet) as synced. Without it they never are, and a run only staged is kept.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Ignore sync state entirely, also unreadable cursors and damaged part files that otherwise keep a run until `trackstore doctor --fix` (live runs and runs being synced are still kept).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="List what would be deleted and how many bytes; delete nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for cron).")] = False,
    show_kept: Annotated[bool, typer.Option("--show-kept", help="Also list the runs kept, with the reason.")] = False,
    compact: Annotated[bool, typer.Option("--compact", help="Also merge the part files of the ended runs that are kept (older than --older-than).")] = False,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Delete old runs that ended and are fully synced; show the plan and ask first.

    Runs with a live writer and runs a sync is working on are never deleted. A deleted run is
    first moved atomically into <root>/_trash, so a crash never leaves half a run visible.
    Runs with unreadable sync state or damaged part files are kept until `trackstore doctor
    --fix` has dealt with them (or --force).
    """
    from trackstore.errors import UsageError
    from trackstore.store.files import format_bytes
    from trackstore.store.layout import resolve_root
    from trackstore.store.vocab import ENDED_ORDER, KeepReason
    from trackstore.upkeep import gc as G

    from .quantities import parse_duration, parse_size

    if isinstance(root, str):
        local_only = {"--max-size": max_size is not None, "--require-synced-to": bool(require_synced_to),
                      "--include-unsynced": include_unsynced, "--include-aliased": include_aliased,
                      "--count-staged": count_staged, "--force": force,
                      "--compact": compact}
        given = [name for name, on in local_only.items() if on]
        if given:
            raise UsageError(f"{given[0]} is for a local store; a team store's gc selects by --older-than, "
                             "--project, --status and --keep-last")
        _gc_replica(root, parse_duration(older_than, "--older-than") if older_than is not None else None,
                    project=project, statuses=tuple(status) if status else ENDED_ORDER, keep_last=keep_last,
                    dry_run=dry_run, yes=yes, show_kept=show_kept, fmt=fmt, wide=wide)
        return
    targets = tuple(t.strip() for t in (require_synced_to or "").split(",") if t.strip())
    check_targets(targets, root, "--require-synced-to")
    policy = G.Policy(
        older_than_s=parse_duration(older_than, "--older-than") if older_than is not None else None,
        max_size=parse_size(max_size) if max_size is not None else None,
        keep_last=keep_last,
        project=project,
        statuses=tuple(status) if status else ENDED_ORDER,
        require_synced_to=targets,
        include_unsynced=include_unsynced,
        include_aliased=include_aliased,
        count_staged=count_staged,
        force=force,
    )
    root_path = resolve_root(root)
    plan = G.plan(root_path, policy)
    shown_runs = [c for c in plan.runs if not c.kept(KeepReason.OTHER_PROJECT)]  # --project: the others are not news
    if not shown_runs and project:
        note_unknown_project(root_path, project)
    title = f"{'would delete' if dry_run else 'to delete'}: {plural(len(plan.delete), 'run')}, " \
            f"{format_bytes(plan.freed_bytes)}"
    con = _show_plan([c.row(plan.created_at) for c in shown_runs if show_kept or c.delete or fmt is not Format.table],
                     G.describe_kept(c for c in shown_runs if not c.delete), fmt, title=title, show_kept=show_kept,
                     wide=wide, run_ids=store_run_ids(root_path))
    if not plan.delete:
        con.print("nothing to delete")
        if not dry_run:
            G.execute(root_path, plan)  # still finishes deletions a crash interrupted
            _compact(root_path, plan, policy, compact, con)
        return
    if not _go_ahead(con, len(plan.delete), plan.freed_bytes, dry_run=dry_run, yes=yes):
        return
    with Steps("gc", total=len(plan.delete)) as step:
        result = G.execute(root_path, plan, on_deleted=lambda c: step(c.run_id))
    for c in result.skipped:
        con.print(literal(f"kept {c.project}/{c.run_id}: {c.reason}"), style="yellow")
    con.print(f"deleted {plural(len(result.deleted), 'run')}, freed {format_bytes(result.freed_bytes)} "
              f"({result.freed_bytes:,} bytes)", highlight=False)
    _compact(root_path, plan, policy, compact, con)


def _compact(root_path, plan, policy, enabled: bool, con) -> None:
    if not enabled:
        return
    from trackstore.upkeep import gc as G
    from trackstore.upkeep.compact import compact as do_compact

    results = do_compact(root_path, G.compactable(plan, policy))
    changed = [r for r in results if r.changed]
    before = sum(k.files_before for r in changed for k in r.kinds)
    after = sum(k.files_after for r in changed for k in r.kinds)
    con.print(f"compacted {plural(len(changed), 'kept run')}: {plural(before, 'part file')} -> {after}")


def _gc_replica(uri: str, older_than_s, *, project, statuses, keep_last, dry_run: bool, yes: bool, show_kept: bool,
                fmt, wide: bool) -> None:
    """gc of a team store (trackstore.upkeep.replica_gc): plan, show, confirm, delete."""
    from trackstore.store.files import format_bytes
    from trackstore.store.objects import check_reachable, open_location
    from trackstore.store.vocab import KeepReason
    from trackstore.upkeep import replica_gc as R

    folder = open_location(uri)
    check_reachable(folder)
    plan = R.plan(folder, older_than_s=older_than_s, project=project, statuses=statuses, keep_last=keep_last)
    problem = project_missing(project, {r.project for r in plan.runs}, uri) if project else None
    if problem:  # as for a local store: a filter, not an error, but a mistyped name is told
        echo_err(f"note: {problem}")
    shown_runs = [r for r in plan.runs if r.code is not KeepReason.OTHER_PROJECT]  # --project: not news
    title = f"{'would delete' if dry_run else 'to delete'} from {folder.url}: {plural(len(plan.delete), 'run')}, " \
            f"{format_bytes(plan.freed_bytes)}"
    con = _show_plan([r.row(plan.created_at) for r in shown_runs if show_kept or r.delete or fmt is not Format.table],
                     R.describe_kept(shown_runs), fmt, title=title, show_kept=show_kept, wide=wide)
    if not plan.delete:
        con.print("nothing to delete")
        return
    if not _go_ahead(con, len(plan.delete), plan.freed_bytes, dry_run=dry_run, yes=yes, where=f" from {folder.url}"):
        return
    with Steps("gc", total=len(plan.delete)) as step:
        freed = R.execute(folder, plan, on_deleted=lambda r: step(r.run_id))
    con.print(f"deleted {plural(len(plan.delete), 'run')} from {folder.url}, freed {format_bytes(freed)} "
              f"({freed:,} bytes)", highlight=False)


def _show_plan(rows: list[dict], kept: dict[str, int], fmt, *, title: str, show_kept: bool, wide: bool,
               run_ids=None):
    """gc's plan as a table (or rows in another format) and the kept runs counted by reason; the
    console later lines go to (stderr when the rows are data)."""
    from trackstore.store.files import format_bytes

    con = console(stderr=fmt is not Format.table)
    if fmt is Format.table:
        if rows:
            shown = [{**r, "bytes": format_bytes(r["bytes"])} for r in rows]
            emit(shown, fmt, columns=["action", *COLUMNS] if show_kept else COLUMNS, title=title, wide=wide,
                 run_ids=run_ids, labels={"ended_at": "ended", "age_days": "days"},
                 drop_order=["ended_at", "project", "status", "name"])
    else:
        emit(rows, fmt, columns=["action", *COLUMNS])
    if kept:
        con.print("kept: " + ", ".join(f"{n:,} {why}" for why, n in sorted(kept.items())), highlight=False)
    return con


def _go_ahead(con, runs: int, freed: int, *, dry_run: bool, yes: bool, where: str = "") -> bool:
    """Whether to delete: not in a dry run (which says what it would free), and only once the
    user said yes (``--yes``, or a terminal's answer; none: a usage error)."""
    from trackstore.errors import UsageError
    from trackstore.store.files import format_bytes

    if dry_run:
        con.print(f"dry run: would free {format_bytes(freed)} ({freed:,} bytes); nothing deleted", highlight=False)
        return False
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("gc needs confirmation and there is no terminal to ask: pass --yes (e.g. from cron), "
                             "or --dry-run to only see the plan; nothing deleted")
        if not typer.confirm(f"Delete {plural(runs, 'run')} ({format_bytes(freed)}){where}?", default=False):
            con.print("nothing deleted")
            raise typer.Exit(1)
    return True
