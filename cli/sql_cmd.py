"""``trackstore sql``: run one read-only SQL query over every run, print it in any format.

The query runs on an in-memory DuckDB connection whose views read the store
(:mod:`trackstore.read.views`); anything that is not a query (COPY, ATTACH, CREATE, INSERT,
INSTALL, LOAD, SET...) is refused with exit code 5, like any SQL error.
"""

from __future__ import annotations

import re
import sys
import warnings
from contextlib import contextmanager
from typing import Annotated, Iterator, List, Optional

import typer

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    OutputOpt,
    ReaderRootOpt,
    emit,
    resolve_for_reading,
    store_run_ids,
    visible_lines,
)

ParamOpt = Annotated[
    Optional[List[str]],
    typer.Option("--param", "-P", metavar="NAME=VALUE",
                 help="Bind a value to $NAME in the query (repeatable). Values are bound as text, never pasted "
                      "into the SQL: DuckDB casts one where it meets a number column (step > $s), but ->> gives "
                      "text, so compare a config number as a number: (config->>'lr')::DOUBLE = $lr."),
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Fail on a damaged part file instead of skipping it with a warning.")
]
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``["run=abc", "q=it's; DROP"]`` -> ``{"run": "abc", "q": "it's; DROP"}``."""
    from trackstore.errors import UsageError

    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not _PARAM_NAME.match(name):
            raise UsageError(f"--param expects NAME=VALUE with NAME a plain identifier, got {item!r}")
        out[name] = value
    return out


def hint_text_numbers(sql: str, values: dict, rows: int) -> None:
    """When a query that compares ``->>`` text found nothing and a ``--param`` is a number, say on
    stderr how to compare numbers: ``'1e-06' = '1e-6'`` is false as text (a silent wrong answer)."""
    if rows or "->>" not in sql:
        return
    numbers = [name for name, value in values.items() if not name.startswith("_") and _is_number(value)
               and f"${name}" in sql]
    if numbers:
        from .common import echo_err

        echo_err(f"note: ${numbers[0]} is bound as text and ->> gives text, where 1e-6 and 0.000001 differ; "
                 f"to compare numbers write (config->>'key')::DOUBLE = ${numbers[0]}")


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


@contextmanager
def open_store(root, *, strict: bool = False, **kw) -> Iterator:
    """A read-only connection; skipped damaged files are reported on stderr as one line each."""
    from trackstore.read.views import connect

    with report_skipped_files():
        con = connect(root, on_corrupt="error" if strict else "warn", **kw)
    try:
        yield con
    finally:
        con.close()


@contextmanager
def report_skipped_files() -> Iterator[None]:
    """Print each damaged file a read skipped or read in part (a SkippedFileWarning or
    RunJsonWarning) on stderr as one line; other warnings pass on unchanged."""
    from trackstore.store.meta import RunJsonWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every one recorded; those not ours pass on through the filters below
            yield
    finally:  # outside catch_warnings, so warnings passed on are not recorded again
        ours: tuple[type[Warning], ...] = (RunJsonWarning,)
        part_scan = sys.modules.get("trackstore.read.part_scan")  # not imported by the block: it skipped no file
        if part_scan is not None:
            ours += (part_scan.SkippedFileWarning,)
        seen = set()
        for w in caught:
            if issubclass(w.category, ours):
                if str(w.message) not in seen:
                    seen.add(str(w.message))
                    sys.stderr.write(f"trackstore: WARNING: {visible_lines(str(w.message))}\n")
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def sql(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="One SQL query (SELECT/WITH/DESCRIBE/SHOW/EXPLAIN), or - to read it from stdin.")],
    root: ReaderRootOpt = None,
    params: ParamOpt = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0,
                                       help="Rows shown in the table view (the total is printed); 0 = all. "
                                            "Other formats always get every row.")] = 50,
    strict: StrictOpt = False,
    run_refs: Annotated[Optional[List[str]], typer.Option(
        # eager: read before --root, so that over a team store on S3 only these runs' parts come down
        "--run", "-r", is_eager=True, help=f"Only this run: {RUN_REF} (repeatable). Every view "
                                           "then holds these runs alone, which costs the same in a store of any size.")] = None,
) -> None:
    """Query every run with SQL (views: runs, metrics, samples, spans, histograms, artifacts,
    sync_state, latest, metric_summary; see docs/sql.md). Read-only."""
    from trackstore.read.guard import mentions_runs, mentions_sync_state
    from trackstore.read.views import run_sql

    if query == "-":
        query = sys.stdin.read()
    values = parse_params(params)
    only = None
    if run_refs:
        only = resolve_for_reading(ctx, run_refs, root, unreadable=True)
    # the runs and sync_state views are filled only for a query that names them (the others
    # need no listing of the store: a query on one run's metrics stays cheap in a big store)
    with open_store(root, strict=strict, sync_state=mentions_sync_state(query), runs_view=mentions_runs(query),
                    runs=only) as con:
        table = run_sql(con, query, values)
    hint_text_numbers(query, values, table.num_rows)
    one_run = only is not None and len({(r.project, r.run_id) for r in only}) == 1
    print_table(table, fmt, output=output, limit=limit, root=root, one_run=one_run)


RUN_COLUMNS = ("project", "run_id")  # which run a row is of: the same in every row of `sql -r RUN`


def bookkeeping_columns() -> tuple[str, ...]:
    """The columns a person reads last in a result too wide for the terminal: each row's
    identity in its run (``writer``, ``seq``) and the time it was logged (``ts``)."""
    from trackstore.store.schema import ROW_ID_COLUMNS  # pyarrow: not at import (--help stays fast)

    return (*ROW_ID_COLUMNS, "ts")


def print_table(table, fmt: Format, *, output=None, limit: int = 0, title: str | None = None, root=None,
                one_run: bool = False) -> None:
    """Render a pyarrow Table through :func:`cli.common.emit` (table view limited to ``limit`` rows).

    A table too wide for the terminal keeps the columns that tell rows apart (``key``, ``step``,
    ``value``...): it hides first ``project`` and ``run_id`` when every row has the same ones
    because the query was given one run (``one_run``: ``sql -r RUN``), then the bookkeeping
    columns (:func:`bookkeeping_columns`); a note names what it hid. Run ids it shows are
    shortened to handles, unique among the run ids of the store at ``root``."""
    total = table.num_rows
    shown = table.slice(0, limit) if fmt is Format.table and limit and total > limit else table
    from trackstore.store.arrays import to_pylist

    rows = to_pylist(shown)
    if fmt is not Format.table:
        emit(rows, fmt, columns=table.column_names, output=output, arrow_table=table)
        return
    same = [c for c in RUN_COLUMNS if c in table.column_names] if one_run else []
    emit(rows, fmt, columns=table.column_names, output=output, total=total, arrow_table=table, title=title,
         run_ids=store_run_ids(root) if "run_id" in table.column_names else None,
         drop_order=[*same, *bookkeeping_columns()], hint="--format csv or json shows all")
