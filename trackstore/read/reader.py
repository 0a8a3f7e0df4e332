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
:func:`trackstore.store.parts.part_row_ids` says which ``(writer, seq)`` rows such a part
holds, as far as its columns or its name still tell. Reading one part, and the relisting when
a compaction swaps a kind folder mid-read, live in :mod:`trackstore.store.parts`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from ..errors import CorruptFileError
from ..store.layout import RunPaths
from ..store.parts import each_part, read_rows
from ..store.ranges import RangeSet


def read_kind(paths: RunPaths, kind: str, *, exclude: RangeSet | None = None,
              columns: Sequence[str] | None = None, skip_corrupt: bool = False,
              damaged: dict[Path, CorruptFileError] | None = None):
    """All stored rows of one kind for one run, minus ``exclude``, in replay order.

    A part that cannot be read (:func:`trackstore.store.parts.read_rows`) raises :class:`CorruptFileError`, unless
    ``damaged`` is given: then it is left out and recorded there (path -> error) for the caller
    to act on, as sync does. ``skip_corrupt=True`` leaves it out without a word (the caller
    should report it; ``trackstore doctor`` quarantines it).
    """
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
    return _in_replay_order(tables, kind, need, exclude)


def _in_replay_order(tables: list, kind: str, need: list[str] | None, exclude: RangeSet | None):
    """Parts' rows as one table minus ``exclude``, sorted ``(step, writer, seq)``."""
    if not tables:
        return _no_rows(kind, tuple(need) if need else None)
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.concat_tables(tables)
    if exclude:
        table = table.filter(pc.invert(exclude.mask(table)))
    if _in_order_already(table):
        return table
    keys = [("step", "ascending")] if "step" in table.column_names else []
    keys += [("writer", "ascending"), ("seq", "ascending")]
    return table.sort_by(keys)


def _in_order_already(table) -> bool:
    """Whether ``table`` is sorted ``(step, writer, seq)`` as it is: one writer's rows whose
    ``seq`` rises and whose ``step`` never goes back, what a writer's parts read in name order
    are (a live run's flushes, a compacted run's part). Three vectorised comparisons, where
    sorting costs a sort on three keys and a copy of every column (a live run's 4,000 metrics
    rows: about a third of a millisecond). Any null, or a second writer: False (sorted then)."""
    import pyarrow.compute as pc

    n = table.num_rows
    if n < 2:
        return True
    writer, seq = table.column("writer"), table.column("seq")
    step = table.column("step") if "step" in table.column_names else None
    if writer.null_count or seq.null_count or (step is not None and step.null_count):
        return False
    if not pc.all(pc.equal(writer, writer[0])).as_py():
        return False
    if not pc.all(pc.less(seq.slice(0, n - 1), seq.slice(1))).as_py():
        return False
    return step is None or pc.all(pc.less_equal(step.slice(0, n - 1), step.slice(1))).as_py()


@functools.lru_cache(maxsize=64)
def _no_rows(kind: str, names: tuple[str, ...] | None):
    """An empty table of ``kind`` (its ``names`` columns), made once: a run has no rows of most
    kinds, and sync asks for every kind of every run. (Arrow tables are immutable.)"""
    import pyarrow as pa

    from ..store import schema

    fields = schema.ROWS[kind]
    # (Table.from_pylist and Schema.empty_table import pandas: 0.2-0.3 s; see arrays.py)
    return pa.Table.from_batches([], schema=pa.schema([fields.field(n) for n in names or fields.names]))


class WholePart:
    """A local part file every row of which is pending, handed to a sync target as it is (its
    bytes, read once) for a target that stores parts unchanged (the team store): no decoding,
    no encoding. ``ids`` are its row ids (``writer``, ``seq``), ``num_rows`` its rows; ``pf``
    the ``pyarrow.parquet.ParquetFile`` its footer was read with, and ``table`` its rows as
    read from it, when the caller has them."""

    def __init__(self, path: Path, data: bytes, ids: RangeSet, num_rows: int, pf=None, table=None):
        self.path, self.data, self.ids, self.num_rows = path, data, ids, num_rows
        self._pf, self._table = pf, table

    def __repr__(self) -> str:
        return f"WholePart({self.path.name}, {self.num_rows} rows)"

    @property
    def table(self):
        """Its rows as read from the file (the file's own types), when the caller read them; else None."""
        return self._table

    def rows(self, kind: str):
        """Its rows, decoded (when a target must look at them after all): from the footer
        already parsed, one thread (a few-second flush reads twice as fast so)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..store.parts import conform

        if self._table is not None:
            return conform(self._table, kind)
        pf = self._pf if self._pf is not None else pq.ParquetFile(pa.BufferReader(self.data))
        return conform(pf.read(use_threads=False), kind)


def whole_part_ids(pf, table=None) -> RangeSet | None:
    """The row ids (``writer``, ``seq``) of an open part (``pyarrow.parquet.ParquetFile``); None
    when a ``writer`` or ``seq`` is null (no part is written so: the caller reads its rows,
    which refuses it).

    ``seq`` comes from the footer's statistics when the part is one writer's and its seqs fill
    ``[min, max]`` (``num_rows == max - min + 1``: a writer's seqs are unique, so there is no
    gap), and so does the writer when the statistics of ``writer`` name one (parts written
    since 7 December 2026): a writer's part, whole or compacted, then needs no column decoded.
    Otherwise the ids come from ``table``, the part's rows when the caller has read them
    already, or else from its ``writer`` column (and ``seq`` too when the footer does not
    settle it)."""
    md = pf.metadata
    rows = md.num_rows
    at = {md.schema.column(i).path: i for i in range(md.num_columns)}
    span = _seq_span(md, at["seq"]) if "seq" in at else None
    if span is not None and span[1] - span[0] + 1 != rows:
        span = None  # not one writer's seqs filling their range: the footer does not settle it
    if span is not None and "writer" in at:
        name = _one_writer(md, at["writer"])
        if name is not None:
            return RangeSet.from_json({name: [[span[0], span[1]]]})
    if table is not None:
        return _table_ids(table)
    writer = pf.read(columns=["writer"], use_threads=False).column("writer")
    if writer.null_count:
        return None
    if rows == 0:
        return RangeSet()
    if span is not None:
        names = writer.unique()
        if len(names) == 1:
            return RangeSet.from_json({names[0].as_py(): [[span[0], span[1]]]})
    return _table_ids(pf.read(columns=["writer", "seq"], use_threads=False))


def _table_ids(table) -> RangeSet | None:
    """The row ids of a part's rows (None when a ``writer`` or ``seq`` is null): one writer's
    rows whose seqs fill ``[min, max]`` (a flush, a merged part) in a few vectorised calls, on
    the footer path's premise that a writer's seqs are unique (``num_rows == max - min + 1``
    then leaves no gap); any other table through :meth:`RangeSet.add_table`. Not a shortcut for
    ``add_table`` itself, whose callers (compaction's checks) must see duplicates."""
    import pyarrow as pa
    import pyarrow.compute as pc

    writer, seq = table.column("writer"), table.column("seq")
    if writer.null_count or seq.null_count:
        return None
    ids = RangeSet()
    if table.num_rows == 0:
        return ids
    names = pc.unique(writer)
    if len(names) == 1 and pa.types.is_string(names.type):
        span = pc.min_max(seq)
        lo, hi = span["min"].as_py(), span["max"].as_py()
        if hi - lo + 1 == table.num_rows:
            return RangeSet.from_json({names[0].as_py(): [[lo, hi]]})
    ids.add_table(table)
    return ids


def _whole_stats(md, at: int) -> list | None:
    """The statistics of column ``at`` in every row group of a footer, when each group has a min
    and max over all its rows and no nulls; None when one does not (then they settle nothing)."""
    found = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = rg.column(at).statistics
        if st is None or not st.has_min_max or st.null_count != 0 or st.num_values != rg.num_rows:
            return None
        found.append(st)
    return found


def _one_writer(md, at: int) -> str | None:
    """The one writer of every row, from the footer's statistics of ``writer`` (column ``at``):
    its min and max are one name, in every row group; None when they do not say so (no
    statistics: a part written before 7 December 2026)."""
    stats = _whole_stats(md, at)
    names = {v for st in stats or () for v in (st.min, st.max)}
    if len(names) != 1:
        return None
    (name,) = names
    return name if isinstance(name, str) else None


def _seq_span(md, at: int) -> tuple[int, int] | None:
    """``(min, max)`` of ``seq`` over every row group, from the footer's statistics; None
    when a row group has none, or counts nulls or values other than its rows."""
    stats = _whole_stats(md, at)
    if not stats or not all(isinstance(st.min, int) and isinstance(st.max, int) for st in stats):
        return None
    return min(st.min for st in stats), max(st.max for st in stats)


def read_kind_parts(paths: RunPaths, kind: str, *, exclude: RangeSet | None = None,
                    damaged: dict[Path, CorruptFileError] | None = None) -> tuple[list[WholePart], object]:
    """:func:`read_kind` for a target that takes whole parts: the parts none of whose rows are
    in ``exclude`` and that are their writer's only such part, read as bytes and checked
    (format version, the kind's columns, row ids) without decoding their data; and every other
    pending row, decoded as :func:`read_kind` returns them (a writer's several small parts are
    better sent merged). A part that does not check out is handled as :func:`read_kind` handles it.

    A kind folder of several parts (a live run's flushes, most often one writer's: they will be
    decoded to be merged) has each part's rows read at once, and its row ids taken from them;
    a folder of one part (a finished or compacted run) has only its ids read
    (:func:`whole_part_ids`)."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..store import schema
    from ..store.layout import is_part_name
    from ..store.parts import conform, schema_problem

    whole: list[WholePart] = []
    partial: list = []
    fit: list = []  # footer schemas found fit for the kind (a writer's parts share theirs)

    def one(part: Path):
        data = part.read_bytes()  # FileNotFoundError: a compaction swapped the folder; each_part lists again
        try:
            pf = pq.ParquetFile(pa.BufferReader(data))  # Arrow's own reader over the bytes: no Python file calls
            found = pf.schema_arrow
            version = schema.file_version(found.metadata)
            problem = None if any(found.equals(s) for s in fit) else schema_problem(found, kind)
            if problem is None and len(fit) < 4:
                fit.append(found)
            table = pf.read(use_threads=False) if several and problem is None else None
            ids = whole_part_ids(pf, table) if problem is None else None
        except Exception:  # damaged framing or footer: read_rows names the damage
            return ("rows", read_rows(part, kind))
        if (version is not None and version > schema.SCHEMA_VERSION) or ids is None:
            return ("rows", read_rows(part, kind))  # read_rows refuses it, saying why
        if exclude and exclude.overlap(ids):
            return ("rows", read_rows(part, kind))  # partly acknowledged: its pending rows only
        return ("whole", WholePart(part, data, ids, pf.metadata.num_rows, pf, table))

    try:  # how many parts: a guess, for the way they are read (each is checked all the same)
        several = sum(1 for name in os.listdir(paths.kind_dir(kind)) if is_part_name(name)) > 1
    except FileNotFoundError:  # no rows of this kind (most kinds of most runs): what relist says of it
        return [], _no_rows(kind, None)
    except OSError:
        several = False

    def on_damaged(path, exc):
        if damaged is not None:
            damaged[path] = exc  # by path: a listing taken again after a swap records it once
        else:
            raise exc

    for how, item in each_part(paths, kind, one, on_damaged):
        (whole if how == "whole" else partial).append(item)
    # a writer's several small parts (a live run's flushes) go as rows, merged into one: one
    # object instead of many; a writer's one part (a finished or compacted run) goes whole
    per_writer: dict[str, int] = {}
    for p in whole:
        for w in p.ids.writers():
            per_writer[w] = per_writer.get(w, 0) + 1
    single = [p for p in whole if all(per_writer[w] == 1 for w in p.ids.writers())]
    merged = [p for p in whole if p not in single]
    raw = [p.table for p in merged]
    if len(raw) > 1 and all(t is not None and t.schema.equals(raw[0].schema) for t in raw):
        partial.append(conform(pa.concat_tables(raw), kind))  # one cast of the lot, not one a part
    else:
        partial += [p.rows(kind) for p in merged]
    return single, _in_replay_order(partial, kind, None, exclude)
