"""Part files, one at a time: the one place that writes, reads, conforms and checks them.

A part file is one Parquet file of rows of one record kind (:mod:`trackstore.store.schema`),
named by its writer and seqs (:func:`trackstore.store.layout.part_file_name`). The promises:

* :func:`write_part` makes a part visible only complete (temp -> fsync -> rename), with the
  format version in its metadata; metrics parts mark each key's last row
  (:mod:`trackstore.store.last_rows`), and a merged metrics part is clustered by key.
* :func:`read_part` refuses a part from a newer format version; :func:`read_rows` gives rows in
  the current schema of their kind (columns added later read as nulls) or raises
  :class:`~trackstore.errors.CorruptFileError` naming the file, never something obscure.
* :func:`check_part` (framing), :func:`find_unreadable` (footer) and :func:`schema_problem`
  (columns) say what is wrong with a part without reading its rows.
* :func:`each_part` reads every part of one kind of a run consistently while a merge may swap
  the folder (the relist policy of :func:`trackstore.store.layout.relist`).
* :func:`part_row_ids` says which ``(writer, seq)`` rows a part holds even when it is damaged.

pyarrow is imported only inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from ..errors import CorruptFileError, StoreError
from .layout import RunPaths, parse_part_name, relist
from .metric_facts import FACTS_KEY, encode, metric_values
from .ranges import RangeSet
from .vocab import Kind

T = TypeVar("T")
_THREADED_ROWS = 262_144


# ---------------------------------------------------------------------------- writing
def write_part(path, table, kind: str, *, by_key: bool = False) -> None:
    """Write one Arrow table as a Parquet part, atomically (temp -> fsync -> rename).

    ``by_key=True`` (metrics only; compaction uses it) writes a *key-clustered* part: rows
    sorted by key (then step and seq), key statistics kept, and row groups small enough that a
    question about one key (a curve, a window mean) reads only the few row groups holding it.
    A writer's own flushes stay in log order: sorting and string statistics would cost the
    training loop's flush more than they save a part that holds a few seconds of points.
    """
    from .atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, part_encoder(table, kind, by_key=by_key))


def part_bytes(table, kind: str, *, by_key: bool = False) -> bytes:
    """The bytes :func:`write_part` would write, made in memory (a part bound elsewhere than
    this filesystem: the team store's replica)."""
    import io

    sink = io.BytesIO()
    part_encoder(table, kind, by_key=by_key)(sink)
    return sink.getvalue()


def part_encoder(table, kind: str, *, by_key: bool = False) -> Callable[[Any], None]:
    """A function writing ``table`` as a part of ``kind`` into a binary file object: the one
    encoding of every part (:func:`write_part`, :func:`part_bytes`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import schema

    tail = 0
    row_group = 1 << 20
    if kind == Kind.METRICS:
        from .last_rows import mark_last_rows

        if by_key:
            table = sort_by_key(table)
        table, tail = mark_last_rows(table)
        target = schema.with_metadata(schema.METRICS_FILE, Kind.METRICS)
        try:  # the writer's tables have the file's types already: no cast (and no pyarrow.compute import)
            table = pa.Table.from_arrays(table.columns, schema=target)
        except (TypeError, ValueError, pa.ArrowInvalid):
            table = table.cast(target)
        if by_key:
            row_group = key_row_group_rows(table.num_rows - tail)
        # what alerts need of these rows (non-finite values, log times), in the footer: the
        # catalog then reads the footer, not every value, of each new part
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), FACTS_KEY: encode(metric_values(table))})
    encodings = {k: v for k, v in schema.ENCODINGS.get(kind, {}).items() if k in table.schema.names}
    dictionary = [n for n in table.schema.names if n not in encodings]
    # Min/max statistics for numbers and times (step, seq, ts, value...): they let readers
    # skip files and resume find the last step from footers. Statistics of string columns cost
    # more than half of the write time and prune nothing (every part holds every key), except
    # in a key-clustered part, where the key's min/max is what lets a reader skip row groups,
    # and ``writer``'s (one value in nearly every part: 4 ms a million rows), which say whose
    # rows a part holds without reading them (trackstore.read.reader.whole_part_ids).
    stats = [f.name for f in table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
             or pa.types.is_timestamp(f.type) or pa.types.is_boolean(f.type) or (by_key and f.name == "key")
             or f.name == "writer"]

    compression = codecs(kind, table.schema, table.num_rows)

    def _write(f):
        with pq.ParquetWriter(f, table.schema, compression=compression, use_dictionary=dictionary,
                              column_encoding=encodings or None, write_statistics=stats) as out:
            if tail:  # the last row of each key in a row group of its own (trackstore.store.last_rows)
                out.write_table(table.slice(0, table.num_rows - tail), row_group_size=row_group)
                out.write_table(table.slice(table.num_rows - tail), row_group_size=1 << 20)
            else:
                out.write_table(table, row_group_size=row_group)

    return _write


# A part of fewer rows than this is a small one (a writer's flush of a few seconds, a live
# run's batch in the team store): its columns are snappy, its free text zstd (see codecs).
SMALL_PART_ROWS = 16_384


def codecs(kind: str, schema, rows: int):
    """The Parquet compression of a part of ``rows`` rows whose Arrow schema is ``schema``:
    ``"zstd"`` for a big part, and for a small one snappy for every column but free text
    (:data:`trackstore.store.schema.TEXT_COLUMNS`), which stays zstd.

    In a small part the encodings (dictionary, delta, byte-stream-split) have already done the
    shrinking and zstd's setup for each column chunk is most of the cost: a live run's 400-row
    metrics flush is 6.7 KB either way, but costs 1.8 ms to write and 0.54 ms to read with zstd
    against 1.1 and 0.20 ms with snappy (docs/performance.md, "Codecs"). Text is where zstd
    earns its cost (1.2-1.5x smaller than snappy), and a big part, the long-lived form a
    compaction makes, is 5-7% smaller in zstd.

    The codecs are given per Parquet leaf column (a list column's values are ``name.list.element``):
    a column the writer is not told of is left uncompressed."""
    from .schema import TEXT_COLUMNS

    if rows >= SMALL_PART_ROWS:
        return "zstd"
    text = TEXT_COLUMNS.get(kind, ())
    return {path: "zstd" if field.name in text else "snappy"
            for field in schema for path in _leaf_paths(field.name, field.type)}


@functools.lru_cache(maxsize=256)
def _leaf_paths(name: str, arrow_type) -> tuple[str, ...]:
    """The Parquet column paths a field of this name and Arrow type is written as: its name for a
    flat type; for a nested one, what pyarrow makes of it (``name.list.element``), learnt once
    per type by writing an empty table of that one field."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    if not pa.types.is_nested(arrow_type):
        return (name,)
    sink = io.BytesIO()
    # (Schema.empty_table imports pandas: see trackstore.read.reader._no_rows)
    pq.write_table(pa.Table.from_batches([], schema=pa.schema([pa.field(name, arrow_type)])), sink)
    md = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    return tuple(md.schema.column(i).path for i in range(md.num_columns))


# A key-clustered part is cut into about this many row groups (within the bounds below): enough
# that a curve of one key reads a small share of the run, few enough that questions touching
# every file cost little more than with one row group (DuckDB spends ~10 us per row group even
# when it skips it: `latest` over 500 runs of 100k points took 29 ms with 7 row groups per
# file, 22 with 2 and 35 with 13; the curve 2.0 ms, 3.4 and 1.7).
KEY_ROW_GROUPS = 16
_MIN_KEY_ROW_GROUP, _MAX_KEY_ROW_GROUP = 16384, 1 << 20


def key_row_group_rows(rows: int) -> int:
    """Rows per row group of a key-clustered part of ``rows`` rows."""
    return max(_MIN_KEY_ROW_GROUP, min(_MAX_KEY_ROW_GROUP, -(-rows // KEY_ROW_GROUPS)))


def sort_by_key(table):
    """Metrics rows sorted by key (in string order, which row group statistics compare), step, seq.

    Sorting dictionary codes ranked by their string, not the strings, keeps this a fast
    integer sort on tens of millions of rows.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from .arrays import from_numpy, to_numpy

    if table.num_rows < 2:
        return table
    key = table.column("key")
    if pa.types.is_dictionary(key.type):
        key = key.cast(pa.string())
    encoded = pc.dictionary_encode(key.combine_chunks())
    words = encoded.dictionary.to_pylist()
    rank = np.empty(len(words), dtype=np.int64)
    rank[sorted(range(len(words)), key=words.__getitem__)] = np.arange(len(words))
    codes = rank[to_numpy(encoded.indices, np.int32 if encoded.indices.type == pa.int32() else np.int64)]
    step = to_numpy(table.column("step").combine_chunks(), np.int64)
    seq = to_numpy(table.column("seq").combine_chunks(), np.int64)
    order = np.lexsort((seq, step, codes))
    return table.take(from_numpy(order.astype(np.int64), pa.int64()))


# ---------------------------------------------------------------------------- reading
def read_columns(path, columns: Sequence[str]):
    """Some columns of one Parquet file as a pyarrow Table (errors as pyarrow raises them).
    ``pq.read_table`` would do the same through pyarrow's dataset module, whose import imports
    pandas when it is installed (0.2-0.3 s of a command that reads row ids)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as pf:
        return pf.read(columns=list(columns), use_threads=pf.metadata.num_rows > _THREADED_ROWS)


def read_part(path, kind: str, columns: Sequence[str] | None = None):
    """Read one part file, checking its format version. Raises CorruptFileError naming the file."""
    import pyarrow.parquet as pq

    from . import schema

    try:
        pf = pq.ParquetFile(path)
        version = schema.file_version(pf.schema_arrow.metadata)
        if version is not None and version > schema.SCHEMA_VERSION:
            raise StoreError(
                f"{path} was written by a newer trackstore (format version {version}, this one reads "
                f"up to {schema.SCHEMA_VERSION}); upgrade trackstore to read it"
            )
        cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
        # threads pay off on big files only: on a few-second flush they double the read's cost
        return pf.read(columns=cols, use_threads=pf.metadata.num_rows > _THREADED_ROWS)
    except (StoreError, CorruptFileError, FileNotFoundError):
        raise  # a vanished file is not a damaged one: the caller lists again (see each_part)
    except Exception as exc:
        raise CorruptFileError(str(path), str(exc)) from exc


def conform(table, kind: str, columns: Sequence[str] | None = None):
    """Give a table the current schema of ``kind`` (missing nullable columns become nulls).

    ``columns`` picks and orders the columns (default: every column of the kind)."""
    import pyarrow as pa

    from . import schema

    target = schema.ROWS[kind]
    names = list(columns) if columns is not None else target.names
    arrays = []
    for name in names:
        field = target.field(name)
        if name in table.column_names:
            col = table.column(name)
            arrays.append(col if col.type == field.type else col.cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema([target.field(n) for n in names]))


def read_rows(part, kind: str, columns: Sequence[str] | None = None):
    """One part's rows in the current schema of ``kind`` (:func:`read_part`, then conformed).

    Raises :class:`CorruptFileError` naming the file when it is unreadable, or when it does not
    hold rows of ``kind`` (:func:`schema_problem`, or a required column holding nulls).
    """
    table = read_part(part, kind, columns)
    problem = schema_problem(table.schema, kind, columns)
    if problem is None:
        try:
            out = conform(table, kind, columns)
        except Exception as exc:  # a value the cast cannot convert (pyarrow's ArrowInvalid...)
            problem = str(exc).splitlines()[0]
        else:
            nulls = [f.name for f in out.schema if not f.nullable and out.column(f.name).null_count]
            if not nulls:
                return out
            problem = f"required column(s) {', '.join(nulls)} hold nulls"
    raise CorruptFileError(str(part), f"not a {kind} part: {problem}")


def schema_problem(file_schema, kind: str, columns: Sequence[str] | None = None) -> str | None:
    """Why a part whose (footer) schema is ``file_schema`` cannot hold rows of ``kind``; None if it can.

    Cheap, from the schema alone: a required column of ``kind`` (of ``columns``, when given)
    is missing, or a column has a type of another family than the schema's (a string where
    numbers belong). Newer nullable columns may be missing; extra columns are ignored.
    """
    from . import schema

    target = schema.ROWS[kind]
    wanted = target.names if columns is None else [c for c in columns if c in target.names]
    missing = [n for n in wanted if not target.field(n).nullable and n not in file_schema.names]
    if missing:
        return f"required column(s) {', '.join(missing)} missing"
    for name in wanted:
        if name in file_schema.names and not _same_family(file_schema.field(name).type, target.field(name).type):
            return f"column {name} is {file_schema.field(name).type}, not {target.field(name).type}"
    return None


def _same_family(have, want) -> bool:
    """Whether :func:`conform`'s cast turns ``have`` into ``want`` without reinterpreting values."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(have):
        have = have.value_type
    if have == want:
        return True
    families = [
        (t.is_floating, lambda x: t.is_floating(x) or t.is_integer(x)),
        (t.is_integer, t.is_integer),
        (t.is_string, lambda x: t.is_string(x) or t.is_large_string(x)),
        (t.is_timestamp, t.is_timestamp),
        (t.is_boolean, t.is_boolean),
        (t.is_list, lambda x: t.is_list(x) or t.is_large_list(x)),
    ]
    return any(is_want(want) and accepts(have) for is_want, accepts in families)


def each_part(paths: RunPaths, kind: str, read: Callable[[Path], T],
              damaged: Callable[[Path, CorruptFileError], None]) -> list[T]:
    """``read(part)`` for every complete part file of one kind of a run, in name order.

    A part ``read`` finds damaged (it raises :class:`CorruptFileError`) goes to
    ``damaged(part, error)``, which raises to stop or returns to skip it. A part that vanished
    between the listing and the read means a compaction swapped the kind folder meanwhile:
    the same rows are now in other files, so the whole listing is taken again (never a mix of
    old and new files), as :func:`trackstore.store.layout.relist` says; a folder that keeps
    changing through every attempt is a :class:`StoreError` ("try again").
    """
    skip = object()

    def one(part: Path):
        try:
            return read(part)
        except CorruptFileError as exc:
            damaged(part, exc)
            return skip

    found, vanished = relist(paths.kind_dir(kind), one)
    if vanished:
        raise StoreError(f"the {kind} files of {paths.dir} kept changing while being read; try again")
    return [x for x in found if x is not skip]


def part_row_ids(part: Path, siblings: Sequence[Path] = ()) -> RangeSet | None:
    """Which ``(writer, seq)`` rows a part holds, even when it cannot be read as a whole.

    From its ``writer`` and ``seq`` columns when those still read; else from its name: a
    merged part names its first and last seq, a flushed part its first, and it ends where its
    footer's row count says, or before the next part of the same writer (``siblings``, the
    other parts of its kind: seqs are dense per writer). None when nothing tells.
    """
    ids = _ids_from_columns(part)
    if ids is not None:
        return ids
    parsed = parse_part_name(Path(part).name)
    if parsed is None:
        return None
    writer, first, last = parsed
    if last is None:
        last = _last_seq_from_footer(part, first)
    if last is None:
        last = _last_seq_before_next(writer, first, siblings)
    return None if last is None else RangeSet({writer: [[first, last]]})


def _ids_from_columns(part: Path) -> RangeSet | None:
    import pyarrow as pa

    try:
        t = read_columns(part, ["writer", "seq"])
    except Exception:
        return None
    writer_type = t.schema.field("writer").type
    if pa.types.is_dictionary(writer_type):
        writer_type = writer_type.value_type
    if not (pa.types.is_string(writer_type) or pa.types.is_large_string(writer_type)) \
            or not pa.types.is_integer(t.schema.field("seq").type):
        return None
    if t.column("writer").null_count or t.column("seq").null_count:
        return None
    ids = RangeSet()
    ids.add_table(t)
    return ids


def _last_seq_from_footer(part: Path, first: int) -> int | None:
    import pyarrow.parquet as pq

    try:
        n = pq.ParquetFile(part).metadata.num_rows
    except Exception:
        return None
    return first + n - 1 if n else None


def _last_seq_before_next(writer: str, first: int, siblings: Sequence[Path]) -> int | None:
    later = [p[1] for p in map(parse_part_name, (Path(s).name for s in siblings))
             if p is not None and p[0] == writer and p[1] > first]
    return min(later) - 1 if later else None


# ---------------------------------------------------------------------------- checking
_frame_cache: dict[tuple[str, int, int], str | None] = {}


def check_part(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not a complete Parquet file, or None when its framing is sound.

    Cheap (two small reads): magic bytes at both ends and a footer length that fits the file.
    That catches truncation, garbage and half-copied files; damage inside data pages is caught
    when DuckDB reads them. Results are cached by (path, size, mtime).
    """
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    key = (p, st.st_size, st.st_mtime_ns)
    if key in _frame_cache:
        return _frame_cache[key]
    problem: str | None = None
    try:
        with open(p, "rb") as f:
            if st.st_size < 12:
                problem = f"too small to be a Parquet file ({st.st_size} bytes)"
            else:
                head = f.read(4)
                f.seek(-8, os.SEEK_END)
                tail = f.read(8)
                footer_len = int.from_bytes(tail[:4], "little")
                if head != b"PAR1":
                    problem = "not a Parquet file (bad magic bytes at the start)"
                elif tail[4:] != b"PAR1":
                    problem = "truncated or incomplete (no Parquet footer at the end)"
                elif footer_len <= 0 or footer_len > st.st_size - 12:
                    problem = f"footer length {footer_len} does not fit a {st.st_size}-byte file"
    except OSError as exc:
        problem = f"cannot read: {exc.strerror or exc}"
    if len(_frame_cache) > 200_000:
        _frame_cache.clear()
    _frame_cache[key] = problem
    return problem


def find_unreadable(paths: Iterable[str]) -> dict[str, str]:
    """The files among ``paths`` whose Parquet footer pyarrow cannot parse (the slow, exact check)."""
    import pyarrow.parquet as pq

    out = {}
    for p in paths:
        try:
            pq.read_metadata(p)
        except Exception as exc:
            out[p] = f"unreadable Parquet footer ({exc})"
    return out


_schema_cache: dict[tuple[str, int, int], tuple] = {}


def part_schema(path: str) -> tuple:
    """``((column, type), ...)`` of a part file, from its footer (cached by path, size and mtime).

    Raises when the footer cannot be parsed. Knowing every file's columns lets the views skip
    DuckDB's ``union_by_name`` (which re-reads every footer at every query) when all files of a
    kind share one schema, the common case.
    """
    import pyarrow.parquet as pq

    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    found = _schema_cache.get(key)
    if found is None:
        found = tuple((f.name, str(f.type)) for f in pq.read_schema(path))
        if len(_schema_cache) > 200_000:
            _schema_cache.clear()
        _schema_cache[key] = found
    return found
