"""Reading one run's records back in replay order, with pyarrow only (no DuckDB needed).

This is "the core's reader" that sync replays from: all complete part files of a kind (never
temp files), concatenated with schema evolution (columns added by newer versions are filled
with nulls for older files; files from a *newer* format version are refused), optionally
minus the rows a sync cursor already acknowledged, sorted in canonical replay order:
``(step, writer, seq)`` — log order within a step, steps ascending, so a late-logged
evaluation is put back where it belongs.

A part that cannot be read as rows of its kind (truncated, no footer, no read permission, a
required column missing or of a type that cannot be converted) is a :class:`CorruptFileError`
naming the file. Each caller decides what that means: queries may leave it out with a warning,
while sync must never: :func:`read_kind` can hand the damaged parts back (``damaged=``), and
:func:`part_row_ids` says which ``(writer, seq)`` rows such a part holds, as far as its
columns or its name still tell.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from ..errors import CorruptFileError, StoreError
from ..store.layout import PART_SUFFIX, RunPaths
from ..store.ranges import RangeSet

_RELIST_ATTEMPTS = 8
T = TypeVar("T")
_THREADED_ROWS = 262_144
# part-<writer>-<first seq>[-<last seq>].parquet: as flushed (layout.part_file_name) or merged
# (compact.merged_part_name)
_PART_NAME = re.compile(r"^part-(?P<writer>.+?)-(?P<first>\d{12})(?:-(?P<last>\d{12}))?" + re.escape(PART_SUFFIX) + "$")


def read_part(path, kind: str, columns: Sequence[str] | None = None):
    """Read one part file, checking its format version. Raises CorruptFileError naming the file."""
    import pyarrow.parquet as pq

    from ..store import schema

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
        raise  # a vanished file is not a damaged one: the caller lists again (see read_kind)
    except Exception as exc:
        raise CorruptFileError(str(path), str(exc)) from exc


def _conform(table, kind: str, columns: Sequence[str] | None):
    """Give a table the current schema of ``kind`` (missing nullable columns become nulls)."""
    import pyarrow as pa

    from ..store import schema

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
            out = _conform(table, kind, columns)
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
    from ..store import schema

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
    """Whether :func:`_conform`'s cast turns ``have`` into ``want`` without reinterpreting values."""
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
    old and new files).
    """
    for attempt in range(_RELIST_ATTEMPTS):
        out = []
        try:
            for part in paths.parts(kind):
                try:
                    out.append(read(part))
                except CorruptFileError as exc:
                    damaged(part, exc)
            return out
        except FileNotFoundError:
            if attempt == _RELIST_ATTEMPTS - 1:
                raise StoreError(f"the {kind} files of {paths.dir} kept changing while being read; try again") from None
            time.sleep(0.002 * 2 ** attempt)  # a swap is over in microseconds; back off anyway
    return []  # pragma: no cover (the loop returns or raises)


def read_kind(paths: RunPaths, kind: str, *, exclude: RangeSet | None = None,
              columns: Sequence[str] | None = None, skip_corrupt: bool = False,
              damaged: dict[Path, CorruptFileError] | None = None):
    """All stored rows of one kind for one run, minus ``exclude``, in replay order.

    A part that cannot be read (:func:`read_rows`) raises :class:`CorruptFileError`, unless
    ``damaged`` is given: then it is left out and recorded there (path -> error) for the caller
    to act on, as sync does. ``skip_corrupt=True`` leaves it out without a word (the caller
    should report it; ``trackstore doctor`` quarantines it).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..store import schema

    need = None
    if columns is not None:
        need = list(dict.fromkeys([*columns, "writer", "seq"] + (["step"] if "step" in schema.ROWS[kind].names else [])))

    def on_damaged(path, exc):
        if damaged is not None:
            damaged[path] = exc  # by path: a listing taken again after a swap records it once
        elif not skip_corrupt:
            raise exc

    tables = each_part(paths, kind, lambda part: read_rows(part, kind, need), on_damaged)
    if not tables:
        names = need or schema.ROWS[kind].names
        return pa.Table.from_pylist([], schema=pa.schema([schema.ROWS[kind].field(n) for n in names]))
    table = pa.concat_tables(tables)
    if exclude:
        table = table.filter(pc.invert(exclude.mask(table)))
    keys = [("step", "ascending")] if "step" in table.column_names else []
    keys += [("writer", "ascending"), ("seq", "ascending")]
    return table.sort_by(keys)


def parse_part_name(name: str) -> tuple[str, int, int | None] | None:
    """``(writer, first_seq, last_seq)`` from a part file name; ``last_seq`` is None for a part
    as flushed (its name says only where it starts); None for a name of another form."""
    m = _PART_NAME.match(name)
    if m is None:
        return None
    last = m.group("last")
    return m.group("writer"), int(m.group("first")), None if last is None else int(last)


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
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(part, columns=["writer", "seq"])
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
