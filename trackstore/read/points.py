"""One run's metric points of a few keys, read straight from its part files (what curves need).

A curve is a question about one run and a handful of keys: SQL across the store is not needed,
and DuckDB's fixed cost per query (planning and optimising the views, about 1.5-2 ms here) would
be most of the answer's time. This module reads the run's metrics parts with pyarrow and uses
what the format offers to read little:

* A **key-clustered** part (written by compaction, which every run gets at finish) keeps each
  row group's key min/max: row groups that cannot hold a wanted key are not read at all.
* A part as flushed holds every key in log order: it is read whole (a few seconds of points),
  and rows are chosen through its key dictionary, never by comparing strings per row.

It follows the views' rules: complete part files only (never temp files), a damaged file is
skipped with a :class:`~trackstore.read.part_scan.SkippedFileWarning` naming it (or raises
:class:`~trackstore.errors.CorruptFileError` with ``on_corrupt="error"``), and a listing that a
compaction swaps away mid-read is taken again, so no row is missed or read twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from ..errors import CorruptFileError
from ..store import schema as _schema
from ..store.last_rows import COLUMN as LAST_OF_KEY
from ..store.layout import RunPaths
from ..store.vocab import Kind

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

COLUMNS = ("key", "step", "value", "ts", "writer", "seq")  # the metric columns read here (key: the dict key)


def read_points(paths: RunPaths, keys: Iterable[str], columns: Sequence[str] = ("step", "value"), *,
                on_corrupt: str = "warn") -> dict[str, pa.Table]:
    """``{key: rows}`` for each of ``keys`` the run has: its metric rows with ``columns`` (any
    of step, value, ts, writer, seq), in no particular order. Fewer columns read faster."""
    import pyarrow as pa

    wanted = sorted(set(keys))
    unknown = [c for c in columns if c not in COLUMNS or c == "key"]
    if unknown:
        raise ValueError(f"unknown metric columns {unknown}; choose from {', '.join(COLUMNS[1:])}")
    rows = _schema.METRIC_POINTS
    schema = pa.schema([rows.field(c) for c in columns])
    found: dict[str, list] = {}
    for part in _each_part(paths, on_corrupt, lambda pf: _read_wanted(pf, wanted, columns)):
        for key, table in part.items():
            found.setdefault(key, []).append(table.cast(schema) if table.schema != schema else table)
    return {k: pa.concat_tables(found[k]) for k in wanted if k in found}


def run_keys(paths: RunPaths, *, on_corrupt: str = "warn") -> list[str]:
    """Every metric key of the run, sorted. Reads only each part's last row group when the part
    marks each key's last row there (every part since ``last_of_key``), else its key column."""
    found: set[str] = set()
    for keys in _each_part(paths, on_corrupt, _part_keys):
        found.update(keys.to_pylist())
    return sorted(found)


def _each_part(paths: RunPaths, on_corrupt: str, read) -> list:
    """``read(ParquetFile)`` of every metrics part, as :func:`trackstore.store.parts.each_part` lists
    them; a damaged one is skipped with a warning, or raises with ``on_corrupt="error"``."""
    import pyarrow.parquet as pq

    from ..store.parts import each_part
    from .part_scan import warn_skipped

    if on_corrupt not in ("warn", "error"):
        raise ValueError("on_corrupt must be 'warn' or 'error'")

    def read_file(path):
        try:
            return read(pq.ParquetFile(path))
        except FileNotFoundError:
            raise  # a swap: each_part lists again
        except Exception as exc:
            raise CorruptFileError(str(path), str(exc)) from None

    def damaged(path, exc):
        if on_corrupt == "error":
            raise exc
        warn_skipped(path, exc.detail, stacklevel=5)

    return each_part(paths, Kind.METRICS, read_file, damaged)


def _row_groups_for(pf, wanted: Sequence[str]) -> list[int]:
    """Row groups whose key statistics allow one of ``wanted`` (all when a group has none)."""
    md = pf.metadata
    names = pf.schema_arrow.names
    if "key" not in names:
        return []
    col = names.index("key")  # flat schema: arrow field i is Parquet leaf column i
    keep = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max:
            keep.append(i)
            continue
        lo, hi = st.min, st.max
        if isinstance(lo, bytes):
            lo, hi = lo.decode("utf-8", "replace"), hi.decode("utf-8", "replace")
        if any(lo <= k <= hi for k in wanted):
            keep.append(i)
    return keep


def _read_wanted(pf, wanted: Sequence[str], columns: Sequence[str]) -> dict[str, pa.Table]:
    """``{key: rows}`` of one part for the wanted keys it holds, reading only row groups that may."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..store.arrays import from_numpy, to_numpy

    groups = _row_groups_for(pf, wanted)
    if not groups:
        return {}
    table = pf.read_row_groups(groups, columns=["key", *columns], use_threads=False)
    key = table.column("key")
    if not all(pa.types.is_dictionary(c.type) for c in key.chunks):
        key = pa.chunked_array([pc.dictionary_encode(c) for c in key.chunks])
    rows = table.select(list(columns)).combine_chunks() if key.num_chunks > 1 else table.select(list(columns))
    # one code array for the whole table: each chunk's codes mapped to positions in `wanted`
    codes = []
    for chunk in key.chunks:
        where = {v: i for i, v in enumerate(wanted)}
        lookup = np.array([where.get(v, -1) for v in chunk.dictionary.to_pylist()] + [-1], dtype=np.int64)
        idx = to_numpy(chunk.indices, np.int32 if chunk.indices.type == pa.int32() else np.int64)
        codes.append(lookup[idx])
    code = np.concatenate(codes) if len(codes) > 1 else codes[0]
    out = {}
    for i, k in enumerate(wanted):  # pick rows by code: no string comparison per row
        positions = np.flatnonzero(code == i)
        if len(positions):
            out[k] = rows.take(from_numpy(positions.astype(np.int64), pa.int64()))
    return out


def _part_keys(pf) -> pa.Array:
    """The distinct keys of one part (strings)."""
    import pyarrow as pa

    names = pf.schema_arrow.names
    if "key" not in names:
        return pa.array([], pa.string())
    md = pf.metadata
    last = md.num_row_groups - 1
    if LAST_OF_KEY in names and last >= 0:
        st = md.row_group(last).column(names.index(LAST_OF_KEY)).statistics
        if st is not None and st.has_min_max and st.min is True:  # the marked rows: one per key
            return pf.read_row_group(last, columns=["key"]).column("key").combine_chunks().cast(pa.string())
    keys = pf.read(columns=["key"]).column("key")
    uniques = [(c.dictionary if pa.types.is_dictionary(c.type) else c.unique()).cast(pa.string()) for c in keys.chunks]
    return pa.concat_arrays(uniques) if uniques else pa.array([], pa.string())
