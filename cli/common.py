"""What every command shares: the ``--root`` option, output formats, and error reporting.

``RootOpt`` resolves and checks the store root once for every command that reads or
maintains a store (:func:`existing_root`); only ``demo`` and ``run``, which write new runs,
take ``NewRootOpt`` and may create it.

Output goes through :func:`emit` only: a rich table for people, ``csv``/``json``/``jsonl``/
``parquet`` for programs. ``json`` is always an array of objects whose field names are the
column names of the matching SQL view. rich is imported only when a table is drawn.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import typer
from typing_extensions import Annotated

_ROOT_HELP = "Store root folder. Default: $TRACKSTORE_DIR, else ./tsruns."


def existing_root(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Path:
    """The one root check of the CLI: the resolved ``--root``, which must be a store.

    A missing path, a file, or a folder holding only other files is a usage error (exit 2)
    naming the path and where it came from (``--root``, ``$TRACKSTORE_DIR`` or the default),
    so a mistyped root never reads as an empty store nor gets ``_locks/`` created in it.
    """
    from trackstore.store.layout import ENV_ROOT, resolve_root

    origin = getattr(ctx.get_parameter_source(param.name), "name", "")
    source = {"COMMANDLINE": "--root", "ENVIRONMENT": f"${ENV_ROOT}"}.get(origin)
    return resolve_root(value, must_exist=True, source=source)


RootOpt = Annotated[
    Optional[Path],
    typer.Option("--root", envvar="TRACKSTORE_DIR", help=_ROOT_HELP + " It must exist (an empty folder is a "
                 "valid empty store).", show_default=False, callback=existing_root),
]
# demo and run write runs: the first run written creates the root
NewRootOpt = Annotated[
    Optional[Path],
    typer.Option("--root", envvar="TRACKSTORE_DIR", help=_ROOT_HELP + " Created by the first run written.",
                 show_default=False),
]


def choices(name: str, values: Iterable[str]) -> type[Enum]:
    """A str Enum for an option that takes a fixed set: typer then refuses any other value
    (exit 2) listing the valid ones, and ``--help`` shows them."""
    return Enum(name, {v: v for v in values}, type=str)


def check_targets(names: Iterable[str], root: Path, option: str) -> None:
    """Refuse sync target names that no installed adapter serves and the store's ledger never saw."""
    from trackstore.errors import UsageError
    from trackstore.sync import available

    known = set(available())
    unknown = [n for n in names if n not in known]
    if unknown:
        from trackstore.store.ledger import iter_cursors

        known |= {c.target for c in iter_cursors(root)}  # also targets synced by a plugin since removed
        unknown = [n for n in unknown if n not in known]
    if unknown:
        raise UsageError(f"{option}: unknown sync target {unknown[0]!r}; available: {', '.join(sorted(known))}")


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"
    parquet = "parquet"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.", case_sensitive=False)]
OutputOpt = Annotated[
    Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of standard output.")
]


def console(stderr: bool = False):
    from rich.console import Console

    width = None
    if not sys.stdout.isatty():
        width = int(os.environ.get("COLUMNS", "0") or 0) or 200
    return Console(stderr=stderr, width=width, soft_wrap=False)


# C0 and C1 control characters, DEL, and the invisible format characters that reorder or hide
# text (bidi overrides and isolates, zero-width characters): shown as escapes, never obeyed.
_INVISIBLE = {**{c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]},
              0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r",
              **{c: f"\\u{c:04x}" for c in [*range(0x200B, 0x2010), *range(0x202A, 0x202F),
                                              *range(0x2066, 0x206A), 0xFEFF]}}


def visible(text: str) -> str:
    """``text`` with every control and invisible formatting character written as an escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so a terminal shows it instead of obeying it."""
    return text.translate(_INVISIBLE)


def visible_lines(text: str) -> str:
    """:func:`visible` for a message of several lines: its newlines are kept, every other
    control or invisible character is shown as an escape."""
    return "\n".join(visible(line) for line in text.split("\n"))


# JSON output keeps text exact: the characters a JSON encoder leaves raw but a terminal would
# obey or hide (C1 controls, DEL, bidi and zero-width characters) become \uXXXX escapes, which
# every JSON reader decodes back to the same text.
_JSON_INVISIBLE = {c: f"\\u{c:04x}" for c in [0x7F, *range(0x80, 0xA0), *range(0x200B, 0x2010),
                                               *range(0x2028, 0x202F), *range(0x2066, 0x206A), 0xFEFF]}


def json_safe(text: str) -> str:
    """JSON text (from ``json.dumps``) with invisible and C1 control characters escaped as
    ``\\uXXXX``: the same JSON value, safe to print on a terminal."""
    return text.translate(_JSON_INVISIBLE)


def literal(value: Any) -> Any:
    """A value that came from a user or a model, for rich to print as it is: a ``Text`` (never
    parsed as markup) with control characters made visible."""
    from rich.text import Text

    return Text(visible(cell(value)))


def cell(value: Any) -> str:
    """One value as a table cell (the rich tables and csv output share it)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None if value != value else ("Infinity" if value > 0 else "-Infinity")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def emit(
    rows: Sequence[dict] | Any,
    fmt: Format = Format.table,
    *,
    columns: Sequence[str] | None = None,
    output: Path | None = None,
    title: str | None = None,
    total: int | None = None,
    arrow_table: Any = None,
) -> None:
    """Render records in the requested format. ``arrow_table`` (a pyarrow Table) is used as-is
    for parquet and to keep types; ``total`` notes truncation in the table view."""
    fmt = Format(fmt)
    if columns is None:
        columns = list(rows[0].keys()) if rows else (arrow_table.column_names if arrow_table is not None else [])
    if fmt is Format.parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = arrow_table if arrow_table is not None else pa.Table.from_pylist(
            [{c: _jsonable(r.get(c)) if isinstance(r.get(c), (dict, list)) else r.get(c) for c in columns} for r in rows]
        )
        if output is None:
            if sys.stdout.isatty():
                raise typer.BadParameter("parquet output is binary: pass -o FILE", param_hint="--format")
            buf = io.BytesIO()
            pq.write_table(table, buf)
            sys.stdout.buffer.write(buf.getvalue())
        else:
            pq.write_table(table, output)
        return
    out = open(output, "w", encoding="utf-8", newline="") if output else sys.stdout
    try:
        if fmt is Format.json:
            out.write(json_safe(json.dumps([{c: _jsonable(r.get(c)) for c in columns} for r in rows],
                                           ensure_ascii=False, indent=1)) + "\n")
        elif fmt is Format.jsonl:
            for r in rows:
                out.write(json_safe(json.dumps({c: _jsonable(r.get(c)) for c in columns}, ensure_ascii=False)) + "\n")
        elif fmt is Format.csv:
            w = csv.writer(out)
            shown = visible if out.isatty() else str  # to a terminal: control characters as escapes
            w.writerow([shown(c) for c in columns])
            for r in rows:
                w.writerow([shown(cell(r.get(c))) for c in columns])
        else:
            if output is not None:
                from rich.console import Console

                con = Console(file=out, width=200)
            else:
                con = console()
            from rich.table import Table

            t = Table(title=literal(title) if title else None, show_lines=False, header_style="bold")
            for c in columns:
                t.add_column(literal(c), overflow="fold")
            for r in rows:
                t.add_row(*[literal(r.get(c)) for c in columns])
            con.print(t)
            if total is not None and total > len(rows):
                con.print(f"[dim]showing {len(rows)} of {total} rows (use --limit, or --format csv for all)[/dim]")
    finally:
        if output:
            out.close()


def echo_err(msg: str) -> None:
    sys.stderr.write(visible_lines(msg.rstrip("\n")) + "\n")  # messages name the user's runs, paths, errors
