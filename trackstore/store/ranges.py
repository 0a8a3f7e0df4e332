"""Sets of ``(writer, seq)`` row identities, stored compactly as inclusive seq ranges per writer.

Sync cursors are such sets: "every row of this run and kind that the target acknowledged".
Because every row keeps its ``(writer, seq)`` for ever (compaction included), a cursor stays
exact whatever happens to the files, and rows acknowledged out of seq order (replay is in step
order, which a late-logged evaluation breaks) are still represented exactly. In the usual case
(one writer, in-order logging) a set is one range per writer: a few bytes of JSON.

The numbers a set (or any count stored beside one) may hold are the format's: a ``seq`` is an
int64 from 0 (docs/format.md, sections 6 and 8), a count is an int64 from 0. :func:`check_seq`
and :func:`check_count` are the one place that decides it; :meth:`RangeSet.from_json` applies
them to every set read from a file (a cursor, a receipt, the catalog), so a crafted or damaged
number is refused where it is read, not met later as an ``OverflowError`` in a reader.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

#: the largest ``seq`` (and count) the format allows: an int64 (Parquet's ``seq`` column)
INT64_MAX = (1 << 63) - 1


class RangeValueError(ValueError):
    """A number or shape read from a file is outside the format's ranges; ``field`` names where."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_seq(value: Any, field: str) -> int:
    """``value`` as a row's ``seq`` (an int64 from 0), or :class:`RangeValueError` naming ``field``."""
    if not _is_int(value) or not 0 <= value <= INT64_MAX:
        raise RangeValueError(field, f"{value!r} is not a row sequence number (an integer from 0 to 2**63-1)")
    return value


def check_count(value: Any, field: str) -> int:
    """``value`` as a count of rows (an int64 from 0), or :class:`RangeValueError` naming ``field``."""
    if not _is_int(value) or not 0 <= value <= INT64_MAX:
        raise RangeValueError(field, f"{value!r} is not a count (an integer from 0 to 2**63-1)")
    return value


def check_ranges(data: Any, field: str) -> dict[str, list[list[int]]]:
    """A row-id set as stored (``{writer: [[lo, hi], ...]}``) checked against the format: writer
    ids are strings and each range is two seqs (:func:`check_seq`) with ``lo <= hi``. None reads
    as the empty set. (:meth:`RangeSet.from_json` also checks the set's size.)"""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise RangeValueError(field, f"a row-id set must be an object of writer -> ranges, not {type(data).__name__}")
    out: dict[str, list[list[int]]] = {}
    for writer, ranges in data.items():
        where = f"{field}[{writer!r}]"
        if not isinstance(writer, str) or not isinstance(ranges, list):
            raise RangeValueError(where, "a writer id must map to a list of [lo, hi] ranges")
        pairs = []
        for r in ranges:
            if not isinstance(r, list) or len(r) != 2:
                raise RangeValueError(where, f"{r!r} is not a [lo, hi] range")
            lo, hi = check_seq(r[0], where), check_seq(r[1], where)
            if hi < lo:
                raise RangeValueError(where, f"range {r!r} ends before it starts")
            pairs.append([lo, hi])
        out[writer] = pairs
    return out


class RangeSet:
    """``{writer_id: [[lo, hi], ...]}`` with sorted, disjoint, non-adjacent inclusive ranges."""

    __slots__ = ("_ranges",)

    def __init__(self, ranges: Mapping[str, Iterable[Iterable[int]]] | None = None):
        self._ranges: dict[str, list[list[int]]] = {}
        for writer, rs in (ranges or {}).items():
            for lo, hi in rs:
                self.add_range(writer, int(lo), int(hi))

    # ------------------------------------------------------------------ building
    def add_range(self, writer: str, lo: int, hi: int) -> None:
        if hi < lo:
            return
        rs = self._ranges.setdefault(writer, [])
        merged = []
        placed = False
        for a, b in rs:
            if b < lo - 1:
                merged.append([a, b])
            elif a > hi + 1:
                if not placed:
                    merged.append([lo, hi])
                    placed = True
                merged.append([a, b])
            else:
                lo, hi = min(lo, a), max(hi, b)
        if not placed:
            merged.append([lo, hi])
        merged.sort()
        self._ranges[writer] = merged

    def add_seqs(self, writer: str, seqs: Iterable[int]) -> None:
        """Add many seqs of one writer (any order, duplicates fine)."""
        ordered = sorted(set(int(s) for s in seqs))
        if not ordered:
            return
        start = prev = ordered[0]
        for s in ordered[1:]:
            if s != prev + 1:
                self.add_range(writer, start, prev)
                start = s
            prev = s
        self.add_range(writer, start, prev)

    def add_table(self, table: Any) -> None:
        """Add the ``writer``/``seq`` columns of a pyarrow table (e.g. an acknowledged batch).

        Vectorised (numpy per writer): compaction checks every row of a run this way, and a
        million rows must cost milliseconds, not a Python loop.
        """
        if table.num_rows == 0:
            return
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from .arrays import to_numpy

        writer = table.column("writer").combine_chunks()
        if pa.types.is_dictionary(writer.type):
            writer = writer.cast(pa.string())
        encoded = pc.dictionary_encode(writer)
        indices, seq = encoded.indices, table.column("seq").combine_chunks()
        if indices.null_count or seq.null_count or not pa.types.is_int64(seq.type):  # never in a part
            codes = np.asarray(indices.to_numpy(zero_copy_only=False))
            seqs = np.asarray(seq.to_numpy(zero_copy_only=False), dtype=np.int64)
        else:  # from the buffers: Array.to_numpy imports pandas (arrays.py)
            codes = to_numpy(indices, np.dtype(f"int{indices.type.bit_width}"))
            seqs = to_numpy(seq, np.int64)
        for i, w in enumerate(encoded.dictionary.to_pylist()):
            ordered = seqs[codes == i] if len(encoded.dictionary) > 1 else seqs
            if not len(ordered):
                continue
            if not bool(np.all(ordered[1:] > ordered[:-1])):  # a writer's rows usually come in seq order
                ordered = np.sort(ordered)  # (a sort: np.unique's hashing is 5x slower here)
                ordered = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
            breaks = np.flatnonzero(np.diff(ordered) != 1)
            starts = np.concatenate(([ordered[0]], ordered[breaks + 1]))
            ends = np.concatenate((ordered[breaks], [ordered[-1]]))
            for lo, hi in zip(starts.tolist(), ends.tolist()):
                self.add_range(w, lo, hi)

    def update(self, other: RangeSet) -> None:
        for writer, rs in other._ranges.items():
            for lo, hi in rs:
                self.add_range(writer, lo, hi)

    # ------------------------------------------------------------------ reading
    def difference(self, other: RangeSet) -> RangeSet:
        """The rows of this set that are not in ``other`` (a new set; both are left as they are)."""
        out = RangeSet()
        for writer, ranges in self._ranges.items():
            holes = other._ranges.get(writer, [])
            for lo, hi in ranges:
                start = lo
                for a, b in holes:
                    if b < start or a > hi:
                        continue
                    if a > start:
                        out.add_range(writer, start, a - 1)
                    start = max(start, b + 1)
                if start <= hi:
                    out.add_range(writer, start, hi)
        return out

    def __sub__(self, other: RangeSet) -> RangeSet:
        return self.difference(other)

    def pairs(self) -> Iterator[tuple[str, int]]:
        """Every ``(writer, seq)`` of the set (for tests and small sets: it enumerates rows)."""
        for writer, ranges in self._ranges.items():
            for lo, hi in ranges:
                for seq in range(lo, hi + 1):
                    yield writer, seq

    def __contains__(self, item: tuple[str, int]) -> bool:
        writer, seq = item
        return any(lo <= seq <= hi for lo, hi in self._ranges.get(writer, ()))

    def count(self) -> int:
        """The number of rows of the set (``len``, which a set read from a file never exceeds
        :data:`INT64_MAX` for: :meth:`from_json` refuses a larger one)."""
        return sum(hi - lo + 1 for rs in self._ranges.values() for lo, hi in rs)

    def __len__(self) -> int:
        return self.count()

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self._ranges == other._ranges

    def __repr__(self) -> str:
        return f"RangeSet({self._ranges!r})"

    def writers(self) -> list[str]:
        return list(self._ranges)

    def overlap(self, other: RangeSet) -> int:
        """How many ``(writer, seq)`` ids are in both sets (a merge of sorted ranges, no rows read)."""
        n = 0
        for w, mine in self._ranges.items():
            theirs = other._ranges.get(w)
            if not theirs:
                continue
            i = j = 0
            while i < len(mine) and j < len(theirs):
                lo = max(mine[i][0], theirs[j][0])
                hi = min(mine[i][1], theirs[j][1])
                if lo <= hi:
                    n += hi - lo + 1
                if mine[i][1] < theirs[j][1]:
                    i += 1
                else:
                    j += 1
        return n

    def mask(self, table: Any):
        """Boolean pyarrow array: True for rows of ``table`` that are in this set."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from .arrays import column, constant_bools

        n = table.num_rows
        if not self._ranges or n == 0:
            return constant_bools(False, n)
        writer = table.column("writer")
        seq = table.column("seq")
        # the bounds as pyarrow scalars made from arrays: a Python value given to a compute
        # function (or pa.scalar) makes pyarrow import pandas, 0.2-0.3 s of a sync (arrays.py)
        names = column(list(self._ranges), pa.string())
        bounds = column([b for rs in self._ranges.values() for r in rs for b in r], pa.int64())
        result = None
        at = 0
        for i, rs in enumerate(self._ranges.values()):
            is_w = pc.equal(writer, names[i])
            in_any = None
            for _ in rs:
                lo, hi = bounds[at], bounds[at + 1]
                at += 2
                cond = pc.and_(pc.greater_equal(seq, lo), pc.less_equal(seq, hi))
                in_any = cond if in_any is None else pc.or_(in_any, cond)
            part = pc.and_(is_w, in_any)
            result = part if result is None else pc.or_(result, part)
        return pc.fill_null(result, constant_bools(False, 1)[0])

    def to_json(self) -> dict[str, list[list[int]]]:
        return {w: [list(r) for r in rs] for w, rs in self._ranges.items()}

    @classmethod
    def from_json(cls, data: Any, field: str = "row-id set") -> RangeSet:
        """The set stored as ``data``, checked (:func:`check_ranges`; a :class:`RangeValueError`,
        a ValueError, names ``field`` when it is not a valid set)."""
        out = cls(check_ranges(data, field))
        check_count(out.count(), f"{field} (its number of rows)")
        return out
