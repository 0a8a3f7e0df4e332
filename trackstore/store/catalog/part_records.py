"""What the catalog knows of a run's part files, and how it learns it.

A part file is immutable and arrives by a rename, so its name, size and modification time
name its content: :class:`PartRecord` keeps, per part, what its footer and its
``writer``/``seq`` columns say (rows, row-id set, largest step, newest time) and, for a metrics
part, what its ``step``/``key``/``value``/``ts`` columns say (its non-finite values per key, its
first time and number of distinct log times, from its footer when the writer put them there),
read once (:func:`read_part_record`; :func:`read_part_facts` reads a footer alone; pyarrow is
imported only then)
and reused while a part with that name, size and mtime is listed (:func:`list_parts`).
:func:`parts_digest` names every part of a run in one string: equal digests, same rows;
:func:`metric_facts` sums a run's metrics parts up for alerts (:mod:`trackstore.read.alerts`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..layout import KINDS, REPLICA_FACTS, parse_part_name, relist
from ..meta import replica_field
from ..metric_facts import decode as metric_facts_of
from ..metric_facts import metric_values
from ..ranges import RangeSet
from ..vocab import Kind


@dataclass(frozen=True)
class PartRecord:
    """What the catalog knows of one part file (names, sizes and mtimes are its fingerprint).

    ``rows`` and ``ids`` are None when its ``writer``/``seq`` columns cannot be read (a damaged
    part: its rows can be neither counted nor synced); ``last_ts`` is None when its footer
    cannot be read; ``last_step`` is the largest metrics ``step`` in its footer statistics.
    A metrics part also has, over its rows of keys outside :data:`~trackstore.store.metric_facts.SYSTEM_PREFIX` (the training's
    own ``log`` calls, not the system metrics sampler's), ``first_log_ts`` and ``last_log_ts``
    (their oldest and newest row times) and ``log_times`` (their distinct row times: the ``log``
    calls it holds), and ``nonfinite``, per key (any key) with NaN or infinite values ``[nan,
    inf, first step]`` (``{}``: none); None for other kinds, or when its columns cannot be read.
    """

    name: str
    size: int
    mtime_ns: int
    rows: int | None
    ids: dict | None
    last_step: int | None
    last_ts: float | None
    first_log_ts: float | None = None
    last_log_ts: float | None = None
    log_times: int | None = None
    nonfinite: dict | None = None

    def to_json(self) -> list:
        return [self.name, self.size, self.mtime_ns, self.rows, self.ids, self.last_step, self.last_ts,
                self.first_log_ts, self.last_log_ts, self.log_times, self.nonfinite]

    @classmethod
    def from_json(cls, v: list) -> PartRecord:
        return cls(*v)

    @property
    def damaged(self) -> bool:
        return self.ids is None

    def range_set(self) -> RangeSet:
        return RangeSet.from_json(self.ids or {})


def read_part_record(path: Path, kind: str, st: os.stat_result) -> PartRecord:
    """Read a part's footer and its ``writer``/``seq`` columns, and a metrics part's facts
    (:mod:`trackstore.store.metric_facts`): from its footer, or from its values when it was
    written without them (raises FileNotFoundError if it vanished)."""
    if not path.exists():
        raise FileNotFoundError(path)
    footer = _footer(path, kind, st)
    last_ts, last_step, facts = footer[1:] if footer is not None else (None, None, None)
    rows = ids = None
    # a metrics part written without its facts: its row ids and values in one read (half the
    # time of two); its row ids alone when its values cannot be read, or are not needed
    both = _read_or_none(path, ["writer", "seq", *_METRIC_COLUMNS]) if kind == Kind.METRICS and facts is None else None
    t = both if both is not None else _read_or_none(path, ["writer", "seq"])
    try:
        if t is not None:
            got = RangeSet()
            got.add_table(t)
            rows, ids = t.num_rows, got.to_json()
    except Exception:  # damaged: doctor reports it; it cannot be counted or synced either
        pass
    logs: tuple = (None, None, None, None)
    if facts is not None and ids is not None:
        logs = facts
    elif both is not None and ids is not None:
        try:
            logs = metric_values(both)
        except Exception:  # unreadable values: nothing is said of them (doctor reports the part)
            pass
    return PartRecord(path.name, st.st_size, st.st_mtime_ns, rows, ids, last_step, last_ts, *logs)


def _footer(path: Path, kind: str, st: os.stat_result) -> tuple | None:
    """``(rows, newest time, largest metrics step, metrics facts)`` from a part's footer (the
    time falls back on the file's mtime); None when the footer cannot be read (raises
    FileNotFoundError if it vanished)."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_metadata(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        return None
    ts = column_max_time(md, "ts")
    step = column_max(md, "step") if kind == Kind.METRICS else None
    return (md.num_rows, ts if ts is not None else st.st_mtime, int(step) if step is not None else None,
            metric_facts_of(md.metadata) if kind == Kind.METRICS else None)


# what a metrics part's facts are computed from, when its footer lacks them
_METRIC_COLUMNS = ("step", "key", "value", "ts")


def _read_or_none(path: Path, columns: list[str]):
    """Some columns of a part (:func:`~trackstore.store.parts.read_columns`); None when they
    cannot be read (raises FileNotFoundError if it vanished)."""
    from ..parts import read_columns

    try:
        return read_columns(path, columns)
    except FileNotFoundError:
        raise
    except Exception:  # damaged, or a column missing
        return None


class MetricFacts(NamedTuple):
    """What a run's metrics parts say for alerts (:func:`metric_facts`): ``nonfinite`` NaN and
    infinite values, per key ``[nan, inf, first step]`` in ``keys``; ``last_ts`` the newest
    row time of the training's own keys (not :data:`~trackstore.store.metric_facts.SYSTEM_PREFIX`); ``interval`` the usual
    seconds between two log times of the writer that logged most often (None: no writer logged
    twice); ``last_step`` the largest step."""

    nonfinite: int
    keys: dict
    last_ts: float | None
    interval: float | None
    last_step: int | None

    def to_json(self) -> dict:
        """As a replica's run.json carries them (``replica.metric_facts``, docs/format.md)."""
        return {"nonfinite": self.nonfinite, "keys": self.keys, "last_ts": self.last_ts,
                "interval": self.interval, "last_step": self.last_step}

    @classmethod
    def from_json(cls, found) -> MetricFacts | None:
        """:meth:`to_json` read back; None when ``found`` is not such an object (absent, or
        edited into something else: the reader then reads the parts, as without it)."""
        def number(v, kind=(int, float)):
            return v is None or (isinstance(v, kind) and not isinstance(v, bool))

        if not isinstance(found, dict):
            return None
        keys, nonfinite = found.get("keys"), found.get("nonfinite")
        if not isinstance(nonfinite, int) or isinstance(nonfinite, bool) or not isinstance(keys, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, list) and len(v) == 3 and all(number(x, int) and x is not None
                   for x in v) for k, v in keys.items()):
            return None
        last_ts, interval, last_step = found.get("last_ts"), found.get("interval"), found.get("last_step")
        if not (number(last_ts) and number(interval) and number(last_step, int)):
            return None
        return cls(nonfinite, {k: list(v) for k, v in keys.items()}, last_ts, interval, last_step)


def carried_facts(meta) -> MetricFacts | None:
    """The metric facts a team store's run.json carries (``replica.metric_facts``); None when
    it carries none (replicated before they were), or something else."""
    return MetricFacts.from_json(replica_field(meta, REPLICA_FACTS))


def metric_facts(parts: list[PartRecord]) -> MetricFacts:
    """:class:`MetricFacts` of a run's metrics parts (damaged ones passed over)."""
    keys: dict[str, list] = {}
    per_writer: dict[str, list] = {}  # writer -> [first ts, last ts, events]
    last_ts = last_step = None
    for p in parts:
        if p.damaged:
            continue
        if p.last_step is not None:
            last_step = p.last_step if last_step is None else max(last_step, p.last_step)
        for k, (nan, inf, step) in (p.nonfinite or {}).items():
            have = keys.get(k)
            keys[k] = [nan, inf, step] if have is None else [have[0] + nan, have[1] + inf, min(have[2], step)]
        if p.first_log_ts is None or p.last_log_ts is None or not p.log_times:
            continue
        last_ts = p.last_log_ts if last_ts is None else max(last_ts, p.last_log_ts)
        parsed = parse_part_name(p.name)
        w = per_writer.setdefault(parsed[0] if parsed else p.name, [p.first_log_ts, p.last_log_ts, 0])
        w[0], w[1], w[2] = min(w[0], p.first_log_ts), max(w[1], p.last_log_ts), w[2] + p.log_times
    interval = None
    busiest = max(per_writer.values(), key=lambda w: w[2], default=None)
    if busiest is not None and busiest[2] >= 2 and busiest[1] > busiest[0]:
        interval = (busiest[1] - busiest[0]) / (busiest[2] - 1)
    return MetricFacts(sum(v[0] + v[1] for v in keys.values()), keys, last_ts, interval, last_step)


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


def list_part_facts(kdir: Path) -> list[PartRecord]:
    """A metrics folder's parts as far as alerts need them (:func:`metric_facts`), from one
    consistent listing: each part's footer (its facts, largest step and newest time), and the
    whole part only when its footer holds no facts. Row ids are not read: these records are
    summed, never kept (what a first ``runs`` of a store costs: a footer a part)."""
    def one(path: Path) -> PartRecord:
        st = os.stat(path)  # FileNotFoundError: swapped meanwhile, relist lists again
        return read_part_facts(path, st)

    found, _vanished = relist(kdir, one)
    return [r for r in found if isinstance(r, PartRecord)]


def read_part_facts(path: Path, st: os.stat_result) -> PartRecord:
    """:func:`list_part_facts` for one metrics part (``ids`` empty: not read, not damaged); the
    whole part (:func:`read_part_record`) when its footer holds no facts (written before parts
    carried them, or by another tool) or cannot be read."""
    footer = _footer(path, Kind.METRICS, st)
    if footer is None or footer[3] is None:
        return read_part_record(path, Kind.METRICS, st)
    rows, last_ts, last_step, facts = footer
    return PartRecord(path.name, st.st_size, st.st_mtime_ns, rows, {}, last_step, last_ts, *facts)


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
