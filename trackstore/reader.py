"""Reading one run's records back in replay order, with pyarrow only (no DuckDB needed).

This is "the core's reader" that sync replays from: all complete part files of a kind (never
temp files), concatenated with schema evolution (columns added by newer versions are filled
with nulls for older files; files from a *newer* format version are refused), optionally
minus the rows a sync cursor already acknowledged, sorted in canonical replay order:
``(step, writer, seq)`` — log order within a step, steps ascending, so a late-logged
evaluation is put back where it belongs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from .errors import CorruptFileError, StoreError
from .layout import RunPaths
from .ranges import RangeSet

_RELIST_ATTEMPTS = 8
T = TypeVar("T")
_THREADED_ROWS = 262_144


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
        raise  # a vanished file is not a damaged one: the caller lists again (see read_kind)
    except Exception as exc:
        raise CorruptFileError(str(path), str(exc)) from exc


def _conform(table, kind: str, columns: Sequence[str] | None):
    """Give a table the current schema of ``kind`` (missing nullable columns become nulls)."""
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
              columns: Sequence[str] | None = None, skip_corrupt: bool = False):
    """All stored rows of one kind for one run, minus ``exclude``, in replay order.

    ``skip_corrupt=True`` leaves out unreadable part files instead of raising (the caller
    should report them; ``trackstore doctor`` quarantines them).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from . import schema

    need = None
    if columns is not None:
        need = list(dict.fromkeys([*columns, "writer", "seq"] + (["step"] if "step" in schema.ROWS[kind].names else [])))

    def damaged(_path, exc):
        if not skip_corrupt:
            raise exc

    tables = each_part(paths, kind, lambda part: _conform(read_part(part, kind, need), kind, need), damaged)
    if not tables:
        names = need or schema.ROWS[kind].names
        return pa.Table.from_pylist([], schema=pa.schema([schema.ROWS[kind].field(n) for n in names]))
    table = pa.concat_tables(tables)
    if exclude:
        table = table.filter(pc.invert(exclude.mask(table)))
    keys = [("step", "ascending")] if "step" in table.column_names else []
    keys += [("writer", "ascending"), ("seq", "ascending")]
    return table.sort_by(keys)
