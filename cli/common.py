"""What every command shares: the ``--root`` option, output formats, and error reporting.

``RootOpt`` resolves and checks the store root once for every command that reads or
maintains a store (:func:`existing_root`); only ``demo``, ``run`` and ``import``, which write
runs, take ``NewRootOpt`` (:func:`new_root`) and may create it.

Output goes through :func:`emit` only: a rich table for people, ``csv``/``json``/``jsonl``/
``parquet`` for programs. ``json`` is always an array of objects whose field names are the
column names of the matching SQL view. rich is imported only when a table is drawn.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional, Sequence

import typer

_ROOT_HELP = "Store root (default: $TRACKSTORE_DIR, else ./tsruns)."


def _root_source(ctx: typer.Context, param: typer.CallbackParam) -> str:
    """Where ``--root``'s value came from, as an error names it."""
    from trackstore.store.layout import DEFAULT_ROOT, ENV_ROOT

    origin = getattr(ctx.get_parameter_source(param.name), "name", "")
    return {"COMMANDLINE": "--root", "ENVIRONMENT": f"${ENV_ROOT}"}.get(
        origin, f"the default ./{DEFAULT_ROOT}, used when neither --root nor ${ENV_ROOT} is set")


def existing_root(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Path:
    """The one root check of the CLI's readers: the resolved ``--root``, which must be a store.

    A missing path, a file, or a folder holding only other files is a usage error (exit 2)
    naming the path and where it came from (``--root``, ``$TRACKSTORE_DIR`` or the default),
    so a mistyped root never reads as an empty store nor gets ``_locks/`` created in it; for a
    missing one it names the stores nearby and the ``--root`` that reads one.
    """
    from trackstore.store.layout import resolve_root

    if value is not None and str(value).startswith("s3:/"):
        raise _no_replica_here(ctx)
    return resolve_root(value, must_exist=True, source=_root_source(ctx, param), option="--root")


#: a reader over s3:// shows a bar (on a terminal) when it downloads at least this many files
FETCH_BAR_FROM = 50

#: the commands that read a team store on S3 (``--root s3://BUCKET/PREFIX``) through a local copy
REPLICA_READERS = ("runs", "show", "sql", "plot", "compare", "samples", "trace", "artifacts", "ui", "gc")


#: where :func:`reader_root` leaves, in ``ctx.meta``, the ``s3://`` URI a local copy was made of
REPLICA_URI = "trackstore.replica_uri"
#: the readers of named runs: over ``s3://`` their copy first holds every run.json, and the
#: parts of the runs they name only once named (:func:`resolve_for_reading`); ``sql --run`` too
NAMED_RUN_READERS = ("show", "plot", "compare", "samples", "trace", "artifacts")
_PARTIAL = "trackstore.replica_partial"
_LISTING = "trackstore.replica_listing"  # the replica's objects, listed once for both of their calls


def _no_replica_here(ctx: typer.Context) -> Exception:
    from trackstore.errors import UsageError

    return UsageError(f"{ctx.info_name} works on a local store; a team store at s3://... is read by "
                      f"{', '.join(REPLICA_READERS[:-1])} and cleaned by gc (a shared path works everywhere)")


@contextlib.contextmanager
def fetch_bar():
    """``on_fetch`` for :func:`trackstore.read.replica_copy.local_copy`: a bar on a terminal
    when many files come down, closed on the way out."""
    shown: list[Steps] = []

    def on_fetch(total: int):
        if total < FETCH_BAR_FROM or not sys.stderr.isatty():
            return None  # a few files, or a script's stderr: no bar
        while shown:  # a copy fetched in two steps (run.json files, then parts): one bar at a time
            shown.pop().__exit__(None, None, None)
        bar = Steps("fetching from the team store", total=total).__enter__()
        shown.append(bar)
        return lambda key: bar(key.rsplit("/", 1)[-1])

    try:
        yield on_fetch
    finally:
        for bar in shown:
            bar.__exit__(None, None, None)


def reader_root(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Path:
    """:func:`existing_root` for the commands that also read a team store on S3: ``--root
    s3://BUCKET/PREFIX`` becomes the local copy of that replica, brought in step first
    (:func:`trackstore.read.replica_copy.local_copy`). ``runs`` and ``ui`` fetch the run.json
    files (they carry the facts of the alerts; ``ui`` fetches a run's parts as a page reads it);
    the readers of named runs (:data:`NAMED_RUN_READERS`) the
    run.json files, then the parts of the runs they name (:func:`resolve_for_reading`); the
    others every part."""
    from trackstore.store.objects import is_remote

    if value is not None and is_remote(value):
        from trackstore.read.replica_copy import local_copy, replica_objects

        ctx.meta[REPLICA_URI] = value  # a reader that stays up (ui) follows the replica
        # sql --run (an eager option: read already) names its runs too
        partial = ctx.meta[_PARTIAL] = ctx.info_name in NAMED_RUN_READERS or bool(ctx.params.get("run_refs"))
        listing = ctx.meta[_LISTING] = replica_objects(value) if partial else None
        with fetch_bar() as on_fetch:
            # runs: every run.json, which carries the facts its alerts (NaN, stalled) are read from;
            # ui: the same, and each run's parts when a page first reads it (replica_copy.OnDemand)
            return local_copy(value, metadata_only=partial, for_listing=ctx.info_name in ("runs", "ui"),
                              on_fetch=on_fetch, listing=listing)
    return existing_root(ctx, param, None if value is None else Path(value))


def resolve_for_reading(ctx: typer.Context, refs: Sequence[str], root: Path | None, *, unreadable: bool = False):
    """:func:`trackstore.read.listing.resolve_runs` for a reader of named runs; over a team
    store on S3 (:func:`reader_root`), the files of these runs, and of no other, are then
    brought into the local copy before they are read: showing one run of a team store of
    thousands downloads that run, not the store."""
    from trackstore.read.listing import resolve_runs

    infos = resolve_runs(refs, root, unreadable=unreadable)
    if ctx.meta.get(_PARTIAL):
        from trackstore.read.replica_copy import local_copy

        with fetch_bar() as on_fetch:
            local_copy(ctx.meta[REPLICA_URI], runs=[(i.project, i.run_id) for i in infos], on_fetch=on_fetch,
                       listing=ctx.meta[_LISTING])
    return infos


def new_root(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Path:
    """The root of a command that writes runs (``demo``, ``run``, ``import``): created by the
    first run written when it does not exist, as ``trackstore.init`` does; a path that exists
    must be a store (a file, or a folder of other things, is refused as readers refuse it)."""
    from trackstore.store.layout import check_store_root, resolve_root

    path = resolve_root(value)
    if path.exists() or path.is_symlink():
        check_store_root(path, _root_source(ctx, param), option="--root")
    return path


RootOpt = Annotated[
    Optional[Path],
    typer.Option("--root", envvar="TRACKSTORE_DIR", help=_ROOT_HELP + " It must exist.",
                 show_default=False, callback=existing_root),
]
def gc_root(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Path | str:
    """``gc``'s root: a local store (a Path, as :func:`existing_root`), or a team store (the
    replica's URI as given, a str): ``s3://BUCKET/PREFIX``, or a path holding ``_replica.json``."""
    from trackstore.store.layout import REPLICA_MARKER
    from trackstore.store.objects import is_remote

    if value is not None and (is_remote(value) or (Path(value).expanduser() / REPLICA_MARKER).is_file()):
        return value
    return existing_root(ctx, param, None if value is None else Path(value))


GcRootOpt = Annotated[
    Optional[str],
    typer.Option("--root", envvar="TRACKSTORE_DIR", metavar="PATH|URI",
                 help=_ROOT_HELP + " It must exist. A team store (s3://BUCKET/PREFIX, or a replica's path) "
                 "is cleaned by age alone: see docs/team-store.md.", show_default=False, callback=gc_root),
]


# the readers that also take a team store on S3: runs, show, sql, plot, compare, samples, trace, ui
ReaderRootOpt = Annotated[
    Optional[str],
    typer.Option("--root", envvar="TRACKSTORE_DIR", metavar="PATH|URI",
                 help=_ROOT_HELP + " It must exist. s3://BUCKET/PREFIX reads a team store (a replica).",
                 show_default=False, callback=reader_root),
]
# demo, run and import write runs: the first run written creates the root
NewRootOpt = Annotated[
    Optional[Path],
    typer.Option("--root", envvar="TRACKSTORE_DIR", help=_ROOT_HELP + " Created by the first run written.",
                 show_default=False, callback=new_root),
]


# what every RUN argument accepts (trackstore.read.listing.resolve_run)
RUN_REF = "its id, its handle (the short id listings show), a unique id prefix, or project/name"


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
WideOpt = Annotated[
    bool, typer.Option("--wide", "--no-trunc", help="Tables: every column, full run ids and texts, even past "
                       "the terminal's edge.", rich_help_panel="Output")
]
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
    if text.isascii() and text.isprintable():  # nothing to escape (the common case, made cheap)
        return text
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


def _parquet_table(rows: Sequence[dict], columns: Sequence[str]):
    """``rows`` as an Arrow table for a Parquet file. A column of dicts (a run's config, summary,
    non-finite keys) is JSON text, as the ``runs`` view holds config and summary: a struct
    would change shape from run to run, fail on a key holding a number in one run and a list in
    another, and cannot be written at all when every dict is empty. Any other column whose
    values Arrow cannot type as one (mixed kinds) is JSON text too; a column of empty lists only
    (no run has tags) is a list of strings; the rest keep their types."""
    import pyarrow as pa

    def as_text(values: list) -> Any:
        return pa.array([None if v is None else json.dumps(_jsonable(v), ensure_ascii=False) for v in values],
                        pa.string())

    arrays = []
    for c in columns:
        values = [r.get(c) for r in rows]
        if any(isinstance(v, dict) for v in values):
            arrays.append(as_text(values))
            continue
        if any(isinstance(v, (list, tuple)) for v in values) and not any(v for v in values):
            arrays.append(pa.array(values, pa.list_(pa.string())))  # only empty lists (tags): typed as a full one
            continue
        try:
            arrays.append(pa.array([_jsonable(v) if isinstance(v, (list, tuple)) else v for v in values]))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays.append(as_text(values))
    return pa.Table.from_arrays(arrays, names=list(columns))


def emit(
    rows: Sequence[dict] | Any,
    fmt: Format = Format.table,
    *,
    columns: Sequence[str] | None = None,
    output: Path | None = None,
    title: str | None = None,
    total: int | None = None,
    arrow_table: Any = None,
    wide: bool = False,
    run_ids: Iterable[str] | None = None,
    labels: dict[str, str] | None = None,
    drop_order: Sequence[str] = (),
    hint: str = "--wide shows all",
    wrap: Sequence[str] = (),
) -> None:
    """Render records in the requested format. ``arrow_table`` (a pyarrow Table) is used as-is
    for parquet and to keep types; ``total`` notes truncation in the table view.

    The table view fits the terminal (:func:`render_table`); ``wide``, ``run_ids``, ``labels``,
    ``drop_order``, ``hint`` and ``wrap`` are its options. Other formats always carry every column and
    the full run ids."""
    fmt = Format(fmt)
    if columns is None:
        columns = list(rows[0].keys()) if rows else (arrow_table.column_names if arrow_table is not None else [])
    if fmt is Format.parquet:
        import pyarrow.parquet as pq

        table = arrow_table if arrow_table is not None else _parquet_table(rows, columns)
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
            w = csv.writer(out, lineterminator="\n")  # LF, as every Unix tool expects
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
            render_table(con, rows, columns, title=title, wide=wide, run_ids=run_ids, labels=labels,
                         drop_order=drop_order, hint=hint, wrap=wrap)
            if total is not None and total > len(rows):
                con.print(f"[dim]showing {len(rows)} of {plural(total, 'row')} (use --limit, or --format csv for all)[/dim]")
    finally:
        if output:
            out.close()


def echo_err(msg: str) -> None:
    sys.stderr.write(visible_lines(msg.rstrip("\n")) + "\n")  # messages name the user's runs, paths, errors



# ---------------------------------------------------------------------------------------------
# Tables that fit the terminal
#
# A table row is one line: every cell is no_wrap. What cannot be made narrower (run ids,
# numbers, times, short words such as a status) keeps its full width; free text (names, paths,
# errors) is cut with an ellipsis down to a minimum width. A column that names what its row is
# about (a run's name, a metric key: :data:`NAME_FLOORS`) is cut in its middle, where names of
# one sweep or one family are alike (``qwen2.5-0.5b-g…-lr1e-6-seed1``,
# ``actor/lay…/grad_norm``), not below its floor, and hidden last. When even that does not fit,
# run ids are shortened to their handles (:func:`short_ids`: every run reference accepts them),
# and then whole columns are hidden (empty ones first, then the command's ``drop_order``, then
# from the right), with a note saying which. Error texts cut short are printed in full below.

MIN_TEXT = 10  # free text is never cut narrower than this
MIN_ERROR = 24  # nor an error text (the rest of it is printed below the table)
NAME_FLOORS = {"name": 24, "key": 40}  # nor these (fewer characters: their whole text)
ERROR_COLUMNS = frozenset({"error", "last_error", "result", "write_errors", "problem"})
# the table's frame: one border at each edge and between columns, one space of padding each side
_EDGE, _PER_COLUMN = 1, 3


def short_ids(ids: Iterable[str], universe: Iterable[str] = ()) -> dict[str, str]:
    """The short form of each run id a listing shows, unique among ``universe`` (every run id of
    the store): its handle (:func:`trackstore.read.refs.handles`), the random end of a generated
    id (``k3j9x2ab``), which `trackstore show` and every run reference accept."""
    from trackstore.read.refs import handles

    return handles(ids, universe)


def store_run_ids(root: Path | None) -> set[str]:
    """Every run id under the store root (folder names only, nothing is read): the set a
    shortened id must be unique in."""
    from trackstore.store.catalog import run_folders
    from trackstore.store.layout import resolve_root

    try:
        return {run_id for _project, run_id in run_folders(resolve_root(root))}
    except Exception:  # an unusable root was refused before any table is drawn
        return set()


def check_project(root: Path, project: str, most: int = 10) -> None:
    """Refuse a project that has no run in the store (exit 3), listing the projects there are,
    the closest to ``project`` first (:func:`trackstore.read.refs.closest`)."""
    from trackstore.errors import RunNotFoundError

    problem = unknown_project(root, project, most)
    if problem:
        raise RunNotFoundError(problem)


def note_unknown_project(root: Path, project: str | None) -> None:
    """For a filter (``runs``, ``gc``, ``compact``, ``sync`` with ``--project``) that selected
    nothing: say on stderr that ``project`` has no run, with the projects there are, and go on.
    Not an error: a cron line may name a project whose first run has not started yet."""
    problem = unknown_project(root, project) if project else None
    if problem:
        echo_err(f"note: {problem}")


def unknown_project(root: Path, project: str, most: int = 10) -> str | None:
    """None when ``project`` has a run in the store, else the sentence saying it has none,
    with the projects there are, closest first."""
    from trackstore.store.catalog import run_folders

    return project_missing(project, {p for p, _run_id in run_folders(root)}, str(root), most)


def project_missing(project: str, projects: set[str], where: str, most: int = 10) -> str | None:
    """:func:`unknown_project` over the ``projects`` a store (or a team store, ``where``) has."""
    from trackstore.read.refs import closest

    if project in projects:
        return None
    if not projects:
        return f"no project {project!r} in {where}: the store has no runs"
    ranked = closest(project, sorted(projects), everything=True)
    more = f" (and {len(ranked) - most} more)" if len(ranked) > most else ""
    return f"no project {project!r} in {where}; its projects, closest first: {', '.join(ranked[:most])}{more}"


def short_time(value: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` (a datetime or an ISO string; else as it is)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        from datetime import datetime

        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value)


def _cells(text: str) -> int:
    """Terminal cells of ``text``: a CJK character or an emoji takes two (plain ASCII: its length)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


class _Column:
    """One column of a table being fitted: its cells as text and how it may be narrowed."""

    def __init__(self, name: str, label: str, values: list[Any], kind: str):
        self.name, self.label, self.kind = name, label, kind
        self.values = values
        self.cells = [visible(cell(v)) for v in values]
        self.empty = all(v in (None, "", [], {}) for v in values)
        self.wraps = False  # its cells wrap over lines (render_table's ``wrap``)
        self._natural: int | None = None

    @property
    def natural(self) -> int:
        if self._natural is None:
            self._natural = max([_cells(self.label), *map(_cells, self.cells)])
        return self._natural

    @property
    def minimum(self) -> int:
        """The narrowest this column may be: free text can be cut, nothing else."""
        if self.kind == "text":
            floor = MIN_ERROR if self.name in ERROR_COLUMNS and not self.wraps else \
                NAME_FLOORS.get(self.name, MIN_TEXT)
            return min(self.natural, max(floor, len(self.label)))
        return self.natural


def _kind(name: str, values: list[Any]) -> str:
    from datetime import datetime

    present = [v for v in values if v not in (None, "", "-")]
    if name == "run_id":
        return "id"
    if name in ERROR_COLUMNS:
        return "text"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "number"
    if present and (all(isinstance(v, datetime) for v in present) or name.endswith("_at")):
        return "time"
    if max((len(visible(cell(v))) for v in present), default=0) <= 16:
        return "word"  # a status, a kind, a short name: cut, it says nothing
    return "text"


def render_table(con: Any, rows: Sequence[dict], columns: Sequence[str], *, title: str | None = None,
                 wide: bool = False, run_ids: Iterable[str] | None = None, labels: dict[str, str] | None = None,
                 drop_order: Sequence[str] = (), hint: str = "--wide shows all", wrap: Sequence[str] = ()) -> None:
    """Print ``rows`` as a rich table of one line per row that fits ``con.width`` (see above).

    ``wide``: every column, full ids and texts, however wide (lines may pass the terminal's
    edge). ``run_ids``: every run id of the store (shortened ids are unique among them; without
    it run ids are never shortened).
    ``labels``: shorter headers for some columns. ``drop_order``: the columns to hide first.
    ``wrap``: free-text columns whose cells wrap over several lines instead (a report whose text
    is the point, such as doctor's advice).
    """
    from rich.cells import cell_len
    from rich.text import Text

    labels = labels or {}
    cols = []
    for name in columns:
        values = [r.get(name) for r in rows]
        kind = _kind(name, values)
        if kind == "time":
            values = [short_time(v) for v in values]
        cols.append(_Column(name, labels.get(name, name), values, kind))
        cols[-1].wraps = name in wrap
    width = con.width

    def total(cs) -> int:
        return _EDGE + sum(c.minimum + _PER_COLUMN for c in cs)

    def natural(cs) -> int:
        return _EDGE + sum(c.natural + _PER_COLUMN for c in cs)

    hidden: list[_Column] = []
    if not wide:  # 1. empty columns go first: they say nothing
        for c in [c for c in cols if c.empty and c.kind != "id"]:
            if natural(cols) <= width:
                break
            cols.remove(c)
            hidden.append(c)
    ids = next((c for c in cols if c.kind == "id"), None)
    if not wide and ids is not None and run_ids is not None and natural(cols) > width:  # 2. handles
        short = short_ids([v for v in ids.values if isinstance(v, str)], run_ids)
        ids.cells = [visible(short.get(v, cell(v))) if isinstance(v, str) else visible(cell(v)) for v in ids.values]
        ids._natural = None
    if not wide:  # 3. free text cut to its minimum (below), and columns hidden until that fits
        errors = [c for c in cols if c.name in ERROR_COLUMNS]
        names = [c for c in cols if c.name in NAME_FLOORS]
        order = [c for name in drop_order for c in cols if c.name == name]
        order += [c for c in reversed(cols) if c.kind == "text" and c not in order + errors + names]
        order += [c for c in reversed(cols) if c.kind != "id" and c not in order + errors + names]
        order += [c for c in errors + names if c not in order]
        order = list(dict.fromkeys(order))  # a name listed twice in drop_order names one column
        while total(cols) > width and len(cols) > 1 and order:
            gone = order.pop(0)
            cols.remove(gone)
            hidden.append(gone)
    # widths: every column its minimum, then what is left to the free-text ones, up to their natural
    widths = {c.name: (c.natural if wide else c.minimum) for c in cols}
    spare = width - total(cols)
    growing = [c for c in cols if c.kind == "text" and widths[c.name] < c.natural]
    while spare > 0 and growing and not wide:
        for c in list(growing):
            if spare <= 0:
                break
            widths[c.name] += 1
            spare -= 1
            if widths[c.name] >= c.natural:
                growing.remove(c)
    if wide:
        con.width = max(width, _EDGE + sum(w + _PER_COLUMN for w in widths.values()))
    else:
        for c in cols:
            if c.name in NAME_FLOORS and c.kind == "text":
                c.cells = [_cut_middle(t, widths[c.name]) for t in c.cells]
    if not any(c.name in wrap and c.kind == "text" for c in cols) and (con.color_system is None or len(rows) > 200):
        _print_lines(con, title, cols, widths)  # the same table as rich draws, without its per-cell cost
    else:
        _print_rich(con, title, cols, widths, wrap, len(rows))
    # error texts cut short, in full (each of their lines made visible), each text once
    label = next((c for c in cols if c.kind == "id"), None)
    for c in cols + hidden:
        if c.name not in ERROR_COLUMNS or (c.name in wrap and c in cols):
            continue
        cut: dict[str, list[str]] = {}
        for i, text in enumerate(c.cells):
            if text and (c not in cols or cell_len(text) > widths[c.name]):
                cut.setdefault(cell(c.values[i]), []).append(label.cells[i] if label is not None else f"row {i + 1}")
        for full, who in cut.items():
            lines = [visible(line) for line in full.splitlines()] or [""]
            con.print(Text(f"{', '.join(who)} {c.label}: " + "\n  ".join(lines)))
    if hidden:
        names = ", ".join(c.label for c in hidden)
        con.print(Text(f"(hidden: {names}; {hint})", style="dim"))


def _print_rich(con: Any, title: str | None, cols: list[_Column], widths: dict[str, int], wrap: Sequence[str],
                n: int) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title) if title else None, header_style="bold", box=box.HEAVY_HEAD)
    for c in cols:
        right = c.kind == "number"
        folds = c.name in wrap and c.kind == "text"
        t.add_column(Text(c.label), width=widths[c.name], no_wrap=not folds, overflow="fold" if folds else "ellipsis",
                     justify="right" if right else "left", min_width=widths[c.name])
    for i in range(n):
        t.add_row(*[Text(c.cells[i]) for c in cols])
    con.print(t)


def _cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: a third of it from the start, "…", the rest from the end."""
    if _cells(text) <= width or width < 3:
        return text
    head, tail = "", ""
    room = width - 1
    for ch in reversed(text):  # the end first: that is where names made alike differ
        if _cells(ch + tail) > room - room // 3:
            break
        tail = ch + tail
    for ch in text:
        if _cells(head + ch) + _cells(tail) > room:
            break
        head += ch
    return head + "…" + tail


def _fit(text: str, width: int, right: bool) -> str:
    """``text`` in exactly ``width`` cells: cut with an ellipsis, padded (rich's no-wrap cell)."""
    n = _cells(text)
    if n > width:
        from rich.cells import set_cell_size

        text, n = set_cell_size(text, width - 1) + "…", width
    pad = " " * (width - n)
    return pad + text if right else text + pad


def _fit_all(cells: list[str], width: int, right: bool) -> list[str]:
    """:func:`_fit` of every cell of a column (plain ASCII that fits: padded without measuring)."""
    pad = str.rjust if right else str.ljust
    return [pad(t, width) if len(t) <= width and t.isascii() else _fit(t, width, right) for t in cells]


def _print_lines(con: Any, title: str | None, cols: list[_Column], widths: dict[str, int]) -> None:
    """The table rich would print (box HEAVY_HEAD, bold header), written as lines: a listing of
    10,000 runs costs milliseconds instead of seconds. Only one-line cells (no wrapping)."""
    ws = [widths[c.name] for c in cols]
    bold = con.color_system is not None
    out: list[str] = []
    total = sum(ws) + 3 * len(ws) + 1
    if title:  # through rich, as its table does (one call: wrapped and centred over the table's width)
        from rich.text import Text

        con.print(Text(title.rstrip(), style="table.title"), justify="center", width=total, highlight=False)
    out.append("┏" + "┳".join("━" * (w + 2) for w in ws) + "┓")
    heads = [_fit(c.label, w, c.kind == "number") for c, w in zip(cols, ws)]
    if bold:
        heads = [f"\x1b[1m{h.rstrip(' ') if c.kind != 'number' else h}\x1b[0m"
                 + (" " * (len(h) - len(h.rstrip(' '))) if c.kind != "number" else "") for c, h in zip(cols, heads)]
    out.append("┃ " + " ┃ ".join(heads) + " ┃")
    out.append("┡" + "╇".join("━" * (w + 2) for w in ws) + "┩")
    fitted = [_fit_all(c.cells, w, c.kind == "number") for c, w in zip(cols, ws)]
    out.extend("│ " + " │ ".join(row) + " │" for row in zip(*fitted))
    out.append("└" + "┴".join("─" * (w + 2) for w in ws) + "┘")
    con.file.write("\n".join(out) + "\n")
    con.file.flush()


def one_line(text: str, limit: int = 200) -> str:
    """``text`` as one visible line of at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = visible(" ".join(str(text).split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def ranges_text(values: Iterable[int], most: int = 12) -> str:
    """Integers as ascending runs of consecutive values: ``0..7, 9, 12..15``. Past ``most`` runs,
    the first and last few, with how many are left out between them."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    texts = [str(a) if a == b else f"{a}..{b}" for a, b in runs]
    if len(texts) > most:
        half = most // 2
        texts = [*texts[:half], f"... ({len(texts) - 2 * half} more) ...", *texts[-half:]]
    return ", ".join(texts)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``10,000 runs``; ``many`` for irregular words (``plural(n, "entry", "entries")``)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def say_where(head: str, where: str, tail: str = "") -> None:
    """Print ``head where tail`` (``where``: a destination, a URI or path that must not be cut)
    as one line; on a terminal too narrow for it, ``head tail:`` and then ``where`` on a line
    of its own, indented, so the terminal does not break the URI. Pipes and logs get one line."""
    import shutil

    from rich.cells import cell_len

    line = f"{head} {where}{tail}"
    if sys.stdout.isatty() and cell_len(line) > shutil.get_terminal_size().columns:
        print(visible(f"{head}{tail}:"))
        print(visible(f"  {where}"))
    else:
        print(visible(line))


class Steps:
    """Progress of a long command (export, import, gc, compact, doctor --deep): a rich bar on
    stderr when it is a terminal, else plain lines on stderr (cron mail, logs), at most one
    every few seconds and always the last. ``total`` None: stages, each named as it begins.

        with Steps("compact", total=len(runs)) as step:
            compact(root, runs, on_run=lambda paths: step(paths.run_id))
    """

    EVERY_S = 5.0

    def __init__(self, what: str, total: int | None = None, *, quiet: bool = False):
        self.what, self.total, self.done = what, total, 0
        self.quiet = quiet
        self.bar: Any = None
        self.task: Any = None
        self.last = 0.0

    def __enter__(self) -> Steps:
        if not self.quiet and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[label]}"),
                                console=console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total, label="")
        return self

    def __call__(self, label: str = "", amount: int = 1) -> None:
        """One step done (``amount`` of them: bytes, records...), ``label`` naming where it is."""
        import time

        label = one_line(label, 60)
        if self.total is not None:
            self.done += amount
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, label=label)
            return
        if self.quiet:
            return
        now = time.monotonic()
        last = self.total is not None and self.done >= self.total
        if self.total is None or last or now - self.last >= self.EVERY_S:
            self.last = now
            count = f" {self.done}/{self.total}" if self.total is not None else ""
            sys.stderr.write(f"{self.what}:{count} {label}".rstrip() + "\n")
            sys.stderr.flush()

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
