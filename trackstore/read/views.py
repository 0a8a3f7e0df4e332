"""SQL over the whole store: DuckDB views over every run, and read-only query execution.

::

    import trackstore
    con = trackstore.connect()                      # duckdb connection with the views below
    con.sql("SELECT * FROM latest WHERE key = 'critic/score/mean'").df()
    table = trackstore.query("SELECT ... WHERE run_id = $run", {"run": "2026..."})  # pyarrow Table

Views (``docs/sql.md`` has every column): ``runs``, ``metrics``, ``samples``, ``spans``,
``histograms``, ``artifacts``, ``sync_state``, plus helpers ``latest`` (most recently logged
value of each key in each run) and ``metric_summary`` (per run and key: count, step range,
first/last/min/max/mean). :func:`wide` turns one run's metrics into one column per key.

The promises this module keeps:

* Record views read the store's hive layout directly (``project=``/``run=`` folders become the
  ``project`` and ``run_id`` columns) with ``union_by_name``, so runs written by older schema
  versions read with NULLs in the columns they lack, and every view always has every column of
  :mod:`trackstore.store.schema`, even when no file of that kind exists yet.
* Live runs are visible: a view globs ``*.parquet`` at every query, so each part a writer has
  flushed (renamed into place) is seen by the next query. The globs are held in DuckDB
  variables and the views made while bound to an empty file of their own, so opening a
  connection expands no glob: only a query that reads a kind lists its files. Temp files
  (``.name.xxxx.tmp``) never match, and ``_trash``/``_quarantine``/``_sync`` are outside the
  globbed tree.
* A damaged part file (truncated, garbage, missing footer) never turns every query into an
  obscure error. :func:`connect` checks each part's Parquet framing and footer once (cached by
  path, size and mtime) and by default skips a bad file with a warning naming it
  (``on_corrupt="error"`` raises :class:`~trackstore.errors.CorruptFileError` instead); a kind
  folder whose ``stat`` fingerprint is the one the catalog kept with its listing is not
  listed again, nor its parts ``stat``-ed (parts arrive and leave by renames). A file
  damaged inside its data pages is caught at query time: the error names the file and points
  to ``trackstore doctor``.
* Fast with thousands of parts: when every part of a kind has the same columns (the footers
  read at connect say so), the view binds to one file's schema instead of DuckDB's
  ``union_by_name``, which would re-read every footer at every query. If a part with other
  columns is flushed later, the views switch to ``union_by_name`` and the query is retried.
* ``runs`` comes from ``run.json`` through :func:`trackstore.read.listing.list_runs`, so its
  ``status`` is the *effective* one (a run whose writer died is ``crashed``, with
  ``last_step`` and ``ended_at`` derived from its data). One bad run.json never fails a
  query: a value no reader can use is NULL (a warning names the file), and a run whose
  run.json cannot be parsed is listed with what its folder and writer files tell.
* Read-only: with ``read_only=True`` (the default) the connection is in memory, may read files
  only under the store root (DuckDB's temp folder is a private one of its own, see
  :func:`confine`; files reached through a link leading out of the store are refused by
  DuckDB and left out of the views), and its configuration is locked; :func:`run_sql` (used
  by :func:`query` and ``trackstore sql``) additionally refuses every statement that is not a
  query (COPY, ATTACH, CREATE, INSERT, INSTALL/LOAD, SET, an EXPLAIN ANALYZE of any of these,
  ...) with a :class:`~trackstore.errors.QueryError`. User values are bound parameters
  (``$name``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import CorruptFileError, QueryError
from ..store import objects
from ..store import schema as _schema
from ..store.arrays import column
from ..store.last_rows import COLUMN as LAST_OF_KEY
from ..store.layout import (
    MANIFEST_DIR,
    PART_SUFFIX,
    PROJECT_PREFIX,
    RUN_PREFIX,
    resolve_root,
)
from ..store.parts import find_unreadable
from ..store.vocab import Kind
from .guard import check_read_only, clean_error, mentions_sync_state
from .part_scan import KIND_GLOB, RECORD_KINDS, scan_parts, warn_skipped
from .part_scan import SkippedFileWarning as SkippedFileWarning  # the views' warning, named here too

if TYPE_CHECKING:  # pragma: no cover
    import duckdb
    import pyarrow as pa

    from ..store.layout import RunPaths

VIEWS = ("runs", *RECORD_KINDS, "artifact_aliases", "sync_state", "latest", "metric_summary")

SYNC_STATE_COLUMNS = (
    ("target", "string"), ("destination", "string"), ("project", "string"), ("run_id", "string"),
    ("kind", "string"), ("acked_rows", "int64"), ("pending_rows", "int64"), ("skipped_rows", "int64"),
    ("remote_id", "string"), ("synced_status", "string"), ("last_sync_at", "ts"), ("last_error", "string"),
    ("staged", "bool"),
)

# ---------------------------------------------------------------------- connecting
def connect(root: str | os.PathLike | None = None, *, read_only: bool = True, on_corrupt: str = "warn",
            sync_state: bool = True, runs: Iterable[Any] | None = None,
            runs_view: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views over every run of the store at ``root``.

    ``runs`` (RunInfo objects or ``(project, run_id)`` pairs) limits every view to those runs,
    which makes per-run questions (plot, show, compare) independent of the store's size.

    ``on_corrupt`` is ``"warn"`` (skip damaged part files, warning with
    :class:`SkippedFileWarning` naming each) or ``"error"`` (raise
    :class:`~trackstore.errors.CorruptFileError` for the first one). With ``read_only=True``
    the connection can read only files under the root and cannot change its configuration
    (no ATTACH or COPY outside it, no INSTALL or LOAD). ``sync_state=False`` leaves the
    ``sync_state`` view empty, which saves reading every part's ``(writer, seq)`` columns;
    ``runs_view=False`` leaves the ``runs`` view empty (its columns, no rows), which saves
    listing every run (what ``trackstore sql`` does for a query that never names it).
    A root that is not a store (missing, not a folder, other files only) raises
    :class:`~trackstore.errors.UsageError` naming it (:func:`trackstore.store.layout.check_store_root`).
    ``root="s3://BUCKET/PREFIX"`` reads a team store: a local copy of the replica kept in step
    (:func:`trackstore.read.replica_copy.local_copy`; docs/team-store.md).
    """
    if on_corrupt not in ("warn", "error"):
        raise ValueError("on_corrupt must be 'warn' or 'error'")
    import duckdb

    if objects.is_remote(root):  # a team store on S3: its local copy, brought in step (read.replica_copy)
        from .replica_copy import local_copy

        root = local_copy(str(root))
    root_path = resolve_root(root, must_exist=True)  # a mistyped root is an error, not an empty store
    only = None if runs is None else {(r.project, r.run_id) if hasattr(r, "run_id") else tuple(r) for r in runs}
    parts = scan_parts(root_path, only)
    good, bad = parts.files, parts.bad
    for path, problem in sorted(bad.items()):
        if on_corrupt == "error":
            raise CorruptFileError(path, problem)
        warn_skipped(path, problem, stacklevel=3)
    con = duckdb.connect(":memory:")
    try:
        binding: tempfile.TemporaryDirectory | None = tempfile.TemporaryDirectory(prefix="trackstore-bind-")
    except OSError:  # no writable temp folder: the views are bound on their sources (slower to open)
        binding = None
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET parquet_metadata_cache = true")
        con.execute("SET enable_progress_bar = false")  # it would land in csv/json output
        _create_runs_view(con, root_path, only, runs_view)
        con.execute("CREATE TABLE _trackstore_views (kind VARCHAR, sources VARCHAR)")
        bad_kinds = {_kind_of(p) for p in bad}
        for kind in RECORD_KINDS:
            # no file yet, several schemas (runs from different versions), or one lacking a column
            union = len(parts.schemas[kind]) != 1 or any(
                {c for c, _t in sch} < set(_schema.SCHEMAS[kind].names) for sch in parts.schemas[kind])
            try:
                _create_kind_view(con, root_path, kind, good[kind], kind in bad_kinds, only, union,
                                  binding.name if binding else None)
            except duckdb.Error as exc:
                # sound framing but an unreadable footer: find the file, then skip it or fail
                culprits = find_unreadable(good[kind])
                if not culprits:
                    raise QueryError(f"cannot read the {kind} files of {root_path}: {clean_error(exc)} "
                                     "(run `trackstore doctor`)") from None
                for path, problem in culprits.items():
                    if on_corrupt == "error":
                        raise CorruptFileError(path, problem) from None
                    warn_skipped(path, problem, stacklevel=3)
                con.execute(f"DROP VIEW IF EXISTS _raw_{kind}")
                con.execute(f"DROP TABLE IF EXISTS _empty_{kind}")
                con.execute("DELETE FROM _trackstore_views WHERE kind = $kind", {"kind": kind})
                sound = [f for f in good[kind] if f not in culprits]
                _create_kind_view(con, root_path, kind, sound, True, only, True, binding.name if binding else None)
        _create_sync_state_view(con, root_path if sync_state else None, only)
        source = json.dumps(sorted(only)) if only is not None else None
        con.execute("CREATE TABLE _trackstore_source AS SELECT $root AS root, $only::VARCHAR AS only_runs",
                    {"root": str(root_path), "only": source})
        _create_helper_views(con)
        _bind_sources(con)
        if read_only:
            confine(con, root_path)
    except Exception:
        con.close()
        raise
    finally:
        if binding is not None:
            binding.cleanup()  # the views no longer refer to it (_bind_sources)
    return con


def confine(con, root: Path) -> None:
    """Lock ``con`` into reading only the files under ``root`` (see the module docstring).

    DuckDB always allows its temp folder too (``<cwd>/.tmp`` by default, where other programs'
    files may be); it is moved to a fresh, private folder that DuckDB creates only if a query
    spills to disk and removes when the connection closes, so it never holds anything but
    this connection's own spill files. Then external access is turned off, except for the
    store root, and the configuration is locked so no statement can undo it.
    """
    spill = Path(tempfile.gettempdir()) / f"trackstore-duckdb-{secrets.token_hex(8)}"
    con.execute(f"SET temp_directory = {sql_string(spill)}")
    con.execute(f"SET allowed_directories = [{sql_string(root)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _kind_of(path: str) -> str:
    parts = Path(path).parts
    if len(parts) >= 3 and parts[-2] == MANIFEST_DIR:
        return "artifacts"
    return parts[-2] if len(parts) >= 2 else ""


def sql_string(value: str | os.PathLike) -> str:
    """A SQL string literal (used only for paths in view definitions; user values are bound)."""
    return "'" + str(value).replace("'", "''") + "'"


def bound_values(rows: Sequence[Sequence[Any]], params: dict[str, Any], casts: Sequence[str | None] = ()) -> str:
    """The rows of a ``VALUES`` list, every value a bound parameter (``$v<row>_<column>``, added
    to ``params``; ``casts`` gives a column's SQL type where DuckDB cannot infer it): how a query
    joins its rows with what the caller knows per file or per run, user values never in its text."""
    out = []
    for i, row in enumerate(rows):
        cells = []
        for j, value in enumerate(row):
            name = f"v{i}_{j}"
            params[name] = value
            cast = casts[j] if j < len(casts) else None
            cells.append(f"${name}::{cast}" if cast else f"${name}")
        out.append(f"({', '.join(cells)})")
    return ", ".join(out)


def quote_ident(name: str) -> str:
    """A SQL identifier, quoted: any metric key can become a column name safely."""
    return '"' + str(name).replace('"', '""') + '"'


def _register(con, name: str, table) -> None:
    tmp = f"__arrow_{name}"
    con.register(tmp, table)
    try:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {tmp}")
    finally:
        con.unregister(tmp)


def _sources_variable(kind: str) -> str:
    """The DuckDB variable holding the files or globs of ``kind``'s view (see :func:`_raw_view_sql`)."""
    return f"_trackstore_sources_{kind}"


def _set_sources(con, kind: str, sources: list[str]) -> None:
    con.execute(f"SET VARIABLE {_sources_variable(kind)} = $sources::VARCHAR[]", {"sources": list(sources)})


def _raw_view_sql(kind: str, sources: list[str], union: bool) -> str:
    """The ``_raw_<kind>`` view over the files or globs in the variable :func:`_sources_variable`
    (``sources`` is what it holds: only whether it is empty matters here).

    The view reads its list from a variable, not from a literal, because DuckDB binds a view
    (and every view made on it) when it is created: with the globs in place, creating the
    views of a store of 10,000 runs expanded each glob over every run folder five times.
    :func:`connect` makes the views while the variable holds an empty file of the kind's columns
    (:func:`_binding_file`, never a part of the store, which a merge may swap away meanwhile),
    then puts the globs in: a query binds them again, so only the questions that read parts
    list them.

    ``union=False`` (every file has the current columns, the common case) reads the files
    directly by their column names, the cheapest plan DuckDB has for a query of one run (a
    curve: about 1 ms less than the general form). ``union=True`` is the general form: the
    files by name plus an empty table with every column, so runs of older schema versions
    read with NULLs and the view keeps its columns even when no file matches.
    """
    empty = f"_empty_{kind}"
    hive = "hive_partitioning = true, hive_types_autocast = false"  # project/run stay text: '007' is not 7
    listed = f"getvariable('{_sources_variable(kind)}')"
    if sources:
        if not union:
            columns = ", ".join(quote_ident(n) for n in _schema.SCHEMAS[kind].names)
            return (f"CREATE OR REPLACE VIEW _raw_{kind} AS SELECT project, run AS run_id, {columns} "
                    f"FROM read_parquet({listed}, {hive}, union_by_name = false)")
        body = (f"FROM {empty} UNION ALL BY NAME FROM read_parquet({listed}, {hive}, "
                "union_by_name = true, allow_empty = true)")
    else:
        body = f"FROM {empty}"
    # read_parquet of an empty glob yields a placeholder column named "empty": never ours
    return (f"CREATE OR REPLACE VIEW _raw_{kind} AS SELECT project, run AS run_id, "
            f"COLUMNS(lambda c: c NOT IN ('project', 'run', 'empty')) FROM ({body})")


def _bind_sources(con) -> None:
    """Put each record view's files or globs in its variable (the views were made on an empty file)."""
    for kind, sources in con.execute("SELECT kind, sources FROM _trackstore_views").fetchall():
        _set_sources(con, kind, json.loads(sources))


def _use_union_by_name(con) -> None:
    """Rebuild every record view with ``union_by_name`` (a part with another schema appeared)."""
    for kind, sources in con.execute("SELECT kind, sources FROM _trackstore_views").fetchall():
        con.execute(_raw_view_sql(kind, json.loads(sources), True))


def _binding_file(folder: str | None, kind: str) -> str | None:
    """An empty part of ``kind`` with every column, in a hive-style path of a private folder:
    what the views are bound on while they are made (:func:`_raw_view_sql`). Not a part of the
    store, which a merge may swap away meanwhile; :func:`connect` removes it once the views
    read their real sources. None when it cannot be written (no temp folder, a full disk)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if folder is None:
        return None
    path = Path(folder) / f"{PROJECT_PREFIX}_" / f"{RUN_PREFIX}_" / kind / f"empty{PART_SUFFIX}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_batches([], schema=_schema.SCHEMAS[kind]), path)
    except OSError:
        return None
    return str(path)


def _create_kind_view(con, root: Path, kind: str, files: list[str], has_bad: bool,
                      only: set[tuple[str, str]] | None, union: bool, binding: str | None) -> None:
    """``<kind>`` view: globs (live) when every file is sound, else the explicit list of sound files.

    ``union`` (several schemas among the files) reads with ``union_by_name``; otherwise files
    are bound by the first one's columns, much cheaper with thousands of parts.
    """
    import pyarrow as pa

    empty = f"_empty_{kind}"
    sch = _schema.SCHEMAS[kind]
    hive = [pa.field("project", pa.string()), pa.field("run", pa.string())]
    _register(con, empty, pa.Table.from_batches([], schema=pa.schema([*hive, *sch])))  # empty_table() imports pandas
    if only is None:
        globs = [f"{root}/{PROJECT_PREFIX}*/{RUN_PREFIX}*/{KIND_GLOB[kind]}"]
    else:
        globs = [f"{root}/{PROJECT_PREFIX}{p}/{RUN_PREFIX}{r}/{KIND_GLOB[kind]}" for p, r in sorted(only)]
    literal = str(root) + "".join(f"{p}{r}" for p, r in (only or ()))
    if has_bad or _GLOB_CHARS.search(literal):
        sources = sorted(files)  # skip damaged files, or names a glob would misread: list files instead
    else:
        sources = globs  # re-globbed at every query: parts flushed later are seen
    con.execute("INSERT INTO _trackstore_views VALUES ($kind, $sources)", {"kind": kind, "sources": json.dumps(sources)})
    # bound on an empty file of the kind's columns (or nothing) while the views are made, no
    # glob expanded; connect() then puts the sources in (_bind_sources). The general form over
    # files of several schemas binds on every file, as its queries do.
    bound_on = _binding_file(binding, kind) if files and not union else None
    _set_sources(con, kind, [bound_on] if bound_on else sources if files else [])
    con.execute(_raw_view_sql(kind, sources, union))
    if kind == Kind.SPANS:
        # A span may have an 'unfinished' checkpoint row and a final row: keep the final one
        # (else the latest checkpoint), per run and (trace_id, span_id).
        con.execute("CREATE VIEW spans AS SELECT * FROM _raw_spans QUALIFY row_number() OVER ("
                    "PARTITION BY project, run_id, trace_id, span_id "
                    "ORDER BY (status <> 'unfinished') DESC, seq DESC, writer DESC) = 1")
    elif kind == Kind.METRICS:  # last_of_key serves the latest view (trackstore.store.last_rows), not users
        con.execute(f"CREATE VIEW metrics AS SELECT * EXCLUDE ({LAST_OF_KEY}) FROM _raw_metrics")
    elif kind == Kind.ARTIFACTS:
        # Aliases move (trackstore.records.artifacts.alias_artifact): an alias belongs to the
        # version that was given it last, in replay order. artifacts has one row per file, with the
        # aliases its version holds now; the alias moves themselves are rows of event 'alias'.
        con.execute(f"CREATE VIEW artifact_aliases AS {alias_holders_sql('_raw_artifacts')}")
        con.execute(
            "CREATE VIEW artifacts AS SELECT f.* EXCLUDE (event) REPLACE (h.aliases AS aliases) "
            "FROM _raw_artifacts f LEFT JOIN (SELECT project, run_id, name, version, list(alias ORDER BY alias) "
            "AS aliases FROM artifact_aliases GROUP BY ALL) h ON f.project = h.project AND f.run_id = h.run_id "
            "AND f.name = h.name AND f.version = h.version WHERE f.event IS DISTINCT FROM 'alias'")
    else:
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM _raw_{kind}")


def alias_holders_sql(source: str) -> str:
    """The query of the ``artifact_aliases`` view over ``source`` (rows of the ``artifacts``
    kind with ``project`` and ``run_id``): each alias of each artifact belongs to the version
    that was given it last, in log order. gc asks the same question of one run's parts
    (:func:`aliased_versions`), so the rule lives here only. The order is sync's replay order
    (step, then log time and sequence number), so a target ends with the holders the view shows."""
    return ("SELECT project, run_id, name, alias, arg_max(version, o) AS version, arg_max(step, o) AS step, "
            f"max(ts) AS ts FROM (SELECT project, run_id, name, version, step, ts, unnest(aliases) AS alias, "
            f"{ALIAS_ORDER} AS o FROM {source} WHERE aliases IS NOT NULL) GROUP BY project, run_id, name, alias")


def aliased_versions(paths: RunPaths) -> dict[tuple[str, int], list[str]]:
    """``{(artifact, version): [aliases it holds now]}`` for one run, read from its manifest parts."""
    import duckdb

    parts = sorted(str(p) for p in paths.kind_dir(Kind.ARTIFACTS).glob(f"*{PART_SUFFIX}"))
    if not parts:
        return {}
    source = "(SELECT '' AS project, '' AS run_id, * FROM read_parquet($files, union_by_name = true))"
    con = duckdb.connect()
    try:
        rows = con.execute(f"SELECT name, version, list(alias ORDER BY alias) FROM ({alias_holders_sql(source)}) "
                           "GROUP BY name, version", {"files": parts}).fetchall()
    finally:
        con.close()
    return {(name, int(version)): list(aliases) for name, version, aliases in rows}


def _ts(value: str | None):
    if not value:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None


def runs_table(root: str | os.PathLike | None = None, only: set[tuple[str, str]] | None = None, *,
               fill: bool = True) -> pa.Table:
    """The ``runs`` view's rows as a pyarrow Table: the columns listings use, and ``_meta``, the
    usable fields of each run.json as JSON text (kept so by the catalog: not parsed here), from
    which the view takes ``config``, ``summary``, ``notes``, ``error`` and ``write_errors``.
    ``fill=False``: the same columns and no row (nothing is listed)."""

    from .listing import from_catalog, listed_rows

    # Every run, also one whose run.json is unreadable (shown with what its folder tells);
    # values of run.json that fail their check arrive as None (trackstore.store.meta.load_run_json).
    if not fill:
        infos = []
    elif only is None:  # the listing's rows, made from the catalog's rows of runs that did not change
        return _runs_arrow(listed_rows(root, unreadable=True, meta=True))
    else:  # only these runs: each resolved through the catalog, none listed
        from ..store.catalog import open_catalog

        catalog = open_catalog(resolve_root(root))
        try:
            infos = [i for key in sorted(only) if (i := from_catalog(catalog, *key, unreadable=True)) is not None]
        finally:
            catalog.save()
        infos.sort(key=lambda r: (r.created_at or "", r.run_id))
    if len(infos) > 1:
        for catalog in {id(i.catalog): i.catalog for i in infos if i.catalog is not None}.values():
            catalog.prefetch_meta()  # one query, not one per run
    rows = [{**info.view_row(light=True), "_meta": info.meta_json()} for info in infos]
    return _runs_arrow(rows)


def _runs_arrow(rows: list[dict]) -> pa.Table:
    """:func:`runs_table`'s Table from its rows (``view_row(light=True)`` and ``_meta``)."""
    import pyarrow as pa

    ts = _schema.TS_TYPE
    fields = [
        ("project", pa.string()), ("run_id", pa.string()), ("name", pa.string()), ("status", pa.string()),
        ("created_at", ts), ("ended_at", ts), ("updated_at", ts), ("last_step", pa.int64()),
        ("host", pa.string()), ("user", pa.string()), ("tags", pa.list_(pa.string())),
        ("group", pa.string()), ("job_type", pa.string()), ("exit_code", pa.int64()),
    ]
    cols = {name: column([r[name] for r in rows], typ) for name, typ in fields}  # pa.array would import pandas
    cols["_meta"] = column([r["_meta"] for r in rows], pa.string())
    return pa.table(cols)


# the runs view's columns, in order: what runs_table holds, and what the view takes from _meta
_RUNS_VIEW = (
    "SELECT project, run_id, name, status, created_at, ended_at, updated_at, last_step, host, \"user\", tags, "
    "json_extract_string(_meta, '$.notes') AS notes, \"group\", job_type, "
    "coalesce(nullif(json_extract(_meta, '$.config'), 'null'), '{}')::JSON AS config, "
    "coalesce(nullif(json_extract(_meta, '$.summary'), 'null'), '{}')::JSON AS summary, exit_code, "
    "json_extract_string(_meta, '$.error') AS error, json_extract_string(_meta, '$.write_errors') AS write_errors "
    "FROM _runs_data")


def _create_runs_view(con, root: Path, only: set[tuple[str, str]] | None, fill: bool = True) -> None:
    _register(con, "_runs_data", runs_table(root, only, fill=fill))
    con.execute(f"CREATE VIEW runs AS {_RUNS_VIEW}")


def _create_sync_state_view(con, root: Path | None, only: set[tuple[str, str]] | None = None) -> None:
    """``sync_state``: one row per (destination, run, kind), from one entry per cursor (the
    kinds' counts as lists, unnested by DuckDB: five times fewer Python objects); of the runs
    in ``only`` when given."""
    import pyarrow as pa

    cursors: list[dict] = []
    if root is not None:
        from ..store.ledger import sync_state_cursors

        cursors = sync_state_cursors(root, only)
    types = {"string": pa.string(), "int64": pa.int64(), "ts": _schema.TS_TYPE, "bool": pa.bool_()}
    arrays = {}
    counts = {"acked_rows": "acked", "pending_rows": "pending", "skipped_rows": "skipped"}
    for name, typ in SYNC_STATE_COLUMNS:
        if name == "kind":
            continue
        if name in counts:
            arrays[name] = column([[c[counts[name]].get(k, None if c.get("damaged") else 0) for k in RECORD_KINDS]
                                   for c in cursors],  # a damaged cursor's counts are unknown: NULL
                                  pa.list_(pa.int64()))
            continue
        vals = [c.get(name) for c in cursors]
        if typ == "ts":
            vals = [_ts(v) for v in vals]
        arrays[name] = column(vals, types[typ])  # pa.array would import pandas
    _register(con, "_sync_state_data", pa.table(arrays))
    kinds = "[" + ", ".join(sql_string(k) for k in RECORD_KINDS) + "]"
    select = ", ".join(f"unnest({kinds}) AS kind" if name == "kind" else f"unnest({name}) AS {name}"
                       if name in counts else quote_ident(name) for name, _typ in SYNC_STATE_COLUMNS)
    con.execute(f"CREATE VIEW sync_state AS SELECT {select} FROM _sync_state_data")


# Log order of a metric row: its time, then its writer's sequence number, so two values logged
# within one microsecond still have an order. One HUGEINT keeps arg_max a single fast pass.
LOG_ORDER = "((epoch_us(ts)::HUGEINT << 64) + seq)"
# The order alias moves take effect in (alias_holders_sql): sync's replay order, step first.
# (A row compares field by field; a NULL step, of rows older than steps on artifacts, comes first.)
ALIAS_ORDER = "row(coalesce(step, -9223372036854775808), epoch_us(ts), seq)"


def _create_helper_views(con) -> None:
    # latest: the most recently logged value of each key (like wandb's summary), with its step.
    # Only rows marked last of their key in their file can be it (NULL: a part from before the
    # mark, read in full); DuckDB skips every other row group by its statistics.
    con.execute(
        f"CREATE VIEW latest AS SELECT project, run_id, key, arg_max(step, {LOG_ORDER}) AS step, "
        f"arg_max(value, {LOG_ORDER}) AS value, max(ts) AS ts FROM _raw_metrics "
        f"WHERE {LAST_OF_KEY} IS NOT FALSE GROUP BY project, run_id, key")
    con.execute(
        "CREATE VIEW metric_summary AS SELECT project, run_id, key, count(*) AS points, "
        f"min(step) AS first_step, max(step) AS last_step, arg_min(value, {LOG_ORDER}) AS first, "
        f"arg_max(value, {LOG_ORDER}) AS last, min(value) FILTER (WHERE NOT isnan(value)) AS min, "
        "max(value) FILTER (WHERE NOT isnan(value)) AS max, "
        "avg(value) FILTER (WHERE isfinite(value)) AS mean, max(ts) AS last_ts "
        "FROM metrics GROUP BY project, run_id, key")


# ---------------------------------------------------------------------- executing
def run_sql(con, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> pa.Table:
    """Run one read-only statement on a :func:`connect` connection; the result as a pyarrow Table.

    Errors (syntax, unknown column, a damaged file met while reading) are :class:`QueryError`
    (or :class:`CorruptFileError` naming the file), never a raw DuckDB traceback.
    """
    import duckdb

    check_read_only(sql)
    values = None if not params else (dict(params) if isinstance(params, Mapping) else list(params))
    try:
        for attempt in range(_RETRIES + 1):
            try:
                return _fetch(con, sql, values)
            except duckdb.Error as exc:
                if attempt == _RETRIES:
                    raise
                if _needs_general_views(exc):
                    # a part with another schema was flushed after connect, or every file of a
                    # view's globs is gone (a run deleted meanwhile): the general form reads both
                    _use_union_by_name(con)
                elif _VANISHED not in str(exc):
                    raise
                else:  # a file the glob listed was gone when opened (a compaction swapped its
                    time.sleep(0.002 * 2 ** attempt)  # folder, gc removed the run): glob again
        raise AssertionError("unreachable")  # pragma: no cover
    except duckdb.Error as exc:
        if _VANISHED in str(exc):
            raise QueryError(f"the store's files kept changing while being read (a compaction or gc is "
                             f"running?); try again ({clean_error(exc).splitlines()[0]})") from None
        err = _translate(exc)
        if not isinstance(err, CorruptFileError) and type(exc).__name__ in _DATA_ERRORS:
            culprit = _locate_damage(con, sql)
            if culprit:
                raise CorruptFileError(culprit[0], f"{culprit[1]} (query failed with: {clean_error(exc)})") from None
        raise err from None


_VANISHED = "No such file or directory"
_RETRIES = 6


def _needs_general_views(exc: BaseException) -> bool:
    msg = str(exc)
    return "schema mismatch" in msg or "No files found that match the pattern" in msg


# DuckDB error types that may come from a damaged file rather than from the query itself
_DATA_ERRORS = ("Error", "IOException", "InternalException", "SerializationException", "InvalidInputException")


def _locate_damage(con, sql: str) -> tuple[str, str] | None:
    """After a data error: the first part file (of the kinds ``sql`` mentions) DuckDB cannot read."""
    import duckdb

    try:
        root, only_json = con.execute("SELECT root, only_runs FROM _trackstore_source").fetchone()
    except duckdb.Error:
        return None
    only = None if only_json is None else {tuple(x) for x in json.loads(only_json)}
    text = sql.lower()
    kinds: list[str] = [k for k in RECORD_KINDS if k in text]
    if "latest" in text or "metric_summary" in text:
        kinds.append(Kind.METRICS)
    good = scan_parts(root, only).files
    probe = duckdb.connect(":memory:")
    try:
        for kind in kinds or RECORD_KINDS:
            for path in good[kind]:
                try:
                    probe.execute("SELECT * FROM read_parquet(?)", [path]).fetchall()
                except duckdb.Error as exc:
                    return path, f"damaged data pages: {clean_error(exc).splitlines()[0]}"
    finally:
        probe.close()
    return None


_GLOB_CHARS = re.compile(r"[*?\[\]{}]")
def _fetch(con, sql: str, values) -> pa.Table:
    rel = con.sql(sql, params=values) if values else con.sql(sql)
    if rel is None:  # statements that return nothing
        import pyarrow as pa

        return pa.table({})
    return rel.to_arrow_table()


_PATH_IN_ERROR = re.compile(r"""["']?(/[^"'\s]*?\.parquet)["']?""")


def _translate(exc: BaseException) -> Exception:
    msg = clean_error(exc)
    if type(exc).__name__ == "PermissionException":  # the sandbox said no (see confine)
        what = msg.splitlines()[0].removeprefix("Permission Error: ").split(" - file system")[0]
        return QueryError(f"refused: {what}: trackstore SQL reads only the files under the store root")
    m = _PATH_IN_ERROR.search(msg)
    if m and type(exc).__name__ in ("IOException", "InvalidInputException", "InternalException",
                                    "SerializationException", "ConversionException"):
        return CorruptFileError(m.group(1), msg.splitlines()[0])
    return QueryError(f"SQL error: {msg}")


def query(sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None,
          root: str | os.PathLike | None = None, *, on_corrupt: str = "warn") -> pa.Table:
    """Run one read-only SQL query over the store and return a pyarrow Table.

    ``params`` binds ``$name`` (a mapping) or ``?`` (a sequence) placeholders. For pandas or
    polars: ``query(...).to_pandas()``, ``polars.from_arrow(query(...))``, or keep a
    connection and use DuckDB's own ``connect().sql(q, params=...).df()`` / ``.pl()``.
    """
    con = connect(root, on_corrupt=on_corrupt, sync_state=mentions_sync_state(sql))
    try:
        return run_sql(con, sql, params)
    finally:
        con.close()


# ---------------------------------------------------------------------- wide tables
def wide(run_id: str, keys: Iterable[str] | None = None, root: str | os.PathLike | None = None, *,
         con=None) -> pa.Table:
    """One run's metrics as a wide table: a ``step`` column plus one column per key.

    ``keys`` limits and orders the columns (default: every key of the run, sorted). When a key
    was logged more than once at a step, the most recent value wins. Keys are quoted as
    identifiers and bound as values, so any key name is safe.
    """
    own = con is None
    if own:
        con = connect(root, sync_state=False)
    try:
        if keys is None:
            keys = [r[0] for r in con.execute(
                "SELECT DISTINCT key FROM metrics WHERE run_id = $run ORDER BY key", {"run": run_id}).fetchall()]
        keys = list(keys)
        params: dict[str, Any] = {"run": run_id}
        cols = []
        for i, k in enumerate(keys):
            params[f"k{i}"] = k
            cols.append(f"arg_max(value, {LOG_ORDER}) FILTER (WHERE key = $k{i}) AS {quote_ident(k)}")
        select = ", ".join(["step", *cols])
        sql = f"SELECT {select} FROM metrics WHERE run_id = $run GROUP BY step ORDER BY step"
        return run_sql(con, sql, params)
    finally:
        if own:
            con.close()
