"""``trackstore doctor``: find damage in the store and say what to do; ``--fix`` repairs or quarantines.

Exit codes: 0 the store is healthy (warnings and info may remain); 4 errors remain (run with --fix,
or follow the advice column); 6 (--fix only) a gc, compact or import holds the maintenance lock.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .common import Format, FormatOpt, RootOpt, Steps, WideOpt, console, emit, literal, plural


def doctor(
    root: RootOpt = None,
    fix: Annotated[bool, typer.Option("--fix", help="Repair what can be repaired; move what cannot under <root>/_quarantine/ (never deletes data).")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Read every column of every Parquet file, not only its footer, find rows whose (writer, seq) id another row of the run also holds, and check every image file against its sha256.")] = False,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Check the store: temp files, unreadable Parquet, crashed runs, broken run.json, orphaned sync state, trash.

    Each finding is an error (damage: something unreadable or at risk), a warning, or info (a
    normal state the store handles, such as a crashed run). Exit 0 when no error remains, 4
    when errors remain, 6 (--fix only) when a gc, compact or import holds the maintenance lock.
    """
    from trackstore.errors import StoreError
    from trackstore.store.layout import resolve_root
    from trackstore.upkeep.doctor import doctor as run_doctor

    root_path = resolve_root(root)
    from trackstore.store.layout import iter_run_dirs

    total = sum(1 for _ in iter_run_dirs(root_path)) if deep else None
    with Steps("doctor --deep", total=total, quiet=not deep) as step:  # only --deep reads enough to take long
        report = run_doctor(root_path, fix_problems=fix, deep=deep, on_run=lambda _project, run_id: step(run_id))
    rows = [f.row(root_path) for f in report.findings]
    con = console(stderr=fmt is not Format.table)
    columns = ["check", "severity", "path", "problem", "fixed" if fix else "advice"]
    if fmt is Format.table:
        if rows:
            emit(rows, fmt, columns=columns, title=f"{plural(len(rows), 'finding')} in {root_path}", wide=wide,
                 drop_order=["check"], wrap=["path", "problem", "advice", "fixed"])
    else:
        emit(rows, fmt, columns=["check", "severity", "path", "problem", "advice", "fixed"])
    for note in report.notes:
        con.print(literal(f"note: {note}"))
    if report.quarantine is not None:
        con.print(literal(f"quarantined files are in {report.quarantine} (see reasons.json there)"))
    if report.healthy:
        con.print("store is healthy" + (" (findings above)" if rows and not fix else ""))
        return
    n = len(report.remaining)
    raise StoreError((f"{plural(n, 'problem')} remain" if n != 1 else "1 problem remains") + ("" if fix else "; run `trackstore doctor --fix`"))
