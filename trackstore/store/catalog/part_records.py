"""What the catalog knows of a run's part files, and how it learns it.

A part file is immutable and arrives by a rename, so its name, size and modification time
name its content: :class:`PartRecord` keeps, per part, what its footer and its
``writer``/``seq`` columns say (rows, row-id set, largest step, newest time), read once
(:func:`read_part_record`, the only reader of part files here; pyarrow is imported only then)
and reused while a part with that name, size and mtime is listed (:func:`list_parts`).
:func:`parts_digest` names every part of a run in one string: equal digests, same rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..layout import KINDS, relist
from ..ranges import RangeSet
from ..vocab import Kind


@dataclass(frozen=True)
class PartRecord:
    """What the catalog knows of one part file (names, sizes and mtimes are its fingerprint).

    ``rows`` and ``ids`` are None when its ``writer``/``seq`` columns cannot be read (a damaged
    part: its rows can be neither counted nor synced); ``last_ts`` is None when its footer
    cannot be read; ``last_step`` is the largest metrics ``step`` in its footer statistics.
    """

    name: str
    size: int
    mtime_ns: int
    rows: int | None
    ids: dict | None
    last_step: int | None
    last_ts: float | None

    def to_json(self) -> list:
        return [self.name, self.size, self.mtime_ns, self.rows, self.ids, self.last_step, self.last_ts]

    @classmethod
    def from_json(cls, v: list) -> PartRecord:
        return cls(*v)

    @property
    def damaged(self) -> bool:
        return self.ids is None

    def range_set(self) -> RangeSet:
        return RangeSet.from_json(self.ids or {})


def read_part_record(path: Path, kind: str, st: os.stat_result) -> PartRecord:
    """Read a part's footer and its ``writer``/``seq`` columns (raises FileNotFoundError if it vanished)."""
    import pyarrow.parquet as pq

    from ..parts import read_columns

    if not path.exists():
        raise FileNotFoundError(path)
    last_ts: float | None = None
    last_step = None
    try:
        md = pq.read_metadata(path)
        ts = column_max_time(md, "ts")
        last_ts = ts if ts is not None else st.st_mtime
        if kind == Kind.METRICS:
            last_step = column_max(md, "step")
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        pass
    rows = ids = None
    try:
        t = read_columns(path, ["writer", "seq"])
        got = RangeSet()
        got.add_table(t)
        rows, ids = t.num_rows, got.to_json()
    except FileNotFoundError:
        raise
    except Exception:  # damaged: doctor reports it; it cannot be counted or synced either
        pass
    return PartRecord(path.name, st.st_size, st.st_mtime_ns, rows, ids,
                      int(last_step) if last_step is not None else None, last_ts)


def column_max(md, column: str):
    """The largest value of ``column`` over a file's row groups, from their statistics (None if absent)."""
    try:
        idx = md.schema.names.index(column)
    except ValueError:
        return None
    return _stats_max(md, idx, raw=False)


def _stats_max(md, idx: int, *, raw: bool):
    """The largest ``max`` statistic of column ``idx`` over the row groups (``raw``: as stored,
    ``max_raw``); None without statistics."""
    best = None
    for rg in range(md.num_row_groups):
        st = md.row_group(rg).column(idx).statistics
        if st is not None and st.has_min_max:
            value = st.max_raw if raw else st.max
            best = value if best is None else max(best, value)
    return best


_TIME_UNITS = {"milliseconds": 1e3, "microseconds": 1e6, "nanoseconds": 1e9}


def column_max_time(md, column: str) -> float | None:
    """The newest value of a timestamp ``column`` over a file's row groups, as a Unix time, from
    the raw statistics (None if absent, or not a UTC timestamp). ``statistics.max`` would make
    a datetime, for which pyarrow imports pandas (0.2-0.3 s)."""
    try:
        idx = md.schema.names.index(column)
        logical = json.loads(md.schema.column(idx).logical_type.to_json())
    except (ValueError, TypeError):
        return None
    per_s = _TIME_UNITS.get(logical.get("timeUnit"))
    if logical.get("Type") != "Timestamp" or not logical.get("isAdjustedToUTC") or per_s is None:
        return None
    best = _stats_max(md, idx, raw=True)
    return None if best is None else best / per_s


def parts_digest(parts: dict[str, list[PartRecord]]) -> str:
    """One string naming every part of a run (kind, name, size, mtime): equal strings, same rows."""
    import hashlib

    h = hashlib.sha256()
    for kind in KINDS:
        for p in parts.get(kind, ()):
            h.update(f"{kind}\0{p.name}\0{p.size}\0{p.mtime_ns}\n".encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class PartsSummary:
    """A run's parts in short (:meth:`~.cache.Catalog.parts_summary`): ``fp`` their digest
    (:func:`parts_digest`; None when a folder changed within :data:`~.freshness.RACY_S`), ``rows`` the
    readable rows per kind, ``damaged`` how many parts cannot be read; ``records`` the part
    records when they had to be listed (else None: :meth:`~.cache.Catalog.parts` gives them)."""

    fp: str | None
    rows: dict[str, int]
    damaged: int
    records: dict[str, list[PartRecord]] | None


def list_parts(kdir: Path, kind: str, known: dict[tuple, PartRecord]) -> list[PartRecord]:
    """Every complete part of a kind folder, from one consistent listing (the relist policy):
    known parts (same name, size and mtime) are reused, others are read."""
    def one(path: Path) -> PartRecord:
        st = os.stat(path)  # FileNotFoundError: swapped meanwhile, relist lists again
        rec = known.get((path.name, st.st_size, st.st_mtime_ns))
        return rec if rec is not None else read_part_record(path, kind, st)

    found, vanished = relist(kdir, one)
    # parts still vanishing at the last attempt are not listed: the stored folder fingerprint,
    # taken before, no longer matches, so the next look lists the folder again
    return [r for r in found if isinstance(r, PartRecord)]
